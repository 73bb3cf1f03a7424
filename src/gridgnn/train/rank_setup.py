r"""A rank's set-up for full-graph training and inference (:func:`setup_rank`): load and validate the data (and a
``--resume`` checkpoint) before any collective, partition, join the process group, check the memory, build the
algorithm's plan, the rank's blocks and the model; inference of a trained model (:func:`predict_worker`); and the
full-graph summary (:func:`_summary`). The epochs and outputs are :mod:`gridgnn.train.worker`'s (the full graph as a
batch source: :mod:`gridgnn.train.full_graph`), whose rank 0 writes into ``--out`` (created only once the set-up has succeeded; every file written to a temporary name and
renamed, see :mod:`gridgnn.train.outputs`): ``metrics.jsonl``, ``checkpoint.pt`` (``--checkpoint-every``, see
:mod:`gridgnn.train.checkpoint`), ``logits.npy`` (``--save-logits``, original node order; with ``?relabel=1`` also
``node_ids.npy``, the file's id of each row), ``model.pt`` (the trained model, :mod:`gridgnn.train.model_file`),
``breakdown.png``, ``curves.png`` and, last, ``summary.json`` (strict JSON: the accuracy of an empty split is
``null``; :mod:`gridgnn.train.summary`).

A non-finite loss ends the run with an error naming the epoch rather than a summary of ``null`` losses: every
later epoch would be garbage, and a script must not mistake a diverged run for a finished one."""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
import statistics
from collections import defaultdict

import numpy as np
import torch

from .optim import memory_state
from ..distributed import Comm, NullComm, ProcessGrid
from ..errors import GridGnnError
from ..graph.pipeline import console_lines, pipeline_record
from ..graph.spec import sharded_dir
from ..nn import resolve_model
from ..nn.base import model_options
from ..parallel import algorithm
from ..partition import RowPartition, even_bounds
from ..distributed.machine import available_memory_bytes
from ..planner.memory import TRACE_BYTES_PER_PARAMETER, check_fits
from .checkpoint import ALGO_LAYOUT, check_for_run, check_same_checkpoint, load_parameters, read_checkpoint
from .config import TrainConfig
from .data_checks import (check_data, check_inference_data, check_splits, check_trained_types, checked_graph,
                          data_fingerprint, in_memory_name, settle_edge_dim, with_feature_norm)
from .handover import GraphShards
from .rank_layout import (GRAPH_PARTITIONERS, build_rank, estimate_memory, make_source, model_trace, num_blocks,
                          vertex_blocks)
from .startup import StartupClock
from .step import evaluate
from .summary import count, run_summary, traffic

#: the phases of a full-graph training step (what an epoch's ``comm_time_s`` counts), and of a whole epoch
STEP_PHASES = ("fwd", "bwd", "grad", "decode", "decode_bwd")
EPOCH_PHASES = STEP_PHASES + ("eval", "metrics", "probe")


def _prepare(cfg: TrainConfig, world: int, given=None, *, dims: list[int] | None = None):
    """Load and validate the data (``given``: a graph in memory instead of ``cfg.data``, or the
    :class:`~gridgnn.train.handover.GraphShards` the launching process wrote it to) and lay it out (no collective
    yet): ``(graph, source, rows, shape, info)``. ``dims``: inference of a trained model on these widths (no labels
    needed; ``info["classes"]`` is the model's output width)."""
    algo = algorithm(cfg.algo)
    single = algo.one_process
    shape = (1,) if single else cfg.mesh_shape(world)
    blocks = vertex_blocks(cfg.algo, world, cfg.replication, shape)
    handed = given if isinstance(given, GraphShards) else None
    if handed is not None or (given is None and sharded_dir(cfg.data) is not None):
        return _prepare_sharded(cfg, handed, blocks, shape, single, dims)
    graph = checked_graph(cfg, given, blocks, dims=dims)
    fingerprint = data_fingerprint(cfg, graph)  # (before the features are normalized, in place where owned)
    graph = with_feature_norm(graph, cfg, owned=given is None)
    pipeline = pipeline_record(graph.meta, cfg.feature_norm_for(graph.meta))
    source = rows = None
    if not single and not (algo.row_partitioned and cfg.partition in GRAPH_PARTITIONERS):
        # cheap and deterministic orders are computed by every rank; graph partitioners once, after the rendezvous
        source, rows = make_source(graph, cfg.algo, world, replication=cfg.replication, shape=shape,
                                   method=cfg.partition, seed=cfg.seed)
    info = {"n": graph.n, "nnz": graph.nnz, "f": graph.num_features,
            "classes": graph.num_classes if dims is None else dims[-1],
            "partition": "none" if single else cfg.partition, "input_pipeline": pipeline,
            "input_notes": console_lines(graph.meta), "fingerprint": fingerprint}
    if given is not None:  # a graph handed over from Python
        info["data"] = in_memory_name(graph)
    return graph, source, rows, shape, info


