r"""``--algo plexus``: Plexus 3D tensor parallelism (Ranjan et al. 2025, §3, Algorithm 1) as a distributed graph and
its primitives, on the grid ``("x", "y", "z")`` of shape ``Gx × Gy × Gz``.

**Layouts** (:class:`~gridgnn.partition.layout.PlexusNodeLayout`). A node tensor of layout ``(r, q)`` holds, on the
rank with coordinates ``(r_i, q_j, t_k)`` (``t`` the third axis), the rows ``V^r_i`` (the ``i``-th of ``G_r``
equal vertex blocks, in the tensor's vertex order) and the columns ``C^q_j`` (the ``j``-th of ``G_q`` equal
column blocks of its width); it is replicated along ``t``. Each primitive's output layout follows from its
input's alone, so a model's program (the order of ``linear`` and ``spmm`` in each layer, from its trace) fixes
every layout: :func:`~gridgnn.partition.layout.plexus_layouts`. The layer-0 input ``(x, y)`` is held as the
``z``-th part of its rows and all-gathered over ``z`` by the first primitive that reads it (Alg. 1 line 2).
**Edge tensors** of a graph primitive on an ``(r, q)`` tensor are the edges of the adjacency shard
``A[V^t_k, V^r_i]`` (rows = destinations in the other vertex order under the double permutation of §5.1),
replicated along ``q``. **Weights**: the block ``W[C^q_j, C^t_k]`` of a linear on an ``(r, q)`` tensor, its rows
further split in ``G_r`` parts (rank ``r_i`` keeps part ``i``); biases and other per-column parameters are the
column block of the tensor they are added to, replicated; attention vectors are replicated whole.

**Primitives** (autograd Functions; every replica of an input receives the full gradient):

* ``linear(X, W)``: ``(r, q) → (r, t)``. All-gather the weight parts over ``r`` (line 6), ``Y = X W_blk`` (7),
  all-reduce over ``q`` (8). Backward: ``∂W_blk = Xᵀ ∂Y`` reduce-scattered over ``r`` into the parts (15–16),
  ``∂X = ∂Y W_blkᵀ`` all-reduced over ``t`` (19–20).
* ``spmm(e, X)``: ``(r, q) → (t, q)``. ``Y = A[V^t, V^r](e) X`` (line 3) all-reduced over ``r`` (4); blocked
  aggregation (§5.2, ``block_rows > 0``) all-reduces the rows of ``Y`` in blocks of that many. Backward:
  ``∂X = Aᵀ ∂Y`` (the local transpose: no transpose communication, 22) all-reduced over ``t`` (23);
  ``∂e`` = the per-head SDDMM of ``∂Y`` and ``X`` over ``C^q_j``, all-reduced over ``q``.
* ``spmm_select(e, X, ⊕)`` (``max``, ``min``, ``max-plus``, ``min-plus``; SC'23 §4.3): the shard's partial
  ``(best, edge)``, settled over ``r`` by a ⊕ all-reduce of the values and a ``min`` all-reduce of the winners'
  original source ids (ties: the smallest id, whatever the permutation). Backward: the gradient goes to the
  winning edge of the rank that holds it; ``∂e`` all-reduced over ``q``, ``∂X`` over ``t``.
* ``sddmm_add(s_dst, s_src)`` (per-node scores, every column) and ``sddmm_dot(X_dst, X_src, K)`` (``(r, q)``
  tensors): the source side is local; the destination rows ``V^t_k`` are gathered from the ranks along ``r``
  that hold them (:func:`~gridgnn.partition.layout.plexus_row_gather`: an all-gather of exactly the needed
  rows); the dot product is all-reduced over ``q``. Backward: the source side is all-reduced over ``t``; the
  destination side is reduce-scattered back over ``r`` (the gather's adjoint), then all-reduced over ``t``.
* ``edge_softmax(e)``: a destination row's edges are spread along ``r``: row max and row sum all-reduced over
  ``r`` (two passes, :mod:`gridgnn.parallel.edge_softmax`).
* ``add_bias``, ``head_scores`` (GAT's per-node ``Σ_f X_{v,h,f} a_{h,f}`` over column-sharded heads: partial
  over ``q``, all-reduced), ``head_mean`` (the mean of the heads of a column-sharded tensor): the column
  reductions of a layout that splits feature columns; their parameter gradients are summed over the ranks
  holding different rows (and columns), so the trainer reduces no gradient.

Every collective runs a record of the layer's :class:`~gridgnn.partition.layout.PlexusSchedule`
(``Comm.execute``), taken in order from the call's :func:`program` — the list
:class:`gridgnn.planner.primitives.PlexusVolume` sums per primitive and rank.
"""
from __future__ import annotations

import numpy as np
import torch

from ..distributed.grid import coords_of, ordered_factorizations
from ..errors import GridGnnError
from ..ops import semiring as sr
from ..ops.lean_backward import keep_input, kept_input, weight_grad
from ..ops.pattern import Pattern, as_edges, holds_row, index_bytes, col_sum, head_columns, row_reduce, sddmm_add, sddmm_dot, spmm
from ..partition import block_range, even_bounds
from ..partition.layout import (PLEXUS_AXES, PlexusSchedule, plexus_destinations, plexus_layouts, plexus_program,
                                split_classes, vertex_order)
from .base import Plan
from .family import Algorithm, Family, add_family
from .footprint import (FETCHING, Ledger, backward_of, backward_temporaries, edge_id_bytes, forward_calls, labels,
                        source_key_bytes,
                        moments_of, params, redrawn_mask_columns, traced)
from .aggregate import SourceKeys
from .checks import PlexusRules
from .graph import DistGraph
from .program import PrimitiveCall, Program, needs_grad


def program(call, s: PlexusSchedule, *, first: str | None, dst_counts=None) -> Program:
    r"""The records ``call`` (a :class:`~gridgnn.parallel.program.PrimitiveCall`) runs on the rank of schedule ``s``
    (its layer's :class:`~gridgnn.partition.layout.PlexusSchedule`), forward and backward: what the autograd
    functions below execute and :class:`gridgnn.planner.primitives.PlexusVolume` sums. ``first``: layer 0's first
    move (``"linear"`` or ``"spmm"``; its reader all-gathers the split input); ``dst_counts()``: the rows each
    member along ``r`` contributes to the destination gather (asked only by the primitives that gather).

    Rows are counted in the records' unit and ``cols`` gives a row's elements: a node row of the tensor's local
    columns (``|C^q(W)|``), a weight block's row (``|C^t(f_out)|``), an edge's ``K`` values, one parameter
    element."""
    prog = Program()
    L, name = s.layer, call.name
    if L.input.scatter:
        _scattered_program(prog, call, s)
        return prog
    gathers = call.layer == 0 and L.input.split
    if name == "linear":
        lay = L.linear
        w_in, w_out = s.ncols(call.width, lay.cols), s.ncols(call.out_width, lay.third)
        if gathers and first == "linear":
            prog.fwd("input_gather", s.input_gather(), w_in)
        prog.fwd("weight_gather", s.weight_gather(call.width), w_out)  # Alg. 1 line 6
        prog.fwd("linear_sum", s.linear_sum(), w_out)  # line 8
        prog.bwd("weight_scatter", s.weight_scatter(call.width), w_out)  # lines 15-16
        if call.grads[0]:
            prog.bwd("linear_back", s.linear_back(), w_in)  # lines 19-20
        return prog
    lay = L.graph
    wq = s.ncols(call.width, lay.cols) if lay is not None else 0
    if name in ("spmm", "spmm_select", "at_destinations") and gathers and first == "spmm":
        prog.fwd("input_gather", s.input_gather(), wq)  # (at_destinations: gathered for it alone)
    if name in ("spmm", "spmm_select"):  # ∂e over q, ∂X over t
        need_v, need_x = call.grads
        if name == "spmm":
            prog.fwd("aggregate", s.aggregate(), wq)  # line 4 (blocked aggregation: row blocks)
        else:  # the ⊕ all-reduce and the winners' int64 keys
            prog.fwd("row_all", s.row_all(), wq, exact=True)
            prog.fwd("row_all", s.row_all(), wq, "key", exact=True)
        if need_v:
            prog.bwd("edge_sum", s.edge_sum(), call.heads if name == "spmm" else 1)
        if need_x:
            prog.bwd("source_sum", s.source_sum(), wq)  # line 23
    elif name in ("sddmm_add", "sddmm_dot"):
        c = call.heads if name == "sddmm_add" else wq
        counts = dst_counts()
        prog.fwd("dst_gather", s.dst_gather(counts), c)
        if name == "sddmm_dot":
            prog.fwd("edge_sum", s.edge_sum(), call.heads)
        prog.bwd("dst_scatter", s.dst_scatter(counts), c)
        prog.bwd("source_sum", s.source_sum(), c)
        prog.bwd("source_sum", s.source_sum(), c)
    elif name == "at_destinations":  # the destination rows all-gathered over r; backward over t
        prog.fwd("dst_gather", s.dst_gather(dst_counts()), wq)
        if call.grads[0]:
            prog.bwd("source_sum", s.source_sum(), wq)
    elif name == "row_sum":
        prog.fwd("row_all", s.row_all(), 1)
    elif name == "edge_softmax":  # max and sum forward, one sum backward
        prog.fwd("row_all", s.row_all(), call.heads, exact=True)
        prog.fwd("row_all", s.row_all(), call.heads)
        prog.bwd("row_all", s.row_all(), call.heads)
    elif name == "add_bias":
        prog.bwd("bias_sum", s.bias_sum(s.ncols(call.width, L.output.cols)), 1)
    elif name == "head_scores":
        after = L.linear.after_linear()
        prog.fwd("col_all", s.col_all(after), call.heads)
        prog.bwd("param_sums", s.param_sums(after, call.width), 1)
    elif name == "normalize_rows":  # the squared row norms, and the backward's row sums
        prog.fwd("col_all", s.col_all(lay), 1)
        if call.grads[0]:
            prog.bwd("col_all", s.col_all(lay), 1)
    elif name == "scale":  # the scalar's gradient (the split layer-0 input: over the third axis too)
        if call.grads[1]:
            prog.bwd("param_sums", s.param_sums(lay, 1), 1)
    elif name == "head_mean":
        if call.heads > 1:
            per = call.width // call.heads
            prog.fwd("col_all", s.col_all(L.output), per)
            prog.bwd("col_all", s.col_all(L.output), per)
    else:
        raise ValueError(f"plexus has no program for primitive {name!r}")
    return prog


