r"""The built-in models as PyG modules (``to_pyg`` of :class:`~gridgnn.nn.GCN`, :class:`~gridgnn.nn.GAT`,
:class:`~gridgnn.nn.AGNN`, :class:`~gridgnn.nn.SAGE`, :class:`~gridgnn.nn.GINE`, :class:`~gridgnn.nn.GATv2`): a
``torch_geometric.nn.Sequential`` of PyG layers holding the model's full parameters, called ``m(x, edge_index)``
(GCN: ``m(x, edge_index, edge_weight)``, ``None`` for an unweighted graph; GINE, GATv2: ``m(x, edge_index,
edge_attr)``), in eval mode. It pickles with ``torch.save`` and loads with plain PyG
(``torch.load(path, weights_only=False)``: a pickled module, so load only files you trust).
"""
from __future__ import annotations

import torch


def sequential(signature: str, layers: list):
    """``torch_geometric.nn.Sequential(signature, layers)`` in eval mode, without gradients."""
    from torch_geometric.nn import Sequential

    model = Sequential(signature, layers)
    for p in model.parameters():
        p.requires_grad_(False)
    return model.eval()


def set_linear(lin, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
    """A ``Linear`` (PyG's or torch's: ``weight`` is ``out × in``) set to ``x @ weight + bias`` of a model whose
    weights are ``in × out``."""
    with torch.no_grad():
        lin.weight.copy_(weight.detach().T)
        if bias is not None:
            lin.bias.copy_(bias.detach())


def check_whole(model) -> None:
    """``to_pyg`` reads full parameters: the serial model (``plan=None``), e.g. :attr:`gridgnn.TrainedModel.module`."""
    if any(p.shape != tuple(shape) for _, _, p, shape, _ in model.parameter_entries()):
        raise ValueError("to_pyg needs the model's full parameters (a model built with plan=None)")
