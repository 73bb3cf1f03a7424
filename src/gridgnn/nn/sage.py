r"""GraphSAGE (Hamilton et al. 2017) full-graph, with PyG ``SAGEConv`` semantics (root weight, bias on the
neighbour side, no normalization), composed of distributed primitives:

.. math:: h'_u = W_l^\mathsf{T} \Big(\bigoplus_{v \in N(u)} h_v\Big) + W_r^\mathsf{T} h_u + b

⊕ is ``--aggr mean | sum | max | min``, a semiring product (SC'23 §4.3, :func:`~gridgnn.parallel.aggregate.aggregate`)
over the neighbours :math:`N(u)` **without** ``u`` itself: the pattern the plan lays out carries the GCN
self-loops, which a mask of ``dst ≠ src`` removes (so a self-loop of the data is not aggregated either; PyG
aggregates one — the two agree on graphs without self-loops, as Planetoid's). A vertex without neighbours
aggregates 0; ``max``/``min`` route each gradient to the neighbour that attains it (ties: the smallest original
vertex id). ReLU between layers, dropout on every layer's input (keyed by global node id and feature).
The root term needs the layer's input in the aggregation's layout: block rows and SUMMA have it; on Plexus, whose
``spmm`` moves the rows to another axis, the root is itself an ``spmm`` over the self-loop edges (each vertex's
loop lies in exactly one shard of its row, in either vertex order of the double permutation).
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from ..errors import GridGnnError
from .dropout import hashed_dropout
from .gcn import glorot_
from .orders import require_destination_scores

AGGREGATIONS = ("mean", "sum", "max", "min")


def neighbour_mask(g) -> torch.Tensor:
    """The local edges ``src → dst`` with ``dst ≠ src`` (bool, in edge order)."""
    dst, src = g.edge_ids()
    return torch.from_numpy(np.asarray(dst) != np.asarray(src))


class SAGE(nn.Module):
    r"""Args:
        dims: ``[f_0, f_1, ..., f_L]`` feature widths (L layers).
        aggr: ``mean`` (default), ``sum``, ``max`` or ``min``.
        dropout: drop probability on each layer's input.
        seed: initial parameters from a CPU generator seeded with ``seed`` (Glorot weights, zero biases).
        plan: the plan the model will run on.
    Parameters per layer: ``weights[l]`` (:math:`W_l`, the aggregated neighbours), ``root_weights[l]``
    (:math:`W_r`, the vertex itself), ``biases[l]``.
    """

    OPTIONS = ("aggr",)  # the trainer options it takes (gridgnn.nn.base.TRAINER_OPTIONS)

    reads_destinations = True  # the root term adds the input's rows to the aggregation's: one vertex order

    def __init__(self, dims: list[int], *, aggr: str = "mean", dropout: float = 0.5, bias: bool = True,
                 seed: int = 0, dtype=torch.float32, plan=None):
        super().__init__()
        if aggr not in AGGREGATIONS:
            raise GridGnnError(f"--aggr {aggr!r} is not available; choose one of {', '.join(AGGREGATIONS)}")
        require_destination_scores(plan, "sage")
        self.dims, self.aggr, self.dropout, self.seed = list(dims), aggr, dropout, seed
        gen = torch.Generator().manual_seed(seed)
        self.weights, self.root_weights, self.biases = nn.ParameterList(), nn.ParameterList(), nn.ParameterList()
        for layer, (fi, fo) in enumerate(zip(dims[:-1], dims[1:])):
            for plist in (self.weights, self.root_weights):
                w = glorot_(torch.empty(fi, fo, dtype=torch.float64), gen)
                if plan is not None:  # this rank's part of a sharded weight (Plexus)
                    w = w[plan.param_slice(layer, "w", w.shape)]
                plist.append(nn.Parameter(w.contiguous().to(dtype)))
            if bias:
                b = torch.zeros(fo, dtype=torch.float64)
                if plan is not None:
                    b = b[plan.param_slice(layer, "b", b.shape)]
                self.biases.append(nn.Parameter(b.contiguous().to(dtype)))
        self.epoch = 0

    @classmethod
    def from_options(cls, dims: list[int], *, plan=None, dtype=torch.float32, seed: int = 0, dropout: float = 0.5,
                     aggr: str = "mean", **_unused) -> "SAGE":
        """The registry's constructor from the trainer's options."""
        return cls(dims, aggr=aggr, dropout=dropout, seed=seed, dtype=dtype, plan=plan)

    @property
    def num_layers(self) -> int:
        return len(self.weights)

    @staticmethod
    def parameter_shapes(dims: list[int], *, bias: bool = True, **_unused) -> dict:
        """``{name: [full shape per layer]}``."""
        out = {"weights": [(fi, fo) for fi, fo in zip(dims[:-1], dims[1:])],
               "root_weights": [(fi, fo) for fi, fo in zip(dims[:-1], dims[1:])]}
        if bias:
            out["biases"] = [(fo,) for fo in dims[1:]]
        return out

    def parameter_entries(self) -> list[tuple]:
        """``(name, layer, parameter, full shape, kind)`` of every parameter (``kind`` for ``plan.param_slice``)."""
        shapes = self.parameter_shapes(self.dims, bias=len(self.biases) > 0)
        out = []
        for l in range(self.num_layers):
            out.append(("weights", l, self.weights[l], shapes["weights"][l], "w"))
            out.append(("root_weights", l, self.root_weights[l], shapes["root_weights"][l], "w"))
            if len(self.biases):
                out.append(("biases", l, self.biases[l], shapes["biases"][l], "b"))
        return out

    def to_pyg(self):
        """This model as PyG ``SAGEConv`` layers (``aggr`` as trained, root weight) with ReLU between them
        (:mod:`gridgnn.nn.pyg_export`), called ``m(x, edge_index)``. PyG aggregates a self-loop of the data as a
        neighbour, this model does not: the two agree on graphs without self-loops."""
        from torch_geometric.nn import SAGEConv

        from .pyg_export import check_whole, sequential, set_linear

        check_whole(self)
        layers = []
        for l, (fi, fo) in enumerate(zip(self.dims[:-1], self.dims[1:])):
            conv = SAGEConv(fi, fo, aggr=self.aggr, bias=len(self.biases) > 0).to(self.weights[l].dtype)
            set_linear(conv.lin_l, self.weights[l], self.biases[l] if len(self.biases) else None)
            set_linear(conv.lin_r, self.root_weights[l], None)
            layers.append((conv, "x, edge_index -> x"))
            if l < self.num_layers - 1:
                layers.append(nn.ReLU())
        return sequential("x, edge_index", layers)

    def forward(self, x: torch.Tensor, plan) -> torch.Tensor:
        h = x
        for layer in range(self.num_layers):
            f_in = self.dims[layer]
            h = hashed_dropout(h, self.dropout, plan.in_rows(layer), seed=self.seed, epoch=self.epoch, layer=layer,
                               training=self.training, features=f_in, cols=plan.in_cols(layer, f_in))
            g = plan.graph(layer)
            loops = neighbour_mask(g).to(h.device)  # True: a neighbour, False: the vertex itself
            agg = g.spmm(None, h, semiring=self.aggr, mask=loops)
            root = h if plan.root_in_aggregate_layout else g.spmm(None, h, mask=~loops)  # h_u, laid out as agg
            h = plan.linear(layer, agg, self.weights[layer]) + plan.linear(layer, root, self.root_weights[layer])
            if len(self.biases):
                h = plan.add_bias(layer, h, self.biases[layer])
            if layer < self.num_layers - 1:
                h = torch.relu(h)
        return h
