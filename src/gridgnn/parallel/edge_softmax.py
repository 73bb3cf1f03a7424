r"""Edge softmax per destination row on any distributed graph (SC'23 §4.2), in two passes over the local edges:

.. math:: \alpha_{uv} = \exp(e_{uv} - m_u) / \textstyle\sum_{v'} \exp(e_{uv'} - m_u), \qquad m_u = \max_{v'} e_{uv'}

The scores are an edge tensor held whole (``nnz_local × K``), so no source block is streamed: the row max, then
the row sum of the exponentials, are reduced over the local edges and then over the ranks that share a row
(``graph.row_all``: 1.5D ``rep``; SUMMA columns and fiber; nothing for 1D). Backward:
:math:`\partial e = \alpha \odot (\partial\alpha - \sum_{v'} \alpha_{uv'} \partial\alpha_{uv'})` with the same
row reduction. A graph provides ``edge_rows()`` → ``(row of each local edge or None, local rows, CSR pointer or None)`` and
``row_all(t, op)``; with a pointer the row reductions are segmented (:func:`~gridgnn.ops.kernels.segment_reduce`).
"""
from __future__ import annotations

import torch

from ..ops.pattern import as_edges, divide_rows, dot_rows, exp_shifted, reduce_rows, softmax_grad_rows


class EdgeSoftmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, e, g):
        row, m_rows, crow = g.edge_rows()
        m = g.row_all(reduce_rows(row, m_rows, e, "max", crow), op="max")
        m = torch.where(torch.isinf(m), torch.zeros_like(m), m)  # rows without edges anywhere
        ex, s = exp_shifted(row, m, e, crow)
        a = divide_rows(row, ex, g.row_all(s), crow).reshape(e.shape)
        ctx.g = g
        ctx.save_for_backward(a)
        return a

    @staticmethod
    def backward(ctx, da):
        (a,) = ctx.saved_tensors
        g = ctx.g
        row, m_rows, crow = g.edge_rows()
        a2, da2 = as_edges(a), as_edges(da)
        r = g.row_all(dot_rows(row, m_rows, a2, da2, crow))
        return softmax_grad_rows(row, a2, da2, r, crow).reshape(a.shape), None
