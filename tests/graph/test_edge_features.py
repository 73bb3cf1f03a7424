"""Edge features (``Graph.edge_attr``) through construction and loaders: CSR order with their edges, reverse edges
copying them, duplicates refused, PyG ``Data.edge_attr`` and npz round trips, the synthetic SBM's, and the lookup
every algorithm's ranks use (``Graph.edge_rows``: added self-loops get PyG's ``fill_value="mean"``)."""
import numpy as np
import pytest
import torch

from gridgnn.errors import GridGnnError
from gridgnn.graph import Graph
from gridgnn.graph.loaders import from_pyg, load_npz, save_npz
from gridgnn.graph.spec import load_graph


def brute_lookup(src, dst, attr):
    return {(int(s), int(d)): attr[k] for k, (s, d) in enumerate(zip(src, dst))}


@pytest.mark.parametrize("directed", [True, False])
def test_features_follow_their_edges_into_csr_order(directed):
    r = np.random.default_rng(0)
    pairs = sorted({(int(a), int(b)) for a, b in r.integers(0, 12, (40, 2))})
    if not directed:  # one direction given per edge, except (0, 1) and (1, 0) with their own features
        pairs = [p for p in pairs if p[0] < p[1]] + [(0, 1), (1, 0)]
        pairs = sorted(set(pairs))
    src, dst = np.array(pairs).T
    attr = r.normal(size=(src.size, 3))
    g = Graph.from_edges(src, dst, 12, directed=directed, edge_attr=attr)
    want = brute_lookup(src, dst, attr)
    if not directed:
        for (s, d), a in list(want.items()):
            want.setdefault((d, s), a)  # the reverse of a one-way edge copies its features
    rows = np.repeat(np.arange(12), np.diff(g.indptr))
    got = {(int(s), int(d)): g.edge_attr[k] for k, (s, d) in enumerate(zip(g.indices, rows))}
    assert got.keys() == want.keys()
    for key in want:
        np.testing.assert_array_equal(got[key], want[key])
    assert g.directed == directed


def test_graphs_whose_entries_cannot_carry_features_are_refused():
    """``from_scipy`` (which sorts and merges entries) takes none; a CSR built by hand needs sorted, unique rows."""
    import scipy.sparse as sp

    with pytest.raises(GridGnnError, match="from_scipy takes no edge_attr"):
        Graph.from_scipy(sp.csr_matrix(np.ones((2, 2))), edge_attr=np.ones((4, 1)))
    with pytest.raises(GridGnnError, match="sorted and without duplicates"):
        Graph(indptr=np.array([0, 2, 3, 4]), indices=np.array([2, 1, 0, 0]), n=3, edge_attr=np.ones((4, 1)))
    with pytest.raises(GridGnnError, match="sorted and without duplicates"):
        Graph(indptr=np.array([0, 2, 2, 2]), indices=np.array([1, 1]), n=3, edge_attr=np.ones((2, 1)))


def test_duplicate_edges_with_features_are_refused():
    with pytest.raises(GridGnnError, match="given more than once"):
        Graph.from_edges([0, 0, 1], [1, 1, 2], 3, edge_attr=np.ones((3, 2)))
    with pytest.raises(GridGnnError, match="one row per edge"):
        Graph.from_edges([0, 1], [1, 2], 3, edge_attr=np.ones((3, 2)))
    with pytest.raises(GridGnnError, match="NaN or inf"):
        Graph.from_edges([0, 1], [1, 2], 3, edge_attr=np.array([[1.0], [np.nan]]))


def test_lookup_and_the_mean_fill_of_added_self_loops():
    """``edge_rows`` equals the given features on the graph's edges and PyG's ``add_remaining_self_loops`` with
    ``fill_value="mean"`` on the loops it adds (a loop of the data keeps its own)."""
    from torch_geometric.utils import add_remaining_self_loops

    r = np.random.default_rng(1)
    src = np.array([0, 1, 2, 3, 2, 4])
    dst = np.array([1, 2, 0, 0, 2, 0])  # 2 → 2 a loop of the data; vertex 5 has no edge
    attr = r.normal(size=(6, 2))
    g = Graph.from_edges(src, dst, 6, directed=True, edge_attr=attr)
    ei, ea = add_remaining_self_loops(torch.from_numpy(np.stack([src, dst])), torch.from_numpy(attr),
                                      fill_value="mean", num_nodes=6)
    feats, given = g.edge_rows(ei[1].numpy(), ei[0].numpy())
    np.testing.assert_allclose(feats, ea.numpy(), rtol=1e-12, atol=0)
    loops = (ei[0] == ei[1]).numpy()
    assert given.tolist() == [not lp or int(v) == 2 for lp, v in zip(loops, ei[0])]


