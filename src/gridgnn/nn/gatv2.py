r"""GATv2 (Brody et al. 2022) with edge features, PyG ``GATv2Conv(edge_dim=d)`` semantics, composed of distributed
primitives.

One layer with ``K`` heads of width ``F`` on the pattern :math:`M + I` (self-loops added, rows = destinations), with
:math:`e_{vu}` the features of the edge :math:`v \to u` (``g.edge_features``; an added self-loop carries the mean
of its vertex's incoming edge features, PyG's ``fill_value="mean"``):

.. math::
    X^l = H W_l + b_l, \quad X^r = H W_r + b_r, \quad
    s_{uv,h} = a_h^\top \mathrm{LeakyReLU}_{0.2}\big(X^r_{u,h} + X^l_{v,h} + (e_{vu} W_e)_h\big), \quad
    \alpha = \mathrm{softmax}_v(s), \quad Y_{u,h} = \textstyle\sum_v \alpha_{uv,h} X^l_{v,h}

then the heads are concatenated (hidden layers) or averaged (the last layer), the bias is added, and ELU runs
between layers; without edge features (``edge_dim`` 0) the edge term is absent. As primitives: two ``linear`` and
``add_bias``, ``sddmm_add`` of the two ``n × K·F`` outputs (an ``nnz × K·F`` edge tensor), the edge projection,
LeakyReLU and the attention vector as raw operations on edge tensors (local on every layout), ``edge_softmax``,
keyed dropout of :math:`\alpha`, ``spmm``.

Where it runs: every block-row algorithm, 2D and 3D (one vertex order: it reads the destinations' rows). Plexus
splits a node tensor's feature columns and its ``sddmm_add`` takes per-node scores: refused there with one line.
PyG's GATv2 replaces a self-loop of the data by the added one; this model keeps the data's (as ``GATConv``'s
neighbourhood with ``add_remaining_self_loops``): the two agree on graphs without self-loops.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..ops.masked import dropped
from .base import Model
from .gat import GAT, NEGATIVE_SLOPE


class GATv2(Model):
    r"""Args:
        dims: ``[f_0, F_1, ..., F_L]``: input width, then the per-head width of each layer (the last is the number
            of classes).
        heads: heads of every hidden layer (concatenated); ``out_heads``: of the last layer (averaged).
        edge_dim: width ``d`` of the graph's edge features (the trainer passes the data's; ``0`` or ``None``: none).
        dropout: on each layer's input; ``attn_dropout``: on the attention coefficients (``None``: ``dropout``).
        seed, dtype, plan: as :class:`~gridgnn.nn.Model`.
    Parameters per layer ``l``: ``w_src``, ``w_dst`` (``f_in × K·F``), ``b_src``, ``b_dst`` (``K·F``), ``att``
    (``K × F``), ``w_edge`` (``d × K·F``, with edge features), ``biases`` (``K·F`` or ``F``); Glorot, bias zero
    (PyG's initialization).
    """

    OPTIONS = GAT.OPTIONS
    reads_destinations = True
    trains_on_samples = True  # a sample's edges read their features or relations by original ids

    def __init__(self, dims: list[int], *, heads: int = 8, out_heads: int = 1, edge_dim: int | None = None,
                 dropout: float = 0.6, attn_dropout: float | None = None, seed: int = 0, dtype=torch.float32,
                 plan=None):
        super().__init__(dims, dropout=dropout, seed=seed, dtype=dtype, plan=plan)
        self.heads, self.out_heads = int(heads), int(out_heads)
        self.edge_dim = int(edge_dim or 0)
        self.attn_dropout = self.dropout if attn_dropout is None else float(attn_dropout)
        for layer in range(self.num_layers):
            k, fo, fi = self.layer_heads(layer), dims[layer + 1], self.in_width(layer)
            for side in ("src", "dst"):
                self.add_parameter(f"w_{side}", layer, self.glorot(fi, k * fo), "w")
                self.add_parameter(f"b_{side}", layer, self.zeros(k * fo), "b")
            self.add_parameter("att", layer, self.glorot(k, fo), "att")
            if self.edge_dim:
                self.add_parameter("w_edge", layer, self.glorot(self.edge_dim, k * fo), "edge")
            self.add_parameter("biases", layer, self.zeros(k * fo if layer < self.num_layers - 1 else fo), "b")

    layer_heads = GAT.layer_heads
    in_width = GAT.in_width
    attention_keep = GAT.attention_keep

    def scores(self, layer: int, g, xr: torch.Tensor, xl: torch.Tensor) -> torch.Tensor:
        """``nnz × K``: each edge's score per head."""
        k, fo = self.layer_heads(layer), self.dims[layer + 1]
        e = g.sddmm_add(xr, xl)  # nnz × K·F: X^r of the destination plus X^l of the source
        if self.edge_dim:
            e = e + g.edge_features @ self.param("w_edge", layer)
        e = F.leaky_relu(e, NEGATIVE_SLOPE)
        return (e.reshape(e.shape[0], k, fo) * self.param("att", layer)).sum(-1)

    def forward(self, x: torch.Tensor, plan) -> torch.Tensor:
        h = x
        last = self.num_layers - 1
        for layer in range(self.num_layers):
            k, fo = self.layer_heads(layer), self.dims[layer + 1]
            h = self.input_dropout(h, plan, layer, self.in_width(layer))
            g = plan.graph(layer)
            xl, xr = plan.linears(layer, h, (self.param("w_src", layer), self.param("w_dst", layer)))
            xl = plan.add_bias(layer, xl, self.param("b_src", layer))
            xr = plan.add_bias(layer, xr, self.param("b_dst", layer))
            del h  # (the dropped input is not kept alive through the attention)
            alpha = g.edge_softmax(self.scores(layer, g, xr, xl))
            keep, redraw = self.attention_keep(g, layer, k, alpha.device)
            if keep is not None:
                alpha = dropped(alpha, keep, 1.0 - self.attn_dropout, redraw)
            del keep, redraw  # (a mask drawn again is not held through the aggregation and the next layer)
            h = g.spmm(alpha, xl)  # n × K·F
            if layer == last:
                h = plan.head_mean(layer, h, k, k * fo)
            h = plan.add_bias(layer, h, self.param("biases", layer))
            if layer < last:
                h = F.elu(h)
        return h

    def to_pyg(self):
        """This model as PyG ``GATv2Conv`` layers (hidden: ``heads`` concatenated; last: ``out_heads`` averaged;
        ``edge_dim`` when it has edge features) with ELU between them (:mod:`gridgnn.nn.pyg_export`), called
        ``m(x, edge_index, edge_attr)`` (``edge_attr`` ``None`` without edge features)."""
        from torch_geometric.nn import GATv2Conv

        from .pyg_export import check_whole, sequential, set_linear

        check_whole(self)
        layers, last = [], self.num_layers - 1
        for l in range(self.num_layers):
            k, fo = self.layer_heads(l), self.dims[l + 1]
            conv = GATv2Conv(self.in_width(l), fo, heads=k, concat=l < last, negative_slope=NEGATIVE_SLOPE,
                             edge_dim=self.edge_dim or None).to(self.param("w_src", l).dtype)
            set_linear(conv.lin_l, self.param("w_src", l), self.param("b_src", l))
            set_linear(conv.lin_r, self.param("w_dst", l), self.param("b_dst", l))
            if self.edge_dim:
                set_linear(conv.lin_edge, self.param("w_edge", l), None)
            with torch.no_grad():
                conv.att.copy_(self.param("att", l).detach().reshape(1, k, fo))
                conv.bias.copy_(self.param("biases", l).detach())
            layers.append((conv, "x, edge_index, edge_attr -> x"))
            if l < last:
                layers.append(torch.nn.ELU())
        return sequential("x, edge_index, edge_attr", layers)
