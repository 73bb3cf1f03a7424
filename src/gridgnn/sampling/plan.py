r"""A sampled minibatch as a plan the models run on: each layer's block is a local distributed graph.

Layer ``l`` of a :class:`~gridgnn.sampling.matrix.BulkSample` aggregates from ``nodes[l]`` (the sources, the
layer's input rows) into ``nodes[l + 1]`` (the destinations, the first rows of ``nodes[l]``). Its
:class:`SampledBlockGraph` is the block-row graph of one block over that rectangular matrix: the primitives of
:mod:`gridgnn.parallel.blockrow` run on it unchanged (one local block, nothing fetched, the backward's partial
sums are the sources' gradient). Two things are particular to a sample:

* every destination also has an edge to itself (its row among the sources), which :func:`gridgnn.nn.sage`'s
  neighbour mask removes from the aggregation and its root term selects — the plan declares
  ``root_in_aggregate_layout = False`` (the layer's input has more rows than its output), exactly as Plexus does;
* ``mean`` is the sampler's estimator of the neighbourhood mean: the block's weights over the kept edges,
  renormalized per row (GraphSAGE: the sample mean; LADIES: the importance-weighted mean of its ``1/p``
  weights). With every neighbour sampled this is the full-graph ``mean``.
* the attention models (GAT, VA) compute their destination scores from the layer's input, laid out as the
  sources; the block's ``sddmm`` reads the destinations' own rows from them. Attention is a softmax over the kept
  neighbours and the self-loop (as PyG's GAT on a sampled subgraph); with every neighbour sampled it is the
  full-graph layer.
* ``gcn_values`` (GCN and VA on samples, given a :class:`GcnNormalization`) estimate the full graph's
  :math:`(\hat M H)_u = \hat M_{uu} h_u + \sum_{v \in N(u)} \hat M_{uv} h_v` the same way: the self term exactly,
  the neighbour sum as :math:`|N(u)|` times the sampler's mean of :math:`\hat M_{uv} h_v` — weight
  :math:`|N(u)| \, w_{uv} \hat M_{uv}` on a kept edge, ``w`` the block's weight. GraphSAGE keeps each neighbour
  with probability :math:`\min(s, |N(u)|)/|N(u)|` and weighs it :math:`1/\min(s, |N(u)|)`, so the estimate is
  unbiased; with every neighbour sampled it is the full-graph GCN layer exactly.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch

from ..errors import GridGnnError
from ..graph.graph import gcn_normalize
from ..ops.pattern import Pattern
from ..ops.lean_backward import product
from ..parallel.base import Plan
from ..parallel.blockrow import BlockRowGraph
from ..partition.layout import BlockRowSchedule


class GcnNormalization:
    r"""The full graph's GCN matrix :math:`\hat M` (:func:`~gridgnn.graph.graph.gcn_normalize`) looked up by
    (destination, source), and each vertex's neighbour count :math:`|N(u)|` in the sampled pattern ``adj`` (rows =
    destinations, no self-loops). Built on first use, so a run whose model does not read ``gcn_values`` pays
    nothing."""

    def __init__(self, graph, adj: sp.spmatrix):
        self._graph, self._adj, self._keys = graph, adj, None

    def _build(self) -> None:
        m = gcn_normalize(self._graph)
        self.n = m.shape[0]
        self._keys = np.repeat(np.arange(self.n, dtype=np.int64), np.diff(m.indptr)) * self.n + m.indices
        self._values = m.data
        a = sp.csr_matrix(self._adj)
        a.sum_duplicates()
        self.neighbour_count = np.diff(a.indptr).astype(np.float64)
        self._graph = self._adj = None

    def edge_weights(self, dst: np.ndarray, src: np.ndarray, mean_weights: np.ndarray) -> np.ndarray:
        """``gcn_values`` of a sample's edges (global ids; ``dst == src``: the self-loop, else a kept neighbour with
        the sampler's mean weight)."""
        if self._keys is None:
            self._build()
        query = dst * self.n + src
        at = np.minimum(np.searchsorted(self._keys, query), len(self._keys) - 1)
        m_hat = np.where(self._keys[at] == query, self._values[at], 0.0)
        return np.where(dst == src, m_hat, self.neighbour_count[dst] * mean_weights * m_hat)


