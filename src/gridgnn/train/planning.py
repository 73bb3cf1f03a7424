r"""Configurations of a run as the planner sees them: the simulated step of a :class:`TrainConfig` on a graph
(:func:`simulate_config`), every candidate configuration priced and ranked (:func:`plan_configs`), and the pick
of ``--algo auto`` (:func:`resolve_auto`)."""
from __future__ import annotations

import dataclasses
import time

import numpy as np
import torch

from ..distributed.wire import wire_element_bytes
from ..errors import GridGnnError


def simulate_config(cfg, graph, layouts: dict | None = None):
    r"""``(StepVolume, shape, source, rows)`` of a validated full-graph :class:`~gridgnn.train.config.TrainConfig`
    on ``graph`` (no processes started). ``layouts`` caches the partitions and permutations across calls."""
    from ..parallel import algorithm
    from ..partition import RowPartition
    from ..planner.simulate import step_volume
    from ..graph import gcn_normalize
    from .rank_layout import check_vertex_count, make_source, order_key
    from .trainer import build_model

    from .trainer import settle_edge_dim

    settle_edge_dim(cfg, graph.edge_dim, edges_note=graph.meta.get("edge_features_dropped"),
                    relations=graph.num_relations)  # the data's width
    algo = algorithm(cfg.algo)
    world = cfg.nproc
    shape = (1,) if algo.grid == "single" else cfg.mesh_shape(world)
    check_vertex_count(graph.n, cfg.algo, world, cfg.replication, shape)
    dims = [graph.num_features] + [cfg.hidden] * (cfg.layers - 1) + [graph.num_classes]
    if algo.grid == "single":
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
    from ..graph.safe_io import available_memory
    from ..nn import resolve_model
    from .trainer import _check_parameters

    # the trace builds the model once in float64: refused with the memory guard's line when it cannot fit
    _check_parameters(cfg, resolve_model(cfg.model), dims, available_memory(), 1, trains_on_host=False)
    vol = step_volume(graph, cfg.algo, world, source=source, rows=rows, shape=shape, replication=cfg.replication,
                      build_model=lambda plan: build_model(cfg, dims, plan, torch.float64),
                      traits=algo.traits, elem_bytes=8 if cfg.dtype == "float64" else 4,
                      block_rows=cfg.blocked_aggregation, wire_bytes=wire_element_bytes(cfg.comm_dtype, cfg.dtype),
                      grad_wire_bytes=wire_element_bytes(cfg.grad_dtype, cfg.dtype))
    return vol, shape, source, rows


def memory_per_rank(cfg, graph, source, rows, shape, traced=None) -> list[int]:
    """Every rank's estimated peak bytes (:mod:`gridgnn.planner.memory`). ``traced``: the model's trace on this
    layout when the caller has it (the simulator's, :attr:`~gridgnn.planner.simulate.StepVolume.trace`); GCN's
    exact model reads none."""
    from .rank_layout import estimate_memory
    from .trainer import memory_trace, settle_edge_dim

    settle_edge_dim(cfg, graph.edge_dim, edges_note=graph.meta.get("edge_features_dropped"),
                    relations=graph.num_relations)
    dims = [graph.num_features] + [cfg.hidden] * (cfg.layers - 1) + [graph.num_classes]
    traced = memory_trace(cfg, dims, double=bool(getattr(source, "double", False)), traced=traced)
    est = estimate_memory(graph, source, cfg.algo, shape, dims, rows=rows,
                          elem_bytes=8 if cfg.dtype == "float64" else 4, dropout=cfg.dropout,
                          block_rows=cfg.blocked_aggregation, device="cpu", trace=traced, overlap=cfg.overlap)
    return [int(r.total) for r in est.ranks]


def plan_configs(cfg, graph, profile, *, cands=None, available_bytes: int | None = None, progress=None,
                 **listing) -> list[dict]:
    r"""Every candidate configuration (:func:`~gridgnn.planner.plan.candidates`, ``listing`` passed on) for the
    model, widths and ``--nproc`` of ``cfg``, simulated, priced with ``profile`` and ranked
    (:func:`~gridgnn.planner.plan.rank_rows`); each row also has ``simulate_s``. ``progress(done, total)`` is
    called after each candidate (priced or left out)."""
    from ..nn import resolve_model
    from ..planner.plan import candidates, price, rank_rows

    if cands is None:
        reads = bool(getattr(resolve_model(cfg.model), "reads_destinations", False))
        cands = candidates(cfg.nproc, n=graph.n, reads_destinations=reads, **listing)
    if not cands:
        only = listing.get("algos")
        raise GridGnnError(f"no configuration of {cfg.nproc} processes" + (f" among {', '.join(only)}" if only else "")
                           + f" runs on a graph of {graph.n} vertices" + (" (serial runs on one process)"
                                                                           if only and "serial" in only else ""))
    from ..parallel.checks import LayoutError

    from ..distributed.wire import WIRE_TYPES, wire_element_bytes
    from ..parallel.registry import algorithm

    layouts: dict = {}
    rows, refused = [], []
    narrow_grads = wire_element_bytes(cfg.grad_dtype, cfg.dtype) < WIRE_TYPES[cfg.dtype].itemsize
    for done, cand in enumerate(cands, 1):
        if progress is not None and done > 1:
            progress(done - 1, len(cands))
        c = dataclasses.replace(cfg, **cand.options())
        c = dataclasses.replace(c, overlap=cfg.overlap and algorithm(cand.algo).overlap)
        if narrow_grads and c.grad_sum_refusal(algorithm(c.algo)):
            continue  # --grad-dtype: only the layouts whose trainer sums the gradients
        t0 = time.perf_counter()
        try:
            vol, shape, source, part = simulate_config(c, graph, layouts)
        except LayoutError as exc:  # the model's trace refuses this layout: not a configuration it can run
            refused.append(str(exc))
            continue
        mem = memory_per_rank(c, graph, source, part, shape, vol.trace)  # one trace per configuration
        row = price(cand, vol, profile, nproc=cfg.nproc, memory=mem, available_bytes=available_bytes,
                    overlap=c.overlap)
        row["simulate_s"] = time.perf_counter() - t0
        rows.append(row)
    if progress is not None:
        progress(len(cands), len(cands))
    if not rows:
        raise GridGnnError(f"no configuration of {cfg.nproc} processes can run this model; e.g. {refused[0]}")
    return rank_rows(rows)


def resolve_auto(cfg, graph, *, profile=None, check_memory: bool = True, progress=None):
    r"""``--algo auto``: plan ``cfg``'s run (:func:`plan_configs` with the profile ``cfg`` names, or the built-in
    one) and return ``(config of the pick, its plan row, the number of candidates)``. The pick is the fastest
    predicted configuration that fits in this machine's available memory (``check_memory``; else the fastest).
    ``graph``: a loaded :class:`~gridgnn.graph.Graph`; ``progress``: as in :func:`plan_configs`."""
    from ..planner.memory import available_memory_bytes
    from ..planner.timing import load_profile

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