def _prepare_sharded(cfg: TrainConfig, handed, blocks: int, shape, single: bool, dims):
    """:func:`_prepare` of a sharded dataset: ``--data sharded:DIR``, or (``handed``) the shards of a graph in
    memory that the launching process wrote for its ranks in the vertex order of ``--partition``."""
    from ..graph.sharded import ShardedDataset

    if single:
        raise GridGnnError("--algo serial reads the whole graph; give it the original --data SPEC, not sharded:")
    path = handed.path if handed is not None else sharded_dir(cfg.data)
    ds = ShardedDataset(path)
    notes = ds.data_notes()  # what the graph's loader noted (its features' convention, degree features, ...)
    ds.feature_norm = cfg.feature_norm_for(notes)
    meta = ds.graph_meta()
    if not meta.get("normalized", False):
        raise GridGnnError(f"{ds.path} holds an unnormalized matrix (gridgnn shard --no-normalize); GCN training "
                           "needs the normalized one")
    record = pipeline_record(notes, ds.feature_norm)
    types = ds.types()  # (a typed graph's layout: in meta.json, not among the loader's notes)
    if types is not None:
        record["types"] = types
    info = {"n": ds.n, "nnz": int(meta["nnz"]), "f": ds.num_features, "classes": ds.num_classes,
            "partition": ds.method, "input_pipeline": record, "node_types": ds.node_types(),
            "edge_features_not_written": ds.edge_features_not_written(),
            "input_notes": console_lines(notes), "fingerprint": ds.fingerprint() if handed is None else handed.fingerprint}
    if handed is not None:
        info.update(data=handed.name, partition=cfg.partition)
    if dims is None:
        check_data(ds.n, ds.num_features, ds.num_classes, int(meta.get("n_train", 0)), blocks)
        check_splits(cfg, ds.split_facts)
    else:
        check_inference_data(ds.n, ds.num_features, dims, blocks, degree=notes.get("features") == "degree",
                              trained=getattr(cfg, "trained_features", None))
        check_trained_types(cfg, types)
        if getattr(cfg, "trained_symmetrized", False) and ds.directed:  # (in memory, the reverse edges are added)
            raise GridGnnError(f"the model was trained on a symmetrized graph (reverse edges added); {ds.path} holds "
                               "a directed one, whose shards cannot gain them: give the data SPEC itself, or shard "
                               "it with ?directed=0")
        info["classes"] = dims[-1]
    rows = None
    if algorithm(cfg.algo).row_partitioned:
        if ds.double:
            raise GridGnnError(f"{cfg.algo} needs one vertex order; this sharded dataset holds two ({ds.method}): "
                               "write it with gridgnn shard --method single-perm (or identity)")
        bounds = np.asarray(handed.bounds, np.int64) if handed is not None else even_bounds(ds.n, blocks)
        rows = RowPartition(ds.perm_r, bounds, info["partition"])
    return None, ds, rows, shape, info


@dataclass
class RankSetup:
    """This rank of a run once it is set up: the data, the process grid, the plan and the model on it."""

    graph: object  # the loaded graph (None for a sharded dataset)
    info: dict  # n, nnz, f, classes, partition (and data for a graph in memory)
    dims: list
    dtype: torch.dtype
    ckpt: dict | None  # the --resume checkpoint, read and checked
    comm: object
    device: str
    plan: object
    data: object  # LocalData
    model: torch.nn.Module
    memory: object  # the memory estimate the run was admitted with
    setup_log: dict  # the set-up's communication (before the log is reset)
    original_ids: object = None  # the file's id of each vertex (``?relabel=1``), else None
    node_types: object = None  # the vertex types' names and id ranges (a HeteroData), else None
    source: object = None  # the block source and row partition the plan was built from (another graph on the
    rows: object = None  # same vertex layout is built from them: link prediction's test graph)
    startup: object = None  # the start-up clock (gridgnn.train.startup.StartupClock), lapped up to the model


