"""Serial AGNN (composed of primitives) equals a PyG AGNNConv model with copied parameters, and serial vanilla
attention equals its dense autograd reference (SC'23 §4.1, §5.3): logits and every parameter gradient, float64."""
import numpy as np
import pytest
import torch
from torch_geometric.nn import AGNNConv

from gridgnn.errors import GridGnnError
from gridgnn.graph import gcn_normalize
from gridgnn.nn import AGNN, VA
from gridgnn.parallel.blockrow import build_serial

from ..parallel.conftest import random_graph


def pyg_agnn(ours: AGNN, x, ei):
    """PyG's Cora AGNN example (no dropout) with our parameters: Linear → ReLU → AGNNConv ... → Linear."""
    L = ours.num_layers
    lins = [torch.nn.Linear(ours.dims[l], ours.dims[l + 1]).double() for l in (0, L - 1)]
    with torch.no_grad():
        for i, lin in enumerate(lins):
            lin.weight.copy_(ours.weights[i].T)
            ours.biases[i].add_(0.1 * (i + 1))  # non-zero biases so their gradient path is exercised
            lin.bias.copy_(ours.biases[i])
    props = []
    for layer in range(1, L - 1):
        trained = layer in ours.trained_beta_layers(L, ours.train_first_beta)
        conv = AGNNConv(requires_grad=trained).double()
        with torch.no_grad():
            b = 0.7 + 0.4 * layer  # a β other than 1, in ours and theirs alike
            conv.beta.fill_(b)
            ours.beta(layer).fill_(b)
        props.append(conv)
    h = torch.relu(lins[0](x))
    for conv in props:
        h = conv(h, ei)
    return lins[1](h), lins, props


@pytest.mark.parametrize("directed", [False, True])
@pytest.mark.parametrize("dims,first", [([7, 5, 5, 3], True), ([7, 6, 6, 6, 3], False), ([7, 4, 4, 4, 2], True)])
def test_serial_agnn_equals_pyg(directed, dims, first):
    g = random_graph(31, 90, directed=directed, seed=12)
    x = torch.from_numpy(g.x).double()
    ours = AGNN(dims, dropout=0.0, train_first_beta=first, seed=3, dtype=torch.float64)
    ref, lins, props = pyg_agnn(ours, x, torch.from_numpy(g.edge_index()))
    mine = ours(x, build_serial(gcn_normalize(g)))
    assert torch.allclose(mine, ref, rtol=1e-6, atol=1e-12), (mine - ref).abs().max()
    target = torch.randn_like(ref, generator=torch.Generator().manual_seed(0))
    (ref * target).sum().backward()
    (mine * target).sum().backward()
    pairs = [(ours.weights[i].grad, lin.weight.grad.T) for i, lin in enumerate(lins)]
    pairs += [(ours.biases[i].grad, lin.bias.grad) for i, lin in enumerate(lins)]
    trained = ours.trained_beta_layers(ours.num_layers, first)
    assert len(trained) == len(ours.betas) >= 1
    pairs += [(ours.beta(layer).grad, props[layer - 1].beta.grad) for layer in trained]
    for a, b in pairs:
        assert torch.allclose(a, b, rtol=1e-6, atol=1e-12), (a - b).abs().max()
    assert ours.fixed_beta.grad is None and (first or not props[0].beta.requires_grad)


def test_agnn_needs_a_propagation_and_one_width():
    with pytest.raises(GridGnnError, match="--layers >= 3"):
        AGNN([7, 5, 3])
    with pytest.raises(GridGnnError, match="one width"):
        AGNN([7, 5, 6, 3])


def va_reference(ours: VA, x: torch.Tensor, mhat: torch.Tensor) -> torch.Tensor:
    """Dense autograd: Ψ = Â ⊙ (H Hᵀ), Z = Ψ H W + b, ReLU between layers (copies of our parameters)."""
    h = x
    params = []
    for layer in range(ours.num_layers):
        w = ours.weights[layer].detach().clone().requires_grad_(True)
        b = ours.biases[layer].detach().clone().requires_grad_(True)
        params += [w, b]
        h = (mhat * (h @ h.T)) @ h @ w + b
        if layer < ours.num_layers - 1:
            h = torch.relu(h)
    return h, params


@pytest.mark.parametrize("directed", [False, True])
@pytest.mark.parametrize("dims", [[7, 5, 3], [7, 9, 4, 3], [7, 2]])
def test_serial_va_equals_dense_autograd(directed, dims):
    g = random_graph(31, 90, directed=directed, seed=5)
    ours = VA(dims, dropout=0.0, seed=4, dtype=torch.float64)
    with torch.no_grad():
        for b in ours.biases:
            b.uniform_(-0.3, 0.3, generator=torch.Generator().manual_seed(1))
    mat = gcn_normalize(g)
    x = torch.from_numpy(g.x).double().requires_grad_(True)
    x_ref = x.detach().clone().requires_grad_(True)
    ref, params = va_reference(ours, x_ref, torch.from_numpy(mat.toarray()))
    mine = ours(x, build_serial(mat))
    assert torch.allclose(mine, ref, rtol=1e-6, atol=1e-12), (mine - ref).abs().max()
    target = torch.randn_like(ref, generator=torch.Generator().manual_seed(0))
    (ref * target).sum().backward()
    (mine * target).sum().backward()
    ours_params = [p for l in range(ours.num_layers) for p in (ours.weights[l], ours.biases[l])]
    for a, b in zip(ours_params, params):
        assert torch.allclose(a.grad, b.grad, rtol=1e-6, atol=1e-12), (a.grad - b.grad).abs().max()
    # the input gradient is Eq. 11's N_* H + (Aᵀ ⊙ H_*) M of the first layer
    assert torch.allclose(x.grad, x_ref.grad, rtol=1e-6, atol=1e-12)
    assert np.isfinite(x.grad.numpy()).all()
