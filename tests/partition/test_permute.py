"""Permutations for 2D/3D/Plexus layouts (Plexus §5.1 double permutation, balanced-perm) and their balance."""
import argparse
import heapq
import json

import numpy as np
import pytest
import scipy.sparse as sp

from gridgnn.errors import GridGnnError
from gridgnn.graph import Graph, gcn_normalize
from gridgnn.graph.synthetic import rmat_graph
from gridgnn.graph.synthetic_geo import geometric_graph, geometric_radius, hilbert_index
from gridgnn.partition.layout import even_bounds
from gridgnn.partition.permute import (METHODS, _lpt_assign, balance_report, balanced_permutation, block_nnz,
                                       check_permutation, double_permutation, make_permutations,
                                       nnz_max_over_mean, nnz_max_over_mean_used, permute_matrix,
                                       single_permutation)
from gridgnn.commands.shard import parse_blocks, run_perm_report


def small_matrix(n=41, m=150, seed=0, loops=True):
    r = np.random.default_rng(seed)
    src, dst = r.integers(0, n - 3, m), r.integers(0, n - 3, m)  # last 3 vertices isolated
    g = Graph.from_edges(src, dst, n, weights=r.uniform(0.5, 2, m), directed=True)
    return gcn_normalize(g) if loops else g.csr()


def is_perm(p, n):
    return p.dtype == np.int64 and p.shape == (n,) and np.array_equal(np.sort(p), np.arange(n))


def brute_block_nnz(mat, perm_r, perm_c, rb, cb):
    """Loop over the permuted matrix entry by entry."""
    dense = mat.toarray()
    out = np.zeros((len(rb) - 1, len(cb) - 1), dtype=np.int64)
    for a in range(len(rb) - 1):
        for b in range(len(cb) - 1):
            for i in range(rb[a], rb[a + 1]):
                for j in range(cb[b], cb[b + 1]):
                    if dense[perm_r[i], perm_c[j]] != 0:
                        out[a, b] += 1
    return out


# ---------------------------------------------------------------------------------------------- permutations
def test_single_and_double_are_valid_seeded_permutations():
    for n in (1, 2, 3, 50):
        p = single_permutation(n, 4)
        assert is_perm(p, n)
        assert np.array_equal(p, single_permutation(n, 4))
        pr, pc = double_permutation(n, 4)
        assert is_perm(pr, n) and is_perm(pc, n)
        assert np.array_equal(pr, double_permutation(n, 4)[0]) and np.array_equal(pc, double_permutation(n, 4)[1])
        if n >= 2:
            assert not np.array_equal(pr, pc), "double permutation must give two distinct permutations"
    assert not np.array_equal(single_permutation(1000, 0), single_permutation(1000, 1))
    assert not np.array_equal(double_permutation(1000, 0)[0], double_permutation(1000, 1)[0])
    for s in range(20):  # n = 2 has only two permutations: still distinct
        pr, pc = double_permutation(2, s)
        assert not np.array_equal(pr, pc)
    with pytest.raises(GridGnnError, match="positive"):
        single_permutation(0)


def lpt_reference(weights, caps, order):
    """The textbook heap formulation of the greedy (least-loaded block with room, ties by block id)."""
    heap = [(0, b) for b in range(caps.size) if caps[b] > 0]
    heapq.heapify(heap)
    room = caps.copy()
    out = np.empty(weights.size, dtype=np.int64)
    for v in order:
        load, b = heapq.heappop(heap)
        out[v] = b
        room[b] -= 1
        if room[b] > 0:
            heapq.heappush(heap, (load + int(weights[v]), b))
    return out


def test_vectorized_greedy_equals_heap_greedy():
    rng = np.random.default_rng(0)
    for trial in range(200):
        n = int(rng.integers(1, 200))
        nb = int(rng.integers(1, min(n, 17) + 1))
        if trial % 3 == 0:
            w = rng.integers(0, 4, n)                     # long runs of equal weight, zeros
        elif trial % 3 == 1:
            w = (rng.pareto(1.2, n) * 4).astype(np.int64)  # skewed
        else:
            w = rng.integers(0, 1000, n)                  # mostly distinct
        caps = np.diff(even_bounds(n, nb))
        order = np.lexsort((rng.permutation(n), -w))
        assert np.array_equal(_lpt_assign(w, caps, order), lpt_reference(w, caps, order)), trial


