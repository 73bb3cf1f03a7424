"""``--layer-order``: a first layer of equal widths aggregates first (``auto``) or multiplies first (``lean``). Both
equal serial training with the bytes of their byte models (test_layouts.py, the ``1d-``/``2d-`` prefixes); here, the
cases of the same run in both orders (tests/parallel/conftest.py, ``layer_order_cases``: P = 2) give the same
logits and gradients, and the lean one moves what its first layer's ``spmm`` adds to the backward — the same
forward, more backward bytes."""
import numpy as np
import pytest

from ._fidelity import rel, selected, volume
from .conftest import results


@pytest.fixture(params=(2,), ids=lambda p: f"P{p}")
def dist_results(request):  # (the P group of tests/parallel where the cases exist)
    return request.param, results(request.param)


def _phase(per_rank, phase: str, side: int) -> float:
    return sum(volume(r, phase, side) for r in per_rank)


@pytest.mark.parametrize("family,model", [("1d", "gcn"), ("2d", "sage-mean")])
def test_the_lean_order_moves_its_first_layers_spmm_backward_and_computes_the_same(dist_results, family, model):
    P, sel = selected(dist_results, f"{family}-")
    graph = "undirected" if model == "gcn" else "directed"
    (_, auto), (_, lean) = (sel[f"{family}-{order}-order-{model}-{graph}"] for order in ("auto", "lean"))
    for a, b in zip(auto, lean):
        assert rel(b.logits, a.logits) < 1e-10
        for ga, gb in zip(a.grads, b.grads):
            assert rel(gb, ga) < 1e-10
    for side in (0, 1):  # sent, received
        assert _phase(lean, "fwd", side) == _phase(auto, "fwd", side)
        assert _phase(lean, "bwd", side) > _phase(auto, "bwd", side), (P, side)
    assert np.isclose(sum(r.loss for r in lean), sum(r.loss for r in auto), rtol=1e-12)
