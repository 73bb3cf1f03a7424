r"""Minibatch training with bulk matrix sampling (MLSys'24 §6): ``gridgnn train --sampler sage|ladies``.

On a ``P/c × c`` grid (``--nproc P --replication c``; axes ``"row"``, ``"rep"`` as 1.5D):

* **features** are 1.5D-partitioned: vertex block ``i`` (even bounds over the vertex ids) on the ``c`` members of
  process row ``i``, so every process column holds all of them;
* **sampling**: minibatches of ``--batch-size`` training vertices (a keyed shuffle per epoch; the last one may be
  smaller) go out in bulks of ``P·k`` (``--bulk k``); each rank samples its ``k`` —
  :mod:`gridgnn.sampling.distributed`, graph ``replicated`` or ``partitioned`` (``--sample-graph``);
* **steps**: in step ``s`` of a bulk every rank trains its ``s``-th minibatch: an all-to-allv along its process
  column fetches the feature rows of the minibatch's input frontier (phase ``fetch``), forward and backward run
  locally on the sampled blocks (:class:`~gridgnn.sampling.plan.MinibatchPlan`), and the gradients are summed
  over all ranks (``grad``). The loss is the cross-entropy summed over the step's targets on every rank and
  divided by their total, so a step is one optimizer update on the union of the ``P`` minibatches. A rank with
  no minibatch left in a step still takes part in every collective with an empty one (zero gradient): ranks
  stay in lockstep whatever the number of minibatches, and no partial minibatch is dropped;
* **evaluation** after every epoch, on the validation and test vertices in minibatches of ``--eval-batch-size``
  (default ``--batch-size``) through the same pipeline with ``--eval-fanout`` (default: every neighbour, i.e. exact full-neighbourhood
  inference), phase ``eval``.

Dropout masks are keyed by (seed, global step, layer, vertex, feature), so a step's masks do not depend on P.

The loop runs a *task*: node classification (:class:`NodeSamples`: minibatches of training vertices, the
cross-entropy, accuracies) or link prediction (:class:`~gridgnn.train.sampled_link.LinkSamples`: minibatches of
training positives with their negatives, whose endpoints are the outputs, the binary cross-entropy, AUC, Hits@K
and MRR); what is said above of vertices holds for a minibatch's output vertices.
"""
from __future__ import annotations

import contextlib
import math
import time
from collections import defaultdict

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn.functional as F

from ..distributed import Comm, ProcessGrid
from ..distributed.grid import AXES
from ..distributed.machine import device_name, measured_peak_bytes
from ..errors import GridGnnError, note_memory
from ..graph.graph import SplitFacts, require_nonnegative_weights
from ..graph.pipeline import console_lines, pipeline_record
from ..graph.spec import load_graph
from ..ops.kernels import compile_seconds
from ..partition import even_bounds
from ..sampling import minibatches
from ..sampling.distributed import PartitionedPattern, fetch_rows, sample_rank, schedule
from ..sampling.plan import GcnNormalization, MinibatchPlan
from .checkpoint import WHOLE as _WHOLE  # every rank holds every parameter whole
from .checkpoint import check_for_run, check_same_checkpoint, read_checkpoint
from .config import TrainConfig
from .loop import compiling
from .rank_layout import attach_edge_features
from .sampled_link import LinkSamples
from .startup import StartupClock
from .step import allreduce_grads
from .summary import count, median_of, run_summary, traffic
from .tasks import NodeReport
from .data_checks import (check_data, check_splits, data_fingerprint, in_memory_name, settle_edge_dim,
                          with_feature_norm)
from .rank_setup import build_model, delta_of, ratio

PHASES = ("sample", "fetch", "fwd", "bwd", "grad", "eval", "metrics")


def neighbours(graph) -> sp.csr_matrix:
    """The graph's pattern without self-loops (rows = destinations): what SAGE aggregates, what is sampled. An
    edge of weight 0 is no edge here, as in the normalized matrix the full-graph layers read."""
    ones = np.ones(len(graph.indices)) if graph.values is None else (graph.values != 0).astype(np.float64)
    a = sp.csr_matrix((ones, graph.indices, graph.indptr), shape=(graph.n, graph.n))
    a.setdiag(0)
    a.eliminate_zeros()
    return a


def _grid(ctx, cfg: TrainConfig):
    if ctx is None:
        return ProcessGrid("1.5d", (1, 1), AXES["1.5d"], 0, None), "cpu"
    ctx.init()
    device = ctx.device
    return ProcessGrid.build("1.5d", device.split(":")[0], replication=cfg.replication, timeout_s=ctx.timeout_s), device


