r"""Backward passes that hold fewer ``n × f`` tensors at once, with the bits of torch's own.

A layer's backward peaks where it holds the most node-sized tensors together: the activations the forward saved for
the layers below, the gradient arriving, and what it makes of it. Three things lower that peak:

* :func:`owned` — whether the gradient autograd hands a backward is that backward's alone, so it may be overwritten
  instead of a new tensor made beside it: nothing else refers to its tensor (a gradient handed to several functions,
  kept by a hook or given by the caller is shared) or to its storage (a view of another gradient), and no graph of
  the backward is being built. It is the rule torch's gradient accumulation follows to take a gradient over.
  The dropout's backward (:class:`gridgnn.ops.masked.MaskedScale`) and :func:`relu`'s write into such a gradient;
* :func:`relu` — ``torch.relu`` whose backward masks an owned gradient in place;
* :func:`product` — ``h @ w`` whose backward makes the weight's gradient first and lets the input it unpacked go
  before it makes the input's: where the input is a dropout's output kept as its input and mask
  (:func:`gridgnn.ops.masked.recomputing`), the recomputed tensor and the input's gradient are then never alive
  together.

On GCN's last layer (128 → 8 on 10⁵ vertices) the backward held the saved activations, the recomputed dropout
output, its gradient and the dropout's gradient at once; now the activations and one of the others.
"""
from __future__ import annotations

import torch

_USE_COUNT = getattr(torch.Tensor, "_use_count", None)
_STORAGE_USE_COUNT = getattr(torch._C, "_storage_Use_Count", None)


def _storage_refs(t: torch.Tensor) -> int:
    """References to ``t``'s storage, counting the one the query itself holds."""
    storage = t.untyped_storage()
    return _STORAGE_USE_COUNT(storage._cdata)


def _alone_counts() -> tuple[int, int] | None:
    """The counts :func:`owned` reads of a tensor nothing else refers to, on this torch (``None``: it cannot say)."""
    if _USE_COUNT is None or _STORAGE_USE_COUNT is None:
        return None
    probe = torch.empty(1)
    return probe._use_count(), _storage_refs(probe)


_ALONE = _alone_counts()


def owned(grad: torch.Tensor) -> bool:
    """Whether ``grad``, a gradient autograd handed a backward, may be overwritten by it (see the module
    docstring): a dense tensor that is all of its storage, referred to by nothing but the caller's name for it,
    outside a backward that builds a graph (``create_graph``)."""
    return (_ALONE is not None and not torch.is_grad_enabled() and grad.layout == torch.strided
            and grad.is_contiguous() and grad.storage_offset() == 0
            and grad.numel() * grad.element_size() == grad.untyped_storage().nbytes()
            and (grad._use_count(), _storage_refs(grad)) == _ALONE)


class _ReLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = torch.relu(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, dy):
        (y,) = ctx.saved_tensors
        if owned(dy):  # torch.relu's backward, written over the gradient it reads
            return torch.ops.aten.threshold_backward.grad_input(dy, y, 0, grad_input=dy)
        return torch.ops.aten.threshold_backward(dy, y, 0)


def relu(x: torch.Tensor) -> torch.Tensor:
    """``torch.relu(x)`` (the same bits forward and backward) whose backward overwrites the gradient it receives
    where that is :func:`owned`."""
    return _ReLU.apply(x)


class _Product(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, w):
        need_h, need_w = ctx.needs_input_grad
        ctx.save_for_backward(h if need_w else None, w if need_h else None)
        return h @ w

    @staticmethod
    def backward(ctx, dy):
        need_h, need_w = ctx.needs_input_grad
        h, w = ctx.saved_tensors
        dw = h.mT @ dy if need_w else None
        del h  # (a recomputed dropout output goes here, before the input's gradient is made)
        return (dy @ w.mT if need_h else None), dw


def product(h: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``h @ w`` for a 2-D ``h`` and ``w`` (the same bits forward and backward) whose backward makes ``w``'s gradient,
    lets the ``h`` it unpacked go, then makes ``h``'s."""
    return _Product.apply(h, w)