def _scattered_program(prog: Program, call, s: PlexusSchedule) -> None:
    """``plexus-rs``: ``linear`` reduce-scatters ``n_part·f_out`` over ``q`` by column blocks (pieces of
    ``n_part`` rows), all-gathers them backward, and sums the ``|C^q(f_in)| × f_out`` weight gradient over ``r``
    and ``t``; ``spmm`` all-gathers its input's parts over ``t`` and reduce-scatters ``n_t·|C^q(W)|`` into parts
    over ``r``, backward the adjoints [∂X] (after one all-gather of ``∂Y``), and [∂e] all-reduces ``nnz·K`` over
    ``q``; ``add_bias`` sums the bias block over ``r`` and ``t``."""
    L = s.layer
    if call.name == "linear":
        lay = L.linear
        part = s.part_rows(lay)
        prog.fwd("linear_scatter", s.linear_scatter(call.out_width), part)
        prog.bwd("linear_gather", s.linear_gather(call.out_width), part)
        prog.bwd("weight_sums", s.weight_sums(s.ncols(call.width, lay.cols) * call.out_width), 1)
    elif call.name == "spmm":
        gr = L.graph
        wq = s.ncols(call.width, gr.cols)
        prog.fwd("gather_parts", s.gather_parts(gr), wq)
        prog.fwd("aggregate", s.aggregate(), wq)
        need_v, need_x = call.grads
        if need_v or need_x:
            prog.bwd("gather_parts", s.gather_parts(gr.after_spmm()), wq)
        if need_v:
            prog.bwd("edge_sum", s.edge_sum(), call.heads)
        if need_x:
            prog.bwd("scatter_parts", s.scatter_parts(gr), wq)
    elif call.name == "add_bias":
        prog.bwd("bias_sum", s.bias_sum(s.ncols(call.width, L.output.cols)), 1)
    else:
        raise ValueError(f"plexus-rs has no layout for primitive {call.name!r}")


class _Shard:
    """The adjacency shard ``A[V^t_k, V^r_i]`` of one matrix version: pattern, GCN values, original edge ids."""

    def __init__(self, plan, t: str, r: str, version: str):
        src = plan.source
        rows = block_range(plan.vb[t], plan.me[t])
        cols = block_range(plan.vb[r], plan.me[r])
        m = src.submatrix(version, rows, cols)
        m.sort_indices()
        self.pattern = Pattern.from_scipy(m, device=plan.device, transpose=True)
        self.nnz = self.pattern.nnz
        self.gcn_values = torch.from_numpy(m.data.astype(np.float64)).to(plan.dtype).to(plan.device)
        self._orders = (src.perm_r, src.perm_c) if version == "rc" else (src.perm_c, src.perm_r)
        self._origin = (rows[0], cols[0])
        self._edge_ids = None
        self._off_diagonal = None  # the self-loop mask of its edges, where a layer asks (DistGraph.off_diagonal)
        self._source_keys = None  # and the selecting semirings' keys, where a layer selects (SourceKeys)

    @property
    def edge_ids(self) -> tuple[np.ndarray, np.ndarray]:
        """Original (destination, source) ids of the shard's edges (built on first use and kept: a model that never
        asks, such as GCN, holds none)."""
        if self._edge_ids is None:
            (order_out, order_in), (r0, c0), p = self._orders, self._origin, self.pattern
            self._edge_ids = (order_out[p.row.cpu().numpy().astype(np.int64) + r0],
                              order_in[p.col.cpu().numpy().astype(np.int64) + c0])
        return self._edge_ids


