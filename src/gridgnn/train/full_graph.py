r"""The full graph as a batch source: each rank is set up (:func:`~gridgnn.train.rank_setup.setup_rank`: the data
checked before any collective, the process group, the plan and the model), and each epoch is one step on the whole
graph — the task's forward and backward with the gradient sums, one optimizer update, the task's evaluation, one
all-reduce of what the ranks counted (phase ``metrics``), the checks that end a diverged run on every rank alike.
:func:`~gridgnn.train.worker.train_worker` runs it (:class:`FullGraph`) as it runs sampled minibatches
(:class:`~gridgnn.train.minibatch.Minibatches`).

A *task* says what is trained and measured on the plan: node classification (:class:`NodeTask`: the sharded
cross-entropy of the labelled rows, accuracies) or link prediction (:class:`~gridgnn.train.link.LinkTask`: the
edge split, pairs scored by a decoder, AUC, Hits@K, MRR). Sampled minibatches run the same tasks' minibatch
forms (:mod:`gridgnn.train.minibatch`).
"""
from __future__ import annotations

import math
import time

import torch

from ..distributed.machine import device_name, measured_peak_bytes
from ..errors import GridGnnError
from ..ops.kernels import compile_seconds
from .config import TrainConfig
from .graphed import GraphedStep
from .link import LinkTask
from .loop import compiling
from .step import evaluation, forward_backward
from .tasks import NodeReport
from .rank_setup import STEP_PHASES, _gather_logits, _rank_record, _summary, delta_of, ratio, setup_rank



class NodeTask(NodeReport):
    """Node classification on the whole graph: the plan's sharded cross-entropy over the labelled training rows,
    the accuracies of the three splits (each row counted on ``plan.copies`` ranks)."""

    def __init__(self, ctx, cfg: TrainConfig, graph):
        self.cfg = cfg
        self.rs = setup_rank(ctx, cfg, graph)
        self.info = self.checkpoint_info = self.rs.info
        self.setup_bytes = sum(v.sent for v in self.rs.setup_log.values())
        self.parameters, self.replicated = [], {}
        rs = self.rs
        # --cuda-graph: the step and the evaluation recorded after their eager epochs and replayed
        self.graphed = None if not cfg.cuda_graph else GraphedStep(
            lambda e: forward_backward(rs.model, rs.plan, rs.comm, rs.data, epoch=e)[0], rs.model.parameters(),
            rs.device, evaluation=lambda: self._evaluation(rs.model))

    def train_step(self, model, epoch: int) -> torch.Tensor:
        rs = self.rs
        if self.graphed is not None:
            return self.graphed(epoch)
        loss, _ = forward_backward(model, rs.plan, rs.comm, rs.data, epoch=epoch)
        return loss

    def _evaluation(self, model) -> tuple[torch.Tensor, torch.Tensor]:
        """The logits and, on their device, this rank's counts followed by its non-finite outputs."""
        rs = self.rs
        logits, counts = evaluation(model, rs.plan, rs.comm, rs.data)
        return logits, torch.cat([counts, (~torch.isfinite(logits)).sum().double().reshape(1)])

    def _evaluated(self, model) -> tuple[torch.Tensor, torch.Tensor]:
        return self.graphed.evaluate() if self.graphed is not None else self._evaluation(model)

    def evaluate(self, model, epoch: int):
        """This rank's counts (correct and total of each split, and its non-finite outputs), and what makes the
        epoch's loss, metrics and a divergence of the sums (every row counted on ``copies`` ranks)."""
        rs = self.rs
        counts = self._evaluated(model)[1].cpu()

        def finish(vec):
            v = vec / rs.plan.copies
            problem = "the model's outputs are not finite after the update" if v[7] > 0 else None
            return float(v[0]), {"train_acc": ratio(v[1], v[2]), "val_acc": ratio(v[3], v[4]),
                                 "test_acc": ratio(v[5], v[6])}, problem

        return counts.tolist(), finish

    def logits(self, model):
        """``--save-logits``: every vertex's logits on rank 0, in original order (collective, phase ``io``)."""
        rs = self.rs
        out = self._evaluated(model)[0]
        return _gather_logits(rs.comm, out, rs.data.node_ids, rs.plan.out_cols(rs.info["classes"]), rs.info)