def setup_rank(ctx, cfg: TrainConfig, graph=None, *, dims: list[int] | None = None, clock=None) -> RankSetup:
    r"""Everything before the first epoch, on this rank (``ctx`` = ``None``: one process): load and check the data
    (and a ``--resume`` checkpoint) before any collective, join the process group, lay the graph out, check the
    memory, build the plan, the local blocks and the model. ``dims``: the layer widths of a trained model whose
    inference this is (the graph then needs features of width ``dims[0]`` and no labels); ``clock``: the start-up
    clock a caller began (:class:`~gridgnn.train.startup.StartupClock`; default: this rank's)."""
    from ..errors import note_memory

    note_memory("")  # this run's guard notes its own estimate (an earlier run in this process may have left one)
    inference = dims is not None  # (whose order is the trained model's: the guard advises none)
    clock = StartupClock.on_rank(ctx) if clock is None else clock
    resolve_model(cfg.model)  # a model of the user's own (package.module:Class) is imported on this rank too
    world = 1 if ctx is None else ctx.world_size
    host_avail = _host_memory_for_ranks(ctx)  # before this rank loads anything
    given = graph
    graph, source, rows, shape, info = _prepare(cfg, world, given, dims=dims)
    edges = graph if graph is not None else getattr(given, "edges", None)  # the edge features' table, if any
    settle_edge_dim(cfg, 0 if edges is None else edges.edge_dim, sharded=given is None and graph is None,
                    dropped=info.get("edge_features_not_written", 0),
                    edges_note=None if graph is None else graph.meta.get("edge_features_dropped"),
                    relations=getattr(edges, "num_relations", 0))
    kind = algorithm(cfg.algo).grid
    dtype = torch.float64 if cfg.dtype == "float64" else torch.float32
    if dims is None:
        dims = [info["f"]] + [cfg.hidden] * (cfg.layers - 1) + [info["classes"]]
    ckpt = None
    if cfg.resume is not None:  # read and checked on every rank, before the first collective
        ckpt = read_checkpoint(cfg.resume)
        check_for_run(ckpt, cfg.resume, dims=dims, info=info, epochs=cfg.epochs, early_stop=cfg.early_stop)
    clock.lap("read")

    if ctx is None:
        comm, device = NullComm(), ("cuda" if cfg.device == "cuda" else "cpu")
        if cfg.device == "auto" and torch.cuda.is_available():
            device = "cuda"
    else:
        ctx.init()  # first collective: every rank has validated its input by now
        device = ctx.device
        comm = Comm(ProcessGrid.build(kind, device.split(":")[0], shape=shape, timeout_s=ctx.timeout_s), ranks_per_node=ctx.ranks_per_node,
                    wire=wire_policy(cfg), overlap=cfg.overlap, grad_wire=grad_wire(cfg))
        if ckpt is not None:
            check_same_checkpoint(comm, ckpt, cfg.resume)
            if comm.wire is not None:  # the wire guard's decisions go on (on the checkpoint's layout, its schedule)
                then, now = ckpt["config"], cfg.to_dict()
                comm.wire.resume(ckpt["records"], same_layout=all(_listed(then.get(k)) == _listed(now[k])
                                                                      for k in ("algo", *ALGO_LAYOUT)))
        if graph is not None and source is None:
            source, rows = _layout_on_rank0(comm, graph, cfg, world, shape)
    clock.lap("join")
    # the memory guard reads the model's trace, which build_rank then reuses
    trace = memory_trace(cfg, dims, double=bool(getattr(source, "double", False)), available=host_avail,
                         ranks=1 if ctx is None else ctx.local_world_size, trains_on_host=device == "cpu")
    memory = _check_memory(cfg, graph, source, rows, shape, dims, device, host_avail, ctx, trace, comm,
                           advise_order=not inference)
    clock.lap("memory")

    plan, data = build_rank(graph, cfg.algo, comm, dims, source=source, rows=rows, dtype=dtype, device=device,
                            edges=edges,
                            block_rows=cfg.blocked_aggregation,
                            model=lambda p: build_model(cfg, dims, p, torch.float64), trace=trace)
    setup_log = comm.log.snapshot()
    comm.log.reset()
    clock.lap("build")
    model = build_model(cfg, dims, plan, dtype).to(device)
    clock.lap("model")
    original_ids = graph.original_ids if graph is not None else getattr(given, "original_ids", None)
    node_types = graph.node_types if graph is not None else getattr(given, "node_types", None) or info.get("node_types")
    return RankSetup(graph=graph, info=info, dims=dims, dtype=dtype, ckpt=ckpt, comm=comm, device=device, plan=plan,
                     data=data, model=model, memory=memory, setup_log=setup_log, original_ids=original_ids,
                     node_types=node_types, source=source, rows=rows, startup=clock)


