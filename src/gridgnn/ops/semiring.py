r"""Sparse × dense products over semirings (SC'23 §4.3), local to one block: the reference composition of torch ops.

.. math:: Y_{u,f} = \bigoplus_{v : (u,v) \in E} \alpha_{uv} \otimes X_{v,f}

=============  ==================  ===============================  ===========================================
semiring       ⊗ (message)         ⊕                                a row without a message
=============  ==================  ===============================  ===========================================
``sum``        ``α · x``           sum                              0
``mean``       ``α · x``           sum / number of messages         0
``max``        ``α · x``           max                              0 (PyG's empty aggregation)
``min``        ``α · x``           min                              0
``max-plus``   ``α + x``           max (tropical, SC'23 §4.3)       0
``min-plus``   ``α + x``           min (tropical)                   0
=============  ==================  ===============================  ===========================================

``values`` may be ``None``: α = 1 for the ``·`` semirings, α = 0 for the ``+`` ones (plain neighbourhood
aggregation). ``mask`` (a boolean per edge) removes edges from the product (a message that does not exist;
GraphSAGE aggregates over the neighbours without the vertex itself). Gradients (:func:`semiring_backward`):
``sum``/``mean`` are linear; the selecting semirings route ``∂Y_{u,f}`` to the edge that attains the optimum —
ties go to the **smallest source column** (the first edge of the row in CSR order) — i.e. ``∂X_{v,f} += α ∂Y_{u,f}``
(``·``) or ``∂Y_{u,f}`` (``+``), and ``∂α`` of that edge gets ``∂Y_{u,f} X_{v,f}`` (``·``) or ``∂Y_{u,f}`` (``+``).

A distributed layout combines *partials*: ``(sum, count)`` for ``sum``/``mean`` (added across ranks), ``(best,
edge)`` for the selecting semirings (best: −∞/+∞ where a row has no message; edge: the chosen edge, −1 for none),
combined with the semiring's ⊕ (an all-reduce ``max``/``min``) before :func:`finish` turns them into ``Y``.
Messages are formed for bounded runs of whole rows, never for every edge × feature at once.
"""
from __future__ import annotations

import numpy as np
import torch

from .pattern import Pattern, SDDMM_CHUNK_ELEMENTS, add_at, row_reduce, sddmm_dot, spmm

SEMIRINGS = ("sum", "mean", "max", "min", "max-plus", "min-plus")
SELECTING = ("max", "min", "max-plus", "min-plus")
_BIG = torch.iinfo(torch.int64).max


def check_semiring(semiring: str) -> None:
    if semiring not in SEMIRINGS:
        raise ValueError(f"unknown semiring {semiring!r}; choose one of {', '.join(SEMIRINGS)}")


def is_max(semiring: str) -> bool:
    return semiring in ("max", "max-plus")


def is_plus(semiring: str) -> bool:
    return semiring.endswith("-plus")


