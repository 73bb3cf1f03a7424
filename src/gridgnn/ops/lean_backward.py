r"""Backward passes that hold fewer ``n × f`` tensors at once, with the bits of torch's own (but for the one sum
named below).

A layer's backward peaks where it holds the most node-sized tensors together: the activations the forward saved for
the layers below, the gradient arriving, and what it makes of it. What lowers that peak:

* :func:`relu` — ``torch.relu`` whose backward masks the gradient in place where autograd handed it over alone
  (:func:`gridgnn.ops.owned.owned`: nothing else refers to it; the dropout's backward,
  :class:`gridgnn.ops.masked.MaskedScale`, does the same);
* :func:`product` — ``h @ w`` whose backward makes the weight's gradient first and lets the input it unpacked go
  before it makes the input's: where the input is a dropout's output kept as its input and mask
  (:func:`gridgnn.ops.masked.recomputing`), the recomputed tensor and the input's gradient are then never alive
  together. Such an input of more than :data:`~gridgnn.ops.masked.RECOMPUTE_BLOCK` elements is not even made whole:
  the weight's gradient is summed over blocks of its rows, each recomputed in turn (:func:`keep_input`,
  :func:`weight_grad`; every family's product, Plexus' too) — its sums in another order than one product's.

Where no gradient is recorded, under a ``torch.func`` transform, or (``product``) for operands other than two
matrices, both are torch's own operation.

On GCN's last layer (128 → 8 on 10⁵ vertices) the backward held the saved activations, the recomputed dropout
output, its gradient and the dropout's gradient at once; now the activations and one of the others.
"""
from __future__ import annotations

import torch

from . import masked
from .owned import owned, plain, read_alone


class _ReLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = torch.relu(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, dy):
        mine = owned(dy)
        (y,) = ctx.saved_tensors
        if mine:  # torch.relu's backward, written over the gradient it reads
            return torch.ops.aten.threshold_backward.grad_input(dy, y, 0, grad_input=dy)
        return torch.ops.aten.threshold_backward(dy, y, 0)


def relu(x: torch.Tensor) -> torch.Tensor:
    """``torch.relu(x)`` (the same bits forward and backward) whose backward overwrites the gradient it receives
    where that is :func:`owned`."""
    if plain(x):
        return torch.relu(x)
    read_alone()
    return _ReLU.apply(x)


def _column_major(t: torch.Tensor) -> bool:
    """A matrix laid out by columns, for which torch's ``mm`` backward computes its gradient transposed (torch's own
    test of the strides alone, a dimension of 1 included)."""
    return t.layout == torch.strided and t.stride(0) == 1 and t.stride(1) == t.shape[0]


def keep_input(ctx, h: torch.Tensor | None, *rest) -> None:
    """``ctx.save_for_backward(h, *rest)`` for a product's weight gradient ``hᵀ ∂Y`` (:func:`weight_grad`) — but
    where ``h`` is a dropout's output of more than :data:`~gridgnn.ops.masked.RECOMPUTE_BLOCK` elements kept as its
    input and mask (:func:`~gridgnn.ops.masked.recipe_in_blocks`), those instead: the backward then recomputes ``h``
    a block of rows at a time, never whole. :func:`kept_input` gives them back."""
    recipe = masked.recipe_in_blocks(h)
    if recipe is None:
        ctx.blocks = None
        ctx.save_for_backward(h, *rest)
    else:  # (the input, checked unchanged in the backward, a change named; the mask where kept, not drawn again)
        ctx.blocks = recipe.q, (recipe.mask if recipe.redrawn else None)
        masked.name_a_change(recipe.source)
        ctx.save_for_backward(recipe.source, None if recipe.redrawn else recipe.mask, *rest)


def kept_input(ctx) -> tuple:
    """What :func:`keep_input` saved: ``(h, *rest)``, ``h`` a tensor or a :class:`~gridgnn.ops.masked.RowBlocks` —
    made whole where the backward builds a graph (``create_graph``: the blocks' sums would not reach the history of
    the dropout's input, which the whole output's do)."""
    if ctx.blocks is None:
        return ctx.saved_tensors
    q, redraw = ctx.blocks
    saved = ctx.saved_tensors  # (a changed dropout input is refused here, named: masked.name_a_change; ctx keeps no
    # reference to it, which would hold it through the rest of the backward)
    x, mask = saved[:2]
    blocks = masked.RowBlocks(x, mask if redraw is None else redraw(), q)
    return (blocks.whole() if torch.is_grad_enabled() else blocks, *saved[2:])


def weight_grad(h, dy: torch.Tensor, by_columns: bool = False) -> torch.Tensor:
    """``hᵀ dy`` of an input :func:`kept_input` gave back; ``by_columns``: as ``(dyᵀ h)ᵀ`` (torch's ``mm``
    backward for a weight laid out by columns)."""
    if isinstance(h, masked.RowBlocks):
        return h.t_matmul(dy, by_columns)
    return (dy.t() @ h).t() if by_columns else h.t() @ dy


class _Product(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, w):
        need_h, need_w = ctx.needs_input_grad
        keep_input(ctx, h if need_w else None, w if need_h else None)
        ctx.by_columns = _column_major(h), _column_major(w)
        return h @ w

    @staticmethod
    def backward(ctx, dy):
        need_h, need_w = ctx.needs_input_grad
        h_by_columns, w_by_columns = ctx.by_columns
        h, w = kept_input(ctx)
        dw = weight_grad(h, dy, w_by_columns) if need_w else None  # (torch's mm backward, each layout's formula)
        del h  # (a recomputed dropout output goes here, before the input's gradient is made)
        dh = None
        if need_h:
            dh = (w @ dy.t()).t() if h_by_columns else dy @ w.t()
        return dh, dw


def product(h: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``h @ w`` (the same bits forward and backward, but for an input recomputed by blocks: :func:`keep_input`)
    whose backward, for two matrices, makes ``w``'s gradient, lets the ``h`` it unpacked go, then makes ``h``'s."""
    if h.dim() != 2 or w.dim() != 2 or plain(h, w):
        return h @ w
    read_alone()
    return _Product.apply(h, w)
