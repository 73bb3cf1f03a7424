r"""Nonzero statistics of a matrix on a grid of blocks, for the byte, time and memory models: exact counts per
block (:func:`~gridgnn.partition.permute.block_nnz`), distinct columns per block (:func:`nnz_cols`, the rows a
sparsity-aware fetch moves) and a histogram that estimates the counts of blocks it was not cut on
(:class:`NnzHistogram`, what a sharded dataset's ``meta.json`` gives); the pattern a rank reads cheaply from its
block source (:func:`pattern_of`) and the block counts and distinct columns of one matrix version
(:class:`NnzPattern`), what the memory model reads."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
import scipy.sparse as sp

from ..errors import GridGnnError
from ..ops import kernels
from .permute import block_nnz


def nnz_cols(matp: sp.csr_matrix, bounds: np.ndarray, perm_r=None, perm_c=None) -> np.ndarray:
    """``V[q, l] = |NnzCols(l, q)|``: distinct columns of block ``q`` with an entry in block row ``l`` (the rows
    the owner of ``q`` sends to ``l``; in 1.5D only within the process column whose chunk holds ``q``) of the
    matrix ``matp``, or given the orders ``perm_r``/``perm_c`` (``perm[new] = old``) of ``matp[perm_r][:,
    perm_c]``, read in place. With the numba kernels: one pass over the entries
    (:func:`~gridgnn.ops.kernels.block_cols`); else the permuted copy, one block row at a time."""
    bounds = np.asarray(bounds, np.int64)
    k = bounds.size - 1
    n_rows, n_cols = matp.shape
    if bounds[0] != 0 or bounds[-1] != n_rows or n_rows != n_cols or np.any(np.diff(bounds) < 0):
        raise ValueError(f"nnz_cols needs block bounds from 0 to {n_rows} of a square matrix, got {bounds.tolist()}")
    if kernels.enabled():
        new_col = np.arange(n_cols) if perm_c is None else np.argsort(np.asarray(perm_c, np.int64))
        col_block = np.searchsorted(bounds, new_col, side="right") - 1  # of each stored column id
        rows = np.arange(n_rows, dtype=np.int64) if perm_r is None else np.asarray(perm_r, np.int64)
        return kernels.block_cols(matp.indptr, matp.indices, rows, bounds, col_block, k)
    if perm_r is not None:
        matp = sp.csr_matrix(matp[perm_r])
    if perm_c is not None:
        matp = sp.csr_matrix(matp[:, perm_c])
    col_block = np.searchsorted(bounds, np.arange(n_cols), side="right") - 1
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
        cols: ``[R, C]`` distinct columns per cell (a sharded dataset's ``block_nnz_cols``), or ``None``:
            :meth:`NnzPattern.nnz_cols` on the cells' own cuts is then exact.
    """

    def __init__(self, row_cuts, col_cuts, counts, cols=None):
        self.row_cuts = np.asarray(row_cuts, dtype=np.int64)
        self.col_cuts = np.asarray(col_cuts, dtype=np.int64)
        shape = (self.row_cuts.size - 1, self.col_cuts.size - 1)
        self.cells = np.asarray(counts, dtype=np.float64).reshape(shape)
        self.cols = None if cols is None else np.asarray(cols, dtype=np.float64).reshape(shape)

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
    def from_sharded_meta(cls, meta: dict, version: str = "rc", cols=None) -> "NnzHistogram":
        """The per-block counts ``meta.json`` of a sharded dataset stores (``block_nnz[version]``; ``cols``: its
        checked ``block_nnz_cols[version]``, when it has them)."""
        try:
            return cls(meta["row_bounds"], meta["col_bounds"], meta["block_nnz"][version], cols)
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
        return NnzHistogram(self.col_cuts, self.row_cuts, self.cells.T)  # (distinct rows per cell: not known)

    def cols_on(self, bounds) -> np.ndarray | None:
        """``V[q, p]`` (distinct columns of block ``q`` in block row ``p``) exactly, when ``bounds`` are the cells'
        own row and column cuts and the distinct columns are known; else ``None``."""
        b = np.asarray(bounds, np.int64)
        if self.cols is None or not (np.array_equal(b, self.row_cuts) and np.array_equal(b, self.col_cuts)):
            return None
        return self.cols.T.copy()


class SourceVersion(NamedTuple):
    """One matrix version of an in-memory block source (:class:`~gridgnn.parallel.source.InMemorySource`): its
    block counts come from one pass over the unpermuted matrix; the permuted matrix is built only where distinct
    columns are counted (the sparsity-aware block-row memory)."""

    source: object
    version: str


