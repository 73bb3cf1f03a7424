r"""Attention and aggregation in one call (GAT, AGNN; SC'23 §4.1–4.2 and the fusion of §6.2), on any distributed
graph.

.. math::
    e_{uv,h} = \begin{cases} \mathrm{LeakyReLU}(a^{dst}_{u,h} + a^{src}_{v,h}) & \text{score = "add" (GAT)} \\
    \langle a^{dst}_{u,h}, a^{src}_{v,h} \rangle & \text{score = "dot" (AGNN, per head)} \end{cases}, \quad
    \alpha = \mathrm{softmax}_v(e), \quad Y_{u,h} = \textstyle\sum_v \mathrm{drop}(\alpha_{uv,h}) X_{v,h}

:func:`attend` is, by definition, the composition of the graph's primitives
``sddmm_add → LeakyReLU | sddmm_dot → edge_softmax → masked scale → spmm`` (:func:`attend_composed`), which
runs on every layout and is what a trace records. A graph whose rows are whole on one rank with every source
it reads at hand (``serial``, ``1d-sa``) may offer ``fused_attention``: the same function as one row-parallel
kernel forward (:mod:`gridgnn.ops.attend`: numba on the CPU, Triton on a GPU) (scores, softmax and the weighted sum, with only ``K`` scalars per edge in memory) and one
backward kernel (the score gradient through the softmax and the LeakyReLU, and the destination side's gradient)
plus two transposed products for the sources — with the same communication, byte for byte, as the composition
(the same fetches forward, the same pushes backward).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..ops import attend as row_kernels
from ..ops.masked import dropped, scale_masked
from ..ops.pattern import col_sum, head_columns, spmm

SCORES = ("add", "dot")


def attend(g, a_dst: torch.Tensor, a_src: torch.Tensor, x: torch.Tensor, *, score: str, heads: int,
           slope: float = 0.2, keep: torch.Tensor | None = None, p: float = 0.0, redraw=None) -> torch.Tensor:
    r"""Attention-weighted aggregation of ``x`` over the local edges of ``g`` (see the module docstring).

    Args:
        a_dst, a_src: per-node score inputs of the destinations and the sources (``"add"``: ``n × K`` scores;
            ``"dot"``: ``n × K·F'`` features whose per-head dot products are the scores).
        x: ``n × K·F`` node tensor aggregated (head ``h`` = columns ``h·F:(h+1)·F``).
        score: ``"add"`` (GAT) or ``"dot"`` (AGNN); ``heads``: ``K``; ``slope``: LeakyReLU's (``"add"`` only).
        keep: ``nnz_local × K`` bool dropout mask of the attention coefficients, drop probability ``p``;
            ``redraw``: what draws ``keep`` again (a keyed mask, :func:`gridgnn.nn.dropout.keyed`): the backward
            draws it instead of keeping it.
    Returns: ``n × K·F``.
    """
    if score not in SCORES:
        raise ValueError(f"score must be one of {SCORES}, got {score!r}")
    fused = getattr(g, "fused_attention", None)
    if fused is not None:
        y = fused(a_dst, a_src, x, score=score, heads=heads, slope=slope, keep=keep, p=p, redraw=redraw)
        if y is not None:
            return y
    return attend_composed(g, a_dst, a_src, x, score=score, heads=heads, slope=slope, keep=keep, p=p, redraw=redraw)


def attend_composed(g, a_dst, a_src, x, *, score: str, heads: int, slope: float = 0.2, keep=None,
                    p: float = 0.0, redraw=None) -> torch.Tensor:
    """:func:`attend` as the graph's primitives (every layout; the reference of the fused kernels)."""
    if score == "add":
        e = F.leaky_relu(g.sddmm_add(a_dst, a_src), slope)
    else:
        e = g.sddmm_dot(a_dst, a_src, heads)
    alpha = g.edge_softmax(e)
    if keep is not None:
        alpha = dropped(alpha, keep, 1.0 - p, redraw)
    return g.spmm(alpha, x)


def fusable(*tensors: torch.Tensor) -> bool:
    """The fused kernels serve these tensors (CPU floats with numba, CUDA floats with Triton;
    :func:`gridgnn.ops.attend.served`)."""
    return row_kernels.served(*tensors)


class FusedAttention(torch.autograd.Function):
    """:func:`attend` on a graph with whole rows: ``sources(t)`` returns the source rows the local pattern reads
    (fetching them if need be), ``push(part, width)`` sums per-source partials into their owners' rows; ``redraw``
    (or ``None``): what draws the dropout mask ``keep`` again in the backward, instead of keeping it."""

    @staticmethod
    def forward(ctx, a_dst, a_src, x, pat, sources, push, score, heads, slope, keep, p, redraw=None):
        q = 1.0 - p
        src, xs = sources(a_src), sources(x)  # the composition's two fetches, in its order
        alpha, y = row_kernels.forward(pat, a_dst, src, xs, dot=score == "dot", heads=heads, slope=slope, keep=keep, q=q)
        ctx.pat, ctx.push, ctx.score, ctx.heads, ctx.slope, ctx.q = pat, push, score, heads, slope, q
        ctx.redraw = redraw
        ctx.save_for_backward(a_dst, src, xs, alpha, keep if redraw is None else None)
        return y

    @staticmethod
    def backward(ctx, dy):
        a_dst, src, xs, alpha, keep = ctx.saved_tensors
        if ctx.redraw is not None:
            keep = ctx.redraw()
        pat, dot = ctx.pat, ctx.score == "dot"
        g_edge, g_dst = row_kernels.backward(pat, a_dst, src, xs, dy, alpha, dot=dot, slope=ctx.slope, keep=keep,
                                         q=ctx.q)
        # the composition's backward runs spmm's (push ∂X) before the score's (push ∂a_src)
        scaled = alpha if keep is None else scale_masked(alpha, keep, ctx.q)
        dx = ctx.push(spmm(pat, scaled, dy.contiguous(), transpose=True), xs.shape[1]) \
            if ctx.needs_input_grad[2] else None
        d_src = None
        if ctx.needs_input_grad[1]:
            part = (spmm(pat, g_edge, a_dst, transpose=True, col_heads=head_columns(ctx.heads, a_dst.shape[1]))
                    if dot else col_sum(pat, g_edge))
            d_src = ctx.push(part, src.shape[1])
        return g_dst, d_src, dx, None, None, None, None, None, None, None, None, None
