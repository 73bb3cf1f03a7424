r"""Exact communication volume of the block-row algorithms, computed from the sparsity pattern alone
(no processes needed). Same accounting convention as ``gridgnn.dist.comm``.

``nnz_cols_matrix`` gives :math:`V_{qp} = |NnzCols(p, q)|`, the number of rows of block ``q`` of :math:`X`
that block row ``p`` of :math:`M` needs (ICPP'24 §4). Per product of width ``w`` bytes per row:

==========  ================================================  ==============================================
algorithm   sent by rank (block ``i``, column ``j``)          received
==========  ================================================  ==============================================
``1d``      :math:`n_i w` (``P > 1``)                         :math:`(n - n_i) w`
``1d-sa``   :math:`\sum_{p \ne i} V_{ip} w`                   :math:`\sum_{q \ne i} V_{qi} w`
``1.5d``    :math:`n_i w` if ``i ∈ S_j`` (``P/c > 1``)        :math:`\sum_{q \in S_j, q \ne i} n_q w`
``1.5d-sa`` :math:`\sum_{l \ne i} V_{il} w` if ``i ∈ S_j``    :math:`\sum_{q \in S_j, q \ne i} V_{qi} w`
==========  ================================================  ==============================================

1.5D adds a ring all-reduce of :math:`n_i w` along ``"rep"``: :math:`2(c-1)/c \cdot n_i w` each way.
"""
from __future__ import annotations

from collections import defaultdict

import numpy as np
import scipy.sparse as sp

from ..partition import RowPartition


def nnz_cols_matrix(matp: sp.csr_matrix, bounds: np.ndarray) -> np.ndarray:
    """``V[q, p]`` = number of distinct columns of block ``q`` with a nonzero in block row ``p``."""
    matp = sp.csr_matrix(matp)
    k = bounds.size - 1
    col_block = np.searchsorted(bounds, np.arange(matp.shape[1]), side="right") - 1
    v = np.zeros((k, k), dtype=np.int64)
    for p in range(k):
        cols = np.unique(matp.indices[matp.indptr[bounds[p]]:matp.indptr[bounds[p + 1]]])
        v[:, p] = np.bincount(col_block[cols], minlength=k)
    return v


def _chunks(blocks: int, c: int) -> list[list[int]]:
    return [list(map(int, a)) for a in np.array_split(np.arange(blocks), c)]


def product_bytes(algo: str, matp: sp.csr_matrix, rows: RowPartition, world: int, replication: int,
                  row_bytes: float, *, vmat: np.ndarray | None = None) -> dict:
    """Per-rank ``{"<collective>": (sent[P], recv[P])}`` of one product :math:`M X` (``row_bytes`` per row)."""
    sizes = rows.sizes().astype(np.float64)
    n = sizes.sum()
    sa = algo.endswith("-sa")
    if sa and vmat is None:
        vmat = nnz_cols_matrix(matp, rows.bounds)
    c = 1 if algo.startswith("1d") else replication
    nb = world // c
    tag = "alltoallv" if sa else "bcast"
    out = defaultdict(lambda: (np.zeros(world), np.zeros(world)))
    chunks = _chunks(nb, c)
    for r in range(world):
        i, j = divmod(r, c)
        stages = chunks[j]
        if nb > 1:
            s, rv = out[tag]
            if sa:
                if i in stages:
                    s[r] += sum(vmat[i, l] for l in range(nb) if l != i) * row_bytes
                rv[r] += sum(vmat[q, i] for q in stages if q != i) * row_bytes
            else:
                if i in stages:
                    s[r] += sizes[i] * row_bytes
                rv[r] += sum(sizes[q] for q in stages if q != i) * row_bytes
        if c > 1:
            s, rv = out["allreduce"]
            v = 2.0 * (c - 1) / c * sizes[i] * row_bytes
            s[r] += v
            rv[r] += v
    del n
    return dict(out)


def gcn_step_bytes(algo: str, mat: sp.csr_matrix, rows: RowPartition, world: int, replication: int,
                   dims: list[int], elem_bytes: int, *, symmetric: bool) -> dict:
    r"""Per-rank bytes of one GCN training step (forward, backward, gradient all-reduce), keyed
    ``"<phase>.<collective>"`` → ``(sent[P], recv[P])``, for permuted matrix ``mat``.

    Layer ``l`` aggregates ``min(f_{l-1}, f_l)`` columns (see :mod:`gridgnn.nn.gcn`). The backward product of
    layer 0 exists only when it aggregates :math:`H^0 W` (``f_1 < f_0``): input features need no gradient.
    """
    fwd_v = nnz_cols_matrix(mat, rows.bounds) if algo.endswith("-sa") else None
    matt = mat if symmetric else sp.csr_matrix(mat.T)
    bwd_v = fwd_v if symmetric else (nnz_cols_matrix(matt, rows.bounds) if fwd_v is not None else None)
    total: dict = {}

    def add(phase: str, vols: dict) -> None:
        for k, (s, r) in vols.items():
            key = f"{phase}.{k}"
            if key not in total:
                total[key] = (np.zeros(world), np.zeros(world))
            total[key][0][:] += s
            total[key][1][:] += r

    for layer, (fi, fo) in enumerate(zip(dims[:-1], dims[1:])):
        width = fo if fo < fi else fi
        add("fwd", product_bytes(algo, mat, rows, world, replication, width * elem_bytes, vmat=fwd_v))
        if layer > 0 or fo < fi:
            add("bwd", product_bytes(algo, matt, rows, world, replication, width * elem_bytes, vmat=bwd_v))
    nparams = sum(fi * fo + fo for fi, fo in zip(dims[:-1], dims[1:]))
    c = 1 if algo.startswith("1d") else replication
    g = world // c
    if g > 1:
        v = 2.0 * (g - 1) / g * nparams * elem_bytes
        total["grad.allreduce"] = (np.full(world, v), np.full(world, v))
    return total