class FullGraph:
    r"""The full graph as the batch source (:func:`~gridgnn.train.worker.train_worker` runs it): this rank set up
    for ``cfg``'s task (:class:`NodeTask` or :class:`~gridgnn.train.link.LinkTask`: the data checked, the process
    group, the plan and the model), one training step of the whole graph per epoch, the records every rank
    gathers, the summary's full-graph keys."""

    breakdown = True  # each rank's record holds its epochs' compute and collectives (breakdown.png)

    def __init__(self, ctx, cfg: TrainConfig, graph=None):
        self.cfg = cfg
        self.task = task = LinkTask(ctx, cfg, graph) if cfg.task == "link" else NodeTask(ctx, cfg, graph)
        rs = self.rs = task.rs
        self.comm, self.plan, self.model, self.dims, self.ckpt = rs.comm, rs.plan, rs.model, rs.dims, rs.ckpt
        self.checkpoint_info, self.startup = task.checkpoint_info, rs.startup
        self.notes = task.info.get("input_notes", ())  # the loader's silent choices, one line each
        self.epochs = []  # this run's (record, per-phase communication) of each epoch
        self.original_ids, self.node_types = rs.original_ids, rs.node_types

    def progress(self) -> dict:
        """The console's count: epochs."""
        cfg = self.cfg
        return dict(total=cfg.epochs, initial=0 if self.ckpt is None else self.ckpt["epoch"],
                    desc=f"{'link ' if cfg.task == 'link' else ''}{cfg.algo} P={self.comm.grid.world_size}")

    def line(self, r: dict) -> str:
        return f"{self.task.line(r)} | {_step_line(r)}"

    def epoch(self, epoch: int, opt, console) -> dict:
        rec, delta = _epoch(self.task, self.model, opt, self.comm, epoch, self.rs.device)
        self.epochs.append((rec, delta))
        console.advance()
        return rec

    def rank_record(self) -> dict:
        """What this rank reports (gathered once, phase ``io``): its traffic per epoch, its shards, its memory."""
        rs = self.rs
        rank = self.comm.grid.global_rank
        mine = _rank_record(rank, self.epochs, self.task.setup_bytes, self.plan.shard_nnz())
        mine["estimated_peak_memory_bytes"] = None if rs.memory is None else rs.memory.ranks[rank].total
        mine["peak_memory_bytes"] = measured_peak_bytes(rs.device)
        mine["device"] = device_name(rs.device)
        return mine

    def gather(self, mine: dict, logits: bool) -> tuple[list, object]:
        """Every rank's record, then (``logits``) every vertex's logits on rank 0 (phase ``io``)."""
        comm = self.comm
        with comm.phase("io"):
            everyone = comm.all_gather_json(mine, comm.grid.names)
            return everyone, self.task.logits(self.model) if logits else None

    def summary(self, history, everyone, wall: float, resumed_from) -> dict:
        return _summary(self.cfg, self.task.info, self.comm.grid.world_size, self.comm.grid, history, self.epochs,
                        everyone, wall, resumed_from=resumed_from, wire=self.comm.wire,
                        startup_s=self.startup.summary(), **self.task.summary_fields())

    def final(self, summary: dict) -> str:
        return (f"{self.task.final(summary)}, epoch {summary['epoch_time_median_s'] * 1e3:.1f} ms median, "
                f"{summary['comm_bytes_per_epoch']['total'] / 1e6:.3f} MB moved per epoch (all ranks), "
                f"adjacency shards nnz max/mean {summary['nnz_max_over_mean']:.3f}")


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
