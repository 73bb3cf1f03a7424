"""The planner's fast path prices the same records as the plain one.

``gridgnn plan`` shares each vertex order's block source (and the normalized matrix, and the model's trace) between
configurations, counts nonzeros per block in one pass over the unpermuted matrix
(:meth:`InMemorySource.block_counts`) and distinct columns per block row in one pass over the column-major pattern
(:meth:`InMemorySource.nnz_cols`), prices the configurations in forked workers, and sums a rank's
per-panel and per-stage records without building them (:meth:`SummaSchedule.panel_bytes`,
:meth:`BlockRowSchedule.fetch_bytes`), and prices a Plexus program once per group of ranks with the same sizes
(:meth:`PlexusVolume._signature`; an uneven graph and odd widths split the groups), and GCN's Plexus memory once per
class of equally sized ranks (``plexus.GROUP_RANKS``). The plain path slices every block the engine would read and runs every
record one by one; every family's bytes, messages, local work and memory must come out equal, rank by rank.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from gridgnn.graph.spec import load_graph
from gridgnn.parallel import plexus
from gridgnn.parallel.source import InMemorySource
from gridgnn.partition import counts
from gridgnn.planner.plan import candidates
from gridgnn.planner.primitives import BlockRowVolume, PlexusVolume, SummaVolume
from gridgnn.train.invocation import config_from_flags
from gridgnn.train.planning import memory_per_rank, simulate_config

GRAPH = "synthetic:rmat?scale=8&edge_factor=6&features=12&classes=4"


def _sliced_counts(self, version, row_bounds, col_bounds):
    """Block counts from the engine's own slices (the plain path)."""
    rb, cb = np.asarray(row_bounds), np.asarray(col_bounds)
    return np.array([[self.submatrix(version, (rb[a], rb[a + 1]), (cb[b], cb[b + 1])).nnz
                      for b in range(cb.size - 1)] for a in range(rb.size - 1)], dtype=np.int64)


def _sliced_nnz_cols(self, version, bounds):
    """Distinct columns per block from the engine's own slices, column by column (the plain path)."""
    b = np.asarray(bounds)
    k = b.size - 1
    out = np.zeros((k, k), dtype=np.int64)
    for row in range(k):
        for q in range(k):
            block = self.submatrix(version, (b[row], b[row + 1]), (b[q], b[q + 1]))
            out[q, row] = np.unique(block.indices).size
    return out


def _pattern_of_matrices(source, *, layers: int = 2):
    """The permuted matrices themselves as the memory model's pattern (the plain path)."""
    versions = ("rc", "cr") if source.double and layers >= 2 else ("rc",)
    return {v: source.matrix(v) for v in versions}


def _price_all(cfg, graph, layouts):
    out = {}
    for cand in candidates(cfg.nproc, n=graph.n, row_partitions=("random",),
                           plexus_orders=("random", "double-perm")):
        c = dataclasses.replace(cfg, **cand.options())
        try:
            vol, shape, source, rows = simulate_config(c, graph, layouts)
        except Exception as exc:  # a layout the model's trace refuses: refused alike on both paths
            out[cand.name] = type(exc).__name__
            continue
        out[cand.name] = (vol.bytes, vol.detail, vol.work, memory_per_rank(c, graph, source, rows, shape, vol.trace))
    return out


#: an uneven graph (203 vertices) and odd widths: unequal blocks along every axis
UNEVEN = "synthetic:sbm?n=203&classes=3&avg_degree=6&features=7"


@pytest.mark.parametrize("model,P,comm,data,hidden", [("gcn", 4, None, GRAPH, 8), ("gat", 8, None, GRAPH, 8),
                                                      ("sage", 4, "bfloat16", GRAPH, 8),
                                                      ("gcn", 8, "bfloat16", UNEVEN, 5)])