def predict_worker(ctx, cfg: TrainConfig, graph, dims: list[int], params: dict):
    r"""Inference of a trained model (full parameters ``params`` on ``dims``) on every vertex of ``graph`` (or of
    ``cfg.data``) with ``cfg.algo`` on this rank (``ctx`` = ``None``: one process): the same set-up as training
    (:func:`setup_rank`), the parameters sliced for this rank's plan, one eval-mode forward. Rank 0 returns
    ``(logits, original ids or None)``: the logits in the loaded graph's vertex order, in the run's dtype."""
    rs = setup_rank(ctx, cfg, graph, dims=list(dims))
    load_parameters(rs.model, rs.plan, params, rs.dims)
    logits, _ = evaluate(rs.model, rs.plan, rs.comm, rs.data)
    full = _gather_logits(rs.comm, logits, rs.data.node_ids, rs.plan.out_cols(dims[-1]), rs.info)
    if rs.comm.grid.global_rank != 0:
        return None
    return full, rs.original_ids


def grad_wire(cfg):
    """The type of ``--grad-dtype`` when it narrows the gradients (``None``: they cross in ``--dtype``)."""
    from ..distributed.wire import WIRE_TYPES, wire_element_bytes

    if wire_element_bytes(cfg.grad_dtype, cfg.dtype) == WIRE_TYPES[cfg.dtype].itemsize:
        return None
    return WIRE_TYPES[cfg.grad_dtype]


def _listed(value):
    return list(value) if isinstance(value, (list, tuple)) else value


def wire_policy(cfg):
    """The :class:`~gridgnn.distributed.wire.WirePolicy` of ``--comm-dtype`` (``None``: node data crosses in
    ``--dtype``)."""
    from ..distributed.wire import WIRE_TYPES, WirePolicy, wire_element_bytes

    if wire_element_bytes(cfg.comm_dtype, cfg.dtype) == WIRE_TYPES[cfg.dtype].itemsize:
        return None
    auto = cfg.comm_dtype == "auto"
    return WirePolicy(WIRE_TYPES[cfg.comm_dtype], guard=auto,
                      check_every=cfg.comm_check_every or 50, tolerance=cfg.comm_tolerance or 1e-2)


def _host_memory_for_ranks(ctx) -> int:
    r"""Host memory this machine's ranks may use together. A local launch measured it before spawning them
    (``ctx.host_memory``); otherwise (serial, torchrun/srun) it is measured now, before any data is loaded, plus
    what the already running local ranks hold (this process's resident set for each: the estimate counts their
    runtime)."""
    if ctx is not None and ctx.host_memory is not None:
        return int(ctx.host_memory)
    local = 1 if ctx is None else ctx.local_world_size
    return available_memory_bytes("cpu") + local * _resident_bytes()


def _resident_bytes() -> int:
    try:
        with open("/proc/self/status") as fh:
            return next((int(line.split()[1]) * 1024 for line in fh if line.startswith("VmRSS:")), 0)
    except OSError:
        return 0


def memory_trace(cfg: TrainConfig, dims: list[int], *, double: bool = False, available: int | None = None,
                 ranks: int = 1, trains_on_host: bool = True, traced=None):
    """What the memory model reads of ``--model``: the model's trace on ``cfg.algo``
    (:func:`~gridgnn.train.rank_layout.model_trace`; ``double``: the layout has two vertex orders), GCN's as any
    other's. The trace builds the whole model in float64 on each of the ``ranks`` local ranks: given the
    bytes ``available`` to them, a model whose parameter shapes are known without building it (every built-in one)
    is refused first when those copies, or (``trains_on_host``) training's own parameters, gradients and Adam
    moments, cannot fit. ``traced``: the model's trace on this layout when the caller has one (reused)."""
    cls = resolve_model(cfg.model)
    if traced is not None:
        return traced
    if available is not None:
        _check_parameters(cfg, cls, dims, available, ranks, trains_on_host)
    return model_trace(dims, lambda p: build_model(cfg, dims, p, torch.float64), cfg.algo, double=double)


