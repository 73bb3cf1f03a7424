r"""The SUMMA family — ``--algo 2d`` (CAGNET Algorithm 3) and ``--algo 3d`` (CAGNET Split-3D-SpMM) — as one
distributed graph and its primitives (SC'23 §4–§6 on CAGNET's SUMMA layout).

Grid: ``pr × pc`` process rows × columns (axes ``row_axis``, ``col_axis``) times ``z`` fiber layers
(``fiber_axis``; ``z = 1`` and no axis for 2D). Rank ``(i, j, k)``.

**Layout.** Vertex blocks ``B(i, k)`` = block ``i·z + k`` of ``pr·z`` equal blocks; process row ``i`` owns the
matrix rows ``R_i = ∪_k B(i, k)``. In fiber layer ``k`` the inner index set ``V_k = ∪_i B(i, k)`` is cut into
*panels* — the common refinement of the ``B(i, k)`` and of ``pc`` equal parts of ``V_k``; panel ``p`` is owned by
the row ``io(p)`` whose block holds it and by the column ``jo(p)`` whose part holds it. Rank ``(i, j, k)`` keeps
the sparse panels ``M[R_i, p]`` with ``jo(p) = j``: its **edge tensor** is their edges, panel after panel (CSR
order within each). **Node tensors** given to and returned by the primitives are ``X[B(i, k), :]`` — all feature
columns, *replicated* along ``col_axis``; each primitive shards the columns itself (``C_j`` = the ``j``-th of
``pc`` equal column blocks) and every replica holds the full gradient. **Weights** are replicated; ``linear``
multiplies the replicated rows locally (each rank's weight gradient is the share of its rows ``B(i, k)``, summed
over ``row_axis`` and ``fiber_axis``).

**Primitives** (autograd Functions, hand-written backward; never autograd through sparse values):

* ``spmm(e, X)`` — for every panel ``p`` (Alg. 3 lines 3–11): ``Â ← BCAST(M[R_i, p](e), P(i, :, k))`` (index and
  value arrays, from column ``jo``) ; ``X̂ ← BCAST(X[p, C_j], P(:, j, k))`` (from row ``io``) ;
  ``T[R_i, C_j] += Â X̂``; 3D: reduce-scatter ``T`` over the fiber into ``T[B(i,k), C_j]``; then all-gather
  the column blocks along ``col_axis``. Backward: all-gather ``dY[B(i,k), C_j]`` over the fiber into
  ``dY[R_i, C_j]``; per panel broadcast ``Â`` again, ``Âᵀ dY`` is reduced along the column onto row ``io``
  (the adjoint of the ``X̂`` broadcast); ``de`` = SDDMM of ``dY`` with ``X̂`` (broadcast again), a partial sum
  over ``C_j`` reduced along the row onto column ``jo``; ``dX`` column blocks all-gathered along ``col_axis``.
* ``sddmm_add(s_dst, s_src)`` and ``sddmm_dot(X_dst, X_src, K)`` — 3D: all-gather ``X_dst[R_i]`` over the fiber;
  the owner column ``jo`` receives ``X_src[p]`` from row ``io`` (all columns); the edges are computed where they
  live. Backward: row sums over ``col_axis`` (and a fiber reduce-scatter), column sums reduced onto row ``io``,
  then summed over ``col_axis`` (the adjoint of the replication).
* ``edge_softmax(e)`` — a row's edges are spread over the columns and fiber layers of its process row: the row
  max and the row sum of the exponentials are all-reduced along ``col_axis`` and ``fiber_axis`` (two passes).

*Communication* per primitive and rank: see :class:`gridgnn.planner.primitives.SummaVolume`.
"""
from __future__ import annotations

import numpy as np
import torch

from ..distributed.grid import AXES, coords_of, ordered_factorizations
from ..errors import GridGnnError
from ..ops import semiring as sr
from ..ops.device_paths import device_paths
from ..ops.lean_backward import product
from ..ops.pattern import (Pattern, as_edges, col_sum, head_columns, holds_row, index_bytes, index_dtype, row_reduce,
                           sddmm_add, sddmm_dot, spmm)
from ..partition import block_range, even_bounds
from ..partition.layout import SummaGeometry, SummaSchedule, even_size, layer_version
from .base import Plan
from .checks import SummaRules
from .family import Algorithm, Family, add_family
from .footprint import (FETCHING, Ledger, attention_layers, edge_id_bytes, labels, model_params, moments_of,
                        source_key_bytes,
                        rows_model)
from .graph import DistGraph
from .program import LOCAL_ON_WHOLE_ROWS, PrimitiveCall, Program, needs_grad


#: the panel steps of a SUMMA program: step → (the schedule's record of one panel, whether it is the push); a
#: step holds that record of every panel of the rank's fiber layer, in order
PANEL_STEPS = {"pattern": ("pattern", False), "edges": ("edges", False), "mask": ("edges", False),
               "rows_of": ("rows_of", False), "push_edges": ("edges", True), "push_rows": ("rows_of", True)}


