r"""Configurations of a run as the planner sees them: the simulated step of a :class:`TrainConfig` on a graph
(:func:`simulate_config`), every candidate configuration priced and ranked (:func:`plan_configs`), and the pick
of ``--algo auto`` (:func:`resolve_auto`)."""
from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import gc
import json
import multiprocessing as mp
import sys
import time

import numpy as np
import torch

from ..distributed.machine import available_memory, available_memory_bytes, usable_cores
from ..distributed.wire import WIRE_TYPES, wire_element_bytes
from ..errors import GridGnnError
from ..graph import gcn_normalize
from ..nn import resolve_model
from ..parallel import algorithm, one_process
from ..parallel.checks import LayoutError
from ..partition import RowPartition
from ..planner.plan import candidates, price, rank_rows
from ..planner.simulate import step_volume
from ..planner.timing import load_profile
from .data_checks import settle_edge_dim
from .launching import ranks_get_shards
from .optim import memory_state
from .rank_layout import SEEDED_ORDERS, check_vertex_count, estimate_memory, make_source, order_key
from .rank_setup import _check_parameters, build_model, memory_trace


def simulate_config(cfg, graph, layouts: dict | None = None):
    r"""``(StepVolume, shape, source, rows)`` of a validated full-graph :class:`~gridgnn.train.config.TrainConfig`
    on ``graph`` (no processes started). ``layouts`` caches the partitions and permutations across calls."""
    settle_edge_dim(cfg, graph.edge_dim, edges_note=graph.meta.get("edge_features_dropped"),
                    relations=graph.num_relations)  # the data's width
    algo = algorithm(cfg.algo)
    world = cfg.nproc
    shape = _mesh_shape(cfg)
    check_vertex_count(graph.n, cfg.algo, world, cfg.replication, shape)
    dims = [graph.num_features] + [cfg.hidden] * (cfg.layers - 1) + [graph.num_classes]
    if algo.one_process:
        source, rows = None, RowPartition(np.arange(graph.n), np.array([0, graph.n]), "none")
    else:  # configurations of one vertex order share its source (and the block counts it caches)
        key = order_key(cfg.algo, world, replication=cfg.replication, shape=shape, method=cfg.partition,
                        seed=cfg.seed)
        if layouts is not None and key in layouts:
            source, rows = layouts[key]
        else:
            normalized = None
            if layouts is not None:  # the normalized matrix, once for every configuration
                normalized = layouts.get("normalized")
                if normalized is None:
                    normalized = layouts["normalized"] = gcn_normalize(graph)
            source, rows = make_source(graph, cfg.algo, world, replication=cfg.replication, shape=shape,
                                       method=cfg.partition, seed=cfg.seed, normalized=normalized)
            if layouts is not None:
                layouts[key] = (source, rows)

    # the trace builds the model once in float64: refused with the memory guard's line when it cannot fit
    _check_parameters(cfg, resolve_model(cfg.model), dims, available_memory(), 1, trains_on_host=False)
    trace_key = _trace_key(cfg, dims, source)
    traced = None if layouts is None else layouts.get(trace_key)
    vol = step_volume(graph, cfg.algo, world, source=source, rows=rows, shape=shape, replication=cfg.replication,
                      build_model=lambda plan: build_model(cfg, dims, plan, torch.float64),
                      traits=algo.traits, elem_bytes=8 if cfg.dtype == "float64" else 4,
                      block_rows=cfg.blocked_aggregation, wire_bytes=wire_element_bytes(cfg.comm_dtype, cfg.dtype),
                      grad_wire_bytes=wire_element_bytes(cfg.grad_dtype, cfg.dtype), traced=traced)
    if layouts is not None:
        layouts[trace_key] = vol.trace
    return vol, shape, source, rows


def _mesh_shape(cfg) -> tuple:
    """The process grid of ``cfg``'s algorithm (serial: one process)."""
    return (1,) if algorithm(cfg.algo).one_process else cfg.mesh_shape(cfg.nproc)


