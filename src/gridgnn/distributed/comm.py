r"""The one instrumented communication layer. Nothing else in gridgnn imports ``torch.distributed``
for data movement (``distributed/launch.py`` only initializes and tears down the process group;
``distributed/staged.py`` is the host-staged form of the same calls, a test mode in which ranks share a GPU).

Every call names a mesh axis (``"p"``, ``"row"``, ``"rep"``, ...) and a collective tag; the phase prefix
(``fwd``, ``bwd``, ``grad``, ``eval``, ``metrics``, ``setup``, ``io``) comes from :meth:`Comm.phase`. Each rank
records, per ``"<phase>.<collective>"`` key, bytes sent, bytes received, number of calls and wall seconds.

Accounting convention (per rank, bytes under the standard algorithm of each collective; ``M`` = message
bytes, ``g`` = group size; a group of size 1 moves nothing and is not called):

* broadcast — the root sends ``M`` once (pipelined ring), every other member receives ``M``;
* reduce (the adjoint of a broadcast) — every other member sends ``M``, the root receives ``M`` once;
* all-to-all(v) and point-to-point — the actual per-peer sizes (data to/from oneself is not counted);
* all-reduce — ring: ``2(g−1)/g · M`` sent and the same received;
* all-gather and reduce-scatter — ``(g−1)/g`` of the full (gathered / input) buffer each way; row blocks of
  different heights are padded to the largest for an all-gather (the padded bytes are what moves and what is
  recorded), and a reduce-scatter of unequal pieces records the actual piece sizes;
* small JSON objects (``all_gather_json``: reports, panel sizes at set-up) are recorded as calls with 0 bytes —
  they are metadata, not model data. Nothing is pickled on the wire: a peer cannot make a rank run code.

Wire precision (:mod:`gridgnn.distributed.wire`): a call that carries node data says ``wire=True`` (``execute``: a
record that is not ``exact``); with a :class:`~gridgnn.distributed.wire.WirePolicy` set, its floating data crosses
in the narrow type — the bytes recorded are the narrow ones (``reduce`` then sums padded pieces, gathered onto the root, and an
all-reduce as an all-to-all of padded pieces, a local sum and an all-gather: ``2(g−1)·⌈numel/g⌉`` elements each
way), and every sum is taken in the tensor's own type.

A collective that fails (``--timeout`` passed because a peer stalled, or a peer went away) raises
:class:`~gridgnn.errors.CommFailure` naming the rank, the collective, the axis and the phase.

The bytes of each call come from :mod:`gridgnn.distributed.accounting`, the functions the byte models
(``gridgnn.planner.primitives``) sum over a layout's schedule: one convention, written once.
"""
from __future__ import annotations

import contextlib
import json
import math
import re
import time
from collections import defaultdict
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from ..errors import CommFailure, GridGnnError
from . import accounting, staged
from .wire import WIRE_PHASES


@dataclass
class PhaseStats:
    sent: float = 0.0
    recv: float = 0.0
    calls: int = 0
    seconds: float = 0.0


class DeviceSpan:
    """An interval on the device: CUDA events recorded on the current stream at its start and its :meth:`stop`, so
    timing a collective queues two markers instead of synchronizing the device (which would forbid overlap). Its
    seconds are read once both have happened (:attr:`CommLog.stats` settles the spans it holds)."""

    def __init__(self):
        self.start = torch.cuda.Event(enable_timing=True)
        self.start.record()
        self.end = None

    def stop(self) -> "DeviceSpan":
        self.end = torch.cuda.Event(enable_timing=True)
        self.end.record()
        return self

    def seconds(self) -> float:
        self.end.synchronize()
        return self.start.elapsed_time(self.end) / 1e3


@dataclass
class CommLog:
    """Per-rank record: ``stats[key]`` with key ``"<phase>.<collective>"``. Seconds are host seconds, or
    :class:`DeviceSpan` s on a GPU, read when :attr:`stats` is."""

    _stats: dict = field(default_factory=lambda: defaultdict(PhaseStats))
    _spans: list = field(default_factory=list)

    @property
    def stats(self) -> dict:
        if self._spans:
            spans, self._spans = self._spans, []
            for key, span in spans:
                self._stats[key].seconds += span.seconds()
        return self._stats

    def _add_seconds(self, s: PhaseStats, key: str, seconds) -> None:
        if isinstance(seconds, DeviceSpan):
            self._spans.append((key, seconds))
        else:
            s.seconds += seconds

    def record(self, key: str, sent: float, recv: float, seconds, calls: int = 1) -> None:
        s = self._stats[key]
        s.sent += sent
        s.recv += recv
        s.calls += calls
        self._add_seconds(s, key, seconds)

    def add_seconds(self, key: str, seconds) -> None:
        """Time a started collective kept this rank waiting (:class:`Pending`), added to its call's record."""
        self._add_seconds(self._stats[key], key, seconds)

    def reset(self) -> None:
        self._stats = defaultdict(PhaseStats)
        self._spans = []

    def snapshot(self) -> dict:
        return {k: PhaseStats(v.sent, v.recv, v.calls, v.seconds) for k, v in self.stats.items()}