class _Pipeline:
    """This rank's data of one graph and the loop over the minibatches of one pass (training or evaluation).
    ``features``: this rank's block of the features where another pipeline (of the same vertices) holds it."""

    def __init__(self, cfg: TrainConfig, graph, comm, device, dtype, *, features: torch.Tensor | None = None):
        self.cfg, self.comm, self.device, self.dtype = cfg, comm, device, dtype
        self.world = comm.grid.world_size
        self.adj = neighbours(graph)
        blocks = comm.grid.size("row")
        self.bounds = even_bounds(graph.n, blocks)
        i = comm.grid.rank("row")
        lo, hi = int(self.bounds[i]), int(self.bounds[i + 1])
        self.x_local = torch.from_numpy(np.asarray(graph.x[lo:hi])).to(dtype).to(device) if features is None \
            else features  # vertex block i only
        self.pattern = PartitionedPattern(comm, self.adj) if cfg.model_sample_graph == "partitioned" else None
        bare = graph.with_(x=None)  # (what the run keeps of the whole graph holds no features: a rank keeps its block)
        self.gcn = GcnNormalization(bare, self.adj)  # built when a model first reads gcn_values
        # whose edge features and relation types a sample's edges read (by original ids), where the graph has them
        self.edges = bare if graph.edge_attr is not None or graph.edge_type_counts is not None else None
        self.fanouts = cfg.model_fanouts
        self.eval_fanouts = cfg.model_eval_fanouts

    def on(self, graph) -> "_Pipeline":
        """The pipeline of ``graph``, a graph of the same vertices and features (link prediction's test graph),
        on this one's feature block."""
        return _Pipeline(self.cfg, graph, self.comm, self.device, self.dtype, features=self.x_local)

    def run(self, batches, *, fanouts, epoch: int, step0: int, step_fn, stats, fetch_phase: str,
            sizes=None) -> int:
        """Every step of ``batches`` (the same sequence on every rank, of each minibatch's output vertices; it is
        indexed only where a minibatch is sampled); ``step_fn(plan_or_None, x, t, n_step, step)`` trains or
        evaluates this rank's minibatch ``t`` of the step (``None``, ``t = −1``: it has none, but the step's
        collectives still run); ``n_step``: the sum of ``sizes`` (default the batches' lengths) over the step's
        minibatches of all ranks. Returns the steps (:func:`~gridgnn.sampling.distributed.schedule`: which minibatch
        each rank ran in each)."""
        cfg, comm, k = self.cfg, self.comm, self.cfg.model_bulk
        steps = schedule(len(batches), self.world, k)
        sample, current = None, -1
        rank = comm.grid.global_rank

        def sampling():  # the training's sampling is phase "sample"; an evaluation's or inference's is that pass's
            return contextlib.nullcontext() if fetch_phase == "fetch" else comm.covering_phase(fetch_phase)

        for n, (bulk, s, ids) in enumerate(steps):
            if bulk != current:
                t0 = time.perf_counter()
                with sampling():
                    sample = sample_rank(comm, self.adj, batches, fanouts, k=k, bulk=bulk, sampler=cfg.sampler,
                                         mode=cfg.model_sample_graph, seed=cfg.seed, epoch=epoch,
                                         pattern=self.pattern)
                stats["sampling_s"] += time.perf_counter() - t0
                current = bulk
            mine = sample.batch(s) if ids[rank] >= 0 else None
            t0 = time.perf_counter()
            with comm.phase(fetch_phase):
                x = fetch_rows(comm, self.x_local, self.bounds, mine.nodes[0] if mine else np.zeros(0, np.int64))
            t1 = time.perf_counter()
            stats["fetch_s"] += t1 - t0
            n_step = sum(len(batches[t]) if sizes is None else sizes[t] for t in ids if t >= 0)
            plan = None
            if mine is not None:
                plan = MinibatchPlan(mine, dtype=self.dtype, device=self.device, gcn=self.gcn)
                attach_edge_features(plan, self.edges, len(plan.graphs))
            step_fn(plan, x, ids[rank], n_step, step0 + n)
            stats["compute_s"] += time.perf_counter() - t1
            stats["minibatches"] += sum(t >= 0 for t in ids)
        return steps


