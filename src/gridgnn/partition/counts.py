r"""Nonzero statistics of a matrix on a grid of blocks, for the byte, time and memory models: exact counts per
block (:func:`~gridgnn.partition.permute.block_nnz`), distinct columns per block (:func:`nnz_cols`, the rows a
sparsity-aware fetch moves) and a histogram that estimates the counts of blocks it was not cut on
(:class:`NnzHistogram`, what a sharded dataset's ``meta.json`` gives)."""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..errors import GridGnnError
from .permute import block_nnz


def nnz_cols(matp: sp.csr_matrix, bounds: np.ndarray) -> np.ndarray:
    """``V[q, l] = |NnzCols(l, q)|``: distinct columns of block ``q`` with an entry in block row ``l`` (the rows
    the owner of ``q`` sends to ``l``; in 1.5D only within the process column whose chunk holds ``q``)."""
    k = bounds.size - 1
    col_block = np.searchsorted(bounds, np.arange(matp.shape[1]), side="right") - 1
    v = np.zeros((k, k), dtype=np.int64)
    for l in range(k):
        cols = np.unique(matp.indices[matp.indptr[bounds[l]]:matp.indptr[bounds[l + 1]]])
        v[:, l] = np.bincount(col_block[cols], minlength=k)
    return v


class NnzHistogram:
    r"""Nonzeros of :math:`\hat M` (one matrix version, in the plan's labels) per cell of a grid of row cuts ×
    column cuts. :meth:`counts` of blocks whose edges are cuts is exact; a block edge inside a cell takes the
    cell's nonzeros in proportion to the overlap (uniform density within the cell).

    Args:
        row_cuts, col_cuts: increasing ``int[R+1]`` / ``int[C+1]`` from 0 to ``n``.
        counts: ``[R, C]`` nonzeros per cell.
    """

    def __init__(self, row_cuts, col_cuts, counts):
        self.row_cuts = np.asarray(row_cuts, dtype=np.int64)
        self.col_cuts = np.asarray(col_cuts, dtype=np.int64)
        self.cells = np.asarray(counts, dtype=np.float64).reshape(self.row_cuts.size - 1, self.col_cuts.size - 1)

    @property
    def n(self) -> int:
        return int(self.row_cuts[-1])

    @property
    def total(self) -> int:
        return int(round(self.cells.sum()))

    @classmethod
    def uniform(cls, n: int, nnz: int) -> "NnzHistogram":
        """One cell: ``nnz`` nonzeros spread evenly over ``n × n`` (a random permutation's expectation)."""
        return cls([0, n], [0, n], [[nnz]])

    @classmethod
    def from_matrix(cls, mat, row_cuts, col_cuts) -> "NnzHistogram":
        """Exact counts of a SciPy matrix on the given cuts (:func:`~gridgnn.partition.permute.block_nnz`)."""
        return cls(row_cuts, col_cuts, block_nnz(mat, None, None, row_cuts, col_cuts))

    @classmethod
    def from_sharded_meta(cls, meta: dict, version: str = "rc") -> "NnzHistogram":
        """The per-block counts ``meta.json`` of a sharded dataset stores (``block_nnz[version]``)."""
        try:
            return cls(meta["row_bounds"], meta["col_bounds"], meta["block_nnz"][version])
        except (KeyError, TypeError, ValueError) as exc:
            raise GridGnnError(f"sharded meta.json has no usable block_nnz[{version!r}]: {exc!r}") from None

    @staticmethod
    def _overlap(cuts: np.ndarray, bounds: np.ndarray) -> np.ndarray:
        """``[len(bounds)-1, len(cuts)-1]``: fraction of each cell inside each new block."""
        if cuts.size == bounds.size and np.array_equal(cuts, bounds):
            return np.eye(cuts.size - 1)
        lo = np.maximum(bounds[:-1, None], cuts[None, :-1])
        hi = np.minimum(bounds[1:, None], cuts[None, 1:])
        width = np.maximum(np.diff(cuts), 1)[None, :]
        return np.clip(hi - lo, 0, None) / width

    def counts(self, row_bounds, col_bounds) -> np.ndarray:
        """``[len(row_bounds)-1, len(col_bounds)-1]`` nonzeros of every block (float; integral when aligned)."""
        fr = self._overlap(self.row_cuts, np.asarray(row_bounds, np.int64))
        fc = self._overlap(self.col_cuts, np.asarray(col_bounds, np.int64))
        return fr @ self.cells @ fc.T

    def transpose(self) -> "NnzHistogram":
        return NnzHistogram(self.col_cuts, self.row_cuts, self.cells.T)