class Pending:
    r"""A collective started early (``async_op=True``): :meth:`wait` blocks until it has arrived and returns its
    result. Its bytes are recorded when it starts; its seconds are the time :meth:`wait` kept this rank waiting —
    the part of the transfer the computation in between did not hide."""

    def __init__(self, comm, tag: str, axis, work, finish, *, timed: bool = True):
        self._comm, self._tag, self._axis, self._work, self._finish = comm, tag, axis, work, finish
        self._key = f"{comm._phase}.{tag}"
        self._done, self._result = False, None
        self._timed = timed  # False: ``finish`` runs calls that record their own seconds

    @classmethod
    def done(cls, result):
        """An already finished one (a group of one, or a probe of the ``auto`` guard, which runs in place)."""
        p = cls.__new__(cls)
        p._done, p._result = True, result
        return p

    def wait(self):
        if not self._done:
            comm = self._comm
            began = comm._begin()
            if self._work is not None:
                try:
                    self._work.wait()
                except RuntimeError as exc:
                    raise CommFailure(comm._describe(exc, self._tag, self._axis)) from None
            if not self._timed:
                comm.log.add_seconds(self._key, comm._end(began))
            result = self._finish()  # (a narrowed reduce gathers its summed pieces here)
            if self._timed:
                comm.log.add_seconds(self._key, comm._end(began))
            self._done, self._result = True, result
        return self._result


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


