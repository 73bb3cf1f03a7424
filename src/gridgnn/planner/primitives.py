r"""Byte model per distributed primitive, and a model step as the sum of its primitives' bytes.

A model's *trace* — which primitives a training step calls, on what widths, and which inputs need gradients —
is recorded once by running the model on a tiny serial plan (:class:`TracePlan`); it does not depend on the
graph or on the number of processes. :class:`BlockRowVolume` gives each primitive's per-rank bytes for one
layout of the block-row family (``serial``, ``1d``, ``1d-sa``, ``1.5d``, ``1.5d-sa``) from the pattern alone —
the records of each rank's :class:`~gridgnn.partition.layout.BlockRowSchedule`, the schedule its engine runs —
(:class:`SummaVolume` for ``2d``/``3d``: the records of each rank's
:class:`~gridgnn.partition.layout.SummaSchedule`; :class:`PlexusVolume`: the records of each rank's
:class:`~gridgnn.partition.layout.PlexusSchedule` per layer), with the
accounting functions the communication layer records by (:mod:`gridgnn.distributed.accounting`);
:func:`step_bytes` adds them up with the gradient all-reduce. Tests compare the sum with the bytes every rank measures, per collective and phase.

Which records a primitive runs is written once, in its family's file: the *program* of a call
(:mod:`gridgnn.parallel.program`; :func:`gridgnn.parallel.blockrow.program`, :func:`gridgnn.parallel.summa.program`,
:func:`gridgnn.parallel.plexus.program`), the list of steps its engine takes in order. The volumes here price those
steps with each rank's records (a step the engine runs once per stage or panel is summed without building its
records, where the bytes are linear in a row's).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..parallel.program import PrimitiveCall
from ..parallel.trace import TracePlan, trace_graph, trace_model  # noqa: F401  (the trace lives
# beside the primitives; its names stay importable from here)
from ..distributed import accounting as acct
from ..errors import GridGnnError
from ..graph import gcn_normalize
from ..parallel.blockrow import BlockRowFamily, program as blockrow_program
from ..parallel.plexus import PlexusFamily, program as plexus_program_of
from ..parallel.summa import PANEL_STEPS as SUMMA_PANEL_STEPS, SummaFamily, program as summa_program
from ..partition import RowPartition, block_range, even_bounds
from ..partition.counts import nnz_cols
from ..partition.layout import PLEXUS_AXES, PlexusSchedule, even_range, layer_version, split_classes, vertex_order
from ..partition.permute import block_nnz




#: local work per rank of one training step, in the units the time model prices (:mod:`gridgnn.planner.timing`)
WORK_UNITS = ("edge", "nnz", "flop", "elem", "cast", "launch")


def call_work(call: PrimitiveCall, *, nnz, rows, width, out_width=None, launches=1) -> dict:
    r"""Local work of one primitive call (forward and backward) on one rank, from its local sizes.

    ``edge``: edge × column products (a sparse product touches ``nnz·W``; ``sddmm_add``, ``edge_softmax`` and
    ``row_sum`` ``nnz·K``), ``nnz``: edges visited, whatever the width (the index reads that make a narrow product
    cost more per column), ``flop``: dense multiply-adds (``linear``: ``rows·in·out``, once more per gradient),
    ``elem``: node elements written (``rows·width`` per node-wise primitive, and per ``linear`` output for the
    activation and dropout that follow it), ``cast``: elements a narrowed wire casts (none here: :func:`step_work`
    adds them), ``launch``: local kernel calls (a blocked product calls one per block). Args: ``nnz`` local edges, ``rows`` local rows, ``width`` local columns of the node tensor (the
    heads ``K`` for the score primitives), ``out_width`` a ``linear``'s local output columns, ``launches``
    local kernel calls per product.
    """
    grads = sum(call.grads)
    w = {u: 0.0 for u in WORK_UNITS}
    name = call.name
    if name == "param_grad":  # communication only
        return w
    if name in ("spmm", "spmm_select", "sddmm_dot"):
        per = 2.0 if name == "spmm_select" else 1.0  # the selecting semirings also carry the winners' keys
        passes = per * (1 + grads + (name == "sddmm_dot"))
        w["edge"] = passes * nnz * width
        w["nnz"] = passes * nnz
        w["launch"] = launches * (1 + grads)
        w["elem"] = rows * width
    elif name in ("sddmm_add", "edge_softmax", "row_sum"):
        passes = {"sddmm_add": 3, "edge_softmax": 5, "row_sum": 1}[name]
        w["edge"] = passes * nnz * width
        w["nnz"] = passes * nnz
        w["launch"] = launches * (1 + (grads > 0))
    elif name == "linear":
        w["flop"] = rows * width * out_width * (1 + grads)
        w["elem"] = 2 * rows * out_width
        w["launch"] = 1 + grads
    else:  # add_bias, head_scores, head_mean, normalize_rows, scale: node-wise
        w["elem"] = rows * width * (1 + (grads > 0))
        w["launch"] = 1 + (grads > 0)
    return w


def step_work(calls: list[PrimitiveCall], volume) -> dict:
    """Per-rank local work of one training step: ``{unit: array[P]}`` (:data:`WORK_UNITS`), the sum over the
    traced calls of :meth:`BlockRowVolume.work`, plus the elements a narrowed wire casts (``cast``; counted while
    :func:`step_bytes` prices the same step: call it first)."""
    total = {u: np.zeros(volume.world) for u in WORK_UNITS}
    for call in calls:
        for u, v in volume.work(call).items():
            total[u] += v
    cast = getattr(volume, "cast_elems", None)  # a narrowed wire's casts, counted by step_bytes
    if cast is not None:
        total["cast"] += cast
    return total


class BlockRowVolume:
    r"""Per-rank bytes of each block-row primitive for ``algo`` on ``world`` processes.

    Args:
        algo: ``serial``, ``1d``, ``1d-sa``, ``1.5d``, ``1.5d-sa`` (or another registered block-row algorithm).
        matp: the permuted matrix (``n × n`` CSR, rows = destinations, the partition's labels), or ``None`` where
            ``source`` gives every count (no permuted copy is built).
        rows: the block-row partition; ``replication``: ``c`` of 1.5D.
        source: the in-memory block source whose ``"rc"`` matrix ``matp`` is, when the caller has it: its cached
            block and distinct-column counts are read (the memory model reads the same ones).
    """

    def __init__(self, algo: str, matp: sp.csr_matrix | None, rows: RowPartition, world: int, replication: int = 1,
                 *, source=None):
        from ..distributed.grid import AXES
        from ..parallel.registry import algorithm
        from ..partition.layout import BlockRowSchedule

        self.world = world
        spec = algorithm(algo)
        self.sa = spec.sparsity_aware
        self.c = spec.family.replicas(spec, world, replication)
        self.nb = world // self.c
        self.sizes = rows.sizes().astype(np.float64)
        self.stages = spec.family.stages(spec, world, replication)  # each rank's, as its engine multiplies them
        #: the edges each rank multiplies where its family splits a block's edges by count (``edge``); ``None``:
        #: the nonzeros of its block row in its stages' columns
        self.rank_nnz = spec.family.rank_nnz(spec, source.stored_nnz if matp is None else matp.nnz, world)
        self.axes = {"fetch": (self.nb, self.c), "rep": (self.c, 1)}
        self.block = [r // self.c for r in range(world)]
        counted = source is not None and hasattr(source, "nnz_cols")  # the source's counts, shared and cached
        if not self.sa:
            v = None
        else:
            v = source.nnz_cols("rc", rows.bounds) if counted else nnz_cols(sp.csr_matrix(matp), rows.bounds)
        sizes = tuple(int(s) for s in rows.sizes())
        names = AXES.get(spec.grid, ("p",))
        self.schedules = []  # each rank's schedule: the one its engine runs, on the grid's own axis names
        for r in range(world):
            counts = BlockRowSchedule.sparsity_aware_counts(v, self.block[r], self.stages[r]) if self.sa else ()
            self.schedules.append(BlockRowSchedule(sizes, self.block[r], self.stages[r], names[0], names[1:][0] if
                                                   names[1:] else None, self.c, *counts))
        self.block_nnz = (source.block_counts("rc", rows.bounds, rows.bounds) if counted else
                          block_nnz(matp, None, None, rows.bounds, rows.bounds))
        self._unit: dict = {}
        if self.sa:  # each rank's nonzeros in its own block, of all it multiplies (the local stage's share)
            self.own_share = np.zeros(world)
            for r in range(world):
                i, stages = self.block[r], self.stages[r]
                whole = float(self.block_nnz[i, list(stages)].sum())
                self.own_share[r] = self.block_nnz[i, i] / whole if i in stages and whole else 0.0

    def work(self, call: PrimitiveCall) -> dict:
        """Local work of ``call`` on every rank (:func:`call_work`): block row ``B_i`` against the source blocks of
        its stages (1.5D: its chunk), whole feature rows; an oblivious product runs one kernel per stage."""
        out = {u: np.zeros(self.world) for u in WORK_UNITS}
        for r in range(self.world):
            i, stages = self.block[r], self.stages[r]
            nnz = float(self.rank_nnz[r] if self.rank_nnz is not None else self.block_nnz[i, list(stages)].sum())
            width = call.heads if call.name in ("sddmm_add", "edge_softmax", "row_sum") else call.width
            if call.name == "row_sum":
                width = 1
            launches = len(stages)  # one kernel per stage; sparsity-aware, the own block and the remote halo
            if self.sa:
                launches = int(i in stages) + int(any(q != i for q in stages))
            w = call_work(call, nnz=nnz, rows=float(self.sizes[i]), width=width, out_width=call.out_width,
                          launches=1 if self.nb == 1 else launches)
            for u, v in w.items():
                out[u][r] = v
        return out

    def _add(self, out: dict, key: str, r: int, sent: float, recv: float, calls: int = 1, *, axis: str) -> None:
        """Rank ``r`` sends ``sent`` and receives ``recv`` bytes over ``calls`` calls of collective ``key`` along
        grid axis ``axis`` (``out`` is keyed ``(collective, axis)``)."""
        k = (key, axis)
        if k not in out:
            out[k] = (np.zeros(self.world), np.zeros(self.world), np.zeros(self.world))
        out[k][0][r] += sent
        out[k][1][r] += recv
        out[k][2][r] += calls

    def axis_group(self, axis: str) -> tuple[int, int]:
        """``(members, stride)`` of a grid axis: its size, and the global-rank distance between neighbours along it
        (row-major ranks, as DeviceMesh lays them out)."""
        return self.axes[axis]

    #: node data narrowed on the wire (:meth:`set_wire`): bytes per narrow element (0: none) and the ratio of the
    #: narrow to the training element
    wire_elem: int = 0
    wire_ratio: float = 1.0

    def set_wire(self, elem_bytes: int, wire_bytes: int | None) -> None:
        """Price the node data of the records that are not ``exact`` at ``wire_bytes`` per element (``--comm-dtype``;
        ``None`` or ``elem_bytes``: as held), as :class:`~gridgnn.distributed.comm.Comm` moves them."""
        narrow = wire_bytes is not None and wire_bytes < elem_bytes
        self.wire_elem = int(wire_bytes) if narrow else 0
        self.wire_ratio = wire_bytes / elem_bytes if narrow else 1.0
        self.cast_elems = np.zeros(self.world)  # per rank: narrow elements cast (sent down, received up and summed)

    def _cast(self, r: int, sent: float, recv: float) -> None:
        """Rank ``r`` casts what it sends narrowed and what it receives back (a sum adds it too): local work the
        time model prices as written elements (:func:`step_work`)."""
        self.cast_elems[r] += (sent + recv) / self.wire_elem

    def _price(self, t, row_bytes: float, exact: bool = False) -> tuple[float, float]:
        """``(sent, recv)`` of record ``t`` for rows of ``row_bytes`` bytes as held (narrowed unless ``exact``)."""
        if self.wire_elem and not (exact or t.exact):
            return t.bytes(row_bytes * self.wire_ratio, self.wire_elem)
        return t.bytes(row_bytes)

    def _run(self, out: dict, r: int, transfers, row_bytes: float, *, exact: bool = False) -> None:
        """Rank ``r``'s bytes of ``transfers`` (its schedule's records), one call each; ``exact``: data the wire
        never narrows (a ``max``/``min`` reduction, int64 keys)."""
        axis_keys, world = self.AXIS_KEYS, self.world
        for t in transfers:
            if not t.moves:
                continue
            narrow = self.wire_elem if not (exact or t.exact) else 0
            sent, recv = self._price(t, row_bytes, exact)
            k = (t.key, axis_keys[t.axis])  # (as _add, inlined: a plan at P = 1024 runs this millions of times)
            acc = out.get(k)
            if acc is None:
                acc = out[k] = (np.zeros(world), np.zeros(world), np.zeros(world))
            acc[0][r] += sent
            acc[1][r] += recv
            acc[2][r] += t.calls(narrow)
            if narrow:
                self._cast(r, sent, recv)

    def _per_row_byte(self, which: str) -> list[dict]:
        """Per rank, ``{(collective, axis): [sent, recv, calls]}`` of its schedule's ``which`` records (``fetch``,
        ``push``, ``rep``) for one-byte rows, summed once: every byte is linear in the row's bytes."""
        if which not in self._unit:
            per = []
            for sched in self.schedules:
                acc: dict = {}
                if which == "rep":
                    for t in sched.row_all():
                        if t.moves:
                            acc[(t.key, self.AXIS_KEYS[t.axis])] = [*t.bytes(1.0), 1]
                else:
                    summed = sched.fetch_bytes(which == "push")
                    if summed is not None:
                        key, axis, sent, recv, calls = summed
                        acc[(key, self.AXIS_KEYS[axis])] = [sent, recv, calls]
                per.append(acc)
            self._unit[which] = per
        return self._unit[which]

    def _scaled(self, out: dict, which: str, row_bytes: float, narrow: bool = False) -> None:
        for r, acc in enumerate(self._per_row_byte(which)):
            for (key, axis), (sent, recv, calls) in acc.items():
                self._add(out, key, r, sent * row_bytes, recv * row_bytes, calls, axis=axis)
                if narrow:
                    self._cast(r, sent * row_bytes, recv * row_bytes)

    #: sum each rank's stage records without building them (:meth:`BlockRowSchedule.fetch_bytes`); ``False``: run
    #: them one by one (the plain path, which the tests compare with)
    batched: bool = True

    def fetch(self, out: dict, row_bytes: float, *, push: bool = False) -> None:
        """A fetch of ``row_bytes``-byte rows (``push``: its adjoint), as each rank's schedule runs it (node data:
        narrowed on the wire, where a push's reduce sums padded pieces)."""
        if not self.batched or self.wire_elem and push and not self.sa:  # a narrowed reduce: padded pieces
            for r, sched in enumerate(self.schedules):
                self._run(out, r, sched.fetch(push), row_bytes)
        elif self.wire_elem:
            self._scaled(out, "push" if push else "fetch", row_bytes * self.wire_ratio, narrow=True)
        else:
            self._scaled(out, "push" if push else "fetch", row_bytes)

    def rep(self, out: dict, row_bytes: float, *, exact: bool = False) -> None:
        """The all-reduce of a row-block result along ``"rep"``, as each rank's schedule runs it (``exact``: a
        ``max``/``min`` or int64 keys, never narrowed)."""
        if self.wire_elem and not exact:  # padded pieces: not linear in the row's bytes
            for r, sched in enumerate(self.schedules):
                self._run(out, r, sched.row_all(), row_bytes)
        else:
            self._scaled(out, "rep", row_bytes)

    #: the grid's axis names → this model's axis keys
    AXIS_KEYS = {"p": "fetch", "row": "fetch", "rep": "rep"}

    def param_grad(self, out: dict, call: PrimitiveCall, elem_bytes: int) -> None:
        """The backward all-reduce, one ring per axis of ``call.axes``, of a parameter's gradient that is partial over
        them (:attr:`gridgnn.parallel.trace.Trace.raw_grad_axes`; ``call.width`` elements)."""
        for axis in call.axes:
            key = self.AXIS_KEYS.get(axis, axis)
            g = self.axes[key][0]
            if g > 1:
                for r in range(self.world):
                    self._add(out, "allreduce", r, *acct.allreduce(g, call.width * elem_bytes), axis=key)

    def primitive(self, call: PrimitiveCall, elem_bytes: int) -> tuple[dict, dict]:
        """``(forward, backward)`` volumes of one primitive call: ``{(collective, axis): (sent[P], recv[P],
        calls[P])}`` — the steps of its program (:func:`gridgnn.parallel.blockrow.program`, the list its engine
        runs; the steps are the same on every rank), each priced with every rank's own records."""
        fwd, bwd = {}, {}
        if call.name == "param_grad":
            self.param_grad(bwd, call, elem_bytes)
            return fwd, bwd
        out = {"fwd": fwd, "bwd": bwd}
        for st in blockrow_program(call, self.schedules[0], sparsity_aware=self.sa).steps:
            if st.name == "row_all":
                self.rep(out[st.phase], st.row_bytes(elem_bytes), exact=st.exact)
            else:
                self.fetch(out[st.phase], st.row_bytes(elem_bytes), push=st.name == "push")
        return fwd, bwd

    def loss(self, out: dict, elem_bytes: int) -> None:
        """The loss's own collectives (none: the logits hold every class column)."""

    def grad(self, out: dict, nbytes: float, narrow: tuple | None = None) -> None:
        """Ring all-reduce of a flat gradient bucket over the block axis (replicas along ``"rep"`` agree);
        ``narrow``: ``(elements, wire bytes)``, narrowed (:func:`~gridgnn.distributed.accounting.grad_allreduce`)."""
        if self.nb > 1:
            for r in range(self.world):
                sent, recv, calls = acct.grad_allreduce(self.nb, nbytes, narrow)
                self._add(out, "allreduce", r, sent, recv, calls, axis="fetch")
                self._grad_cast(r, sent, recv, narrow)

    def _grad_cast(self, r: int, sent: float, recv: float, narrow) -> None:
        """A narrowed gradient bucket's casts, local work as for node data (:meth:`_cast`)."""
        if narrow is not None:
            self.cast_elems[r] += (sent + recv) / narrow[1]


