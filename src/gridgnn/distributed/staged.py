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

What it cannot show: a started collective's inputs are copied to the host when it starts, and gloo moves them on a
host thread, so the ordering of NCCL's streams against the computation (a missing stream wait, a send buffer
written while in flight) is not exercised — that needs NCCL on several GPUs.
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


class _Arrival:
    """A staged collective's handle: waiting waits for gloo, then copies what arrived into the device tensors."""

    def __init__(self, work, back: list):
        self._work, self._back = work, back

    def wait(self) -> bool:
        if self._work is not None:
            self._work.wait()
            self._work = None
        for device_tensor, host_tensor in self._back:
            # written into the storage as a backend writes (``.data``: the autograd version counter is left alone,
            # as a collective leaves it; a copy_ on the tensor would bump it and fail a backward that saved it)
            device_tensor.data.copy_(host_tensor)
        self._back = []
        return True


def _finish(work, back: list, async_op: bool):
    arrival = _Arrival(work, back)
    if async_op:
        return arrival
    arrival.wait()
    return None


class HostStaged:
    """The collectives :class:`~gridgnn.distributed.comm.Comm` calls, with ``torch.distributed``'s signatures,
    staged through host buffers. ``calls`` counts each kind (the tests read it to see that every one was staged)."""

    ReduceOp = dist.ReduceOp

    def __init__(self):
        self.calls: Counter = Counter()

    def broadcast(self, tensor, src, group=None, async_op=False):
        self.calls["broadcast"] += 1
        root = dist.get_rank() == src
        h = _host(tensor) if root else _landing(tensor)
        work = dist.broadcast(h, src=src, group=group, async_op=async_op)
        return _finish(work, [] if root else [(tensor, h)], async_op)  # (the root's tensor is left as it is)

    def reduce(self, tensor, dst, op=dist.ReduceOp.SUM, group=None, async_op=False):
        self.calls["reduce"] += 1
        h = _host(tensor)
        work = dist.reduce(h, dst=dst, op=op, group=group, async_op=async_op)
        # only the root's tensor receives the sum (gloo may use the others' buffers as scratch; NCCL leaves them)
        return _finish(work, [(tensor, h)] if dist.get_rank() == dst else [], async_op)

    def all_reduce(self, tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):
        self.calls["all_reduce"] += 1
        h = _host(tensor)
        return _finish(dist.all_reduce(h, op=op, group=group, async_op=async_op), [(tensor, h)], async_op)

    def gather(self, tensor, gather_list=None, dst=0, group=None, async_op=False):
        self.calls["gather"] += 1
        got = None if gather_list is None else [_landing(t) for t in gather_list]
        work = dist.gather(_host(tensor), got, dst=dst, group=group, async_op=async_op)
        return _finish(work, [] if got is None else list(zip(gather_list, got)), async_op)

    def all_gather(self, tensor_list, tensor, group=None, async_op=False):
        self.calls["all_gather"] += 1
        got = [_landing(t) for t in tensor_list]
        work = dist.all_gather(got, _host(tensor), group=group, async_op=async_op)
        return _finish(work, list(zip(tensor_list, got)), async_op)

    def all_to_all_single(self, output, input, output_split_sizes=None, input_split_sizes=None, group=None,
                          async_op=False):
        self.calls["all_to_all_single"] += 1
        h = _landing(output)
        work = dist.all_to_all_single(h, _host(input), output_split_sizes, input_split_sizes, group=group,
                                      async_op=async_op)
        return _finish(work, [(output, h)], async_op)


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
