"""Matrix-based sampling (MLSys'24 Algorithm 1): LADIES' probabilities equal the paper's Figure 1 example; every
GraphSAGE row holds min(s, deg) distinct true neighbours; the sampled frequencies match the target distributions
(chi-square, fixed seeds; a biased rule on the same draws is rejected); LADIES' extraction equals the literal
block-diagonal SpGEMM; bulk sampling of k minibatches equals k single ones; full fanout gives the whole mean
aggregation matrix."""
import itertools

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.stats import chisquare

from gridgnn.errors import GridGnnError
from gridgnn.sampling import layer_probabilities, minibatches, sample_bulk


def undirected(n, edges) -> sp.csr_matrix:
    r = [a for a, b in edges] + [b for a, b in edges]
    c = [b for a, b in edges] + [a for a, b in edges]
    return sp.csr_matrix((np.ones(len(r)), (r, c)), shape=(n, n))


def figure1() -> sp.csr_matrix:
    """A 6-vertex graph with the paper's Figure 1 numbers: batch {1, 5} has e = [1, 0, 1, 1, 2, 0]."""
    return undirected(6, [(1, 0), (1, 4), (5, 2), (5, 3), (5, 4)])


def random_graph(n=300, m=2400, seed=0) -> sp.csr_matrix:
    r = np.random.default_rng(seed)
    a = sp.coo_matrix((np.ones(m), (r.integers(0, n, m), r.integers(0, n, m))), shape=(n, n)).tocsr()
    a.data[:] = 1
    return a


def test_ladies_probabilities_equal_figure_1():
    p = layer_probabilities(figure1(), [np.array([1, 5])], "ladies").toarray()
    assert (p[0] == np.array([1, 0, 1, 1, 4, 0]) / 7).all()
    sage = layer_probabilities(figure1(), [np.array([1, 5])], "sage").toarray()
    assert (sage == np.array([[0.5, 0, 0, 0, 0.5, 0], [0, 0, 1 / 3, 1 / 3, 1 / 3, 0]])).all()


def test_sage_rows_hold_min_s_deg_distinct_neighbours():
    a = random_graph()
    batches = minibatches(np.arange(300), 64, seed=3)
    bulk = sample_bulk(a, batches, [5, 3], sampler="sage", seed=1)
    for l, block in enumerate(bulk.blocks):
        dst, src = bulk.nodes[l + 1], bulk.nodes[l]
        for r in range(block.shape[0]):
            cols = block.indices[block.indptr[r]:block.indptr[r + 1]]
            picked = src[cols]
            nbrs = a.indices[a.indptr[dst[r]]:a.indptr[dst[r] + 1]]
            s = [3, 5][l]
            assert len(set(picked)) == len(picked) == min(s, len(nbrs))
            assert set(picked) <= set(nbrs)
            assert np.allclose(block.data[block.indptr[r]:block.indptr[r + 1]], 1 / max(len(picked), 1))


def test_frontier_starts_with_the_targets_and_bulk_pointers_are_consistent():
    bulk = sample_bulk(random_graph(), minibatches(np.arange(300), 50), [4, 4], sampler="sage")
    for l in range(bulk.num_layers):
        for i in range(bulk.k):
            dst = bulk.nodes[l + 1][bulk.ptr[l + 1][i]:bulk.ptr[l + 1][i + 1]]
            src = bulk.nodes[l][bulk.ptr[l][i]:bulk.ptr[l][i + 1]]
            assert (src[:len(dst)] == dst).all() and len(set(src)) == len(src)


def inclusion_counts(a, batch, s, sampler, trials):
    n = a.shape[0]
    counts = np.zeros(n)
    for t in range(trials):
        bulk = sample_bulk(a, [batch], [s], sampler=sampler, seed=11, epoch=t)
        b = bulk.blocks[0]
        if sampler == "sage":
            counts += np.bincount(bulk.nodes[0][b.indices[b.indptr[0]:b.indptr[1]]], minlength=n)
        else:
            counts[bulk.nodes[0][len(batch):]] += 1  # the sampled vertices outside the batch
    return counts


def check_fit(counts, expected) -> float:
    m = expected > 0
    assert (counts[~m] == 0).all()
    return chisquare(counts[m], expected[m] * counts[m].sum() / expected[m].sum()).pvalue