class Comm:
    r"""Instrumented collectives over the axes of a :class:`gridgnn.distributed.grid.ProcessGrid`.

    Args:
        grid: the process grid (its mesh supplies one process group per axis).
        sync_cuda: on a GPU mesh, time each call on the device (CUDA events on the current stream, read when the
            log is; no synchronize), so that the recorded time is the call's; else host seconds.
        overlap: ``--overlap``: the engines start transfers early, the gradient buckets during the backward.
        grad_bucket_bytes: the gradient all-reduce's bucket size (``None``: 25 MiB).
        grad_wire: ``--grad-dtype``: the weights' gradients cross in this type, summed in theirs (``None``: as held).
    """

    def __init__(self, grid, *, sync_cuda: bool = True, ranks_per_node: int | None = None, wire=None,
                 overlap: bool = False, grad_bucket_bytes: int | None = None, grad_wire: torch.dtype | None = None):
        self.grid = grid
        self.overlap = bool(overlap)  # engines start a stage's transfer while the previous stage computes
        self.grad_bucket_bytes = grad_bucket_bytes  # the gradient all-reduce's buckets (None: 25 MiB)
        self.grad_wire = grad_wire  # --grad-dtype: the type the gradient buckets cross in (None: as held)
        self.ranks_per_node = ranks_per_node  # a job across nodes: a failure names the peers' nodes
        self.log = CommLog()
        self._phase, self._covering = "fwd", False
        self._sync = sync_cuda
        # time each call on the device with CUDA events (no device-wide synchronize: transfers may overlap compute)
        self._on_device = bool(sync_cuda) and getattr(getattr(grid, "mesh", None), "device_type", "cpu") == "cuda"
        self.wire = wire  # a WirePolicy: node data crosses narrowed (None: as held)
        self._net = staged.network()  # torch.distributed, or its host-staged form (ranks sharing a GPU: tests)

    # ------------------------------------------------------------------ bookkeeping
    @contextlib.contextmanager
    def phase(self, name: str):
        """Count the collectives inside under phase ``name`` (inside :meth:`covering_phase`: under its phase)."""
        if self._covering:
            yield
            return
        old, self._phase = self._phase, name
        try:
            yield
        finally:
            self._phase = old

    @contextlib.contextmanager
    def covering_phase(self, name: str):
        """Count every collective inside under phase ``name``, whatever phases the code it runs names: an
        evaluation pass's sampling is evaluation traffic, not the training's ``sample``."""
        with self.phase(name):
            old, self._covering = self._covering, True
            try:
                yield
            finally:
                self._covering = old

    def _run(self, fn, tag: str, axis) -> float:
        """Run one collective; returns its wall seconds. A failure of the collective (a timeout because a peer
        stalled, or a peer that went away) becomes a :class:`~gridgnn.errors.CommFailure` naming this rank,
        the collective, the axis and the phase."""
        try:
            return self._timed(fn)
        except RuntimeError as exc:  # DistBackendError and gloo/NCCL errors derive from RuntimeError
            raise CommFailure(self._describe(exc, tag, axis)) from None

    def _describe(self, exc: BaseException, tag: str, axis) -> str:
        text = str(exc)
        names = (axis,) if isinstance(axis, str) else tuple(axis)
        axes = f"axis {names[0]!r}" if len(names) == 1 else f"axes {', '.join(map(repr, names))}"
        where = (f"rank {self.grid.global_rank}: collective {tag} on {axes} in phase "
                 f"{self._phase!r}")
        m = re.search(r"[Tt]imed out[^0-9]*(\d+)\s*ms", text)
        if m or "timed out" in text.lower() or "timeout" in text.lower():
            after = f" after {int(m.group(1)) / 1000:g} s" if m else ""
            return f"{where} timed out{after} (--timeout): a peer rank is stalled or gone"
        low = text.lower()
        if any(k in low for k in ("connection closed", "connection reset", "broken pipe", "closed by peer",
                                  "end of file", "eof")):
            return f"{where} failed: a peer rank went away{self._peers(axis)}"
        first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
        return f"{where} failed: {first}"

    def _peers(self, axis) -> str:
        """Where the job spans nodes: the collective's other ranks and their nodes (one of them went away)."""
        per = self.ranks_per_node
        if not per:
            return ""
        try:
            ranks = dist.get_process_group_ranks(self.grid.group(axis))
        except (RuntimeError, ValueError, GridGnnError):  # the group is gone with its peer
            return ""
        others = [r for r in ranks if r != self.grid.global_rank]
        shown = ", ".join(f"rank {r} on node {r // per}" for r in others[:8])
        return f" ({'one of ' if len(others) > 1 else ''}{shown}{', ...' if len(others) > 8 else ''})"

    def _begin(self):
        """The start of a timed interval: a :class:`DeviceSpan` on a GPU mesh (``sync_cuda``), else the host clock."""
        return DeviceSpan() if self._on_device else time.perf_counter()

    def _end(self, began):
        """Its length: the span stopped (read later), or host seconds."""
        return began.stop() if isinstance(began, DeviceSpan) else time.perf_counter() - began

    def _timed(self, fn):
        began = self._begin()
        fn()
        return self._end(began)

    def _record(self, tag: str, sent: float, recv: float, seconds: float, calls: int = 1) -> None:
        self.log.record(f"{self._phase}.{tag}", sent, recv, seconds, calls)

    # ------------------------------------------------------------------ wire precision
    def _low(self, wire: bool, tensor: torch.Tensor):
        """The narrow type ``tensor`` may cross in here (``None``: as held)."""
        w = self.wire
        if not wire or w is None or self._phase not in WIRE_PHASES or not w.narrows(tensor):
            return None
        return w.low

    def _site(self, tag: str, axis) -> str:
        return f"{self._phase}.{tag}@{axis if isinstance(axis, str) else '+'.join(axis)}"

    def _started(self, low, tag: str, axis):
        """The wire type a started (``async_op``) call uses: ``None`` for the exact wire; ``False`` when the
        guard probes this step (the probe runs the call in place, both ways)."""
        if low is None:
            return None
        if self.wire.probing:
            return False
        return None if self._site(tag, axis) in self.wire.exact else low

    def _start(self, fn, tag: str, axis):
        """Start a collective (``fn`` calls it with ``async_op=True``); returns its work handle."""
        try:
            return fn()
        except RuntimeError as exc:
            raise CommFailure(self._describe(exc, tag, axis)) from None

    def _cast(self, t: torch.Tensor, dt, tag: str, axis) -> torch.Tensor:
        """``t`` in the wire type ``dt`` (``None``: a copy as held). float16 holds ±65504 at most: a value beyond it
        arrives as infinity, and the policy keeps what overflowed (:attr:`WirePolicy.overflow`) for the trainer,
        which ends the run on every rank with one line after the step."""
        if dt is None:
            return t.clone()
        out = t.to(dt)
        if dt == torch.float16 and self.wire is not None:
            # the collective runs in any case (the peers are in it); the trainer stops every rank alike at the step's
            # end, where it reads what the policy watched (no wait for the device here)
            self.wire.watch(t, out, f"node data of collective {tag} on axis {axis!r} in phase {self._phase!r} "
                                    f"reached {{peak}} on rank {self.grid.global_rank}, beyond float16's range "
                                    "(±65504): use --comm-dtype bfloat16 or auto")
        return out

    def _wired(self, low, tag: str, axis, run):
        """``run(dtype or None)`` → the call's result, in the narrow type unless the guard kept this site exact;
        while the guard probes, once more in the other type on the same inputs (phase ``probe``) to measure the
        error of what the members receive. ``run`` must not change its inputs."""
        site = self._site(tag, axis)
        use = None if site in self.wire.exact else low
        out = run(use)
        if self.wire.probing:
            with self.phase("probe"):
                other = run(low if use is None else None)
            narrow, exact = (out, other) if use is not None else (other, out)
            self.wire.observe(site, _flat(narrow), _flat(exact))
        return out

    # ------------------------------------------------------------------ collectives
    def _rooted(self, axis: str, root: int) -> tuple:
        """``(group, root's global rank, this rank's axis coordinate)`` of a rooted collective along ``axis``."""
        group = self.grid.group(axis)
        return group, dist.get_global_rank(group, root), self.grid.rank(axis)

    def _bcast_buffer(self, tensor: torch.Tensor, dt, sends: bool, tag: str, axis) -> torch.Tensor:
        """What a broadcast in the wire type ``dt`` moves: the root's tensor cast (``sends``), else a buffer that
        what arrives overwrites."""
        if sends:
            return self._cast(tensor, dt, tag, axis)
        return torch.empty(tensor.shape, dtype=dt or tensor.dtype, device=tensor.device)

    def broadcast(self, tensor: torch.Tensor, root: int, axis: str, tag: str = "bcast", *,
                  wire: bool = False, async_op: bool = False):
        """In-place broadcast of ``tensor`` from axis-rank ``root`` to every member of ``axis``
        (``tag`` names the record, e.g. ``bcast_sparse`` for sparse-matrix panels; ``wire``: node data;
        ``async_op``: start it and return a :class:`Pending`, whose ``wait()`` returns ``tensor`` filled)."""
        g = self.grid.size(axis)
        if g == 1:
            return Pending.done(tensor) if async_op else tensor
        group, src, me = self._rooted(axis, root)
        low = self._low(wire, tensor)
        if async_op:
            use = self._started(low, tag, axis)
            if use is False:
                return Pending.done(self.broadcast(tensor, root, axis, tag, wire=wire))
            buf = tensor if use is None else self._bcast_buffer(tensor, use, me == root, tag, axis)
            work = self._start(lambda: self._net.broadcast(buf, src=src, group=group, async_op=True), tag, axis)
            self._record(tag, *accounting.bcast(me, root, _nbytes(buf)), 0.0)

            def arrived():
                if buf is not tensor and me != root:
                    tensor.copy_(buf)
                return tensor

            return Pending(self, tag, axis, work, arrived)
        if low is None:
            secs = self._run(lambda: self._net.broadcast(tensor, src=src, group=group), tag, axis)
            self._record(tag, *accounting.bcast(me, root, _nbytes(tensor)), secs)
            return tensor

        def run(dt):
            buf = self._bcast_buffer(tensor, dt, me == root, tag, axis)
            secs = self._run(lambda: self._net.broadcast(buf, src=src, group=group), tag, axis)
            self._record(tag, *accounting.bcast(me, root, _nbytes(buf)), secs)
            return tensor if me == root else buf.to(tensor.dtype)

        out = self._wired(low, tag, axis, run)
        if me != root:
            tensor.copy_(out)
        return tensor

    def reduce(self, tensor: torch.Tensor, root: int, axis: str, tag: str = "reduce", *,
               wire: bool = False, async_op: bool = False):
        """In-place sum of ``tensor`` over ``axis`` onto axis-rank ``root`` (the adjoint of :meth:`broadcast`;
        the other members' buffers are left undefined). Narrowed (``wire``): a gather of the members' tensors onto
        the root, summed there in the tensor's type (member order; the root's own term exact). ``async_op``:
        start it and return a :class:`Pending` (``tensor`` must not change until its ``wait()``)."""
        g = self.grid.size(axis)
        if g == 1:
            return Pending.done(tensor) if async_op else tensor
        group, dst, me = self._rooted(axis, root)
        low = self._low(wire, tensor)
        if async_op:
            use = self._started(low, tag, axis)
            if use is False:
                return Pending.done(self.reduce(tensor, root, axis, tag, wire=wire))
            if use is None:
                work = self._start(lambda: self._net.reduce(tensor, dst=dst, op=dist.ReduceOp.SUM, group=group,
                                                       async_op=True), tag, axis)
                self._record(tag, *accounting.reduce(me, root, _nbytes(tensor)), 0.0)
                return Pending(self, tag, axis, work, lambda: tensor)
            work, summed = self._narrow_reduce(tensor, use, root, tag, axis, async_op=True)

            def landed():
                out = summed()
                if me == root:
                    tensor.copy_(out)
                return tensor

            return Pending(self, tag, axis, work, landed)
        if low is None:
            secs = self._run(lambda: self._net.reduce(tensor, dst=dst, op=dist.ReduceOp.SUM, group=group), tag, axis)
            self._record(tag, *accounting.reduce(me, root, _nbytes(tensor)), secs)
            return tensor

        def run(dt):
            if dt is None:
                buf = tensor.clone()
                secs = self._run(lambda: self._net.reduce(buf, dst=dst, op=dist.ReduceOp.SUM, group=group), tag, axis)
                self._record(tag, *accounting.reduce(me, root, _nbytes(buf)), secs)
                return buf if me == root else tensor  # only the root's result is defined
            began = self._begin()
            work, summed = self._narrow_reduce(tensor, dt, root, tag, axis, async_op=False)
            out = summed(work)
            self.log.add_seconds(f"{self._phase}.{tag}", self._end(began))
            return out

        out = self._wired(low, tag, axis, run)
        if me == root:
            tensor.copy_(out)
        return tensor

    def _narrow_reduce(self, tensor: torch.Tensor, dt, root: int, tag: str, axis, *, async_op: bool):
        """A sum onto ``root`` in the tensor's type with narrowed terms: ``(work, summed)``; ``summed()`` (after the
        work) returns the root's sum (``tensor`` elsewhere). Two members: a gather of the tensors and the root's sum.
        More: each member sums one of ``g`` padded pieces (an all-to-all of the pieces, the started part), and the
        root gathers the sums (when ``summed`` runs) — so the root receives about the message once, not ``g − 1``
        times. The root's own term and own piece's sum never cross, so they stay exact."""
        g = self.grid.size(axis)
        group, dst, me = self._rooted(axis, root)
        issue = self._start if async_op else self._run
        if g == 2:
            buf = self._cast(tensor.contiguous(), dt, tag, axis)
            got = [torch.empty_like(buf) for _ in range(g)] if me == root else None
            work = issue(lambda: self._net.gather(buf, got, dst=dst, group=group, async_op=async_op), tag, axis)
            self._record(tag, *accounting.gather(me, root, g, _nbytes(buf)), 0.0)

            def summed(work=work):
                if me == root:
                    return _sum_members(tensor, got, me)
                return tensor

            return (work if async_op else None), summed
        numel = tensor.numel()
        c = -(-numel // g)
        flat = tensor.new_zeros(g * c)
        flat[:numel] = tensor.reshape(-1)
        send = self._cast(flat, dt, tag, axis)
        recv = torch.empty_like(send)
        work = issue(lambda: self._net.all_to_all_single(recv, send, group=group, async_op=async_op), tag, axis)
        self._record(tag, *accounting.reduce_padded(me, root, g, c * send.element_size()), 0.0, calls=2)

        def summed(work=None):
            mine = _sum_members(flat[me * c:(me + 1) * c], list(recv.reshape(g, c)), me)
            part = self._cast(mine, dt, tag, axis)
            got = [torch.empty_like(part) for _ in range(g)] if me == root else None
            self._run(lambda: self._net.gather(part, got, dst=dst, group=group), tag, axis)
            if me != root:
                return tensor
            pieces = [mine if k == me else got[k].to(tensor.dtype) for k in range(g)]
            return torch.cat(pieces)[:numel].reshape(tensor.shape)

        return (work if async_op else None), summed

    def all_reduce(self, tensor: torch.Tensor, axis: str | tuple[str, ...], op: str = "sum", *,
                   wire: bool = False, async_op: bool = False, narrow: torch.dtype | None = None):
        """In-place all-reduce (``sum``/``max``/``min``) over one axis or a tuple of axes (the whole grid in one
        call; a sub-grid axis by axis, each recorded as its own ring). ``wire``: node data, narrowed for a sum
        (``max``/``min`` stay exact): each member's padded piece summed in the tensor's type by its owner, the
        sums all-gathered in the narrow type and rounded alike on every member. ``narrow``: a sum crosses in that
        type whatever the phase and the policy (``--grad-dtype``: the weights' gradients). ``async_op`` (exact data,
        or ``narrow``): start it and return a :class:`Pending` whose ``wait()`` returns ``tensor`` reduced (a
        sub-grid: the first axis travels meanwhile, the others run in the ``wait()``; narrowed: the all-to-all of
        the pieces travels, the local sum and the all-gather run in the ``wait()``)."""
        if not isinstance(axis, str) and len(axis) > 1 and set(axis) != set(self.grid.names):
            if async_op:
                first = self.all_reduce(tensor, axis[0], op, async_op=True, narrow=narrow)

                def rest():
                    first.wait()
                    return self.all_reduce(tensor, tuple(axis[1:]) if len(axis) > 2 else axis[1], op, narrow=narrow)

                return Pending(self, "allreduce", axis, None, rest, timed=False)
            for a in axis:
                self.all_reduce(tensor, a, op, wire=wire, narrow=narrow)
            return tensor
        g = self.grid.size(axis)
        if g == 1:
            return Pending.done(tensor) if async_op else tensor
        red = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}[op]
        group = self.grid.group(axis)
        if narrow is not None and op == "sum" and narrow.itemsize < tensor.element_size():
            work, summed = self._narrow_all_reduce(tensor, narrow, axis, async_op=async_op)
            if async_op:
                return Pending(self, "allreduce", axis, work, lambda: tensor.copy_(summed()), timed=False)
            return tensor.copy_(summed())
        if async_op:
            if wire:
                raise ValueError("Comm.all_reduce starts exact data only (async_op with wire)")
            work = self._start(lambda: self._net.all_reduce(tensor, op=red, group=group, async_op=True), "allreduce", axis)
            self._record("allreduce", *accounting.allreduce(g, _nbytes(tensor)), 0.0)
            return Pending(self, "allreduce", axis, work, lambda: tensor)
        low = self._low(wire and op == "sum", tensor)
        if low is None:
            secs = self._run(lambda: self._net.all_reduce(tensor, op=red, group=group), "allreduce", axis)
            self._record("allreduce", *accounting.allreduce(g, _nbytes(tensor)), secs)
            return tensor

        def run(dt):
            if dt is None:
                buf = tensor.clone()
                secs = self._run(lambda: self._net.all_reduce(buf, op=red, group=group), "allreduce", axis)
                self._record("allreduce", *accounting.allreduce(g, _nbytes(buf)), secs)
                return buf
            return self._narrow_all_reduce(tensor, dt, axis)[1]()

        tensor.copy_(self._wired(low, "allreduce", axis, run))
        return tensor

    def _narrow_all_reduce(self, tensor: torch.Tensor, dt, axis, *, async_op: bool = False):
        """A sum over ``axis`` with narrowed terms, added in the tensor's type: ``(work, summed)``. Each member's
        padded piece crosses in an all-to-all (the started part), ``summed()`` adds the pieces it received to its
        own, all-gathers the sums in ``dt`` and returns the result (rounded alike on every member)."""
        g, me, group = self.grid.size(axis), self.grid.rank(axis), self.grid.group(axis)
        key = f"{self._phase}.allreduce"
        numel = tensor.numel()
        c = -(-numel // g)
        flat = tensor.new_zeros(g * c)
        flat[:numel] = tensor.reshape(-1)
        send = self._cast(flat, dt, "allreduce", axis)
        recv = torch.empty_like(send)
        call = lambda: self._net.all_to_all_single(recv, send, group=group, async_op=async_op)  # noqa: E731
        work, secs = (self._start(call, "allreduce", axis), 0.0) if async_op else (None, self._run(call, "allreduce",
                                                                                                   axis))
        self.log.record(key, *accounting.allreduce_padded(g, c * send.element_size()), secs, calls=2)

        def summed():
            pieces = recv.reshape(g, c).to(tensor.dtype)
            pieces[me] = flat[me * c:(me + 1) * c]  # one's own piece never crossed the wire
            mine = self._cast(pieces.sum(dim=0), dt, "allreduce", axis)
            got = [torch.empty_like(mine) for _ in range(g)]
            self.log.add_seconds(key, self._run(lambda: self._net.all_gather(got, mine, group=group), "allreduce", axis))
            return torch.cat(got)[:numel].to(tensor.dtype).reshape(tensor.shape)

        return work, summed

    def all_to_all_v(self, send: list[torch.Tensor], recv_rows: list[int], axis: str, *,
                     wire: bool = False, joined: bool = False, async_op: bool = False):
        r"""All-to-allv of row blocks: ``send[k]`` (rows × f, contiguous) goes to axis-rank ``k``; returns
        the list of blocks received from each axis-rank (``recv_rows[k]`` rows each; ``joined``: one tensor of them
        all, in member order). ``f`` and dtype are those of the send blocks (all equal). ``wire``: node data (one's
        own block is returned as sent); ``async_op``: start it and return a :class:`Pending` (``send`` must not
        change until its ``wait()``)."""
        g = self.grid.size(axis)
        me = self.grid.rank(axis)
        if g == 1:
            out = send[0] if joined else [send[0]]
            return Pending.done(out) if async_op else out
        ref = send[0]
        tail = tuple(ref.shape[1:])
        width = math.prod(tail)
        flat_send = torch.cat([s.reshape(-1) for s in send])
        in_splits = [s.numel() for s in send]
        out_splits = [r * width for r in recv_rows]
        group = self.grid.group(axis)

        def issue(dt, start: bool):
            out = flat_send if dt is None else self._cast(flat_send, dt, "alltoallv", axis)
            flat_recv = out.new_empty(sum(out_splits))
            call = lambda: self._net.all_to_all_single(flat_recv, out, out_splits, in_splits,  # noqa: E731
                                                  group=group, async_op=start)
            work, secs = (self._start(call, "alltoallv", axis), 0.0) if start else (None, self._run(call, "alltoallv",
                                                                                                   axis))
            es = out.element_size()
            self._record("alltoallv", *accounting.alltoallv(me, [s * es for s in in_splits],
                                                            [s * es for s in out_splits]), secs)
            return work, (lambda: flat_recv if dt is None else flat_recv.to(ref.dtype))

        def shaped(flat_recv, low):
            if joined:
                got = flat_recv.reshape((sum(recv_rows),) + tail)
                if low is not None and recv_rows[me]:
                    at = sum(recv_rows[:me])
                    got[at:at + recv_rows[me]] = send[me].reshape((recv_rows[me],) + tail)
                return got
            blocks = [b.reshape((r,) + tail) for b, r in zip(flat_recv.split(out_splits), recv_rows)]
            if low is not None:
                blocks[me] = send[me].reshape((recv_rows[me],) + tail)
            return blocks

        low = self._low(wire, ref)
        if async_op:
            use = self._started(low, "alltoallv", axis)
            if use is not False:
                work, result = issue(use, True)
                return Pending(self, "alltoallv", axis, work, lambda: shaped(result(), low))
            return Pending.done(self.all_to_all_v(send, recv_rows, axis, wire=wire, joined=joined))
        if low is None:
            flat_recv = issue(None, False)[1]()
        else:
            flat_recv = self._wired(low, "alltoallv", axis, lambda dt: issue(dt, False)[1]())
        return shaped(flat_recv, low)

    def reduce_scatter_rows(self, tensor: torch.Tensor, bounds, axis: str, *, wire: bool = False) -> torch.Tensor:
        r"""Sum ``tensor`` over ``axis`` and keep rows ``bounds[k]:bounds[k+1]`` on axis-rank ``k`` (pieces may
        differ in size). Runs as an all-to-allv of the pieces plus a local sum (in the tensor's type), so the
        recorded bytes are the actual piece sizes — ``(g−1)/g`` of the buffer each way when the pieces are equal.
        ``wire``: node data (one's own piece enters the sum exact)."""
        g = self.grid.size(axis)
        if g == 1:
            return tensor
        me = self.grid.rank(axis)
        pieces = [tensor[int(bounds[k]):int(bounds[k + 1])].contiguous() for k in range(g)]
        rows = int(bounds[me + 1]) - int(bounds[me])
        tail = tuple(tensor.shape[1:])
        width = math.prod(tail)
        flat_send = torch.cat([p.reshape(-1) for p in pieces])
        in_splits = [p.numel() for p in pieces]
        out_splits = [rows * width] * g
        group = self.grid.group(axis)

        def run(dt):
            out = flat_send if dt is None else self._cast(flat_send, dt, "reducescatter", axis)
            flat_recv = out.new_empty(rows * width * g)
            secs = self._run(lambda: self._net.all_to_all_single(flat_recv, out, out_splits, in_splits, group=group),
                             "reducescatter", axis)
            es = out.element_size()
            self._record("reducescatter", *accounting.reducescatter(me, [s * es for s in in_splits]), secs)
            if dt is None:
                return flat_recv.reshape((g, rows) + tail).sum(dim=0)
            parts = flat_recv.reshape((g, rows) + tail).to(tensor.dtype)
            parts[me] = pieces[me]
            return parts.sum(dim=0)

        low = self._low(wire, tensor)
        return run(None) if low is None else self._wired(low, "reducescatter", axis, run)

    def all_gather(self, tensor: torch.Tensor, axis: str, *, wire: bool = False) -> list[torch.Tensor]:
        """All-gather equal-shape tensors along ``axis``; returns the list in axis-rank order (``wire``: node data;
        one's own entry is returned as sent)."""
        g = self.grid.size(axis)
        if g == 1:
            return [tensor]
        group = self.grid.group(axis)

        def run(dt):
            mine = tensor.contiguous() if dt is None else self._cast(tensor, dt, "allgather", axis)
            out = [torch.empty_like(mine) for _ in range(g)]
            secs = self._run(lambda: self._net.all_gather(out, mine, group=group), "allgather", axis)
            self._record("allgather", *accounting.allgather(g, _nbytes(mine)), secs)
            return out if dt is None else [o.to(tensor.dtype) for o in out]

        low = self._low(wire, tensor)
        if low is None:
            return run(None)
        out = list(self._wired(low, "allgather", axis, lambda dt: torch.stack(run(dt))).unbind(0))
        out[self.grid.rank(axis)] = tensor
        return out

    def all_gather_rows(self, tensor: torch.Tensor, axis: str, rows: list[int] | None = None, *,
                        wire: bool = False) -> list[torch.Tensor]:
        """All-gather row blocks of possibly different heights (padded to the largest, then trimmed). ``rows``:
        the heights when every member knows them (saves the size exchange); ``wire``: node data."""
        g = self.grid.size(axis)
        if g == 1:
            return [tensor]
        if rows is None:
            sizes = self.all_gather(torch.tensor([tensor.shape[0]], dtype=torch.int64, device=tensor.device), axis)
            rows = [int(s.item()) for s in sizes]
        pad = tensor  # (a copy padded to the largest height only where this block is shorter)
        if tensor.shape[0] < max(rows):
            pad = tensor.new_zeros((max(rows),) + tuple(tensor.shape[1:]))
            pad[: tensor.shape[0]] = tensor
        blocks = self.all_gather(pad, axis, wire=wire)
        return [b[:r] for b, r in zip(blocks, rows)]

    def all_gather_json(self, obj, axis) -> list:
        """Gather a small JSON-serializable object (reports, panel sizes at set-up) from every member of
        ``axis``, in axis-rank order. It travels as UTF-8 JSON in a byte tensor — never a pickle, so a peer
        cannot make this rank run code. Recorded as a call with 0 bytes (metadata, not model data). Dict keys
        come back as strings (JSON's rule)."""
        g = self.grid.size(axis)
        if g == 1:
            return [json.loads(json.dumps(obj, default=_json_default))]
        payload = torch.frombuffer(bytearray(json.dumps(obj, default=_json_default).encode()), dtype=torch.uint8)
        group = self.grid.group(axis)
        dev = self.wire_device()

        def run():
            size = torch.tensor([payload.numel()], dtype=torch.int64, device=dev)
            sizes = [torch.empty_like(size) for _ in range(g)]
            self._net.all_gather(sizes, size, group=group)
            width = max(int(s.item()) for s in sizes)
            buf = torch.zeros(width, dtype=torch.uint8, device=dev)
            buf[: payload.numel()] = payload.to(dev)
            bufs = [torch.empty_like(buf) for _ in range(g)]
            self._net.all_gather(bufs, buf, group=group)
            return [bytes(b[: int(s.item())].cpu().numpy()) for b, s in zip(bufs, sizes)]

        box = []
        secs = self._run(lambda: box.append(run()), "allgather_json", axis)
        self._record("allgather_json", 0, 0, secs)
        return [json.loads(b.decode()) for b in box[0]]

    def gather_rows(self, tensor: torch.Tensor, axis, root: int = 0) -> list[torch.Tensor] | None:
        """Gather row blocks of possibly different heights (equal trailing shape and dtype) on axis-rank
        ``root``; ``None`` on the other members. Bytes: each non-root member sends its padded block (the
        largest height), the root receives ``g − 1`` of them."""
        g = self.grid.size(axis)
        if g == 1:
            return [tensor]
        group = self.grid.group(axis)
        me = self.grid.rank(axis)
        heights = [int(t.item()) for t in
                   self.all_gather(torch.tensor([tensor.shape[0]], dtype=torch.int64, device=tensor.device), axis)]
        pad = tensor.new_zeros((max(heights),) + tuple(tensor.shape[1:]))
        pad[: tensor.shape[0]] = tensor
        out = [torch.empty_like(pad) for _ in range(g)] if me == root else None
        dst = dist.get_global_rank(group, root)
        secs = self._run(lambda: self._net.gather(pad, out, dst=dst, group=group), "gather", axis)
        self._record("gather", *accounting.gather(me, root, g, _nbytes(pad)), secs)
        return None if out is None else [b[:h] for b, h in zip(out, heights)]

    def execute(self, rec, tensor: torch.Tensor, op: str = "sum") -> torch.Tensor:
        r"""Run one record of a layout's schedule (:class:`~gridgnn.distributed.accounting.Transfer`) with
        ``tensor`` as this rank's part: ``allreduce`` (in place, ``op``), ``allgather`` (returns the members'
        pieces concatenated), ``reducescatter`` (returns this rank's summed piece). The tensor must have the
        record's rows (its first dimension; one for a scalar) and the record the grid's axis size: the byte model
        priced exactly that, so a mismatch is an engine defect and stops here rather than moving other bytes."""
        rows = {"allreduce": rec.rows, "allgather": rec.pieces[rec.me] if rec.pieces else 0,
                "reducescatter": sum(rec.pieces)}.get(rec.kind)
        if rows is None:
            raise ValueError(f"Comm.execute runs no {rec.kind!r} record")
        have = tensor.shape[0] if tensor.dim() else 1
        if have != rows or self.grid.size(rec.axis) != rec.group:
            raise RuntimeError(f"schedule record {rec.kind} on axis {rec.axis!r} (group {rec.group}) expects "
                               f"{rows} rows, the engine passed {have} (group {self.grid.size(rec.axis)})")
        if not rec.moves:
            return tensor
        wire = not rec.exact
        if rec.kind == "allreduce":
            return self.all_reduce(tensor, rec.axis, op=op, wire=wire)
        if rec.kind == "allgather":
            return torch.cat(self.all_gather_rows(tensor.contiguous(), rec.axis, rows=list(rec.pieces), wire=wire))
        if rec.kind == "reducescatter":
            bounds = [0]
            for p in rec.pieces:
                bounds.append(bounds[-1] + p)
        return self.reduce_scatter_rows(tensor.contiguous(), bounds, rec.axis, wire=wire)

    def wire_device(self):
        """Where metadata tensors live for the backend: CUDA for NCCL, CPU for gloo."""
        mesh_device = getattr(self.grid.mesh, "device_type", "cpu")
        return torch.device("cuda", torch.cuda.current_device()) if mesh_device == "cuda" else torch.device("cpu")


def _sum_members(own: torch.Tensor, got: list, me: int) -> torch.Tensor:
    """The members' terms added in member order in ``own``'s type (``own`` for member ``me``: it did not cross)."""
    total = torch.zeros_like(own)
    for k, t in enumerate(got):
        total += own if k == me else t.to(own.dtype)
    return total


def _flat(t):
    return t.reshape(-1) if isinstance(t, torch.Tensor) else torch.cat([b.reshape(-1) for b in t])


def _json_default(v):
    """numpy scalars and arrays in reports become plain JSON numbers and lists."""
    if hasattr(v, "tolist"):
        return v.tolist()
    raise TypeError(f"{type(v).__name__} is not JSON-serializable")


class NullComm(Comm):
    """The communication layer of a single process without ``torch.distributed`` (``--algo serial``)."""

    def __init__(self):
        from .grid import ProcessGrid

        super().__init__(ProcessGrid.single(), sync_cuda=False)