def test_balanced_permutation_blocks_sizes_determinism():
    mat = gcn_normalize(rmat_graph(10, 8, seed=1))
    n = mat.shape[0]
    R, C = 4, 8
    pr, pc = balanced_permutation(mat, R, C, seed=3)
    assert is_perm(pr, n) and is_perm(pc, n)
    assert not np.array_equal(pr, pc)
    pr2, pc2 = balanced_permutation(mat, R, C, seed=3)
    assert np.array_equal(pr, pr2) and np.array_equal(pc, pc2)
    pr3, _ = balanced_permutation(mat, R, C, seed=4)
    assert not np.array_equal(pr, pr3)
    # block a = new ids even_bounds(n, R)[a]:[a+1]; every band's nnz within the largest row's nnz (LPT)
    row_nnz = np.diff(mat.indptr)
    rb = even_bounds(n, R)
    loads = np.array([row_nnz[pr[rb[a]:rb[a + 1]]].sum() for a in range(R)])
    assert loads.max() - loads.min() <= row_nnz.max()
    col_nnz = np.bincount(mat.indices, minlength=n)
    cb = even_bounds(n, C)
    cloads = np.array([col_nnz[pc[cb[b]:cb[b + 1]]].sum() for b in range(C)])
    assert cloads.max() - cloads.min() <= col_nnz.max()
    # the heaviest rows are spread: the R largest go to R different bands
    inv = np.empty(n, dtype=np.int64)
    inv[pr] = np.arange(n)
    top = np.argsort(-row_nnz, kind="stable")[:R]
    assert np.unique(np.searchsorted(rb, inv[top], side="right")).size == R


def test_make_permutations_methods():
    mat = small_matrix()
    n = mat.shape[0]
    for method in METHODS:
        pr, pc = make_permutations(method, mat, 3, 3, seed=1)
        assert is_perm(pr, n) and is_perm(pc, n)
        assert np.array_equal(pr, pc) == (method in ("identity", "single-perm"))
    assert np.array_equal(make_permutations("identity", mat, 2, 2)[0], np.arange(n))
    with pytest.raises(GridGnnError, match="valid: identity"):
        make_permutations("metis", mat, 2, 2)
    with pytest.raises(GridGnnError, match="blocks"):
        balanced_permutation(mat, n + 1, 2)


def test_check_permutation_errors():
    assert np.array_equal(check_permutation([2, 0, 1], 3), [2, 0, 1])
    with pytest.raises(GridGnnError, match="shape"):
        check_permutation([0, 1], 3)
    with pytest.raises(GridGnnError, match="vertex 3"):
        check_permutation([0, 1, 3], 3)
    with pytest.raises(GridGnnError, match="appears 2 times"):
        check_permutation([0, 0, 1], 3)
    with pytest.raises(GridGnnError, match="integer"):
        check_permutation([0.0, 1.0, 2.0], 3)


# ---------------------------------------------------------------------------------------------- block counts
def test_permute_matrix_matches_dense_indexing():
    mat = small_matrix(seed=2)
    pr, pc = double_permutation(mat.shape[0], 5)
    dense = mat.toarray()
    assert np.array_equal(permute_matrix(mat, pr, pc).toarray(), dense[pr][:, pc])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_block_nnz_equals_brute_force(seed):
    mat = small_matrix(seed=seed, loops=seed != 1)
    n = mat.shape[0]
    pr, pc = double_permutation(n, seed)
    for rb, cb in ((even_bounds(n, 3), even_bounds(n, 4)), (np.array([0, 1, 20, 20, n]), np.array([0, n]))):
        got = block_nnz(mat, pr, pc, rb, cb)
        assert got.dtype == np.int64 and got.shape == (len(rb) - 1, len(cb) - 1)
        assert np.array_equal(got, brute_block_nnz(mat, pr, pc, rb, cb))
        assert got.sum() == mat.nnz
        ident = np.arange(n)  # no permutation: the matrix's own order
        assert np.array_equal(block_nnz(mat, None, None, rb, cb), brute_block_nnz(mat, ident, ident, rb, cb))
    # counts instead of bounds mean even_bounds; a Graph means M without self-loops
    assert np.array_equal(block_nnz(mat, pr, pc, 3, 4), brute_block_nnz(mat, pr, pc, even_bounds(n, 3),
                                                                          even_bounds(n, 4)))
    with pytest.raises(GridGnnError, match="bounds"):
        block_nnz(mat, pr, pc, np.array([0, 5]), 2)


def test_max_over_mean_definitions():
    mat = small_matrix(seed=3)
    n = mat.shape[0]
    pr, pc = double_permutation(n, 1)
    rc = brute_block_nnz(mat, pr, pc, even_bounds(n, 3), even_bounds(n, 2))
    cr = brute_block_nnz(mat, pc, pr, even_bounds(n, 3), even_bounds(n, 2))
    assert nnz_max_over_mean(mat, pr, pc, 3, 2) == pytest.approx(rc.max() / rc.mean())
    both = np.concatenate([rc.ravel(), cr.ravel()])
    assert nnz_max_over_mean_used(mat, pr, pc, 3, 2) == pytest.approx(both.max() / both.mean())
    rep = balance_report(mat, pr, pc, 3, 2)
    assert rep["nnz_max_over_mean_cr"] == pytest.approx(cr.max() / cr.mean()) and rep["versions"] == 2
    p = single_permutation(n, 0)
    assert nnz_max_over_mean_used(mat, p, p, 3, 2) == nnz_max_over_mean(mat, p, p, 3, 2)
    empty = sp.csr_matrix((5, 5))
    assert nnz_max_over_mean(empty, np.arange(5), np.arange(5), 2, 2) == 1.0


