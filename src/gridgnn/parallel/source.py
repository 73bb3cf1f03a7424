r"""Where a rank gets its blocks from: the whole graph in memory, or a sharded dataset on disk.

Both expose the same two calls, in the labels of a *row permutation* ``perm_r`` and a *column permutation*
``perm_c`` (``perm[new] = old``; equal for a single permutation):

* ``submatrix(version, (r0, r1), (c0, c1))`` — rows ``r0:r1`` × columns ``c0:c1`` of
  ``"rc"`` = :math:`P_r \hat M P_c^\mathsf{T}` or ``"cr"`` = :math:`P_c \hat M P_r^\mathsf{T}` (Plexus §5.1
  alternates them layer by layer), where :math:`\hat M` is the GCN-normalized matrix (rows = destinations);
* ``node_rows(name, ids)`` — rows of ``x``, ``y``, ``train_mask``, ``val_mask``, ``test_mask`` for original ids;
* ``block_counts(version, row_bounds, col_bounds)`` — the nonzeros of every block of a version on a grid of bounds
  (what the byte and memory models read: the planner never needs the blocks themselves); an in-memory source also
  counts the distinct columns of each block row (``nnz_cols``).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..graph import Graph, gcn_normalize
from ..partition.counts import nnz_cols
from ..partition.permute import block_nnz


class InMemorySource:
    r"""Blocks sliced from the whole normalized matrix held by this process. ``normalized``: :math:`\hat M` of
    ``graph`` when the caller has it (the planner computes it once for every configuration it prices)."""

    def __init__(self, graph: Graph, perm_r: np.ndarray, perm_c: np.ndarray | None = None, *, method: str = "",
                 normalized: sp.csr_matrix | None = None):
        self.graph = graph
        self.n = graph.n
        self.directed = graph.directed
        self.num_features = graph.num_features
        self.num_classes = graph.num_classes
        self.perm_r = np.asarray(perm_r, dtype=np.int64)
        self.perm_c = self.perm_r if perm_c is None else np.asarray(perm_c, dtype=np.int64)
        self.method = method
        self.double = not np.array_equal(self.perm_r, self.perm_c)  # two vertex orders (the orders never change)
        self._mat = gcn_normalize(graph) if normalized is None else normalized
        self._versions: dict = {}
        self._counts: dict = {}

    @property
    def stored_nnz(self) -> int:
        r"""Nonzeros of :math:`\hat M` (the self-loops the normalization adds included)."""
        return int(self._mat.nnz)

    def matrix(self, version: str) -> sp.csr_matrix:
        """The whole permuted matrix of ``version`` (built once, then cached)."""
        if version == "cr" and not self.double:
            version = "rc"
        if version not in self._versions:
            pr, pc = (self.perm_r, self.perm_c) if version == "rc" else (self.perm_c, self.perm_r)
            m = sp.csr_matrix(self._mat[pr][:, pc])
            m.sort_indices()
            self._versions[version] = m
        return self._versions[version]

    def submatrix(self, version: str, rows: tuple[int, int], cols: tuple[int, int]) -> sp.csr_matrix:
        m = self.matrix(version)[int(rows[0]):int(rows[1])]
        return sp.csr_matrix(m[:, int(cols[0]):int(cols[1])])

    def block_counts(self, version: str, row_bounds, col_bounds) -> np.ndarray:
        r"""``int64[R, C]``: the nonzeros of every block of matrix ``version`` on the bounds ``row_bounds`` ×
        ``col_bounds`` (:func:`~gridgnn.partition.permute.block_nnz`: one pass over the unpermuted matrix, no
        permuted copy built), cached per bounds."""
        if version == "cr" and not self.double:
            version = "rc"
        rb, cb = np.asarray(row_bounds, np.int64), np.asarray(col_bounds, np.int64)
        key = (version, rb.tobytes(), cb.tobytes())
        if key not in self._counts:
            pr, pc = (self.perm_r, self.perm_c) if version == "rc" else (self.perm_c, self.perm_r)
            self._counts[key] = block_nnz(self._mat, pr, pc, rb, cb)
        return self._counts[key]

    def nnz_cols(self, version: str, bounds) -> np.ndarray:
        r"""``int64[k, k]``: :func:`~gridgnn.partition.counts.nnz_cols` of matrix ``version`` on the block bounds
        ``bounds`` (the rows a sparsity-aware fetch moves; the byte and the memory model both read it), cached per
        bounds."""
        if version == "cr" and not self.double:
            version = "rc"
        b = np.asarray(bounds, np.int64)
        key = ("cols", version, b.tobytes())
        if key not in self._counts:
            pr, pc = (self.perm_r, self.perm_c) if version == "rc" else (self.perm_c, self.perm_r)
            self._counts[key] = nnz_cols(self._mat, b, pr, pc)  # read through the orders: no permuted copy
        return self._counts[key]

    def node_rows(self, name: str, ids: np.ndarray) -> np.ndarray:
        arr = getattr(self.graph, name)
        if arr is None:
            return None
        return np.asarray(arr)[np.asarray(ids, dtype=np.int64)]

    def graph_meta(self) -> dict:
        g = self.graph
        return {"n": g.n, "nnz": g.nnz, "num_features": g.num_features, "num_classes": g.num_classes,
                "directed": g.directed}
