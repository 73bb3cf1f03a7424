"""Distinct columns per block (``NnzCols``, the rows a sparsity-aware fetch moves): the numba pass through the
vertex orders equals a brute-force count of the permuted matrix, and so does the NumPy path."""
import numpy as np
import pytest
import scipy.sparse as sp

from gridgnn.partition.counts import nnz_cols


def brute_force(mat: sp.csr_matrix, bounds) -> np.ndarray:
    k = len(bounds) - 1
    block = np.searchsorted(bounds, np.arange(mat.shape[1]), side="right") - 1
    v = np.zeros((k, k), np.int64)
    for l in range(k):
        cols = set()
        for r in range(bounds[l], bounds[l + 1]):
            cols.update(mat.indices[mat.indptr[r]:mat.indptr[r + 1]].tolist())
        for c in cols:
            v[block[c], l] += 1
    return v


@pytest.mark.parametrize("kernels", ["auto", "torch"])
@pytest.mark.parametrize("seed", [0, 1])
def test_nnz_cols_through_the_orders_equals_the_permuted_matrix(monkeypatch, kernels, seed):
    monkeypatch.setenv("GRIDGNN_KERNELS", kernels)
    r = np.random.default_rng(seed)
    n = 97
    rows, cols = r.integers(0, n, 600), r.integers(0, n, 600)
    rows[:20] = 5  # a heavy row; duplicate entries; rows 90.. empty
    rows[rows >= 90] = 3
    mat = sp.csr_matrix((np.ones(600), (rows, cols)), shape=(n, n))
    mat.has_canonical_format = False
    mat.indices[:3] = mat.indices[3]  # unsorted columns with duplicates inside a row
    pr, pc = r.permutation(n), r.permutation(n)
    bounds = np.array([0, 10, 10, 40, 77, n])  # an empty block among uneven ones
    want = brute_force(sp.csr_matrix(mat[pr][:, pc]), bounds)
    assert np.array_equal(nnz_cols(mat, bounds, pr, pc), want)
    assert np.array_equal(nnz_cols(sp.csr_matrix(mat[pr][:, pc]), bounds), want)
    assert np.array_equal(nnz_cols(mat, bounds), brute_force(mat, bounds))