def _row_runs(pat: Pattern, width: int) -> list[tuple[int, int, int, int]]:
    """``(r0, r1, e0, e1)``: runs of whole rows whose edges × ``width`` stay near the chunk bound — found once per
    pattern and bound (kept on the pattern: on a device the pointer is read back once, not at every product)."""
    step = max(1, SDDMM_CHUNK_ELEMENTS // max(1, width))
    runs = pat.derived.get(("row_runs", step))
    if runs is not None:
        return runs
    crow = np.asarray(pat.crow.cpu().numpy(), dtype=np.int64)
    m, r0, runs = pat.shape[0], 0, []
    while r0 < m:
        e0 = int(crow[r0])
        r1 = int(np.searchsorted(crow, e0 + step, side="right")) - 1
        r1 = min(m, max(r1, r0 + 1))
        runs.append((r0, r1, e0, int(crow[r1])))
        r0 = r1
    pat.derived[("row_runs", step)] = runs
    return runs


def _messages(semiring, values, x, col, e0, e1):
    xs = x[col[e0:e1]]
    if values is None:
        return xs
    a = values[e0:e1].unsqueeze(1)
    return xs + a if is_plus(semiring) else xs * a


def partial(pat: Pattern, values: torch.Tensor | None, x: torch.Tensor, semiring: str,
            mask: torch.Tensor | None = None, key: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    r"""This block's partial product: ``(sum, count)`` (``m × W``, ``m × 1``) for ``sum``/``mean``, ``(best,
    edge)`` (``m × W`` each) for the selecting semirings (see the module docstring). ``key``: the tie-break key of
    every edge (int64, distinct within a row; default its column) — distributed layouts pass the source's
    original vertex id, so ties resolve as in the serial run whatever the permutation."""
    check_semiring(semiring)
    m, width = pat.shape[0], x.shape[1]
    if semiring in ("sum", "mean"):
        vals = values if values is not None else x.new_ones(pat.nnz)
        if mask is not None:
            vals = vals * mask.to(vals.dtype)
        total = spmm(pat, vals, x) if pat.nnz else x.new_zeros((m, width))
        ones = mask.to(x.dtype) if mask is not None else x.new_ones(pat.nnz)
        count = row_reduce(pat, ones.unsqueeze(1), "sum")  # (fused: a segmented sum over the CSR)
        return total, count
    fill = float("-inf") if is_max(semiring) else float("inf")
    best = x.new_full((m, width), fill)
    edge = torch.full((m, width), -1, dtype=torch.int64, device=x.device)
    if pat.nnz == 0 or width == 0:
        return best, edge
    red = "amax" if is_max(semiring) else "amin"
    row = pat.row
    for r0, r1, e0, e1 in _row_runs(pat, width):
        if e1 == e0:
            continue
        msg = _messages(semiring, values, x, pat.col, e0, e1)
        local = (row[e0:e1].long() - r0).unsqueeze(1).expand_as(msg)  # scatter_reduce's index: int64
        if mask is not None:
            msg = msg.masked_fill(~mask[e0:e1].unsqueeze(1), fill)
        b = best[r0:r1].scatter_reduce(0, local, msg, reduce=red, include_self=True)
        best[r0:r1] = b
        hit = (msg == b.gather(0, local)) & torch.isfinite(msg)
        keys = (pat.col if key is None else key)[e0:e1].long().unsqueeze(1).expand_as(msg)
        cand = torch.where(hit, keys, torch.full_like(keys, _BIG))
        low = torch.full((r1 - r0, width), _BIG, dtype=torch.int64, device=x.device)
        low = low.scatter_reduce(0, local, cand, reduce="amin", include_self=True)  # the smallest key attaining it
        ids = torch.arange(e0, e1, device=x.device).unsqueeze(1).expand_as(msg)
        cand = torch.where(hit & (keys == low.gather(0, local)), ids, torch.full_like(ids, _BIG))
        first = torch.full((r1 - r0, width), _BIG, dtype=torch.int64, device=x.device)
        first = first.scatter_reduce(0, local, cand, reduce="amin", include_self=True)
        edge[r0:r1] = torch.where(first == _BIG, torch.full_like(first, -1), first)
    return best, edge


class Selection:
    r"""The running winners of a selecting semiring on ``rows × columns``: the value ``best`` (±∞: none yet), the
    edge that attains it (``edge``, in the caller's numbering; −1: none) and that edge's tie-break ``key``."""

    def __init__(self, semiring: str, shape: tuple[int, int], like: torch.Tensor):
        self.semiring = semiring
        self.best = like.new_full(shape, float("-inf") if is_max(semiring) else float("inf"))
        self.edge = torch.full(shape, -1, dtype=torch.int64, device=like.device)
        self.key = torch.full(shape, _BIG, dtype=torch.int64, device=like.device)

    def fold(self, b: torch.Tensor, e: torch.Tensor, keys: torch.Tensor, store: torch.Tensor | None = None) -> None:
        """Fold the partial ``(b, e)`` of more edges of the same rows (``e`` indexes ``keys``; ``store`` maps it
        to the numbering kept in ``edge``, default ``e`` itself); equal values go to the smaller key."""
        k = _key_of(keys, e)
        better = b > self.best if is_max(self.semiring) else b < self.best
        take = better | ((b == self.best) & (k < self.key))
        self.best = torch.where(take, b, self.best)
        mapped = e if store is None else torch.where(e >= 0, store[e.clamp(min=0)] if store.numel() else e, e)
        self.edge = torch.where(take, mapped, self.edge)
        self.key = torch.where(take, k, self.key)

    def settle(self, all_reduce) -> None:
        r"""Combine with the ranks that share the rows: ``all_reduce(t, op)`` reduces ``best`` with the semiring's
        ⊕, then the smallest key among the ranks attaining it (an int64 ``min``); a rank keeps its edge only where
        it holds that key (−1 elsewhere, so the backward routes each gradient once)."""
        local = self.best.clone()
        all_reduce(self.best, "max" if is_max(self.semiring) else "min")
        mine = (self.edge >= 0) & (local == self.best)
        k = torch.where(mine, self.key, torch.full_like(self.key, _BIG))
        all_reduce(k, "min")
        self.edge = torch.where(mine & (self.key == k), self.edge, torch.full_like(self.edge, -1))

    def rows(self, r0: int, r1: int) -> "Selection":
        """The winners of rows ``r0:r1`` (views)."""
        out = Selection.__new__(Selection)
        out.semiring, out.best, out.edge, out.key = self.semiring, self.best[r0:r1], self.edge[r0:r1], \
            self.key[r0:r1]
        return out


def _key_of(keys: torch.Tensor, edge: torch.Tensor) -> torch.Tensor:
    """The key of each indexed edge (−1 entries: the largest key)."""
    if keys.numel() == 0:
        return torch.full_like(edge, _BIG)
    return torch.where(edge >= 0, keys[edge.clamp(min=0)], torch.full_like(edge, _BIG))


def finish(semiring: str, first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
    """``Y`` from the combined partials (the mean divides by the count; a row without a message gives 0)."""
    if semiring == "sum":
        return first
    if semiring == "mean":
        return first / second.clamp(min=1)
    return torch.where(torch.isfinite(first), first, torch.zeros_like(first))


def semiring_spmm(pat: Pattern, values, x, semiring: str = "sum", mask=None):
    r"""``Y`` and the state its backward needs (the count, or the chosen edges) on one block."""
    a, b = partial(pat, values, x, semiring, mask)
    return finish(semiring, a, b), b


def semiring_backward(pat: Pattern, values, x, semiring: str, dy: torch.Tensor, state: torch.Tensor, mask=None,
                      *, need_values: bool = True, need_x: bool = True):
    r"""``(∂values, ∂X)`` of :func:`semiring_spmm` (``state``: the count for ``sum``/``mean``, the chosen edge per
    ``(row, column)`` for the selecting semirings, −1 where none — after any distributed combination, so a
    column chosen on another rank routes nothing here). ``x`` (the sources) is read only for ``∂values``."""
    dvals = dx = None
    if semiring in ("sum", "mean"):
        g = dy / state.clamp(min=1) if semiring == "mean" else dy
        if need_x:
            vals = values if values is not None else dy.new_ones(pat.nnz)
            if mask is not None:
                vals = vals * mask.to(vals.dtype)
            dx = spmm(pat, vals, g.contiguous(), transpose=True)
        if need_values and values is not None:
            dvals = sddmm_dot(pat, g.contiguous(), x, 1).reshape(-1)
            if mask is not None:
                dvals = dvals * mask.to(dvals.dtype)
        return dvals, dx
    if pat.nnz == 0:
        dx = dy.new_zeros((pat.shape[1], dy.shape[1])) if need_x else None
        return (values.new_zeros(0) if need_values and values is not None else None), dx
    # every (row, column) routes its gradient to its chosen edge; one chosen nowhere (−1) routes a zero to edge 0
    # (where its entries are zeroed, not multiplied by 0: an infinite value there stays out) — so that which are
    # chosen is never read back to the host, as a nonzero() would be
    chosen = state >= 0
    e = state.clamp(min=0)
    src = pat.col.long()[e]
    f = torch.arange(dy.shape[1], device=dy.device).expand_as(e)
    if need_x:  # (flat: one index per (source, column), added in a fixed order)
        w = dy if (values is None or is_plus(semiring)) else dy * values[e]
        dx = add_at(dy.new_zeros(pat.shape[1] * dy.shape[1]), (src * dy.shape[1] + f).reshape(-1),
                    torch.where(chosen, w, 0.0).reshape(-1)).view(pat.shape[1], dy.shape[1])
    if need_values and values is not None:
        contrib = torch.where(chosen, dy if is_plus(semiring) else dy * x[src, f], 0.0)
        dvals = add_at(values.new_zeros(pat.nnz), e.reshape(-1), contrib.reshape(-1))
    return dvals, dx
