"""A product's weight gradient ``hᵀ ∂Y`` where ``h`` is a dropout's output kept as its input and mask
(gridgnn.ops.lean_backward.keep_input, gridgnn.ops.masked.RowBlocks): larger than ``RECOMPUTE_BLOCK`` elements, ``h``
is recomputed a block of rows at a time: the gradients of the whole recomputation within rounding, never the whole
tensor held."""
import re

import pytest
import torch

from gridgnn.ops import masked
from gridgnn.ops.lean_backward import product, relu
from gridgnn.ops.masked import dropped, recomputing
from gridgnn.testing import profiled_peak
from tests._devices import ON_A_GPU

N, F, OUT, Q = 3000, 64, 5, 0.6


def _inputs(seed: int = 3):
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(N, F, generator=g, dtype=torch.float64)
    w = torch.randn(F, OUT, generator=g, dtype=torch.float64)
    return z, w, torch.rand(N, F, generator=g) < Q, torch.randn(N, OUT, generator=g, dtype=torch.float64)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=ON_A_GPU)])
@pytest.mark.parametrize("redrawn", [False, True], ids=["mask-kept", "mask-redrawn"])
@pytest.mark.parametrize("by_columns", [False, True], ids=["w-by-rows", "w-by-columns"])
@pytest.mark.parametrize("block_rows", [1, 7, 256])
def test_the_gradients_of_a_product_recomputing_by_blocks_equal_the_whole_ones(monkeypatch, redrawn, by_columns,
                                                                                block_rows, device):
    """relu → dropout → product: the input's and the weight's gradients equal torch's composition (one product of
    the whole recomputed tensor) to rounding, whatever the block (a row, rows not dividing ``N``, several blocks),
    the mask kept or drawn again, the weight laid out by rows or by columns (torch's transposed formula) — on the
    host, and on a GPU (where no test graph reaches a block unless asked)."""
    monkeypatch.setattr(masked, "RECOMPUTE_BLOCK", block_rows * F)
    z0, w0, mask, c = (t.to(device) for t in _inputs())
    grads = []
    for lean in (False, True):
        z = z0.clone().requires_grad_()
        w = (w0.t().contiguous().t() if by_columns else w0.clone()).requires_grad_()
        if lean:
            with recomputing():
                y = product(dropped(relu(z), mask, Q, redraw=(lambda: mask.clone()) if redrawn else None), w)
        else:
            y = (torch.relu(z) * mask / Q) @ w
        (y * c).sum().backward()
        grads.append((z.grad, w.grad))
    for a, b in zip(*grads):
        torch.testing.assert_close(b, a, rtol=1e-12, atol=1e-12)
    assert grads[1][1].stride() == w.stride()  # (the weight's gradient laid out as the weight)


def _weight_grad_peak(monkeypatch, block: int) -> int:
    """The backward's own peak of a product whose input (a dropout of inputs that need no gradient, as a first
    layer's) is recomputed for the weight's gradient alone, with blocks of ``block`` elements."""
    monkeypatch.setattr(masked, "RECOMPUTE_BLOCK", block)
    z, w0, mask, c = _inputs()
    w = w0.clone().requires_grad_()
    with recomputing():
        y = product(dropped(z, mask, Q, redraw=lambda: mask.clone()), w)
    return profiled_peak(lambda: y.backward(c))


def test_a_product_recomputing_by_blocks_never_holds_its_whole_input(monkeypatch):
    """The weight's gradient of a first layer's product: recomputed whole, the backward holds the ``N × F`` tensor;
    by blocks of 64 rows, a block (and the redrawn mask, a byte an element, and small products)."""
    whole_tensor = N * F * 8
    whole = _weight_grad_peak(monkeypatch, 1 << 40)
    blocked = _weight_grad_peak(monkeypatch, 64 * F)
    assert whole >= whole_tensor
    assert blocked <= 64 * F * 8 + N * F + 4 * N * OUT * 8, (blocked, whole)


@pytest.mark.parametrize("block", [16 * F, 1 << 22], ids=["by-blocks", "whole"])
def test_a_dropouts_input_changed_after_the_product_is_refused_in_the_backward(monkeypatch, block):
    """The recomputation would read the changed input: it is refused, naming the dropout's input (by blocks, by the
    saved input's check; whole, by the recomputed output's)."""
    monkeypatch.setattr(masked, "RECOMPUTE_BLOCK", block)
    z, w0, mask, c = _inputs()
    w = w0.clone().requires_grad_()
    x = z.clone()
    with recomputing():
        y = product(dropped(x, mask, Q), w)
    x.mul_(2.0)
    with pytest.raises(RuntimeError, match=re.escape(masked.CHANGED_INPUT)):
        y.backward(c)


