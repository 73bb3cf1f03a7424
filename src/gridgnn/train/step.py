r"""One training step and one evaluation, shared by the trainer and the fidelity harness."""
from __future__ import annotations

import functools
import weakref
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch

from ..distributed.accounting import GRAD_BUCKET_BYTES, grad_buckets
from ..errors import GridGnnError



@dataclass
class LocalData:
    r"""This rank's blocks, as its plan lays them out.

    Attributes:
        x: the layer-0 input block (rows ``plan.in_rows(0)``, columns ``plan.in_cols(0, f)``).
        y: labels (−1 = none) and masks (name → bool) of the logits rows ``node_ids = plan.out_rows()``.
        n_train: global number of training nodes (loss normalizer).
    """

    x: torch.Tensor
    y: torch.Tensor
    masks: dict
    node_ids: np.ndarray
    n_train: int

    @functools.cached_property
    def train_rows(self) -> torch.Tensor:
        """The positions of the labelled training rows (int64, on the masks' device), found once: the loss of every
        step indexes by them (a bool mask is read back from a device at each use)."""
        return self.masks["train"].nonzero().reshape(-1)


class GradReducer:
    r"""Sums the parameter gradients of one backward over ``axis`` (phase ``grad``): each bucket
    (:func:`~gridgnn.distributed.accounting.grad_buckets`, of the Comm's ``grad_bucket_bytes``, else 25 MiB) is
    flattened, all-reduced and copied back.

    A rank's backward need not reach every parameter (a layer of one's own may leave one out where a rank's block
    or sample does not need it; its primitives, which communicate, are still called on every rank): a gradient a
    rank lacks counts as zeros in its bucket, and every bucket carries one more element per tensor, 1 where the
    rank had its gradient, summed with it (:func:`~gridgnn.distributed.accounting.grad_bucket_elements`). So every
    rank sends buckets of the same size (a mismatch would end the job in the transport, or hang it), a parameter
    some rank reached gets the sum on every rank, and one no rank reached keeps no gradient — what serial training
    does, which the optimizer's weight decay and moments tell apart from a zero gradient. Only a rank that lacked
    a gradient reads the count back from the device.

    Used as a context around the backward. Without ``comm.overlap`` every bucket is reduced after it, in bucket
    order. With it (DDP's schedule), each bucket's all-reduce starts during the backward as soon as its last
    gradient has accumulated and every earlier bucket has started, so every rank issues the same calls in the same
    order whatever order its gradients arrive in; the buffers and so the sums are the same, bit for bit. That
    needs the ``loss`` (early start is off without it): a bucket's start must fall at the same point among the
    backward's own collectives on every rank, so the parameters each rank's backward reaches (a walk of the
    loss's graph) are agreed once per model and Comm (one all-reduce of a count per tensor, phase ``setup``):
    a parameter no rank reaches counts as arrived from the start, and a bucket with a parameter only some ranks
    reach, with every bucket after it, starts after the backward on every rank. A rank whose backward reaches
    other parameters at a later step ends the run with an error (what was agreed no longer holds)."""

    def __init__(self, model: torch.nn.Module, comm, axis, *, early: bool | None = None,
                 loss: torch.Tensor | None = None):
        self.comm, self.axis, self.model = comm, axis, model
        params = [p for p in model.parameters() if p.requires_grad]
        self.active = bool(axis) and bool(params) and comm.grid.world_size > 1 and comm.grid.size(axis) > 1
        sizes = [p.numel() * p.element_size() for p in params]
        self.buckets = [[params[k] for k in b] for b in grad_buckets(sizes, comm.grad_bucket_bytes or GRAD_BUCKET_BYTES)] \
            if self.active else []
        self._early = self.active and loss is not None and (comm.overlap if early is None else early)
        self._loss = loss
        self._ready = [0] * len(self.buckets)
        self._late = len(self.buckets)  # the first bucket that starts after the backward whatever arrives
        self._started: list = []  # (bucket's parameters, which had a gradient, flat buffer, Pending) in bucket order
        self._hooks: list = []

    def __enter__(self):
        if self._early:
            unreached, self._late = self._agreed_reach()
            for k, bucket in enumerate(self.buckets):
                for p in bucket:
                    if id(p) in unreached:
                        self._ready[k] += 1
                    else:
                        self._hooks.append(p.register_post_accumulate_grad_hook(lambda _p, k=k: self._arrived(k)))
            self._arrived(None)  # (buckets no rank's backward reaches start at once, as they would at its end)
        return self

    def _agreed_reach(self) -> tuple[set, int]:
        """``(ids of the parameters no rank reaches, the first bucket that starts after the backward)``, agreed
        by the ranks at the first call for this model and Comm and checked against this rank's reach after."""
        reach = _reached_leaves(self._loss)
        ordered = [p for b in self.buckets for p in b]
        mine = tuple(id(p) in reach for p in ordered)
        agreed = _AGREED_REACH.get(self.model)
        if agreed is None or agreed.comm() is not self.comm or agreed.axis != self.axis:
            counts = ordered[0].new_tensor([float(m) for m in mine])
            with self.comm.phase("setup"):
                self.comm.all_reduce(counts, self.axis)
            everyone = self.comm.grid.size(self.axis)
            counts = [int(c) for c in counts.tolist()]
            unreached = {id(p) for p, c in zip(ordered, counts) if c == 0}
            split = {id(p) for p, c in zip(ordered, counts) if 0 < c < everyone}
            late = next((k for k, b in enumerate(self.buckets) if any(id(p) in split for p in b)), len(self.buckets))
            agreed = _Agreement(weakref.ref(self.comm), self.axis, mine, unreached, late)
            _AGREED_REACH[self.model] = agreed
        elif agreed.reach != mine:
            moved = {id(p) for p, a, b in zip(ordered, agreed.reach, mine) if a != b}
            changed = [name for name, p in self.model.named_parameters() if id(p) in moved]
            raise GridGnnError(f"--overlap: the parameters the backward of rank {self.comm.grid.global_rank} reaches "
                               f"changed since the ranks agreed on them ({', '.join(changed[:5])}); the gradient "
                               "buckets' schedule would no longer match its peers': run without --overlap")
        return agreed.unreached, agreed.late

    def _arrived(self, k: int | None) -> None:
        if k is not None:
            self._ready[k] += 1
        while len(self._started) < self._late:
            nxt = len(self._started)
            if self._ready[nxt] < len(self.buckets[nxt]):
                break
            self._start(nxt)

    def _start(self, k: int) -> None:
        bucket = self.buckets[k]
        sent = [p.grad is not None for p in bucket]
        grads = [p.grad.reshape(-1) if had else p.new_zeros(p.numel()) for p, had in zip(bucket, sent)]
        flat = torch.cat(grads + [p.new_ones(1) if had else p.new_zeros(1) for p, had in zip(bucket, sent)])
        with self.comm.phase("grad"):
            pending = self.comm.all_reduce(flat, self.axis, async_op=self._early, narrow=self.comm.grad_wire)
        self._started.append((bucket, sent, flat, pending))

    def __exit__(self, exc_type, exc, tb):
        for h in self._hooks:
            h.remove()
        self._hooks = []
        if exc_type is None:
            self.reduce()
        return False

    def reduce(self) -> None:
        """Start the buckets not yet started, wait for them all and copy the sums into the gradients."""
        if not self.active:
            return
        while len(self._started) < len(self.buckets):
            self._start(len(self._started))
        with self.comm.phase("grad"):
            for bucket, sent, flat, pending in self._started:
                if self._early:
                    pending.wait()
                counts, off = flat[flat.numel() - len(bucket):], 0
                for j, p in enumerate(bucket):
                    k = p.numel()
                    total = flat[off:off + k].view_as(p)
                    if p.grad is not None and not sent[j]:
                        name = next((n for n, q in self.model.named_parameters() if q is p), "?")
                        raise GridGnnError(
                            f"--overlap: the gradient of parameter {name!r} arrived after its bucket's all-reduce "
                            "started: it was made outside the loss's graph (a backward of its own, as a reentrant "
                            "torch.utils.checkpoint runs; use_reentrant=False keeps it in the graph); run without "
                            "--overlap")
                    if p.grad is not None:
                        p.grad.copy_(total)
                    elif counts[j].item() > 0:  # another rank reached it: the sum is its gradient here too
                        p.grad = total.clone()
                    off += k