def _check_parameters(cfg: TrainConfig, cls, dims: list[int], available: int, ranks: int,
                      trains_on_host: bool) -> None:
    """Refuse, with the memory guard's kind of line, parameters that cannot fit before any of them is allocated
    (a model whose ``parameter_shapes`` is a static shape rule; another is built to learn its shapes)."""
    import inspect

    from ..nn import Model
    from ..distributed.machine import format_gib

    if not (issubclass(cls, Model) or isinstance(inspect.getattr_static(cls, "parameter_shapes", None), staticmethod)):
        return  # shapes only by building the model
    shapes = cls.parameter_shapes(dims, **cfg.model_kwargs())
    elements = sum(math.prod(s) for group in shapes.values() for s in group)
    per_rank = max(TRACE_BYTES_PER_PARAMETER * elements,
                   4 * (8 if cfg.dtype == "float64" else 4) * elements * trains_on_host)
    if ranks * per_rank > available:
        raise GridGnnError(f"--model {cfg.model} with --hidden {cfg.hidden} and --layers {cfg.layers} has "
                           f"{elements:.3g} parameters: {format_gib(per_rank)} per rank (a float64 trace to check its "
                           f"layout; parameters, gradients and the optimizer's state to train) on {ranks} local rank(s), "
                           f"{format_gib(available)} available; try a smaller --hidden or fewer --layers")


def build_model(cfg: TrainConfig, dims: list[int], plan, dtype):
    """The ``--model`` of ``cfg`` from the registry, its parameters laid out for ``plan``, with its options
    (:meth:`~gridgnn.train.config.TrainConfig.model_kwargs`: the flag or the declared default)."""
    return resolve_model(cfg.model).from_options(dims, plan=plan, dtype=dtype, seed=cfg.seed, dropout=cfg.dropout,
                                                 **cfg.model_kwargs())


def gpu_memory_for_ranks(ctx, comm, device: str) -> tuple[int, int]:
    """``(free bytes, ranks sharing them)`` for the memory guard on a GPU: the least free memory of any rank's GPU
    (all-reduced, phase ``setup``: GPUs read at different moments, or busy with other jobs, must not let one rank
    refuse while its peers wait for it) and the most ranks of a node on one GPU
    (:meth:`~gridgnn.distributed.launch.LaunchContext.gpu_sharers`); ``ctx`` ``None`` (one process): this GPU's."""
    avail = available_memory_bytes(device)
    if ctx is None:
        return avail, 1
    least = torch.tensor([float(avail)], dtype=torch.float64, device=comm.wire_device())
    with comm.phase("setup"):
        comm.all_reduce(least, comm.grid.names, op="min")
    return int(least.item()), ctx.gpu_sharers()


def _check_memory(cfg, graph, source, rows, shape, dims, device: str, host_avail: int, ctx, trace, comm, *,
                  advise_order: bool = True):
    r"""Estimate every rank's peak (:func:`~gridgnn.train.rank_layout.estimate_memory`; ``trace``: that of
    :func:`memory_trace`) and refuse the run with one line of numbers and advice when the peak rank cannot fit:
    on CPU in ``host_avail`` shared by the local ranks, on CUDA in :func:`gpu_memory_for_ranks`. Every rank
    computes the same estimate; a local launch gives every rank the same ``host_avail``, and the GPUs' free memory
    is the least any rank has, so every rank decides alike. ``advise_order``: the advice may name
    ``--layer-order lean`` (:func:`_lean_order_that_fits`; not for an inference, whose order is the model's)."""
    def estimate(config, traced):
        return estimate_memory(graph, source, config.algo, shape, dims, rows=rows,
                               elem_bytes=8 if config.dtype == "float64" else 4, dropout=config.dropout,
                               block_rows=config.blocked_aggregation, device=device, trace=traced,
                               overlap=config.overlap, keep_best=config.keep == "best",
                               optimizer_state=memory_state(config))

    est = estimate(cfg, trace)
    from ..errors import note_memory
    from ..distributed.machine import format_gib

    if device.startswith("cuda"):
        avail, local = gpu_memory_for_ranks(ctx, comm, device)
    else:
        avail, local = host_avail, 1 if ctx is None else ctx.local_world_size
    try:
        check_fits(est, avail, nproc_local=local)
    except GridGnnError as refusal:
        lean = _lean_order_that_fits(cfg, dims, source, avail, local, estimate) if advise_order else None
        if lean is None:
            raise
        raise GridGnnError(f"{refusal}; or --layer-order lean (one more spmm in the backward), which fits: about "
                           f"{format_gib(lean.total)} for the peak rank") from None
    # what an allocation failure the guard did not foresee reports next to itself (gridgnn.errors.out_of_memory)
    note_memory(f"the memory guard estimated {format_gib(max(r.total for r in est.ranks))} for the peak rank, "
                f"{format_gib(avail)} available to {local} local rank(s)")
    return est


