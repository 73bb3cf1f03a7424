r"""Full-graph training, one worker for every task: each rank is set up (:func:`~gridgnn.train.trainer.setup_rank`:
the data checked before any collective, the process group, the plan and the model), then a
:class:`~gridgnn.train.loop.RunLoop` runs one step per epoch on the whole graph — the task's forward and backward
with the gradient sums, one optimizer update, the task's evaluation, one all-reduce of what the ranks counted
(phase ``metrics``), the checks that end a diverged run on every rank alike — and the outputs follow.

A *task* says what is trained and measured on the plan: node classification (:class:`NodeTask`: the sharded
cross-entropy of the labelled rows, accuracies) or link prediction (:class:`~gridgnn.train.link.LinkTask`: the
edge split, pairs scored by a decoder, AUC, Hits@K, MRR). Sampled minibatches run the same tasks' minibatch
forms (:mod:`gridgnn.train.minibatch`).
"""
from __future__ import annotations

import math
import time

import torch

from ..distributed.machine import measured_peak_bytes
from ..errors import GridGnnError
from ..ops.kernels import compile_seconds
from .checkpoint import restore
from .config import TrainConfig
from .console import Console
from .link import LinkTask
from .loop import RunLoop, compiling
from .optim import make_optimizer
from .step import evaluate, forward_backward
from .tasks import NodeReport
from .trainer import STEP_PHASES, _gather_logits, _rank_record, _summary, delta_of, ratio, setup_rank



class NodeTask(NodeReport):
    """Node classification on the whole graph: the plan's sharded cross-entropy over the labelled training rows,
    the accuracies of the three splits (each row counted on ``plan.copies`` ranks)."""

    def __init__(self, ctx, cfg: TrainConfig, graph):
        self.cfg = cfg
        self.rs = setup_rank(ctx, cfg, graph)
        self.info = self.checkpoint_info = self.rs.info
        self.setup_bytes = sum(v.sent for v in self.rs.setup_log.values())
        self.parameters, self.replicated = [], {}

    def train_step(self, model, epoch: int) -> torch.Tensor:
        rs = self.rs
        loss, _ = forward_backward(model, rs.plan, rs.comm, rs.data, epoch=epoch)
        return loss

    def evaluate(self, model, epoch: int):
        """This rank's counts (correct and total of each split, and its non-finite outputs), and what makes the
        epoch's loss, metrics and a divergence of the sums (every row counted on ``copies`` ranks)."""
        rs = self.rs
        logits, counts = evaluate(model, rs.plan, rs.comm, rs.data)
        bad = (~torch.isfinite(logits)).sum().double().reshape(1).cpu()

        def finish(vec):
            v = vec / rs.plan.copies
            problem = "the model's outputs are not finite after the update" if v[7] > 0 else None
            return float(v[0]), {"train_acc": ratio(v[1], v[2]), "val_acc": ratio(v[3], v[4]),
                                 "test_acc": ratio(v[5], v[6])}, problem

        return torch.cat([counts, bad]).tolist(), finish

    def logits(self, model):
        """``--save-logits``: every vertex's logits on rank 0, in original order (collective, phase ``io``)."""
        rs = self.rs
        out, _ = evaluate(model, rs.plan, rs.comm, rs.data)
        return _gather_logits(rs.comm, out, rs.data.node_ids, rs.plan.out_cols(rs.info["classes"]), rs.info)


