r"""``--algo 1.5d`` and ``--algo 1.5d-sa``: 1.5D block-row aggregation on the grid ``("row", "rep")`` of
shape ``P/c × c``. Process ``P(i, j)`` holds block row ``i`` of :math:`A^\mathsf{T}` and :math:`H`
(``B = P/c`` blocks, each replicated on the ``c`` members of process row ``P(i, :)`` = the ``"rep"`` group).

The ``B`` source blocks are split into ``c`` contiguous chunks, chunk ``j`` for process column ``P(:, j)``
(the ``"row"`` group). When ``c² ∤ P`` the chunks differ by at most one block (the paper gives the extra
stages to the last column; we spread them), and when ``B < c`` some columns have no stage and contribute
zero partial sums.

* ``1.5d`` — CAGNET (SC'20) Algorithm 2, BLOCK1.5DFW::

      for q in chunk(j):  Ĥ ← BCAST(H_q, P(:, j))  ;  Ẑ += SpMM(Aᵀ_iq, Ĥ)
      Z_i ← ALLREDUCE(Ẑ, +, P(i, :))

* ``1.5d-sa`` — ICPP'24 Algorithm 2: the owner ``P(q, j)`` of each stage sends each ``P(l, j)`` only the rows
  ``NnzCols(l, q)`` (we post all stages of a product as one all-to-allv along ``"row"``, the same volume as the
  paper's per-stage ISend/Recv), one local SpMM, then the same all-reduce along ``"rep"``.

Backward runs the same algorithm on the row blocks of :math:`A`; replicas hold the full gradient of the
replicated block, so the all-reduce's backward moves nothing and weight gradients are summed over ``"row"``.

*Communication* per product and rank: oblivious — ``|chunk(j)|`` broadcasts of ``n_q w`` along ``"row"``;
sparsity-aware — the NnzCols rows of the chunk; both — ring all-reduce of ``n_i w`` over ``c`` members.
"""
from __future__ import annotations

from ..errors import GridGnnError
from ..partition.layout import stage_chunks
from .base import RowBlockPlan, make_graph


def build_15d(comm, source, rows, *, sparsity_aware: bool, dtype, device, name: str | None = None) -> RowBlockPlan:
    """Instantiate 1.5D on this rank. ``rows.parts`` must equal P/c."""
    grid = comm.grid
    nb, c = grid.size("row"), grid.size("rep")
    if rows.parts != nb:
        raise GridGnnError(f"1.5D with P/c={nb} needs {nb} row blocks, the partition has {rows.parts}")
    stages = stage_chunks(nb, c)[grid.rank("rep")]
    agg = make_graph(comm, source, rows, grid.rank("row"), fetch_axis="row", stages=stages,
                     reduce_axis="rep", sparsity_aware=sparsity_aware, dtype=dtype, device=device)
    return RowBlockPlan(name or ("1.5d-sa" if sparsity_aware else "1.5d"), agg, rows, grid.rank("row"), "row", comm=comm,
                        source=source,
                        copies=c)
