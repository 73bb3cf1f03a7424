"""Serial GraphSAGE (semiring aggregation on the primitives) equals a PyG SAGEConv stack with copied parameters for
every --aggr: logits and every parameter gradient, float64 (graphs without self-loops, where the two definitions
of the neighbourhood agree; max/min on continuous features, so no ties)."""
import numpy as np
import pytest
import torch
from torch_geometric.nn import SAGEConv

from gridgnn.errors import GridGnnError
from gridgnn.graph import Graph, gcn_normalize
from gridgnn.nn import SAGE
from gridgnn.parallel.blockrow import build_serial


def loop_free_graph(n: int, m: int, *, directed: bool, seed: int, isolated: int = 3, f: int = 7) -> Graph:
    r = np.random.default_rng(seed)
    src, dst = r.integers(0, n - isolated, m), r.integers(0, n - isolated, m)
    keep = src != dst
    return Graph.from_edges(src[keep], dst[keep], n, directed=directed, x=r.normal(size=(n, f)),
                            y=r.integers(0, 3, n), train_mask=np.ones(n, bool), val_mask=np.ones(n, bool),
                            test_mask=np.ones(n, bool))


@pytest.mark.parametrize("aggr", ["mean", "sum", "max", "min"])
@pytest.mark.parametrize("directed", [False, True])
@pytest.mark.parametrize("dims", [[7, 5, 3], [7, 9, 4, 3]])
def test_serial_sage_equals_pyg(aggr, directed, dims):
    g = loop_free_graph(31, 80, directed=directed, seed=21)
    x = torch.from_numpy(g.x).double()
    ours = SAGE(dims, aggr=aggr, dropout=0.0, seed=2, dtype=torch.float64)
    convs = []
    for l, (fi, fo) in enumerate(zip(dims[:-1], dims[1:])):
        conv = SAGEConv(fi, fo, aggr=aggr).double()
        with torch.no_grad():
            ours.biases[l].add_(0.1 * (l + 1))
            conv.lin_l.weight.copy_(ours.weights[l].T)
            conv.lin_l.bias.copy_(ours.biases[l])
            conv.lin_r.weight.copy_(ours.root_weights[l].T)
        convs.append(conv)
    ei = torch.from_numpy(g.edge_index())
    h = x
    for k, conv in enumerate(convs):
        h = conv(h, ei)
        if k < len(convs) - 1:
            h = torch.relu(h)
    mine = ours(x, build_serial(gcn_normalize(g)))
    assert torch.allclose(mine, h, rtol=1e-6, atol=1e-12), (mine - h).abs().max()
    target = torch.randn_like(h, generator=torch.Generator().manual_seed(0))
    (h * target).sum().backward()
    (mine * target).sum().backward()
    for l, conv in enumerate(convs):
        for a, b in ((ours.weights[l].grad, conv.lin_l.weight.grad.T), (ours.root_weights[l].grad,
                     conv.lin_r.weight.grad.T), (ours.biases[l].grad, conv.lin_l.bias.grad)):
            assert torch.allclose(a, b, rtol=1e-6, atol=1e-12), (l, (a - b).abs().max())


def test_unknown_aggregation_is_refused():
    with pytest.raises(GridGnnError, match="--aggr"):
        SAGE([7, 3], aggr="median")
