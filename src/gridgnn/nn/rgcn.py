r"""R-GCN (Schlichtkrull et al. 2018, "Modeling relational data with graph convolutional networks") with PyG
``RGCNConv`` semantics (``aggr="mean"`` per relation, a root weight, a bias, optional basis decomposition), composed
of distributed primitives.

One layer, with :math:`N_r(u)` the sources of the edges of relation :math:`r` into :math:`u`:

.. math::
    h'_u = h_u W_{\text{root}} + \sum_{r} \frac{1}{|N_r(u)|} \sum_{v \in N_r(u)} h_v W_r + b,
    \qquad W_r = \sum_{k=1}^{B} c_{rk} V_k \ \text{(basis decomposition, ``--bases B``)}

ReLU between layers and dropout on every layer's input. As primitives: ``g.relation_values`` (``nnz × R``: each
local edge's weight :math:`c_r(v \to u)/|N_r(u)|` in each relation's mean, read from the whole graph's table by
original edge ids, so laid out like the edge values on every algorithm) gives the edge values of each term. With
bases the sum is regrouped by basis,

.. math::
    \sum_r A_r H W_r = \sum_k \Big(\sum_r c_{rk} A_r\Big) H V_k,

so a layer runs ``B`` ``spmm`` (one per basis, over the shared pattern with values ``relation_values @ comp``),
not ``R``: the communication of a layer is that of ``B`` GCN aggregations (``R`` without bases) at the narrower of
``f_in`` and ``f_out`` — whichever side is narrower is aggregated (equal widths: aggregating first; GCN's
equal-width rule, :meth:`~gridgnn.nn.Model.multiplies_first`, is not R-GCN's yet: on Plexus the memory model
counts an R-GCN layer that multiplies first at equal widths at about twice what it holds). The root term is
``g.at_destinations``. Every algorithm runs it (on a double vertex order outside Plexus the root term is refused, as
for SAGE); the byte models count every ``spmm`` from the model's trace.

Memory: ``relation_values`` is a dense ``nnz_local × R`` edge tensor, and every rank holds the whole graph's
``int32[nnz, R]`` relation counts (as for edge features): many relations on a large graph cost ``R`` numbers per edge.
"""
from __future__ import annotations

import torch

from ..errors import GridGnnError
from ..ops.lean_backward import relu
from .base import Model, Option


