r"""``--algo 1d`` and ``--algo 1d-sa``: 1D block-row GCN aggregation on the grid ``("p",)``.

* ``1d`` — CAGNET (SC'20) Algorithm 1, BLOCKROWFW::

      for j = 1..P:  BROADCAST(H_j)  ;  T_i += Aᵀ_ij H_j          # n_i × f local result

* ``1d-sa`` — ICPP'24 Algorithm 1: setup exchanges ``NnzCols(i, j)`` once; each product
  ``T ← [H[NnzCols(k, i)]]_k ; ALLTOALLV(T) ; Z_i ← Σ_j Aᵀ_ij Ĥ_j``.

Backward computes :math:`A G` with the stored row blocks of :math:`A` (no transpose communication);
the weight gradient :math:`(H^{l-1})^\mathsf{T} A G^l` is a small all-reduce over ``"p"`` (the trainer's
``grad.allreduce``).

*Communication* per product and rank (f-wide rows, ``w`` bytes each): ``1d`` sends ``n_i w`` and receives
``(n - n_i) w``; ``1d-sa`` sends :math:`\sum_{k \ne i}|NnzCols(k,i)| w` and receives
:math:`\sum_{j \ne i}|NnzCols(i,j)| w`.
"""
from __future__ import annotations

from ..errors import GridGnnError
from .base import RowBlockPlan, make_graph


def build_1d(comm, source, rows, *, sparsity_aware: bool, dtype, device, name: str | None = None) -> RowBlockPlan:
    """Instantiate 1D on this rank. ``rows.parts`` must equal P."""
    grid = comm.grid
    p = grid.size("p")
    if rows.parts != p:
        raise GridGnnError(f"1D needs {p} row blocks, the partition has {rows.parts}")
    agg = make_graph(comm, source, rows, grid.rank("p"), fetch_axis="p", stages=list(range(p)),
                     reduce_axis=None, sparsity_aware=sparsity_aware, dtype=dtype, device=device)
    return RowBlockPlan(name or ("1d-sa" if sparsity_aware else "1d"), agg, rows, grid.rank("p"), "p", comm=comm,
                        source=source)