def test_sage_neighbour_frequencies_are_uniform():
    """Vertex 0 has 10 neighbours, s = 3: each is in the sample with probability 3/10."""
    a = undirected(11, [(0, v) for v in range(1, 11)])
    counts = inclusion_counts(a, np.array([0]), 3, "sage", 2000)
    expected = np.r_[0, np.full(10, 0.3)]
    assert check_fit(counts, expected) > 1e-3
    assert counts.sum() == 3 * 2000
    # the same check rejects a biased rule: drop each sample of vertex 10 half of the time
    biased = counts.copy()
    biased[10] *= 0.75
    assert check_fit(biased, expected) < 1e-3


def test_ladies_frequencies_follow_p_and_successive_sampling():
    """s = 1: the sampled vertex has probability p_v = [1, 1, 1, 4]/7; s = 2: the inclusion probabilities of
    successive sampling without replacement, counted by brute force over ordered pairs."""
    a, batch = figure1(), np.array([1, 5])
    p = np.array([1, 0, 1, 1, 4, 0]) / 7
    counts = inclusion_counts(a, batch, 1, "ladies", 3000)
    assert check_fit(counts, p) > 1e-3
    incl = np.zeros(6)
    for u, v in itertools.permutations(np.flatnonzero(p), 2):
        pr = p[u] * p[v] / (1 - p[u])
        incl[u] += pr
        incl[v] += pr
    counts2 = inclusion_counts(a, batch, 2, "ladies", 3000)
    assert check_fit(counts2, incl) > 1e-3
    assert check_fit(counts2, 2 * p) < 1e-3  # s·p is not the inclusion law without replacement


def test_ladies_block_equals_the_block_diagonal_spgemm():
    a = random_graph(200, 1500, seed=4)
    batches = minibatches(np.arange(200), 40, seed=2)
    bulk = sample_bulk(a, batches, [30], sampler="ladies", seed=5)
    n, k = 200, bulk.k
    frontier, fptr = bulk.nodes[1], bulk.ptr[1]
    nxt, nptr = bulk.nodes[0], bulk.ptr[0]
    # literal: Q_R A (kb × n), spread to diag(A_R1 … A_Rk) (kb × kn), times the stacked Q_C (kn × Σ s_i)
    q_r = sp.csr_matrix((np.ones(len(frontier)), (np.arange(len(frontier)), frontier)), shape=(len(frontier), n))
    ar = sp.coo_matrix(q_r @ a)
    owner = np.repeat(np.arange(k), np.diff(fptr))
    diag = sp.csr_matrix((np.ones(ar.nnz), (ar.row, owner[ar.row] * n + ar.col)), shape=(len(frontier), k * n))
    p = layer_probabilities(a, [frontier[fptr[i]:fptr[i + 1]] for i in range(k)], "ladies")
    rows, cols = [], []
    block = bulk.blocks[0]
    # the sampled vertices of each minibatch: the columns its rows read (every sampled vertex is some frontier
    # vertex's neighbour, P's support being the neighbourhood); at most s = 30 of them
    for i in range(k):
        src = nxt[nptr[i]:nptr[i + 1]]
        sub = block[fptr[i]:fptr[i + 1], nptr[i]:nptr[i + 1]]
        used = np.unique(sub.indices)
        assert 0 < len(used) <= 30
        rows.append(np.full(len(used), i))
        cols.append(src[used])
    rows, cols = np.concatenate(rows), np.concatenate(cols)
    q_c = sp.csr_matrix((np.ones(len(rows)), (rows * n + cols, np.arange(len(rows)))), shape=(k * n, len(rows)))
    literal = (diag @ q_c).tocoo()
    # our block, its columns mapped to the same (minibatch, vertex) order
    ours = block.tocoo()
    owner_next = np.repeat(np.arange(k), np.diff(nptr))
    key_of_col = owner_next * n + nxt
    lit_key = (rows * n + cols)
    got = set(zip(ours.row.tolist(), key_of_col[ours.col].tolist()))
    want = set(zip(literal.row.tolist(), lit_key[literal.col].tolist()))
    assert got == want and len(got) > 0
    # weights: 1/p_v, row-normalized
    pd = p.toarray()
    w = 1 / pd[owner[ours.row], nxt[ours.col]]
    sums = np.bincount(ours.row, weights=w)
    assert np.allclose(ours.data, w / sums[ours.row])