def _lean_order_that_fits(cfg: TrainConfig, dims: list[int], source, avail: int, local: int, estimate):
    """The memory estimate of this run with ``--layer-order lean`` where the model takes it, the run leaves it at
    ``auto``, and the estimate (``estimate(config, trace)``, read from the lean model's trace) fits where this
    one does not; else ``None``. (Only a first layer of equal widths has the choice: the orders of any other trace
    alike.)"""
    if "layer_order" not in model_options(resolve_model(cfg.model)) or cfg.model_option("layer_order") != "auto" \
            or dims[0] != dims[1]:
        return None
    lean = replace(cfg, layer_order="lean")
    try:
        est = estimate(lean, memory_trace(lean, dims, double=bool(getattr(source, "double", False))))
        check_fits(est, avail, nproc_local=local)
    except Exception:  # noqa: BLE001 - advice only: a model that refuses the order (or fails to build in it), or a
        return None  # lean run that does not fit either, leaves the refusal as it is
    return est


def _layout_on_rank0(comm, graph, cfg: TrainConfig, world: int, shape):
    """Graph partitioners are costly and not all reproducible across processes (Mt-KaHyPar): rank 0 runs it once
    and the others receive the vertex order and block bounds (phase ``setup``)."""
    from ..parallel.source import InMemorySource

    source = rows = None
    if comm.grid.global_rank == 0:
        source, rows = make_source(graph, cfg.algo, world, replication=cfg.replication, shape=shape,
                                   method=cfg.partition, seed=cfg.seed)
    with comm.phase("setup"):
        lead = comm.grid.global_rank == 0
        parts = num_blocks(cfg.algo, world, cfg.replication)
        dev = comm.wire_device()
        perm = torch.from_numpy(np.asarray(rows.perm, np.int64)).to(dev) if lead else \
            torch.empty(graph.n, dtype=torch.int64, device=dev)
        bounds = torch.from_numpy(np.asarray(rows.bounds, np.int64)).to(dev) if lead else \
            torch.empty(parts + 1, dtype=torch.int64, device=dev)
        comm.broadcast(perm, 0, comm.grid.names, tag="bcast_layout")
        comm.broadcast(bounds, 0, comm.grid.names, tag="bcast_layout")
        perm, bounds = perm.cpu().numpy(), bounds.cpu().numpy()
    if rows is None:
        rows = RowPartition(perm, bounds, cfg.partition)
        source = InMemorySource(graph, perm, method=cfg.partition)
    return source, rows


def _gather_logits(comm, logits, node_ids, cols, info) -> np.ndarray | None:
    """The logits in original node order on rank 0 (``None`` elsewhere), in the run's dtype: every rank's block of
    rows ``node_ids`` and class columns ``cols`` travels as tensors (phase ``io``); replicas hold equal copies."""
    axes, dev = comm.grid.names, comm.wire_device()
    ids = torch.as_tensor(np.asarray(node_ids, np.int64)).to(dev)
    c0, c1 = (int(v) for v in cols)
    lg = torch.zeros((logits.shape[0], info["classes"]), dtype=logits.dtype, device=dev)  # equal widths on the wire
    lg[:, c0:c1] = logits.detach().to(dev)
    c = torch.tensor([[c0, c1]], dtype=torch.int64, device=dev)
    with comm.phase("io"):
        all_ids, all_lg, all_cols = (comm.gather_rows(t, axes) for t in (ids, lg, c))
    if all_ids is None:
        return None
    full = np.zeros((info["n"], info["classes"]), dtype=torch.empty(0, dtype=logits.dtype).numpy().dtype)
    for i, block, cc in zip(all_ids, all_lg, all_cols):
        c0, c1 = (int(v) for v in cc[0])
        full[i.cpu().numpy(), c0:c1] = block[:, c0:c1].cpu().numpy()
    return full