def program(call, s: SummaSchedule) -> Program:
    r"""The records ``call`` (a :class:`~gridgnn.parallel.program.PrimitiveCall`) runs on rank ``(i, j, k)`` of
    schedule ``s`` (its :class:`~gridgnn.partition.layout.SummaSchedule` of the layer's matrix version), forward and
    backward: what the autograd functions below execute and :class:`gridgnn.planner.primitives.SummaVolume` sums.
    A row is ``cols`` elements wide: ``|C_j|`` of a node tensor's columns, an edge's values, a panel's index
    entries (:attr:`~gridgnn.partition.layout.SummaSchedule.index_bytes` each), a mask's bytes, a column of ``|B(i, k)|`` rows for the column all-gather.

    * ``spmm`` / ``spmm_select`` (Alg. 3): per panel the pattern, the edge values (and a selection's mask) from
      the owner column and ``X[p, C_j]`` from the owner row; 3D: the fiber's reduce-scatter (a selection: a ⊕
      all-reduce of the values and a ``min`` of as many int64 keys); the column all-gather. Backward: the fiber
      all-gather of ``∂Y``; per panel the pattern again and [∂X, or a selection] the values, [∂e] ``X[p, C_j]``
      again and the partial ``∂e`` pushed onto the owner column, [∂X] the rows pushed onto the owner row; [∂X] the
      column all-gather. (``∂e = SDDMM(∂Y, X)`` reads no values: an ``spmm`` whose values alone need a gradient,
      GINE's messages against ones, neither keeps nor moves them.)
    * ``sddmm_add`` / ``sddmm_dot``: the destination rows all-gathered over the fiber, the source rows of the panels
      the rank's column owns; backward their push, the fiber reduce-scatter and two column all-reduces.
    * ``edge_softmax`` (max and sum forward, one sum backward) and ``row_sum``: all-reduces over the process row.

    The primitives of :data:`~gridgnn.parallel.program.LOCAL_ON_WHOLE_ROWS` move nothing. Panel records are made
    when read (a planner sums them without building them: :meth:`SummaSchedule.panel_bytes`)."""
    prog = Program()
    name = call.name
    if name in LOCAL_ON_WHOLE_ROWS:
        return prog

    def panels(phase: str, step: str, cols: float, unit: str = "elem") -> None:
        which, push = PANEL_STEPS[step]
        make = (lambda p: s.pattern(p)) if which == "pattern" else (lambda p: getattr(s, which)(p, push))
        prog.add(phase, step, lambda: [make(p) for p in s.panels()], cols, unit)

    if name in ("spmm", "spmm_select"):
        need_v, need_x = call.grads
        select = name == "spmm_select"
        wj = even_size(call.width, s.shape[2], s.j)  # the columns C_j of X this rank multiplies
        b0, b1 = s.geo.block(s.i, s.k)
        values = (1 if call.heads else 0) if select else call.heads  # a selection's edge values: one per edge
        for ph in ("fwd", "bwd"):
            if ph == "bwd":
                prog.bwd("fiber_gather", s.fiber_gather(), wj)
            panels(ph, "pattern", s.index_bytes, "byte")  # Alg. 3 lines 9-10
            if values and (ph == "fwd" or need_x or select):  # (∂e alone reads no values: GINE's messages)
                panels(ph, "edges", values)
            if select and call.masked and ph == "fwd":
                panels(ph, "mask", 1, "byte")
            if ph == "fwd" or need_v:
                panels(ph, "rows_of", wj)
            if ph == "bwd" and need_v:
                panels(ph, "push_edges", 1 if select else call.heads)
            if ph == "bwd" and need_x:
                panels(ph, "push_rows", wj)
            if ph == "fwd":
                if select:
                    prog.fwd("fiber_all", s.fiber_all(s.nrow), wj, exact=True)
                    prog.fwd("fiber_all", s.fiber_all(s.nrow), wj, "key", exact=True)
                else:
                    prog.fwd("fiber_scatter", s.fiber_scatter(), wj)
            if ph == "fwd" or need_x:
                prog.add(ph, "gather_cols", s.gather_cols(call.width), b1 - b0)
    elif name in ("sddmm_add", "sddmm_dot"):
        w = call.width
        b0, b1 = s.geo.block(s.i, s.k)
        prog.fwd("fiber_gather", s.fiber_gather(), w)
        prog.fwd("own_rows", lambda: [s.rows_of(p) for p in s.own_panels()], w)
        prog.bwd("own_push_rows", lambda: [s.rows_of(p, push=True) for p in s.own_panels()], w)
        prog.bwd("fiber_scatter", s.fiber_scatter(), w)
        prog.bwd("col_all", s.col_all(b1 - b0), w)
        prog.bwd("col_all", s.col_all(b1 - b0), w)
    elif name == "edge_softmax":  # max and sum forward, one sum backward
        prog.fwd("row_all", s.row_all, call.heads, exact=True)
        prog.fwd("row_all", s.row_all, call.heads)
        prog.bwd("row_all", s.row_all, call.heads)
    elif name == "row_sum":
        prog.fwd("row_all", s.row_all, 1)
    else:
        raise ValueError(f"the SUMMA family has no program for primitive {name!r}")
    return prog


