"""The lean backward passes (gridgnn.ops.lean_backward): torch's bits, gradients overwritten only where autograd
handed them over alone, and a dropout → product → ReLU chain whose backward holds one node tensor where torch's
composition holds two."""
import subprocess
import sys

import pytest
import torch

from gridgnn.ops import kernels
from gridgnn.ops.lean_backward import owned, product, read_alone, relu
from gridgnn.ops.masked import dropped, recomputing
from gridgnn.testing import profiled_peak
from tests._devices import ON_A_GPU


class _Probe(torch.autograd.Function):
    """The identity, recording whether its backward was handed an owned gradient."""
    seen: list = []

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, dy):
        _Probe.seen.append(owned(dy))
        return dy


W = torch.randn(4, 3, dtype=torch.float64)
KEPT: list = []


def _kept(y: torch.Tensor, what) -> torch.Tensor:
    """``y``, whose gradient (or ``what`` of it) a hook keeps."""
    y.register_hook(lambda g: KEPT.append(what(g)))
    return y


def _seen(build) -> list:
    read_alone()
    _Probe.seen = []
    KEPT.clear()
    x = torch.randn(5, 4, dtype=torch.float64, requires_grad=True)
    out = build(x)
    given = torch.ones_like(out)
    out.backward(given)
    return _Probe.seen


@pytest.mark.parametrize("build,expected", [
    (lambda x: _Probe.apply(x * 2) @ W, [True]),  # a product's fresh gradient
    (lambda x: (_Probe.apply(x * 2) + _Probe.apply(x * 3)) @ W, [False, True]),  # one gradient handed to two
    (lambda x: _Probe.apply(x), [False]),  # the caller's own gradient tensor
    (lambda x: torch.cat([_Probe.apply(x * 2), x])[:5] @ W, [False]),  # a view of another gradient
    (lambda x: _Probe.apply(x * 2).sum(dim=1, keepdim=True).expand(5, 3), [False]),  # an expanded one
    (lambda x: _kept(_Probe.apply(x * 2), lambda g: g) @ W, [False]),  # a hook keeps it
    (lambda x: _kept(_Probe.apply(x * 2), lambda g: g.untyped_storage()) @ W, [False]),  # a hook keeps its storage
], ids=["fresh", "handed-to-two", "callers", "view", "expanded", "hook-keeps-it", "hook-keeps-its-storage"])
def test_a_gradient_is_owned_only_where_nothing_else_refers_to_it(build, expected):
    assert _seen(build) == expected


def test_no_gradient_is_owned_where_the_backward_builds_a_graph():
    read_alone()
    _Probe.seen = []
    x = torch.randn(5, 4, dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad((_Probe.apply(x * x) @ W).sum(), x, create_graph=True)
    assert _Probe.seen == [False] and g.requires_grad


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=ON_A_GPU)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_relu_and_product_give_torchs_bits_and_leave_a_shared_gradient_alone(dtype, device):
    g = torch.Generator().manual_seed(3)
    z, w, up = (torch.randn(*shape, generator=g, dtype=dtype).to(device) for shape in ((50, 16), (16, 6), (50, 6)))
    grads = []
    for act, mm in ((torch.relu, torch.mm), (relu, product)):
        zz, ww = z.clone().requires_grad_(), w.clone().requires_grad_()
        h = act(zz)
        out = mm(h, ww) + mm(h, ww) * 0.5  # h's gradient: two products' summed; the upstream one handed to both
        out = out + mm(act(zz) + act(-zz), ww)  # one gradient handed to two ReLUs: the first must not write it
        given = up.clone()
        out.backward(given)
        assert torch.equal(given, up)  # the caller's gradient is not written over
        grads.append((out.detach(), zz.grad, ww.grad))
    for a, b in zip(*grads):
        assert torch.equal(a, b)


def test_second_derivatives_through_relu_and_product_equal_torchs():
    g = torch.Generator().manual_seed(4)
    z = torch.randn(20, 8, generator=g, dtype=torch.float64)
    w = torch.randn(8, 3, generator=g, dtype=torch.float64)
    out = []
    for act, mm in ((torch.relu, torch.mm), (relu, product)):
        zz, ww = z.clone().requires_grad_(), w.clone().requires_grad_()
        (gw,) = torch.autograd.grad((mm(act(zz) * zz, ww) ** 2).sum(), ww, create_graph=True)
        out.append(torch.autograd.grad(gw.sum(), zz)[0])
    torch.testing.assert_close(out[0], out[1], rtol=1e-13, atol=0)