def _max_over_mean(values) -> float:
    """Max/mean nnz over the adjacency shards the ranks hold (replicas count as often as they are held)."""
    mean = float(np.mean(values)) if len(values) else 0.0
    return float(max(values) / mean) if mean > 0 else 1.0


def ratio(a, b) -> float | None:
    """An accuracy; ``None`` (JSON ``null``) for an empty split."""
    return float(a / b) if b > 0 else None


def delta_of(before: dict, after: dict) -> dict:
    """Each phase key's (sent, received, calls, seconds) between two snapshots of the communication log."""
    out = {}
    for k, v in after.items():
        b = before.get(k)
        d = (v.sent - (b.sent if b else 0), v.recv - (b.recv if b else 0), v.calls - (b.calls if b else 0),
             v.seconds - (b.seconds if b else 0))
        if d[2]:
            out[k] = d
    return out


def _rank_record(rank: int, epochs: list, setup_bytes: int, shard_nnz: list) -> dict:
    """This rank's per-epoch averages (bytes, calls, seconds per phase key) and times, for rank 0."""
    n = len(epochs)
    per = defaultdict(lambda: [0, 0, 0, 0.0])  # integer bytes and calls summed exactly, then divided once
    for _, delta in epochs:
        for k, v in delta.items():
            for i in range(4):
                per[k][i] += v[i]
    return {
        "rank": rank,
        "phases": {k: {"sent": count(v[0] / n), "recv": count(v[1] / n), "calls": count(v[2] / n),
                       "seconds": v[3] / n} for k, v in per.items()},
        "epoch_times": [r["epoch_time_s"] for r, _ in epochs],
        "compute_times": [r["compute_time_s"] for r, _ in epochs],
        "setup_bytes": int(setup_bytes),
        "shard_nnz": shard_nnz,
    }


def _summary(cfg, info, world, grid, history, epochs, everyone, wall, *, resumed_from=None, wire=None,
             **extra) -> dict:
    """``history``: every epoch's record (a checkpoint's included) for the accuracies and the best epoch;
    ``epochs``: this run's (record, comm) pairs for the timings (:func:`~gridgnn.train.summary.run_summary`)."""
    per_epoch_max = [max(ts) for ts in zip(*[er["epoch_times"] for er in everyone])]
    algo = algorithm(cfg.algo)
    return run_summary(
        cfg, history, everyone, mesh=grid, data=info.get("data", cfg.data or "default"), n=info["n"],
        nnz=info["nnz"], wall=wall, resumed_from=resumed_from,
        epoch_time_median_s=statistics.median(per_epoch_max),
        eval_time_median_s=statistics.median(r["eval_time_s"] for r, _ in epochs),
        **traffic(everyone, EPOCH_PHASES),
        setup_comm_bytes=count(sum(er["setup_bytes"] for er in everyone)),
        nnz_max_over_mean=_max_over_mean([v for er in everyone for v in er["shard_nnz"]]),
        comm_wire=None if wire is None else wire.summary(),
        algo=cfg.algo, grid=list(grid.shape) if algo.grid != "single" else [1],
        blocked_aggregation=cfg.blocked_aggregation, replication=cfg.replication if algo.takes_replication else 1,
        partition=info["partition"],
        # per rank: the estimate the run was admitted with (gridgnn.planner.memory)
        estimated_peak_memory_bytes=[er["estimated_peak_memory_bytes"] for er in everyone],
        **_pipeline_keys(info), **extra)


def _pipeline_keys(info: dict) -> dict:
    """The summary's ``input_pipeline`` (the record the model holds) and ``feature_norm`` as the run resolved it."""
    rec = info.get("input_pipeline")
    return {} if rec is None else {"input_pipeline": rec, "feature_norm": rec["feature_norm"]}
