r"""Whether the gradient autograd hands a backward is that backward's alone, so that it may be written over instead of a
new tensor made beside it (:func:`owned`): nothing else refers to its tensor or its storage — not another function it
was handed to, not a hook that keeps it (a tensor's, a node's, a module's backward hook), not the caller who gave it,
not a gradient it is a view of — and no graph of the backward is being built. It is the rule torch's gradient
accumulation follows to take a gradient over, with Python's references counted too (hooks keep theirs there). The
dropout's backward (:class:`gridgnn.ops.masked.MaskedScale`) and :func:`gridgnn.ops.lean_backward.relu`'s write into
such a gradient.
"""
from __future__ import annotations

import sys
import types

import torch
from torch.utils._python_dispatch import _disable_current_modes

_USE_COUNT = getattr(torch.Tensor, "_use_count", None)
_STORAGE_USE_COUNT = getattr(torch._C, "_storage_Use_Count", None)
_INTERPRETERS = getattr(getattr(torch._C, "_functorch", None), "peek_interpreter_stack", None)


def _references(grad: torch.Tensor) -> tuple[int, int, int, int]:
    """The references to ``grad`` and to its storage, in C++ (autograd's buffers, views) and in Python (hooks, the
    caller's names), as seen from :func:`owned` called by a backward (the frames between count alike every time)."""
    storage = grad.untyped_storage()
    return grad._use_count(), _STORAGE_USE_COUNT(storage._cdata), sys.getrefcount(grad), sys.getrefcount(storage)


#: :func:`_references` of a gradient nothing else refers to, read by :class:`_Probe` the first time a model in this
#: process calls :func:`~gridgnn.ops.lean_backward.relu` or :func:`~gridgnn.ops.lean_backward.product` (or makes a
#: dropout, :func:`gridgnn.ops.masked.dropped`) — not at import: a backward there would start autograd's device
#: threads in a process that forks the ranks, which a GPU's torch then refuses in every child. ``None``: this torch
#: cannot say, and no gradient is owned
_ALONE = None
_READ = False


def owned(grad: torch.Tensor) -> bool:
    """Whether ``grad``, the gradient autograd handed the calling backward, may be overwritten by it (see the module
    docstring): a dense tensor that is all of its storage, which nothing but the backward's own name refers to,
    outside a backward that builds a graph (``create_graph``), a ``torch.func`` transform and a trace or profile
    function written in Python (a debugger's, which can hold frame locals: :func:`_traced`). The backward must call
    it as a statement of its own on its argument (``mine = owned(dy)``), as :class:`_Probe` did when it read what "alone"
    counts: a call nested in another call's arguments counts that call's references too."""
    if _ALONE is None or torch.is_grad_enabled() or grad.layout != torch.strided or not grad.is_contiguous() \
            or grad.storage_offset() or grad.numel() * grad.element_size() != grad.untyped_storage().nbytes() \
            or transformed() or _traced():
        return False
    return _references(grad) == _ALONE


def transformed() -> bool:
    """Whether a ``torch.func`` transform is in force."""
    return _INTERPRETERS is not None and _INTERPRETERS() is not None


def _traced(strict: bool = False) -> bool:
    """Whether a trace or profile function written in Python is set (a debugger's): before Python 3.13 it is handed
    frames whose locals were first copied into dicts, references :func:`_references` would count. A function in C
    (torch's profiler, coverage's tracer) copies nothing; ``strict``: any function at all."""
    hooks = [f for f in (sys.gettrace(), sys.getprofile()) if f is not None]
    return bool(hooks) if strict else any(isinstance(f, (types.FunctionType, types.MethodType)) for f in hooks)


def _as_owned_reads(grad: torch.Tensor) -> tuple[int, int, int, int]:
    """:func:`_references` read from one frame below the backward, as :func:`owned` reads them."""
    return _references(grad)


class _Probe(torch.autograd.Function):
    """Reads :data:`_ALONE`: its backward is handed a gradient that nothing else refers to."""
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, dy):
        global _ALONE
        mine = _as_owned_reads(dy)
        _ALONE = mine
        return None


def read_alone() -> None:
    """Read :data:`_ALONE` once per process (see there), outside whatever mode the caller runs under (a trace, a
    recording: they must not see the probe) and not while any trace or profile function is set (a later call reads
    it then)."""
    global _READ, _ALONE
    if _READ or _traced(strict=True):
        return
    _READ = True
    if _USE_COUNT is None or _STORAGE_USE_COUNT is None:
        return
    try:
        with _disable_current_modes(), torch._C.DisableTorchFunction(), torch.inference_mode(False), \
                torch.enable_grad():
            x = torch.zeros(2, requires_grad=True)
            (_Probe.apply(x) * 2.0).sum().backward()
    except Exception:  # noqa: BLE001 - a torch that cannot run it: nothing is owned (the safe answer)
        _ALONE = None


def plain(*tensors: torch.Tensor) -> bool:
    """Whether torch's own operation runs: no gradient recorded, or a ``torch.func`` transform in force."""
    return not (torch.is_grad_enabled() and any(t.requires_grad for t in tensors)) or transformed()