@pytest.mark.skipif(not kernels.enabled(), reason="needs the numba kernels (the host's one-pass dropout scaling)")
def test_a_dropout_product_relu_backward_holds_one_node_tensor_where_torchs_composition_holds_two():
    """The backward of relu → dropout (its output recomputed) → a narrowing product, on 4000 × 256: the lean
    functions hold the recomputed output, then its gradient written over in place (one n × f tensor at a time, the
    mask redrawn: a byte an element); torch's relu and ``@`` hold the recomputed output beside its gradient, then
    the dropout's and the ReLU's gradients side by side."""
    n, f = 4000, 256
    tensor = n * f * 8
    g = torch.Generator().manual_seed(5)
    z0 = torch.randn(n, f, generator=g, dtype=torch.float64)
    w0 = torch.randn(f, 4, generator=g, dtype=torch.float64)
    mask = torch.rand(n, f, generator=g) < 0.5
    peaks = {}
    for name, act, mm in (("torch", torch.relu, torch.mm), ("lean", relu, product)):
        z, w = z0.clone().requires_grad_(), w0.clone().requires_grad_()
        with recomputing():
            u = mm(dropped(act(z), mask, 0.5, redraw=lambda: mask.clone()), w)
        grad = torch.ones_like(u)
        peaks[name] = profiled_peak(lambda: u.backward(grad))
        assert z.grad is not None
    # the lean backward: z's gradient (the one tensor) and a redrawn mask, small products aside
    assert peaks["lean"] <= tensor + n * f + 4 * n * f
    assert peaks["torch"] >= 2 * tensor


@pytest.mark.parametrize("hook", ["tensor", "module"])
def test_a_gradient_a_hook_keeps_is_not_written_over(hook):
    """A tensor hook or a module's full backward hook that keeps the gradient reaching a ReLU and a dropout sees it
    as autograd gave it, not masked afterwards by their in-place backward."""
    class Layer(torch.nn.Module):
        def __init__(self, act, drop):
            super().__init__()
            self.act, self.drop = act, drop

        def forward(self, x):
            return self.drop(self.act(x * 1.0), torch.tensor([True, False, True, True]), 0.5)

    seen = {}
    for name, act, drop in (("torch", torch.relu, lambda h, mask, q: h * mask / q), ("lean", relu, dropped)):
        kept = []
        x = torch.tensor([[1.0, 2.0, -3.0, 4.0]], dtype=torch.float64, requires_grad=True)
        layer = Layer(act, drop)
        if hook == "module":
            layer.register_full_backward_hook(lambda m, gi, go: kept.append(go[0]))
            y = layer(x)
        else:
            y = layer(x)
            y.register_hook(kept.append)
        (y * 3.0).sum().backward()
        seen[name] = (kept[0].clone(), x.grad)
    for name in seen:
        assert torch.equal(seen[name][0], torch.full((1, 4), 3.0, dtype=torch.float64)), name
    assert torch.equal(seen["lean"][1], seen["torch"][1])


@pytest.mark.parametrize("h_by_columns,w_by_columns,inner,out", [(True, False, 16, 8), (False, True, 16, 8),
                                                                   (True, True, 16, 8), (True, True, 1, 1),
                                                                   (True, True, 5, 1)])
def test_product_of_column_major_matrices_gives_torchs_bits(h_by_columns, w_by_columns, inner, out):
    """torch's ``mm`` backward computes a column-major operand's gradient transposed (another order of sums), by its
    strides alone (a dimension of 1 included): ``product`` takes the same formula for each layout."""
    g = torch.Generator().manual_seed(6)
    h0 = torch.randn(inner, 300, generator=g, dtype=torch.float64).t() if h_by_columns else \
        torch.randn(300, inner, generator=g, dtype=torch.float64)
    w0 = torch.randn(out, inner, generator=g, dtype=torch.float64).t() if w_by_columns else \
        torch.randn(inner, out, generator=g, dtype=torch.float64)
    up = torch.randn(300, out, generator=g, dtype=torch.float64)
    out = []
    for mm in (torch.mm, product):
        h, w = h0.detach().requires_grad_(), w0.detach().requires_grad_()
        y = mm(h, w)
        y.backward(up)
        out.append((y, h.grad, w.grad))
    for a, b in zip(*out):
        assert torch.equal(a, b) and a.stride() == b.stride()


def test_product_of_other_than_two_matrices_is_torchs_matmul():
    g = torch.Generator().manual_seed(7)
    h0, w0 = torch.randn(2, 5, 4, generator=g, dtype=torch.float64), torch.randn(4, 3, generator=g, dtype=torch.float64)
    out = []
    for mm in (torch.matmul, product):
        h, w = h0.clone().requires_grad_(), w0.clone().requires_grad_()
        y = mm(h, w)
        y.sum().backward()
        out.append((y, h.grad, w.grad))
    for a, b in zip(*out):
        assert torch.equal(a, b)


def test_importing_the_trainer_runs_no_backward():
    """The count of an owned gradient is read on first use, not at import: a backward in a process that forks the
    ranks (the fork server imports the trainer) would start autograd's device threads, which a GPU's torch refuses to
    use again in a forked child."""
    code = ("import gridgnn.train.worker, gridgnn.train.launching; from gridgnn.ops import owned as L; "
            "assert not L._READ and L._ALONE is None")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_no_gradient_is_owned_under_a_trace_function_written_in_python():
    """A debugger's trace function is handed frames whose locals were copied (before Python 3.13): their references
    would count, so nothing is overwritten while one is set."""
    read_alone()

    def tracer(frame, event, arg):
        return None

    sys.settrace(tracer)
    try:
        seen = _seen(lambda x: _Probe.apply(x * 2) @ W)
    finally:
        sys.settrace(None)
    assert seen == [False]