# ---------------------------------------------------------------------------------------------- geometric graph
def test_hilbert_order_is_a_path_of_adjacent_cells():
    order = 4
    ix, iy = np.meshgrid(np.arange(16), np.arange(16), indexing="ij")
    h = hilbert_index(ix.ravel(), iy.ravel(), order)
    assert np.array_equal(np.sort(h), np.arange(256))
    walk = np.argsort(h)
    steps = np.abs(np.diff(ix.ravel()[walk])) + np.abs(np.diff(iy.ravel()[walk]))
    assert np.all(steps == 1)


def test_geometric_graph_structure():
    g = geometric_graph(5000, 12, seed=1, features=6, classes=3)
    m = g.csr()
    assert not g.directed and (m != m.T).nnz == 0 and m.diagonal().sum() == 0
    assert g.x.shape == (5000, 6) and g.y.max() == 2
    assert abs(g.nnz / g.n - 12) < 0.6
    assert np.array_equal(geometric_graph(5000, 12, seed=1).indices, g.indices)
    # spatial order: neighbours have nearby ids
    rows = np.repeat(np.arange(g.n), np.diff(g.indptr))
    assert np.median(np.abs(rows - g.indices)) < 0.02 * g.n
    assert geometric_radius(10_000, 10) == pytest.approx(np.sqrt(10 / (np.pi * 10_000)), rel=0.05)
    with pytest.raises(GridGnnError, match="avg_degree"):
        geometric_graph(100, 200)


# ---------------------------------------------------------------------------------------------- targets
def test_target_double_perm_on_geometric_graph():
    """Plexus Table 3 analogue: spatially ordered graph, 8×8 blocks; double perm ≤ 1.01 (seeds fixed)."""
    g = geometric_graph(200_000, 20, seed=0)
    mat = gcn_normalize(g)
    ident = np.arange(g.n)
    original = nnz_max_over_mean_used(mat, ident, ident, 8, 8)
    p = single_permutation(g.n, 0)
    single = nnz_max_over_mean_used(mat, p, p, 8, 8)
    double = nnz_max_over_mean_used(mat, *double_permutation(g.n, 0), 8, 8)
    assert original > 7.5
    assert 1.1 < single < original
    assert double <= 1.01


def test_target_balanced_perm_on_rmat():
    """R-MAT scale 16 (edge factor 16), 8×8 blocks: balanced-perm ≤ 1.02, where double perm stays > 1.05."""
    mat = gcn_normalize(rmat_graph(16, 16, seed=0))
    double = nnz_max_over_mean_used(mat, *double_permutation(mat.shape[0], 0), 8, 8)
    balanced = nnz_max_over_mean_used(mat, *balanced_permutation(mat, 8, 8, seed=0), 8, 8)
    assert double > 1.05
    assert balanced <= 1.02


# ---------------------------------------------------------------------------------------------- command
def test_parse_blocks():
    assert parse_blocks("8x8") == (8, 8) and parse_blocks("4X2") == (4, 2) and parse_blocks("3,5") == (3, 5)
    assert parse_blocks("6") == (6, 6) and parse_blocks((2, 3)) == (2, 3)
    for bad in ("8x", "axb", "0x4", "2x3x4"):
        with pytest.raises(GridGnnError, match="blocks"):
            parse_blocks(bad)


def test_perm_report_writes_files(tmp_path, capsys):
    out = tmp_path / "sub" / "perm"
    args = argparse.Namespace(data="synthetic:sbm?n=600&classes=3&avg_degree=6&features=4", method="balanced-perm",
                              blocks="4x2", seed=2, out=str(out))
    assert run_perm_report(args) == 0
    rep = json.loads((tmp_path / "sub" / "perm.json").read_text())
    pr = np.load(tmp_path / "sub" / "perm.perm_r.npy")
    pc = np.load(tmp_path / "sub" / "perm.perm_c.npy")
    assert is_perm(pr, 600) and is_perm(pc, 600)
    from gridgnn.graph import load_graph
    mat = gcn_normalize(load_graph(args.data, seed=2))
    assert rep["nnz_max_over_mean"] == pytest.approx(nnz_max_over_mean_used(mat, pr, pc, 4, 2))
    assert rep["blocks"] == [4, 2] and rep["method"] == "balanced-perm" and rep["seconds"] >= 0
    assert {"nnz_max_over_mean_rc", "nnz_max_over_mean_cr", "nnz_max_over_mean_original"} <= set(rep)
    part = np.loadtxt(out, dtype=np.int64)
    inv = np.empty(600, dtype=np.int64)
    inv[pr] = np.arange(600)
    assert np.array_equal(part, np.searchsorted(even_bounds(600, 4), inv, side="right") - 1)
    assert "nnz max/mean" in capsys.readouterr().out
    with pytest.raises(GridGnnError, match="valid"):
        run_perm_report(argparse.Namespace(data=args.data, method="nope", blocks="2x2", seed=0, out=None))