def train_worker(ctx, cfg: TrainConfig, graph=None, keep_model: bool = False, callbacks=()):
    """Full-graph training of ``cfg``'s task on this rank (``ctx`` = ``None`` for ``--algo serial``; ``graph``: a
    graph in memory instead of ``cfg.data``). Returns the summary on rank 0 (``keep_model``: a
    :class:`~gridgnn.train.model_file.TrainOutput`, the summary and the trained parameters); ``callbacks``: called on
    rank 0 with each epoch's record."""
    t_start = time.perf_counter()
    task = LinkTask(ctx, cfg, graph) if cfg.task == "link" else NodeTask(ctx, cfg, graph)
    rs = task.rs
    comm, plan, model, dims, ckpt, device = rs.comm, rs.plan, rs.model, rs.dims, rs.ckpt, rs.device
    world, rank = comm.grid.world_size, comm.grid.global_rank
    opt = make_optimizer(cfg, list(model.parameters()) + task.parameters)
    if ckpt is not None:  # the model's shards and the task's parameters held whole, with the optimizer's state
        restore(model, opt, plan, ckpt, dims, task.replicated)
    console = Console(show=rank == 0 and not cfg.quiet, epochs=cfg.epochs, log_every=cfg.log_every,
                      total=cfg.epochs, initial=0 if ckpt is None else ckpt["epoch"],
                      desc=f"{'link ' if cfg.task == 'link' else ''}{cfg.algo} P={world}")
    loop = RunLoop(cfg, comm=comm, plan=plan, model=model, opt=opt, dims=dims, info=task.checkpoint_info,
                   ckpt=ckpt, console=console, line=lambda r: f"{task.line(r)} | {_step_line(r)}",
                   callbacks=callbacks, replicated=task.replicated)
    for note in task.info.get("input_notes", ()):  # the loader's silent choices, one line each
        console.write(note)
    epochs = []  # this run's (record, per-phase communication) of each epoch
    rs.startup.lap("optimizer")

    def step(epoch: int) -> dict:
        rec, delta = _epoch(task, model, opt, comm, epoch, device)
        epochs.append((rec, delta))
        console.advance()
        return rec

    loop.run(step)
    with loop.outputs():
        # ---- gather per-rank records (once, phase io) and the logits
        mine = _rank_record(rank, epochs, task.setup_bytes, plan.shard_nnz())
        mine["estimated_peak_memory_bytes"] = None if rs.memory is None else rs.memory.ranks[rank].total
        mine["peak_memory_bytes"] = measured_peak_bytes(device)
        with comm.phase("io"):
            everyone = comm.all_gather_json(mine, comm.grid.names)
            logits_full = task.logits(model) if cfg.save_logits and cfg.out else None
        params = loop.parameters(keep_model)
        for name, ps in task.replicated.items():  # whole on every rank: rank 0's are everyone's
            if params is not None:
                params[name] = [p.detach().cpu().clone() for p in ps]
        if rank != 0:
            return None
        summary = _summary(cfg, task.info, world, comm.grid, loop.history, epochs, everyone,
                           time.perf_counter() - t_start, resumed_from=None if ckpt is None else loop.start,
                           wire=comm.wire, startup_s=rs.startup.summary(), **task.summary_fields())
        loop.write(summary, params, logits=logits_full, original_ids=rs.original_ids, node_types=rs.node_types,
                   everyone=everyone)
    if not cfg.quiet:
        print(f"{task.final(summary)}, epoch {summary['epoch_time_median_s'] * 1e3:.1f} ms median, "
              f"{summary['comm_bytes_per_epoch']['total'] / 1e6:.3f} MB moved per epoch (all ranks), "
              f"adjacency shards nnz max/mean {summary['nnz_max_over_mean']:.3f}"
              + (f"; outputs in {cfg.out}" if cfg.out else ""), flush=True)
    return loop.result(summary, params, keep_model)


def _step_line(r: dict) -> str:
    return (f"{r['epoch_time_s'] * 1e3:7.1f} ms (compute {r['compute_time_s'] * 1e3:.1f}, comm "
            f"{r['comm_time_s'] * 1e3:.1f}{compiling(r)}) | rank 0 sent {r['bytes_sent'] / 1e3:.1f} kB")


def _epoch(task, model, opt, comm, epoch: int, device: str) -> tuple[dict, dict]:
    r"""One training step of ``task`` (phases ``fwd``, ``bwd``, ``grad``; link prediction's ``decode``), its
    evaluation (``eval``) and the metrics all-reduce (``metrics``); returns the epoch's record and this rank's
    per-phase communication. A non-finite loss, or what the task finds diverged after the update, ends the run on
    every rank alike (the test is on all-reduced values) with a :class:`GridGnnError` naming the epoch. With
    ``--comm-dtype auto`` an epoch may probe the narrow wire (:class:`~gridgnn.distributed.wire.WirePolicy`); its
    record then has ``wire``."""
    before = comm.log.snapshot()
    if comm.wire is not None:
        comm.wire.begin_step(epoch)
    compiled = compile_seconds()
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    loss = task.train_step(model, epoch)
    opt.step()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    t1 = time.perf_counter()
    compiled = compile_seconds() - compiled  # of the training step's time
    counts, finish = task.evaluate(model, epoch)
    wire = comm.wire.settle(comm) if comm.wire is not None else None
    overflow = float(comm.wire is not None and comm.wire.overflow is not None)
    vec = torch.tensor([float(loss.detach().double().cpu()), *counts, overflow], dtype=torch.float64)
    vec = vec.to(comm.wire_device())
    with comm.phase("metrics"):
        comm.all_reduce(vec, comm.grid.names)
    vec = vec.cpu().numpy()
    t2 = time.perf_counter()
    if vec[-1] > 0:  # some rank's float16 wire overflowed: every rank stops here with the first rank's words
        with comm.phase("metrics"):
            first = next(m for m in comm.all_gather_json(comm.wire.overflow, comm.grid.names) if m)
        raise GridGnnError(f"epoch {epoch}: {first}")
    total, metrics, problem = finish(vec[:-1])
    if not math.isfinite(total):
        raise GridGnnError(f"training diverged at epoch {epoch}: the loss is {total} (try a smaller --lr)")
    if problem is not None:
        raise GridGnnError(f"training diverged at epoch {epoch}: {problem} (try a smaller --lr)")
    delta = delta_of(before, comm.log.snapshot())
    comm_train = sum(v[3] for k, v in delta.items() if k.split(".")[0] in STEP_PHASES)
    rec = {
        "epoch": epoch, "loss": total, **metrics,
        "epoch_time_s": t1 - t0, "eval_time_s": t2 - t1,
        "comm_time_s": comm_train, "compute_time_s": max(0.0, (t1 - t0) - comm_train),
        "bytes_sent": sum(v[0] for v in delta.values()),
        "compile_time_s": compiled,  # numba compiling (or loading) kernels, within epoch_time_s
    }
    if wire is not None:
        rec["wire"] = wire
    return rec, delta
