r"""Block-row distributed SpMM :math:`Y = M X` — the shared engine of the 1D and 1.5D algorithms.

Layout (CAGNET Table II, ICPP'24 eq. 1–2): the rows of :math:`M` (= :math:`A^\mathsf{T}` of the papers) and
of :math:`X` are split into ``B`` blocks by a :class:`~gridgnn.partition.RowPartition`; block ``i`` lives on the
members of the *fetch axis* with coordinate ``i`` (1D: axis ``"p"``, ``B = P``; 1.5D: axis ``"row"``,
``B = P/c``, replicated along ``"rep"``). A rank handles the source blocks ``stages`` (1D: all of them;
1.5D: the chunk of its process column), computes the partial sum
:math:`\hat Y_i = \sum_{q \in \text{stages}} M_{iq} X_q`, and, in 1.5D, all-reduces it along ``"rep"``.

Two ways to fetch the :math:`X_q`:

* **oblivious** (CAGNET Alg. 1 / 2): stage by stage, the owner of block ``q`` broadcasts all of
  :math:`X_q` (``n_q × f``) along the fetch axis;
* **sparsity-aware** (ICPP'24 Alg. 1 / 2): a one-time setup exchanges ``NnzCols(i, q)`` (the non-empty
  columns of :math:`M_{iq}`); every product then sends only those rows with one all-to-allv along the fetch
  axis and runs one local SpMM on the column-compacted block row.

*Communication* per product, per rank, ``w`` = bytes per row of ``X``:
oblivious — root of each stage sends ``n_q w``, the others receive ``n_q w`` (``|stages|`` broadcasts);
sparsity-aware — sends :math:`\sum_{l \neq i} |NnzCols(l, i)| w` (to requesters that handle block ``i``),
receives :math:`\sum_{q \in \text{stages}, q \neq i} |NnzCols(i, q)| w`;
1.5D adds a ring all-reduce of :math:`n_i w` along ``"rep"`` (``2(c-1)/c · n_i w`` each way).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch

from ..ops import spmm, to_torch_csr
from ..partition import RowPartition


class BlockRowSpMM:
    r"""One distributed product :math:`Y_i = \sum_q M_{iq} X_q` on this rank.

    Args:
        comm: the instrumented communication layer.
        local: this rank's block row of the permuted matrix (``n_i × n`` SciPy CSR, rows = destinations, columns
            in the partition's new labels).
        rows: the block-row partition (``rows.parts`` = size of ``fetch_axis``).
        fetch_axis: axis along which block ``q`` is fetched from its owner (axis-rank ``q``).
        stages: source blocks this rank multiplies (same list on every member of the fetch axis group).
        reduce_axis: axis to all-reduce partial sums along (1.5D: ``"rep"``), or ``None``.
        sparsity_aware: fetch only ``NnzCols`` rows with all-to-allv (after a setup exchange).
        dtype, device: of the local blocks.
    Local shapes: ``X``: ``n_i × f`` (``n_i`` = size of this rank's block), result ``n_i × f``.
    """

    def __init__(self, comm, local: sp.csr_matrix, rows: RowPartition, *, fetch_axis: str, stages: list[int],
                 reduce_axis: str | None = None, sparsity_aware: bool = False, dtype=torch.float64,
                 device="cpu"):
        self.comm = comm
        self.rows = rows
        self.fetch_axis = fetch_axis
        self.reduce_axis = reduce_axis
        self.sparsity_aware = sparsity_aware
        self.stages = list(stages)
        self.me = comm.grid.rank(fetch_axis)
        self.dtype, self.device = dtype, device
        b = rows.bounds
        local = sp.csr_matrix(local)
        self.local_nnz = int(local.nnz)
        # M_iq for every handled stage q, columns local to block q
        self.blocks_sp = {q: sp.csr_matrix(local[:, int(b[q]):int(b[q + 1])]) for q in self.stages}
        if sparsity_aware:
            self._setup_sparsity_aware()
        else:
            self.blocks = {q: to_torch_csr(m, dtype=dtype, device=device) for q, m in self.blocks_sp.items()}

    # ------------------------------------------------------------------ sparsity-aware setup
    def _setup_sparsity_aware(self) -> None:
        r"""ICPP'24 setup: compute ``NnzCols(i, q)`` and tell each owner ``q`` which of its rows to send."""
        g = self.comm.grid.size(self.fetch_axis)
        i = self.me
        need = {q: np.unique(m.indices).astype(np.int64) for q, m in self.blocks_sp.items() if q != i}
        self.recv_rows = [len(need.get(k, ())) for k in range(g)]
        dev = self.device
        with self.comm.phase("setup"):
            counts = [torch.tensor([[self.recv_rows[k]]], dtype=torch.int64, device=dev) for k in range(g)]
            got = self.comm.all_to_all_v(counts, [1] * g, self.fetch_axis)
            send_counts = [int(t.reshape(-1)[0].item()) for t in got]
            lists = [torch.from_numpy(need.get(k, np.zeros(0, np.int64))).reshape(-1, 1).to(dev) for k in range(g)]
            idx = self.comm.all_to_all_v(lists, send_counts, self.fetch_axis)
        self.send_idx = [t.reshape(-1) for t in idx]
        self.send_rows = [int(t.numel()) for t in self.send_idx]
        # column-compacted block row: [X_i if i is a stage] + [received rows of each q in stage order]
        nrow = int(self.rows.sizes()[i])
        pieces = []
        for q in self.stages:
            m = self.blocks_sp[q]
            if q != i:  # remap block-local columns to positions in the received NnzCols(i, q) rows
                m = sp.csr_matrix((m.data, np.searchsorted(need[q], m.indices), m.indptr), shape=(nrow, len(need[q])))
            pieces.append(m)
        compact = sp.hstack(pieces, format="csr") if pieces else sp.csr_matrix((nrow, 0))
        compact.sort_indices()
        self.compact = to_torch_csr(compact, dtype=self.dtype, device=self.device)

    # ------------------------------------------------------------------ the product
    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        y = self._sparsity_aware(x) if self.sparsity_aware else self._oblivious(x)
        if self.reduce_axis is not None:
            self.comm.all_reduce(y, self.reduce_axis)  # CAGNET Alg. 2 line 8 / ICPP Alg. 2 line 15
        return y

    def _oblivious(self, x: torch.Tensor) -> torch.Tensor:
        sizes = self.rows.sizes()
        y = x.new_zeros((int(sizes[self.me]), x.shape[1]))
        for q in self.stages:  # CAGNET Alg. 1 line 3 / Alg. 2 line 4
            xq = x.contiguous() if q == self.me else x.new_empty((int(sizes[q]), x.shape[1]))
            self.comm.broadcast(xq, q, self.fetch_axis)  # BCAST(H_q) along the fetch axis
            y += spmm(self.blocks[q], xq)  # Z += SpMM(A^T_iq, H_q)
        return y

    def _sparsity_aware(self, x: torch.Tensor) -> torch.Tensor:
        send = [x[idx] for idx in self.send_idx]  # T ← [H[NnzCols(k, i)] for every requester k]
        got = self.comm.all_to_all_v(send, self.recv_rows, self.fetch_axis)  # ICPP Alg. 1 line 3
        cols = [x if q == self.me else got[q] for q in self.stages]
        h = torch.cat(cols) if cols else x.new_zeros((0, x.shape[1]))
        return spmm(self.compact, h)  # Z ← SpMM(Â_i, Ĥ): all stages in one call


class _Aggregate(torch.autograd.Function):
    r"""``Y = M X`` forward with ``fwd``; backward ``dX = Mᵀ dY`` with ``bwd`` (no transpose communication:
    the partition also holds the row blocks of :math:`M^\mathsf{T}`)."""

    @staticmethod
    def forward(ctx, x, fwd, bwd):
        ctx.bwd = bwd
        return fwd(x.contiguous())

    @staticmethod
    def backward(ctx, grad):
        return ctx.bwd(grad.contiguous()), None, None


class DistAggregation:
    """Callable ``x_local ↦ (M x)_local`` with autograd; what the models see of a distributed algorithm."""

    def __init__(self, fwd: BlockRowSpMM, bwd: BlockRowSpMM):
        self.fwd, self.bwd = fwd, bwd

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return _Aggregate.apply(x, self.fwd, self.bwd)