def test_fast_records_equal_the_plain_records(monkeypatch, model, P, comm, data, hidden):
    graph = load_graph(data, seed=0)
    flags = {"data": data, "nproc": P, "algo": "1d", "model": model, "hidden": hidden, "layers": 2}
    if model == "sage":
        flags["aggr"] = "max"
    if comm:
        flags["comm_dtype"] = comm
    cfg = config_from_flags(flags)
    fast = _price_all(cfg, graph, {})  # the plan's path: one source per vertex order, summed records
    with monkeypatch.context() as m:
        m.setattr(InMemorySource, "block_counts", _sliced_counts)
        m.setattr(InMemorySource, "nnz_cols", _sliced_nnz_cols)
        m.setattr(SummaVolume, "batched", False)
        m.setattr(BlockRowVolume, "batched", False)
        m.setattr(PlexusVolume, "batched", False)
        m.setattr(plexus, "GROUP_RANKS", False)
        m.setattr(counts, "pattern_of", _pattern_of_matrices)
        plain = _price_all(cfg, graph, None)
    assert fast.keys() == plain.keys()
    assert any(not isinstance(v, str) for k, v in fast.items() if k.startswith("2d"))
    families = {name.split()[0] for name, v in fast.items() if not isinstance(v, str)}
    assert {"1d", "1d-sa", "1.5d", "1.5d-sa", "2d", "3d", "plexus"} <= families
    for name in fast:
        a, b = fast[name], plain[name]
        if isinstance(a, str) or isinstance(b, str):
            assert a == b, name
            continue
        (bytes_a, detail_a, work_a, mem_a), (bytes_b, detail_b, work_b, mem_b) = a, b
        assert bytes_a.keys() == bytes_b.keys(), name
        for key in bytes_a:
            for x, y in zip(bytes_a[key], bytes_b[key]):
                np.testing.assert_array_equal(x, y, err_msg=f"{name} {key}")
        assert detail_a.keys() == detail_b.keys(), name
        for key in detail_a:
            for x, y in zip(detail_a[key], detail_b[key]):
                np.testing.assert_array_equal(x, y, err_msg=f"{name} {key}")
        for unit in work_a:
            np.testing.assert_array_equal(work_a[unit], work_b[unit], err_msg=f"{name} {unit}")
        assert mem_a == mem_b, name


def test_a_plan_priced_by_workers_equals_one_priced_here():
    """The configurations priced by forked workers (each with its own cache of vertex orders, in groups that keep
    one partition's configurations together) come out as priced in this process: the same rows, the same
    ranking."""
    from gridgnn.planner.timing import preset
    from gridgnn.train.planning import plan_configs, plan_jobs

    graph = load_graph(GRAPH, seed=0)
    cfg = config_from_flags({"data": GRAPH, "nproc": 4, "algo": "1d", "model": "gat", "hidden": 8})
    profile = preset("local-cpu")
    here = plan_configs(cfg, graph, profile, jobs=1)
    seen = []
    forked = plan_configs(cfg, graph, profile, jobs=2, progress=lambda done, total: seen.append(done))
    strip = [[{k: v for k, v in r.items() if k != "simulate_s"} for r in rows] for rows in (here, forked)]
    assert strip[0] == strip[1] and len(here) > 20
    assert seen == list(range(1, len(seen) + 1)) and seen[-1] == len(candidates(4, n=graph.n, reads_destinations=True))
    # a small plan is priced here unless told otherwise; a large one by a worker per core
    assert plan_jobs(None, 4, 30) == 1 and plan_jobs(3, 4, 2) == 2


@pytest.mark.parametrize("shape,n,dims", [((1, 1, 6), 143, [40, 31]), ((2, 3, 1), 97, [13, 29, 7]),
                                          ((1, 5, 3), 211, [17, 33, 9])])
def test_plexus_memory_per_class_of_ranks_is_every_rank_s_own(monkeypatch, shape, n, dims):
    """The Plexus memory model builds one rank's schedules per class of equally sized ranks: every rank's estimate
    equals the one built from its own schedules, with the workspace's widths (``2·kept`` and the recomputed dropout
    outputs) among the sizes the classes split (sizes where they split unlike any width alone)."""
    from ._measure import gcn_estimate as estimate_rank_memory

    for algo in ("plexus", "plexus-rs"):
        grouped = estimate_rank_memory(algo, shape, n, 6 * n, dims)
        with monkeypatch.context() as m:
            m.setattr(plexus, "GROUP_RANKS", False)
            plain = estimate_rank_memory(algo, shape, n, 6 * n, dims)
        assert [r.per_component for r in grouped.ranks] == [r.per_component for r in plain.ranks], algo
