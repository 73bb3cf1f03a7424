"""Serial GAT (composed of primitives) equals a PyG GATConv stack with copied parameters: logits and every
parameter gradient, float64."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch_geometric.nn import GATConv

from gridgnn.graph import gcn_normalize
from gridgnn.nn import GAT, hashed_edge_dropout
from gridgnn.nn.dropout import edge_keep_mask
from gridgnn.parallel.blockrow import build_serial

from ..parallel.conftest import random_graph


def pyg_stack(ours: GAT):
    convs = []
    L = ours.num_layers
    for layer in range(L):
        k, fo = ours.layer_heads(layer), ours.dims[layer + 1]
        conv = GATConv(ours.in_width(layer), fo, heads=k, concat=layer < L - 1, dropout=0.0).double()
        with torch.no_grad():
            conv.lin.weight.copy_(ours.weights[layer].T)
            conv.att_src.copy_(ours.att_src[layer].reshape(1, k, fo))
            conv.att_dst.copy_(ours.att_dst[layer].reshape(1, k, fo))
            ours.biases[layer].add_(0.05 * (layer + 1))  # non-zero biases so their gradient path is exercised
            conv.bias.copy_(ours.biases[layer])
        convs.append(conv)
    return convs


@pytest.mark.parametrize("directed", [False, True])
@pytest.mark.parametrize("dims,heads,out_heads", [([7, 4, 3], 3, 1), ([7, 5, 2, 3], 2, 2), ([7, 3], 1, 4)])
def test_serial_gat_equals_pyg(directed, dims, heads, out_heads):
    g = random_graph(31, 90, directed=directed, seed=12)
    x = torch.from_numpy(g.x).double()
    ours = GAT(dims, heads=heads, out_heads=out_heads, dropout=0.0, attn_dropout=0.0, seed=3, dtype=torch.float64)
    convs = pyg_stack(ours)
    plan = build_serial(gcn_normalize(g))
    ei = torch.from_numpy(g.edge_index())
    h = x
    for k, conv in enumerate(convs):
        h = conv(h, ei)
        if k < len(convs) - 1:
            h = F.elu(h)
    mine = ours(x, plan)
    assert torch.allclose(mine, h, rtol=1e-6, atol=1e-12)
    target = torch.randn_like(h, generator=torch.Generator().manual_seed(0))
    (h * target).sum().backward()
    (mine * target).sum().backward()
    for layer, conv in enumerate(convs):
        k, fo = ours.layer_heads(layer), ours.dims[layer + 1]
        pairs = [(ours.weights[layer].grad, conv.lin.weight.grad.T),
                 (ours.att_src[layer].grad, conv.att_src.grad.reshape(k, fo)),
                 (ours.att_dst[layer].grad, conv.att_dst.grad.reshape(k, fo)),
                 (ours.biases[layer].grad, conv.bias.grad)]
        for a, b in pairs:
            assert torch.allclose(a, b, rtol=1e-6, atol=1e-12), (layer, (a - b).abs().max())


def test_attention_dropout_is_keyed_by_edge_and_head():
    dst, src = np.array([0, 5, 5, 9]), np.array([1, 1, 7, 9])
    m = edge_keep_mask(dst, src, 3, 0.5, seed=1, epoch=2, layer=0)
    assert m.shape == (4, 3)
    # the same edge listed in another order gets the same decision
    assert (edge_keep_mask(dst[::-1], src[::-1], 3, 0.5, seed=1, epoch=2, layer=0) == m[::-1]).all()
    # another epoch, layer or seed draws anew
    assert any((edge_keep_mask(dst, src, 3, 0.5, seed=1, epoch=e, layer=0) != m).any() for e in range(3, 6))
    # the keep rate is 1 - p
    big = edge_keep_mask(np.arange(20000) % 97, np.arange(20000), 4, 0.3, seed=0, epoch=0, layer=1)
    assert abs(big.mean() - 0.7) < 0.01
    a = torch.ones(4, 3, dtype=torch.float64)
    out = hashed_edge_dropout(a, 0.5, dst, src, seed=1, epoch=2, layer=0, training=True)
    assert torch.equal(out, torch.from_numpy(m).double() * 2.0)