#: the options a plan's candidates differ in that the model's trace does not read (it runs the model on a tiny serial
#: plan with the algorithm's layout rules, which read the vertex orders)
_NOT_TRACED = ("grid", "replication", "partition", "overlap", "nproc")


def _trace_key(cfg, dims, source) -> tuple:
    """What the model's trace on ``cfg``'s algorithm depends on: the config but the layout options, the widths and
    whether the source has two vertex orders."""
    options = {k: v for k, v in cfg.to_dict().items() if k not in _NOT_TRACED}
    return ("trace", json.dumps(options, sort_keys=True, default=str), tuple(dims),
            bool(getattr(source, "double", False)))


def memory_per_rank(cfg, graph, source, rows, shape, traced=None) -> list[int]:
    """Every rank's estimated peak bytes (:mod:`gridgnn.planner.memory`). ``traced``: the model's trace on this
    layout when the caller has it (the simulator's, :attr:`~gridgnn.planner.simulate.StepVolume.trace`)."""
    settle_edge_dim(cfg, graph.edge_dim, edges_note=graph.meta.get("edge_features_dropped"),
                    relations=graph.num_relations)
    dims = [graph.num_features] + [cfg.hidden] * (cfg.layers - 1) + [graph.num_classes]
    traced = memory_trace(cfg, dims, double=bool(getattr(source, "double", False)), traced=traced)
    est = estimate_memory(graph, source, cfg.algo, shape, dims, rows=rows,
                          elem_bytes=8 if cfg.dtype == "float64" else 4, dropout=cfg.dropout,
                          block_rows=cfg.blocked_aggregation, device="cpu", trace=traced, overlap=cfg.overlap,
                          keep_best=cfg.keep == "best", optimizer_state=memory_state(cfg),
                          handed=ranks_get_shards(cfg))  # (as the ranks of the run estimate it)
    return [int(r.total) for r in est.ranks]


#: a plan of fewer rank records than this (``P`` × configurations) is priced in this process: forking workers
#: costs more than it saves
PARALLEL_PLAN_RECORDS = 8192

#: what the workers of a parallel plan read, set before they fork (inherited, never pickled) and cleared after
_SHARED: dict = {}


#: what a worker of a parallel plan may hold beyond the pages it shares with the plan: its block sources (a permuted
#: matrix per vertex order), their P × P block statistics and every rank's schedules (measured 1.4–2.3 GB per
#: worker at P = 4096 on R-MAT scale 16: 1.8·10⁶ nonzeros)
WORKER_FLOOR_BYTES = 2 * 2 ** 30
WORKER_BYTES_PER_NNZ = 128
WORKER_BYTES_PER_RANK_PAIR = 16


