"""Serial GINE and GATv2 (edge features on the primitives) equal PyG stacks with copied parameters —
``GINEConv(nn=Linear, train_eps=True, edge_dim=d)`` and ``GATv2Conv(edge_dim=d)`` — logits and every parameter
gradient, float64: GINE on graphs with a self-loop of the data (a message, as in PyG) and isolated vertices (the
pattern's added self-loops are not messages), GATv2 with and without edge features; directed and undirected.
``to_pyg`` exports the same stacks; a graph without edge features is refused with one line."""
import numpy as np
import pytest
import torch
from torch_geometric.nn import GINEConv

from gridgnn.errors import GridGnnError
from gridgnn.graph import Graph, gcn_normalize
from gridgnn.nn import GATv2, GINE
from gridgnn.parallel.blockrow import build_serial
from gridgnn.train.rank_layout import attach_edge_features


def featured_graph(*, directed: bool, seed: int, n: int = 31, m: int = 80, d: int = 3) -> Graph:
    r = np.random.default_rng(seed)
    pairs = {(int(a), int(b)) for a, b in zip(r.integers(0, n - 3, m), r.integers(0, n - 3, m)) if a != b}
    pairs |= {(2, 2)}  # a self-loop of the data: a message in PyG and here
    if not directed:
        pairs = {p for p in pairs if (p[1], p[0]) not in pairs or p[0] <= p[1]}
    src, dst = np.array(sorted(pairs)).T
    return Graph.from_edges(src, dst, n, directed=directed, edge_attr=r.normal(size=(src.size, d)),
                            x=r.normal(size=(n, 7)), y=r.integers(0, 3, n), train_mask=np.ones(n, bool),
                            val_mask=np.ones(n, bool), test_mask=np.ones(n, bool))


def serial_plan(g: Graph, layers: int):
    plan = build_serial(gcn_normalize(g))
    attach_edge_features(plan, g, layers)
    return plan


@pytest.mark.parametrize("directed", [False, True])
@pytest.mark.parametrize("dims", [[7, 5, 3], [7, 9, 4, 3]])
def test_serial_gine_equals_pyg(directed, dims):
    g = featured_graph(directed=directed, seed=5)
    x = torch.from_numpy(g.x).double()
    ours = GINE(dims, edge_dim=3, eps=0.2, dropout=0.0, seed=2, dtype=torch.float64)
    with torch.no_grad():  # non-zero biases and a different ε per layer
        for l in range(len(dims) - 1):
            ours.param("edge_bias", l).add_(0.05 * (l + 1))
            ours.param("bias", l).add_(0.1 * (l + 1))
            ours.param("eps", l).add_(0.1 * l)
    pyg = ours.to_pyg()
    for p in pyg.parameters():
        p.requires_grad_(True)
    ei, ea = torch.from_numpy(g.edge_index()), torch.from_numpy(g.edge_attr)
    ref = pyg(x, ei, ea)
    mine = ours(x, serial_plan(g, len(dims) - 1))
    assert torch.allclose(mine, ref, rtol=1e-6, atol=1e-12), (mine - ref).abs().max()
    target = torch.randn_like(ref, generator=torch.Generator().manual_seed(0))
    (ref * target).sum().backward()
    (mine * target).sum().backward()
    convs = [m for m in pyg.modules() if isinstance(m, GINEConv)]
    for l, conv in enumerate(convs):
        pairs = [(ours.param("weight", l).grad, conv.nn.weight.grad.T), (ours.param("bias", l).grad, conv.nn.bias.grad),
                 (ours.param("edge_weight", l).grad, conv.lin.weight.grad.T),
                 (ours.param("edge_bias", l).grad, conv.lin.bias.grad),
                 (ours.param("eps", l).grad.reshape(-1), conv.eps.grad.reshape(-1))]
        for a, b in pairs:
            assert torch.allclose(a, b, rtol=1e-6, atol=1e-10), (l, (a - b).abs().max())


def test_gine_refuses_a_graph_without_edge_features():
    with pytest.raises(GridGnnError, match="reads edge features"):
        GINE([7, 5, 3], edge_dim=0)
    g = featured_graph(directed=True, seed=1).with_(edge_attr=None)
    model = GINE([7, 5, 3], edge_dim=3, dtype=torch.float64)
    with pytest.raises(GridGnnError, match="the graph carries none"):
        model(torch.from_numpy(g.x), serial_plan(g, 2))


@pytest.mark.parametrize("directed", [False, True])
@pytest.mark.parametrize("edge_dim", [3, 0])
def test_serial_gatv2_equals_pyg(directed, edge_dim):
    """GATv2 with and without edge features against PyG ``GATv2Conv`` (two heads concatenated, two averaged; the
    added self-loops' features are PyG's mean fill) on a graph without self-loops of the data."""
    g = featured_graph(directed=directed, seed=5)
    ei = g.edge_index()
    keep = ei[0] != ei[1]  # PyG's GATv2 replaces a loop of the data by its own; the two agree without them
    g = Graph.from_edges(ei[0][keep], ei[1][keep], g.n, directed=g.directed, edge_attr=g.edge_attr[keep], x=g.x,
                         y=g.y, train_mask=g.train_mask, val_mask=g.val_mask, test_mask=g.test_mask)
    ours = GATv2([7, 4, 3], heads=2, out_heads=2, edge_dim=edge_dim, dropout=0.0, seed=3, dtype=torch.float64)
    with torch.no_grad():  # non-zero biases
        for p in ours.parameters():
            p.add_(0.01)
    pyg = ours.to_pyg()
    for p in pyg.parameters():
        p.requires_grad_(True)
    x = torch.from_numpy(g.x).double()
    ref = pyg(x, torch.from_numpy(g.edge_index()), torch.from_numpy(g.edge_attr) if edge_dim else None)
    mine = ours(x, serial_plan(g, 2))
    assert torch.allclose(mine, ref, rtol=1e-6, atol=1e-12), (mine - ref).abs().max()
    target = torch.randn_like(ref, generator=torch.Generator().manual_seed(1))
    (ref * target).sum().backward()
    (mine * target).sum().backward()
    from torch_geometric.nn import GATv2Conv

    for l, conv in enumerate(m for m in pyg.modules() if isinstance(m, GATv2Conv)):
        k, fo = ours.layer_heads(l), ours.dims[l + 1]
        pairs = [(ours.param("w_src", l).grad, conv.lin_l.weight.grad.T), (ours.param("b_src", l).grad,
                                                                          conv.lin_l.bias.grad),
                 (ours.param("w_dst", l).grad, conv.lin_r.weight.grad.T), (ours.param("b_dst", l).grad,
                                                                          conv.lin_r.bias.grad),
                 (ours.param("att", l).grad, conv.att.grad.reshape(k, fo)),
                 (ours.param("biases", l).grad, conv.bias.grad)]
        if edge_dim:
            pairs.append((ours.param("w_edge", l).grad, conv.lin_edge.weight.grad.T))
        for a, b in pairs:
            assert torch.allclose(a, b, rtol=1e-6, atol=1e-10), (l, (a - b).abs().max())
