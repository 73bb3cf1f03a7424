"""Serial R-GCN equals a PyG ``RGCNConv`` stack with copied parameters (``aggr="mean"`` per relation, root weight,
bias; with basis decomposition and with one weight per relation): logits and every parameter gradient, float64, on
a multigraph whose pairs may be joined by several relations and by the same relation twice (merged: gridgnn's one
duplicate-edge rule, PyG given the merged edges), with self-loops of the data, isolated vertices and a relation no edge has. Typed graphs keep their
counts through npz; PyG ``Data`` with ``edge_type`` converts; a graph without relation types is refused."""
import numpy as np
import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.nn import RGCNConv

from gridgnn.errors import GridGnnError
from gridgnn.graph import Graph, gcn_normalize, load_graph
from gridgnn.graph.loaders import load_npz, save_npz
from gridgnn.nn import RGCN
from gridgnn.parallel.blockrow import build_serial
from gridgnn.train.rank_layout import attach_edge_features

R = 4


def typed_edges(seed: int, n: int = 31, m: int = 120):
    r = np.random.default_rng(seed)
    src, dst = r.integers(0, n - 3, m), r.integers(0, n - 3, m)
    kind = r.integers(0, R - 1, m)  # relation R - 1 has no edge
    src, dst, kind = np.r_[src, src[:9], 4], np.r_[dst, dst[:9], 4], np.r_[kind, (kind[:9] + 1) % (R - 1), 0]
    return src, dst, kind, r.normal(size=(n, 7))


def serial_plan(g: Graph, layers: int):
    plan = build_serial(gcn_normalize(g))
    attach_edge_features(plan, g, layers)
    return plan


@pytest.mark.parametrize("bases", [0, 2])
@pytest.mark.parametrize("dims", [[7, 5, 3], [7, 9, 4, 3]])
def test_serial_rgcn_equals_pyg(bases, dims):
    src, dst, kind, x = typed_edges(3)
    g = Graph.from_edges(src, dst, x.shape[0], edge_type=kind, num_relations=R, x=x)
    # an edge given twice with one relation counts once (gridgnn's one duplicate-edge rule): PyG on the merged edges
    triples = np.unique(np.stack([kind, dst, src]), axis=1)
    assert g.edge_type_counts.sum() == triples.shape[1] < src.size
    kind, dst, src = triples
    ours = RGCN(dims, num_relations=R, bases=bases, dropout=0.0, seed=2, dtype=torch.float64)
    with torch.no_grad():
        for l in range(len(dims) - 1):
            ours.param("bias", l).add_(0.1 * (l + 1))
    pyg = ours.to_pyg()
    for p in pyg.parameters():
        p.requires_grad_(True)
    xt = torch.from_numpy(x)
    ref = pyg(xt, torch.from_numpy(np.stack([src, dst])), torch.from_numpy(kind))
    mine = ours(xt, serial_plan(g, len(dims) - 1))
    assert torch.allclose(mine, ref, rtol=1e-6, atol=1e-12), (mine - ref).abs().max()
    target = torch.randn_like(ref, generator=torch.Generator().manual_seed(0))
    (ref * target).sum().backward()
    (mine * target).sum().backward()
    convs = [m for m in pyg.modules() if isinstance(m, RGCNConv)]
    for l, conv in enumerate(convs):
        pairs = [(ours.param("root", l).grad, conv.root.grad), (ours.param("bias", l).grad, conv.bias.grad)]
        pairs += [(ours.term_weight(l, k).grad, conv.weight.grad[k]) for k in range(bases or R)]
        if bases:
            pairs.append((ours.param("comp", l).grad, conv.comp.grad))
        for a, b in pairs:
            assert torch.allclose(a, b, rtol=1e-6, atol=1e-10), (l, (a - b).abs().max())


def test_typed_graph_round_trips_and_converts(tmp_path):
    src, dst, kind, x = typed_edges(4)
    y = np.arange(x.shape[0]) % 3
    g = load_graph(Data(edge_index=torch.from_numpy(np.stack([src, dst])), edge_type=torch.from_numpy(kind),
                        x=torch.from_numpy(x), y=torch.from_numpy(y)))
    assert g.num_relations == R - 1  # PyG's Data does not say how many: the largest type + 1
    g.meta["relations"] = ["cites", "writes", "likes"]
    back = load_npz(save_npz(g.with_(node_types={"names": ["a", "b"], "offsets": [0, 10, g.n]}, name="typed"),
                             tmp_path / "t"))
    assert np.array_equal(back.edge_type_counts, g.edge_type_counts) and np.array_equal(back.indices, g.indices)
    assert back.node_types == {"names": ["a", "b"], "offsets": [0, 10, g.n]} and back.directed and g.directed
    assert back.name == "typed" and back.meta["relations"] == ["cites", "writes", "likes"]
    # directed is the pattern's, wherever the graph is built: both directions of every pair, relations apart
    sym = Graph.from_edges(np.r_[src, dst], np.r_[dst, src], x.shape[0], edge_type=np.r_[kind, (kind + 1) % 3])
    assert not sym.directed and not load_npz(save_npz(sym, tmp_path / "s")).directed
    # vertex types on a weighted graph round-trip too (the types say nothing about the edges)
    w = Graph.from_edges(src, dst, x.shape[0], weights=np.arange(1, src.size + 1, dtype=float))
    w2 = load_npz(save_npz(w.with_(node_types={"names": ["t"], "offsets": [0, w.n]}), tmp_path / "w"))
    assert np.array_equal(w2.values, w.values) and w2.node_types == {"names": ["t"], "offsets": [0, w.n]}
    # the mean weights: each relation's weights into a vertex sum to one (where it has any edge of it)
    w = g.relation_rows(*g.edge_index()[::-1])
    sums = np.zeros((g.n, g.num_relations))
    np.add.at(sums, g.edge_index()[1], w)
    assert np.allclose(sums[sums > 0], 1.0)


def test_refusals():
    src, dst, kind, x = typed_edges(5)
    with pytest.raises(GridGnnError, match="at least one"):
        RGCN([7, 5, 3], num_relations=0)
    with pytest.raises(GridGnnError, match="edge types up to"):
        Graph.from_edges(src, dst, 31, edge_type=kind, num_relations=2)
    with pytest.raises(GridGnnError, match="stored as given"):
        Graph.from_edges(src, dst, 31, edge_type=kind, directed=False)
    with pytest.raises(GridGnnError, match="at most 4096 relation types"):
        Graph.from_edges(src, dst, 31, edge_type=np.concatenate([kind[:-1], [2 ** 63]]).astype(np.uint64))
    g = Graph.from_edges(src, dst, 31, x=x)
    with pytest.raises(GridGnnError, match="carries none"):
        RGCN([7, 5, 3], num_relations=2, dtype=torch.float64)(torch.from_numpy(x), serial_plan(g, 2))
    typed = Graph.from_edges(src, dst, 31, edge_type=kind, x=x, y=np.arange(31) % 3)
    from gridgnn.graph.links import link_split

    with pytest.raises(GridGnnError, match="relation types .* not supported yet"):
        link_split(typed)
    from gridgnn.train.config import TrainConfig

    with pytest.raises(GridGnnError, match="--task link cannot train --model rgcn"):
        TrainConfig(model="rgcn", task="link").validate()