def test_pyg_data_and_npz_carry_edge_features(tmp_path):
    from torch_geometric.data import Data

    r = np.random.default_rng(2)
    ei = np.array([[0, 1, 2, 3], [1, 2, 3, 0]])
    attr = r.normal(size=(4, 5)).astype(np.float32)
    data = Data(edge_index=torch.from_numpy(ei), edge_attr=torch.from_numpy(attr), x=torch.ones(4, 2),
                y=torch.tensor([0, 1, 0, 1]))
    g = from_pyg(data)
    assert g.edge_dim == 5
    feats, given = g.edge_rows(ei[1], ei[0])
    np.testing.assert_array_equal(feats, attr)
    assert given.all()
    back = load_npz(save_npz(g, tmp_path / "g.npz"))
    np.testing.assert_array_equal(back.edge_attr, g.edge_attr)
    np.testing.assert_array_equal(back.indices, g.indices)
    multi = from_pyg(Data(edge_index=torch.tensor([[0, 0, 1], [1, 1, 0]]), edge_attr=torch.ones(3, 1),
                          x=torch.ones(2, 1), y=torch.tensor([0, 1])))  # a multigraph: merged as without features
    assert multi.edge_attr is None and multi.nnz == 2
    assert "given more than once" in multi.meta["edge_features_dropped"]


def test_synthetic_sbm_edge_features_are_symmetric_and_leave_the_graph_as_it_was():
    spec = "synthetic:sbm?n=300&classes=3&avg_degree=6&features=4"
    plain, g = load_graph(spec), load_graph(spec + "&edge_features=3")
    np.testing.assert_array_equal(plain.indices, g.indices)
    np.testing.assert_array_equal(plain.x, g.x)
    rows = np.repeat(np.arange(g.n), np.diff(g.indptr))
    back, _ = g.edge_rows(g.indices, rows)  # the reverse of every edge
    np.testing.assert_array_equal(back, g.edge_attr)
    same = plain.y[rows] == plain.y[g.indices]  # the features tell within-block edges apart (on average)
    gap = g.edge_attr[same].mean(0) - g.edge_attr[~same].mean(0)
    assert np.abs(gap).max() > 0.3


def test_edge_list_columns_after_the_ids_are_edge_features(tmp_path):
    f = tmp_path / "e.txt"
    f.write_text("# src dst f1 f2\n0 1 0.5 1\n1 2 1.5 2\n7 0 2.5 3\n")
    g = load_graph(f"edgelist:{f}?edge_features=1&relabel=1&directed=1")
    assert g.n == 4 and g.edge_dim == 2  # ids 0, 1, 2, 7 compacted
    feats, given = g.edge_rows(np.array([1, 2, 0]), np.array([0, 1, 3]))
    np.testing.assert_array_equal(feats, [[0.5, 1], [1.5, 2], [2.5, 3]])
    assert given.all()
    with pytest.raises(GridGnnError, match="edge_features=1"):
        load_graph(f"edgelist:{f}")
    f.write_text("0 1 0.5\n0 1 1.5\n")
    with pytest.raises(GridGnnError, match="more than once"):
        load_graph(f"edgelist:{f}?edge_features=1")


def test_gatv2_refuses_a_graph_whose_edge_features_a_loader_dropped():
    """GATv2 reads edge features where the graph has them: a multigraph whose duplicate edges were merged (their
    features dropped) trained it without them, other logits and no word; GINE, which needs them, was refused."""
    import torch
    from torch_geometric.data import Data

    import gridgnn
    from gridgnn.errors import GridGnnError

    ei = torch.tensor([[0, 1, 2, 3, 0, 0], [1, 2, 3, 0, 2, 2]])
    d = Data(edge_index=ei, x=torch.randn(4, 3), y=torch.tensor([0, 1, 0, 1]), edge_attr=torch.randn(6, 2),
             num_nodes=4)
    with pytest.raises(GridGnnError, match="this graph's were dropped \\(1 edges are given more than once"):
        gridgnn.train(graph=d, model="gatv2", epochs=1, quiet=True)
    assert gridgnn.train(graph=d, model="gatv2", epochs=1, quiet=True, edge_dim=0).summary["config"]["edge_dim"] == 0
