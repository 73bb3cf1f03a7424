"""The link-prediction pieces (gridgnn.graph.links): the split has PyG ``RandomLinkSplit``'s properties and sizes,
negative pairs are keyed (any slice, any order, the same pairs) and avoid edges, and AUC, Hits@K and MRR equal
brute-force computations of their definitions (OGB's evaluator semantics)."""
import itertools

import numpy as np
import pytest
import torch

from gridgnn.errors import GridGnnError
from gridgnn.graph import Graph
from gridgnn.graph.links import auc, hits_at, link_split, mrr, negative_pairs
from gridgnn.graph.spec import load_graph


def edge_set(g: Graph) -> set:
    src, dst = g.edge_index()
    return set(zip(src.tolist(), dst.tolist()))


@pytest.mark.parametrize("directed", [False, True])
def test_the_split_has_random_link_splits_properties(directed):
    from torch_geometric.data import Data
    from torch_geometric.transforms import RandomLinkSplit

    r = np.random.default_rng(4)
    src, dst = r.integers(0, 60, 400), r.integers(0, 60, 400)
    src, dst = src[src != dst], dst[src != dst]  # PyG's undirected split lists a self-loop twice; ours once
    g = Graph.from_edges(src, dst, 60, directed=directed, x=r.normal(size=(60, 3)), y=r.integers(0, 2, 60))
    s = link_split(g, 0.05, 0.1, seed=3)
    every = edge_set(g)
    parts = {name: set(zip(*getattr(s, name).tolist())) for name in ("train", "val", "test")}
    assert not any(parts[a] & parts[b] for a, b in itertools.combinations(parts, 2))
    union = parts["train"] | parts["val"] | parts["test"]
    if directed:
        assert union == every
    else:  # each undirected edge once, as (small, large)
        assert union == {(a, b) for a, b in every if a <= b}
    both = (lambda p: p | {(b, a) for a, b in p}) if not directed else (lambda p: p)
    assert edge_set(s.train_graph) == both(parts["train"])  # no validation or test edge, in either direction
    assert edge_set(s.test_graph) == both(parts["train"] | parts["val"])
    np.testing.assert_array_equal(s.train_graph.x, g.x)
    assert s.train_graph.directed == g.directed
    pyg = RandomLinkSplit(num_val=0.05, num_test=0.1, is_undirected=not directed, add_negative_train_samples=False)
    tr, va, te = pyg(Data(edge_index=torch.from_numpy(g.edge_index()), num_nodes=60))
    assert (s.val.shape[1], s.test.shape[1]) == (int(va.edge_label.sum()), int(te.edge_label.sum()))
    assert s.train.shape[1] == tr.edge_label_index.shape[1]
    assert s.train_graph.nnz == tr.edge_index.shape[1] and s.test_graph.nnz == te.edge_index.shape[1]
    assert link_split(g, 0.05, 0.1, seed=3).val.tolist() == s.val.tolist()  # keyed: the same split again
    assert link_split(g, 0.05, 0.1, seed=4).val.tolist() != s.val.tolist()


def test_negative_pairs_are_keyed_and_avoid_edges():
    g = load_graph("synthetic:sbm?n=50&classes=2&avg_degree=20&features=2")  # dense: many draws hit an edge
    whole = negative_pairs(g, 40, 3, seed=1, epoch=2)
    parts = np.concatenate([negative_pairs(g, 10, 3, seed=1, epoch=2, first=f) for f in (30, 0, 20, 10)], axis=1)
    order = np.argsort(np.repeat([30, 0, 20, 10], 30) * 3 + np.tile(np.arange(30), 4), kind="stable")
    np.testing.assert_array_equal(parts[:, order], whole)  # any slice, any order: the same pairs
    edges = edge_set(g)
    assert not any((int(a), int(b)) in edges or a == b for a, b in whole.T)
    assert ((0 <= whole) & (whole < g.n)).all()
    assert not np.array_equal(negative_pairs(g, 40, 3, seed=1, epoch=3), whole)
    assert not np.array_equal(negative_pairs(g, 40, 3, seed=1, epoch=2, split="val"), whole)
    sparse = load_graph("synthetic:sbm?n=50&classes=2&avg_degree=2&features=2")
    counts = np.bincount(negative_pairs(sparse, 4000, 1, seed=5)[0], minlength=g.n)  # about uniform sources
    assert counts.min() > 0.5 * counts.mean() and counts.max() < 1.5 * counts.mean()


def test_negatives_of_a_dense_graph_are_non_edges_or_refused():
    """Pairs still an edge or a self-loop after the draws were kept (K4: every negative an edge); now a graph whose
    edges and self-loops fill at most half of the ordered pairs gives non-edges only (4000 pairs at q = 0.5), and a
    denser one is refused."""
    pairs = np.array(list(itertools.combinations(range(12), 2))).T

    def graph(m):
        return Graph.from_edges(pairs[0, :m], pairs[1, :m], 12, directed=False)

    half = graph(30)  # 60 directed edges + 12 loops = 72 = half of 144
    neg = negative_pairs(half, 4000, 1, seed=3)
    edges = edge_set(half)
    assert not any((int(a), int(b)) in edges or a == b for a, b in neg.T)
    looped = Graph.from_edges(np.r_[pairs[0, :30], np.arange(12)], np.r_[pairs[1, :30], np.arange(12)], 12,
                              directed=False)  # its stored self-loops are the 12 counted: not twice
    assert looped.nnz == 72 and negative_pairs(looped, 50, 1, seed=3).shape == (2, 50)
    for dense in (graph(49), Graph.from_edges(*np.array(list(itertools.permutations(range(4), 2))).T, 4)):
        with pytest.raises(GridGnnError, match="too dense"):
            negative_pairs(dense, 10, 1)


def brute_auc(pos, neg):
    return np.mean([1.0 if p > q else 0.5 if p == q else 0.0 for p in pos for q in neg])


def test_metrics_equal_their_definitions_by_brute_force():
    r = np.random.default_rng(0)
    for _ in range(20):
        pos = r.integers(0, 6, r.integers(1, 12)).astype(float)  # small integers: many ties
        neg = r.integers(0, 6, r.integers(1, 15)).astype(float)
        assert abs(auc(pos, neg) - brute_auc(pos, neg)) < 1e-12
        for k in (1, 3, 10, 20):
            want = 1.0 if neg.size < k else np.mean([p > sorted(neg, reverse=True)[k - 1] for p in pos])
            assert hits_at(pos, neg, k) == pytest.approx(want)
        per = r.integers(0, 6, (pos.size, 4)).astype(float)
        ranks = [1 + sum(q > p for q in row) + 0.5 * sum(q == p for q in row) for p, row in zip(pos, per)]
        assert mrr(pos, per) == pytest.approx(np.mean([1 / x for x in ranks]))
    assert auc([2.0], [1.0]) == 1.0 and auc([1.0], [2.0]) == 0.0
    with pytest.raises(GridGnnError, match="one row of negatives per positive"):
        mrr([1.0, 2.0], [[0.0]])
    with pytest.raises(GridGnnError, match="each in"):
        link_split(load_graph("synthetic:sbm?n=50&classes=2&avg_degree=4&features=2"), 0.6, 0.5)