def test_a_dropouts_name_no_save_met_is_not_given_to_a_later_one():
    """A dropout's input named for its product's save that no save met (a context left first) is not named later:
    another operation saving the same tensor, changed before its backward, is refused in autograd's own words."""
    z, w0, _, c = _inputs()
    x = z.clone()
    with recomputing():
        masked.name_a_change(x)  # (named, then the context left with no save of it)
    w = w0.clone().requires_grad_()
    with recomputing():
        y = x @ w  # saves x for the weight's gradient
    x.mul_(2.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation") as err:
        y.backward(c)
    assert masked.CHANGED_INPUT not in str(err.value)


def test_a_weight_changed_after_the_product_keeps_autograds_words(monkeypatch):
    """Where the tensor changed is not the dropout's input, the refusal stays autograd's in-place check."""
    monkeypatch.setattr(masked, "RECOMPUTE_BLOCK", 16 * F)
    z, w0, mask, c = _inputs()
    w = w0.clone().requires_grad_()
    with recomputing():
        v = w * 1.0  # (saved for the input's gradient)
        y = product(dropped(z.clone().requires_grad_(), mask, Q), v)
    assert type(y.grad_fn).__name__ == "_ProductBackward"  # (the input kept by blocks)
    v.mul_(2.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward(c)


def test_a_product_outside_a_model_call_keeps_its_input_as_it_is(monkeypatch):
    """Outside :func:`~gridgnn.ops.masked.recomputing` (and under other saved-tensor hooks) a dropout's output is no
    recipe: the product keeps the tensor itself."""
    monkeypatch.setattr(masked, "RECOMPUTE_BLOCK", 16 * F)
    z, w0, mask, _ = _inputs()
    assert masked.recipe_in_blocks(dropped(z, mask, Q)) is None
    with recomputing():
        h = dropped(z, mask, Q)
        assert masked.recipe_in_blocks(h) is not None
        assert masked.recipe_in_blocks(h[:, :8].contiguous()) is None  # (another tensor)
        with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
            assert masked.recipe_in_blocks(h) is None


def test_second_derivatives_through_a_product_recomputing_by_blocks_equal_the_whole_ones(monkeypatch):
    """A backward that builds a graph (``create_graph``) makes the recomputed input whole, with the history of the
    dropout's input: blocks would leave the weight's gradient without a path back to it (a second derivative through
    ``∂w`` then silently half the true one)."""
    out = []
    for block in (1 << 40, 16 * F):
        monkeypatch.setattr(masked, "RECOMPUTE_BLOCK", block)
        z0, w0, mask, c = _inputs()
        z, w = z0.clone().requires_grad_(), w0.clone().requires_grad_()
        with recomputing():
            y = product(dropped(torch.tanh(z), mask, Q), w)
        (gw,) = torch.autograd.grad((y * c).sum(), w, create_graph=True)
        out.append((gw, torch.autograd.grad((gw ** 2).sum(), z)[0]))
    torch.testing.assert_close(out[1][0], out[0][0], rtol=1e-12, atol=0)
    torch.testing.assert_close(out[1][1], out[0][1], rtol=1e-12, atol=0)


@pytest.mark.parametrize("model", ["gcn", "sage", "gat"])
def test_a_trace_records_the_same_with_the_inputs_recomputed_by_blocks(monkeypatch, model):
    """The memory model's trace (a three-vertex step, never above the block) reads what autograd keeps through the
    observers: with every input recomputed by blocks (a block of one element) it records the same saved tensors,
    recomputed outputs and products' inputs — ``recipe_in_blocks`` tells the observers what saving the output
    would."""
    from gridgnn.parallel.trace import trace
    from gridgnn.testing import Case, build_model
    from tests.parallel.conftest import GRAPHS

    def build(plan):
        case = Case(graph=GRAPHS["undirected"], algo="serial", dims=[6, 8, 3], model=model, dropout=0.5,
                    attn_dropout=0.3 if model == "gat" else 0.0)
        return build_model(case, plan)

    def recorded():
        tr = trace(build, 6)
        return ([(s.kind, s.layer, s.cols, s.pos) for s in tr.saved], list(tr.recomputed))

    whole = recorded()
    monkeypatch.setattr(masked, "RECOMPUTE_BLOCK", 1)
    assert recorded() == whole and whole[1]
