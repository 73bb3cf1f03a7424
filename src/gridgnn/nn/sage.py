r"""GraphSAGE (Hamilton et al. 2017) full-graph, with PyG ``SAGEConv`` semantics (root weight, bias on the
neighbour side, no normalization), composed of distributed primitives:

.. math:: h'_u = W_l^\mathsf{T} \Big(\bigoplus_{v \in N(u)} h_v\Big) + W_r^\mathsf{T} h_u + b

⊕ is ``--aggr mean | sum | max | min``, a semiring product (SC'23 §4.3, :func:`~gridgnn.parallel.aggregate.aggregate`)
over the neighbours :math:`N(u)` **without** ``u`` itself: the pattern the plan lays out carries the GCN
self-loops, which a mask of ``dst ≠ src`` removes (so a self-loop of the data is not aggregated either; PyG
aggregates one — the two agree on graphs without self-loops, as Planetoid's). A vertex without neighbours
aggregates 0; ``max``/``min`` route each gradient to the neighbour that attains it (ties: the smallest original
vertex id). ReLU between layers, dropout on every layer's input (keyed by global node id and feature).
A mean or a sum aggregates :math:`H` or :math:`H W_l` in GCN's order (:meth:`~gridgnn.nn.Model.multiplies_first`:
the same result; multiplying first, no ``n × f_in`` aggregate is kept for the weight's gradient).
The root term needs the layer's input in the aggregation's layout: block rows and SUMMA have it; on Plexus, whose
``spmm`` moves the rows to another axis, the root is itself an ``spmm`` over the self-loop edges (each vertex's
loop lies in exactly one shard of its row, in either vertex order of the double permutation).
"""
from __future__ import annotations

import torch
from torch import nn

from ..errors import GridGnnError
from ..ops.lean_backward import relu
from ..ops.owned import transformed
from .base import LAYER_ORDER_OPTION, Model, Option, parameter_group

AGGREGATIONS = ("mean", "sum", "max", "min")
LINEAR = ("mean", "sum")  # the aggregations a linear map commutes with: ⊕_v (h_v W) = (⊕_v h_v) W