class NnzPattern:
    """The nonzeros of one matrix version as the memory model reads them: exact (a SciPy matrix or a
    :class:`SourceVersion`) or a histogram; block counts and NnzCols."""

    def __init__(self, src, n: int, nnz_hat: int):
        self.src = None
        if src is None:
            src = NnzHistogram.uniform(n, nnz_hat)
        if isinstance(src, SourceVersion):
            if src.source.n != n:
                raise GridGnnError(f"block source has {src.source.n} vertices, expected {n}")
            self.src, self.mat, self.hist, self.total = src, None, None, src.source.stored_nnz
        elif sp.issparse(src):
            self.mat = sp.csr_matrix(src)
            if self.mat.shape != (n, n):
                raise GridGnnError(f"pattern is {self.mat.shape[0]}×{self.mat.shape[1]}, expected {n}×{n}")
            self.hist, self.total = None, int(self.mat.nnz)
        elif isinstance(src, NnzHistogram):
            if src.n != n or int(src.col_cuts[-1]) != n:
                raise GridGnnError(f"nnz histogram covers {src.n} vertices, expected {n}")
            self.mat, self.hist, self.total = None, src, src.total
        else:
            raise GridGnnError(f"pattern must be a SciPy sparse matrix or an NnzHistogram, got {type(src).__name__}")
        self._cache: dict = {}
        self._t = None

    def counts(self, row_bounds, col_bounds) -> np.ndarray:
        key = ("c", tuple(np.asarray(row_bounds).tolist()), tuple(np.asarray(col_bounds).tolist()))
        if key not in self._cache:
            if self.src is not None:
                out = self.src.source.block_counts(self.src.version, row_bounds, col_bounds).astype(np.float64)
            elif self.mat is not None:
                out = NnzHistogram.from_matrix(self.mat, row_bounds, col_bounds).cells
            else:
                out = self.hist.counts(row_bounds, col_bounds)
            self._cache[key] = out
        return self._cache[key]

    def transposed(self) -> "NnzPattern":
        if self._t is None:
            t = NnzPattern.__new__(NnzPattern)
            mat = self.src.source.matrix(self.src.version) if self.src is not None else self.mat
            t.src = None
            t.mat = None if mat is None else sp.csr_matrix(mat.T)
            t.hist = None if self.hist is None else self.hist.transpose()
            t.total, t._cache, t._t = self.total, {}, self
            self._t = t
        return self._t

    def nnz_cols(self, bounds) -> np.ndarray:
        r"""``V[q, p]`` = distinct columns of block ``q`` with a nonzero in block row ``p`` (exact for a matrix, and
        for a sharded dataset's histogram on its own cuts; else :math:`n_q(1 - (1 - 1/n_q)^{z_{pq}})`, the
        expectation for entries spread evenly at random: above the truth for skewed column degrees, below it for a
        block whose entries spread over its columns more evenly than chance, such as a band)."""
        key = ("v", tuple(np.asarray(bounds).tolist()))
        if key not in self._cache:
            if self.src is not None:
                out = self.src.source.nnz_cols(self.src.version, bounds).astype(np.float64)
            elif self.mat is not None:
                out = nnz_cols(self.mat, np.asarray(bounds, np.int64)).astype(np.float64)
            elif (known := self.hist.cols_on(bounds)) is not None:  # a sharded dataset cut on these bounds
                out = known
            else:
                z = self.counts(bounds, bounds)  # z[p, q]
                nq = np.diff(np.asarray(bounds, np.float64))
                with np.errstate(divide="ignore", invalid="ignore"):
                    keep = np.where(nq[None, :] > 0, 1.0 - 1.0 / np.maximum(nq[None, :], 1.0), 0.0)
                    out = (nq[None, :] * (1.0 - np.power(keep, z))).T  # [q, p]
            self._cache[key] = out
        return self._cache[key]


def nnz_patterns(pattern, n: int, nnz_hat: int) -> dict:
    """``{"rc": NnzPattern, "cr": NnzPattern}`` ("cr" = "rc" when not given)."""
    if isinstance(pattern, dict):
        rc = NnzPattern(pattern.get("rc"), n, nnz_hat)
        cr = NnzPattern(pattern["cr"], n, nnz_hat) if pattern.get("cr") is not None else rc
        return {"rc": rc, "cr": cr}
    p = NnzPattern(pattern, n, nnz_hat)
    return {"rc": p, "cr": p}


def pattern_of(source, *, layers: int = 2) -> dict | None:
    r"""The nonzero pattern a rank can read cheaply from its block source, for ``estimate_rank_memory(pattern=)``:
    an :class:`~gridgnn.parallel.source.InMemorySource` gives its permuted matrices (exact; the plan builds and
    caches the same ones anyway), a :class:`~gridgnn.graph.sharded.ShardedDataset` its per-block counts from
    ``meta.json``; anything else ``None`` (nonzeros spread evenly). The ``"cr"`` version is included only for a
    double permutation and a model of ``layers >= 2`` (the only case where a plan uses it)."""
    versions = ("rc", "cr") if getattr(source, "double", False) and layers >= 2 else ("rc",)
    if hasattr(source, "block_counts"):  # InMemorySource: block counts without a permuted copy
        return {v: SourceVersion(source, v) for v in versions}
    meta = getattr(source, "meta", None)
    if isinstance(meta, dict) and "block_nnz" in meta:
        have = meta["block_nnz"]
        cols = getattr(source, "block_cols", None) or {}
        return {v: NnzHistogram.from_sharded_meta(meta, key, cols.get(key))
                for v in versions for key in [v if v in have else "rc"]}
    return None