class SummaVolume(BlockRowVolume):
    r"""Per-rank bytes of each SUMMA primitive (``2d``: ``shape = (pr, pc)``; ``3d``: ``(x, y, z)``) from the panel
    structure of the source's matrix versions (:mod:`gridgnn.parallel.summa`).

    Per primitive and rank ``(i, j, k)`` (``w`` bytes per element, panels ``p`` of fiber layer ``k``):
    ``spmm`` — per panel a ``bcast_sparse`` of the index and value arrays (``b(|R_i|+1+nnz) + K w·nnz``, ``b``: 4
    bytes per index below 2³¹, the owner column sends) and a ``bcast`` of ``|p|·|C_j|`` from the owner row; 3D reduce-scatter of ``|R_i|·|C_j|``
    over the fiber; all-gather of the column blocks (padded to the widest, ``(pc−1)·max|C|·|B(i,k)|``).
    Backward: fiber all-gather of ``dY``, per panel ``bcast_sparse`` again, ``∂X``: a ``reduce`` of ``|p|·|C_j|``
    onto the owner row and the column all-gather; ``∂e``: the ``bcast`` of ``X[p, C_j]`` again and a ``reduce`` of
    the ``nnz·K`` partial dot products onto the owner column. ``sddmm_add``/``sddmm_dot`` (width ``W``):
    fiber all-gather of the destination rows, per panel of the rank's column a ``bcast`` of ``|p|·W``; backward
    a ``reduce`` of ``|p|·W`` per panel, a fiber reduce-scatter of ``|R_i|·W`` and two all-reduces of
    ``|B(i,k)|·W`` along the columns. ``edge_softmax``: all-reduces of ``|R_i|·K`` along the columns, then the
    fiber (max and sum forward, one sum backward).
    """

    def __init__(self, source, shape: tuple[int, ...]):
        from ..distributed.grid import coords_of
        from ..partition.layout import SummaGeometry as Geometry

        self.shape = tuple(shape)
        self.pr, self.pc = shape[0], shape[1]
        self.z = shape[2] if len(shape) == 3 else 1
        self.world = self.pr * self.pc * self.z
        self.geo = Geometry(source.n, self.pr, self.pc, self.z)
        self.source = source
        self.coords = [(coords_of(r, self.shape) + (0,))[:3] for r in range(self.world)]
        self.axes = {"row": (self.pr, self.pc * self.z), "col": (self.pc, self.z), "fiber": (self.z, 1)}
        self.names = ("row", "col", None) if len(self.shape) == 2 else ("x", "y", "z")  # the engine's mesh axes
        self._nnz: dict = {}

    def version(self, layer: int) -> str:
        return layer_version(layer, self.source.double)

    def panel_nnz(self, version: str, i: int, panel) -> int:
        """Nonzeros of ``M[R_i, panel]`` in matrix ``version`` (``panel``: one of this geometry's, found by its first
        column): the panels of all fiber layers tile the columns, so one count of the row blocks ``R_i`` × every
        panel (the source's ``block_counts``: an :class:`~gridgnn.parallel.source.InMemorySource`, what the
        planner and the tests hand in) serves them all."""
        column, counts = self._panel_counts(version)
        return int(counts[i, column[int(panel[0])]])

    def _panel_counts(self, version: str) -> tuple[dict, np.ndarray]:
        """``(column of each panel's first vertex, counts[R_i, panel])`` of matrix ``version`` (cached)."""
        key = ("panels", version)
        if key not in self._nnz:
            starts = sorted({int(p[0]) for layer in self.geo.panels for p in layer})
            cuts = np.array(starts + [self.geo.n], dtype=np.int64)
            counts = self.source.block_counts(version, self.geo.fine[::self.z], cuts)
            self._nnz[key] = ({v: t for t, v in enumerate(starts)}, counts)
        return self._nnz[key]

    def _ring(self, out, r, axis, m, tag="allreduce"):
        g = self.axes[axis][0]
        if g > 1:
            self._add(out, tag, r, *acct.allreduce(g, m), axis=axis)

    def schedule(self, r: int, version: str):
        """Rank ``r``'s :class:`~gridgnn.partition.layout.SummaSchedule` of matrix ``version`` — the one its engine
        runs, built here from the source's panels alone."""
        from ..partition.layout import SummaSchedule

        key = ("schedule", r, version)
        if key not in self._nnz:
            i, j, k = self.coords[r]
            self._nnz[key] = SummaSchedule.of(self.geo, i, j, k, self.names, self.layer_nnz(version, i, k))
        return self._nnz[key]

    def layer_nnz(self, version: str, i: int, k: int) -> tuple:
        """Nonzeros of every panel of fiber layer ``k`` in the rows ``R_i`` (shared by the ranks of row ``i``)."""
        key = ("layer", version, i, k)
        if key not in self._nnz:
            column, counts = self._panel_counts(version)
            starts = [column[int(p[0])] for p in self.geo.panels[k]]
            self._nnz[key] = tuple(counts[i, starts].tolist())
        return self._nnz[key]

    #: sum each rank's panel records without building them (:meth:`SummaSchedule.panel_bytes`); ``False``: run
    #: them one by one (the plain path, which the tests compare with)
    batched: bool = True

    def _panels(self, out: dict, r: int, s, which: str, row_bytes: float, *, push: bool = False) -> None:
        """Rank ``r``'s ``which`` records (:meth:`SummaSchedule.panel_bytes`) of every panel, for ``row_bytes``-byte
        rows; node data on a narrowed wire (a reduce of padded pieces is not linear in the bytes) record by
        record."""
        narrow = self.wire_elem and (push or which == "rows_of")
        if not self.batched or narrow:
            make = {"pattern": lambda p: s.pattern(p), "edges": lambda p: s.edges(p, push),
                    "rows_of": lambda p: s.rows_of(p, push)}[which]
            self._run(out, r, [make(p) for p in s.panels()], row_bytes)
            return
        summed = s.panel_bytes(which, push)
        if summed is not None:
            key, axis, sent, recv, calls = summed
            self._add(out, key, r, sent * row_bytes, recv * row_bytes, calls, axis=self.AXIS_KEYS[axis])

    AXIS_KEYS = {"row": "row", "col": "col", "x": "row", "y": "col", "z": "fiber"}

    def primitive(self, call: PrimitiveCall, elem_bytes: int) -> tuple[dict, dict]:
        """The records of ``call``'s program on each rank (:func:`gridgnn.parallel.summa.program`, the list its
        engine runs); a panel step is summed without building its records where it can be
        (:meth:`_panels`)."""
        fwd, bwd = {}, {}
        if call.name == "param_grad":
            self.param_grad(bwd, call, elem_bytes)
            return fwd, bwd
        out = {"fwd": fwd, "bwd": bwd}
        version = self.version(call.layer)
        for r in range(self.world):
            s = self.schedule(r, version)
            for st in summa_program(call, s).steps:
                panel = SUMMA_PANEL_STEPS.get(st.name)
                if panel is not None:
                    self._panels(out[st.phase], r, s, panel[0], st.row_bytes(elem_bytes), push=panel[1])
                else:
                    self._run(out[st.phase], r, st.records, st.row_bytes(elem_bytes), exact=st.exact)
        return fwd, bwd

    def work(self, call: PrimitiveCall) -> dict:
        """Local work of ``call`` on every rank ``(i, j, k)`` (:func:`call_work`): a product runs over the panels of
        fiber layer ``k`` in row block ``R_i`` (``spmm``: on the column block ``C_j``; the scores: the panels column
        ``j`` owns, on whole rows), one kernel per panel, and a pattern built from every panel received (forward,
        and again backward); node-wise work on the rows ``B(i, k)``, whole rows."""
        out = {u: np.zeros(self.world) for u in WORK_UNITS}
        version = self.version(call.layer)
        for r, (i, j, k) in enumerate(self.coords):
            b0, b1 = self.geo.block(i, k)
            every, own, owned = self._panel_work(version, i, j, k)
            if call.name in ("spmm", "spmm_select"):
                c0, c1 = even_range(call.width, self.pc, j)
                nnz, width, launches = every, c1 - c0, len(self.geo.panels[k])
            elif call.name in ("sddmm_add", "sddmm_dot", "edge_softmax", "row_sum"):
                nnz = own
                width = call.width if call.name == "sddmm_dot" else (1 if call.name == "row_sum" else call.heads)
                launches = max(1, owned)
            else:
                nnz, width, launches = 0, call.width, 1
            w = call_work(call, nnz=float(nnz), rows=float(b1 - b0), width=width, out_width=call.out_width,
                          launches=launches)
            if call.name in ("spmm", "spmm_select") and self.pc > 1:  # received panels: patterns built per call
                w["nnz"] += (every - own) * (1 + any(call.grads))
            for u, v in w.items():
                out[u][r] = v
        return out

    def _panel_work(self, version: str, i: int, j: int, k: int) -> tuple[float, float, int]:
        """``(nonzeros of every panel, of the panels column j owns, how many it owns)`` of fiber layer ``k`` in
        the rows ``R_i`` (cached: every call asks)."""
        key = ("work", version, i, j, k)
        if key not in self._nnz:
            counts = np.asarray(self.layer_nnz(version, i, k), np.float64)
            own = self.geo.panel_arrays(k)[2] == j
            self._nnz[key] = (float(counts.sum()), float(counts[own].sum()), int(own.sum()))
        return self._nnz[key]

    def grad(self, out: dict, nbytes: float, narrow: tuple | None = None) -> None:
        """The weight gradients are summed over the process rows, then the fiber (replicas along the columns)."""
        for r in range(self.world):
            for axis in ("row", "fiber"):
                g = self.axes[axis][0]
                if g > 1:
                    sent, recv, calls = acct.grad_allreduce(g, nbytes, narrow)
                    self._add(out, "allreduce", r, sent, recv, calls, axis=axis)
                    self._grad_cast(r, sent, recv, narrow)


