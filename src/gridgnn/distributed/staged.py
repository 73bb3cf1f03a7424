r"""Host-staged collectives: a test mode in which several ranks share one GPU.

NCCL admits one rank per GPU, so a machine with one GPU cannot run an algorithm's device code at P > 1 through it.
In this mode (``launch(..., stage_on_host=True)``; never the default, and never under torchrun) the ranks join a
gloo group and share the visible GPUs; every collective the :class:`~gridgnn.distributed.comm.Comm` issues copies
its device tensors into fresh host buffers, runs on them over gloo, and copies what arrived back into the device
tensors — at once for a blocking call, at ``wait()`` for a started one. Everything else a rank does (its kernels,
its CUDA events, the started transfers the engines overlap with compute, the narrowed wires, the gradient buckets)
runs on the device as it would under NCCL; the bytes recorded are the Comm's, counted from the tensors, so the byte
model is checked the same way. The host copies are made for host tensors too, so that on a machine without a GPU
the staging path is the one a GPU run takes (tests/parallel/test_staged.py).

A started collective keeps the contract NCCL sets, and breaking it shows. NCCL reads the tensors it sends while it
runs and writes the ones it receives at any moment before ``wait()``: a send buffer written, or a receive buffer read,
between the start and the ``wait()`` is a race there. Gloo on host copies would hide both, so a started collective
here fills what it will receive with NaN (integers: their lowest value) as soon as its inputs are copied — a read
before ``wait()`` spreads into the result, which the tests compare with the serial reference — and ``wait()`` checks
that every tensor it sends still holds, bit for bit, what it held at the start, and raises where one was written
(the Comm reports it as the collective's failure, naming it, its axis and its phase).

What it cannot show: NCCL's stream against the computation's (the engines run every kernel on the current stream;
``ProcessGroupNCCL`` makes its stream wait for that one at the start, and that one wait for its stream at ``wait()``),
and the lifetime of a buffer the allocator could hand out again while NCCL still reads it (``ProcessGroupNCCL`` keeps
the call's tensors until it is done); that needs NCCL on several GPUs.
"""
from __future__ import annotations

from collections import Counter

import torch
import torch.distributed as dist

__all__ = ["HostStaged", "STAGED", "activate", "network"]


def _contiguous(t: torch.Tensor) -> torch.Tensor:
    if not t.is_contiguous():  # (as torch.distributed refuses it: staging must not hide what NCCL would refuse)
        raise RuntimeError("Tensors must be contiguous")
    return t


def _host(t: torch.Tensor) -> torch.Tensor:
    """A fresh host copy of ``t`` (a copy for a host tensor too: the gloo call never aliases the caller's tensor)."""
    return _contiguous(t).detach().to("cpu", copy=True)


def _landing(t: torch.Tensor) -> torch.Tensor:
    """A host buffer for what arrives into ``t`` (its contents are not sent)."""
    return torch.empty(_contiguous(t).shape, dtype=t.dtype, device="cpu")


def _poison(t: torch.Tensor) -> None:
    """Fill ``t``, which a started collective will write, with what a read of it before ``wait()`` shows: NaN, or an
    integer type's lowest value (``.data``: the autograd version counter is left alone, as a backend leaves it)."""
    d = t.data
    if d.is_floating_point() or d.is_complex():
        d.fill_(float("nan"))
    elif d.dtype == torch.bool:
        d.fill_(True)
    else:
        d.fill_(torch.iinfo(d.dtype).min)


def _bits(t: torch.Tensor) -> torch.Tensor:
    """A host copy of ``t``'s bytes (a copy for a host tensor too: it must not follow later writes)."""
    return t.detach().reshape(-1).to("cpu", copy=True).view(torch.uint8)


class _Arrival:
    """A staged collective's handle: waiting waits for gloo, checks that no tensor of the collective was written
    since it started, then copies what arrived into the device tensors."""

    def __init__(self, kind: str, work, back: list, held: list):
        self._kind, self._work, self._back, self._held = kind, work, back, held

    def wait(self) -> bool:
        if self._work is not None:
            self._work.wait()
            self._work = None
        held, self._held = self._held, []
        for device_tensor, bits in held:
            if not torch.equal(_bits(device_tensor), bits):
                raise RuntimeError(f"a tensor of a started {self._kind} ({tuple(device_tensor.shape)}, "
                                   f"{device_tensor.dtype}) was written before its wait(): the engine must leave "
                                   "what a started collective sends or receives alone until then (a race under NCCL)")
        for device_tensor, host_tensor in self._back:
            # written into the storage as a backend writes (``.data``: the autograd version counter is left alone,
            # as a collective leaves it; a copy_ on the tensor would bump it and fail a backward that saved it)
            device_tensor.data.copy_(host_tensor)
        self._back = []
        return True


