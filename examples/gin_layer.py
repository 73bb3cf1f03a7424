r"""GIN with a learned :math:`\varepsilon` (Xu et al., PyG ``GINConv(train_eps=True)`` with a one-layer MLP), written
twice against gridgnn's primitives: the way that runs equal to serial on every algorithm, and the first way one
might write it, which the model's trace refuses on Plexus with one line (see docs/custom-layer.md).

.. math::
    h'_u = W \big( (1 + \varepsilon)\, h_u + \textstyle\sum_{v \in N(u)} h_v \big) + b

.. code-block:: bash

    gridgnn train --model examples.gin_layer:GIN --algo plexus --nproc 4 --grid 2,2,1 --epochs 20
"""
from __future__ import annotations

import torch

from gridgnn.nn import Model


class GIN(Model):
    r"""Args:
        dims (list[int]): ``[f_0, f_1, ..., f_L]``: input width, hidden widths, classes.
        eps (float, optional): initial :math:`\varepsilon` of every layer (trained). (default: ``0.0``)
        dropout (float, optional): dropout on every layer's input. (default: ``0.5``)
    """

    def __init__(self, dims, *, eps: float = 0.0, **kw):
        super().__init__(dims, **kw)
        for layer in range(self.num_layers):
            self.add_parameter("eps", layer, self.zeros(1) + eps, kind="scalar")
            self.add_parameter("weight", layer, self.glorot(dims[layer], dims[layer + 1]), kind="w")
            self.add_parameter("bias", layer, self.zeros(dims[layer + 1]), kind="b")

    def combine(self, plan, layer: int, g, h: torch.Tensor) -> torch.Tensor:
        """``(1 + ε) h_u + Σ_v h_v``: the skip term moved to the aggregation's layout (``g.at_destinations``)."""
        return (1 + self.param("eps", layer)) * g.at_destinations(h) + g.spmm(None, h)

    def forward(self, x: torch.Tensor, plan) -> torch.Tensor:
        h = x
        for layer in range(self.num_layers):
            h = self.input_dropout(h, plan, layer, self.dims[layer])
            h = self.combine(plan, layer, plan.graph(layer), h)
            h = plan.add_bias(layer, plan.linear(layer, h, self.param("weight", layer)), self.param("bias", layer))
            if layer < self.num_layers - 1:
                h = torch.relu(h)
        return h


class NaiveGIN(GIN):
    """The same layer with the skip term added as it is: ``spmm(h) + (1 + ε) h``. Equal to serial where ``spmm``
    keeps the rows where they are (the block-row and SUMMA families); refused on Plexus, where ``spmm`` moves them."""

    def combine(self, plan, layer, g, h):
        return g.spmm(None, h) + (1 + self.param("eps", layer)) * h