class RGCN(Model):
    r"""Args:
        dims: ``[f_0, f_1, ..., f_L]``: input width, hidden widths, classes.
        num_relations: the number ``R`` of relation types (the trainer passes the data's; ``None`` builds the
            root weights only, to learn shapes before the data is read).
        bases: ``B`` basis matrices per layer shared by all relations (PyG ``num_bases``); ``0``: one weight per
            relation.
        dropout, seed, dtype, plan: as :class:`~gridgnn.nn.Model`.
    Parameters per layer ``l``: ``basis0 .. basis{B-1}`` (``f_l × f_{l+1}``) and ``comp`` (``R × B``, held whole by
    every rank), or ``relation0 .. relation{R-1}`` (``f_l × f_{l+1}``) without bases; ``root`` (``f_l × f_{l+1}``),
    ``bias`` (``f_{l+1}``). Glorot, zeros.
    """

    OPTIONS = {"bases": Option(int, 0, low=0, high=4096,
                               help="basis matrices per R-GCN layer shared by every relation (0: one per relation)")}
    requires_relations = True  # the trainer refuses a graph without relation types before anything starts
    reads_destinations = True  # the root term adds the input's rows to the aggregation's: one vertex order
    trains_on_samples = True  # a sample's edges read their features or relations by original ids

    def __init__(self, dims: list[int], *, num_relations: int | None = None, bases: int = 0, **kw):
        super().__init__(dims, **kw)
        if num_relations is not None and int(num_relations) < 1:
            raise GridGnnError("--model rgcn reads relation types: the graph needs at least one (edge_type)")
        self.num_relations = 0 if num_relations is None else int(num_relations)
        self.bases = int(bases)
        for layer in range(self.num_layers):
            fi, fo = dims[layer], dims[layer + 1]
            if self.bases:
                for k in range(self.bases):
                    self.add_parameter(f"basis{k}", layer, self.glorot(fi, fo), kind="w")
                if self.num_relations:
                    self.add_parameter("comp", layer, self.glorot(self.num_relations, self.bases), kind="relation")
            else:
                for r in range(self.num_relations):
                    self.add_parameter(f"relation{r}", layer, self.glorot(fi, fo), kind="w")
            self.add_parameter("root", layer, self.glorot(fi, fo), kind="w")
            self.add_parameter("bias", layer, self.zeros(fo), kind="b")

    @property
    def terms(self) -> int:
        """How many ``spmm`` a layer runs: ``B`` with bases, else ``R``."""
        return self.bases or self.num_relations

    def term_values(self, layer: int, g) -> torch.Tensor:
        r"""``nnz × terms``: the edge values of each term, ``relation_values @ comp`` with bases (the aggregation
        :math:`\sum_r c_{rk} A_r` of basis ``k``), else ``relation_values`` (relation ``r``'s mean)."""
        if not self.num_relations:
            raise GridGnnError("--model rgcn reads relation types (edge_type); the graph carries none")
        rel = g.relation_values
        return rel @ self.param("comp", layer) if self.bases else rel

    def term_weight(self, layer: int, k: int) -> torch.Tensor:
        return self.param(f"basis{k}" if self.bases else f"relation{k}", layer)

    def forward(self, x: torch.Tensor, plan) -> torch.Tensor:
        h = x
        for layer in range(self.num_layers):
            h = self.input_dropout(h, plan, layer, self.dims[layer])
            g = plan.graph(layer)
            values = self.term_values(layer, g)
            root = self.param("root", layer)
            # every linear of a layer reads one layout and every aggregation another (Plexus rotates them)
            if self.dims[layer + 1] < self.dims[layer]:  # aggregate HV_k (f_out columns)
                *hw, hr = plan.linears(layer, h, [self.term_weight(layer, k) for k in range(self.terms)] + [root])
                out = g.at_destinations(hr)
                for k in range(self.terms):
                    out = out + g.spmm(values[:, k], hw[k])
                del hw, hr  # (views of one product, whose storage goes with the last of them; at a first layer,
                # whose input needs no gradient, a product each: stacked_linears)
            else:  # aggregate H (f_in columns)
                ah = [g.spmm(values[:, k], h) for k in range(self.terms)]
                out = plan.linear(layer, g.at_destinations(h), root)
                for k in range(self.terms):
                    out = out + plan.linear(layer, ah[k], self.term_weight(layer, k))
            h = plan.add_bias(layer, out, self.param("bias", layer))
            if layer < self.num_layers - 1:
                h = relu(h)
        return h

    def to_pyg(self):
        """This model as PyG ``RGCNConv`` layers (``aggr="mean"``, ``num_bases`` = ``bases`` or ``None``) with ReLU
        between them (:mod:`gridgnn.nn.pyg_export`), called ``m(x, edge_index, edge_type)``."""
        from torch_geometric.nn import RGCNConv

        from .pyg_export import check_whole, sequential

        check_whole(self)
        if not self.num_relations:
            raise GridGnnError("this R-GCN was built without num_relations: it has no relation weights to export")
        layers = []
        for l, (fi, fo) in enumerate(zip(self.dims[:-1], self.dims[1:])):
            dt = self.param("root", l).dtype
            conv = RGCNConv(fi, fo, self.num_relations, num_bases=self.bases or None).to(dt)
            with torch.no_grad():
                for k in range(self.terms):
                    conv.weight[k].copy_(self.term_weight(l, k).detach())
                if self.bases:
                    conv.comp.copy_(self.param("comp", l).detach())
                conv.root.copy_(self.param("root", l).detach())
                conv.bias.copy_(self.param("bias", l).detach())
            layers.append((conv, "x, edge_index, edge_type -> x"))
            if l < self.num_layers - 1:
                layers.append(torch.nn.ReLU())
        return sequential("x, edge_index, edge_type", layers)