class PlexusGraph(SourceKeys, DistGraph):
    r"""The graph primitives of one layer on this rank: the shard ``A[V^t, V^r]`` for an input node tensor of layout
    ``layout`` (``(r, q)``), with the row gather of its destinations (built on first use); ``schedule``: the
    layer's :class:`~gridgnn.partition.layout.PlexusSchedule`, whose records every collective here runs.

    Attributes: ``gcn_values`` (the :math:`\hat M` values of the local edges), ``nnz``, ``nrow = |V^t_k|``.
    """

    def __init__(self, plan, schedule: PlexusSchedule, shard: _Shard, *, layer: int, gather_input: bool, width: int,
                 dot_width: int):
        self.plan, self.schedule, self.layout, self.shard = plan, schedule, schedule.layer.graph, shard
        self.layer = layer
        layout = self.layout
        self.r, self.q, self.t = layout.rows, layout.cols, layout.third
        self.pattern, self.nnz, self.gcn_values = shard.pattern, shard.nnz, shard.gcn_values
        self.nrow = shard.pattern.shape[0]
        self.gather_input = gather_input
        self.width = width  # full width of the node tensor this layer's spmm reads (heads straddle column blocks)
        self.dot_width = dot_width  # and of the operands of its sddmm_dot
        self._dst = None
        self._gathered = None  # (layer-0 input, its all-gather) between the primitives that read it

    def edge_ids(self) -> tuple[np.ndarray, np.ndarray]:
        """Original (destination, source) vertex ids of the local edges, in edge order."""
        return self.shard.edge_ids

    def _edge_constants(self):
        return self.shard  # (the layers reading one shard share its mask)

    def edge_rows(self) -> tuple[torch.Tensor, int, torch.Tensor | None]:
        return self.pattern.kept_row, self.nrow, self.pattern.crow  # (no rows on the CPU: the kernels walk crow)

    def held(self) -> tuple[list, list]:
        """``(tensors, arrays)`` this graph keeps (the shard may be shared with other layers)."""
        tensors = self.pattern.index_tensors() + [self.gcn_values]
        if self._dst is not None:
            tensors += [self._dst[0], self._dst[1]]
        tensors += self.held_edge_constants()
        return tensors, list(self.shard._edge_ids or ())

    def program(self, name: str, width: int, heads: int, *inputs) -> Program:
        """The :func:`program` of a call of ``name`` on this layer (``width``: the full width of the node tensor it
        reads; ``inputs``: the tensors whose gradients it gives, in order)."""
        call = PrimitiveCall(name, self.layer, width, heads, needs_grad(*inputs))
        return program(call, self.schedule, first=self.plan.first_op, dst_counts=lambda: self.dst_spec()[2])

    def row_all(self, t: torch.Tensor, op: str = "sum") -> torch.Tensor:
        """Per-row statistics of ``V^t`` summed (or max-ed) over ``r``, along which a row's edges are spread."""
        return self.plan.comm.execute(self.schedule.row_all(), t, op=op)

    def col_block(self, width: int) -> tuple[int, int]:
        return self.plan.block_of(width, self.q)

    def col_heads(self, heads: int, width: int | None = None):
        width = self.width if width is None else width
        return head_columns(heads, width, *self.col_block(width))

    # ------------------------------------------------------------------ destination rows
    def dst_spec(self):
        """``(take, where, counts, bounds)`` of the destination-row gather along ``r``."""
        if self._dst is None:
            plan = self.plan
            take, where = plexus_destinations(plan.source, self.layout, block_range(plan.vb[self.t], plan.me[self.t]),
                                              plan.vb[self.r])
            r0 = int(plan.vb[self.r][plan.me[self.r]])
            counts = [int(t.size) for t in take]
            mine = torch.from_numpy(take[plan.me[self.r]] - r0).to(plan.device)
            self._dst = (mine, torch.from_numpy(where).to(plan.device), counts,
                         np.concatenate([[0], np.cumsum(counts)]))
        return self._dst

    def gather_dst(self, x: torch.Tensor, rec) -> torch.Tensor:
        """Rows ``V^t_k`` (destination order) of a node tensor held as rows ``V^r``: an all-gather over ``r`` of
        exactly the rows each member holds (``rec``: the program's ``dst_gather``)."""
        mine, where, _, _ = self.dst_spec()
        out = x.new_empty((self.nrow,) + tuple(x.shape[1:]))
        out[where] = self.plan.comm.execute(rec, x[mine])
        return out

    def scatter_dst(self, d: torch.Tensor, n_rows: int, rec) -> torch.Tensor:
        """Adjoint of :meth:`gather_dst`: partial gradients of the destination rows summed over ``r`` onto their
        holders (a reduce-scatter, ``rec``), placed in an ``n_rows``-row gradient."""
        mine, where, _, _ = self.dst_spec()
        piece = self.plan.comm.execute(rec, d[where])
        return d.new_zeros((n_rows,) + tuple(d.shape[1:])).index_add_(0, mine, piece)

    def _input(self, x: torch.Tensor, *, last: bool, prog: Program | None = None) -> torch.Tensor:
        """The layer-0 input whole (Alg. 1 line 2) when this layer's graph primitives read it first: all-gathered
        over the third axis once, however many primitives read it (vanilla attention: ``sddmm_dot``, then
        ``spmm``). The gathered tensor is kept for the next reader until the ``spmm`` (``last``) takes it. The
        gather is a step of the ``spmm``'s program (``prog``), which an earlier reader may have run for it."""
        if not self.gather_input:
            return x
        rec = prog.take_one("fwd", "input_gather") if prog is not None else self.schedule.input_gather()
        held, self._gathered = self._gathered, None
        if held is not None and held[0] is x:
            out = held[1]
        else:
            out = self.plan.gather_input(x, rec)
        if not last:
            self._gathered = (x, out)
        return out

    # ------------------------------------------------------------------ primitives
    def spmm_sum(self, values: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        prog = self.program("spmm", self.width, as_edges(values).shape[1], values, x)
        if self.layout.scatter:
            return _ScatteredSpMM.apply(values, x, self, prog)
        return _PlexusSpMM.apply(values, self._input(x, last=True, prog=prog), self, prog)

    def spmm_select(self, values: torch.Tensor | None, x: torch.Tensor, semiring: str,
                    mask: torch.Tensor | None = None) -> torch.Tensor:
        r"""A selecting semiring on the shard (``(r, q) → (t, q)``): the local partial, settled over ``r`` by a ⊕
        all-reduce and a ``min`` all-reduce of the winners' keys (whole, not in blocks)."""
        prog = self.program("spmm_select", self.width, 0 if values is None else as_edges(values).shape[1], values, x)
        return _PlexusSpMMSelect.apply(values, self._input(x, last=True, prog=prog), self, semiring, mask, prog)

    def sddmm_add(self, s_dst: torch.Tensor, s_src: torch.Tensor) -> torch.Tensor:
        prog = self.program("sddmm_add", s_src.shape[1], s_src.shape[1], s_dst, s_src)
        return _PlexusSddmm.apply(s_dst, s_src, self, 0, prog)

    def sddmm_dot(self, x_dst: torch.Tensor, x_src: torch.Tensor, heads: int = 1) -> torch.Tensor:
        prog = self.program("sddmm_dot", self.dot_width, heads, x_dst, x_src)
        return _PlexusSddmm.apply(self._input(x_dst, last=False), self._input(x_src, last=False), self, heads, prog)

    def at_destinations(self, x: torch.Tensor) -> torch.Tensor:
        r"""``x`` (laid out ``(r, q)`` as :meth:`spmm` reads it) laid out like :meth:`spmm`'s output ``(t, q)``: the
        rows ``V^t_k`` in the destinations' vertex order, all-gathered over ``r`` from their holders (the gather of
        ``sddmm``'s destination side). Backward: each rank keeps the gradient rows it handed out and the pieces
        are summed over ``t``. A skip term ``spmm(h) + at_destinations(h)`` (GIN, residuals) is then local."""
        prog = self.program("at_destinations", self.width, 0, x)
        if self.gather_input:  # the split layer-0 input: gathered for this call alone (spmm keeps its own)
            x = self.plan.gather_input(x, prog.take_one("fwd", "input_gather"))
        return _ToDestinations.apply(x, self, prog)


class _ToDestinations(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, g, prog):
        ctx.g, ctx.n, ctx.prog = g, x.shape[0], prog
        out = g.gather_dst(x, prog.take_one("fwd", "dst_gather"))
        prog.done("fwd")
        return out

    @staticmethod
    def backward(ctx, dy):
        g, prog = ctx.g, ctx.prog
        mine, where, _, bounds = g.dst_spec()
        me = g.plan.me[g.r]
        dx = dy.new_zeros((ctx.n,) + tuple(dy.shape[1:]))
        dx.index_add_(0, mine, dy[where[int(bounds[me]):int(bounds[me + 1])]])  # the rows this rank handed out
        dx = g.plan.comm.execute(prog.take_one("bwd", "source_sum"), dx)
        prog.done("bwd")
        return dx, None, None


class _PlexusSpMM(torch.autograd.Function):
    @staticmethod
    def forward(ctx, values, x, g, prog):
        plan = g.plan
        heads = as_edges(values).shape[1]
        col_heads = g.col_heads(heads)
        y = spmm(g.pattern, values, x, col_heads=col_heads)  # Alg. 1 line 3
        r0 = 0
        for rec in prog.take("fwd", "aggregate"):  # line 4 (blocked aggregation, §5.2: row blocks)
            plan.comm.execute(rec, y[r0:r0 + rec.rows])
            r0 += rec.rows
        prog.done("fwd")
        ctx.g, ctx.col_heads, ctx.shape, ctx.prog = g, col_heads, values.shape, prog
        ctx.save_for_backward(values, x if ctx.needs_input_grad[0] else None)
        return y

    @staticmethod
    def backward(ctx, dy):
        values, x = ctx.saved_tensors
        return (*_spmm_grads(ctx, values, x, dy.contiguous(), "source_sum"), None, None)


def _spmm_grads(ctx, values, x, dy, dx_step):
    """``(∂e, ∂X)`` of a Plexus ``spmm`` from the whole ``∂Y`` block and the ``X`` block it multiplied: ``∂e`` the
    per-head SDDMM over the local columns ``C^q``, all-reduced over ``q``; ``∂X = Aᵀ ∂Y`` summed by the program's
    step ``dx_step``."""
    g, prog = ctx.g, ctx.prog
    comm = g.plan.comm
    dvals = dx = None
    if ctx.needs_input_grad[0]:
        heads = 1 if len(ctx.shape) == 1 else ctx.shape[1]
        dvals = sddmm_dot(g.pattern, dy, x, heads, col_heads=ctx.col_heads)  # partial over C^q
        dvals = comm.execute(prog.take_one("bwd", "edge_sum"), dvals).reshape(ctx.shape)
    if ctx.needs_input_grad[1]:
        dx = comm.execute(prog.take_one("bwd", dx_step),
                          spmm(g.pattern, values, dy, transpose=True, col_heads=ctx.col_heads))
    prog.done("bwd")
    return dvals, dx


class _ScatteredSpMM(torch.autograd.Function):
    """``plexus-rs``: the parts of ``X`` all-gathered over ``t``, ``A[V^t, V^r] X`` reduce-scattered over ``r``
    into the output's parts. Backward: ``∂Y``'s parts all-gathered over ``r``; ``∂X = Aᵀ ∂Y`` reduce-scattered
    over ``t`` into the input's parts (the gather's adjoint); ``∂e`` all-reduced over ``q``."""

    @staticmethod
    def forward(ctx, values, x, g, prog):
        comm = g.plan.comm
        heads = as_edges(values).shape[1]
        col_heads = g.col_heads(heads)
        x_all = comm.execute(prog.take_one("fwd", "gather_parts"), x)
        y = comm.execute(prog.take_one("fwd", "aggregate"), spmm(g.pattern, values, x_all, col_heads=col_heads))
        prog.done("fwd")
        ctx.g, ctx.col_heads, ctx.shape, ctx.prog = g, col_heads, values.shape, prog
        ctx.save_for_backward(values, x_all if ctx.needs_input_grad[0] else None)
        return y

    @staticmethod
    def backward(ctx, dy):
        values, x_all = ctx.saved_tensors
        if not any(ctx.needs_input_grad[:2]):
            return None, None, None, None
        dy_all = ctx.g.plan.comm.execute(ctx.prog.take_one("bwd", "gather_parts"), dy.contiguous())
        return (*_spmm_grads(ctx, values, x_all, dy_all, "scatter_parts"), None, None)


class _PlexusSpMMSelect(torch.autograd.Function):
    @staticmethod
    def forward(ctx, values, x, g, semiring, mask, prog):
        comm = g.plan.comm
        keys = g.source_keys()
        b, e = sr.partial(g.pattern, values, x, semiring, mask, key=keys)
        sel = sr.Selection(semiring, tuple(b.shape), x)
        sel.fold(b, e, keys)
        sel.settle(lambda t, op: comm.execute(prog.take_one("fwd", "row_all"), t, op=op))
        prog.done("fwd")
        ctx.g, ctx.semiring, ctx.prog = g, semiring, prog
        ctx.save_for_backward(values, x if ctx.needs_input_grad[0] else None, sel.edge)
        return sr.finish(semiring, sel.best, sel.edge)

    @staticmethod
    def backward(ctx, dy):
        values, x, edge = ctx.saved_tensors
        g, comm = ctx.g, ctx.g.plan.comm
        need_v, need_x = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        dv, dx = sr.semiring_backward(g.pattern, values, x, ctx.semiring, dy.contiguous(), edge, need_values=need_v,
                                      need_x=need_x)
        if need_v:
            dv = comm.execute(ctx.prog.take_one("bwd", "edge_sum"), dv)  # partial over the columns C^q
        if need_x:
            dx = comm.execute(ctx.prog.take_one("bwd", "source_sum"), dx)
        ctx.prog.done("bwd")
        return dv, dx, None, None, None, None


class _PlexusSddmm(torch.autograd.Function):
    """``heads = 0``: ``e = s_dst[u] + s_src[v]`` (per-node scores, every column); else the per-head dot product
    of the rows of two ``(r, q)`` tensors."""

    @staticmethod
    def forward(ctx, x_dst, x_src, g, heads, prog):
        comm = g.plan.comm
        d_g = g.gather_dst(x_dst, prog.take_one("fwd", "dst_gather"))  # X_dst[V^t]
        pat = g.pattern
        if heads == 0:
            e = sddmm_add(pat, d_g, x_src)
            col_heads = None
        else:
            col_heads = g.col_heads(heads, g.dot_width)
            e = comm.execute(prog.take_one("fwd", "edge_sum"), sddmm_dot(pat, d_g, x_src, heads, col_heads=col_heads))
        prog.done("fwd")
        ctx.g, ctx.heads, ctx.col_heads, ctx.n_dst, ctx.prog = g, heads, col_heads, x_dst.shape[0], prog
        ctx.save_for_backward(d_g if heads else None, x_src if heads else None)
        return e

    @staticmethod
    def backward(ctx, de):
        d_g, x_src = ctx.saved_tensors
        g, heads = ctx.g, ctx.heads
        comm = g.plan.comm
        de = de.contiguous()
        pat = g.pattern
        if heads == 0:
            dd_g = row_reduce(pat, de, "sum")
            ds = col_sum(pat, de)
        else:
            dd_g = spmm(pat, de, x_src, col_heads=ctx.col_heads)
            ds = spmm(pat, de, d_g, transpose=True, col_heads=ctx.col_heads)
        prog = ctx.prog
        dd = g.scatter_dst(dd_g, ctx.n_dst, prog.take_one("bwd", "dst_scatter"))
        dd = comm.execute(prog.take_one("bwd", "source_sum"), dd)
        ds = comm.execute(prog.take_one("bwd", "source_sum"), ds)
        prog.done("bwd")
        return dd, ds, None, None, None


class _GatherSplit(torch.autograd.Function):
    """The layer-0 input: the ``z``-th part of the rows ``V^x`` → all of them (all-gather over the third axis,
    Alg. 1 line 2). Backward: this rank's part of the (replicated, complete) gradient."""

    @staticmethod
    def forward(ctx, x, comm, rec):
        ctx.part = (sum(rec.pieces[:rec.me]), sum(rec.pieces[:rec.me + 1]))
        return comm.execute(rec, x)

    @staticmethod
    def backward(ctx, dx):
        return dx[ctx.part[0]:ctx.part[1]], None, None


class _PlexusLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w_part, comm, prog):
        w_blk = comm.execute(prog.take_one("fwd", "weight_gather"), w_part)  # line 6
        y = comm.execute(prog.take_one("fwd", "linear_sum"), x @ w_blk)  # lines 7–8
        prog.done("fwd")
        ctx.comm, ctx.prog = comm, prog
        keep_input(ctx, x, w_blk)
        return y

    @staticmethod
    def backward(ctx, dy):
        x, w_blk = kept_input(ctx)
        comm, prog = ctx.comm, ctx.prog
        dy = dy.contiguous()
        dw = comm.execute(prog.take_one("bwd", "weight_scatter"), weight_grad(x, dy))  # lines 15–16
        del x  # (a recomputed dropout output goes before the input's gradient is made: ops.lean_backward.product)
        dx = None
        if ctx.needs_input_grad[0]:
            dx = comm.execute(prog.take_one("bwd", "linear_back"), dy @ w_blk.t())  # lines 19–20
        prog.done("bwd")
        return dx, dw, None, None