class NodeSamples(NodeReport):
    r"""Node classification on sampled minibatches: what the minibatch loop asks of a task (link prediction's is
    :class:`~gridgnn.train.sampled_link.LinkSamples`).

    Built on every rank before any collective (the data are checked there): ``graph`` the graph the model trains
    on, ``dims`` its widths, ``info`` what a checkpoint records of the data; :meth:`start` after the process
    group; then per epoch :meth:`train_batches` (the minibatches' output vertices and the loss terms of each),
    :meth:`train_loss` of a step's minibatch, :meth:`evaluate`; ``parameters`` / ``replicated``: the trainable
    parameters outside the model."""

    task = "node"

    def __init__(self, cfg: TrainConfig, loaded, world: int, *, owned: bool, data: str):
        self.cfg = cfg
        graph = with_feature_norm(loaded, cfg, owned=owned)
        labelled = graph.y is not None and graph.train_mask is not None
        self.train_ids = np.flatnonzero(graph.train_mask & (graph.y >= 0)) if labelled else np.zeros(0, np.int64)
        check_data(graph.n, graph.num_features, graph.num_classes, len(self.train_ids), world // cfg.replication)
        check_splits(cfg, SplitFacts.of(graph))
        self.dims = [graph.num_features] + [cfg.hidden] * (cfg.layers - 1) + [graph.num_classes]
        self.split = {name: np.flatnonzero(m & (graph.y >= 0)) if m is not None else np.zeros(0, np.int64)
                      for name, m in (("val", graph.val_mask), ("test", graph.test_mask))}
        self.graph = graph
        self.summary_size = (graph.n, graph.nnz)
        self.input_notes = console_lines(graph.meta)
        self.info = {"n": graph.n, "nnz": graph.nnz, "f": graph.num_features, "classes": graph.num_classes,
                     "data": data, "input_pipeline": pipeline_record(graph.meta, cfg.feature_norm_for(graph.meta))}
        self.parameters, self.replicated = [], {}

    def start(self, comm, pipe: _Pipeline, model) -> None:
        self.pipe, self.model, self.comm = pipe, model, comm
        self.y = torch.from_numpy(np.asarray(self.graph.y, dtype=np.int64)).to(pipe.device)
        self.graph = self.graph.with_(x=None)  # every rank keeps only its block of the features

    def train_batches(self, epoch: int):
        return minibatches(self.train_ids, self.cfg.model_batch_size, seed=self.cfg.seed, epoch=epoch), None

    def num_train_batches(self) -> int:
        return len(minibatches(self.train_ids, self.cfg.model_batch_size))

    def train_loss(self, out, plan, t: int, epoch: int):
        """The cross-entropy summed over the minibatch's targets, its correct predictions and its targets."""
        y = self.y[torch.from_numpy(plan.out_rows()).to(self.y.device)]
        return F.cross_entropy(out, y, reduction="sum"), int((out.detach().argmax(1) == y).sum()), len(y)

    def evaluate(self, epoch: int):
        """The validation and test vertices classified (eval fanout, phase ``eval``): this rank's counts, summed by
        the loop over all ranks with its own (phase ``metrics``), and what makes their accuracies of the sums."""
        pipe, model, cfg = self.pipe, self.model, self.cfg
        counts = torch.zeros(4, dtype=torch.float64)  # correct, n (val, test)
        for slot, name in ((0, "val"), (2, "test")):
            def eval_step(plan, x, t, n_step, step, slot=slot):
                if plan is None:
                    return
                model.eval()
                with torch.no_grad():
                    pred = model(x, plan).argmax(1)
                y = self.y[torch.from_numpy(plan.out_rows()).to(self.y.device)]
                counts[slot] += int((pred == y).sum())
                counts[slot + 1] += len(y)

            ids = self.split[name]
            size = cfg.model_eval_batch_size
            batches = [ids[i:i + size] for i in range(0, len(ids), size)]
            pipe.run(batches, fanouts=pipe.eval_fanouts, epoch=epoch, step0=0, step_fn=eval_step,
                     stats=defaultdict(float), fetch_phase="eval")
        return counts.tolist(), lambda vec: {"val_acc": ratio(vec[0], vec[1]), "test_acc": ratio(vec[2], vec[3])}

    def train_metrics(self, correct: float, targets: float) -> dict:
        return {"train_acc": ratio(correct, targets)}


def _minibatch_line(task, r: dict) -> str:
    return (f"{task.line(r)} | {r['minibatches']} minibatches, {r['minibatches_per_s']:.1f}/s | sampling {r['sampling_s'] * 1e3:.0f} "
            f"ms, fetch {r['fetch_s'] * 1e3:.0f} ms, compute {r['compute_s'] * 1e3:.0f} ms{compiling(r)}")


class Minibatches:
    r"""Sampled minibatches as the batch source (:func:`~gridgnn.train.worker.train_worker` runs it): the graph
    loaded on every rank, the task's minibatch form (:class:`NodeSamples` or
    :class:`~gridgnn.train.sampled_link.LinkSamples`), the ``P/c × c`` grid and this rank's pipeline and model; each
    epoch the bulk-sampled training steps and the task's evaluation; the summary's minibatch keys."""

    breakdown = False
    plan = _WHOLE  # every rank holds every parameter whole (a checkpoint's shards are the whole tensors)

    def __init__(self, ctx, cfg: TrainConfig, graph=None):
        note_memory("")  # no memory guard runs here: no estimate of an earlier run in this process is reported
        self.cfg = cfg
        self.startup = clock = StartupClock.on_rank(ctx)
        in_memory = graph is not None
        loaded = load_graph(cfg.data if graph is None else graph, seed=cfg.seed)
        require_nonnegative_weights(loaded)  # on every rank, before anything starts
        settle_edge_dim(cfg, loaded.edge_dim, edges_note=loaded.meta.get("edge_features_dropped"),
                        relations=loaded.num_relations)  # a model that reads them is built for the data's
        world = 1 if ctx is None else ctx.world_size
        data = in_memory_name(loaded) if in_memory else cfg.data or "default"
        samples = LinkSamples if cfg.task == "link" else NodeSamples
        fingerprint = data_fingerprint(cfg, loaded)  # (before the task normalizes its features, in place if owned)
        self.task = task = samples(cfg, loaded, world, owned=not in_memory, data=data)
        del loaded
        self.dims, self.checkpoint_info = task.dims, {**task.info, "fingerprint": fingerprint}
        self.ckpt = None
        if cfg.resume is not None:  # read and checked on every rank, before the first collective
            self.ckpt = read_checkpoint(cfg.resume)
            check_for_run(self.ckpt, cfg.resume, dims=self.dims, info=self.checkpoint_info, epochs=cfg.epochs,
                          early_stop=cfg.early_stop)
        clock.lap("read")
        grid, self.device = _grid(ctx, cfg)
        self.comm = Comm(grid, sync_cuda=ctx is not None, ranks_per_node=None if ctx is None else ctx.ranks_per_node)
        if self.ckpt is not None:
            check_same_checkpoint(self.comm, self.ckpt, cfg.resume)
        clock.lap("join")
        dtype = torch.float64 if cfg.dtype == "float64" else torch.float32
        self.pipe = _Pipeline(cfg, task.graph, self.comm, self.device, dtype)
        self.model = build_model(cfg, self.dims, None, dtype).to(self.device)
        task.start(self.comm, self.pipe, self.model)
        clock.lap("model")
        self.steps_per_epoch = len(schedule(task.num_train_batches(), world, cfg.model_bulk))
        self.notes = task.input_notes  # the loader's silent choices, one line each
        self.logs = []  # this run's communication per epoch
        self.original_ids, self.node_types = task.graph.original_ids, task.graph.node_types

    def progress(self) -> dict:
        """The console's count: minibatch steps."""
        cfg, start = self.cfg, 0 if self.ckpt is None else self.ckpt["epoch"]
        return dict(total=cfg.epochs * self.steps_per_epoch, initial=start * self.steps_per_epoch,
                    desc=f"{cfg.sampler} P={self.comm.grid.world_size}", unit="minibatch")

    def line(self, r: dict) -> str:
        return _minibatch_line(self.task, r)

    def epoch(self, epoch: int, opt, console) -> dict:
        rec, delta = _epoch(self.pipe, self.task, self.model, opt, self.comm, epoch, epoch * self.steps_per_epoch,
                            console)
        self.logs.append(delta)
        return rec

    def rank_record(self) -> dict:
        """What this rank reports: its peak memory and its traffic per phase and epoch."""
        return {"rank": self.comm.grid.global_rank, "peak_memory_bytes": measured_peak_bytes(self.device),
                "device": device_name(self.device),
                "phases": _mean_phases(self.logs)}

    def gather(self, mine: dict, logits: bool) -> tuple[list, object]:
        """Every vertex's logits on rank 0 (``logits``: inferred in minibatches, phase ``io``), then every rank's
        record."""
        comm = self.comm
        full = _infer_all(self.pipe, self.model, comm, self.task.graph.n, self.dims[-1]) if logits else None
        with comm.phase("io"):
            everyone = comm.all_gather_json(mine, comm.grid.names) if comm.grid.world_size > 1 else [mine]
        return everyone, full

    def summary(self, history, everyone, wall: float, resumed_from) -> dict:
        info = self.task.info
        return _summary(self.cfg, self.task.summary_size, self.comm.grid, history, everyone, wall,
                        resumed_from=resumed_from, data=info["data"], input_pipeline=info.get("input_pipeline"),
                        startup_s=self.startup.summary(), **self.task.summary_fields())

    def final(self, summary: dict) -> str:
        return (f"{self.task.final(summary)}, {summary['minibatches_per_s']:.1f} minibatches/s, epoch "
                f"{summary['epoch_time_median_s'] * 1e3:.1f} ms median (sampling {summary['sampling_s'] * 1e3:.1f}, "
                f"fetch {summary['fetch_s'] * 1e3:.1f}, compute {summary['compute_s'] * 1e3:.1f})")


def _infer_all(pipe: _Pipeline, model, comm, n: int, classes: int) -> np.ndarray | None:
    r"""``--save-logits``: the trained model's logits of every vertex (``n × classes``, original order) on rank 0,
    ``None`` elsewhere. Every vertex is an output in minibatches of ``--eval-batch-size`` sampled with
    ``--eval-fanout`` (default every neighbour: exact full-neighbourhood inference), spread over the ranks as
    training steps are; the rows go to rank 0 in one gather (phase ``io``)."""
    ids, outs = [], []

    def infer(plan, x, t, n_step, step):
        if plan is None:
            return
        model.eval()
        with torch.no_grad():
            outs.append(model(x, plan).detach().to("cpu", pipe.dtype))
        ids.append(np.asarray(plan.out_rows(), dtype=np.int64))

    size = pipe.cfg.model_eval_batch_size
    order = np.arange(n, dtype=np.int64)
    pipe.run([order[i:i + size] for i in range(0, n, size)], fanouts=pipe.eval_fanouts, epoch=pipe.cfg.epochs,
             step0=0, step_fn=infer, stats=defaultdict(float), fetch_phase="io")
    rows = torch.from_numpy(np.concatenate(ids) if ids else np.zeros(0, np.int64)).reshape(-1, 1)
    vals = torch.cat(outs) if outs else torch.zeros((0, classes), dtype=pipe.dtype)
    wire = comm.wire_device()
    with comm.phase("io"):
        all_rows = comm.gather_rows(rows.to(wire), comm.grid.names)
        all_vals = comm.gather_rows(vals.to(wire), comm.grid.names)
    if all_rows is None:
        return None
    full = np.full((n, classes), np.nan, dtype=vals.numpy().dtype)  # the run's dtype
    for r, v in zip(all_rows, all_vals):
        full[r.cpu().numpy().reshape(-1)] = v.cpu().numpy()
    return full


def _epoch(pipe: _Pipeline, task, model, opt, comm, epoch: int, step0: int, console):
    """One epoch of ``task`` on sampled minibatches: the training steps (each an optimizer update on the union of
    the step's minibatches of all ranks), then the task's evaluation. Returns the record and this epoch's
    communication."""
    before = comm.log.snapshot()
    compiled = compile_seconds()
    stats = defaultdict(float)
    totals = torch.zeros(3, dtype=torch.float64)  # loss sum, correct, loss terms (train)
    extra = task.parameters

    def train_step(plan, x, t, n_step, step):
        model.train()
        model.epoch = step  # dropout keyed by the global step
        opt.zero_grad(set_to_none=False)
        if plan is not None:
            with comm.phase("fwd"):
                out = model(x, plan)
                total, correct, terms = task.train_loss(out, plan, t, epoch)
                loss = total / n_step
            with comm.phase("bwd"):
                loss.backward()
            totals[0] += float(loss.detach()) * n_step
            totals[1] += correct or 0
            totals[2] += terms
        for p in list(model.parameters()) + extra:  # a rank without a minibatch contributes zeros
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        allreduce_grads(model, comm, comm.grid.names)
        if extra:
            allreduce_grads(torch.nn.ParameterList(extra), comm, comm.grid.names)
        opt.step()
        console.advance()

    t0 = time.perf_counter()
    batches, sizes = task.train_batches(epoch)
    pipe.run(batches, fanouts=pipe.fanouts, epoch=epoch, step0=step0, step_fn=train_step, stats=stats,
             fetch_phase="fetch", sizes=sizes)
    t1 = time.perf_counter()
    compiled = compile_seconds() - compiled  # of the training steps' time
    counts, metrics_of = task.evaluate(epoch)
    t2 = time.perf_counter()
    vec = torch.cat([totals, torch.tensor(counts, dtype=torch.float64)]).to(comm.wire_device())
    with comm.phase("metrics"):
        comm.all_reduce(vec, comm.grid.names)
    vec = vec.cpu().numpy()
    metrics = metrics_of(vec[3:])
    if not math.isfinite(vec[0]):
        raise GridGnnError(f"training diverged at epoch {epoch}: the loss is {vec[0]} (try a smaller --lr)")
    delta = delta_of(before, comm.log.snapshot())
    elapsed = t1 - t0
    rec = {
        "epoch": epoch, "loss": float(vec[0] / max(vec[2], 1)), **task.train_metrics(vec[1], vec[2]), **metrics,
        "epoch_time_s": elapsed, "eval_time_s": t2 - t1,
        "minibatches": int(stats.get("minibatches", 0)),
        "minibatches_per_s": stats.get("minibatches", 0) / elapsed if elapsed > 0 else 0.0,
        "sampling_s": stats.get("sampling_s", 0.0), "fetch_s": stats.get("fetch_s", 0.0),
        "compute_s": stats.get("compute_s", 0.0),
        "sampling_bytes": sum(v[0] for k, v in delta.items() if k.startswith("sample.")),
        "fetch_bytes": sum(v[0] for k, v in delta.items() if k.startswith("fetch.")),
        "bytes_sent": sum(v[0] for v in delta.values()),
        "compile_time_s": compiled,
    }
    return rec, delta


def _mean_phases(logs: list[dict]) -> dict:
    per = defaultdict(lambda: [0, 0, 0])  # summed exactly, divided once
    for delta in logs:
        for k, v in delta.items():
            for i in range(3):
                per[k][i] += v[i]
    n = max(len(logs), 1)
    return {k: {"sent": count(v[0] / n), "recv": count(v[1] / n), "calls": count(v[2] / n)} for k, v in per.items()}


def _summary(cfg: TrainConfig, size: tuple[int, int], grid, history, everyone, wall: float, *, resumed_from: int | None = None,
             data: str = "default", input_pipeline: dict | None = None, **task_fields) -> dict:
    """The run's summary (:func:`~gridgnn.train.summary.run_summary`: the schema of full-graph runs too) of a graph
    of ``size`` ``(n, nnz)``."""

    moved = traffic(everyone)

    def phase_bytes(prefix):
        return count(sum(v for k, v in moved["comm_bytes_per_epoch"]["by_phase"].items()
                         if k.startswith(prefix + ".")))

    ran = history[resumed_from or 0:] or history  # the timings cover this run's epochs (not a checkpoint's)
    return run_summary(
        cfg, history, everyone, mesh=grid, data=data, n=size[0], nnz=size[1], wall=wall, resumed_from=resumed_from,
        epoch_time_median_s=median_of(ran, "epoch_time_s"), eval_time_median_s=median_of(ran, "eval_time_s"),
        **moved,
        minibatches_per_epoch=history[-1]["minibatches"], minibatches_per_s=median_of(ran, "minibatches_per_s"),
        sampling_s=median_of(ran, "sampling_s"), fetch_s=median_of(ran, "fetch_s"),
        compute_s=median_of(ran, "compute_s"),
        sampling_bytes_per_epoch=phase_bytes("sample"), fetch_bytes_per_epoch=phase_bytes("fetch"),
        sampler=cfg.sampler, fanout=cfg.model_fanouts, eval_fanout=cfg.model_eval_fanouts,
        batch_size=cfg.model_batch_size, eval_batch_size=cfg.model_eval_batch_size, bulk=cfg.model_bulk,
        sample_graph=cfg.model_sample_graph,
        # the sampler's P/c x c grid; features 1.5D-partitioned in vertex order (even bounds)
        algo="minibatch", grid=list(grid.shape), blocked_aggregation=0, replication=cfg.replication,
        partition="identity", **task_fields,
        **({} if input_pipeline is None else {"input_pipeline": input_pipeline,
                                              "feature_norm": input_pipeline["feature_norm"]}))