@pytest.mark.parametrize("sampler,fanouts", [("sage", [4, 3, 2]), ("ladies", [20, 15])])
def test_bulk_equals_single_minibatches(sampler, fanouts):
    a = random_graph(250, 2000, seed=7)
    batches = minibatches(np.arange(0, 250, 2), 16, seed=9, epoch=3)
    bulk = sample_bulk(a, batches, fanouts, sampler=sampler, seed=9, epoch=3)
    for i, b in enumerate(batches):
        one = sample_bulk(a, [b], fanouts, sampler=sampler, seed=9, epoch=3, batch_ids=[i])
        part = bulk.batch(i)
        for x, y in zip(part.nodes, one.nodes):
            assert (x == y).all()
        for x, y in zip(part.blocks, one.blocks):
            assert (x != y).nnz == 0 and x.shape == y.shape
    other = sample_bulk(a, batches, fanouts, sampler=sampler, seed=9, epoch=4)
    assert any(len(x) != len(y) or (x != y).any() for x, y in zip(other.nodes, bulk.nodes))


@pytest.mark.parametrize("sampler", ["sage", "ladies"])
def test_full_fanout_on_every_vertex_is_the_mean_aggregation_matrix(sampler):
    """Every candidate kept: LADIES' debiasing weights 1/p of a sure inclusion are 1, so its block is the mean."""
    a = random_graph(120, 700, seed=1)
    bulk = sample_bulk(a, [np.arange(120)], [-1, -1], sampler=sampler)
    deg = np.asarray(a.sum(axis=1)).reshape(-1)
    mean = sp.diags(1 / np.maximum(deg, 1)) @ a
    for l in range(2):
        assert (bulk.nodes[l] == np.arange(120)).all()
        assert abs(bulk.blocks[l] - mean).max() < 1e-15


def test_minibatches_cover_every_vertex_once_and_change_with_the_epoch():
    v = np.arange(5, 1005)
    b0 = minibatches(v, 64, seed=1, epoch=0)
    assert [len(b) for b in b0] == [64] * 15 + [40]
    assert (np.sort(np.concatenate(b0)) == v).all()
    assert not (np.concatenate(b0) == np.concatenate(minibatches(v, 64, seed=1, epoch=1))).all()
    assert all((x == y).all() for x, y in zip(b0, minibatches(v, 64, seed=1, epoch=0)))


def test_bad_arguments_are_clear_errors():
    a = figure1()
    with pytest.raises(GridGnnError, match="--sampler"):
        sample_bulk(a, [np.array([1])], [2], sampler="fastgcn")
    with pytest.raises(GridGnnError, match="--fanout"):
        sample_bulk(a, [np.array([1])], [0])
    with pytest.raises(GridGnnError, match="--batch-size"):
        minibatches(np.arange(3), 0)
    with pytest.raises(GridGnnError, match=r"\[0, 6\)"):
        sample_bulk(a, [np.array([7])], [1])


@pytest.mark.parametrize("s", [1, 3, 40, 1 << 40])
def test_top_per_row_kernel_equals_the_reference(s):
    """The numba selection marks exactly the entries the NumPy lexsort picks (rows shorter than s, one huge row,
    empty rows, unequal probabilities; an ``s`` far beyond every row allocates by the rows, not by ``s``)."""
    from gridgnn.ops import kernels
    from gridgnn.ops.hashing import chain
    from gridgnn.sampling.matrix import top_per_row_reference

    if not kernels.enabled():
        pytest.skip("numba is not installed: the reference runs")
    r = np.random.default_rng(s % 97)
    a = sp.random(300, 500, density=0.03, random_state=s % 97, format="csr")
    a = sp.vstack([a, sp.csr_matrix(np.ones((1, 500))), sp.csr_matrix((2, 500))]).tocsr()
    a.data = r.random(a.nnz) + 0.01
    rows = np.repeat(np.arange(a.shape[0]), np.diff(a.indptr))
    keys = chain(7, 1, 2, np.arange(a.shape[0]))
    got = np.flatnonzero(kernels.top_per_row(a.indptr, a.indices, a.data, keys, s))
    want = top_per_row_reference(a, rows, s, keys)
    assert (got == want).all() and len(got) == sum(min(s, d) for d in np.diff(a.indptr))


@pytest.mark.parametrize("sampler,fanouts", [("sage", [4, 3, 2]), ("ladies", [20, 15])])
def test_fused_extraction_equals_the_reference(sampler, fanouts, monkeypatch):
    """The per-minibatch numba extraction (next frontiers, block columns, weights) equals the NumPy path that
    sorts (minibatch, vertex) keys over the whole bulk, bit for bit."""
    from gridgnn.ops import kernels

    if not kernels.enabled():
        pytest.skip("numba is not installed: the reference runs")
    a = random_graph(250, 2000, seed=8)
    batches = minibatches(np.arange(250), 16, seed=2)
    fused = sample_bulk(a, batches, fanouts, sampler=sampler, seed=4)
    monkeypatch.setenv("GRIDGNN_KERNELS", "torch")
    ref = sample_bulk(a, batches, fanouts, sampler=sampler, seed=4)
    for x, y in zip(fused.nodes + fused.ptr, ref.nodes + ref.ptr):
        assert (x == y).all()
    for x, y in zip(fused.blocks, ref.blocks):
        assert (x.indptr == y.indptr).all() and (x.indices == y.indices).all() and np.array_equal(x.data, y.data)


