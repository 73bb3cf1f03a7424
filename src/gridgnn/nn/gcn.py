r"""GCN (Kipf & Welling) as a stack of :math:`H^{l} = \sigma(\hat M H^{l-1} W^{l} + b^{l})`, written against a
*plan* (the distributed algorithm on this rank) so the same model runs serially and on every algorithm.

A layer is ``linear → spmm(Â)`` or ``spmm(Â) → linear``, the same products in the order that aggregates fewer
columns forward and backward (:meth:`~gridgnn.nn.Model.multiplies_first`) — with the edge values
:math:`\hat M` that ``plan.graph(l).gcn_values`` lays out like the pattern, then ``plan.add_bias``. ``plan.in_rows(l)`` and
``plan.in_cols(l, f)`` name the global rows and columns of the layer's input block. Dropout (on each layer's input) uses
:func:`~gridgnn.nn.dropout.hashed_dropout` keyed by global node id and feature, so every layout draws the
same mask.
"""
from __future__ import annotations

import torch
from torch import nn

from ..ops.lean_backward import relu
from .base import LAYER_ORDER_OPTION, Model, parameter_group


class GCN(Model):
    r"""Args:
        dims: ``[f_0, f_1, ..., f_L]`` feature widths (L layers).
        dropout: drop probability on each layer's input.
        bias: add a bias after aggregation.
        seed: initial weights come from a CPU generator seeded with ``seed`` (identical on every rank).
        plan: when given, each rank keeps only ``plan.param_slice(l, "w"/"b")`` of the full parameters
            (sharded tensor parallelism); the full initial values are the same for every layout.
        layer_order: ``auto`` or ``lean``, the order of the first layer's products at equal widths
            (:meth:`~gridgnn.nn.Model.multiplies_first`).
    Parameters per layer ``l``: ``weights`` (``f_l × f_{l+1}``, Glorot) and ``biases`` (zero), as
    :meth:`~gridgnn.nn.Model.add_parameter` registers them (``model.weights``: the list of them).
    Shapes: input ``n_local × f_0`` → logits ``n_local × f_L`` (local blocks as the plan lays them out).
    """

    OPTIONS = {"layer_order": LAYER_ORDER_OPTION}
    trains_on_samples = True

    weights = parameter_group()
    biases = parameter_group()  # model.NAME[l]: the parameters of each layer

    def __init__(self, dims: list[int], *, dropout: float = 0.5, bias: bool = True, seed: int = 0,
                 dtype=torch.float32, plan=None, layer_order: str = "auto"):
        super().__init__(dims, dropout=dropout, seed=seed, dtype=dtype, plan=plan, layer_order=layer_order)
        self.bias = bool(bias)
        for layer, (fi, fo) in enumerate(zip(dims[:-1], dims[1:])):
            self.add_parameter("weights", layer, self.glorot(fi, fo), "w")
            if bias:
                self.add_parameter("biases", layer, self.zeros(fo), "b")

    def to_pyg(self):
        """This model as PyG ``GCNConv`` layers with ReLU between them (:mod:`gridgnn.nn.pyg_export`), called
        ``m(x, edge_index, edge_weight)`` (``None``: unweighted)."""
        from torch_geometric.nn import GCNConv

        from ..errors import GridGnnError
        from .pyg_export import check_whole, sequential, set_linear

        if type(self).layer is not GCN.layer or type(self).forward is not GCN.forward:  # VA: a layer of its own
            raise GridGnnError(f"{type(self).__name__} has a layer of its own: it has no PyG equivalent to export "
                               "to (its parameters: state_dict())")
        check_whole(self)
        layers = []
        for l, (fi, fo) in enumerate(zip(self.dims[:-1], self.dims[1:])):
            conv = GCNConv(fi, fo, bias=self.bias).to(self.weights[l].dtype)
            set_linear(conv.lin, self.weights[l], None)
            if self.bias:
                with torch.no_grad():
                    conv.bias.copy_(self.biases[l].detach())
            layers.append((conv, "x, edge_index, edge_weight -> x"))
            if l < self.num_layers - 1:
                layers.append(nn.ReLU())
        return sequential("x, edge_index, edge_weight", layers)

    def layer(self, plan, layer: int, h: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
        r"""One layer before its activation, :math:`\hat M H W + b` composed of ``linear`` and ``spmm`` (a subclass
        with the same parameters changes only this), in the order of :meth:`~gridgnn.nn.Model.multiplies_first`.
        Each operand is let go (``del``) as soon as the next
        product has it, so neither the layer's dropped input nor its first product stays alive through the rest of
        the layer (the caller hands the input over without keeping a name for it)."""
        g = plan.graph(layer)
        if self.multiplies_first(plan, layer):
            first = plan.linear(layer, h, w)
            del h
            h = g.spmm(g.gcn_values, first)
        else:
            first = g.spmm(g.gcn_values, h)
            del h
            h = plan.linear(layer, first, w)
        del first
        return h if b is None else plan.add_bias(layer, h, b)

    def forward(self, x: torch.Tensor, plan) -> torch.Tensor:
        h = x
        for layer in range(self.num_layers):
            b = self.param("biases", layer) if self.bias else None
            # the dropped input goes to the layer alone (no name here keeps it alive while the layer runs)
            h = self.layer(plan, layer, self.input_dropout(h, plan, layer, self.dims[layer]), self.param("weights", layer),
                           b)
            if layer < self.num_layers - 1:
                h = relu(h)
        return h
