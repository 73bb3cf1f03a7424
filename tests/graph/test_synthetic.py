"""Synthetic generators: SBM structure and learnability, R-MAT structure and skew."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from gridgnn.errors import GridGnnError
from gridgnn.graph import gcn_normalize
from gridgnn.graph.synthetic import planetoid_like_split, rmat_graph, sbm_graph


def check_simple_undirected(g):
    m = g.csr()
    assert not g.directed
    assert (m != m.T).nnz == 0, "not symmetric"
    assert m.diagonal().sum() == 0, "self-loops"
    assert g.values is None
    # CSR with sorted rows and no duplicate entries
    for i in range(min(g.n, 200)):
        row = g.indices[g.indptr[i]:g.indptr[i + 1]]
        assert np.all(np.diff(row) > 0)
    key = np.repeat(np.arange(g.n), np.diff(g.indptr)) * g.n + g.indices
    assert np.unique(key).size == key.size


def test_sbm_structure():
    g = sbm_graph(n=3000, classes=6, avg_degree=12, features=20, seed=3)
    check_simple_undirected(g)
    assert g.n == 3000 and g.x.shape == (3000, 20) and g.x.dtype == np.float32
    assert g.y.min() == 0 and g.y.max() == 5 and g.num_classes == 6
    assert np.bincount(g.y).max() - np.bincount(g.y).min() <= 1  # balanced blocks
    deg = np.diff(g.indptr)
    assert abs(deg.mean() - 12) <= 0.25 * 12
    assert deg.max() > 4 * deg.mean()  # degree-corrected: heterogeneous degrees
    src, dst = g.edge_index()
    within = (g.y[src] == g.y[dst]).mean()
    assert within > 0.5 and abs(within - 0.6) < 0.05
    tr, va, te = g.train_mask, g.val_mask, g.test_mask
    assert tr.sum() == 20 * 6 and va.sum() == 500 and te.sum() == 600  # min(1000, n // 5)
    assert not (tr & va).any() and not (tr & te).any() and not (va & te).any()
    assert np.all(np.bincount(g.y[tr]) == 20)


def test_sbm_parameters_are_honoured():
    g = sbm_graph(n=2000, classes=4, avg_degree=6, features=8, seed=0, p_in_ratio=0.95)
    src, dst = g.edge_index()
    assert (g.y[src] == g.y[dst]).mean() > 0.9
    assert abs(np.diff(g.indptr).mean() - 6) <= 1.5


def test_sbm_deterministic():
    a = sbm_graph(n=500, classes=4, avg_degree=8, features=6, seed=11)
    b = sbm_graph(n=500, classes=4, avg_degree=8, features=6, seed=11)
    c = sbm_graph(n=500, classes=4, avg_degree=8, features=6, seed=12)
    for key in ("indptr", "indices", "x", "y", "train_mask", "val_mask", "test_mask"):
        np.testing.assert_array_equal(getattr(a, key), getattr(b, key))
    assert not np.array_equal(a.y, c.y) or not np.array_equal(a.indices, c.indices)


def test_sbm_small_graph_split():
    g = sbm_graph(n=60, classes=3, avg_degree=4, features=4, seed=0)
    tr, va, te = g.train_mask, g.val_mask, g.test_mask
    assert tr.sum() == 3 * 4 and va.sum() == 12 and te.sum() == 12
    assert not (tr & va).any() and not (va & te).any() and not (tr & te).any()


def test_planetoid_like_split_counts():
    y = np.repeat(np.arange(5), [400, 300, 200, 100, 50])
    tr, va, te = planetoid_like_split(y, seed=0)
    assert list(np.bincount(y[tr], minlength=5)) == [20, 20, 20, 20, 10]
    assert va.sum() == 210 and te.sum() == 210  # n // 5 = 210 < 500


def _train(g, gcn: bool, epochs=100, seed=0) -> float:
    """Test accuracy (at the best validation epoch) of a 2-layer GCN or MLP, hidden 16."""
    torch.manual_seed(seed)
    a = gcn_normalize(g).tocoo()
    A = torch.sparse_coo_tensor(np.vstack([a.row, a.col]), a.data.astype(np.float32), a.shape).coalesce()
    prop = (lambda h: torch.sparse.mm(A, h)) if gcn else (lambda h: h)
    x, y = torch.from_numpy(g.x), torch.from_numpy(g.y)
    tr, va, te = (torch.from_numpy(m) for m in (g.train_mask, g.val_mask, g.test_mask))
    l1, l2 = torch.nn.Linear(x.shape[1], 16), torch.nn.Linear(16, g.num_classes)
    opt = torch.optim.Adam([*l1.parameters(), *l2.parameters()], lr=0.01, weight_decay=5e-4)
    best = (-1.0, 0.0)
    for _ in range(epochs):
        opt.zero_grad()
        h = F.dropout(F.relu(prop(l1(F.dropout(x, 0.5)))), 0.5)
        F.cross_entropy(prop(l2(h))[tr], y[tr]).backward()
        opt.step()
        with torch.no_grad():
            pred = prop(l2(F.relu(prop(l1(x))))).argmax(1)
            v, t = ((pred[m] == y[m]).float().mean().item() for m in (va, te))
            if v >= best[0]:
                best = (v, t)
    return best[1]


def test_sbm_default_is_learnable_by_gcn_not_by_mlp():
    g = sbm_graph(seed=0)  # the defaults of DEFAULT_SPEC: n=4000, 8 classes, degree 10, 32 features
    gcn, mlp = _train(g, gcn=True), _train(g, gcn=False)
    assert gcn > 0.7, gcn
    assert mlp < gcn - 0.25, (mlp, gcn)


@pytest.mark.parametrize("kw,word", [
    (dict(n=0), "n"), (dict(classes=1), "classes"), (dict(n=10, classes=20), "classes"),
    (dict(avg_degree=0), "avg_degree"), (dict(n=10, avg_degree=8), "avg_degree"),
    (dict(p_in_ratio=1.5), "p_in_ratio"), (dict(noise=-1), "noise"), (dict(features=0), "features"),
    (dict(degree_exponent=1.0), "degree_exponent"), (dict(n=2.5), "n"),
])
def test_sbm_bad_parameters(kw, word):
    with pytest.raises(GridGnnError, match=word):
        sbm_graph(**kw)


def test_rmat_structure():
    g = rmat_graph(10)
    check_simple_undirected(g)
    assert g.n == 1024 and g.x.shape == (1024, 16) and g.num_classes == 4
    deg = np.diff(g.indptr)
    assert 10 < deg.mean() < 32  # at most 2 * edge_factor after symmetrization and deduplication
    assert deg.max() > 10 * deg.mean()  # skewed
    assert (deg == 0).sum() > 0  # R-MAT leaves isolated vertices
    assert not (g.train_mask & g.test_mask).any() and g.train_mask.sum() == int(0.6 * 1024)


def test_rmat_deterministic_and_parameters():
    a, b = rmat_graph(8, edge_factor=4, seed=5, features=3, classes=7), rmat_graph(8, 4, 5, 3, 7)
    np.testing.assert_array_equal(a.indices, b.indices)
    np.testing.assert_array_equal(a.x, b.x)
    assert a.x.shape == (256, 3) and a.y.max() <= 6
    c = rmat_graph(8, edge_factor=4, seed=6, features=3, classes=7)
    assert not np.array_equal(a.indptr, c.indptr)
    with pytest.raises(GridGnnError, match="scale"):
        rmat_graph(0)
    with pytest.raises(GridGnnError, match="edge_factor"):
        rmat_graph(5, edge_factor=0)


@pytest.mark.parametrize("n,m,seed", [(1, 0, 0), (7, 30, 1), (500, 4000, 2), (3000, 800, 3)])
def test_undirected_pairs_become_the_csr_scipy_builds(n, m, seed):
    """The generators' CSR placed directly (below-diagonal columns from SciPy's counting transpose, then the
    above) equals SciPy's COO → CSR of both directions, entry for entry."""
    import scipy.sparse as sp

    from gridgnn.graph.synthetic import _from_undirected_pairs, _unique_pairs

    r = np.random.default_rng(seed)
    u, v = _unique_pairs(r.integers(0, n, m), r.integers(0, n, m), n)
    want = sp.csr_matrix((np.ones(2 * u.size), (np.concatenate([u, v]), np.concatenate([v, u]))), shape=(n, n))
    want.sum_duplicates()
    g = _from_undirected_pairs(u, v, n)
    assert np.array_equal(g.indptr, want.indptr) and np.array_equal(g.indices, want.indices)