@pytest.mark.parametrize("s", [1, 3, -1])
def test_sample_rows_kernel_equals_the_reference(s, monkeypatch):
    """GraphSAGE's row sampler (numba, and the NumPy path the partitioned sampler takes without numba) keeps the
    entries the selection keeps in NORM(Q A), for repeated and isolated frontier vertices."""
    from gridgnn.ops import kernels
    from gridgnn.ops.hashing import chain
    from gridgnn.sampling.matrix import _pattern, sample_rows, top_per_row_reference

    a = random_graph(120, 900, seed=s + 5)
    a = _pattern(sp.diags((np.arange(120) < 118).astype(float)) @ a + sp.csr_matrix((120, 120)))  # 118, 119 isolated
    assert a.indptr[118] == a.indptr[120]
    nodes = np.array([3, 3, 119, 0, 57, 118, 4, 90, 11], dtype=np.int64)
    keys = chain(9, 2, 1, np.arange(len(nodes)), nodes)
    p = sp.csr_matrix(a[nodes])
    rows = np.repeat(np.arange(len(nodes)), np.diff(p.indptr))
    p.data = 1.0 / np.diff(p.indptr)[rows]
    keep = np.arange(p.nnz) if s < 0 else top_per_row_reference(p, rows, s, keys)
    got = [sample_rows(a.indptr, a.indices, nodes, keys, s)]
    if kernels.enabled():
        monkeypatch.setenv("GRIDGNN_KERNELS", "torch")
        got.append(sample_rows(a.indptr, a.indices, nodes, keys, s))
    for r, c in got:
        assert (r == rows[keep]).all() and (c == p.indices[keep]).all()


@pytest.mark.parametrize("sampler,fanouts", [("sage", [4, 3]), ("ladies", [20, 15])])
def test_a_product_alone_samples_what_the_graph_does(sampler, fanouts):
    """sample_bulk given only ``Q ↦ Q A`` (as a distributed product is) draws the samples it draws from the graph."""
    from gridgnn.sampling.matrix import _pattern, local_product

    a = random_graph(200, 1500, seed=11)
    batches = minibatches(np.arange(200), 16, seed=5)
    want = sample_bulk(a, batches, fanouts, sampler=sampler, seed=2)
    got = sample_bulk(None, batches, fanouts, sampler=sampler, seed=2, product=local_product(_pattern(a)), n=200)
    for x, y in zip(want.nodes + want.ptr, got.nodes + got.ptr):
        assert (x == y).all()
    for x, y in zip(want.blocks, got.blocks):
        assert (x.indptr == y.indptr).all() and (x.indices == y.indices).all() and np.array_equal(x.data, y.data)


def test_a_fanout_at_or_past_the_candidates_is_every_neighbour():
    """A LADIES layer whose minibatch has at most ``s`` candidates keeps each of them surely: its block is that of
    ``-1`` (uniform weights, the plain mean), not the ``1/p``-weighted one (it was, on any small graph at the
    default fanout); a minibatch with more candidates than ``s`` still debiases by ``1/p``."""
    a = random_graph(30, 120, seed=0)
    batches = [np.array([0, 1, 2, 3])]
    full = sample_bulk(a, batches, [-1, -1], sampler="ladies")
    at = layer_probabilities(a, batches, "ladies")[0].nnz  # the first hop's candidates: a fanout exactly at them
    wide = sample_bulk(a, batches, [at, 10000], sampler="ladies")  # at, then past the candidates
    for x, y in zip(full.nodes, wide.nodes):
        np.testing.assert_array_equal(x, y)
    for x, y in zip(full.blocks, wide.blocks):
        assert abs(x - y).max() == 0
    narrow = sample_bulk(a, batches, [3, 3], sampler="ladies")  # 3 of more: not uniform
    rows = [b[i] for b in narrow.blocks for i in range(b.shape[0])]
    assert any(r.nnz > 1 and np.ptp(r.data) > 0 for r in rows)
