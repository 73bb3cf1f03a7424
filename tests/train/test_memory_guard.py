"""The memory guard's refusal names ``--layer-order lean`` where the model takes it and the estimate of the lean
run — read from that model's own trace — fits where the run's does not."""
import pytest

from gridgnn.distributed import NullComm
from gridgnn.errors import GridGnnError
from gridgnn.graph.synthetic import sbm_graph
from gridgnn.train.config import TrainConfig
from gridgnn.train.rank_setup import _check_memory, memory_trace

G = sbm_graph(n=3000, classes=4, avg_degree=8, features=32, seed=1)


def _guard(cfg: TrainConfig, dims, available: int):
    return _check_memory(cfg, G, None, None, (1,), dims, "cpu", available, None, memory_trace(cfg, dims), NullComm())


@pytest.mark.parametrize("model,options", [("gcn", {}), ("sage", {"aggr": "mean"})])
def test_a_refusal_names_the_lean_order_where_it_fits(model, options):
    dims = [32, 32, 32, 4]  # (a first layer of equal widths: the order is a choice)
    auto, lean = (TrainConfig(model=model, layers=3, hidden=32, layer_order=order, **options)
                  for order in ("auto", "lean"))
    plenty = 1 << 40
    need_auto, need_lean = (_guard(c, dims, plenty).total for c in (auto, lean))
    assert need_lean < need_auto
    with pytest.raises(GridGnnError) as between:
        _guard(auto, dims, (need_auto + need_lean) // 2)
    assert "; or --layer-order lean, which fits" in str(between.value)
    with pytest.raises(GridGnnError) as below:  # neither fits: no lean advice
        _guard(auto, dims, need_lean - 1)
    assert "--layer-order" not in str(below.value)
    with pytest.raises(GridGnnError) as given:  # the run already lean: nothing more to offer
        _guard(lean, dims, need_lean - 1)
    assert "--layer-order" not in str(given.value)


def test_no_lean_advice_where_the_order_is_no_choice():
    """GraphSAGE max refuses the lean order; a widening first layer traces alike in both orders, so its estimate
    is no lower."""
    plenty = 1 << 40
    for cfg, dims in ((TrainConfig(model="sage", aggr="max", layers=3, hidden=32), [32, 32, 32, 4]),
                      (TrainConfig(model="gcn", layers=2, hidden=48), [32, 48, 4])):
        need = _guard(cfg, dims, plenty).total
        with pytest.raises(GridGnnError) as refusal:
            _guard(cfg, dims, need - 1)
        assert "--layer-order" not in str(refusal.value)