class SampledBlockGraph(BlockRowGraph):
    """Layer ``block`` (``m × k`` CSR, rows = destinations ``dst_ids``, columns = sources ``src_ids``, global
    ids) of a sample, with a self-loop edge per destination. Stacked minibatches (block diagonal): minibatch ``i``
    holds rows ``dst_ptr[i]:dst_ptr[i+1]`` and columns ``src_ptr[i]:src_ptr[i+1]``, its destinations first
    among its sources (default: one minibatch)."""

    def __init__(self, block: sp.csr_matrix, dst_ids: np.ndarray, src_ids: np.ndarray, *, dst_ptr=None,
                 src_ptr=None, dtype=torch.float64, device="cpu", gcn: GcnNormalization | None = None):
        m, k = block.shape
        block = sp.csr_matrix(block, dtype=np.float64)
        dst_ptr = np.array([0, m]) if dst_ptr is None else np.asarray(dst_ptr, dtype=np.int64)
        src_ptr = np.array([0, k]) if src_ptr is None else np.asarray(src_ptr, dtype=np.int64)
        owner = np.repeat(np.arange(len(dst_ptr) - 1, dtype=np.int64), np.diff(dst_ptr))
        own = src_ptr[owner] + np.arange(m, dtype=np.int64) - dst_ptr[owner]  # each destination among the sources
        rows = np.concatenate([np.repeat(np.arange(m, dtype=np.int64), np.diff(block.indptr)),
                               np.arange(m, dtype=np.int64)])
        cols = np.concatenate([block.indices.astype(np.int64), own])
        weights = np.concatenate([block.data, np.zeros(m)])  # the self-loops weigh nothing in a mean
        order = np.lexsort((cols, rows))
        rows, cols, weights = rows[order], cols[order], weights[order]
        if ((rows[1:] == rows[:-1]) & (cols[1:] == cols[:-1])).any():
            raise ValueError("a sampled block must not hold a destination's own vertex as its neighbour")
        crow = np.zeros(m + 1, dtype=np.int64)
        crow[1:] = np.cumsum(np.bincount(rows, minlength=m))
        self.comm, self.rows, self.me = None, None, 0
        self.fetch_axis, self.reduce_axis, self.sparsity_aware = "p", None, False
        self.stages, self.dtype, self.device = [0], dtype, device
        self.n_local = m
        self.pattern = Pattern(torch.from_numpy(crow).to(device), torch.from_numpy(cols).to(device), (m, k),
                               transpose=True)
        self.nnz, self.index_dtype = self.pattern.nnz, self.pattern.index_dtype
        self.crow, self._row = self.pattern.crow, self.pattern.kept_row  # one block, one stage: the local pattern
        self.mean_weights = torch.from_numpy(weights).to(dtype).to(device)
        dst_ids, src_ids = np.asarray(dst_ids, dtype=np.int64), np.asarray(src_ids, dtype=np.int64)
        self._edge_ids = (dst_ids[rows], src_ids[cols])
        self._gcn, self._gcn_values, self._weights = gcn, None, weights
        self._own = torch.from_numpy(own).to(device)  # each destination's row among the sources
        self.stage_blocks = {0: (self.pattern, None)}
        self.schedule = BlockRowSchedule((k,), 0, (0,), "p")  # one block, its own sources: nothing moves

    @property
    def gcn_values(self) -> torch.Tensor:
        """The GCN layer's edge values on this sample (see the module): needs the plan's :class:`GcnNormalization`."""
        if self._gcn_values is None:
            if self._gcn is None:
                raise GridGnnError("this sample has no GCN normalization: build its MinibatchPlan with gcn=")
            w = self._gcn.edge_weights(*self._edge_ids, self._weights)
            self._gcn_values = torch.from_numpy(w).to(self.dtype).to(self.device)
        return self._gcn_values

    def values_spec(self) -> tuple[torch.dtype, torch.device]:
        """The plan's dtype and device (not :attr:`gcn_values`, which only a GCN layer needs built)."""
        return self.dtype, torch.device(self.device)

    def relation_weights(self) -> np.ndarray:
        r"""Each sampled edge's weight in its relations' means, the sampler's estimator of R-GCN's mean over
        :math:`N_r(u)`: the destination's own entry (a self-loop of the data) exactly, :math:`c_r(u	o u)/|N_r(u)|`;
        the kept neighbours share the rest, :math:`(|N_r(u)| - c_r(u	o u))/|N_r(u)|`, as their sampling-weighted mean
        (``mean_weights``: GraphSAGE's kept neighbours alike, LADIES' :math:`1/p`). Every neighbour kept, it is the
        full graph's :math:`c_r(v	o u)/|N_r(u)|`; with fewer, each destination's weights of a relation still sum to
        the full graph's."""
        dst, src = self.edge_ids()
        table = self.edge_table
        counts = table.relation_counts(dst, src)  # c_r(v → u) of each entry
        deg = table.relation_degree()[dst]  # |N_r(u)| of each entry's destination
        row = self.pattern.row.cpu().numpy()
        own = self.pattern.col.cpu().numpy() == self._own.cpu().numpy()[row]
        m = self.n_local
        self_count = np.zeros((m, counts.shape[1]))
        self_count[row[own]] = counts[own]
        weighted = counts * np.where(own, 0.0, self._weights)[:, None]  # the kept neighbours' share
        total = np.zeros((m, counts.shape[1]))
        np.add.at(total, row, weighted)
        share = (deg - self_count[row]) / np.maximum(deg, 1.0)
        out = np.where(total[row] > 0, share * weighted / np.where(total[row] > 0, total[row], 1.0), 0.0)
        out[own] = counts[own] / np.maximum(deg[own], 1.0)
        return out

    def sweep(self, fetch, body, *, push_width=None, halo=None, keep=None):
        """One local block: ``body`` reads the sources themselves; what it returns is already their gradient
        (nothing is fetched, so nothing is kept for ``keep``)."""
        part = body(self.pattern, None, fetch)
        return part if push_width is not None else None

    def fused_attention(self, *args, **kw):
        return None  # the fused kernels read destination values by row: the composition serves a sample

    def at_destinations(self, t: torch.Tensor) -> torch.Tensor:
        """The destinations' rows of ``t``, a tensor laid out as the layer's input (the sources)."""
        return t.index_select(0, self._own)

    def sddmm_add(self, s_dst: torch.Tensor, s_src: torch.Tensor) -> torch.Tensor:
        """As the block-row ``sddmm_add``, with ``s_dst`` given for the layer's input rows (as on a square graph):
        the destinations' own rows are read from it."""
        return super().sddmm_add(self.at_destinations(s_dst), s_src)

    def sddmm_dot(self, x_dst: torch.Tensor, x_src: torch.Tensor, heads: int = 1) -> torch.Tensor:
        """As the block-row ``sddmm_dot``, with ``x_dst`` given for the layer's input rows (see :meth:`sddmm_add`)."""
        return super().sddmm_dot(self.at_destinations(x_dst), x_src, heads)

    def spmm(self, values, x, semiring: str = "sum", mask=None):
        r"""As the block-row ``spmm``, except that ``mean`` (``values=None``) is the sampler's estimator: the block's
        weights over the kept edges, each row renormalized to sum 1."""
        if semiring == "mean" and values is None:
            w = self.mean_weights if mask is None else self.mean_weights * mask.to(self.mean_weights.dtype)
            sums = self.row_sum(w)
            w = w / torch.where(sums > 0, sums, torch.ones_like(sums))[self.pattern.row]
            return self.spmm_sum(w.to(x.dtype), x)
        return super().spmm(values, x, semiring, mask)


