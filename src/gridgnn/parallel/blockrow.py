r"""The block-row family — ``serial``, ``1d``, ``1d-sa``, ``1.5d``, ``1.5d-sa`` — as one distributed graph and
its primitives (SC'23 §4–§6 on the layouts of CAGNET SC'20 Alg. 1–2 and ICPP'24 Alg. 1–2).

**Layout.** The rows of :math:`M` (destinations) and of every node tensor are split into ``B`` blocks by a
:class:`~gridgnn.partition.RowPartition`; block ``i`` lives on the members of the *fetch axis* with coordinate
``i`` (1D: ``"p"``, ``B = P``; 1.5D: ``"row"``, ``B = P/c``, replicated along ``"rep"``; serial: one block, no
communication). A rank handles the source blocks ``stages`` (1D: all; 1.5D: the chunk of its process column).
Its **edge tensor** holds the entries of :math:`M[B_i, \cup_{q \in \text{stages}} B_q]` in CSR order (rows =
local destinations, columns sorted by global source): edges are *sharded*, along ``"rep"`` too, so a row's
edges are split over the ``c`` replicas of 1.5D and every row reduction (softmax statistics, the gradient of a
destination vector) ends with an all-reduce along ``"rep"``. Node tensors are *sharded* by block along the
fetch axis and *replicated* along ``"rep"``; each replica holds the full gradient of its replicated blocks.

**Fetching sources.** *Oblivious* (CAGNET): stage by stage the owner of block ``q`` broadcasts :math:`X_q`
along the fetch axis — at most one remote block is held at a time. *Sparsity-aware* (ICPP'24): a set-up
exchange of ``NnzCols(i, q)``; each fetch is one all-to-allv of only those rows, kept as a compact halo.
The adjoint of a fetch pushes per-source partial sums back to their owners: oblivious — a reduce to the
stage's owner per stage; sparsity-aware — the reverse all-to-allv, summed into the owner's rows.

**Primitives** (autograd Functions, hand-written backward; never autograd through sparse values):

* ``spmm(values, X)`` — :math:`Y_i = \sum_{q} M_{iq}(e) X_q`; ``dX`` = the pushed :math:`M^\mathsf{T} dY`,
  ``de`` = SDDMM of ``dY`` with the sources (oblivious: fetched again stage by stage; sparsity-aware: the
  halo kept from the forward).
* ``sddmm_add(s_dst, s_src)`` — :math:`e_{uv} = s^{dst}_u + s^{src}_v` per head (GAT's score).
* ``sddmm_dot(X_dst, X_src, heads)`` — :math:`e_{uv,h} = \langle X^{dst}_{u,h}, X^{src}_{v,h}\rangle`.
* ``edge_softmax(e)`` — per destination row, max-shifted. Two passes, not a streaming one: the scores are an
  edge tensor held whole (``nnz_i × K``), so the row max, then the row sum of the exponentials, are computed
  over the local edges and all-reduced along ``"rep"``; no source block is needed.

*Communication* per primitive and rank (``w`` = bytes of one fetched row, ``n_q`` = block sizes, ``V`` the
NnzCols counts): a fetch — oblivious ``|stages|`` broadcasts (the root sends ``n_q w``, the others receive
it), sparsity-aware one all-to-allv (sends :math:`\sum_l V_{il} w`, receives :math:`\sum_q V_{qi} w`); a
push — the mirror image (reduces, or the reverse all-to-allv); 1.5D adds a ring all-reduce of every row-block
result along ``"rep"``. These transfers are the rank's :class:`~gridgnn.partition.layout.BlockRowSchedule`:
the graph runs its records, and :class:`~gridgnn.planner.primitives.BlockRowVolume` sums the same records
without processes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import torch

from ..distributed.grid import AXES
from ..errors import GridGnnError
from ..graph import gcn_normalize
from ..ops import semiring as sr
from ..ops.lean_backward import product
from ..ops.pattern import (INT32_MAX, Pattern, col_sum, holds_row, index_bytes, index_dtype, np_index, reduce_rows,
                           rows_of, sddmm_add, sddmm_dot, spmm)
from ..partition import BUILTIN_PARTITIONS, RowPartition, even_bounds
from ..partition.layout import BlockRowSchedule, stage_chunks
from .aggregate import SourceKeys
from .attention import FusedAttention, fusable
from .base import Plan
from .checks import BlockRowRules
from .family import Algorithm, Family, add_family
from .footprint import (FETCHING, Ledger, attention_layers, edge_id_bytes, labels, model_params, moments_of,
                        source_key_bytes,
                        rows_model, traced)
from .graph import DistGraph
from .program import LOCAL_ON_WHOLE_ROWS, PrimitiveCall, Program, needs_grad


class BlockRowGraph(SourceKeys, DistGraph):
    r"""Block row ``my_block`` of :math:`M`, restricted to the source blocks ``stages``, on this rank.

    Args:
        comm: the instrumented communication layer, or ``None`` for one process without ``torch.distributed``.
        local: this rank's block row of the permuted matrix (``n_i × n`` SciPy CSR, rows = destinations,
            columns in the partition's new labels, values = the GCN normalization :math:`\hat M`).
        rows: the block-row partition (``rows.parts`` = size of ``fetch_axis``).
        my_block: the block this rank holds.
        fetch_axis: axis along which block ``q`` is fetched from its owner (axis-rank ``q``).
        stages: source blocks this rank multiplies (the same list on every member of the fetch-axis group).
        reduce_axis: axis along which a row's edges are split (1.5D: ``"rep"``), or ``None``.
        sparsity_aware: fetch only ``NnzCols`` rows with all-to-allv (after a set-up exchange).
    Attributes:
        crow: the local CSR row pointer (the edges in CSR order are the edge tensors' order; their columns live in
            the stages' patterns). pattern: the local edges as one :class:`~gridgnn.ops.pattern.Pattern` only with
            one block and one stage (the stage itself; else ``None``).
        gcn_values: ``nnz_i`` values of :math:`\hat M` in edge order (not trainable).
    """

    def __init__(self, comm, local: sp.csr_matrix, rows: RowPartition, my_block: int, *, fetch_axis: str = "p",
                 stages=(0,), reduce_axis: str | None = None, sparsity_aware: bool = False,
                 dtype=torch.float64, device="cpu", symmetric: bool = False):
        self.comm, self.rows, self.me = comm, rows, int(my_block)
        self.fetch_axis, self.reduce_axis = fetch_axis, reduce_axis
        self.sparsity_aware = sparsity_aware
        self.stages = [int(q) for q in stages]
        self.dtype, self.device = dtype, device
        b = rows.bounds
        self.n_local = int(b[self.me + 1] - b[self.me])
        local = sp.csr_matrix(local)
        local.sum_duplicates()
        local.sort_indices()
        col_block = np.searchsorted(b, local.indices, side="right") - 1
        keep = np.isin(col_block, self.stages)
        if not keep.all():
            row = np.repeat(np.arange(local.shape[0]), np.diff(local.indptr))[keep]
            local = sp.csr_matrix((local.data[keep], (row, local.indices[keep])), shape=local.shape)
            local.sort_indices()
            col_block = col_block[keep]
        self.nnz = int(local.nnz)
        self.index_dtype = index_dtype(self.n_local, local.shape[1], self.nnz)
        # the local edges in CSR order are the edge tensors' order; their columns live in the stages' patterns (one
        # copy of the edges: each stage holds its own, with their positions in the edge order), only the row pointer
        # here — except with one block and one stage, where the stage is the local pattern itself
        self.pattern = None
        self.crow = torch.from_numpy(local.indptr.astype(np_index(self.index_dtype))).to(device)
        self._row = None  # the row of each edge: kept on a device only (ops.pattern.holds_row), set below
        self.gcn_values = torch.from_numpy(local.data.astype(np.float64)).to(dtype).to(device)
        self._edge_ids = None  # built on first use (edge-keyed randomness, edge features): edge_ids()
        self._order, self._row0 = rows.perm, int(b[self.me])
        if sparsity_aware:
            self._setup_sparsity_aware(local, col_block)
        replicas = 1 if reduce_axis is None or comm is None else comm.grid.size(reduce_axis)
        self.schedule = BlockRowSchedule(tuple(int(s) for s in rows.sizes()), self.me, tuple(self.stages), fetch_axis,
                                         reduce_axis, replicas,
                                         *((tuple(self.send_rows), tuple(self.recv_rows)) if sparsity_aware else ()))
        if not sparsity_aware:  # M_iq of each stage, columns local to block q, and where its edges sit in the edge tensor
            self.stage_blocks = {}
            for q in self.stages:
                eidx = np.flatnonzero(col_block == q)
                sub = sp.csr_matrix(local[:, int(b[q]):int(b[q + 1])])
                whole = eidx.size == self.nnz  # all edges, in order: no selection needed
                one = whole and rows.parts == 1  # (symmetric: an undirected graph's whole matrix, its transpose's
                # row pointer and columns its own)
                pat = Pattern.from_scipy(sub, device=device, transpose=True, symmetric=symmetric and one)
                if one:  # one block: the stage is the local pattern itself (one row pointer)
                    self.pattern, self.crow, self._row = pat, pat.crow, pat.kept_row
                self.stage_blocks[q] = (pat, None if whole else self._positions(eidx))
        if self._row is None and holds_row(device):
            self._row = rows_of(self.crow)

    def _positions(self, eidx: np.ndarray) -> torch.Tensor:
        """Positions of a stage's edges in the local edge order, in the local block's index dtype."""
        return torch.from_numpy(eidx.astype(np_index(self.index_dtype))).to(self.device)

    # ------------------------------------------------------------------ layout queries
    def held(self) -> tuple[list, list]:
        """``(tensors, arrays)`` this graph keeps: index and value tensors, and the host edge-id arrays."""
        pats, arrays = [], [self._halo_ids] if self.sparsity_aware else []
        tensors = [self.crow, self._row, self.gcn_values, *self.held_edge_constants()]
        if self.sparsity_aware:
            for st in (self.local_stage, self.remote_stage):
                if st is not None:
                    pats.append(st[0])
                    tensors.append(st[1])
            tensors += self.send_idx
        else:
            for pat, eidx in self.stage_blocks.values():
                pats.append(pat)
                tensors.append(eidx)
        for pat in pats:
            tensors += pat.index_tensors()
        return [t for t in tensors if t is not None], arrays + list(self._edge_ids or ())

    @property
    def edge_ids_built(self) -> bool:
        """Whether :meth:`edge_ids` was asked (a trace tells the memory model whether a model holds them)."""
        return self._edge_ids is not None

    def edge_ids(self) -> tuple[np.ndarray, np.ndarray]:
        """Original (destination, source) vertex ids of the local edges, in edge order (built on first use and
        kept: a model that never asks, such as GCN, holds no ``2 × 8`` bytes per edge for them)."""
        if self._edge_ids is None:
            row = rows_of(self.crow).cpu().numpy().astype(np.int64)
            self._edge_ids = (self._order[self._row0 + row], self._order[self._local_columns()])
        return self._edge_ids

    def _local_columns(self) -> np.ndarray:
        """The column (new label) of every local edge, in edge order, gathered from the stages (a transient)."""
        col = np.empty(self.nnz, np.int64)
        if self.sparsity_aware:  # the own block's columns are local to it; the remote halo's are its slots
            b0 = int(self.rows.bounds[self.me])
            parts = [(self.local_stage, lambda c: c + b0), (self.remote_stage, lambda c: self._halo_ids[c])]
        else:
            parts = [(st, lambda c, q=q: c + int(self.rows.bounds[q])) for q, st in self.stage_blocks.items()]
        for st, to_global in parts:
            if st is not None:
                pat, eidx = st
                col[slice(None) if eidx is None else eidx.cpu().numpy()] = to_global(
                    pat.col.cpu().numpy().astype(np.int64))
        return col

    # ------------------------------------------------------------------ sparsity-aware set-up
    def _setup_sparsity_aware(self, local: sp.csr_matrix, col_block: np.ndarray) -> None:
        r"""ICPP'24 set-up: ``NnzCols(i, q)`` per stage; each owner learns which of its rows to send. The local edges
        split in two stages: those reading the block's own rows (``local_stage``, columns local to the block) and
        those reading received rows (``remote_stage``, columns into the *remote halo*: the rows received, in member
        order — stage order without the own block)."""
        comm, b, i = self.comm, self.rows.bounds, self.me
        g = comm.grid.size(self.fetch_axis)
        cols = local.indices.astype(np.int64)
        mine = col_block == i
        # the remote halo: the distinct columns the other stages' edges read, ascending — by block, then by row
        # within it, the order the rows arrive in — and each remote edge's position in it (marked and numbered on
        # an array of one entry per column: linear, no sort)
        remote = cols[~mine]
        seen = np.zeros(local.shape[1], dtype=bool)
        seen[remote] = True
        halo = np.flatnonzero(seen)
        del seen
        # the remote halo's columns (host, 4 bytes each below 2³¹ vertices; the edges' ids, where asked, read them)
        self._halo_ids = halo.astype(np.int32) if local.shape[1] <= INT32_MAX else halo
        cuts = np.searchsorted(halo, b)
        need = {q: halo[cuts[q]:cuts[q + 1]] - b[q] for q in self.stages if q != i}
        self.recv_rows = [len(need.get(k, ())) for k in range(g)]
        dev = self.device
        with comm.phase("setup"):
            counts = [torch.tensor([[self.recv_rows[k]]], dtype=torch.int64, device=dev) for k in range(g)]
            got = comm.all_to_all_v(counts, [1] * g, self.fetch_axis)
            send_counts = [int(t.reshape(-1)[0].item()) for t in got]
            lists = [torch.from_numpy(need.get(k, np.zeros(0, np.int64))).reshape(-1, 1).to(dev) for k in range(g)]
            idx = comm.all_to_all_v(lists, send_counts, self.fetch_axis)
        self.send_idx = [t.reshape(-1) for t in idx]
        self.send_rows = [int(t.numel()) for t in self.send_idx]
        self.remote_offsets = np.concatenate([[0], np.cumsum(self.recv_rows)]).astype(np.int64)
        compact = cols - b[i]
        slot = np.empty(local.shape[1], dtype=np.int32 if halo.size <= INT32_MAX else np.int64)
        slot[halo] = np.arange(halo.size)
        compact[~mine] = slot[remote]
        del slot
        row = np.repeat(np.arange(local.shape[0], dtype=np.int64), np.diff(local.indptr))

        def stage(sel, width):  # the selected edges keep their order (columns ascend with the global column): the
            eidx = np.flatnonzero(sel)  # stage's CSR is theirs as they lie, rows counted, nothing sorted
            dt = np_index(index_dtype(local.shape[0], width, eidx.size))
            rows = row[eidx]
            crow = np.zeros(local.shape[0] + 1, np.int64)
            np.cumsum(np.bincount(rows, minlength=local.shape[0]), out=crow[1:])
            pat = Pattern(*(torch.from_numpy(a.astype(dt)).to(dev) for a in (crow, compact[eidx])),
                          (local.shape[0], width), transpose=True,
                          row=torch.from_numpy(rows.astype(dt)).to(dev) if holds_row(dev) else None)
            return pat, None if eidx.size == self.nnz else self._positions(eidx)

        self.local_stage = stage(mine, self.n_local) if i in self.stages else None
        self.remote_stage = stage(~mine, int(self.remote_offsets[-1])) if any(q != i for q in self.stages) else None

    def halo_pattern(self) -> Pattern:
        """The fused kernels' one pattern over the whole halo ``[X_q or X_q[NnzCols(i, q)] for q in stages]`` (stage
        order), made from the two stages for the call that asks (it shares the local pattern's rows; not kept)."""
        before = int(self.remote_offsets[self.me]) if self.local_stage is not None else 0
        col = torch.empty(self.nnz, dtype=self.index_dtype, device=self.device)
        width = 0
        for st, shift in ((self.local_stage, before), (self.remote_stage, None)):
            if st is None:
                continue
            pat, eidx = st
            pc = pat.col.to(col.dtype)  # a stage may fit int32 where the halo's columns need int64
            c = pc + shift if shift is not None else torch.where(
                pc < before, pc, pc + (self.n_local if self.local_stage is not None else 0))
            col[slice(None) if eidx is None else eidx] = c
            width += pat.shape[1]
        return Pattern(self.crow, col, (self.n_local, width), row=self._row)

    # ------------------------------------------------------------------ fetch and push
    def _fetch_remote(self, x: torch.Tensor, *, early: bool = False):
        """Sparsity-aware fetch of the remote halo ``[X_q[NnzCols(i, q)] for q ≠ i]`` (ICPP Alg. 1 line 3), one
        all-to-allv; ``early``: started, a :class:`~gridgnn.distributed.comm.Pending`."""
        send = [x[idx] for idx in self.send_idx]
        t = self.schedule.halo_transfer()
        return self.comm.all_to_all_v(send, list(t.recv), t.axis, wire=True, joined=True, async_op=early)

    def _push_remote(self, part: torch.Tensor, *, early: bool = False, gap: tuple[int, int] = (0, 0)):
        """Adjoint of :meth:`_fetch_remote`: send the remote halo's rows of ``part`` to their owners (the blocks
        received, for :meth:`_landed_remote`); ``early``: started. ``gap = (at, rows)``: ``part`` holds ``rows``
        other rows from row ``at`` on (the own block's, in a whole halo's partial sums), which are skipped."""
        off = self.remote_offsets
        at, rows = gap

        def row(r: int) -> int:
            return r + rows if r >= at and rows else r
        send = [part[row(int(off[k])):row(int(off[k])) + int(off[k + 1] - off[k])].contiguous()
                for k in range(len(off) - 1)]
        t = self.schedule.halo_transfer(push=True)
        return self.comm.all_to_all_v(send, list(t.recv), t.axis, wire=True, async_op=early)

    def _landed_remote(self, got: list, out: torch.Tensor) -> None:
        """Add the pushed rows that arrived into their rows of ``out``."""
        for k, idx in enumerate(self.send_idx):
            if idx.numel():
                out.index_add_(0, idx, got[k])

    def _fetch_halo(self, x: torch.Tensor) -> torch.Tensor:
        """The whole halo of :meth:`halo_pattern` (the fused kernels' sources)."""
        remote = self._fetch_remote(x)
        if self.local_stage is None:
            return remote
        before = int(self.remote_offsets[self.me])
        return torch.cat([remote[:before], x, remote[before:]])

    def _push_halo(self, part: torch.Tensor, out: torch.Tensor) -> None:
        """Adjoint of :meth:`_fetch_halo`: add the halo rows of ``part`` into their owners' rows of ``out``."""
        gap = (0, 0)
        if self.local_stage is not None:
            before = int(self.remote_offsets[self.me])
            out += part[before:before + self.n_local]
            gap = (before, self.n_local)  # (the remote rows are sent from part itself: no copy without them)
        self._landed_remote(self._push_remote(part, gap=gap), out)

    def sweep(self, fetch: torch.Tensor | None, body, *, push_width: int | None = None,
              halo: torch.Tensor | None = None, keep: list | None = None) -> torch.Tensor | None:
        r"""Run ``body(pattern, edge_index, sources)`` over the source blocks and push what it returns.

        ``sources`` are the rows of the node tensor ``fetch`` that the edges of ``pattern`` read (``None`` when
        nothing is fetched); ``edge_index`` selects the block's edges in the edge tensor (``None``: all of them).
        Sparsity-aware, the remote halo is fetched unless ``halo`` supplies it, and appended to ``keep`` when given
        (a backward reads it again). When ``push_width`` is given, ``body`` returns the block's per-source partial
        sums (``rows of the block × push_width``, a fresh tensor no one else holds: the own block's may become the
        result itself), which are summed into their owners' rows; the result (``n_i × push_width``) is returned,
        not yet reduced along ``"rep"``.
        """
        def zeros():
            return None if push_width is None else torch.zeros((self.n_local, push_width), dtype=self.dtype,
                                                               device=self.device)
        if self.sparsity_aware:
            return self._sweep_halo(fetch, body, zeros(), halo, keep)
        if self.comm is not None and self.comm.overlap:
            return self._sweep_overlapped(fetch, body, zeros())
        # CAGNET Alg. 1 line 3 / Alg. 2 line 4: one remote block at a time, as the schedule's stage records say
        out = None  # the own stage's summed part itself (a fresh tensor): no zeros to add it to
        for get, put in zip(self.schedule.stage_transfers(), self.schedule.stage_transfers(push=True)):
            q = get.root
            pat, eidx = self.stage_blocks[q]
            xs = None
            if fetch is not None:
                xs = fetch.contiguous() if q == self.me else fetch.new_empty((get.rows, fetch.shape[1]))
                if self.comm is not None:
                    self.comm.broadcast(xs, get.root, get.axis, wire=True)  # BCAST(H_q) along the fetch axis
            part = body(pat, eidx, xs)
            if push_width is not None:
                part = part.contiguous()
                if self.comm is not None:
                    self.comm.reduce(part, put.root, put.axis, wire=True)  # adjoint of the broadcast
                if q == self.me:
                    out = part if out is None else out.add_(part)
            del part, xs  # (this stage's block and partial freed before the next stage's arrive)
        return zeros() if out is None else out

    def _sweep_overlapped(self, fetch: torch.Tensor | None, body, out: torch.Tensor | None):
        r"""The oblivious stage loop with its transfers started early (``--overlap``): stage ``k + 1``'s broadcast
        is on its way while stage ``k``'s product computes, and stage ``k``'s push (a reduce) while stage ``k + 1``'s
        does. Every rank issues the same calls in the same order, and each block is summed as in :meth:`sweep`, so
        the result is bit for bit the same; two remote blocks (and two pushed parts) live at a time instead of one.
        """
        comm = self.comm
        stages = list(zip(self.schedule.stage_transfers(), self.schedule.stage_transfers(push=True)))

        def start(get):
            xs = fetch.contiguous() if get.root == self.me else fetch.new_empty((get.rows, fetch.shape[1]))
            return comm.broadcast(xs, get.root, get.axis, wire=True, async_op=True)  # BCAST(H_q), started

        coming = start(stages[0][0]) if fetch is not None and stages else None
        pushing = None  # (stage owner, its part, the started reduce)
        for k, (get, put) in enumerate(stages):
            q = get.root
            pat, eidx = self.stage_blocks[q]
            xs = None
            if coming is not None:
                xs = coming.wait()
                coming = start(stages[k + 1][0]) if k + 1 < len(stages) else None
            part = body(pat, eidx, xs)
            if out is not None:
                if pushing is not None:
                    self._landed(out, *pushing)
                part = part.contiguous()
                pushing = (q, part, comm.reduce(part, put.root, put.axis, wire=True, async_op=True))
        if pushing is not None:
            self._landed(out, *pushing)
        return out

    def _sweep_halo(self, fetch, body, out, remote, keep):
        r"""The sparsity-aware sweep: the local stage (the block's own rows) and the remote stage (the halo).

        A fetch computes the local stage first, a push the remote one (its partial sums leave, then the local
        stage's are added), with or without ``--overlap`` — so the sums are the same, bit for bit. ``--overlap``
        starts the fetch's all-to-allv before the local stage computes and waits for it after; a push's
        all-to-allv travels while the local stage computes."""
        early = self.comm.overlap
        coming = None
        if remote is None and fetch is not None:  # every member of the fetch axis joins, sending or not
            coming = self._fetch_remote(fetch, early=early)
        order = [("local", self.local_stage), ("remote", self.remote_stage)]
        if out is not None:
            order.reverse()
        pushing = None
        for which, stage in order:
            if which == "remote" and coming is not None:
                remote = coming.wait() if early else coming
                if keep is not None:  # (empty without a remote stage: every rank keeps one, none fetches again)
                    keep.append(remote)
            if stage is None:  # no remote stage: the push still joins the all-to-allv, with nothing to send
                if which == "remote" and out is not None:
                    pushing = self._push_remote(out[:0], early=early)
                continue
            pat, eidx = stage
            xs = fetch if which == "local" or fetch is None else remote
            part = body(pat, eidx, xs)
            if out is None:
                continue
            if which == "remote":
                pushing = self._push_remote(part, early=early)
            else:
                out += part
        if pushing is not None:
            self._landed_remote(pushing.wait() if early else pushing, out)
        return out

    def _landed(self, out: torch.Tensor, q: int, part: torch.Tensor, pending) -> None:
        """Wait for stage ``q``'s push; its owner adds the summed part (as :meth:`sweep` does)."""
        pending.wait()
        if q == self.me:
            out += part

    def edge_rows(self) -> tuple[torch.Tensor, int, torch.Tensor | None]:
        """The local row of every local edge, the number of local rows and the CSR pointer (edges are in row
        order), for row reductions."""
        return self._row, self.n_local, self.crow  # (no rows on the CPU: the kernels walk crow)

    def row_reduce(self, values: torch.Tensor, op: str) -> torch.Tensor:
        """Per local row, ``"sum"`` or ``"max"`` of the edge values over the local edges (segmented on ``crow``)."""
        return reduce_rows(self._row, self.n_local, values, op, crow=self.crow)

    def row_all(self, t: torch.Tensor, op: str = "sum", records=None) -> torch.Tensor:
        """All-reduce a row-block result along the axis that splits rows (1.5D ``"rep"``; CAGNET Alg. 2
        line 8); ``records``: a program's ``row_all`` step (default: the schedule's)."""
        for rec in self.schedule.row_all() if records is None else records:
            self.comm.all_reduce(t, rec.axis, op=op, wire=True)
        return t

    # ------------------------------------------------------------------ primitives
    def program(self, name: str, width: int, heads: int, *inputs) -> Program:
        """The :func:`program` of a call of ``name`` here (``inputs``: the tensors whose gradients it gives)."""
        call = PrimitiveCall(name, 0, int(width), int(heads), needs_grad(*inputs))
        return program(call, self.schedule, sparsity_aware=self.sparsity_aware)

    def spmm_sum(self, values: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        r""":math:`Y = M(e) X` on the local rows. ``values``: ``nnz_i`` or ``nnz_i × K``; ``x``: ``n_i × K·F``."""
        return _SpMM.apply(values, x, self, self.program("spmm", x.shape[1], 0, values, x))

    def spmm_select(self, values: torch.Tensor | None, x: torch.Tensor, semiring: str,
                    mask: torch.Tensor | None = None) -> torch.Tensor:
        r""":math:`Y_u = \bigoplus_v \alpha_{uv} \otimes X_v` for a selecting semiring (``max``, ``min``, ``max-plus``,
        ``min-plus``): partials stage by stage, folded with ⊕; 1.5D settles them along ``"rep"`` (a ⊕ all-reduce
        of ``n_i × W`` values and a ``min`` all-reduce of the winners' int64 keys)."""
        return _SpMMSelect.apply(values, x, self, semiring, mask,
                                 self.program("spmm_select", x.shape[1], 0, values, x))

    def sddmm_add(self, s_dst: torch.Tensor, s_src: torch.Tensor) -> torch.Tensor:
        r""":math:`e_{uv,h} = s^{dst}_{u,h} + s^{src}_{v,h}`; ``s_*``: ``n_i × K`` → ``nnz_i × K``."""
        return _SddmmAdd.apply(s_dst, s_src, self, self.program("sddmm_add", 0, s_src.shape[1], s_dst, s_src))

    def sddmm_dot(self, x_dst: torch.Tensor, x_src: torch.Tensor, heads: int = 1) -> torch.Tensor:
        r""":math:`e_{uv,h} = \langle X^{dst}_{u,h}, X^{src}_{v,h} \rangle`; ``x_*``: ``n_i × K·F`` → ``nnz_i × K``."""
        return _SddmmDot.apply(x_dst, x_src, self, heads,
                               self.program("sddmm_dot", x_src.shape[1], heads, x_dst, x_src))

    def at_destinations(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` laid out like :meth:`spmm`'s output: here sources and destinations share the rows (no move)."""
        return x


    def fused_attention(self, a_dst, a_src, x, *, score, heads, slope, keep, p, redraw=None):
        r""":func:`~gridgnn.parallel.attention.attend` as fused kernels when this rank's rows are whole and their
        sources at hand — ``serial`` and ``1d-sa`` (the halo) — else ``None`` (the caller composes). The
        oblivious layouts stream source blocks and 1.5D splits rows over ``"rep"``: no fusion there."""
        whole = self.reduce_axis is None and (self.sparsity_aware or self.rows.parts == 1)
        if not whole or not fusable(a_dst, a_src, x):
            return None
        if self.sparsity_aware:
            pat = self.halo_pattern()

            def push(part, width):
                out = torch.zeros((self.n_local, width), dtype=part.dtype, device=part.device)
                self._push_halo(part, out)
                return out

            return FusedAttention.apply(a_dst, a_src, x, pat, self._fetch_halo, push, score, heads, slope, keep, p,
                                        redraw)
        return FusedAttention.apply(a_dst, a_src, x, self.pattern, lambda t: t.contiguous(), lambda part, w: part,
                                    score, heads, slope, keep, p, redraw)


def program(call, sched: BlockRowSchedule, *, sparsity_aware: bool) -> Program:
    r"""The records ``call`` (a :class:`~gridgnn.parallel.program.PrimitiveCall`) runs on the rank of ``sched`` (its
    :class:`~gridgnn.partition.layout.BlockRowSchedule`), forward and backward: what the autograd functions below
    execute and :class:`gridgnn.planner.primitives.BlockRowVolume` sums. Three kinds of step: ``fetch`` (the rows
    of the source blocks: CAGNET's broadcasts, or ICPP'24's all-to-allv of the rows a block reads), ``push`` (its
    adjoint: partial sums returned to their owners) and ``row_all`` (the all-reduce of a row-block result along
    ``"rep"``; no records without that axis). A row is ``cols`` elements wide (``W`` a node tensor's width, ``K``
    its heads); the records are made when read.

    ===================  ================================================  ===============================================
    primitive            forward                                           backward
    ===================  ================================================  ===============================================
    ``spmm``             fetch(W), row_all(W)                              [oblivious, ∂e: fetch(W)], [∂X: push(W), row_all(W)]
    ``spmm_select``      fetch(W), row_all(W, ⊕), row_all(W int64 keys)    as ``spmm``
    ``sddmm_add``        fetch(K)                                          row_all(K), push(K), row_all(K)
    ``sddmm_dot``        fetch(W)                                          [oblivious: fetch(W)], push(W), row_all(W) ×2
    ``edge_softmax``     row_all(K, max), row_all(K)                       row_all(K)
    ``row_sum``          row_all(1)                                        —
    ===================  ================================================  ===============================================

    Sparsity-aware, the backward reads the halo its forward fetched (kept) instead of fetching it again. The
    primitives of :data:`~gridgnn.parallel.program.LOCAL_ON_WHOLE_ROWS` move nothing."""
    prog = Program()
    name, w, k = call.name, call.width, call.heads
    if name in LOCAL_ON_WHOLE_ROWS:
        return prog

    def fetch(phase: str, cols: int, push: bool = False) -> None:
        prog.add(phase, "push" if push else "fetch", lambda: sched.fetch(push), cols)

    def row_all(phase: str, cols: int, unit: str = "elem", exact: bool = False) -> None:
        prog.add(phase, "row_all", sched.row_all, cols, unit, exact)

    again = not sparsity_aware  # the oblivious backward fetches the sources again
    if name in ("spmm", "spmm_select"):
        need_v, need_x = call.grads
        fetch("fwd", w)
        if name == "spmm":
            row_all("fwd", w)
        else:  # the ⊕ (max/min) all-reduce of the partials, then the min of the winners' int64 keys
            row_all("fwd", w, exact=True)
            row_all("fwd", w, "key", exact=True)
        if need_v and again:
            fetch("bwd", w)
        if need_x:
            fetch("bwd", w, push=True)
            row_all("bwd", w)
    elif name == "sddmm_add":
        fetch("fwd", k)
        row_all("bwd", k)
        fetch("bwd", k, push=True)
        row_all("bwd", k)
    elif name == "sddmm_dot":
        fetch("fwd", w)
        if again:
            fetch("bwd", w)
        fetch("bwd", w, push=True)
        row_all("bwd", w)
        row_all("bwd", w)
    elif name == "edge_softmax":
        row_all("fwd", k, exact=True)  # the max
        row_all("fwd", k)
        row_all("bwd", k)
    elif name == "row_sum":
        row_all("fwd", 1)
    else:
        raise ValueError(f"the block-row family has no program for primitive {name!r}")
    return prog


def _select(values: torch.Tensor, eidx):
    return values if eidx is None else values[eidx]


class _SpMM(torch.autograd.Function):
    @staticmethod
    def forward(ctx, values, x, g, prog):
        x = x.contiguous()
        keep, summed = [], []  # summed: the first stage's product itself (fresh), the others added to it

        def body(pat, eidx, xs):
            part = spmm(pat, _select(values, eidx), xs)
            if summed:
                summed[0].add_(part)
            else:
                summed.append(part)

        prog.take("fwd", "fetch")
        g.sweep(x, body, keep=keep)
        y = summed[0] if summed else torch.zeros((g.n_local, x.shape[1]), dtype=x.dtype, device=x.device)
        g.row_all(y, records=prog.take("fwd", "row_all"))
        prog.done("fwd")
        ctx.g, ctx.prog = g, prog
        need_v, need_x = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        # keep only what the backward reads: values for dX; the sources for de (X, to fetch again, and the halo)
        ctx.save_for_backward(values if need_x else None, x if need_v else None,
                              keep[0] if need_v and keep else None)
        ctx.shape, ctx.width = values.shape, x.shape[1]
        return y

    @staticmethod
    def backward(ctx, dy):
        values, x, halo = ctx.saved_tensors
        g = ctx.g
        need_v, need_x = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        dy = dy.contiguous()
        heads = 1 if len(ctx.shape) == 1 else ctx.shape[1]
        dvals = dy.new_zeros(ctx.shape) if need_v else None

        def body(pat, eidx, xs):
            if need_v:
                d = sddmm_dot(pat, dy, xs, heads).reshape((-1,) + tuple(ctx.shape[1:]))
                if eidx is None:
                    dvals.copy_(d)
                else:
                    dvals[eidx] = d
            if need_x:
                return spmm(pat, _select(values, eidx), dy, transpose=True)
            return None

        dx = g.sweep(x, body, push_width=ctx.width if need_x else None, halo=_took(ctx.prog, g, need_v, need_x, halo))
        if dx is not None:
            g.row_all(dx, records=ctx.prog.take("bwd", "row_all"))
        ctx.prog.done("bwd")
        return dvals, dx, None, None


def _took(prog, g, fetch: bool, push: bool, halo):
    """Take a backward sweep's steps — the fetch (``fetch``: the sources are read; none where the sparsity-aware
    forward kept the halo), the push (``push``) — and hand on ``halo``."""
    if fetch and not g.sparsity_aware:
        prog.take("bwd", "fetch")
    if push:
        prog.take("bwd", "push")
    return halo


class _SddmmAdd(torch.autograd.Function):
    @staticmethod
    def forward(ctx, s_dst, s_src, g, prog):
        e = s_dst.new_empty((g.nnz, s_dst.shape[1]))

        def body(pat, eidx, xs):
            v = sddmm_add(pat, s_dst, xs)
            if eidx is None:
                e.copy_(v)
            else:
                e[eidx] = v

        prog.take("fwd", "fetch")
        g.sweep(s_src.contiguous(), body)
        prog.done("fwd")
        ctx.g, ctx.k, ctx.prog = g, s_src.shape[1], prog
        return e

    @staticmethod
    def backward(ctx, de):
        g, prog = ctx.g, ctx.prog
        de = de.contiguous()
        ds_dst = g.row_all(g.row_reduce(de, "sum"), records=prog.take("bwd", "row_all"))
        prog.take("bwd", "push")
        ds_src = g.sweep(None, lambda pat, eidx, xs: col_sum(pat, _select(de, eidx)), push_width=ctx.k)
        ds_src = g.row_all(ds_src, records=prog.take("bwd", "row_all"))
        prog.done("bwd")
        return ds_dst, ds_src, None, None


class _SddmmDot(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x_dst, x_src, g, heads, prog):
        e = x_dst.new_empty((g.nnz, heads))
        x_dst, x_src = x_dst.contiguous(), x_src.contiguous()
        keep = []

        def body(pat, eidx, xs):
            v = sddmm_dot(pat, x_dst, xs, heads)
            if eidx is None:
                e.copy_(v)
            else:
                e[eidx] = v

        prog.take("fwd", "fetch")
        g.sweep(x_src, body, keep=keep)
        prog.done("fwd")
        ctx.g, ctx.heads, ctx.prog = g, heads, prog
        ctx.save_for_backward(x_dst, x_src, keep[0] if keep else None)
        return e

    @staticmethod
    def backward(ctx, de):
        x_dst, x_src, halo = ctx.saved_tensors
        g = ctx.g
        de = de.contiguous()
        dd = torch.zeros_like(x_dst)

        def body(pat, eidx, xs):
            d = _select(de, eidx)
            dd.add_(spmm(pat, d, xs))
            return spmm(pat, d, x_dst, transpose=True)

        prog = ctx.prog
        ds = g.sweep(x_src, body, push_width=x_src.shape[1], halo=_took(prog, g, True, True, halo))
        dd = g.row_all(dd, records=prog.take("bwd", "row_all"))
        ds = g.row_all(ds, records=prog.take("bwd", "row_all"))
        prog.done("bwd")
        return dd, ds, None, None, None


def _stage_positions(edge: torch.Tensor, eidx) -> torch.Tensor:
    """The chosen local edges that lie in a stage (``eidx``: its local edges, ascending; ``None``: all), as the
    stage's own edge indices; −1 elsewhere."""
    if eidx is None:
        return edge
    if eidx.numel() == 0:
        return torch.full_like(edge, -1)
    t = torch.searchsorted(eidx, edge.clamp(min=0)).clamp(max=eidx.numel() - 1)
    return torch.where((edge >= 0) & (eidx[t] == edge), t, torch.full_like(edge, -1))


class _SpMMSelect(torch.autograd.Function):
    @staticmethod
    def forward(ctx, values, x, g, semiring, mask, prog):
        x = x.contiguous()
        keys = g.source_keys()
        sel = sr.Selection(semiring, (g.n_local, x.shape[1]), x)
        keep = []

        def body(pat, eidx, xs):
            v = None if values is None else _select(values, eidx)
            m = None if mask is None else _select(mask, eidx)
            k = _select(keys, eidx)
            b, e = sr.partial(pat, v, xs, semiring, m, key=k)
            sel.fold(b, e, k, store=eidx)  # stage edges → local edges

        prog.take("fwd", "fetch")
        g.sweep(x, body, keep=keep)
        if g.reduce_axis is not None:
            sel.settle(lambda t, op: g.row_all(t, op=op, records=prog.take("fwd", "row_all")))
        else:  # no axis splits the rows: the steps have no records
            prog.take("fwd", "row_all")
            prog.take("fwd", "row_all")
        prog.done("fwd")
        best, edge = sel.best, sel.edge
        ctx.g, ctx.semiring, ctx.width, ctx.prog = g, semiring, x.shape[1], prog
        need_v = ctx.needs_input_grad[0]
        ctx.save_for_backward(values, x if need_v else None, keep[0] if need_v and keep else None, edge)
        return sr.finish(semiring, best, edge)

    @staticmethod
    def backward(ctx, dy):
        values, x, halo, edge = ctx.saved_tensors
        g, semiring = ctx.g, ctx.semiring
        need_v, need_x = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        dy = dy.contiguous()
        dvals = values.new_zeros(values.shape) if need_v else None

        def body(pat, eidx, xs):
            state = _stage_positions(edge, eidx)
            v = None if values is None else _select(values, eidx)
            dv, dx = sr.semiring_backward(pat, v, xs, semiring, dy, state, need_values=need_v, need_x=need_x)
            if need_v:
                if eidx is None:
                    dvals.add_(dv)
                else:
                    dvals.index_add_(0, eidx, dv)
            return dx

        dx = g.sweep(x, body, push_width=ctx.width if need_x else None, halo=_took(ctx.prog, g, need_v, need_x, halo))
        if dx is not None:
            g.row_all(dx, records=ctx.prog.take("bwd", "row_all"))
        ctx.prog.done("bwd")
        return dvals, dx, None, None, None, None


# ------------------------------------------------------------------------------------------- the plans
@dataclass
class RowBlockPlan(Plan):
    r"""A block-row algorithm (serial, 1D, 1.5D) on this rank: rows of every matrix split by ``rows``,
    all feature columns local, weights replicated.

    Attributes:
        dgraph: the :class:`~gridgnn.parallel.blockrow.BlockRowGraph` of this rank (every layer uses it).
        rows: the block-row partition (new labels); ``my_block``: the block this rank holds.
        block_axis: the axis along which blocks differ; weight gradients are summed along it (replicas
            along other axes hold identical values and identical gradients).
        copies: replication ``c`` (1.5D), else 1.
    """

    name: str
    dgraph: BlockRowGraph
    rows: RowPartition
    my_block: int
    block_axis: str
    comm: object = None
    copies: int = 1
    source: object = None
    stacks_weights = True  # linear: h @ w on the local rows

    @property
    def local_slice(self) -> slice:
        return self.rows.block(self.my_block)

    @property
    def grad_axes(self):
        return self.block_axis

    def input(self, x: np.ndarray | None = None) -> np.ndarray:
        if self.source is not None:
            return self.source.node_rows("x", self.out_rows())
        return x[self.out_rows()]

    def out_rows(self) -> np.ndarray:
        return self.rows.perm[self.local_slice]

    def in_rows(self, layer: int) -> np.ndarray:
        return self.out_rows()

    def in_cols(self, layer: int, f: int) -> tuple[int, int]:
        return (0, f)

    def out_cols(self, c) -> tuple[int, int]:
        return (0, c)

    def shard_nnz(self) -> list[int]:
        return [self.dgraph.nnz]

    def graph(self, layer: int) -> BlockRowGraph:
        return self.dgraph

    def linear(self, layer: int, h: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """``H W`` on the local rows: the weight is replicated (its gradient is summed over ``grad_axes``)."""
        return product(h, w)


def make_graph(comm, source, rows: RowPartition, my_block: int, **kw) -> BlockRowGraph:
    r"""The distributed graph of block row ``my_block`` of :math:`\hat M` (its transpose is never stored: the
    backward pushes partial sums to the sources' owners)."""
    r = (int(rows.bounds[my_block]), int(rows.bounds[my_block + 1]))
    return BlockRowGraph(comm, source.submatrix("rc", r, (0, rows.n)), rows, my_block, **kw)



def build_serial(mat: sp.csr_matrix, *, dtype=torch.float64, device="cpu", symmetric: bool = False) -> RowBlockPlan:
    r"""The serial plan on the normalized matrix ``mat`` (rows = destinations; ``symmetric``: an undirected graph's,
    whose pattern's transpose holds no row pointer or columns of its own: :class:`~gridgnn.ops.pattern.Pattern`).

    ``--algo serial``: the reference. One process, no ``torch.distributed``: the block-row distributed graph
    with one block and one stage (:mod:`gridgnn.parallel.blockrow`), so the serial primitives are the very code the
    distributed ones run on each block. Checked against PyG ``GCNConv`` / ``GATConv`` in ``tests/nn``.
    """
    rows = RowPartition.identity(mat.shape[0], 1)
    return RowBlockPlan("serial", BlockRowGraph(None, mat, rows, 0, dtype=dtype, device=device, symmetric=symmetric),
                        rows, 0, "p")


def serial_plan(graph, *, dtype=torch.float64, device="cpu") -> RowBlockPlan:
    """The serial plan of ``graph`` as the trainer builds it (:func:`build_serial` on its GCN-normalized matrix, the
    transpose's pattern shared where the graph is undirected): what a benchmark measures against PyG."""
    return build_serial(gcn_normalize(graph), dtype=dtype, device=device, symmetric=not graph.directed)


def build_1d(comm, source, rows, *, sparsity_aware: bool, dtype, device, name: str | None = None) -> RowBlockPlan:
    r"""Instantiate 1D on this rank (``rows.parts`` must equal P).

    ``--algo 1d`` and ``--algo 1d-sa``: 1D block-row GCN aggregation on the grid ``("p",)``.

    * ``1d`` — CAGNET (SC'20) Algorithm 1, BLOCKROWFW::

          for j = 1..P:  BROADCAST(H_j)  ;  T_i += Aᵀ_ij H_j          # n_i × f local result

    * ``1d-sa`` — ICPP'24 Algorithm 1: setup exchanges ``NnzCols(i, j)`` once; each product
      ``T ← [H[NnzCols(k, i)]]_k ; ALLTOALLV(T) ; Z_i ← Σ_j Aᵀ_ij Ĥ_j``.

    Backward computes :math:`A G` with the stored row blocks of :math:`A` (no transpose communication);
    the weight gradient :math:`(H^{l-1})^\mathsf{T} A G^l` is a small all-reduce over ``"p"`` (the trainer's
    ``grad.allreduce``).

    *Communication* per product and rank (f-wide rows, ``w`` bytes each): ``1d`` sends ``n_i w`` and receives
    ``(n - n_i) w``; ``1d-sa`` sends :math:`\sum_{k \ne i}|NnzCols(k,i)| w` and receives
    :math:`\sum_{j \ne i}|NnzCols(i,j)| w`.
    """
    grid = comm.grid
    p = grid.size("p")
    if rows.parts != p:
        raise GridGnnError(f"1D needs {p} row blocks, the partition has {rows.parts}")
    agg = make_graph(comm, source, rows, grid.rank("p"), fetch_axis="p", stages=list(range(p)),
                     reduce_axis=None, sparsity_aware=sparsity_aware, dtype=dtype, device=device)
    return RowBlockPlan(name or ("1d-sa" if sparsity_aware else "1d"), agg, rows, grid.rank("p"), "p", comm=comm,
                        source=source)


def build_15d(comm, source, rows, *, sparsity_aware: bool, dtype, device, name: str | None = None) -> RowBlockPlan:
    r"""Instantiate 1.5D on this rank (``rows.parts`` must equal P/c).

    ``--algo 1.5d`` and ``--algo 1.5d-sa``: 1.5D block-row aggregation on the grid ``("row", "rep")`` of
    shape ``P/c × c``. Process ``P(i, j)`` holds block row ``i`` of :math:`A^\mathsf{T}` and :math:`H`
    (``B = P/c`` blocks, each replicated on the ``c`` members of process row ``P(i, :)`` = the ``"rep"`` group).

    The ``B`` source blocks are split into ``c`` contiguous chunks, chunk ``j`` for process column ``P(:, j)``
    (the ``"row"`` group). When ``c² ∤ P`` the chunks differ by at most one block (the paper gives the extra
    stages to the last column; we spread them), and when ``B < c`` some columns have no stage and contribute
    zero partial sums.

    * ``1.5d`` — CAGNET (SC'20) Algorithm 2, BLOCK1.5DFW::

          for q in chunk(j):  Ĥ ← BCAST(H_q, P(:, j))  ;  Ẑ += SpMM(Aᵀ_iq, Ĥ)
          Z_i ← ALLREDUCE(Ẑ, +, P(i, :))

    * ``1.5d-sa`` — ICPP'24 Algorithm 2: the owner ``P(q, j)`` of each stage sends each ``P(l, j)`` only the rows
      ``NnzCols(l, q)`` (we post all stages of a product as one all-to-allv along ``"row"``, the same volume as the
      paper's per-stage ISend/Recv), one local SpMM, then the same all-reduce along ``"rep"``.

    Backward runs the same algorithm on the row blocks of :math:`A`; replicas hold the full gradient of the
    replicated block, so the all-reduce's backward moves nothing and weight gradients are summed over ``"row"``.

    *Communication* per product and rank: oblivious — ``|chunk(j)|`` broadcasts of ``n_q w`` along ``"row"``;
    sparsity-aware — the NnzCols rows of the chunk; both — ring all-reduce of ``n_i w`` over ``c`` members.
    """
    grid = comm.grid
    nb, c = grid.size("row"), grid.size("rep")
    if rows.parts != nb:
        raise GridGnnError(f"1.5D with P/c={nb} needs {nb} row blocks, the partition has {rows.parts}")
    stages = stage_chunks(nb, c)[grid.rank("rep")]
    agg = make_graph(comm, source, rows, grid.rank("row"), fetch_axis="row", stages=stages,
                     reduce_axis="rep", sparsity_aware=sparsity_aware, dtype=dtype, device=device)
    return RowBlockPlan(name or ("1.5d-sa" if sparsity_aware else "1.5d"), agg, rows, grid.rank("row"), "row", comm=comm,
                        source=source,
                        copies=c)


class BlockRowFamily(Family):
    r"""``serial``, ``1d``, ``1d-sa``, ``1.5d``, ``1.5d-sa``: ``B`` row blocks of a partition (1 serial, ``P`` 1D,
    ``P/c`` 1.5D), node tensors whole in their columns, weights replicated (their gradients summed over the
    blocks by the trainer)."""

    name = "block-row"
    order = 10
    row_partitioned = True

    def plan_class(self, spec):
        return RowBlockPlan

    def build(self, spec, comm, source, dims, *, rows, dtype, device, block_rows, program):
        build = build_1d if spec.grid == "1d" else build_15d
        return build(comm, source, rows, sparsity_aware=spec.sparsity_aware, dtype=dtype, device=device,
                     name=spec.name)

    def rules(self, spec, *, double: bool = False):
        axes = AXES.get(spec.grid, (None,))
        return BlockRowRules(spec.name, *(axes if spec.grid != "single" else (None,)))

    def takes_replication(self, spec) -> bool:
        return spec.grid == "1.5d"

    def mesh_shape(self, spec, world: int, *, replication: int = 1, grid=None) -> tuple[int, ...]:
        if spec.grid == "single":
            return (1,)
        return super().mesh_shape(spec, world, replication=replication)

    def row_blocks(self, spec, world: int, replication: int = 1) -> int:
        if spec.grid == "single":
            return 1
        return world if spec.grid == "1d" else world // replication

    def vertex_blocks(self, spec, world: int, replication: int, shape) -> int:
        return self.row_blocks(spec, world, replication)

    def grad_members(self, spec, world: int, replication: int, shape) -> int:
        return self.row_blocks(spec, world, replication)

    def replicas(self, spec, world: int, replication: int = 1) -> int:
        """``c``: the ranks that hold each row block (1.5D: ``--replication``; 1D and serial: 1)."""
        return replication if spec.grid == "1.5d" else 1

    def stages(self, spec, world: int, replication: int = 1) -> list[tuple[int, ...]]:
        """Per rank, the source blocks it multiplies (1D: every block; 1.5D: its process column's chunk,
        :func:`~gridgnn.partition.layout.stage_chunks`), as its engine does."""
        c = self.replicas(spec, world, replication)
        chunks = stage_chunks(world // c, c)
        return [tuple(chunks[r % c]) for r in range(world)]

    def rank_nnz(self, spec, nnz: int, world: int):
        """The stored entries each rank multiplies, where the family splits a block's edges by count (``None``:
        the entries of its block row in its stages' columns)."""
        return None

    def memory(self, spec, ctx, shape, *, row_bounds, ranks) -> dict:
        r"""Serial: the whole matrix as one block. Otherwise each rank's block of ``B`` row blocks (``row_bounds``;
        default even), its stages' edges (:meth:`stages`; where the family splits a block's edges by count,
        :meth:`rank_nnz`) and the buffers its :class:`~gridgnn.partition.layout.BlockRowSchedule` receives into:
        one remote block at a time (two with ``--overlap``), or the sparsity-aware all-to-allv's rows."""
        if spec.grid == "single":
            return _serial_memory(ctx)
        return _rowblock_memory(self, spec, ctx, shape, row_bounds, ranks)

    def candidates(self, spec, world, *, row_partitions, summa_orders, plexus_orders, reads_destinations):
        if spec.grid == "single":
            return [(None, 1, "random")] if world == 1 else []
        if world == 1:
            return []
        reps = [c for c in range(2, world + 1) if world % c == 0] if spec.grid == "1.5d" else [1]
        # one row block (c = P) has no partition to choose: only the orders (config.validate refuses the others)
        return [(None, c, p) for c in reps for p in row_partitions
                if self.row_blocks(spec, world, c) > 1 or p in BUILTIN_PARTITIONS]


def _graph_memory(acc: Ledger, ctx, *, rows: int, cols: int, nnz: float, stages, single_block: bool = False,
                  send: float = 0.0, halo: float = 0.0, symmetric: bool = False) -> None:
    """What a :class:`BlockRowGraph` keeps: the local row pointer (``rows × cols``; the row of each edge on a device
    that holds rows, ``ctx.dev``), the GCN values (``ctx.e`` bytes each), the edge ids and their mask where
    ``ctx``'s model asks for them; then per stage ``(n_q, nnz_q)`` a pattern (row pointer, column; rows where held)
    with its transpose and the
    stage's edge positions unless it holds every local edge — one block's stage is the local pattern (its row pointer
    and rows counted once; ``symmetric``, the serial plan of an undirected graph: its transpose's too). Sparsity-aware, the stages are the block's own rows and the remote halo, plus the send
    lists and the halo's columns (host, in the index bytes of ``cols``). Every index in
    :func:`~gridgnn.ops.pattern.index_bytes` of its block."""
    ib, rows_held = index_bytes(rows, cols, nnz), holds_row(ctx.dev)
    acc.add("adjacency", ib * (rows + 1) + (ib * rows_held + ctx.e) * nnz)
    edge_id_bytes(acc, ctx, nnz)
    source_key_bytes(acc, ctx, nnz)
    acc.add("adjacency", 8 * send)
    acc.add("adjacency", index_bytes(cols) * halo, "host")
    if not len(stages):
        return
    size, nnz_q = np.asarray(stages, np.float64).reshape(-1, 2).T  # one pair per stage
    if single_block:  # the columns; the transpose's row pointer and columns (its own unless symmetric) and order
        acc.add("adjacency", np.round(ib * (nnz_q + (0 if symmetric else size + 1 + nnz_q) + nnz_q)).sum())
        return
    ibq = index_bytes(size, nnz_q, rows)
    acc.add("adjacency", np.round(ibq * (rows + 1 + (1 + rows_held) * nnz_q + size + 1 + 2 * nnz_q)).sum())
    acc.add("adjacency", np.round(ib * nnz_q[nnz_q != nnz]).sum())


def _serial_memory(ctx) -> dict:
    """The serial plan: the whole normalized matrix, every row of every tensor."""
    n, dims, e = ctx.n, ctx.dims, ctx.e
    nnz_hat = ctx.pats["rc"].total
    acc = Ledger()
    _graph_memory(acc, ctx, rows=n, cols=n, nnz=nnz_hat, stages=[(n, nnz_hat)], single_block=True,
                  symmetric=not ctx.directed)  # (build_serial's symmetric: an undirected graph's)
    acc.add("features", n * dims[0] * e)
    labels(acc, ctx, 0, n)
    model_params(acc, ctx, grad_allreduce=False)
    traced(acc, ctx, 0, lambda lay, l, cols: n * cols, lambda l: nnz_hat, n, dims[-1])
    return {0: (acc, nnz_hat)}


def _rowblock_memory(family, spec, ctx, shape, row_bounds, ranks) -> dict:
    """:meth:`BlockRowFamily.memory` of a distributed block-row algorithm (or a family that subclasses it and
    states its ``stages`` and ``rank_nnz``, such as ``edge``)."""
    n, dims, e = ctx.n, ctx.dims, ctx.e
    world = math.prod(shape)
    algo = spec.name
    is1d = spec.grid == "1d"
    if is1d and len(shape) != 1 or not is1d and len(shape) != 2:
        raise GridGnnError(f"{algo} needs a {'(P,)' if is1d else '(P/c, c)'} mesh, got {tuple(shape)}")
    c = 1 if is1d else shape[1]
    nb = world // c
    bounds = even_bounds(n, nb) if row_bounds is None else np.asarray(row_bounds, dtype=np.int64)
    if bounds.size != nb + 1 or bounds[0] != 0 or bounds[-1] != n or np.any(np.diff(bounds) < 0):
        raise GridGnnError(f"{algo} on mesh {tuple(shape)} needs {nb} row blocks covering {n} vertices; "
                           f"row_bounds has {bounds.size - 1}")
    sizes = np.diff(bounds)
    sa = spec.sparsity_aware
    pat = ctx.pats["rc"]
    z = pat.counts(bounds, bounds)  # z[p, q]: nonzeros of block (p, q)
    v = pat.nnz_cols(bounds) if sa else None
    stage_lists = family.stages(spec, world, c)  # each rank's, as its engine multiplies them
    rank_nnz = family.rank_nnz(spec, pat.total, world)
    out = {}
    size_tuple = tuple(int(s) for s in sizes)
    for r in ranks:
        i = r // c
        stages = stage_lists[r]
        counts = BlockRowSchedule.sparsity_aware_counts(v, i, stages) if sa else ()
        sched = BlockRowSchedule(size_tuple, i, stages, "row", "rep", c, *counts)
        ni = int(sizes[i])
        acc = Ledger()
        mine = i in stages
        staged = np.asarray(stages, np.int64)
        zrow = float(rank_nnz[r]) if rank_nnz is not None else float(z[i, staged].sum())
        if sa:  # two stages: the block's own rows (when it is a stage) and the rows received (the remote halo)
            halo = sched.halo_transfer()
            send, recv = float(sum(halo.send)), float(sum(halo.recv))
            own = float(z[i, i]) if mine else 0.0
            parts = ([(ni, own)] if mine else []) + ([(recv, zrow - own)] if any(q != i for q in stages) else [])
            _graph_memory(acc, ctx, rows=ni, cols=n, nnz=zrow, stages=parts, send=send, halo=recv)
        else:
            per_stage = [zrow] if rank_nnz is not None else z[i, staged]
            _graph_memory(acc, ctx, rows=ni, cols=n, nnz=zrow, single_block=nb == 1,
                          stages=np.stack([sizes[staged], per_stage], axis=1))
        acc.add("features", ni * dims[0] * e)
        labels(acc, ctx, r, ni)
        model_params(acc, ctx, grad_allreduce=nb > 1)
        rows_model(acc, ctx, r, ni, lambda l: zrow)
        own = ni if i in stages else 0
        # the layers whose aggregation's edge values need a gradient (attention): where the fused kernels serve them
        # (FusedAttention: the whole-row layouts, numba on a CPU, Triton on a GPU) their sources are the whole halo with
        # the own block's rows copied in; counted on every sparsity-aware layout (the composition holds less)
        attention = attention_layers(ctx.trace)
        if sa:  # a primitive whose edge values need a gradient keeps the received rows (and the fused kernels the own)
            for k, call in enumerate(ctx.trace.calls):
                if call.name in ("sddmm_add", "sddmm_dot") or \
                        call.name in ("spmm", "spmm_select") and call.grads[0] and call.width:
                    acc.saved((recv + (own if call.layer in attention else 0)) * call.width * e, k + 1)
        roots, remote = sched.remote_stages() if not sa else (np.zeros(0, np.int64), np.zeros(0, np.int64))
        # the largest block broadcast to this rank (the first of them); --overlap: the next stage's block arrives
        # while this one computes (two at a time; an upper bound: the two largest)
        big = int(roots[np.argmax(remote)]) if remote.size else None
        held = int(np.sort(remote)[-2:].sum()) if ctx.overlap else (int(remote.max()) if remote.size else 0)
        for l, (cols, w, heads, fi) in enumerate(ctx.layers):
            if sa:
                # fetch: the rows sent, their flat copy, the halo received; push (the halo's pieces are views of its
                # partial sums): the partial sums and their flat copy while the rows come in, then the partial sums
                # and the rows received beside the own block's part — with --overlap all at once
                push = send + 2 * recv + own if ctx.overlap else max(send + 2 * recv, send + recv + own)
                rows = max(2 * send + recv, push)
                if l in attention:  # fused: the whole halo with the own rows (fetch), its partial sums and the own
                    rows = max(rows, 2 * recv + own, send + 2 * recv + 2 * own)  # block's result (push)
                acc.cand("buffers", rows * w * e, f"{algo} all-to-allv rows, layer {l}", at=moments_of(ctx, l, FETCHING))
            else:
                if big is not None:
                    acc.cand("buffers", held * w * e, f"{algo} broadcast of block {big}"
                             + (" and the next" if ctx.overlap else "") + f", layer {l}",
                             at=moments_of(ctx, l, FETCHING))
                if l in attention:  # an edge gradient's stage holds the block received and the partial it pushes
                    part = int(sizes[staged].max(initial=0)) * (2 if ctx.overlap else 1)  # (the own stage's too)
                    acc.cand("buffers", (held + part) * w * e, f"{algo} stage block and its pushed partial"
                             + (" (two of each)" if ctx.overlap else "") + f", layer {l}",
                             at=moments_of(ctx, l, ("sddmm_add", "sddmm_dot", "spmm")))
        out[r] = (acc, float(z[i, :].sum()))
    return out


BLOCK_ROW = add_family(BlockRowFamily())
ALGORITHMS = (
    Algorithm("serial", "single", BLOCK_ROW, paper="reference"),
    Algorithm("1d", "1d", BLOCK_ROW, paper="CAGNET Alg. 1", overlap=True),
    Algorithm("1d-sa", "1d", BLOCK_ROW, sparsity_aware=True, paper="ICPP'24 Alg. 1", overlap=True),
    Algorithm("1.5d", "1.5d", BLOCK_ROW, paper="CAGNET Alg. 2", overlap=True),
    Algorithm("1.5d-sa", "1.5d", BLOCK_ROW, sparsity_aware=True, paper="ICPP'24 Alg. 2", overlap=True),
)
