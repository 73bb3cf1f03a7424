"""gcn_normalize equals PyG's gcn_norm (rows = destinations) on awkward graphs."""
import numpy as np
import pytest
import torch
from torch_geometric.nn.conv.gcn_conv import gcn_norm

from gridgnn.graph import Graph, gcn_normalize
from gridgnn.graph.loaders import degree_features, row_normalize

from ._util import random_graph


def pyg_dense(graph: Graph) -> np.ndarray:
    ei = torch.from_numpy(graph.edge_index())
    w = None if graph.values is None else torch.from_numpy(graph.values)
    ei2, w2 = gcn_norm(ei, w, num_nodes=graph.n, add_self_loops=True, flow="source_to_target",
                       dtype=torch.float64)
    dense = np.zeros((graph.n, graph.n))
    np.add.at(dense, (ei2[1].numpy(), ei2[0].numpy()), w2.numpy())  # rows = destinations
    return dense


@pytest.mark.parametrize("directed", [True, False])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gcn_normalize_matches_pyg(directed, weighted, seed):
    g = random_graph(n=40, m=120, directed=directed, weighted=weighted, seed=seed, isolated=4, loops=3)
    assert g.directed == directed
    if weighted:  # a pre-existing self-loop with a weight other than 1 must keep it
        assert g.values is not None
    ours = gcn_normalize(g)
    assert ours.has_sorted_indices
    np.testing.assert_allclose(ours.toarray(), pyg_dense(g), rtol=0, atol=1e-12)


def test_gcn_normalize_directed_is_not_symmetric():
    g = random_graph(n=20, m=40, directed=True, seed=3)
    a = gcn_normalize(g).toarray()
    assert not np.allclose(a, a.T)
    # rows are destinations: an isolated vertex i only keeps its own self-loop, weight 1
    iso = g.n - 1
    assert a[iso, iso] == 1.0 and a[iso].sum() == 1.0


def test_row_normalize_and_degree_features():
    x = np.array([[1.0, 3.0, 0.0], [0.0, 0.0, 0.0], [2.0, 2.0, 4.0]])
    out = row_normalize(x)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, [[0.25, 0.75, 0], [0, 0, 0], [0.25, 0.25, 0.5]])
    # 0 -> 1, 0 -> 2, 1 -> 2: in-degrees (1, 2 as destinations) and out-degrees differ
    g = Graph.from_edges([0, 0, 1], [1, 2, 2], 3, directed=True)
    f = degree_features(g.indptr, g.indices, g.n)
    assert f.dtype == np.float32 and f.shape == (3, 3)
    np.testing.assert_allclose(f[:, 0], 1.0)
    np.testing.assert_allclose(f[:, 1], np.log1p([0, 1, 2]), rtol=1e-6)
    np.testing.assert_allclose(f[:, 2], np.log1p([2, 1, 0]), rtol=1e-6)