class SummaGraph(DistGraph):
    r"""Matrix version ``version`` (``"rc"``/``"cr"`` of the source: rows in the output order, columns in the
    input order) laid out on the SUMMA grid, on this rank.

    Attributes:
        owned: ``{panel index: (Pattern of M[R_i, p], first edge, index tensor)}`` of the panels this rank holds;
            the index tensor is ``[crow, col]`` as broadcast to the process row.
        nnz: number of local edges; ``gcn_values``: their :math:`\hat M` values.
        panel_nnz: nnz of every panel of this fiber layer (from the owners, at set-up).
    """

    def __init__(self, plan, version: str):
        self.plan = plan
        geo, comm = plan.geo, plan.comm
        i, k = plan.i, plan.k
        r0, r1 = geo.rows(i)
        self.nrow = r1 - r0
        self.b0 = geo.block(i, k)[0]
        self.panels = geo.panels[k]
        own, values, off = {}, [], 0
        order_out, order_in = plan.orders(version)
        for p, (v0, v1, _, jo) in enumerate(self.panels):
            if jo != plan.j:
                continue
            m = plan.source.submatrix(version, (r0, r1), (v0, v1))
            m.sort_indices()
            own[p] = (Pattern.from_scipy(m, device=plan.device), off)
            values.append(m.data.astype(np.float64))
            off += m.nnz
        self.nnz = off
        self.gcn_values = torch.from_numpy(np.concatenate(values) if values else np.zeros(0)).to(plan.dtype)
        self.gcn_values = self.gcn_values.to(plan.device)
        self._edge_ids = None  # built on first use: edge_ids()
        self._orders, self._r0 = (order_out, order_in), r0
        self._order_in = order_in
        with comm.phase("setup"):
            allnnz = comm.all_gather_json({p: pat.nnz for p, (pat, _) in own.items()}, plan.col_axis)
        self.panel_nnz = {int(p): v for d in allnnz for p, v in d.items()}
        self.schedule = SummaSchedule.of(geo, i, plan.j, k, (plan.row_axis, plan.col_axis, plan.fiber_axis),
                                         [self.panel_nnz[p] for p in range(len(self.panels))])
        self.owned = {}
        for p, (pat, first) in own.items():  # the index array broadcast to the process row, in the schedule's
            idx = torch.cat([pat.crow, pat.col]).to(self.schedule.index_dtype)  # wire dtype; the pattern reads it
            self.owned[p] = (Pattern(idx[:self.nrow + 1], idx[self.nrow + 1:], pat.shape, row=pat.kept_row,
                                     transpose=True), first, idx)
        # the row of every local edge (the owned panels in order), for the row reductions: kept on a device, made
        # when asked on the CPU (as a pattern's rows, :func:`~gridgnn.ops.pattern.holds_row`)
        self._edge_row = self._rows() if holds_row(plan.device) else None
        self._received_derived: dict = {}  # panel → what was derived of its received pattern (Pattern.derived)

    def edge_ids(self) -> tuple[np.ndarray, np.ndarray]:
        """Original (destination, source) vertex ids of the local edges, in edge order (the owned panels in
        order; built on first use and kept: a model that never asks, such as GCN, holds none)."""
        if self._edge_ids is None:
            (order_out, order_in), r0 = self._orders, self._r0
            rows = [pat.row.cpu().numpy().astype(np.int64) + r0 for pat, _, _ in self.owned.values()]
            cols = [pat.col.cpu().numpy().astype(np.int64) + self.panels[p][0] for p, (pat, _, _) in self.owned.items()]
            r = np.concatenate(rows) if rows else np.zeros(0, np.int64)
            c = np.concatenate(cols) if cols else np.zeros(0, np.int64)
            self._edge_ids = (order_out[r], order_in[c])
        return self._edge_ids

    def held(self) -> tuple[list, list]:
        """``(tensors, arrays)`` this graph keeps."""
        tensors = [self.gcn_values] + ([self._edge_row] if self._edge_row is not None else [])
        for pat, _, idx in self.owned.values():
            tensors += pat.index_tensors() + [idx]
        tensors += self.held_edge_constants()
        derived = [pat.derived for pat, _, _ in self.owned.values()] + list(self._received_derived.values())
        tensors += [d["panel_keys"] for d in derived if "panel_keys" in d]  # (on a device: panel_keys)
        return tensors, list(self._edge_ids or ())

    # ------------------------------------------------------------------ communication helpers
    def _panel(self, p: int, values: torch.Tensor | None, *more: torch.Tensor | None):
        """``(pattern, values, *more)`` of ``M[R_i, p]`` on every rank of the process row (Alg. 3 line 9: broadcast
        from the owner column; the receivers build the pattern from the index array). ``more``: other edge tensors
        laid out like the values (a mask travels as one byte per edge)."""
        return self._panel_coming(p, values, *more)()

    def _panel_coming(self, p: int, values: torch.Tensor | None, *more: torch.Tensor | None, early: bool = False):
        """:meth:`_panel` as a callable that returns it; ``early``: its broadcasts are started now and the callable
        waits for them (``--overlap``)."""
        plan = self.plan
        v0, v1 = self.panels[p][:2]
        get = self.schedule.pattern(p)
        if get.root == get.me:
            pat, off, idx = self.owned[p]
        else:
            pat, off = None, 0
            idx = torch.empty(get.rows, dtype=self.schedule.index_dtype, device=plan.device)
        started = [plan.comm.broadcast(idx, get.root, get.axis, tag=get.key, async_op=early)]
        pieces = []
        for t in (values, *more):
            if t is None:
                pieces.append((None, None))
                continue
            wire = torch.uint8 if t.dtype == torch.bool else t.dtype  # (a mask crosses as one byte per edge)
            e = self.schedule.edges(p)
            if e.root == e.me:  # the owner's slice only (not the whole tensor) in the wire type
                piece = t[off:off + e.rows].to(wire).contiguous()
            else:
                piece = t.new_empty((e.rows,) + tuple(t.shape[1:]), dtype=wire)
            started.append(plan.comm.broadcast(piece, e.root, e.axis, tag=e.key, async_op=early))
            pieces.append((t, piece))

        def arrived():
            if early:
                for h in started:
                    h.wait()
            if pat is not None:
                got = pat
            else:  # a received panel is the same every step: what is derived of it is kept by panel
                got = Pattern(idx[:self.nrow + 1], idx[self.nrow + 1:], (self.nrow, v1 - v0))
                got.derived = self._received_derived.setdefault(p, {})
            return (got, *[None if t is None else piece.bool() if t.dtype == torch.bool else piece
                           for t, piece in pieces])

        return arrived

    def panel_keys(self, p: int, pat: Pattern) -> torch.Tensor:
        """Original vertex id of the source of every edge of panel ``p`` (the selecting semirings' tie-break); on a
        device made once per panel and kept (as a pattern's ``derived``: the panel is the same every step, and
        making them reads its columns back to the host)."""
        keys = pat.derived.get("panel_keys")
        if keys is None:
            v0 = self.panels[p][0]
            keys = torch.from_numpy(np.ascontiguousarray(self._order_in[v0 + pat.col.cpu().numpy().astype(np.int64)])
                                    ).to(pat.device)
            if device_paths(pat.device):
                pat.derived["panel_keys"] = keys
        return keys

    def panel_offsets(self) -> list[int]:
        """First edge of every panel of this fiber layer in one numbering of all of them."""
        return np.concatenate([[0], np.cumsum([self.panel_nnz[p] for p in range(len(self.panels))])]).tolist()

    def block_in_rows(self) -> tuple[int, int]:
        """Rows of ``B(i, k)`` within ``R_i``."""
        if self.plan.fiber_axis is None:
            return 0, self.nrow
        return block_range(self.plan.geo.fiber_bounds(self.plan.i), self.plan.k)

    def _rows_of(self, x: torch.Tensor, p: int, width_cols=None) -> torch.Tensor:
        """``x[p]`` (columns ``width_cols`` of it) on every rank of the process column, from row ``io``."""
        return self._rows_coming(x, p, width_cols)()

    def _rows_coming(self, x: torch.Tensor, p: int, width_cols=None, early: bool = False):
        """:meth:`_rows_of` as a callable that returns it (``early``: the broadcast started now, the callable
        waits)."""
        v0, v1 = self.panels[p][:2]
        c0, c1 = width_cols if width_cols is not None else (0, x.shape[1])
        get = self.schedule.rows_of(p)
        if get.root == get.me:
            xp = x[v0 - self.b0:v1 - self.b0, c0:c1].contiguous()
        else:
            xp = x.new_empty((get.rows, c1 - c0))
        # Alg. 3 line 10: Ĥ ← BCAST(H_rj, P(:, j))
        h = self.plan.comm.broadcast(xp, get.root, get.axis, wire=True, async_op=early)
        return h.wait if early else (lambda: xp)

    def _push_rows(self, part: torch.Tensor, p: int, out: torch.Tensor, early: bool = False):
        """Adjoint of :meth:`_rows_of`: sum ``part`` (rows of panel ``p``) over the column onto row ``io``.
        ``early``: the reduce is started and a callable returned that waits and adds it (``--overlap``)."""
        v0, v1 = self.panels[p][:2]
        put = self.schedule.rows_of(p, push=True)
        part = part.contiguous()
        h = self.plan.comm.reduce(part, put.root, put.axis, wire=True, async_op=early)

        def land():
            if early:
                h.wait()
            if put.root == put.me:
                out[v0 - self.b0:v1 - self.b0] += part

        if early:
            return land
        land()
        return None

    def _push_edges(self, part: torch.Tensor, p: int, dvals: torch.Tensor, early: bool = False):
        """A panel's partial edge gradient summed over the process row onto the owner column, which stores it in
        ``dvals`` (``early``: as :meth:`_push_rows`)."""
        put = self.schedule.edges(p, push=True)
        h = self.plan.comm.reduce(part, put.root, put.axis, wire=True, async_op=early)

        def land():
            if early:
                h.wait()
            if put.root == put.me:
                off = self.owned[p][1]
                dvals[off:off + self.panel_nnz[p]] = part.reshape((-1,) + tuple(dvals.shape[1:]))

        if early:
            return land
        land()
        return None

    def backward_sweep(self, values, x: torch.Tensor, cols, need_v: bool, body) -> None:
        r"""The backward panel loop of a product: for each panel, its pattern and values (and ``X[p, C_j]`` when
        ``∂e`` is needed), ``body(p, pattern, values, xp)`` returns its pushes ``[(push, part, into)]``
        (:meth:`_push_edges`, :meth:`_push_rows`). With ``--overlap`` the next panel's broadcasts travel during this
        panel's products and this panel's pushes land during the next one's (:meth:`stream`)."""
        early = self.plan.comm.overlap

        def start(p, e):
            panel = self._panel_coming(p, values, early=e)
            rows = self._rows_coming(x, p, cols, e) if need_v else (lambda: None)
            return lambda: (*panel(), rows())

        landing = []  # the previous panel's pushes, added during this panel's products
        panels = range(len(self.panels))
        coming = self.stream(panels, start)
        for p in panels:  # (next(), not zip: zip would hold the last panel while the next one arrives)
            pat, val, xp = next(coming)
            parts = body(p, pat, val, xp)
            del pat, val, xp  # (freed before the next panel arrives: one panel at a time without --overlap)
            for land in landing:
                land()
            landing = [land for land in (push(part, p, into, early) for push, part, into in parts) if land]
            del parts  # (landed, or held by the pushes still travelling: not kept through the next panel)
        coming.close()  # (the generator would hold the last panel until this function returns)
        for land in landing:
            land()

    def stream(self, items, start):
        r"""Hand out ``start(item, early)()`` for each item in order: the inputs of a panel (its broadcasts).
        Without ``--overlap`` each item's are fetched just before it is used; with it, the next item's broadcasts
        are started before this one is handed out, so they travel while it computes. Either way every rank issues
        the same calls in the same order and receives the same values: the result is the same bit for bit."""
        items = list(items)
        early = self.plan.comm.overlap
        if not early:
            for it in items:
                yield start(it, False)()
            return
        coming = start(items[0], True) if items else None
        for k in range(len(items)):
            got = coming()
            coming = start(items[k + 1], True) if k + 1 < len(items) else None
            yield got

    def fiber_gather(self, x: torch.Tensor, rec) -> torch.Tensor:
        """``X[B(i, k)]`` → ``X[R_i]`` (all-gather over the fiber; ``rec``: the program's step)."""
        if not rec.moves:
            return x
        return torch.cat(self.plan.comm.all_gather_rows(x.contiguous(), rec.axis, rows=list(rec.pieces), wire=True))

    def fiber_scatter(self, t: torch.Tensor, rec) -> torch.Tensor:
        """``T[R_i]`` partial over the fiber → ``T[B(i, k)]`` summed (Split-3D reduce-scatter; ``rec``: the
        program's step)."""
        if not rec.moves:
            return t
        return self.plan.comm.reduce_scatter_rows(t.contiguous(), np.cumsum((0,) + rec.pieces), rec.axis, wire=True)

    def gather_cols(self, t: torch.Tensor, rec) -> torch.Tensor:
        """``T[:, C_j]`` → ``T[:, :]`` on every rank of the process row (all-gather of the column blocks; ``rec``:
        the program's step)."""
        if not rec.moves:
            return t
        blocks = self.plan.comm.all_gather_rows(t.t().contiguous(), rec.axis, rows=list(rec.pieces), wire=True)
        whole = torch.cat(blocks)
        del blocks  # (freed before the transposed copy: two whole blocks at a time, not three)
        return whole.t().contiguous()

    def edge_rows(self) -> tuple[torch.Tensor, int, torch.Tensor | None]:
        """The row (within ``R_i``) of every local edge, ``|R_i|``, and the CSR pointer when the edges are in row
        order (one owned panel), else ``None``."""
        if len(self.owned) == 1:
            pat = next(iter(self.owned.values()))[0]
            if pat.shape[0] == self.nrow:
                return self._edge_row, self.nrow, pat.crow  # (no rows on the CPU: the kernels walk crow)
        return self._edge_row if self._edge_row is not None else self._rows(), self.nrow, None

    def _rows(self) -> torch.Tensor:
        """The row of every local edge, the owned panels in order."""
        if not self.owned:
            return torch.zeros(0, dtype=index_dtype(self.nrow), device=self.plan.device)
        return torch.cat([pat.row for pat, _, _ in self.owned.values()]).to(index_dtype(self.nrow, self.nnz))

    def row_all(self, t: torch.Tensor, op: str = "sum") -> torch.Tensor:
        """All-reduce per-row statistics of ``R_i`` over the ranks of process row ``i`` (columns and fiber; the
        ``row_all`` step of a program)."""
        for rec in self.schedule.row_all():
            if rec.moves:
                self.plan.comm.all_reduce(t, rec.axis, op=op, wire=True)
        return t

    def col_all(self, t: torch.Tensor, rec) -> torch.Tensor:
        """Sum over ``col_axis`` (the adjoint of a tensor replicated along it; ``rec``: the program's step)."""
        if rec.moves:
            self.plan.comm.all_reduce(t, rec.axis, wire=True)
        return t

    def my_panels(self):
        """The panels owned by this rank's column (the same list on every rank of the process column)."""
        return self.schedule.own_panels()

    # ------------------------------------------------------------------ primitives
    def program(self, name: str, width: int, heads: int, *inputs, masked: bool = False) -> Program:
        """The :func:`program` of a call of ``name`` here (``inputs``: the tensors whose gradients it gives)."""
        call = PrimitiveCall(name, 0, int(width), int(heads), needs_grad(*inputs), masked=masked)
        return program(call, self.schedule)

    def spmm_sum(self, values: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        prog = self.program("spmm", x.shape[1], as_edges(values).shape[1], values, x)
        return _SummaSpMM.apply(values, x, self, prog)

    def spmm_select(self, values: torch.Tensor | None, x: torch.Tensor, semiring: str,
                    mask: torch.Tensor | None = None) -> torch.Tensor:
        r"""A selecting semiring (``max``, ``min``, ``max-plus``, ``min-plus``): the panels of Alg. 3 folded with ⊕
        into ``T[R_i, C_j]``; 3D settles the fiber layers with a ⊕ all-reduce and a ``min`` all-reduce of the
        winners' keys (not a reduce-scatter: ⊕ is no sum), keeps ``B(i, k)`` and all-gathers the columns."""
        prog = self.program("spmm_select", x.shape[1], 0 if values is None else 1, values, x,
                            masked=mask is not None)
        return _SummaSpMMSelect.apply(values, x, self, semiring, mask, prog)

    def sddmm_add(self, s_dst: torch.Tensor, s_src: torch.Tensor) -> torch.Tensor:
        prog = self.program("sddmm_add", s_src.shape[1], s_src.shape[1], s_dst, s_src)
        return _SummaSddmm.apply(s_dst, s_src, self, 0, prog)

    def sddmm_dot(self, x_dst: torch.Tensor, x_src: torch.Tensor, heads: int = 1) -> torch.Tensor:
        prog = self.program("sddmm_dot", x_src.shape[1], heads, x_dst, x_src)
        return _SummaSddmm.apply(x_dst, x_src, self, heads, prog)

    def at_destinations(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` laid out like :meth:`spmm`'s output: the same rows ``B(i, k)`` in one vertex order (no move); a
        double permutation is refused by the model's trace (:class:`~gridgnn.parallel.checks.SummaRules`)."""
        return x


class _SummaSpMM(torch.autograd.Function):
    @staticmethod
    def forward(ctx, values, x, g, prog):
        plan = g.plan
        width = x.shape[1]
        c0, c1 = plan.col_block(width)
        heads = as_edges(values).shape[1]
        col_heads = head_columns(heads, width, c0, c1)
        t = x.new_zeros((g.nrow, c1 - c0))
        for step in ("pattern", "edges", "rows_of"):  # every panel's, in the loop below
            prog.take("fwd", step)

        def start(p, early):
            panel, rows = g._panel_coming(p, values, early=early), g._rows_coming(x, p, (c0, c1), early)
            return lambda: (*panel(), rows())

        for pat, val, xp in g.stream(range(len(g.panels)), start):  # Alg. 3 line 3
            if pat.nnz:
                t += spmm(pat, val, xp, col_heads=col_heads)  # line 11
            del pat, val, xp  # (freed before the next panel arrives: one panel at a time without --overlap)
        t = g.fiber_scatter(t, prog.take_one("fwd", "fiber_scatter"))
        y = g.gather_cols(t, prog.take_one("fwd", "gather_cols"))
        prog.done("fwd")
        ctx.g, ctx.width, ctx.shape, ctx.col_heads, ctx.prog = g, width, values.shape, col_heads, prog
        need_v, need_x = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        # keep what the backward reads: the values for ∂X (∂e = SDDMM(∂Y, X) reads none), X for ∂e
        ctx.save_for_backward(values if need_x else None, x if need_v else None)
        ctx.need = (need_v, need_x)
        return y

    @staticmethod
    def backward(ctx, dy):
        values, x = ctx.saved_tensors
        g, (need_v, need_x) = ctx.g, ctx.need
        plan = g.plan
        c0, c1 = plan.col_block(ctx.width)
        prog = ctx.prog
        dy_r = g.fiber_gather(dy[:, c0:c1].contiguous(), prog.take_one("bwd", "fiber_gather"))  # dY[R_i, C_j]
        _take_panels(prog, need_x, need_v, need_x)  # (the values travel for ∂X only)
        heads = 1 if len(ctx.shape) == 1 else ctx.shape[1]
        dvals = dy.new_zeros(ctx.shape) if need_v else None
        dx = dy.new_zeros((plan.geo.block(plan.i, plan.k)[1] - g.b0, c1 - c0)) if need_x else None
        def body(p, pat, val, xp):
            parts = []
            if need_v:  # partial over C_j, summed onto the owner column
                parts.append((g._push_edges, sddmm_dot(pat, dy_r, xp, heads, col_heads=ctx.col_heads), dvals))
            if need_x:
                parts.append((g._push_rows, spmm(pat, val, dy_r, transpose=True, col_heads=ctx.col_heads), dx))
            return parts

        g.backward_sweep(values, x, (c0, c1), need_v, body)
        if need_x:
            dx = g.gather_cols(dx, prog.take_one("bwd", "gather_cols"))
        prog.done("bwd")
        return dvals, dx, None, None


def _take_panels(prog: Program, values: bool, need_v: bool, need_x: bool) -> None:
    """Take the panel steps of a product's backward sweep (:meth:`SummaGraph.backward_sweep`): the pattern, the
    values (where the call has some), [∂e] the sources and the edge push, [∂X] the row push."""
    prog.take("bwd", "pattern")
    if values:
        prog.take("bwd", "edges")
    if need_v:
        prog.take("bwd", "rows_of")
        prog.take("bwd", "push_edges")
    if need_x:
        prog.take("bwd", "push_rows")


class _SummaSpMMSelect(torch.autograd.Function):
    @staticmethod
    def forward(ctx, values, x, g, semiring, mask, prog):
        plan = g.plan
        width = x.shape[1]
        c0, c1 = plan.col_block(width)
        sel = sr.Selection(semiring, (g.nrow, c1 - c0), x)
        offs = g.panel_offsets()
        for step in ("pattern",) + (("edges",) if values is not None else ()) + \
                (("mask",) if mask is not None else ()) + ("rows_of",):  # every panel's, in the loop below
            prog.take("fwd", step)
        def start(p, early):
            panel, rows = g._panel_coming(p, values, mask, early=early), g._rows_coming(x, p, (c0, c1), early)
            return lambda: (*panel(), rows())

        panels = range(len(g.panels))
        coming = g.stream(panels, start)
        for p in panels:  # (next(), not zip: zip would hold the last panel while the next one arrives)
            pat, val, msk, xp = next(coming)
            keys = g.panel_keys(p, pat)
            b, e = sr.partial(pat, val, xp, semiring, msk, key=keys)
            sel.fold(b, e, keys, store=torch.arange(offs[p], offs[p + 1], device=x.device))
            del pat, val, msk, xp, b, e, keys  # (freed before the next panel arrives)
        coming.close()  # (the generator would hold the last panel through the gathers below)
        if plan.fiber_axis is not None:  # 3D: the winners over the fiber's layers
            sel.settle(lambda t, op: plan.comm.all_reduce(t, prog.take_one("fwd", "fiber_all").axis, op=op))
        else:  # 2D: no fiber, nothing to settle
            prog.take("fwd", "fiber_all")
            prog.take("fwd", "fiber_all")
        f0, f1 = g.block_in_rows()
        y = g.gather_cols(sr.finish(semiring, sel.best[f0:f1], sel.edge[f0:f1]).contiguous(),
                          prog.take_one("fwd", "gather_cols"))
        prog.done("fwd")
        ctx.g, ctx.semiring, ctx.width, ctx.prog = g, semiring, width, prog
        ctx.save_for_backward(values, x if ctx.needs_input_grad[0] else None, sel.edge)
        return y

    @staticmethod
    def backward(ctx, dy):
        values, x, edge = ctx.saved_tensors
        g, semiring = ctx.g, ctx.semiring
        need_v, need_x = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        plan = g.plan
        c0, c1 = plan.col_block(ctx.width)
        prog = ctx.prog
        dy_r = g.fiber_gather(dy[:, c0:c1].contiguous(), prog.take_one("bwd", "fiber_gather"))  # dY[R_i, C_j]
        _take_panels(prog, values is not None, need_v, need_x)
        dvals = values.new_zeros(values.shape) if need_v else None
        dx = dy.new_zeros((plan.geo.block(plan.i, plan.k)[1] - g.b0, c1 - c0)) if need_x else None
        offs = g.panel_offsets()
        def body(p, pat, val, xp):  # the winners are known: the mask is not needed again
            inside = (edge >= offs[p]) & (edge < offs[p + 1])
            state = torch.where(inside, edge - offs[p], torch.full_like(edge, -1))
            dv, dxp = sr.semiring_backward(pat, val, xp, semiring, dy_r, state, need_values=need_v,
                                           need_x=need_x)
            return ([(g._push_edges, dv, dvals)] if need_v else []) + ([(g._push_rows, dxp, dx)] if need_x else [])

        g.backward_sweep(values, x, (c0, c1), need_v, body)
        if need_x:
            dx = g.gather_cols(dx, prog.take_one("bwd", "gather_cols"))
        prog.done("bwd")
        return dvals, dx, None, None, None, None


class _SummaSddmm(torch.autograd.Function):
    """``heads = 0``: ``e = s_dst[u] + s_src[v]``; else the per-head dot product of the two rows."""

    @staticmethod
    def forward(ctx, x_dst, x_src, g, heads, prog):
        d_r = g.fiber_gather(x_dst, prog.take_one("fwd", "fiber_gather"))  # X_dst[R_i]
        prog.take("fwd", "own_rows")  # the panels this rank's column owns, in the loop below
        prog.done("fwd")
        k = x_src.shape[1] if heads == 0 else heads
        e = x_dst.new_empty((g.nnz, k))
        srcs = {}
        mine = list(g.my_panels())
        for p, xp in zip(mine, g.stream(mine, lambda p, early: g._rows_coming(x_src, p, None, early))):
            pat, off, _ = g.owned[p]
            if heads == 0:
                e[off:off + pat.nnz] = sddmm_add(pat, d_r, xp)
            else:
                e[off:off + pat.nnz] = sddmm_dot(pat, d_r, xp, heads)
                srcs[p] = xp
        ctx.g, ctx.heads, ctx.srcs, ctx.prog = g, heads, srcs, prog
        ctx.save_for_backward(d_r if heads else None)
        ctx.n_src = x_src.shape
        return e

    @staticmethod
    def backward(ctx, de):
        (d_r,) = ctx.saved_tensors
        g, heads = ctx.g, ctx.heads
        de = de.contiguous()
        w = ctx.n_src[1]
        dd_r = de.new_zeros((g.nrow, w))
        ds = de.new_zeros(ctx.n_src)
        prog = ctx.prog
        prog.take("bwd", "own_push_rows")  # in the loop below
        early, landing = g.plan.comm.overlap, None  # --overlap: a panel's push added during the next's products
        for p in g.my_panels():
            pat, off, _ = g.owned[p]
            d = de[off:off + pat.nnz]
            if heads == 0:
                dd_r += row_reduce(pat, d, "sum")
                part = col_sum(pat, d)
            else:
                dd_r += spmm(pat, d, ctx.srcs[p])
                part = spmm(pat, d, d_r, transpose=True)
            if landing is not None:
                landing()
            landing = g._push_rows(part, p, ds, early)
        if landing is not None:
            landing()
        dd = g.fiber_scatter(dd_r, prog.take_one("bwd", "fiber_scatter"))
        dd = g.col_all(dd, prog.take_one("bwd", "col_all"))
        ds = g.col_all(ds, prog.take_one("bwd", "col_all"))
        prog.done("bwd")
        return dd, ds, None, None, None


class SummaPlan(Plan):
    r"""2D (``z = 1``) or 3D (Split-3D) CAGNET on this rank; see the module docstring.

    Args:
        comm: on a ``("row", "col")`` grid (2D) or ``("x", "y", "z")`` grid (3D: ``x`` = process rows,
            ``y`` = process columns, ``z`` = fiber).
        source: block source; layer ``l`` uses version ``"rc"`` for even ``l`` and ``"cr"`` for odd ``l``
            (identical for a single permutation).
        dims: layer widths (only their number matters: a distributed graph per matrix version).
    """

    stacks_weights = True  # linear: h @ w on the replicated rows

    def __init__(self, name: str, comm, source, dims, *, dtype=torch.float64, device="cpu"):
        self.name, self.comm, self.grid, self.source, self.dims = name, comm, comm.grid, source, list(dims)
        self.dtype, self.device = dtype, device
        if self.grid.kind == "2d":
            self.row_axis, self.col_axis, self.fiber_axis = "row", "col", None
        else:
            self.row_axis, self.col_axis, self.fiber_axis = "x", "y", "z"
        pr, pc = self.grid.size(self.row_axis), self.grid.size(self.col_axis)
        z = 1 if self.fiber_axis is None else self.grid.size(self.fiber_axis)
        self.geo = SummaGeometry(source.n, pr, pc, z)
        self.i, self.j = self.grid.rank(self.row_axis), self.grid.rank(self.col_axis)
        self.k = 0 if self.fiber_axis is None else self.grid.rank(self.fiber_axis)
        self.graphs = {}
        for layer in range(len(dims) - 1):
            v = self.version(layer)
            if v not in self.graphs:
                self.graphs[v] = SummaGraph(self, v)
        self.copies = pc  # every rank of a process row holds the same rows (all columns)
        self.grad_axes = tuple(a for a in (self.row_axis, self.fiber_axis) if a is not None)

    def version(self, layer: int) -> str:
        return layer_version(layer, self.source.double)

    def orders(self, version: str) -> tuple[np.ndarray, np.ndarray]:
        """(row order, column order) of matrix version ``version``."""
        if version == "rc":
            return self.source.perm_r, self.source.perm_c
        return self.source.perm_c, self.source.perm_r

    def graph(self, layer: int) -> SummaGraph:
        return self.graphs[self.version(layer)]

    def linear(self, layer: int, h: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """``H W`` on the replicated rows ``B(i, k)``: no communication (each rank's weight gradient is the share
        of its rows, summed over ``grad_axes``)."""
        return product(h, w)

    def shard_nnz(self) -> list[int]:
        """nnz of this rank's panels ``M[R_i, part j of V_k]`` in each matrix version it uses."""
        return [g.nnz for g in self.graphs.values()]

    def col_block(self, width: int) -> tuple[int, int]:
        return block_range(even_bounds(width, self.geo.pc), self.j)

    def in_rows(self, layer: int) -> np.ndarray:
        b0, b1 = self.geo.block(self.i, self.k)
        return self._order(layer, "in")[b0:b1]

    def in_cols(self, layer: int, f: int) -> tuple[int, int]:
        return (0, f)

    def out_rows(self) -> np.ndarray:
        b0, b1 = self.geo.block(self.i, self.k)
        return self._order(len(self.dims) - 2, "out")[b0:b1]

    def out_cols(self, classes) -> tuple[int, int]:
        return (0, self.dims[-1] if classes is None else classes)

    def input(self, x=None) -> torch.Tensor:
        block = self.source.node_rows("x", self.in_rows(0))
        return torch.from_numpy(np.ascontiguousarray(block, dtype=np.float64))


class SummaFamily(Family):
    r"""``2d`` (``PR × PC``) and ``3d`` (``X × Y × Z``, Split-3D): equal blocks of the vertex permutations,
    adjacency shards of ``PR × PC`` (3D: ``X·Z × Y``) blocks, node tensors whole in their columns on a process
    row's blocks, weights replicated (their gradients summed over the row blocks by the trainer)."""

    name = "summa"
    order = 20

    def plan_class(self, spec):
        return SummaPlan

    def build(self, spec, comm, source, dims, *, rows, dtype, device, block_rows, program):
        return SummaPlan(spec.name, comm, source, dims, dtype=dtype, device=device)

    def rules(self, spec, *, double: bool = False):
        return SummaRules(spec.name, AXES[spec.grid], double)

    def takes_grid_shape(self, spec) -> bool:
        return True

    def vertex_blocks(self, spec, world: int, replication: int, shape) -> int:
        return max(self.layout_blocks(spec, shape))  # row blocks (x·z) and column blocks (y) alike cut the vertices

    def layout_blocks(self, spec, shape) -> tuple[int, int]:
        return (shape[0] * shape[2], shape[1]) if len(shape) == 3 else (shape[0], shape[1])

    def grad_members(self, spec, world: int, replication: int, shape) -> int:
        return self.layout_blocks(spec, shape)[0]

    def memory(self, spec, ctx, shape, *, row_bounds, ranks) -> dict:
        r"""Each rank's owned panels :math:`M[R_i, p]` (``jo(p) = j``) per matrix version, its block of every
        node tensor, and the buffers its :class:`~gridgnn.partition.layout.SummaSchedule` receives into: one
        panel and its rows at a time (two with ``--overlap``), the fiber's reduce-scatter and the column
        all-gather."""
        return _summa_memory(spec, ctx, shape, ranks)

    def candidates(self, spec, world, *, row_partitions, summa_orders, plexus_orders, reads_destinations):
        if world == 1:
            return []
        orders = [o for o in summa_orders if not (reads_destinations and o in ("double-perm", "balanced-perm"))]
        return [(s, 1, o) for s in ordered_factorizations(world, len(AXES[spec.grid])) for o in orders]


def _summa_memory(spec, ctx, shape, ranks) -> dict:
    """:meth:`SummaFamily.memory`: the panels' nonzeros of every rank's row from the pattern's prefix sums on the
    cuts of every panel and block, shared by the ranks of a process row."""
    n, dims, e = ctx.n, ctx.dims, ctx.e
    algo, axes = spec.name, len(AXES[spec.grid])
    if len(shape) != axes:
        raise GridGnnError(f"{algo} needs a {axes}-axis mesh, got {tuple(shape)}")
    pr, pc = shape[0], shape[1]
    zf = shape[2] if len(shape) == 3 else 1
    geo = SummaGeometry(n, pr, pc, zf)
    L = len(dims) - 1
    cuts = sorted({int(c) for c in geo.fine} | {int(v) for k in range(zf) for p in geo.panels[k] for v in p[:2]})
    cuts = np.asarray(cuts, dtype=np.int64)
    pos = {int(c): t for t, c in enumerate(cuts)}
    used = ["rc"] + (["cr"] if ctx.double and L >= 2 else [])
    grids = {v: ctx.pats[v].counts(cuts, cuts) for v in used}
    pre = {v: np.pad(g, ((1, 0), (1, 0))).cumsum(0).cumsum(1) for v, g in grids.items()}

    layer_nnz: dict = {}  # (version, i, k) -> the panels' nonzeros in R_i, shared by the ranks of row i

    def panel_nnz(v, i, k):
        # every panel's block of R_i from the prefix sums on the cuts, rounded as round() does (half to even)
        if (v, i, k) not in layer_nnz:
            r0, r1 = geo.rows(i)
            pan = np.array(geo.panels[k], np.int64).reshape(-1, 4)
            c, d = np.searchsorted(cuts, pan[:, 0]), np.searchsorted(cuts, pan[:, 1])
            a, b, t = pos[r0], pos[r1], pre[v]
            layer_nnz[v, i, k] = np.round(t[b, d] - t[a, d] - t[b, c] + t[a, c]).astype(np.int64).tolist()
        return layer_nnz[v, i, k]

    def version(l):
        return layer_version(l, ctx.double)

    out = {}
    for r in ranks:
        i, j, k = (coords_of(r, shape) + (0,))[:3]
        r0, r1 = geo.rows(i)
        nr = r1 - r0
        b0, b1 = geo.block(i, k)
        nbk = b1 - b0
        acc = Ledger()
        largest = 0.0
        owned_by = {}
        # the engine's schedule per matrix version (the panels' nonzeros from the pattern's counts)
        sched = {v: SummaSchedule.of(geo, i, j, k, ("row", "col", "fiber" if zf > 1 else None), panel_nnz(v, i, k))
                 for v in used}
        panel_rows, _, panel_owner = geo.panel_arrays(k)
        mine = panel_owner == j
        for v in used:  # one SummaGraph per matrix version: the owned panels M[R_i, p], jo(p) = j
            z = np.asarray(sched[v].panel_nnz, np.int64)[mine]
            # pattern (crow, col; the row of each edge on a device) + its transpose (t_crow, t_col, t_perm), in its
            # block's index bytes; its crow and col are views of the broadcast index array (sched[v].pattern(p):
            # nr + 1 + z entries of the wire's bytes) where the two widths agree, else that array is a copy of them
            wb = sched[v].index_bytes
            ib = index_bytes(panel_rows[mine], z, nr)
            rows_held = holds_row(ctx.dev)
            acc.add("adjacency", int((ib * (nr + 1 + (1 + rows_held) * z) + ib * (panel_rows[mine] + 1 + 2 * z)
                                      + np.where(ib == wb, 0, wb) * (nr + 1 + z)).sum()))
            owned = float(z.sum())
            largest = max(largest, float(z.max(initial=0)))
            # GCN values and, on a device, the row of every local edge
            acc.add("adjacency", (e + rows_held * index_bytes(nr, owned)) * owned)
            edge_id_bytes(acc, ctx, owned)  # edge ids (and a mask of them), where the model asks for them
            # a device keeps every panel's tie-break keys once a layer on this version selects (the host: none)
            source_key_bytes(acc, ctx, float(np.sum(sched[v].panel_nnz)),
                             [l for l in range(len(ctx.layers)) if version(l) == v])
            owned_by[v] = owned
        acc.add("features", nbk * dims[0] * e)
        labels(acc, ctx, r, nbk)
        model_params(acc, ctx, grad_allreduce=pr * zf > 1)
        # a selection's winners lie on the panels' rows R_i and the process column's column block of their width
        rows_model(acc, ctx, r, nbk, lambda l: owned_by[version(l)], graph_of=version,
                   winners=lambda l, cols: nr * sched[version(l)].gather_cols(cols).pieces[j])
        attention = attention_layers(ctx.trace)
        for l, (cols, width, heads, fi) in enumerate(ctx.layers):
            sv = sched[version(l)]
            gather = sv.gather_cols(width)  # the column blocks C_j of the layer's width
            wj = gather.pieces[j]
            # a received panel (its owner column is not j): its index array (sv.pattern(p): nr + 1 + z entries),
            # the pattern built from it (row pointer and column; the row of each edge on a device) and its values
            # (sv.edges(p): z); every panel: its rows sv.rows_of(p)
            z = np.asarray(sv.panel_nnz, np.float64)
            held = np.where(panel_owner == j, 0.0,
                            sv.index_bytes * (2 * (nr + 1) + (2 + holds_row(ctx.dev)) * z) + e * z) \
                + panel_rows * wj * e
            held = held.tolist()
            # --overlap: the next panel arrives while this one computes (two at a time; the two largest)
            best = sum(sorted(held)[-2:]) if ctx.overlap else max(held, default=0.0)
            at = moments_of(ctx, l, FETCHING)  # (the SpMM's and SDDMM's backward, which bound their forward)
            what = f"{algo} panel broadcast" + (" and the next" if ctx.overlap else "") + f", layer {l}"
            acc.cand("buffers", best + nr * wj * e, what, at=at)
            # an aggregation whose edge values need a gradient pushes a panel's partial edge gradient and rows: with
            # --overlap while the next panel's are computed (backward_sweep's landing), two panels' worth of each in
            # its backward — counted so without it too (one panel's then: an upper bound)
            if l in attention:
                pushed = 2 * (max(z, default=0.0) * attention[l] + max(panel_rows, default=0) * wj) * e
                acc.cand("buffers", best + nr * wj * e + pushed, what + " and the pushed partial gradients",
                         at=moments_of(ctx, l, ("spmm",)))
            fiber = sv.fiber_scatter()
            if fiber.moves:
                acc.cand("buffers", (2 * fiber.total_rows + fiber.group * fiber.pieces[fiber.me]) * wj * e,
                         f"{algo} fiber reduce-scatter, layer {l}", at=at)
            if gather.moves:  # the gathered blocks, their concatenation and its transposed copy, beside the own part
                acc.cand("buffers", (2 * gather.group * gather.largest_piece + wj) * nbk * e,
                         f"{algo} column all-gather, layer {l}", at=at)
        out[r] = (acc, largest)
    return out


SUMMA = add_family(SummaFamily())
ALGORITHMS = (
    Algorithm("2d", "2d", SUMMA, paper="CAGNET Alg. 3", overlap=True),
    Algorithm("3d", "3d", SUMMA, paper="CAGNET Split-3D", overlap=True),
)