#: the primitives whose Plexus records read the destination gather's per-member row counts
_PLEXUS_READS_DST = ("sddmm_add", "sddmm_dot", "at_destinations")


class PlexusVolume(BlockRowVolume):
    r"""Per-rank bytes of each Plexus primitive on the grid ``shape = (Gx, Gy, Gz)`` for a model's traced ``calls``
    (they fix the layouts, :func:`~gridgnn.partition.layout.plexus_layouts`), from the source's shards alone: the
    records of each rank's :class:`~gridgnn.partition.layout.PlexusSchedule` that its engine runs, summed.

    Per call and rank (``e`` bytes per element; node tensor ``(r, q)``, third axis ``t``; ``n_a = |V^a|``,
    ``|C^a(f)|`` = the rank's column block of width ``f`` along ``a``; ring all-reduce ``2(g−1)/g`` each way):

    ``linear`` (``f_in → f_out``): all-gather of the weight parts over ``r`` (padded: ``(G_r−1)·max part·|C^t(f_out)|``),
    all-reduce of ``n_r·|C^t(f_out)|`` over ``q``; backward reduce-scatter of the ``|C^q(f_in)| × |C^t(f_out)|``
    block over ``r`` (actual parts), [``∂X``] all-reduce of ``n_r·|C^q(f_in)|`` over ``t``.
    ``spmm`` (width ``W``, ``K`` value heads): all-reduce of ``n_t·|C^q(W)|`` over ``r``; backward [``∂e``]
    all-reduce of ``nnz·K`` over ``q``, [``∂X``] of ``n_r·|C^q(W)|`` over ``t``. The first primitive of layer 0
    also all-gathers the input parts over the third axis. ``sddmm_add`` (``K`` columns) / ``sddmm_dot`` (width
    ``W``, ``K`` heads; columns ``c = K`` or ``|C^q(W)|``): all-gather of the destination rows over ``r`` (the
    members' counts, padded), [dot: all-reduce of ``nnz·K`` over ``q``]; backward their reduce-scatter over
    ``r`` and two all-reduces of ``n_r·c`` over ``t``. ``edge_softmax``: two all-reduces of ``n_t·K`` over ``r``,
    one backward. ``add_bias``: backward all-reduce of the bias block over the output's row axis.
    ``head_scores``: all-reduce of ``n_r·K`` over the columns' axis; backward of the ``K·F`` attention vector
    over rows and columns. ``head_mean``: all-reduce of ``n_r·F`` over the columns' axis, both ways.
    ``normalize_rows`` (on the graph's ``(r, q)`` tensor): all-reduce of ``n_r`` squared norms over ``q``, and
    of ``n_r`` row sums backward. ``scale``: backward all-reduce of the scalar's gradient over ``r``, then ``q``. The
    sharded cross-entropy all-reduces ``m`` and ``2m`` (``m`` labelled rows: ``train_rows(rank)``, or counted from
    ``labelled``, a mask over the original vertex ids) over the class axis.
    """

    def __init__(self, source, shape: tuple[int, int, int], calls: list, *, train_rows=None, labelled=None,
                 block_rows: int = 0, scatter: bool = False):
        from ..distributed.grid import coords_of
        from ..partition.layout import plexus_layouts, plexus_program

        self.source, self.shape = source, tuple(shape)
        self.world = int(np.prod(shape))
        self.g = dict(zip(PLEXUS_AXES, shape))
        self.vb = {a: even_bounds(source.n, self.g[a]) for a in PLEXUS_AXES}
        self.coords = [dict(zip(PLEXUS_AXES, coords_of(r, self.shape))) for r in range(self.world)]
        self.axes = {a: (self.g[a], int(np.prod(self.shape[t + 1:]))) for t, a in enumerate(PLEXUS_AXES)}
        L = 1 + max(c.layer for c in calls)
        ops = [plexus_program([c.name for c in calls if c.layer == l]) for l in range(L)]
        self.layouts = plexus_layouts(ops, scatter=scatter)
        self.scatter = bool(scatter)
        self.first = (ops[0][0] if ops[0] else None)
        if train_rows is None and labelled is not None:  # labelled training vertices, original ids
            out = self.layouts[-1].output
            order = vertex_order(source, out.order)
            lab = np.asarray(labelled, bool)[order]
            counts = []
            for me in self.coords:
                r0, r1 = block_range(self.vb[out.rows], me[out.rows])
                if out.split:  # the rank's part of the block (plexus-rs)
                    r0, r1 = np.array(block_range(even_bounds(r1 - r0, self.g[out.third]), me[out.third])) + r0
                counts.append(int(lab[r0:r1].sum()))
            train_rows = counts.__getitem__
        self.train_rows = train_rows
        self.block_rows = int(block_rows)
        self._cache: dict = {}

    def _ring(self, out, r, axis, m, tag="allreduce", calls: int = 1):
        g = self.g[axis]
        if g > 1:
            self._add(out, tag, r, *acct.allreduce(g, m), calls, axis=axis)

    def _nnz(self, lay, me) -> int:
        version = lay.version if self.source.double else "rc"
        key = ("nnz", lay.third, lay.rows, version, me[lay.third], me[lay.rows])
        if key not in self._cache:  # the shard of rows (third axis) × columns (rows axis) of the layout
            counts = self.source.block_counts(version, self.vb[lay.third], self.vb[lay.rows])
            self._cache[key] = int(counts[me[lay.third], me[lay.rows]])
        return self._cache[key]

    def _dst_counts(self, lay, me) -> list[int]:
        """Rows each member along ``r`` contributes to this rank's destination gather (the engine's
        :func:`~gridgnn.partition.layout.plexus_destinations`)."""
        from ..partition.layout import plexus_destinations

        key = ("dst", lay.order, lay.third, lay.rows, me[lay.third])
        if key not in self._cache:
            take, _ = plexus_destinations(self.source, lay, block_range(self.vb[lay.third], me[lay.third]),
                                          self.vb[lay.rows])
            self._cache[key] = [int(t.size) for t in take]
        return self._cache[key]

    def schedule(self, r: int, layer: int):
        """Rank ``r``'s :class:`~gridgnn.partition.layout.PlexusSchedule` of layer ``layer`` — the one its engine
        runs, built here from the source's shards alone."""
        return self.schedules(layer)[r]

    def schedules(self, layer: int) -> list:
        """Every rank's :meth:`schedule` of layer ``layer``, built once (a step asks them for each primitive of
        the layer)."""
        key = ("schedules", layer)
        if key not in self._cache:
            lay = self.layouts[layer]
            self._cache[key] = [PlexusSchedule(self.source.n, self.shape, tuple(me[a] for a in PLEXUS_AXES), lay,
                                               self._nnz(lay.graph, me) if lay.graph is not None else 0,
                                               self.block_rows) for me in self.coords]
        return self._cache[key]

    AXIS_KEYS = {"x": "x", "y": "y", "z": "z"}  # the grid's own axis names

    #: price the program once for every group of ranks whose records are the same (:meth:`_signature`); ``False``:
    #: every rank's program (the plain path, which the tests compare with)
    batched: bool = True

    def _signature(self, call: PrimitiveCall):
        r"""``signature(me, schedule)``: what a rank's records of ``call`` depend on, or ``None`` (each rank its
        own). A record's rows are even splits :math:`\lfloor X/g \rfloor + [c < X \bmod g]` of the vertex count,
        the call's widths and those split once more along another axis; a coordinate enters only through
        :math:`[c < X \bmod g]` (:func:`~gridgnn.partition.layout.split_classes`: ring all-reduces and padded
        all-gathers read sizes alone, a reduce-scatter its own piece), the edge count only where a primitive
        all-reduces edge values, and the destination gather its members' row counts (those ranks keep their
        own)."""
        name = call.name
        if not self.batched or name in _PLEXUS_READS_DST:
            return None
        base = {self.source.n, call.width, call.out_width, call.heads, 1}
        if call.heads:
            base.add(call.width // call.heads)
        cls = split_classes(self.g, base)
        cx, cy, cz = (cls[a] for a in PLEXUS_AXES)
        reads_nnz = name == "sddmm_dot" or name in ("spmm", "spmm_select") and call.grads[0]
        return lambda me, s: (cx[me["x"]], cy[me["y"]], cz[me["z"]], s.nnz if reads_nnz else -1)

    def primitive(self, call: PrimitiveCall, elem_bytes: int) -> tuple[dict, dict]:
        """The records of ``call``'s program on each rank (:func:`gridgnn.parallel.plexus.program`, the list its
        engine runs), priced per row (``elem_bytes`` bytes per element): once per group of ranks of one
        :meth:`_signature`, added to each of them."""
        fwd, bwd = {}, {}
        if call.name == "param_grad":
            self.param_grad(bwd, call, elem_bytes)
            return fwd, bwd
        out = {"fwd": fwd, "bwd": bwd}
        lay = self.layouts[call.layer].graph
        run, first, dst = self._run, self.first, self._dst_counts
        scheds = self.schedules(call.layer)
        groups: dict = {}
        signature = self._signature(call)
        for r, (me, s) in enumerate(zip(self.coords, scheds)):
            groups.setdefault(("rank", r) if signature is None else signature(me, s), []).append(r)
        for ranks in groups.values():
            r0 = ranks[0]
            me = self.coords[r0]
            steps = plexus_program_of(call, scheds[r0], first=first, dst_counts=lambda: dst(lay, me)).steps
            if len(ranks) == 1:
                for st in steps:
                    run(out[st.phase], r0, st.records, st.row_bytes(elem_bytes), exact=st.exact)
                continue
            one = {"fwd": {}, "bwd": {}}  # the first rank's records, then added to every rank of the group
            cast = self.cast_elems[r0] if self.wire_elem else 0.0
            for st in steps:
                run(one[st.phase], r0, st.records, st.row_bytes(elem_bytes), exact=st.exact)
            idx = np.asarray(ranks)
            for phase, got in one.items():
                for k, arrays in got.items():
                    acc = out[phase].get(k)
                    if acc is None:
                        acc = out[phase][k] = (np.zeros(self.world), np.zeros(self.world), np.zeros(self.world))
                    for a, b in zip(acc, arrays):
                        a[idx] += b[r0]
            if self.wire_elem:
                self.cast_elems[idx[1:]] += self.cast_elems[r0] - cast
        return fwd, bwd

    def work(self, call: PrimitiveCall) -> dict:
        """Local work of ``call`` on every rank (:func:`call_work`): the rank's shard of the layer's adjacency
        (``V^t × V^r`` of the graph layout) on its column block ``C^q``; a ``linear`` multiplies its ``n_r ×
        |C^q(in)|`` block by the ``|C^q(in)| × |C^t(out)|`` weight block; node-wise work on the ``(r, q)`` block of
        the tensor it reads (``add_bias``, ``head_mean``: the layer's output; ``head_scores``: the ``linear``'s).
        Every rank's sizes are read from its schedule and priced at once (arrays over the ranks)."""
        L = self.layouts[call.layer]
        scheds = self.schedules(call.layer)

        def each(size) -> np.ndarray:
            return np.array([size(s) for s in scheds], dtype=np.int64)

        node_wise = {"add_bias": L.output, "head_mean": L.output,
                     "head_scores": L.linear.after_linear() if L.linear is not None else L.output}
        lay = node_wise.get(call.name, L.graph if L.graph is not None else L.output)
        if call.name == "linear" and self.scatter:  # plexus-rs: the row part, every output column
            w = call_work(call, nnz=0.0, rows=each(lambda s: s.part_rows(L.linear)).astype(np.float64),
                          width=each(lambda s: s.ncols(call.width, L.linear.cols)), out_width=call.out_width)
        elif call.name == "linear":
            lay = L.linear
            w = call_work(call, nnz=0.0, rows=each(lambda s: s.nrows(lay.rows)).astype(np.float64),
                          width=each(lambda s: s.ncols(call.width, lay.cols)),
                          out_width=each(lambda s: s.ncols(call.out_width, lay.third)))
        else:
            nnz, launches = 0.0, 1
            if call.name in ("spmm", "spmm_select", "sddmm_dot"):
                nnz, width = each(lambda s: s.nnz).astype(np.float64), each(lambda s: s.ncols(call.width, lay.cols))
                if call.name != "sddmm_dot":
                    launches = each(lambda s: len(s.aggregate()))
            elif call.name in ("sddmm_add", "edge_softmax", "row_sum"):
                nnz, width = each(lambda s: s.nnz).astype(np.float64), (1 if call.name == "row_sum" else call.heads)
            else:
                width = each(lambda s: s.ncols(call.width, lay.cols))
            if self.scatter and call.name == "add_bias":
                rows = each(lambda s: s.part_rows(lay))
            else:
                rows = each(lambda s: s.nrows(lay.rows))
            w = call_work(call, nnz=nnz, rows=rows.astype(np.float64), width=width, launches=launches)
        out = {u: np.zeros(self.world) for u in WORK_UNITS}
        for u, v in w.items():
            out[u][:] = v
        return out

    def loss(self, out: dict, elem_bytes: int) -> None:
        """Sharded cross-entropy over the class axis: all-reduces of ``m`` (max) and ``2m`` (sums) per rank."""
        axis = self.layouts[-1].output.cols
        for r in range(self.world):
            m = self.train_rows(r) if self.train_rows is not None else 0
            for rows in (m, 2 * m):
                self._ring(out, r, axis, rows * elem_bytes)

    def grad(self, out: dict, nbytes: float, narrow: tuple | None = None) -> None:
        """No trainer all-reduce: the primitives reduce their own parameter gradients."""


#: the byte and work model of each layout family class, looked up along the family's class hierarchy (the nearest
#: registered class answers: ``edge`` subclasses the block-row family and is priced by its model, through the
#: stages and edges it states); a family of another layout adds its own with :func:`register_volume_model`
VOLUME_MODELS: dict = {}


def register_volume_model(family_class, build):
    """Price the algorithms of ``family_class`` (and of its subclasses) with ``build(spec, *, graph, source, rows,
    shape, world, replication, calls, block_rows)``, which returns a :class:`BlockRowVolume`-like model."""
    VOLUME_MODELS[family_class] = build
    return build


def volume_model(spec, *, graph, source, rows, shape, world: int, replication: int, calls, block_rows: int = 0):
    r"""The byte and work model of one step of ``spec`` (an :class:`~gridgnn.parallel.family.Algorithm`): the records
    its family's engine runs, per rank (:data:`VOLUME_MODELS`: :class:`BlockRowVolume`, :class:`SummaVolume`,
    :class:`PlexusVolume`). ``rows`` (block-row) or ``source`` (the others) is the layout; ``calls`` the traced
    model (Plexus lays its tensors out after them)."""
    family = spec.family
    for cls in type(family).__mro__:
        if cls in VOLUME_MODELS:
            return VOLUME_MODELS[cls](spec, graph=graph, source=source, rows=rows, world=world,
                                      shape=None if shape is None else tuple(shape),
                                      replication=replication, calls=calls, block_rows=block_rows)
    raise GridGnnError(f"{spec.name}: the planner has no byte model of the {family.name} family (a family of "
                       "another layout registers one: gridgnn.planner.primitives.register_volume_model)")


def _block_row_volume(spec, *, graph, source, rows, world, replication, **_):
    counted = source is not None and hasattr(source, "nnz_cols")  # its cached counts: no permuted copy needed
    matp = None if counted else rows.permute_matrix(gcn_normalize(graph)) if source is None else source.matrix("rc")
    return BlockRowVolume(spec.name, matp, rows, world, replication, source=source)


def _plexus_volume(spec, *, graph, source, shape, calls, block_rows, **_):
    labelled = graph.train_mask & (graph.y >= 0)
    return PlexusVolume(source, shape, calls, labelled=labelled, block_rows=block_rows, scatter=spec.scatter)


register_volume_model(BlockRowFamily, _block_row_volume)
register_volume_model(SummaFamily, lambda spec, *, source, shape, **_: SummaVolume(source, shape))
register_volume_model(PlexusFamily, _plexus_volume)


def step_bytes(calls: list[PrimitiveCall], volume: BlockRowVolume, nparams, elem_bytes: int,
               detail: dict | None = None, wire_bytes: int | None = None, loss: bool = True,
               grad_bucket_bytes: int | None = None, grad_wire_bytes: int | None = None) -> dict:
    r"""Per-rank bytes and messages of one training step, keyed ``"<phase>.<collective>"`` →
    ``(sent[P], recv[P], calls[P])``: the sum of the traced primitives' forward and backward volumes plus the
    ring all-reduces of the parameter gradients over the block axis, one per bucket of ``grad_bucket_bytes``
    (:func:`~gridgnn.distributed.accounting.grad_buckets`, each carrying its gradients and a count per tensor;
    ``nparams``: each trained tensor's elements in model order, or their total, priced as one tensor; none: no
    all-reduce). ``detail``, when given, is filled
    with the same volumes split by grid axis, keyed ``(phase, collective, axis)`` (the time model prices each
    axis by its group size and placement, :meth:`BlockRowVolume.axis_group`). ``wire_bytes``: node data crosses
    the wire narrowed to that many bytes per element (``--comm-dtype``; the weights' gradients and the loss do not);
    ``grad_wire_bytes``: the gradient buckets do (``--grad-dtype``)."""
    total: dict = {}
    volume.set_wire(elem_bytes, wire_bytes)

    def add(phase: str, vols: dict) -> None:
        for (key, axis), v in vols.items():
            for k, acc_dict in ((f"{phase}.{key}", total), ((phase, key, axis), detail)):
                if acc_dict is None:
                    continue
                if k not in acc_dict:
                    acc_dict[k] = tuple(np.zeros(volume.world) for _ in range(3))
                for acc, part in zip(acc_dict[k], v):
                    acc += part

    for call in calls:
        fwd, bwd = volume.primitive(call, elem_bytes)
        if not any(call.grads):  # autograd runs no backward of a primitive whose inputs need no gradient
            bwd = {}
        add("fwd", fwd)
        add("bwd", bwd)
    if loss:  # node classification's sharded cross-entropy (link prediction has none)
        losses: dict = {}
        volume.loss(losses, elem_bytes)
        add("fwd", losses)
    grad: dict = {}
    sizes = ([int(nparams)] if nparams else []) if isinstance(nparams, (int, np.integer)) else [int(k) for k in nparams]
    narrow = grad_wire_bytes is not None and grad_wire_bytes < elem_bytes
    for bucket in acct.grad_buckets([k * elem_bytes for k in sizes], grad_bucket_bytes or acct.GRAD_BUCKET_BYTES):
        elements = acct.grad_bucket_elements([sizes[k] for k in bucket])  # one all-reduce per gradient bucket
        volume.grad(grad, elements * elem_bytes, (elements, grad_wire_bytes) if narrow else None)
    add("grad", grad)
    return total