class SAGE(Model):
    r"""Args:
        dims: ``[f_0, f_1, ..., f_L]`` feature widths (L layers).
        aggr: ``mean`` (default), ``sum``, ``max`` or ``min``.
        dropout: drop probability on each layer's input.
        seed: initial parameters from a CPU generator seeded with ``seed`` (Glorot weights, zero biases).
        plan: the plan the model will run on.
        layer_order: ``auto`` or ``lean`` (a mean or a sum): the order of the first layer's products at equal
            widths (:meth:`~gridgnn.nn.Model.multiplies_first`).
    Parameters per layer: ``weights[l]`` (:math:`W_l`, the aggregated neighbours), ``root_weights[l]``
    (:math:`W_r`, the vertex itself), ``biases[l]``.
    """

    OPTIONS = {"aggr": Option(str, "mean", choices=AGGREGATIONS, help="neighbour aggregation"),
               "layer_order": LAYER_ORDER_OPTION}  # (mean and sum: max and min aggregate first in either)
    reads_destinations = True  # the root term adds the input's rows to the aggregation's: one vertex order
    trains_on_samples = True
    reads_data_self_loops = False  # the aggregation masks the diagonal (the root term is the vertex itself)

    weights = parameter_group()
    root_weights = parameter_group()
    biases = parameter_group()  # model.NAME[l]: the parameters of each layer

    def __init__(self, dims: list[int], *, aggr: str = "mean", dropout: float = 0.5, bias: bool = True,
                 seed: int = 0, dtype=torch.float32, plan=None, layer_order: str = "auto"):
        if aggr not in AGGREGATIONS:
            raise GridGnnError(f"--aggr {aggr!r} is not available; choose one of {', '.join(AGGREGATIONS)}")
        super().__init__(dims, dropout=dropout, seed=seed, dtype=dtype, plan=plan, layer_order=layer_order)
        if layer_order != "auto" and aggr not in LINEAR:
            raise GridGnnError(f"--layer-order {layer_order} applies to --aggr {' or '.join(LINEAR)}: a {aggr} "
                               "aggregates first whatever the order (a selection does not commute with the weight)")
        self.aggr, self.bias = aggr, bool(bias)
        for layer, (fi, fo) in enumerate(zip(dims[:-1], dims[1:])):
            self.add_parameter("weights", layer, self.glorot(fi, fo), "w")
            self.add_parameter("root_weights", layer, self.glorot(fi, fo), "w")
            if bias:
                self.add_parameter("biases", layer, self.zeros(fo), "b")

    def to_pyg(self):
        """This model as PyG ``SAGEConv`` layers (``aggr`` as trained, root weight) with ReLU between them
        (:mod:`gridgnn.nn.pyg_export`), called ``m(x, edge_index)``. PyG aggregates a self-loop of the data as a
        neighbour, this model does not: the two agree on graphs without self-loops (a trained model's export,
        :class:`~gridgnn.nn.pyg_export.PygExport`, leaves them out before these layers)."""
        from torch_geometric.nn import SAGEConv

        from .pyg_export import check_whole, sequential, set_linear

        check_whole(self)
        layers = []
        for l, (fi, fo) in enumerate(zip(self.dims[:-1], self.dims[1:])):
            conv = SAGEConv(fi, fo, aggr=self.aggr, bias=self.bias).to(self.weights[l].dtype)
            set_linear(conv.lin_l, self.weights[l], self.biases[l] if self.bias else None)
            set_linear(conv.lin_r, self.root_weights[l], None)
            layers.append((conv, "x, edge_index -> x"))
            if l < self.num_layers - 1:
                layers.append(nn.ReLU())
        return sequential("x, edge_index", layers)

    def forward(self, x: torch.Tensor, plan) -> torch.Tensor:
        h = x
        for layer in range(self.num_layers):
            h = self.input_dropout(h, plan, layer, self.dims[layer])
            g = plan.graph(layer)
            loops = g.off_diagonal  # True: a neighbour, False: the vertex itself
            w, w_root = self.param("weights", layer), self.param("root_weights", layer)
            # the products, then the aggregations, or (aggregating first) the other way round; on Plexus a layer's
            # linear calls read one layout and its spmm calls another, so its calls of one kind come together
            if self.aggr in LINEAR and self.multiplies_first(plan, layer):  # ⊕(H W): no n × f_in aggregate kept
                agg, root = plan.linears(layer, h, (w, w_root))  # (one product where the plan stacks weights)
                del h
                agg = g.spmm(None, agg, semiring=self.aggr, mask=loops)
                if not plan.root_in_aggregate_layout:  # h_u W_r, laid out as agg
                    root = g.spmm(None, root, mask=~loops)
            elif plan.root_in_aggregate_layout:  # the aggregation, the root term's product, then h goes before
                agg = g.spmm(None, h, semiring=self.aggr, mask=loops)  # the aggregate's product is made
                root = plan.linear(layer, h, w_root)
                del h
                agg = plan.linear(layer, agg, w)
            else:  # h_u laid out as agg (Plexus, whose layer makes its spmm calls, then its linear calls)
                agg, root = g.spmm(None, h, semiring=self.aggr, mask=loops), g.spmm(None, h, mask=~loops)
                del h
                agg, root = plan.linear(layer, agg, w), plan.linear(layer, root, w_root)
            h = _sum_into(agg, root)
            del agg, root
            if self.bias:
                h = plan.add_bias(layer, h, self.param("biases", layer))
            if layer < self.num_layers - 1:
                h = relu(h)
        return h


def _sum_into(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a + b`` written over ``a`` — a fresh output of the layer's product or aggregation, which no backward saves
    (:class:`~gridgnn.parallel.base.Plan`) — where ``a`` is no view and no ``torch.func`` transform is in force (one
    batched over ``b`` alone could not write into ``a``): one node tensor fewer alive at the layer's end."""
    return a + b if a._base is not None or transformed() else a.add_(b)
