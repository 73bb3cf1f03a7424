r"""The row-local kernels of the fused attention (:class:`gridgnn.parallel.attention.FusedAttention`) on a pattern
whose rows are whole, by device: the numba kernels on the CPU (:mod:`gridgnn.ops.kernels`), the Triton kernels on a
GPU (:mod:`gridgnn.ops.triton_kernels`), and their torch reference — what the Triton kernels are tested against,
and what runs where a Triton kernel could not (that kernel then turns itself off with one warning).

Per destination row ``u`` and head ``h``, with ``v`` the sources of ``u``'s edges:

.. math::
    e_{uv,h} = \mathrm{LeakyReLU}(a^{dst}_{u,h} + a^{src}_{v,h}) \text{ or } \langle a^{dst}_{u,h},
    a^{src}_{v,h}\rangle, \quad \alpha = \mathrm{softmax}_v(e), \quad
    Y_{u,h} = \textstyle\sum_v \alpha_{uv,h} / q \cdot \mathrm{keep}_{uv,h} \, X_{v,h}

and backward the score gradient :math:`\alpha(\partial\alpha - \sum_v \alpha\,\partial\alpha)` (through the
LeakyReLU) with the destinations' gradient; the sources' gradients are transposed products, the caller's.
"""
from __future__ import annotations

import torch

from . import kernels, triton_kernels
from .masked import scale_masked
from .pattern import Pattern, head_columns, reduce_rows, row_index, sddmm_dot_reference, spmm


def served(*tensors: torch.Tensor) -> bool:
    """A kernel serves these tensors: the numba kernels (CPU floats) or the Triton kernels (floats of one type on
    one CUDA device, Triton usable there and the attention's kernels not turned off)."""
    if kernels.fused(*tensors):
        return True
    devices, dtypes = {t.device for t in tensors}, {t.dtype for t in tensors}
    return (len(devices) == 1 and len(dtypes) == 1 and next(iter(dtypes)) in (torch.float32, torch.float64)
            and triton_kernels.usable(next(iter(devices))) and triton_kernels.on("attend_fwd", "attend_bwd"))


def forward(pat: Pattern, a_dst: torch.Tensor, a_src: torch.Tensor, x: torch.Tensor, *, dot: bool, heads: int,
            slope: float, keep: torch.Tensor | None, q: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``(α before dropout: nnz × K, Y: m × W)`` (see the module docstring)."""
    if kernels.fused(a_dst, a_src, x):
        return kernels.attend_forward(pat.crow, pat.col, a_dst, a_src, x, dot=dot, heads=heads, slope=slope,
                                      keep=keep, q=q)
    if triton_kernels.usable(x.device):
        out = triton_kernels.attend_forward(pat.crow, pat.col, a_dst, a_src, x, dot=dot, heads=heads, slope=slope,
                                            keep=keep, q=q)
        if out is not None:
            return out
    return forward_reference(pat, a_dst, a_src, x, dot=dot, heads=heads, slope=slope, keep=keep, q=q)


def backward(pat: Pattern, a_dst: torch.Tensor, a_src: torch.Tensor, x: torch.Tensor, dy: torch.Tensor,
             alpha: torch.Tensor, *, dot: bool, slope: float, keep: torch.Tensor | None,
             q: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``(score gradient: nnz × K, gradient of a_dst)`` of :func:`forward`."""
    if kernels.fused(a_dst, a_src, x, dy, alpha):
        return kernels.attend_backward(pat.crow, pat.col, a_dst, a_src, x, dy, alpha, dot=dot, slope=slope,
                                       keep=keep, q=q)
    if triton_kernels.usable(x.device):
        out = triton_kernels.attend_backward(pat.crow, pat.col, a_dst, a_src, x, dy, alpha, dot=dot, slope=slope,
                                             keep=keep, q=q)
        if out is not None:
            return out
    return backward_reference(pat, a_dst, a_src, x, dy, alpha, dot=dot, slope=slope, keep=keep, q=q)


def _scores(pat: Pattern, row: torch.Tensor, a_dst, a_src, *, dot: bool, heads: int, slope: float):
    """The pre-softmax scores, ``nnz × K``."""
    if dot:
        return sddmm_dot_reference(pat, a_dst, a_src, heads)
    pre = a_dst[row] + a_src[pat.col]
    return torch.where(pre > 0, pre, pre * slope)


def forward_reference(pat: Pattern, a_dst, a_src, x, *, dot: bool, heads: int, slope: float, keep, q: float):
    """:func:`forward` in torch operations (gathers, scatters, a product per head)."""
    m = pat.shape[0]
    row = row_index(pat.row, pat.crow)
    e = _scores(pat, row, a_dst, a_src, dot=dot, heads=heads, slope=slope)
    top = reduce_rows(row, m, e, "max")
    p = torch.exp(e - top[row])
    alpha = p / reduce_rows(row, m, p, "sum", pat.crow)[row]
    w = alpha if keep is None else scale_masked(alpha, keep, q)
    return alpha, spmm(pat, w, x, col_heads=head_columns(heads, x.shape[1]))


def backward_reference(pat: Pattern, a_dst, a_src, x, dy, alpha, *, dot: bool, slope: float, keep, q: float):
    """:func:`backward` in torch operations."""
    m, heads = pat.shape[0], alpha.shape[1]
    row = row_index(pat.row, pat.crow)
    da = sddmm_dot_reference(pat, dy, x, heads)
    if keep is not None:
        da = scale_masked(da, keep, q)
    g = alpha * (da - reduce_rows(row, m, alpha * da, "sum", pat.crow)[row])
    if dot:
        return g, spmm(pat, g, a_src, col_heads=head_columns(heads, a_dst.shape[1]))
    pre = a_dst[row] + a_src[pat.col]
    g = torch.where(pre > 0, g, g * slope)
    return g, reduce_rows(row, m, g, "sum", pat.crow)
