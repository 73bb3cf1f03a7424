"""The memory guard's refusal names ``--layer-order lean`` where the model takes it and the estimate of the lean
run — read from that model's own trace — fits where the run's does not."""
import pytest

from gridgnn.distributed import NullComm
from gridgnn.distributed.machine import format_gib
from gridgnn.errors import GridGnnError
from gridgnn.graph.synthetic import sbm_graph
from gridgnn.train import rank_setup
from gridgnn.train.config import TrainConfig
from gridgnn.train.rank_setup import _check_memory, memory_trace

G = sbm_graph(n=3000, classes=4, avg_degree=8, features=32, seed=1)


def _guard(cfg: TrainConfig, dims, available: int):
    return _check_memory(cfg, G, None, None, (1,), dims, "cpu", available, None, memory_trace(cfg, dims), NullComm())


@pytest.mark.parametrize("model,options", [("gcn", {}), ("sage", {"aggr": "mean"})])
def test_a_refusal_names_the_lean_order_where_it_fits(model, options, monkeypatch):
    dims = [32, 32, 32, 4]  # (a first layer of equal widths: the order is a choice)
    plain, auto, lean = (TrainConfig(model=model, layers=3, hidden=32, **options, **given)
                         for given in ({}, {"layer_order": "auto"}, {"layer_order": "lean"}))
    plenty = 1 << 40
    need_auto, need_lean = (_guard(c, dims, plenty).total for c in (auto, lean))
    assert need_lean < need_auto
    for cfg in (plain, auto):  # the flag left out, or given
        with pytest.raises(GridGnnError) as between:
            _guard(cfg, dims, (need_auto + need_lean) // 2)
        assert f"; or --layer-order lean (one more spmm in the backward), which fits: about {format_gib(need_lean)} " \
               "for the peak rank" in str(between.value)
    with pytest.raises(GridGnnError) as below:  # neither fits: no lean advice
        _guard(auto, dims, need_lean - 1)
    assert "--layer-order" not in str(below.value)
    traces = []
    monkeypatch.setattr(rank_setup, "memory_trace", lambda *a, **k: traces.append(a) or memory_trace(*a, **k))
    with pytest.raises(GridGnnError) as given:  # the run already lean: nothing more to offer, nothing traced again
        _check_memory(lean, G, None, None, (1,), dims, "cpu", need_lean - 1, None, memory_trace(lean, dims),
                      NullComm())
    assert "--layer-order" not in str(given.value) and traces == []
    with pytest.raises(GridGnnError) as inferred:  # an inference: its order is the trained model's
        _check_memory(auto, G, None, None, (1,), dims, "cpu", (need_auto + need_lean) // 2, None,
                      memory_trace(auto, dims), NullComm(), advise_order=False)
    assert "--layer-order" not in str(inferred.value) and traces == []


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