class _ScatteredLinear(torch.autograd.Function):
    """``plexus-rs``: ``X_part W[C^q, :]`` (this rank's row part, every output column), partial over ``q``,
    reduce-scattered into the output's column blocks (transposed rows). Backward: ``∂Y``'s column blocks
    all-gathered over ``q``; ``∂X = ∂Y W[C^q, :]ᵀ`` is local and exact; ``∂W`` summed over the ranks holding
    other rows (``r``, then ``t``)."""

    @staticmethod
    def forward(ctx, x, w, comm, prog):
        y = comm.execute(prog.take_one("fwd", "linear_scatter"), (x @ w).t().contiguous())
        prog.done("fwd")
        ctx.comm, ctx.prog = comm, prog
        keep_input(ctx, x, w)
        return y.t().contiguous()

    @staticmethod
    def backward(ctx, dy):
        x, w = kept_input(ctx)
        comm, prog = ctx.comm, ctx.prog
        dy_all = comm.execute(prog.take_one("bwd", "linear_gather"), dy.t().contiguous()).t()
        dw = weight_grad(x, dy_all)
        del x  # (as in _PlexusLinear)
        for rec in prog.take("bwd", "weight_sums"):
            comm.execute(rec, dw.view(-1))
        prog.done("bwd")
        dx = dy_all @ w.t() if ctx.needs_input_grad[0] else None
        return dx, dw, None, None


class _AddBias(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, b, comm, prog):
        prog.done("fwd")
        ctx.comm, ctx.prog = comm, prog
        return h + b

    @staticmethod
    def backward(ctx, dh):
        db = dh.sum(dim=0)
        for rec in ctx.prog.take("bwd", "bias_sum"):  # over the rows axis (and the parts of a split output)
            ctx.comm.execute(rec, db)
        ctx.prog.done("bwd")
        return dh, db, None, None


