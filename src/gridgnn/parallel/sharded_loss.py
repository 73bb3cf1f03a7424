r"""Cross-entropy and argmax over logits whose class columns are sharded along one mesh axis (Plexus'
parallel cross-entropy; the other algorithms hold every class column of their logits rows).

.. math:: \ell_i = \log \sum_c e^{z_{ic} - m_i} + m_i - z_{i, y_i}, \qquad m_i = \max_c z_{ic}

*Communication* (forward only, along ``axis``): one all-reduce(max) of ``m`` rows and one all-reduce(sum) of
``2m`` values (``m`` = labelled local rows). Backward is local: :math:`(\mathrm{softmax} - \mathrm{onehot})/N`.
Every member of the axis group holds the same rows, so each returns the full loss of those rows and the full
gradient of its own column block.
"""
from __future__ import annotations

import torch

from ..ops.loss import labelled_rows


class _ShardedCE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, y, rows, c0, comm, axis, n_train):
        z = logits.index_select(0, rows)
        yy = y.index_select(0, rows)
        c1 = c0 + z.shape[1]
        m = z.max(dim=1).values if z.shape[1] else z.new_full((z.shape[0],), float("-inf"))
        comm.all_reduce(m, axis, op="max")
        e = torch.exp(z - m.unsqueeze(1))
        local = (yy >= c0) & (yy < c1)  # the rows whose class column this rank holds (no read back: a gather)
        target = (yy - c0).clamp(0, max(z.shape[1] - 1, 0)).unsqueeze(1)
        picked = z.gather(1, target).reshape(-1) if z.shape[1] else z.new_zeros(z.shape[0])
        st = torch.stack([e.sum(dim=1), torch.where(local, picked, torch.zeros_like(picked))], dim=1)
        comm.all_reduce(st, axis, op="sum")
        loss = (torch.log(st[:, 0]) + m - st[:, 1]).sum() / n_train
        ctx.save_for_backward(e / st[:, 0:1], rows, local, target)
        ctx.n_train, ctx.shape = n_train, logits.shape
        return loss

    @staticmethod
    def backward(ctx, grad):
        soft, rows, local, target = ctx.saved_tensors
        g = soft.clone()
        if g.shape[1]:
            g.scatter_add_(1, target, -local.to(g.dtype).unsqueeze(1))  # − 1 at the class column this rank holds
        out = soft.new_zeros(ctx.shape)
        out[rows] = g * (grad / ctx.n_train)
        return out, None, None, None, None, None, None


def sharded_cross_entropy(logits, y, rows, *, c0: int, comm, axis, n_train: int) -> torch.Tensor:
    """The masked cross-entropy of :mod:`gridgnn.ops.loss` over logits whose class columns are sharded along
    ``axis`` (this rank's start at ``c0``); ``rows``: the labelled rows' positions, or a bool mask."""
    return _ShardedCE.apply(logits, y, labelled_rows(rows), c0, comm, axis, n_train)


@torch.no_grad()
def sharded_argmax(logits: torch.Tensor, *, c0: int, comm, axis) -> torch.Tensor:
    """Global class index of the row maximum (ties: the smallest index, like ``torch.argmax``)."""
    if logits.shape[1]:
        v, i = logits.max(dim=1)
        i = i + c0
    else:
        v = logits.new_full((logits.shape[0],), float("-inf"))
        i = torch.zeros(logits.shape[0], dtype=torch.int64, device=logits.device)
    g = v.clone()
    comm.all_reduce(g, axis, op="max")
    big = torch.iinfo(torch.int64).max
    cand = torch.where(v == g, i, torch.full_like(i, big))
    comm.all_reduce(cand, axis, op="min")
    return cand