class HostStaged:
    """The collectives :class:`~gridgnn.distributed.comm.Comm` calls, with ``torch.distributed``'s signatures,
    staged through host buffers. ``calls`` counts each kind (the tests read it to see that every one was staged);
    ``started`` the started ones, whose received tensors were filled until their ``wait()``."""

    ReduceOp = dist.ReduceOp

    def __init__(self):
        self.calls: Counter = Counter()
        self.started: Counter = Counter()

    def _issue(self, kind: str, work, tensors: list, receives: list, async_op: bool):
        """The handle of a collective issued on host copies (``work``: gloo's): ``receives`` pairs each device tensor
        it writes with its host landing. Started: those tensors filled now (:func:`_poison`), and the bits of every
        tensor of the call (``tensors``, what it sends and receives) kept for ``wait()`` to check."""
        held = []
        if async_op:
            self.started[kind] += 1
            for device_tensor, _ in receives:
                _poison(device_tensor)
            seen = set()
            for t in tensors:
                if id(t) not in seen:
                    seen.add(id(t))
                    held.append((t, _bits(t)))
        arrival = _Arrival(kind, work, receives, held)
        if async_op:
            return arrival
        arrival.wait()
        return None

    def broadcast(self, tensor, src, group=None, async_op=False):
        self.calls["broadcast"] += 1
        root = dist.get_rank() == src
        h = _host(tensor) if root else _landing(tensor)
        work = dist.broadcast(h, src=src, group=group, async_op=async_op)
        # (the root's tensor is left as it is)
        return self._issue("broadcast", work, [tensor], [] if root else [(tensor, h)], async_op)

    def reduce(self, tensor, dst, op=dist.ReduceOp.SUM, group=None, async_op=False):
        self.calls["reduce"] += 1
        h = _host(tensor)
        work = dist.reduce(h, dst=dst, op=op, group=group, async_op=async_op)
        # only the root's tensor receives the sum (gloo may use the others' buffers as scratch; NCCL leaves them)
        return self._issue("reduce", work, [tensor], [(tensor, h)] if dist.get_rank() == dst else [], async_op)

    def all_reduce(self, tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):
        self.calls["all_reduce"] += 1
        h = _host(tensor)
        work = dist.all_reduce(h, op=op, group=group, async_op=async_op)
        return self._issue("all_reduce", work, [tensor], [(tensor, h)], async_op)

    def gather(self, tensor, gather_list=None, dst=0, group=None, async_op=False):
        self.calls["gather"] += 1
        got = None if gather_list is None else [_landing(t) for t in gather_list]
        work = dist.gather(_host(tensor), got, dst=dst, group=group, async_op=async_op)
        receives = [] if got is None else list(zip(gather_list, got))
        return self._issue("gather", work, [tensor, *(gather_list or ())], receives, async_op)

    def all_gather(self, tensor_list, tensor, group=None, async_op=False):
        self.calls["all_gather"] += 1
        got = [_landing(t) for t in tensor_list]
        work = dist.all_gather(got, _host(tensor), group=group, async_op=async_op)
        return self._issue("all_gather", work, [tensor, *tensor_list], list(zip(tensor_list, got)), async_op)

    def all_to_all_single(self, output, input, output_split_sizes=None, input_split_sizes=None, group=None,
                          async_op=False):
        self.calls["all_to_all_single"] += 1
        h = _landing(output)
        work = dist.all_to_all_single(h, _host(input), output_split_sizes, input_split_sizes, group=group,
                                      async_op=async_op)
        return self._issue("all_to_all_single", work, [input, output], [(output, h)], async_op)


STAGED = HostStaged()
_active = False


def activate(on: bool) -> None:
    """Set by :meth:`~gridgnn.distributed.launch.LaunchContext.init` for this process's group: staged or not."""
    global _active
    _active = bool(on)


def network():
    """What a :class:`~gridgnn.distributed.comm.Comm` made now issues its collectives through: :data:`STAGED` in
    a staged launch, ``torch.distributed`` otherwise."""
    return STAGED if _active else dist