class _Agreement(NamedTuple):
    """What the ranks agreed for :class:`GradReducer`'s early start, with one Comm over one axis."""

    comm: weakref.ref  # the Comm it was agreed with
    axis: object
    reach: tuple  # this rank's: whether its backward reached each tensor, in bucket order
    unreached: set  # ids of the tensors no rank reaches
    late: int  # the first bucket that starts after the backward


#: per model, its :class:`_Agreement`
_AGREED_REACH: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _reached_leaves(loss: torch.Tensor) -> set[int]:
    """The ids of the leaf tensors whose gradients a backward from ``loss`` accumulates (a walk of its graph)."""
    out, seen, todo = set(), set(), [loss.grad_fn]
    while todo:
        fn = todo.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        leaf = getattr(fn, "variable", None)  # (an AccumulateGrad node)
        if leaf is not None:
            out.add(id(leaf))
        todo.extend(nxt for nxt, _ in fn.next_functions)
    return out


def allreduce_grads(model: torch.nn.Module, comm, axis) -> None:
    """Sum parameter gradients over ``axis`` after a backward (phase ``grad``; :class:`GradReducer`'s buckets)."""
    GradReducer(model, comm, axis, early=False).reduce()


def forward_backward(model, plan, comm, data: LocalData, *,
                     epoch: int | torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Forward (phase ``fwd``), backward (``bwd``) and gradient reduction (``grad``); returns the local loss
    summand and the logits. The caller steps the optimizer."""
    model.train()
    model.epoch = epoch
    with comm.phase("fwd"):
        logits = model(data.x, plan)
        loss = plan.loss(logits, data.y, data.train_rows, data.n_train)
    with GradReducer(model, comm, plan.grad_axes, loss=loss), comm.phase("bwd"):
        loss.backward()  # with --overlap the gradients' buckets are summed while the backward goes on
    return loss.detach(), logits.detach()


@torch.no_grad()
def evaluation(model, plan, comm, data: LocalData) -> tuple[torch.Tensor, torch.Tensor]:
    """Eval-mode forward (phase ``eval``); returns logits and the local counts
    ``[correct_train, n_train, correct_val, n_val, correct_test, n_test]`` (float64, on the logits' device; not yet
    reduced; each row is counted on ``plan.copies`` ranks)."""
    model.eval()
    with comm.phase("eval"):
        logits = model(data.x, plan)
        pred = plan.predict(logits)
    right, counts = pred == data.y, []
    for name in ("train", "val", "test"):
        m = data.masks[name]
        counts += [(right & m).sum(), m.sum()]
    return logits, torch.stack(counts).to(torch.float64)


def evaluate(model, plan, comm, data: LocalData) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`evaluation`, the counts read to the host (one read back from a device, not six)."""
    logits, counts = evaluation(model, plan, comm, data)
    return logits, counts.cpu()
