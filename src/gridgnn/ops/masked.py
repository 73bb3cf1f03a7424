"""Inverted-dropout scaling by a given boolean mask, as an autograd Function that keeps only the mask (1 byte per
element) for its backward. The masks themselves (keyed hashes) are drawn in :mod:`gridgnn.nn.dropout`."""
from __future__ import annotations

import torch

from . import kernels


def scale_masked(x: torch.Tensor, mask: torch.Tensor, q: float) -> torch.Tensor:
    """``x / q`` where ``mask`` (bool, same shape), else 0: the bits of ``x * mask / q`` (no autograd)."""
    if kernels.fused(x):
        return kernels.masked_scale(x, mask, q)  # one pass
    return x.div(q).mul_(mask)


class MaskedScale(torch.autograd.Function):
    """``x ⊙ mask / q`` keeping only the boolean mask for the backward (the same bits as
    ``x * mask.to(x.dtype) / q``: a kept entry is ``x / q``)."""

    @staticmethod
    def forward(ctx, x, mask, q):
        ctx.q = q
        ctx.save_for_backward(mask)
        return scale_masked(x, mask, q)

    @staticmethod
    def backward(ctx, dy):
        (mask,) = ctx.saved_tensors
        return scale_masked(dy, mask, ctx.q), None, None