def plan_jobs(jobs: int | None, world: int, count: int, nnz: int = 0) -> int:
    """Worker processes a plan of ``count`` configurations of ``world`` processes on a graph of ``nnz`` stored
    edges uses: ``jobs`` when given (at most one per configuration), else, on Linux and for a plan of at least
    :data:`PARALLEL_PLAN_RECORDS` rank records, one per usable core as far as the available memory holds one
    worker's allowance each (:data:`WORKER_FLOOR_BYTES` …), else 1 (priced in this process)."""
    if jobs is not None:
        if int(jobs) < 1:
            raise GridGnnError(f"--jobs must be >= 1, got {jobs}")
        return max(1, min(int(jobs), count))
    if world * count < PARALLEL_PLAN_RECORDS or not sys.platform.startswith("linux"):
        return 1  # (forking a process that has imported torch is safe on Linux alone)
    cores = usable_cores()
    allowance = max(WORKER_FLOOR_BYTES, WORKER_BYTES_PER_NNZ * nnz + WORKER_BYTES_PER_RANK_PAIR * world * world)
    return max(1, min(cores, count, available_memory() // allowance))


def _price_candidate(cfg, graph, profile, cand, layouts: dict, available_bytes, narrow_grads: bool):
    """One configuration simulated, priced and its memory estimated: ``("row", row)``, ``("refused", message)``
    (the model's trace refuses the layout) or ``("left out", why)`` (``--grad-dtype`` on a layout whose primitives
    sum the gradients)."""
    c = dataclasses.replace(cfg, **cand.options())
    c = dataclasses.replace(c, overlap=cfg.overlap and algorithm(cand.algo).overlap)
    left_out = narrow_grads and c.grad_sum_refusal(algorithm(c.algo))
    if left_out:
        return "left out", f"--grad-dtype applies where the trainer all-reduces the gradients; {left_out}"
    t0 = time.perf_counter()
    try:
        vol, shape, source, part = simulate_config(c, graph, layouts)
    except LayoutError as exc:  # the model's trace refuses this layout: not a configuration it can run
        return "refused", str(exc)
    mem = memory_per_rank(c, graph, source, part, shape, vol.trace)  # the simulator's trace, not another
    row = price(cand, vol, profile, nproc=cfg.nproc, memory=mem, available_bytes=available_bytes, overlap=c.overlap)
    row["simulate_s"] = time.perf_counter() - t0
    return "row", row


def _price_group(indices: list[int]) -> list:
    """A worker's task: the configurations ``indices`` of the plan in :data:`_SHARED`, with this worker's cache of
    vertex orders (configurations of one order share it)."""
    s = _SHARED
    layouts = s.setdefault("layouts", {"normalized": s["normalized"]})
    for key in [k for k in layouts if k != "normalized" and k[0] != "trace"]:
        del layouts[key]  # a task is one vertex order's configurations: the sources of earlier tasks go
    return [(k, _price_candidate(s["cfg"], s["graph"], s["profile"], s["cands"][k], layouts, s["available_bytes"],
                                 s["narrow_grads"])) for k in indices]


def _worker_start() -> None:
    torch.set_num_threads(1)  # a forked worker: no OpenMP pool of the parent's, and the cores are the workers'
    # what the parent held stays out of the collector's scans (and its pages unwritten); the records a plan
    # allocates by the million are short-lived and acyclic: collect rarely
    gc.freeze()
    gc.set_threshold(50_000, 20, 20)


def _plan_groups(cfg, cands, jobs: int) -> list[list[int]]:
    """The workers' tasks: configurations that share a vertex order together (a graph partition is computed once,
    whatever the number of workers), a group whose order is rebuilt cheaply (:data:`~gridgnn.train.rank_layout.
    SEEDED_ORDERS`: the many grids of one random permutation) cut into pieces, so that the workers stay busy."""
    groups: dict = {}
    for k, cand in enumerate(cands):
        try:
            shape = _mesh_shape(dataclasses.replace(cfg, **cand.options()))
            key = order_key(cand.algo, cfg.nproc, replication=cand.replication, shape=shape, method=cand.partition,
                            seed=cfg.seed)
        except GridGnnError:  # (refused when it is priced)
            key = ("alone", k)
        groups.setdefault(key, []).append(k)
    piece = max(1, -(-len(cands) // (16 * jobs)))
    out = []
    for members in groups.values():
        step = piece if cands[members[0]].partition in SEEDED_ORDERS else len(members)
        out += [members[i:i + step] for i in range(0, len(members), step)]
    return out


def plan_configs(cfg, graph, profile, *, cands=None, available_bytes: int | None = None, progress=None,
                 jobs: int | None = None, **listing) -> list[dict]:
    r"""Every candidate configuration (:func:`~gridgnn.planner.plan.candidates`, ``listing`` passed on) for the
    model, widths and ``--nproc`` of ``cfg``, simulated, priced with ``profile`` and ranked
    (:func:`~gridgnn.planner.plan.rank_rows`); each row also has ``simulate_s``. ``progress(done, total)`` is
    called after each candidate (priced or left out). ``jobs``: worker processes (:func:`plan_jobs`; they fork
    from this one, so the graph is shared, not copied); the rows are the same whatever the number."""
    if cands is None:
        reads = bool(getattr(resolve_model(cfg.model), "reads_destinations", False))
        cands = candidates(cfg.nproc, n=graph.n, reads_destinations=reads, **listing)
    if not cands:
        only = listing.get("algos")
        raise GridGnnError(f"no configuration of {cfg.nproc} processes" + (f" among {', '.join(only)}" if only else "")
                           + f" runs on a graph of {graph.n} vertices"
                           + "".join(f" ({a} runs on one process)" for a in (only or ()) if one_process(a)))

    narrow_grads = wire_element_bytes(cfg.grad_dtype, cfg.dtype) < WIRE_TYPES[cfg.dtype].itemsize
    results: list = [None] * len(cands)
    done = 0

    def landed(k, result):
        nonlocal done
        results[k] = result
        done += 1
        if progress is not None and done < len(cands):
            progress(done, len(cands))

    jobs = plan_jobs(jobs, cfg.nproc, len(cands), graph.nnz)
    layouts: dict = {"normalized": gcn_normalize(graph)}  # the normalized matrix, once for every configuration
    if jobs == 1:
        for k, cand in enumerate(cands):
            landed(k, _price_candidate(cfg, graph, profile, cand, layouts, available_bytes, narrow_grads))
    else:
        _SHARED.clear()
        _SHARED.update(cfg=cfg, graph=graph, profile=profile, cands=cands, available_bytes=available_bytes,
                       narrow_grads=narrow_grads, normalized=layouts["normalized"])
        try:
            pool = cf.ProcessPoolExecutor(jobs, mp_context=mp.get_context("fork"), initializer=_worker_start)
            try:
                for fut in cf.as_completed([pool.submit(_price_group, g) for g in _plan_groups(cfg, cands, jobs)]):
                    for k, result in fut.result():
                        landed(k, result)
            except BaseException:  # a configuration failed (or Ctrl-C): the queued ones are not priced
                pool.shutdown(wait=True, cancel_futures=True)
                raise
            pool.shutdown(wait=True)
        finally:
            _SHARED.clear()
    if progress is not None:
        progress(len(cands), len(cands))
    rows = [r[1] for r in results if r[0] == "row"]
    if not rows:
        refused = [r[1] for r in results if r[0] == "refused"] or [r[1] for r in results if r[0] == "left out"]
        raise GridGnnError(f"no configuration of {cfg.nproc} processes can run this model; e.g. {refused[0]}")
    return rank_rows(rows)


def resolve_auto(cfg, graph, *, profile=None, check_memory: bool = True, progress=None):
    r"""``--algo auto``: plan ``cfg``'s run (:func:`plan_configs` with the profile ``cfg`` names, or the built-in
    one) and return ``(config of the pick, its plan row, the number of candidates)``. The pick is the fastest
    predicted configuration that fits in this machine's available memory (``check_memory``; else the fastest).
    ``graph``: a loaded :class:`~gridgnn.graph.Graph`; ``progress``: as in :func:`plan_configs`."""
    profile = profile if profile is not None else load_profile(getattr(cfg, "profile", None))
    base = dataclasses.replace(cfg, algo="serial" if cfg.nproc == 1 else "1d", grid=None, replication=1,
                               partition="random")
    rows = plan_configs(base, graph, profile, progress=progress,
                        available_bytes=available_memory_bytes("cpu") if check_memory else None)
    best = rows[0]
    if not best["fits"]:
        raise GridGnnError(f"--algo auto: no configuration of {cfg.nproc} processes fits in memory (the smallest "
                           "needs more; see gridgnn plan)")
    picked = dataclasses.replace(cfg, profile=None, **{"overlap": False, **best["config"]})
    picked.validate()
    return picked, best, len(rows)
