"""Volume / cut / balance statistics against brute-force counts with Python loops on tiny graphs."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from gridgnn.errors import GridGnnError
from gridgnn.graph import Graph
from gridgnn.partition.quality import (REPORT_KEYS, edge_cut, part_loads, quality_report, send_recv_volumes,
                                       volume_matrix)


def random_matrix(n, density, seed, *, directed=True, self_loops=True, isolated=0):
    rng = np.random.default_rng(seed)
    mat = sp.random(n, n, density=density, random_state=rng, format="csr")
    mat.data[:] = rng.uniform(0.5, 2.0, mat.nnz)
    if not directed:
        mat = (mat + mat.T).tocsr()
    if not self_loops:
        mat.setdiag(0)
        mat.eliminate_zeros()
    if isolated:  # cut every edge of the last `isolated` vertices
        keep = np.ones(n, dtype=bool)
        keep[n - isolated:] = False
        d = sp.diags(keep.astype(float))
        mat = (d @ mat @ d).tocsr()
        mat.eliminate_zeros()
    return mat.tocsr()


def brute_volume(mat, part, parts):
    """NnzCols by definition: part p needs row j of H from part q = part[j] != p when some row i of p has
    M[i, j] != 0."""
    mat = sp.csr_matrix(mat)
    need = {}
    for i in range(mat.shape[0]):
        for t in range(mat.indptr[i], mat.indptr[i + 1]):
            j = int(mat.indices[t])
            if mat.data[t] == 0:
                continue
            p, q = int(part[i]), int(part[j])
            if p != q:
                need.setdefault((q, p), set()).add(j)
    vol = np.zeros((parts, parts), dtype=np.int64)
    for (q, p), rows in need.items():
        vol[q, p] = len(rows)
    return vol


def brute_connectivity_volume(mat, part):
    """Column-net hypergraph: net j = {i : M[i, j] != 0} + self-pin j; volume = sum_j (lambda_j - 1)."""
    mat = sp.csc_matrix(mat)
    total = 0
    for j in range(mat.shape[1]):
        parts = {int(part[j])}
        for t in range(mat.indptr[j], mat.indptr[j + 1]):
            parts.add(int(part[mat.indices[t]]))
        total += len(parts) - 1
    return total


def brute_cut(mat, part):
    mat = sp.coo_matrix(mat)
    pairs = set()
    for i, j in zip(mat.row.tolist(), mat.col.tolist()):
        if i != j and part[i] != part[j]:
            pairs.add((min(i, j), max(i, j)))
    return len(pairs)


CASES = [(n, density, seed, directed, parts) for seed, (n, density, directed, parts) in enumerate([
    (7, 0.3, True, 2), (12, 0.2, False, 3), (20, 0.15, True, 4), (25, 0.1, False, 5), (30, 0.08, True, 7),
    (40, 0.05, True, 3), (16, 0.4, False, 8), (9, 0.0, True, 3)])]


@pytest.mark.parametrize("n,density,seed,directed,parts", CASES)
def test_volume_matrix_equals_brute_force(n, density, seed, directed, parts):
    mat = random_matrix(n, density, seed, directed=directed, isolated=2 if n > 10 else 0)
    part = np.random.default_rng(100 + seed).integers(0, parts, n)
    vol = volume_matrix(mat, part, parts)
    assert vol.dtype == np.int64 and vol.shape == (parts, parts)
    np.testing.assert_array_equal(vol, brute_volume(mat, part, parts))
    assert np.all(np.diag(vol) == 0)
    # total = connectivity-1 volume of the column-net hypergraph with self-pins
    assert int(vol.sum()) == brute_connectivity_volume(mat, part)
    # backward product uses M^T: also equal to brute force on the transpose
    np.testing.assert_array_equal(volume_matrix(mat.T, part, parts), brute_volume(mat.T.tocsr(), part, parts))
    send, recv = send_recv_volumes(mat, part, parts)
    np.testing.assert_array_equal(send, vol.sum(axis=1))
    np.testing.assert_array_equal(recv, vol.sum(axis=0))
    assert edge_cut(mat, part) == brute_cut(mat, part)


def test_self_loops_and_gcn_normalisation_do_not_change_volume():
    mat = random_matrix(30, 0.1, 3, directed=False, self_loops=False)
    part = np.random.default_rng(1).integers(0, 4, 30)
    with_loops = (mat + sp.identity(30) * 2.5).tocsr()
    np.testing.assert_array_equal(volume_matrix(mat, part, 4), volume_matrix(with_loops, part, 4))


@pytest.mark.parametrize("f", [1, 16, 128])
def test_quality_report_fields_against_brute_force(f):
    n, parts = 35, 4
    mat = random_matrix(n, 0.1, 7, directed=True, isolated=3)
    part = np.random.default_rng(5).integers(0, parts, n)
    rep = quality_report(mat, part, parts, f=f)
    for key in REPORT_KEYS:
        if key not in ("seconds", "peak_rss_bytes"):  # added by the timing caller
            assert key in rep, key
    vol = brute_volume(mat, part, parts)
    send, recv = vol.sum(axis=1), vol.sum(axis=0)
    assert rep["total_volume_rows"] == int(vol.sum())
    assert rep["max_send_rows"] == int(send.max())
    assert rep["max_recv_rows"] == int(recv.max())
    assert rep["mean_send_rows"] == pytest.approx(vol.sum() / parts)
    assert rep["mean_recv_rows"] == pytest.approx(vol.sum() / parts)
    assert rep["send_imbalance"] == pytest.approx(send.max() / send.mean() - 1)
    assert rep["messages"] == sum(1 for q in range(parts) for p in range(parts) if vol[q, p] > 0)
    assert rep["edge_cut"] == brute_cut(mat, part)
    nnz = [sum(mat.indptr[i + 1] - mat.indptr[i] for i in range(n) if part[i] == p) for p in range(parts)]
    verts = [int(np.sum(part == p)) for p in range(parts)]
    assert rep["part_nnz"] == nnz and rep["vertices"] == verts
    assert rep["nnz_imbalance"] == pytest.approx(max(nnz) / np.mean(nnz) - 1)
    assert rep["vertex_imbalance"] == pytest.approx(max(verts) / np.mean(verts) - 1)
    assert rep["max_send_bytes"] == rep["max_send_rows"] * f * 4
    assert rep["total_volume_bytes"] == rep["total_volume_rows"] * f * 4


def test_graph_input_equals_matrix_input():
    mat = random_matrix(25, 0.1, 11, directed=False, self_loops=False)
    g = Graph.from_scipy(mat, weighted=False)
    part = np.arange(25) % 3
    np.testing.assert_array_equal(volume_matrix(g, part, 3), volume_matrix(mat, part, 3))
    assert quality_report(g, part, 3)["edge_cut"] == edge_cut(mat, part)
    nnz, verts = part_loads(g, part, 3)
    assert nnz.sum() == mat.nnz and verts.tolist() == [9, 8, 8]


def test_single_part_has_no_volume():
    mat = random_matrix(20, 0.2, 2)
    rep = quality_report(mat, np.zeros(20, dtype=int), 1)
    assert rep["total_volume_rows"] == 0 and rep["messages"] == 0 and rep["send_imbalance"] == 0.0


def test_bad_partitions_are_clear_errors():
    mat = random_matrix(10, 0.2, 1)
    with pytest.raises(GridGnnError, match="9 entries for a graph with 10"):
        volume_matrix(mat, np.zeros(9, dtype=int), 2)
    with pytest.raises(GridGnnError, match="part 5"):
        volume_matrix(mat, np.full(10, 5), 2)
    with pytest.raises(GridGnnError, match="integers"):
        volume_matrix(mat, np.full(10, 0.5), 2)
    with pytest.raises(GridGnnError, match="square"):
        volume_matrix(sp.random(3, 4, density=0.5, format="csr"), np.zeros(3, dtype=int), 1)
