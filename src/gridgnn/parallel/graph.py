r"""The contract of a distributed graph: what every family (``blockrow.py``, ``summa.py``, ``plexus.py``) provides
to the models for one layer on one rank, and the methods written once on top of it.

A family implements the data movement — the sum SpMM (:meth:`DistGraph.spmm_sum`), the selecting semirings
(:meth:`DistGraph.spmm_select`), the two SDDMMs, :meth:`DistGraph.at_destinations`, the reduction of per-row
statistics over the ranks that share a row (:meth:`DistGraph.row_all`) — and describes its local edges
(:meth:`DistGraph.edge_rows`, :meth:`DistGraph.edge_ids`, ``gcn_values``, ``nnz``). The aggregation over any
semiring, the edge softmax and the row sums follow from those, here; fused attention is optional
(:meth:`DistGraph.fused_attention` returns ``None``: the caller composes the primitives).
"""
from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np
import torch

from ..errors import GridGnnError
from ..ops.pattern import reduce_rows
from .aggregate import aggregate
from .edge_softmax import EdgeSoftmax


class DistGraph(ABC):
    """One layer's distributed graph on this rank (see the module docstring).

    Attributes every family sets: ``gcn_values`` (the :math:`\\hat M` values of the local edges, in edge order) and
    ``nnz`` (the number of local edges)."""

    gcn_values: torch.Tensor
    nnz: int
    #: the :class:`~gridgnn.graph.Graph` whose edge features the local edges read (set where the plan is built;
    #: ``None``: the data carries none)
    edge_table = None
    _edge_cache = None
    _relation_cache = None
    _off_diagonal = None
    _source_keys = None  # the selecting semirings' tie-break keys (SourceKeys), where a layer selects

    # ------------------------------------------------------------------ what a family provides
    @abstractmethod
    def edge_ids(self) -> tuple[np.ndarray, np.ndarray]:
        """Original (destination, source) vertex ids of the local edges, in edge order."""

    @abstractmethod
    def edge_rows(self) -> tuple[torch.Tensor | None, int, torch.Tensor | None]:
        """The local row of every local edge, the number of local rows and the CSR pointer (``None`` when the edges
        are not in row order). With a pointer the rows may be ``None`` (a CPU graph keeps none: the kernels walk
        the pointer; :func:`~gridgnn.ops.pattern.row_index` makes them where a composition needs them)."""

    @abstractmethod
    def row_all(self, t: torch.Tensor, op: str = "sum") -> torch.Tensor:
        """Reduce per-row statistics over the ranks that hold part of a row's edges (in place; returns ``t``)."""

    @abstractmethod
    def spmm_sum(self, values: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        r""":math:`Y = M(e) X` over the sum semiring; ``values``: ``nnz`` or ``nnz × K`` (heads of ``x``)."""

    @abstractmethod
    def spmm_select(self, values: torch.Tensor | None, x: torch.Tensor, semiring: str,
                    mask: torch.Tensor | None = None) -> torch.Tensor:
        r""":math:`Y_u = \bigoplus_v \alpha_{uv} \otimes X_v` for a selecting semiring (``max``, ``min``, ``max-plus``,
        ``min-plus``)."""

    @abstractmethod
    def sddmm_add(self, s_dst: torch.Tensor, s_src: torch.Tensor) -> torch.Tensor:
        r""":math:`e_{uv,h} = s^{dst}_{u,h} + s^{src}_{v,h}`."""

    @abstractmethod
    def sddmm_dot(self, x_dst: torch.Tensor, x_src: torch.Tensor, heads: int = 1) -> torch.Tensor:
        r""":math:`e_{uv,h} = \langle X^{dst}_{u,h}, X^{src}_{v,h} \rangle`."""

    @abstractmethod
    def at_destinations(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` (laid out as :meth:`spmm` reads it) laid out like :meth:`spmm`'s output."""

    def fused_attention(self, a_dst, a_src, x, *, score, heads, slope, keep, p, redraw=None):
        """:func:`~gridgnn.parallel.attention.attend` as fused kernels, where a family can; ``None``: compose."""
        return None

    # ------------------------------------------------------------------ written once
    def _edge_data(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self._edge_cache is None:
            if self.edge_table is None or getattr(self.edge_table, "edge_attr", None) is None:
                raise GridGnnError("the model reads edge features (g.edge_features), but the graph carries none: "
                                   "load data with edge_attr (a PyG Data's edge_attr, an npz 'edge_attr', "
                                   "synthetic:sbm?edge_features=D)")
            dst, src = self.edge_ids()
            feats, given = self.edge_table.edge_rows(dst, src)
            dtype, device = self.values_spec()
            self._edge_cache = (torch.from_numpy(feats).to(dtype).to(device), torch.from_numpy(given).to(device))
        return self._edge_cache

    def values_spec(self) -> tuple[torch.dtype, torch.device]:
        """The dtype and device of this graph's edge values (those the looked-up edge tensors take)."""
        v = self.gcn_values
        return v.dtype, v.device

    @property
    def edge_features(self) -> torch.Tensor:
        r"""``nnz × d``: the features of the local edges (the graph's ``edge_attr``), in edge order — laid out like
        the edge values on every algorithm, whatever the partition and permutation. A self-loop that the pattern
        :math:`M + I` adds carries the mean of its vertex's incoming edge features (PyG's
        ``add_remaining_self_loops(fill_value="mean")``); :attr:`input_edges` tells them apart."""
        return self._edge_data()[0]

    @property
    def off_diagonal(self) -> torch.Tensor:
        """``bool[nnz]``: ``True`` where a local edge joins two vertices (destination ≠ source), ``False`` on a
        self-loop (the pattern's or the data's), in edge order on the edge values' device — built once per graph (a
        model that masks the self-loops every layer, GraphSAGE, would otherwise compare the ids on the host and copy
        the mask to the device each time)."""
        holder = self._edge_constants()
        if holder._off_diagonal is None:
            dst, src = self.edge_ids()
            holder._off_diagonal = torch.from_numpy(np.asarray(dst) != np.asarray(src)).to(self.values_spec()[1])
        return holder._off_diagonal

    @property
    def off_diagonal_built(self) -> bool:
        """Whether :attr:`off_diagonal` was asked (a trace tells the memory model whether a model holds it)."""
        return self._edge_constants()._off_diagonal is not None

    def held_edge_constants(self) -> list:
        """What :attr:`off_diagonal` and the selecting semirings' keys keep, for a family's ``held()`` (empty where
        no model asked)."""
        holder = self._edge_constants()
        return [t for t in (holder._off_diagonal, holder._source_keys) if t is not None]

    def _edge_constants(self):
        """Where this graph keeps what it derives from its edges' ids once (itself; a family whose layers share
        one block of edges keeps them with the block)."""
        return self

    @property
    def input_edges(self) -> torch.Tensor:
        """``bool[nnz]``: ``True`` where a local edge is an edge of the input graph, ``False`` for a self-loop that
        the pattern :math:`M + I` adds (a mask for :meth:`spmm` that aggregates over the input's edges only)."""
        return self._edge_data()[1]

    @property
    def relation_values(self) -> torch.Tensor:
        r"""``nnz × R``: the weight of each local edge in each relation's mean (:math:`c_r(v \to u) / |N_r(u)|`,
        :meth:`Graph.relation_rows <gridgnn.graph.graph.Graph.relation_rows>`; zero for the pattern's added
        self-loops), looked up by original edge ids, so laid out like the edge values on every algorithm: ``spmm``
        of its column ``r`` is relation ``r``'s mean aggregation (PyG ``RGCNConv``)."""
        if self._relation_cache is None:
            if self.edge_table is None or getattr(self.edge_table, "edge_type_counts", None) is None:
                raise GridGnnError("the model reads relation types (g.relation_values), but the graph carries none: "
                                   "load data with edge_type (a PyG Data's edge_type, a HeteroData, an npz "
                                   "'edge_type', synthetic:typed-sbm)")
            dtype, device = self.values_spec()
            self._relation_cache = torch.from_numpy(self.relation_weights()).to(dtype).to(device)
        return self._relation_cache

    def relation_weights(self) -> np.ndarray:
        """``float64[nnz, R]`` of :attr:`relation_values`: each local edge's weight in its relations' means."""
        return self.edge_table.relation_rows(*self.edge_ids())

    def spmm(self, values: torch.Tensor | None, x: torch.Tensor, semiring: str = "sum",
             mask: torch.Tensor | None = None) -> torch.Tensor:
        r""":math:`Y_u = \bigoplus_v e_{uv} \otimes X_v`: the sum SpMM, or for another ``semiring``, a ``mask`` of kept
        edges or ``values=None`` the composition of :func:`~gridgnn.parallel.aggregate.aggregate`."""
        if semiring != "sum" or mask is not None or values is None:
            return aggregate(self, values, x, semiring, mask)
        return self.spmm_sum(values, x)

    def row_sum(self, e: torch.Tensor) -> torch.Tensor:
        """Per local destination row, the sum of the edge tensor ``e`` (``nnz``) over every rank holding part of the
        row (no gradient)."""
        row, rows, crow = self.edge_rows()  # (with the pointer: a segmented sum, no scatter)
        return self.row_all(reduce_rows(row, rows, e.detach(), "sum", crow)).reshape(-1)

    def edge_softmax(self, e: torch.Tensor) -> torch.Tensor:
        r""":math:`\alpha_{uv} = \exp(e_{uv} - m_u) / \sum_{v'} \exp(e_{uv'} - m_u)` per destination row and head."""
        return EdgeSoftmax.apply(e, self)