class MinibatchPlan(Plan):
    """One sampled minibatch (a :class:`~gridgnn.sampling.matrix.BulkSample` with ``k = 1``, or a bulk whose
    minibatches are trained together) on this rank: its layers' graphs, with replicated weights and every
    feature column local."""

    name = "minibatch"
    comm = None
    copies = 1
    grad_axes = ()
    root_in_aggregate_layout = False
    aggregation_keeps_rows = False  # a layer's input rows are its output rows and their sampled neighbours
    stacks_weights = True  # linear: h @ w

    def __init__(self, sample, *, dtype=torch.float64, device="cpu", gcn: GcnNormalization | None = None):
        self.sample = sample
        self.graphs = [SampledBlockGraph(b, sample.nodes[l + 1], sample.nodes[l], dst_ptr=sample.ptr[l + 1],
                                         src_ptr=sample.ptr[l], dtype=dtype, device=device, gcn=gcn)
                       for l, b in enumerate(sample.blocks)]

    def input(self, x: np.ndarray) -> np.ndarray:
        return x[self.sample.nodes[0]]

    def out_rows(self) -> np.ndarray:
        return self.sample.nodes[-1]

    def in_rows(self, layer: int) -> np.ndarray:
        return self.sample.nodes[layer]

    def in_cols(self, layer: int, f: int) -> tuple[int, int]:
        return (0, f)

    def out_cols(self, c) -> tuple[int, int]:
        return (0, c)

    def graph(self, layer: int) -> SampledBlockGraph:
        return self.graphs[layer]

    def linear(self, layer: int, h: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return product(h, w)