def _head_runs(c0: int, width: int, per: int):
    """The heads of ``per`` columns that the columns ``c0..c0+width`` of a head-major tensor meet: ``(head, a, b)``
    with the local columns ``a..b`` in that head, in head order (sums over them are added in this order on every
    device — an ``index_add_`` along the columns adds with atomics on a GPU, in an order that changes per run)."""
    for k in range(c0 // per, (c0 + width - 1) // per + 1 if width else c0 // per):
        yield k, max(c0, k * per) - c0, min(c0 + width, (k + 1) * per) - c0


class _HeadScores(torch.autograd.Function):
    r""":math:`s_{v,h} = \sum_f X_{v,h,f}\, a_{h,f}` on a column block of ``X``: partial over ``cols``."""

    @staticmethod
    def forward(ctx, x, att, comm, prog, c0):
        flat = att.reshape(-1)[c0:c0 + x.shape[1]]
        per = att.shape[1]
        head = torch.arange(c0, c0 + x.shape[1], device=x.device) // per
        weighted, s = x * flat, x.new_zeros((x.shape[0], att.shape[0]))
        for k, a, b in _head_runs(c0, x.shape[1], per):
            s[:, k] = weighted[:, a:b].sum(dim=1)
        s = comm.execute(prog.take_one("fwd", "col_all"), s)
        prog.done("fwd")
        ctx.comm, ctx.prog, ctx.c0 = comm, prog, c0
        ctx.save_for_backward(x, att, head)
        return s

    @staticmethod
    def backward(ctx, ds):
        x, att, head = ctx.saved_tensors
        flat = att.reshape(-1)[ctx.c0:ctx.c0 + x.shape[1]]
        dsc = ds[:, head]
        datt = att.new_zeros(att.numel())
        datt[ctx.c0:ctx.c0 + x.shape[1]] = (x * dsc).sum(dim=0)
        for rec in ctx.prog.take("bwd", "param_sums"):
            ctx.comm.execute(rec, datt)
        ctx.prog.done("bwd")
        return dsc * flat, datt.reshape(att.shape), None, None, None


class _HeadMean(torch.autograd.Function):
    """The mean of ``heads`` equal heads of a ``width``-wide tensor whose columns are split along ``cols``; the
    result's ``width / heads`` columns are split the same way."""

    @staticmethod
    def forward(ctx, h, plan, sched, heads, width, prog):
        per = width // heads
        lay = sched.layer.output
        c0, _ = sched.cols(width, lay.cols)
        o0, o1 = sched.cols(per, lay.cols)
        f = torch.arange(c0, c0 + h.shape[1], device=h.device) % per
        full = h.new_zeros((h.shape[0], per))
        for k, a, b in _head_runs(c0, h.shape[1], per):
            full[:, c0 + a - k * per:c0 + b - k * per] += h[:, a:b]
        full = plan.comm.execute(prog.take_one("fwd", "col_all"), full / heads)
        prog.done("fwd")
        ctx.plan, ctx.prog, ctx.heads, ctx.per, ctx.o, ctx.f = plan, prog, heads, per, (o0, o1), f
        return full[:, o0:o1].contiguous()

    @staticmethod
    def backward(ctx, dy):
        full = dy.new_zeros((dy.shape[0], ctx.per))
        full[:, ctx.o[0]:ctx.o[1]] = dy
        ctx.plan.comm.execute(ctx.prog.take_one("bwd", "col_all"), full)
        ctx.prog.done("bwd")
        return full[:, ctx.f] / ctx.heads, None, None, None, None, None


class _NormalizeRows(torch.autograd.Function):
    r"""Rows divided by their L2 norm over every column of a tensor whose columns are split along ``cols``: the
    squared norms are partial over the local columns, all-reduced. Backward
    :math:`\partial h = (\partial y - y \sum_f \partial y_f\, y_f) / n` (the sum all-reduced too; rows whose norm
    is below ``eps`` are divided by ``eps``, as ``F.normalize`` does)."""

    EPS = 1e-12

    @staticmethod
    def forward(ctx, h, comm, prog):
        norm = comm.execute(prog.take_one("fwd", "col_all"), (h * h).sum(dim=1, keepdim=True)).sqrt()
        prog.done("fwd")
        n = norm.clamp_min(_NormalizeRows.EPS)
        y = h / n
        ctx.comm, ctx.prog = comm, prog
        ctx.save_for_backward(y, n, norm > _NormalizeRows.EPS)
        return y

    @staticmethod
    def backward(ctx, dy):
        y, n, on = ctx.saved_tensors
        t = ctx.comm.execute(ctx.prog.take_one("bwd", "col_all"), (dy * y).sum(dim=1, keepdim=True))
        ctx.prog.done("bwd")
        return (dy - y * t * on) / n, None, None


class _Scale(torch.autograd.Function):
    """``s · H`` for a replicated scalar ``s`` on an ``(r, q)`` tensor: ``∂s`` summed over the local block, then
    all-reduced over rows and columns (the replicas along the third axis agree; the layer-0 input, held split over
    the third axis, is summed over it too)."""

    @staticmethod
    def forward(ctx, h, s, comm, prog):
        prog.done("fwd")
        ctx.comm, ctx.prog = comm, prog
        ctx.save_for_backward(h, s)
        return h * s

    @staticmethod
    def backward(ctx, dy):
        h, s = ctx.saved_tensors
        ds = None
        if ctx.needs_input_grad[1]:
            ds = (dy * h).sum().reshape(s.shape)
            for rec in ctx.prog.take("bwd", "param_sums"):  # axis by axis, even over all
                ctx.comm.execute(rec, ds)
        ctx.prog.done("bwd")
        return dy * s if ctx.needs_input_grad[0] else None, ds, None, None


class PlexusPlan(Plan):
    r"""Plexus on this rank.

    Args:
        comm: communication layer on a ``("x", "y", "z")`` grid.
        source: the block source; its ``perm_r``/``perm_c`` are the two vertex orders of the double permutation.
        dims: layer widths ``[f_0, ..., f_L]`` (``f_0`` = input width).
        program: the model's trace (:func:`gridgnn.parallel.trace.trace`): per call ``name``,
            ``layer``, ``width`` (and ``out_width`` of a linear). Its order of ``linear`` and ``spmm`` per
            layer fixes the layouts, its widths the column blocks.
        block_rows: blocked aggregation (0 = off).
        scatter: ``--algo plexus-rs`` — every node tensor held split over its third axis; ``spmm`` all-gathers
            its input's parts and reduce-scatters its output, ``linear`` reduce-scatters by column blocks
            (:data:`~gridgnn.partition.layout.SCATTER_PRIMITIVES`: the primitives it lays out).
    """

    name = "plexus"
    root_in_aggregate_layout = False  # spmm moves the rows to the third axis: its output is not laid out as its input
    scores_across_orders = True  # the destination-row gather maps a vertex's score between the two orders

    def __init__(self, comm, source, dims: list[int], *, program, dtype=torch.float64, device="cpu",
                 block_rows: int = 0, scatter: bool = False):
        self.comm, self.grid, self.source, self.dims = comm, comm.grid, source, list(dims)
        self.dtype, self.device = dtype, device
        self.block_rows = int(block_rows)
        self.scatter = bool(scatter)
        if scatter:
            self.name = "plexus-rs"
        if block_rows < 0:
            raise GridGnnError(f"--blocked-aggregation must be >= 0, got {block_rows}")
        if scatter and block_rows:
            raise GridGnnError("--blocked-aggregation blocks plexus' aggregation all-reduce; plexus-rs "
                               "reduce-scatters it whole (use --algo plexus)")
        n = source.n
        self.g = {ax: self.grid.size(ax) for ax in PLEXUS_AXES}
        for ax, s in self.g.items():
            if s > n:
                raise GridGnnError(f"grid axis {ax} has {s} processes but the graph only {n} vertices")
        self.vb = {ax: even_bounds(n, self.g[ax]) for ax in PLEXUS_AXES}
        self.me = {ax: self.grid.rank(ax) for ax in PLEXUS_AXES}
        L = len(dims) - 1
        self.program = [[c for c in program if c.layer == l] for l in range(L)]
        if scatter:  # the trace's rules refused these already; a program handed in directly meets the same line
            rules = PlexusRules(source.double, scatter=True)
            for c in program:
                if c.name != "param_grad":
                    rules.check_primitive(c.name, c.layer)
        ops = [plexus_program([c.name for c in calls]) for calls in self.program]
        self.layouts = plexus_layouts(ops, scatter=self.scatter)
        self.first_op = ops[0][0]
        # the width of each layer's linear input (its weight block's rows, split in parts along the linear's rows)
        linear = {l: next(c for c in calls if c.name == "linear")
                  for l, calls in enumerate(self.program) if self.layouts[l].linear is not None}
        self._linear_width = {l: c.width for l, c in linear.items()}
        self._linear_out = {l: c.out_width for l, c in linear.items()}
        shape, me = tuple(self.g[a] for a in PLEXUS_AXES), tuple(self.me[a] for a in PLEXUS_AXES)
        self._shards: dict = {}
        self.schedules: list[PlexusSchedule] = []  # per layer: the records of every collective it runs
        self.graphs = {}
        for l, lay in enumerate(self.layouts):
            if lay.graph is None:
                self.schedules.append(PlexusSchedule(n, shape, me, lay, 0, self.block_rows))
                continue
            key = (lay.graph.third, lay.graph.rows, lay.graph.version if source.double else "rc")
            if key not in self._shards:
                self._shards[key] = _Shard(self, *key)
            self.schedules.append(PlexusSchedule(n, shape, me, lay, self._shards[key].nnz, self.block_rows))
            width = {name: next((c.width for c in self.program[l] if c.name in (name, name + "_select")), 0)
                     for name in ("spmm", "sddmm_dot")}
            self.graphs[l] = PlexusGraph(self, self.schedules[l], self._shards[key], layer=l, width=width["spmm"],
                                         dot_width=width["sddmm_dot"],
                                         gather_input=l == 0 and self.first_op == "spmm" and not scatter)
        out = self.layouts[-1].output
        self.class_axis = out.cols
        self.copies = self.grid.world_size // (self.g[out.rows] * (self.g[out.third] if out.split else 1))
        self.grad_axes = ()  # every primitive reduces its own parameter gradients

    # ------------------------------------------------------------------ layouts
    def block_of(self, width: int, axis: str | None) -> tuple[int, int]:
        """Column block of a ``width``-wide tensor split along ``axis`` (``None``: every column)."""
        return self.schedules[0].cols(width, axis)

    def _rows(self, lay) -> np.ndarray:
        r0, r1 = block_range(self.vb[lay.rows], self.me[lay.rows])
        rows = vertex_order(self.source, lay.order)[r0:r1]
        if lay.split:  # the layer-0 input (plexus-rs: every tensor) is held as the third axis' part of the rows
            parts = np.concatenate([[0], np.cumsum(self.schedules[0].parts(lay))])
            rows = rows[slice(*block_range(parts, self.me[lay.third]))]
        return rows

    def in_rows(self, layer: int) -> np.ndarray:
        return self._rows(self.layouts[layer].input)

    def in_cols(self, layer: int, f: int) -> tuple[int, int]:
        return self.block_of(f, self.layouts[layer].input.cols)

    def out_rows(self) -> np.ndarray:
        return self._rows(self.layouts[-1].output)

    def out_cols(self, classes) -> tuple[int, int]:
        return self.block_of(self.dims[-1] if classes is None else classes, self.layouts[-1].output.cols)

    def input(self, x=None) -> torch.Tensor:
        r"""Layer-0 input shard: the ``z``-th row part of the ``(V^x_i, C^y_j)`` block."""
        c0, c1 = self.in_cols(0, self.dims[0])
        mine = self.source.node_rows("x", self.in_rows(0))[:, c0:c1]
        return torch.from_numpy(np.ascontiguousarray(mine, dtype=np.float64))

    def param_slice(self, layer: int, kind: str, shape=None) -> tuple[slice, ...]:
        """This rank's part of layer ``layer``'s weight (``"w"``, full shape ``shape``: the rows of block
        ``W[C^q, C^t]`` of part ``r``), bias (``"b"``: the output's column block); other parameters whole."""
        lay = self.layouts[layer]
        if kind == "w":
            fi, fo = shape if shape is not None else (self.dims[layer], self.dims[layer + 1])
            lin = lay.linear
            if lin.scatter:  # the weight rows of the input's column block, every output column
                return slice(*self.block_of(fi, lin.cols)), slice(None)
            b0, _ = self.block_of(fi, lin.cols)
            parts = np.concatenate([[0], np.cumsum(self.schedules[layer].weight_parts(fi))])
            p0, p1 = block_range(parts, self.me[lin.rows])
            return slice(b0 + p0, b0 + p1), slice(*self.block_of(fo, lin.third))
        if kind == "b":
            width = shape[0] if shape is not None else self.dims[layer + 1]
            return (slice(*self.block_of(width, lay.output.cols)),)
        return (slice(None),) * (1 if shape is None else len(shape))

    def shard_nnz(self) -> list[int]:
        return [s.nnz for s in self._shards.values()]

    # ------------------------------------------------------------------ primitives
    def graph(self, layer: int) -> PlexusGraph:
        if layer not in self.graphs:
            raise GridGnnError(f"layer {layer} of this model calls no spmm: plexus has no graph layout for it")
        return self.graphs[layer]

    def gather_input(self, x: torch.Tensor, rec) -> torch.Tensor:
        """The split layer-0 input's parts all-gathered over its third axis (Alg. 1 line 2; ``rec``: the reading
        primitive's ``input_gather`` step)."""
        return _GatherSplit.apply(x, self.comm, rec)

    def _program(self, layer: int, name: str, width: int, heads: int, *inputs, out_width: int = 0) -> Program:
        """The :func:`program` of a call of ``name`` on layer ``layer`` (``inputs``: the tensors whose gradients it
        gives, in order)."""
        call = PrimitiveCall(name, layer, int(width), int(heads), needs_grad(*inputs), out_width=int(out_width))
        g = self.graphs.get(layer)
        return program(call, self.schedules[layer], first=self.first_op,
                       dst_counts=None if g is None else (lambda: g.dst_spec()[2]))

    def _traced_width(self, layer: int, name: str, cols: int, axis, out_width: int | None = None) -> int:
        """The full width of the traced call of ``name`` in layer ``layer`` whose column block along ``axis`` has
        ``cols`` columns (and ``out_width`` output columns), as the trace recorded it (a layer may call ``name``
        on several widths)."""
        sched = self.schedules[layer]
        for c in self.program[layer]:
            if c.name == name and sched.ncols(c.width, axis) == cols and out_width in (None, c.out_width):
                return c.width
        raise GridGnnError(f"layer {layer} calls {name} on {cols} local columns, which its trace never did: the "
                           "model must call the same primitives on the same widths as when it was traced")

    def linear(self, layer: int, h: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        if self.scatter:  # the weight holds the rows W[C^q, :] of every output column
            width = self._traced_width(layer, "linear", w.shape[0], self.layouts[layer].linear.cols, w.shape[1])
            prog = self._program(layer, "linear", width, 0, h, w, out_width=w.shape[1])
            return _ScatteredLinear.apply(h, w, self.comm, prog)
        width = self._linear_width[layer]
        prog = self._program(layer, "linear", width, 0, h, w, out_width=self._linear_out[layer])
        if layer == 0 and self.first_op == "linear":
            h = self.gather_input(h, prog.take_one("fwd", "input_gather"))
        return _PlexusLinear.apply(h, w, self.comm, prog)

    def add_bias(self, layer: int, h: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        width = self._traced_width(layer, "add_bias", b.numel(), self.layouts[layer].output.cols)
        return _AddBias.apply(h, b, self.comm, self._program(layer, "add_bias", width, 0, h, b))

    def head_scores(self, layer: int, x: torch.Tensor, att: torch.Tensor) -> torch.Tensor:
        lay = self.layouts[layer].linear
        c0, _ = self.block_of(att.numel(), lay.third)
        prog = self._program(layer, "head_scores", att.numel(), att.shape[0], x, att)
        return _HeadScores.apply(x, att, self.comm, prog, c0)

    def head_mean(self, layer: int, h: torch.Tensor, heads: int, width: int) -> torch.Tensor:
        if heads == 1:
            return h
        prog = self._program(layer, "head_mean", width, heads, h)
        return _HeadMean.apply(h, self, self.schedules[layer], heads, width, prog)

    def normalize_rows(self, layer: int, h: torch.Tensor) -> torch.Tensor:
        self.graph(layer)
        return _NormalizeRows.apply(h, self.comm, self._program(layer, "normalize_rows", 0, 0, h))

    def scale(self, layer: int, h: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        self.graph(layer)
        return _Scale.apply(h, s, self.comm, self._program(layer, "scale", 0, 0, h, s))


class PlexusFamily(Family):
    r"""``plexus`` and ``plexus-rs`` on ``X × Y × Z``: every axis cuts the vertices; adjacency shards of
    ``V^c × V^a`` blocks rotate roles by layer, node tensors and weights are split over the axes, and the
    primitives sum each weight's gradient themselves."""

    name = "plexus"
    order = 30

    def plan_class(self, spec):
        return PlexusPlan

    def build(self, spec, comm, source, dims, *, rows, dtype, device, block_rows, program):
        return PlexusPlan(comm, source, dims, program=program, dtype=dtype, device=device, block_rows=block_rows,
                          scatter=spec.scatter)

    def rules(self, spec, *, double: bool = False):
        return PlexusRules(double, spec.scatter)

    def takes_grid_shape(self, spec) -> bool:
        return True

    def vertex_blocks(self, spec, world: int, replication: int, shape) -> int:
        return max(shape)

    def layout_blocks(self, spec, shape) -> tuple[int, int]:
        return max(shape), max(shape)

    def grad_members(self, spec, world: int, replication: int, shape) -> int:
        return 0

    def memory(self, spec, ctx, shape, *, row_bounds, ranks) -> dict:
        r"""Each rank's adjacency shards (one per ``(third, rows, version)`` of its layers' layouts), its parts of
        the node tensors and weights on the layouts of the model's program, and the buffers of the all-gathers and
        reduce-scatters its :class:`~gridgnn.partition.layout.PlexusSchedule` runs, the model read from its trace
        (GCN's tensors exact), ``plexus-rs`` with every node tensor held as this rank's part of its row block."""
        if spec.scatter:
            return _scattered_memory(ctx, shape, ranks)
        return _traced_memory(ctx, shape, ranks)

    def candidates(self, spec, world, *, row_partitions, summa_orders, plexus_orders, reads_destinations):
        if world == 1:
            return []
        return [(s, 1, o) for s in ordered_factorizations(world, 3) for o in plexus_orders]


# ----------------------------------------------------------------------------------------------- memory
def _plexus_grid(ctx, shape, layouts):
    r"""``(vertex bounds per axis, count)`` of a Plexus grid: ``count(version, rows, cols)`` = nonzeros of
    :math:`\hat M` in a block (from the pattern's prefix sums on every axis's cuts)."""
    n = ctx.n
    if len(shape) != 3:
        raise GridGnnError(f"plexus needs a 3-axis mesh, got {tuple(shape)}")
    g = dict(zip(PLEXUS_AXES, shape))
    for ax, size in g.items():
        if size > n:
            raise GridGnnError(f"grid axis {ax} has {size} processes but the graph only {n} vertices")
    vb = {ax: even_bounds(n, g[ax]) for ax in PLEXUS_AXES}
    cuts = np.unique(np.concatenate(list(vb.values())))
    pos = {int(c): t for t, c in enumerate(cuts)}
    used = sorted({lay.graph.version if ctx.double else "rc" for lay in layouts if lay.graph is not None})
    pre = {v: np.pad(ctx.pats[v].counts(cuts, cuts), ((1, 0), (1, 0))).cumsum(0).cumsum(1) for v in used}

    def count(v, rr, cc):
        s = pre[v]
        a, b, c, d = pos[rr[0]], pos[rr[1]], pos[cc[0]], pos[cc[1]]
        return float(s[b, d] - s[a, d] - s[b, c] + s[a, c])

    return vb, count


def _plexus_rank(ctx, shape, layouts, rank: int):
    """``(coordinates, schedules)`` of one Plexus rank: its :class:`~gridgnn.partition.layout.PlexusSchedule` per
    layer (the engine's: vertex rows and column blocks, the parts and gathers whose buffers it sizes)."""
    coords = tuple(coords_of(rank, shape))
    return dict(zip(PLEXUS_AXES, coords)), [PlexusSchedule(ctx.n, tuple(shape), coords, lay) for lay in layouts]


#: build one rank's schedules per class of equally sized ranks (:func:`~gridgnn.partition.layout.split_classes`;
#: the memory model reads their sizes alone); ``False``: every rank's own (the plain path the tests compare)
GROUP_RANKS = True


def _plexus_ranks(ctx, shape, layouts, ranks):
    """Per rank asked, its memory model's start: ``(rank, coordinates, schedules, ledger holding its adjacency
    shards, {layer: shard nnz}, the largest shard's nnz, the vertex bounds per axis)``. The schedules are built
    once per class of coordinates whose blocks and parts have the same sizes (of the vertices and of every width
    the trace records), since the model reads sizes from them; the shards are each rank's own."""
    vb, count = _plexus_grid(ctx, shape, layouts)
    tr = ctx.trace
    widths = {ctx.n, 1, *ctx.dims, *(c.width for c in tr.calls), *(c.out_width for c in tr.calls),
              *(s.cols for s in tr.saved), *(2 * lay[0] for lay in ctx.layers),
              *(backward_temporaries(ctx, k)[0] for k, _ in forward_calls(tr)),
              *(redrawn_mask_columns(ctx, k)[0] for k, _ in forward_calls(tr))}
    cls = split_classes(dict(zip(PLEXUS_AXES, map(int, shape))), widths) if GROUP_RANKS else None
    built: dict = {}
    for r in ranks:
        me = dict(zip(PLEXUS_AXES, coords_of(r, shape)))
        key = tuple(cls[a][me[a]] for a in PLEXUS_AXES) if cls is not None else r
        if key not in built:
            built[key] = _plexus_rank(ctx, shape, layouts, r)[1]
        scheds = built[key]
        acc = Ledger()
        shards, largest = _plexus_shards(ctx, acc, layouts, vb, count, me)
        yield r, me, scheds, acc, shards, largest, vb


def _weight_buffers(acc: Ledger, s, fi: int, w_out: int, e: int, layer: int, at) -> None:
    """The buffers of a Plexus ``linear``'s weight all-gather and its gradient's reduce-scatter (schedule ``s``),
    at the moments ``at``."""
    get = s.weight_gather(fi)
    if get.moves:
        mine = get.pieces[get.me]
        acc.cand("buffers", (get.group + 1) * get.largest_piece * w_out * e, f"plexus weight all-gather, layer {layer}",
                 at=at)
        acc.cand("buffers", (2 * get.total_rows + get.group * mine) * w_out * e,
                 f"plexus weight-gradient reduce-scatter, layer {layer}", at=at)


def _input_gather_buffer(acc: Ledger, s, c_in: int, e: int, at) -> None:
    """The all-gather of the split layer-0 input over its third axis (schedule ``s`` of layer 0), at the moments
    ``at``."""
    get = s.input_gather()
    n_in = get.total_rows
    acc.cand("buffers", ((get.group + 1) * get.largest_piece * c_in + n_in * c_in) * e if get.moves else n_in * c_in * e,
             "plexus all-gather of the layer-0 input", at=at)


#: primitives that read node values at the destinations of the edges (on Plexus: a row gather along ``r``)
_READS_DST = ("sddmm_add", "sddmm_dot", "at_destinations")


def _traced_memory(ctx, shape, ranks) -> dict:
    """Plexus for a traced model: the layouts of its program (as the engine fixes them), its adjacency shards and
    layer-0 input, the linear weights and biases sharded as :class:`PlexusPlan` shards them (other parameters
    counted whole), the saved tensors on their layouts (linear's gathered weight blocks and gathered layer-0 input
    beside them)."""
    n, dims, e, tr = ctx.n, ctx.dims, ctx.e, ctx.trace
    L = len(dims) - 1
    ops = [plexus_program([c.name for c in tr.calls if c.layer == l]) for l in range(L)]
    layouts = plexus_layouts(ops)
    # where layer 0 starts with linear, every layer-0 linear reads the all-gathered input (PlexusPlan.linear); where
    # the gather moves rows it saves that gathered copy in its own layout, where the trace saw the input itself kept
    # (a tensor of its own, or the dropout mask its recipe kept; nothing when it is the features)
    gathered = [i for i, c in enumerate(tr.calls) if c.layer == 0 and c.name == "linear"] \
        if ops[0][0] == "linear" else []
    replaced = {j for i in gathered for j in tr.linear_inputs.get(i, ())}
    out = {}
    memos: dict = {}  # per class of ranks (its schedules): what the trace's ledger takes from sizes alone
    for r, me, scheds, acc, shards, largest, vb in _plexus_ranks(ctx, shape, layouts, ranks):
        nrows, ncols = scheds[0].nrows, scheds[0].ncols
        gathers = set()
        for l, lay in enumerate(layouts):
            gr = lay.graph
            if gr is None:
                continue
            key = (gr.third, gr.rows, gr.version if ctx.double else "rc")
            rows_t, rows_r = block_range(vb[gr.third], me[gr.third]), block_range(vb[gr.rows], me[gr.rows])
            if key not in gathers and any(c.layer == l and c.name in _READS_DST for c in tr.calls):
                # the destination-row gather (PlexusGraph.dst_spec): where each row lands (n_t) and which of them
                # this rank holds, the overlap of its V^t and V^r blocks (its expectation with two vertex orders)
                gathers.add(key)
                n_t, n_r = rows_t[1] - rows_t[0], rows_r[1] - rows_r[0]
                held = n_t * n_r / n if ctx.double else max(0, min(rows_t[1], rows_r[1]) - max(rows_t[0], rows_r[0]))
                acc.add("adjacency", 8 * (n_t + held))
        inp = layouts[0].input
        c_in = ncols(dims[0], inp.cols)
        acc.add("features", scheds[0].input_parts()[me[inp.third]] * c_in * e)
        if scheds[0].input_gather().moves:
            _input_gather_buffer(acc, scheds[0], c_in, e, moments_of(ctx, 0, ("linear",)))
        local, whole = _bias_blocks(tr, layouts, ncols)
        for i, c in enumerate(tr.calls):
            if c.name != "linear":
                continue
            s, lin = scheds[c.layer], layouts[c.layer].linear
            w_in, w_out = ncols(c.width, lin.cols), s.ncols(c.out_width, lin.third)
            get = s.weight_gather(c.width)
            local += get.pieces[get.me] * w_out
            whole += c.width * c.out_width
            _weight_buffers(acc, s, c.width, w_out, e, c.layer, [backward_of(ctx, i)])
            if get.moves:  # linear saves the gathered weight block (where nothing moves, the parameter itself)
                acc.saved(w_in * w_out * e, i + 1)
            if i in gathered and scheds[0].input_gather().moves:
                acc.saved(nrows(lin.rows) * w_in * e, i + 1)  # a copy of its own
        params(acc, ctx, local + max(tr.nparams - whole, 0), tr.ntensors, grad_allreduce=False)
        last = layouts[-1].output
        rows_out = nrows(last.rows)
        labels(acc, ctx, r, rows_out)

        def node(lay, l, cols):
            lay = lay or layouts[l].output
            return nrows(lay.rows) * ncols(cols, lay.cols)

        def product_input(l, cols):  # (layer 0's all-gathered input has the rows of the linear's layout too)
            lin = layouts[l].linear
            return nrows(lin.rows), ncols(cols, lin.cols)

        skip = replaced if scheds[0].input_gather().moves else frozenset()
        traced(acc, ctx, r, node, lambda l: shards.get(l, 0.0), rows_out, ncols(dims[-1], last.cols),
               graph_of=lambda l: l, skip=skip, flags=True, product_input=product_input,
               memo=memos.setdefault(id(scheds), {}))  # a graph per layer; the
        # loss over class blocks
        out[r] = (acc, largest)
    return out


def _plexus_shards(ctx, acc: Ledger, layouts, vb, count, me) -> tuple[dict, float]:
    """The adjacency shards a Plexus rank builds, one per ``(third, rows, version)`` (pattern + transpose,
    values, edge ids): ``({layer: nnz}, largest nnz)``."""
    shards, largest = {}, 0.0
    keys = {l: (lay.graph.third, lay.graph.rows, lay.graph.version if ctx.double else "rc")
            for l, lay in enumerate(layouts) if lay.graph is not None}
    for l, key in keys.items():
        if key not in shards:
            third, rows = key[:2]
            rows_t, rows_r = block_range(vb[third], me[third]), block_range(vb[rows], me[rows])
            shards[key] = z = count(key[2], rows_t, rows_r)
            n_t, n_r = rows_t[1] - rows_t[0], rows_r[1] - rows_r[0]
            # pattern (crow, col; the row of each edge on a device) and its transpose (t_crow, t_col, t_perm)
            ib = index_bytes(n_t, n_r, z)
            acc.add("adjacency", ib * (n_t + 1 + n_r + 1 + (3 + holds_row(ctx.dev)) * z) + ctx.e * z)
            edge_id_bytes(acc, ctx, z)  # edge ids (and a mask of them), where the model asks for them
            source_key_bytes(acc, ctx, z, [m for m, k in keys.items() if k == key])  # (the layers sharing it)
            largest = max(largest, z)
        shards[l] = shards[key]
    return shards, largest


def _bias_blocks(tr, layouts, ncols) -> tuple[int, int]:
    """``(elements this rank holds, elements in all)`` of the biases a traced model adds with ``add_bias``: each
    bias's block of its layer's output columns (as :meth:`PlexusPlan.add_bias` slices it)."""
    biases = [c for c in tr.calls if c.name == "add_bias"]
    return (sum(ncols(c.width, layouts[c.layer].output.cols) for c in biases), sum(c.width for c in biases))


def _gather_buffer(acc: Ledger, get, cols: int, e: int, what: str, at) -> None:
    """An all-gather of row pieces ``get`` (``cols`` columns): the padded pieces received and the result, at the
    moments ``at``."""
    if get.moves:
        acc.cand("buffers", ((get.group + 1) * get.largest_piece + get.total_rows) * cols * e, what, at=at)


def _scattered_memory(ctx, shape, ranks) -> dict:
    """``plexus-rs`` (a traced model of its primitives): the adjacency shards as for plexus; every node tensor held
    as this rank's part of its row block; the weight rows of the input's column block with every output column, and
    the bias block; the saved tensors on their parts; the gathers of ``spmm`` (its input over ``t``, ``∂Y`` over
    ``r``) and of ``linear``'s ``∂Y`` (column blocks over ``q``) and the partial sums before each reduce-scatter as
    candidate buffers."""
    dims, e, tr = ctx.dims, ctx.e, ctx.trace
    L = len(dims) - 1
    layouts = plexus_layouts([plexus_program([c.name for c in tr.calls if c.layer == l]) for l in range(L)],
                             scatter=True)
    lins = [c for c in tr.calls if c.name == "linear"]
    out = {}
    memos: dict = {}  # per class of ranks (its schedules): what the trace's ledger takes from sizes alone
    for r, me, scheds, acc, shards, largest, _ in _plexus_ranks(ctx, shape, layouts, ranks):
        ncols = scheds[0].ncols
        inp = layouts[0].input
        c_in = ncols(dims[0], inp.cols)
        acc.add("features", scheds[0].part_rows(inp) * c_in * e)
        last = layouts[-1].output
        rows_out = scheds[0].part_rows(last)
        labels(acc, ctx, r, rows_out)
        for l, (fi, fo) in enumerate(zip(dims[:-1], dims[1:])):
            lay, s = layouts[l], scheds[l]
            if lay.linear is not None:
                at = moments_of(ctx, l, ("linear",))
                _gather_buffer(acc, s.linear_gather(fo), s.part_rows(lay.linear), e, f"plexus-rs ∂Y gather, layer {l}",
                               at)
                acc.cand("buffers", 2 * s.part_rows(lay.linear) * fo * e, f"plexus-rs linear partial sums, layer {l}",
                         at=at)
            if lay.graph is not None:
                gr, w_g, at = lay.graph, ncols(min(fi, fo), lay.graph.cols), moments_of(ctx, l, FETCHING)
                _gather_buffer(acc, s.gather_parts(gr), w_g, e, f"plexus-rs spmm input gather, layer {l}", at)
                _gather_buffer(acc, s.gather_parts(gr.after_spmm()), w_g, e, f"plexus-rs spmm ∂Y gather, layer {l}", at)
                acc.cand("buffers", 2 * s.nrows(gr.third) * w_g * e, f"plexus-rs spmm partial sums, layer {l}", at=at)
        local, whole = _bias_blocks(tr, layouts, ncols)
        local += sum(ncols(c.width, layouts[c.layer].linear.cols) * c.out_width for c in lins)
        whole += sum(c.width * c.out_width for c in lins)
        params(acc, ctx, local + max(tr.nparams - whole, 0), tr.ntensors, grad_allreduce=False)

        def node(lay, l, cols):
            lay = lay or layouts[l].output
            return scheds[l].part_rows(lay) * ncols(cols, lay.cols)

        def product_input(l, cols):  # (this rank's part of the linear's row block, its column block)
            lin = layouts[l].linear
            return scheds[l].part_rows(lin), ncols(cols, lin.cols)

        traced(acc, ctx, r, node, lambda l: shards.get(l, 0.0), rows_out, ncols(dims[-1], last.cols),
               graph_of=lambda l: l, flags=True, product_input=product_input, memo=memos.setdefault(id(scheds), {}))
        out[r] = (acc, largest)
    return out


PLEXUS = add_family(PlexusFamily())
ALGORITHMS = (
    Algorithm("plexus", "3d", PLEXUS, paper="Plexus Alg. 1", blocked_aggregation=True),
    Algorithm("plexus-rs", "3d", PLEXUS, scatter=True, paper="Plexus Alg. 1, reduce-scatter aggregation"),
)
