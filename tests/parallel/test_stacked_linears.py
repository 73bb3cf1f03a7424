"""``plan.linears``: the products of one input by several weights, as one product by the weights side by side where
the plan's ``linear`` is ``h @ w`` on its rows (``Plan.stacks_weights``), else one ``linear`` per weight. (That every
model reading it — GraphSAGE, GATv2, R-GCN — equals serial training on every algorithm is the fidelity grid's.)"""
import numpy as np
import pytest
import torch

from gridgnn.graph import gcn_normalize
from gridgnn.parallel import algorithm
from gridgnn.parallel.base import stacked_linears
from gridgnn.parallel.blockrow import build_serial

from .conftest import GRAPHS


def _leaves(seed: int):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(11, 6, generator=g, dtype=torch.float64, requires_grad=True)
    ws = [torch.randn(6, k, generator=g, dtype=torch.float64, requires_grad=True) for k in (4, 3, 4)]
    return h, ws


def test_stacked_products_and_their_gradients_equal_one_product_per_weight():
    plan = build_serial(gcn_normalize(GRAPHS["undirected"]))
    assert plan.stacks_weights
    calls = []
    real = plan.linear
    plan.linear = lambda layer, h, w: (calls.append(w.shape), real(layer, h, w))[1]
    results = []
    for stacked in (False, True):
        h, ws = _leaves(3)
        calls.clear()
        outs = stacked_linears(plan, 0, h, ws) if stacked else [real(0, h, w) for w in ws]
        assert [tuple(o.shape) for o in outs] == [(11, 4), (11, 3), (11, 4)]
        if stacked:
            assert calls == [torch.Size([6, 11])]  # one product, by the weights side by side
        dys = [torch.from_numpy(np.random.default_rng(k).normal(size=tuple(o.shape))) for k, o in enumerate(outs)]
        sum((o * dy).sum() for o, dy in zip(outs, dys)).backward()
        results.append([o.detach() for o in outs] + [h.grad] + [w.grad for w in ws])
    for got, want in zip(*results):
        assert torch.allclose(got, want, rtol=1e-12, atol=1e-14)


def test_an_input_that_needs_no_gradient_is_multiplied_by_each_weight_apart():
    """A first layer's input needs no gradient: there is no gradient of ``h`` to share, so no stacking (whose split
    would concatenate the outputs' gradients in the backward); one product per weight, each weight's gradient
    that of its own product."""
    plan = build_serial(gcn_normalize(GRAPHS["undirected"]))
    calls = []
    real = plan.linear
    plan.linear = lambda layer, h, w: (calls.append(tuple(w.shape)), real(layer, h, w))[1]
    h, ws = _leaves(5)
    h = h.detach()
    outs = stacked_linears(plan, 0, h, ws)
    assert calls == [(6, 4), (6, 3), (6, 4)]
    sum((o * (k + 1)).sum() for k, o in enumerate(outs)).backward()
    for k, (o, w) in enumerate(zip(outs, ws)):
        assert torch.equal(o, h @ w)
        assert torch.allclose(w.grad, (k + 1) * h.sum(dim=0, keepdim=True).T.expand_as(w), rtol=1e-12)


@pytest.mark.parametrize("algo,stacks", [("1d", True), ("1.5d-sa", True), ("2d", True), ("3d", True),
                                         ("edge", True), ("plexus", False), ("plexus-rs", False)])
def test_each_family_says_whether_its_linear_stacks_weights(algo, stacks):
    """Plexus' ``linear`` is a program over weight blocks laid out for each call's width: its products stay one call
    per weight; the block-row, SUMMA and edge families multiply ``h @ w`` on their rows."""
    assert algorithm(algo).traits["stacks_weights"] is stacks


def test_a_plan_that_does_not_stack_makes_one_linear_call_per_weight():
    class Separate:
        stacks_weights = False

        def __init__(self):
            self.calls = []

        def linear(self, layer, h, w):
            self.calls.append((layer, tuple(w.shape)))
            return h @ w

    plan = Separate()
    h, ws = _leaves(4)
    outs = stacked_linears(plan, 2, h, ws)
    assert plan.calls == [(2, (6, 4)), (2, (6, 3)), (2, (6, 4))]
    for o, w in zip(outs, ws):
        assert torch.equal(o, h @ w)


def test_a_subclass_with_a_linear_of_its_own_stacks_only_if_it_says_so():
    from gridgnn.parallel.blockrow import RowBlockPlan
    from gridgnn.sampling.plan import MinibatchPlan

    class Casting(RowBlockPlan):  # (a linear that is not h @ w on the rows)
        def linear(self, layer, h, w):
            return super().linear(layer, h, w.to(torch.float32)).to(h.dtype)

    class Stacking(Casting):
        stacks_weights = True

    class Inherits(RowBlockPlan):
        pass

    assert (MinibatchPlan.stacks_weights, Casting.stacks_weights, Stacking.stacks_weights,
            Inherits.stacks_weights) == (True, False, True, True)


@pytest.mark.parametrize("algo,linears", [("serial", 1), ("1d", 1), ("2d", 1), ("plexus", 2)])
def test_the_trace_of_a_layer_that_multiplies_first_has_the_products_of_its_family(algo, linears):
    """GraphSAGE 5 → 3 → 3 → 2: layer 1 multiplies first (equal widths after layer 0) by its two weights: one
    ``linear`` 6 wide where the family stacks weights, two 3 wide on Plexus. The stacked weight (3 × 6, a copy of
    parameters the product keeps for its input's gradient) is kept as what it is, not as a node tensor of 6 columns
    on the trace's 3-vertex graph."""
    from gridgnn.nn import resolve_model
    from gridgnn.train.rank_layout import model_trace

    dims = [5, 3, 3, 2]
    tr = model_trace(dims, lambda p: resolve_model("sage")(dims, dropout=0.5, seed=0, dtype=torch.float64, plan=p),
                     algo)
    products = [(c.width, c.out_width) for c in tr.calls if c.name == "linear" and c.layer == 1]
    assert products == ([(3, 6)] if linears == 1 else [(3, 3), (3, 3)])
    first = [(c.width, c.out_width) for c in tr.calls if c.name == "linear" and c.layer == 0]
    assert first == [(5, 3), (5, 3)]  # (its input needs no gradient: each weight apart, on every family)
    kept = [(s.layer, s.kind, s.cols) for s in tr.saved if s.layer == 1]
    assert (1, "node", 6) not in kept
    assert ((1, "other", 18) in kept) == (linears == 1)
