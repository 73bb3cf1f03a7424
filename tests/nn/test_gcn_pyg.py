"""The serial reference equals PyG GCNConv stacks with copied weights (logits and gradients)."""
import numpy as np
import pytest
import torch
from torch_geometric.nn import GCNConv

from gridgnn.nn import GCN, keep_mask
from gridgnn.parallel.blockrow import build_serial
from gridgnn.graph import gcn_normalize

from ..parallel.conftest import random_graph


@pytest.mark.parametrize("directed", [False, True])
@pytest.mark.parametrize("dims", [[7, 5, 3], [7, 9, 9, 3], [7, 4]])
def test_serial_gcn_equals_pyg(directed, dims):
    g = random_graph(31, 90, directed=directed, seed=11)
    x = torch.from_numpy(g.x).double()
    ours = GCN(dims, dropout=0.0, seed=4, dtype=torch.float64)
    plan = build_serial(gcn_normalize(g))
    convs = [GCNConv(fi, fo).double() for fi, fo in zip(dims[:-1], dims[1:])]
    with torch.no_grad():
        for conv, w, b in zip(convs, ours.weights, ours.biases):
            conv.lin.weight.copy_(w.T)
            conv.bias.copy_(b + 0.1)  # non-zero biases so their gradient path is exercised
            b.add_(0.1)
    ei = torch.from_numpy(g.edge_index())
    h = x
    for k, conv in enumerate(convs):
        h = conv(h, ei)
        if k < len(convs) - 1:
            h = torch.relu(h)
    mine = ours(x, plan)
    assert torch.allclose(mine, h, rtol=1e-10, atol=1e-12)
    target = torch.randn_like(h, generator=torch.Generator().manual_seed(0))
    (h * target).sum().backward()
    (mine * target).sum().backward()
    for conv, w, b in zip(convs, ours.weights, ours.biases):
        assert torch.allclose(w.grad, conv.lin.weight.grad.T, rtol=1e-10, atol=1e-12)
        assert torch.allclose(b.grad, conv.bias.grad, rtol=1e-10, atol=1e-12)


def test_dropout_mask_depends_only_on_global_ids():
    ids = np.arange(1000)
    full = keep_mask(ids, 16, 0.3, seed=1, epoch=2, layer=0)
    sub = np.random.default_rng(0).permutation(1000)[:137]
    assert np.array_equal(keep_mask(sub, 16, 0.3, seed=1, epoch=2, layer=0), full[sub])
    assert abs(full.mean() - 0.7) < 0.01
    assert not np.array_equal(full, keep_mask(ids, 16, 0.3, seed=1, epoch=3, layer=0))
    assert not np.array_equal(full, keep_mask(ids, 16, 0.3, seed=1, epoch=2, layer=1))
    assert not np.array_equal(full, keep_mask(ids, 16, 0.3, seed=2, epoch=2, layer=0))
