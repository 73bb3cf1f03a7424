r"""GINE (Hu et al. 2020, "Strategies for pre-training graph neural networks"): GIN whose messages read edge
features, with PyG ``GINEConv(nn=Linear, train_eps=True, edge_dim=d)`` semantics, composed of distributed primitives.

One layer, with :math:`e_{vu}` the features of the edge :math:`v \to u` (``g.edge_features``):

.. math::
    h'_u = W \Big( (1 + \varepsilon)\, h_u + \sum_{v \in N(u)} \mathrm{ReLU}\big(h_v + e_{vu} W_e + b_e\big) \Big) + b

summed over the edges of the input graph only (``g.input_edges``: the self-loops of the pattern :math:`M + I` are
not messages, as PyG adds none), ReLU between layers and dropout on every layer's input. As primitives:
``sddmm_add(0, h)`` puts each edge's source row on the edge (``nnz × f``), the edge projection and the ReLU are raw
operations on that edge tensor (local on every layout), and ``spmm`` of those per-edge vectors against a tensor of
ones sums them per destination (one "head" per feature column); the skip term is ``g.at_destinations(h)``.

Where it runs: every block-row algorithm, 2D and 3D. Plexus splits a node tensor's feature columns and its
``sddmm_add`` takes per-node scores, not ``n × f`` features: it is refused there with one line, before anything
trains. Memory: the messages are an ``nnz × f`` edge tensor per layer (kept for the backward).
"""
from __future__ import annotations

import torch

from ..errors import GridGnnError
from ..ops.lean_backward import relu
from .base import Model


class GINE(Model):
    r"""Args:
        dims: ``[f_0, f_1, ..., f_L]``: input width, hidden widths, classes.
        edge_dim: width ``d`` of the graph's edge features (the trainer passes the data's; ``None`` builds the
            node weights only, to learn shapes before the data is read).
        eps: initial :math:`\varepsilon` of every layer (trained).
        dropout, seed, dtype, plan: as :class:`~gridgnn.nn.Model`.
    Parameters per layer ``l``: ``eps`` (1), ``edge_weight`` (``d × f_l``) and ``edge_bias`` (``f_l``), held whole by
    every rank (they act on edge tensors), ``weight`` (``f_l × f_{l+1}``), ``bias`` (``f_{l+1}``); Glorot, zeros.
    """

    requires_edge_features = True  # the trainer refuses a graph without them before anything starts
    reads_destinations = True  # its sddmm_add reads the destinations' rows: one vertex order outside Plexus
    trains_on_samples = True  # a sample's edges read their features by original ids, as every layout's do

    def __init__(self, dims: list[int], *, edge_dim: int | None = None, eps: float = 0.0, **kw):
        super().__init__(dims, **kw)
        if edge_dim is not None and int(edge_dim) < 1:
            raise GridGnnError("--model gine reads edge features: --edge-dim must be at least 1 (the default is "
                               "the data's width)")
        self.edge_dim = 0 if edge_dim is None else int(edge_dim)
        for layer in range(self.num_layers):
            f_in = dims[layer]
            self.add_parameter("eps", layer, self.zeros(1) + float(eps), kind="scalar")
            if self.edge_dim:
                self.add_parameter("edge_weight", layer, self.glorot(self.edge_dim, f_in), kind="edge")
                self.add_parameter("edge_bias", layer, self.zeros(f_in), kind="edge")
            self.add_parameter("weight", layer, self.glorot(f_in, dims[layer + 1]), kind="w")
            self.add_parameter("bias", layer, self.zeros(dims[layer + 1]), kind="b")

    def messages(self, layer: int, g, h: torch.Tensor) -> torch.Tensor:
        r""":math:`\sum_{v} \mathrm{ReLU}(h_v + e_{vu} W_e + b_e)` per destination ``u``, over the input's edges."""
        if not self.edge_dim:
            raise GridGnnError("--model gine reads edge features (edge_attr); the graph carries none")
        edge = g.edge_features @ self.param("edge_weight", layer) + self.param("edge_bias", layer)  # nnz × f
        source = g.sddmm_add(torch.zeros_like(h), h)  # h_v on each edge v → u (s_dst laid out as the input, as
        # every layout takes it: on a sampled block the destinations' own rows are read from it)
        msg = torch.relu(source + edge) * g.input_edges.unsqueeze(1).to(h.dtype)
        return g.spmm(msg, torch.ones_like(h))  # one head per column: Σ_v msg[vu, c] · 1

    def to_pyg(self):
        """This model as PyG ``GINEConv(nn=Linear, train_eps=True, edge_dim=d)`` layers with ReLU between them
        (:mod:`gridgnn.nn.pyg_export`), called ``m(x, edge_index, edge_attr)``."""
        from torch_geometric.nn import GINEConv

        from .pyg_export import check_whole, sequential, set_linear

        check_whole(self)
        if not self.edge_dim:
            raise GridGnnError("this GINE was built without edge_dim: it has no edge weights to export")
        layers = []
        for l, (fi, fo) in enumerate(zip(self.dims[:-1], self.dims[1:])):
            dt = self.param("weight", l).dtype
            conv = GINEConv(torch.nn.Linear(fi, fo), train_eps=True, edge_dim=self.edge_dim).to(dt)
            set_linear(conv.nn, self.param("weight", l), self.param("bias", l))
            set_linear(conv.lin, self.param("edge_weight", l), self.param("edge_bias", l))
            with torch.no_grad():
                conv.eps.copy_(self.param("eps", l).detach().reshape(conv.eps.shape))
            layers.append((conv, "x, edge_index, edge_attr -> x"))
            if l < self.num_layers - 1:
                layers.append(torch.nn.ReLU())
        return sequential("x, edge_index, edge_attr", layers)

    def forward(self, x: torch.Tensor, plan) -> torch.Tensor:
        h = x
        for layer in range(self.num_layers):
            h = self.input_dropout(h, plan, layer, self.dims[layer])
            g = plan.graph(layer)
            h = (1 + self.param("eps", layer)) * g.at_destinations(h) + self.messages(layer, g, h)
            h = plan.add_bias(layer, plan.linear(layer, h, self.param("weight", layer)), self.param("bias", layer))
            if layer < self.num_layers - 1:
                h = relu(h)
        return h
