r"""Vertex partitions as explicit data: who owns which block of rows.

A :class:`RowPartition` relabels vertices so that every part is contiguous: ``perm[new] = old`` and
``inv[old] = new``; part ``k`` owns new ids ``bounds[k] : bounds[k+1]`` (parts may differ in size, may be
empty only where the caller allows it). The permuted matrix is :math:`M' = P M P^\mathsf{T}` with
:math:`M'_{ab} = M_{\mathrm{perm}[a], \mathrm{perm}[b]}`.

The layout rules the algorithms, the byte and memory models and the trainer share are written here once:
the 1.5D stage chunks (:func:`stage_chunks`), the SUMMA vertex blocks and panels (:class:`SummaGeometry`) and
the Plexus node layouts (:func:`plexus_layouts`); the block counts per algorithm are in
:mod:`gridgnn.parallel.registry`. Each plan documents, per tensor, the rows/columns it holds and the axes it is
sharded, replicated or partial along (module docstrings of ``parallel/blockrow.py``, ``summa.py``,
``plexus.py``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property, lru_cache

import numpy as np
import scipy.sparse as sp
import torch

from ..distributed.accounting import Transfer
from ..errors import GridGnnError
from ..ops.pattern import index_bytes


#: The row partitions that only order the vertices, then cut them into equal blocks (``--partition``'s built-in
#: methods, no graph partitioner): the choices that still order a layout of one row block
BUILTIN_PARTITIONS = ("random", "single-perm", "identity")


@dataclass(frozen=True)
class RowPartition:
    """Contiguous row blocks after relabeling.

    Args:
        perm: ``int64[n]``, ``perm[new] = old``.
        bounds: ``int64[k+1]``, block ``i`` is new ids ``bounds[i]:bounds[i+1]``.
        method: how the partition was made (for reports).
    """

    perm: np.ndarray
    bounds: np.ndarray
    method: str = "identity"

    @property
    def n(self) -> int:
        return int(self.perm.size)

    @property
    def parts(self) -> int:
        return int(self.bounds.size - 1)

    def sizes(self) -> np.ndarray:
        return np.diff(self.bounds)

    def block(self, k: int) -> slice:
        return slice(int(self.bounds[k]), int(self.bounds[k + 1]))

    def part_of_old(self) -> np.ndarray:
        """Part id of every vertex in original order (the METIS partition-file format)."""
        part_new = np.repeat(np.arange(self.parts, dtype=np.int64), self.sizes())
        out = np.empty(self.n, dtype=np.int64)
        out[self.perm] = part_new
        return out

    def permute_matrix(self, mat: sp.csr_matrix) -> sp.csr_matrix:
        """:math:`P M P^\\mathsf{T}` in the new labels (CSR, sorted indices)."""
        out = sp.csr_matrix(mat)[self.perm][:, self.perm].tocsr()
        out.sort_indices()
        return out

    # ------------------------------------------------------------------ constructors
    @classmethod
    def identity(cls, n: int, parts: int) -> "RowPartition":
        return cls(np.arange(n, dtype=np.int64), even_bounds(n, parts), "identity")

    @classmethod
    def random(cls, n: int, parts: int, seed: int = 0) -> "RowPartition":
        """Random permutation, then equal-size contiguous blocks (the default of the oblivious algorithms)."""
        rng = np.random.default_rng(seed)
        return cls(rng.permutation(n).astype(np.int64), even_bounds(n, parts), "random")

    @classmethod
    def from_parts(cls, part: np.ndarray, parts: int, method: str = "file") -> "RowPartition":
        """From a vertex → part map (original order). Relabeling is stable: within a part, original order."""
        part = np.asarray(part).reshape(-1)
        if part.size and (not np.issubdtype(part.dtype, np.integer)):
            raise GridGnnError("partition entries must be integers")
        part = part.astype(np.int64)
        if part.size and (part.min() < 0 or part.max() >= parts):
            raise GridGnnError(f"partition names part {int(part.max() if part.max() >= parts else part.min())}, "
                               f"valid parts are 0..{parts - 1}")
        perm = np.argsort(part, kind="stable").astype(np.int64)
        counts = np.bincount(part, minlength=parts)
        bounds = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        return cls(perm, bounds, method)


def even_bounds(n: int, parts: int) -> np.ndarray:
    """Block boundaries of ``parts`` contiguous blocks of sizes differing by at most one (larger first)."""
    if parts < 1:
        raise GridGnnError(f"number of parts must be positive, got {parts}")
    base, extra = divmod(n, parts)
    sizes = np.full(parts, base, dtype=np.int64)
    sizes[:extra] += 1
    return np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)


def even_range(n: int, parts: int, k: int) -> tuple[int, int]:
    """``(start, stop)`` of block ``k`` of :func:`even_bounds` ``(n, parts)``, without building the bounds (plain
    ints, cached: a planner asks it for every rank of every configuration)."""
    return _even_range(int(n), int(parts), int(k))


@lru_cache(maxsize=1 << 16)
def _even_range(n: int, parts: int, k: int) -> tuple[int, int]:
    if parts < 1:
        raise GridGnnError(f"number of parts must be positive, got {parts}")
    if not 0 <= k < parts:
        raise IndexError(f"block {k} of {parts}")
    base, extra = divmod(int(n), int(parts))
    start = k * base + min(k, extra)
    return start, start + base + (1 if k < extra else 0)


def even_size(n: int, parts: int, k: int) -> int:
    """The size of block ``k`` of :func:`even_bounds` ``(n, parts)``."""
    start, stop = even_range(n, parts, k)
    return stop - start


def even_sizes(n: int, parts: int) -> tuple:
    """The block sizes of :func:`even_bounds` ``(n, parts)`` as a tuple of ints (larger first; cached)."""
    return _even_sizes(int(n), int(parts))


@lru_cache(maxsize=1 << 12)
def _even_sizes(n: int, parts: int) -> tuple:
    if parts < 1:
        raise GridGnnError(f"number of parts must be positive, got {parts}")
    base, extra = divmod(int(n), int(parts))
    return (base + 1,) * extra + (base,) * (int(parts) - extra)


def block_range(bounds, k: int) -> tuple[int, int]:
    """``(start, stop)`` of block ``k`` of ``bounds``."""
    return int(bounds[k]), int(bounds[k + 1])


def stage_chunks(blocks: int, c: int) -> list[list[int]]:
    """1.5D: the source blocks each process column handles — ``range(blocks)`` split into ``c`` contiguous chunks
    whose sizes differ by at most one (CAGNET gives the extra stages to the last column; we spread them)."""
    return [list(map(int, a)) for a in np.array_split(np.arange(blocks), c)]


@dataclass(frozen=True)
class BlockRowSchedule:
    r"""What one rank of the block-row family moves, as :class:`~gridgnn.distributed.accounting.Transfer` records:
    the engine (:class:`~gridgnn.parallel.blockrow.BlockRowGraph`) runs them, the byte model
    (:class:`~gridgnn.planner.primitives.BlockRowVolume`) sums them and the memory model sizes its receive buffers
    from them — the one statement of the family's fetch, push and row reduction.

    Args:
        sizes: rows of each vertex block (``B`` blocks). ``me``: this rank's block, its coordinate on the fetch axis.
        stages: the source blocks this rank multiplies (1D: all; 1.5D: its process column's chunk).
        fetch_axis: the axis block ``q`` is fetched along from its owner (axis-rank ``q``; ``B`` members).
        rep_axis, replicas: the axis that splits a row's edges (1.5D ``"rep"``, ``c`` members), or ``None``.
        send, recv: sparsity-aware only — rows sent to and received from each member of the fetch axis
            (``|NnzCols|`` counts, :meth:`sparsity_aware_counts`); ``None``: oblivious.
    """

    sizes: tuple
    me: int
    stages: tuple
    fetch_axis: str
    rep_axis: str | None = None
    replicas: int = 1
    send: tuple | None = None
    recv: tuple | None = None

    @property
    def blocks(self) -> int:
        return len(self.sizes)

    def stage_transfers(self, push: bool = False) -> list:
        """Oblivious: one broadcast per stage from the stage's owner (CAGNET Alg. 1 line 3, Alg. 2 line 4: one
        remote block at a time); ``push``: its adjoint, a reduce onto the owner."""
        return [Transfer("reduce" if push else "bcast", self.fetch_axis, self.blocks, self.me,
                         rows=int(self.sizes[q]), root=q) for q in self.stages]

    def halo_transfer(self, push: bool = False):
        """Sparsity-aware: one all-to-allv of the ``NnzCols`` rows (ICPP'24 Alg. 1 line 3); ``push``: the reverse."""
        send, recv = (self.recv, self.send) if push else (self.send, self.recv)
        return Transfer("alltoallv", self.fetch_axis, self.blocks, self.me, send=send, recv=recv)

    def fetch(self, push: bool = False) -> list:
        """Every transfer of one fetch of source rows (``push``: of its adjoint)."""
        return [self.halo_transfer(push)] if self.send is not None else self.stage_transfers(push)

    def fetch_bytes(self, push: bool = False):
        """``(collective, axis, sent, recv, calls)`` of :meth:`fetch`'s records summed for one-byte rows (``None``
        when nothing moves), without building them: a schedule of ``P`` ranks has ``P²`` stage records, and the
        byte model prices this sum (the tests check it equals the records' own)."""
        from ..distributed import accounting

        if self.blocks == 1:
            return None
        if self.send is not None:  # one all-to-allv, whatever the stages (every member of the axis takes part)
            t = self.halo_transfer(push)
            return (t.key, t.axis, *t.bytes(1.0), 1)
        if not self.stages:
            return None
        one = accounting.reduce if push else accounting.bcast  # linear in the rows: own stage, then the others
        own = float(self.sizes[self.me]) if self.me in self.stages else 0.0
        s0, r0 = one(self.me, self.me, own)
        s1, r1 = one(self.me, (self.me + 1) % self.blocks, float(self.remote_stages()[1].sum()))
        return ("reduce" if push else "bcast", self.fetch_axis, s0 + s1, r0 + r1, len(self.stages))

    def remote_stages(self) -> tuple[np.ndarray, np.ndarray]:
        """``(blocks, rows)``: the stages an oblivious fetch broadcasts to this rank from another (the
        :meth:`stage_transfers` whose root is not this rank), as arrays: what its receive buffer holds."""
        if self.blocks == 1:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        q = np.asarray(self.stages, np.int64)
        q = q[q != self.me]
        return q, np.asarray(self.sizes, np.int64)[q]

    def row_all(self) -> list:
        """The all-reduce of a row-block result along the axis that splits rows (CAGNET Alg. 2 line 8)."""
        if self.rep_axis is None:
            return []
        return [Transfer("allreduce", self.rep_axis, self.replicas, 0, rows=int(self.sizes[self.me]))]

    @staticmethod
    def sparsity_aware_counts(nnz_cols: np.ndarray, me: int, stages) -> tuple[tuple, tuple]:
        """``(send, recv)`` rows per member from ``nnz_cols[q, l] = |NnzCols(l, q)|``: block ``me`` sends member
        ``l`` the rows ``l`` reads when ``me`` is among the stages, and receives from each stage ``q``."""
        blocks = nnz_cols.shape[0]
        staged = np.zeros(blocks, dtype=bool)
        staged[list(stages)] = True
        others = np.arange(blocks) != me
        send = np.where(others & staged[me], nnz_cols[me], 0)
        recv = np.where(others & staged, nnz_cols[:, me], 0)
        return tuple(send.tolist()), tuple(recv.tolist())


@dataclass(frozen=True)
class RowLayout:
    r"""A node tensor of the block-row and SUMMA families: its rows are split over the mesh axes ``rows`` (the
    blocks of a :class:`RowPartition`, or SUMMA's ``B(i, k)``), every feature column is local, and it is
    replicated over ``replicas`` (1.5D ``"rep"``, SUMMA's process columns). ``order``: the vertex order of its rows
    (``"c"`` or ``"r"``: a double permutation alternates them by layer; one order otherwise)."""

    rows: tuple[str, ...]
    replicas: tuple[str, ...] = ()
    order: str = "c"
    cols = None  # every feature column on every rank

    def __str__(self) -> str:
        where = f"rows split over {'×'.join(self.rows)}" if self.rows else "every row"
        rep = f", replicated over {'×'.join(self.replicas)}" if self.replicas else ""
        return f"{where}, every column{rep}, vertex order {self.order}"


@dataclass(frozen=True)
class EdgeLayout:
    r"""An edge tensor (a value, or ``K`` values, per local edge): the edges of ``graph`` (a key naming the
    distributed graph they belong to: one per matrix version or, on Plexus, per layer) split over the mesh axes
    ``axes`` (each edge on one rank of them) and replicated over the others. Every column of an edge tensor is
    local on every layout."""

    graph: str
    axes: tuple[str, ...]
    layer: int = field(default=-1, compare=False)  # a layer whose graph it is (the rules resolve its axes late)

    def __str__(self) -> str:
        split = f", split over {'×'.join(self.axes)}" if self.axes else ""
        return f"edges of {self.graph}{split}"


PLEXUS_AXES = ("x", "y", "z")
_AXIS_INDEX = {a: k for k, a in enumerate(PLEXUS_AXES)}
#: the axis a node tensor is replicated along, by its ``(rows, cols)`` axes (``cols`` ``None``: the last one)
_THIRD = {(r, c): next(a for a in PLEXUS_AXES if a not in (r, c)) for r in PLEXUS_AXES for c in (*PLEXUS_AXES, None)
          if r != c}


@dataclass(frozen=True)
class PlexusNodeLayout:
    r"""Where a node tensor lives on the Plexus grid: its rows are the ``k``-th of ``G_rows`` equal vertex blocks on
    the ranks with coordinate ``k`` along ``rows``; its columns are the ``j``-th of ``G_cols`` equal column blocks
    along ``cols`` (``None``: every column); it is replicated along the remaining axis. ``order``: the vertex
    order of its rows — ``"c"`` (the source's ``perm_c``) or ``"r"`` (``perm_r``); one order under a single
    permutation. ``split``: the rows are further cut in ``G_third`` parts along the third axis (the layer-0
    input, all-gathered by the first primitive that reads it, Plexus Alg. 1 line 2). ``scatter`` (``--algo
    plexus-rs``): every node tensor is held split so, and the primitives reduce-scatter their partial sums rather
    than all-reduce them (:meth:`after_linear`, :meth:`after_spmm`)."""

    rows: str
    cols: str | None
    order: str = "c"
    split: bool = False
    scatter: bool = False

    @property
    def third(self) -> str:
        return _THIRD[self.rows, self.cols]

    def __str__(self) -> str:
        cols = f"columns split over {self.cols}" if self.cols else "every column"
        split = f", rows further cut over {self.third}" if self.split else ""
        split += ", reduce-scattered" if self.scatter else ""
        return (f"({self.rows}, {self.cols or '-'}): rows split over {self.rows}, {cols}{split}, "
                f"vertex order {self.order}")

    def after_linear(self) -> "PlexusNodeLayout":
        """``X W``: the weight's columns are split along the third axis, the partial sums over ``cols`` are
        reduced — rows stay, columns move to the third axis (Plexus Alg. 1 lines 6–8). Scattered: each rank
        multiplies its row part by the weight rows of its column block (every output column) and the partial
        sums over ``cols`` are reduce-scattered by column blocks — the layout stays."""
        if self.scatter:
            return self
        return PlexusNodeLayout(self.rows, self.third, self.order)

    def after_spmm(self) -> "PlexusNodeLayout":
        """``A X`` with the adjacency shard ``V^third × V^rows``: the destinations are split along the third axis,
        in the other vertex order; the columns stay (Alg. 1 lines 3–4, the double permutation of §5.1).
        Scattered: the parts are all-gathered over the third axis first, and the partial sums over ``rows`` are
        reduce-scattered into parts along it — the output is held split over the old rows axis."""
        other = other_order(self.order)
        if self.scatter:
            return PlexusNodeLayout(self.third, self.cols, other, split=True, scatter=True)
        return PlexusNodeLayout(self.third, self.cols, other)

    @property
    def version(self) -> str:
        """The matrix version an SpMM reading this tensor multiplies: rows in the other order, columns in ours."""
        return version_reading(self.order)


@dataclass(frozen=True)
class PlexusLayerLayout:
    """The node-tensor layouts of one layer: its input, the input of its ``linear`` and of its graph primitives
    (``None`` where the layer has none), its output."""

    input: PlexusNodeLayout
    linear: PlexusNodeLayout | None
    graph: PlexusNodeLayout | None
    output: PlexusNodeLayout


#: primitives that move a node tensor's rows or columns on Plexus, and the move each makes
PLEXUS_MOVES = {"linear": "linear", "spmm": "spmm", "spmm_select": "spmm"}


def plexus_program(names: list[str]) -> tuple[str, ...]:
    """A layer's layout program from the names of the primitives it calls, in order: the moves of
    :data:`PLEXUS_MOVES`, consecutive repeats merged (SAGE's two aggregations read one input, its two ``linear``
    calls another)."""
    out: list[str] = []
    for name in names:
        move = PLEXUS_MOVES.get(name)
        if move is not None and (not out or out[-1] != move):
            out.append(move)
    return tuple(out)


#: the primitives ``--algo plexus-rs`` lays out (its scattered layouts have no rule for the others yet)
SCATTER_PRIMITIVES = ("linear", "spmm", "add_bias")


def plexus_layouts(program: list[tuple[str, ...]], scatter: bool = False) -> list[PlexusLayerLayout]:
    r"""The layouts of every layer of a model on the Plexus grid, from its *program*: per layer, the order in which
    it calls ``linear`` and ``spmm`` (``("spmm", "linear")``, ``("linear", "spmm")``, or one of them), as its trace
    records it. The layer-0 input is ``(x, y)`` with order ``"c"``, split along ``z``; each ``linear`` moves the
    columns to the third axis and each ``spmm`` moves the rows there (§3.2's rotation: a layer's output is already
    the next layer's input, so no redistribution happens between layers). With Alg. 1's order (aggregate first)
    the roles ``(a, b, c)`` of layer ``l`` rotate ``(x,y,z) → (z,x,y) → (y,z,x)``; a layer that transforms first
    (GAT; GCN when it narrows) rotates the other way. ``scatter`` (``plexus-rs``): every tensor stays split over its
    third axis; only ``spmm`` moves the rows (:meth:`PlexusNodeLayout.after_spmm`), the columns stay on ``y``."""
    cur = PlexusNodeLayout("x", "y", "c", split=True, scatter=scatter)
    out = []
    for layer, ops in enumerate(program):
        if len(set(ops)) != len(ops) or not set(ops) <= {"linear", "spmm"}:
            raise GridGnnError(f"plexus lays out layers whose linear calls read one layout and whose spmm calls "
                               f"another; layer {layer} calls {' → '.join(ops)}")
        start, lin, gr = cur, None, None
        for op in ops:
            if op == "linear":
                lin, cur = cur, cur.after_linear()
            else:
                gr, cur = cur, cur.after_spmm()
        if not ops and start.split and not start.scatter:
            raise GridGnnError("plexus: layer 0 must call linear or spmm on its input")
        out.append(PlexusLayerLayout(start, lin, gr, cur))
    return out


def other_order(order: str) -> str:
    """The vertex order a product with the adjacency writes when it reads ``order`` (``"c"`` ↔ ``"r"``)."""
    return "r" if order == "c" else "c"


def version_reading(order: str) -> str:
    r"""The matrix version an SpMM multiplies when its sources are in vertex order ``order``: columns in that
    order, rows in the other — ``"rc"`` (:math:`P_r \hat M P_c^\mathsf{T}`) for ``"c"``, ``"cr"`` for ``"r"``."""
    return "rc" if order == "c" else "cr"


def layer_orders(layer: int, double: bool) -> tuple[str, str]:
    """``(input order, output order)`` of layer ``layer``: under a double permutation (Plexus §5.1) even layers
    read the column order ``"c"`` and write the row order ``"r"``, odd layers the reverse, so no layer
    redistributes its input; one order ``"c"`` otherwise. The one statement of the alternation that the engines,
    the layout checker and the byte and memory models read."""
    if not double:
        return "c", "c"
    return ("c", "r") if layer % 2 == 0 else ("r", "c")


def layer_version(layer: int, double: bool) -> str:
    """The matrix version layer ``layer`` multiplies (:func:`layer_orders`, :func:`version_reading`)."""
    return version_reading(layer_orders(layer, double)[0])


def vertex_order(source, order: str) -> np.ndarray:
    """The vertex order ``"c"`` (``source.perm_c``) or ``"r"`` (``perm_r``) of a double-permutation source:
    ``order[position] = original id``."""
    return source.perm_c if order == "c" else source.perm_r


def plexus_destinations(source, lay: PlexusNodeLayout, t_rows: tuple[int, int], bounds: np.ndarray):
    r"""The destination-row gather of a graph layout ``lay`` (the ``(r, q)`` tensor its primitives read): the
    destinations ``t_rows`` of an adjacency shard (positions in the other vertex order) looked up among ``lay``'s
    rows, split by the blocks ``bounds`` of its row axis — :func:`plexus_row_gather`'s ``(take, where)``."""
    order_in = vertex_order(source, lay.order)
    order_out = vertex_order(source, other_order(lay.order))
    inv = np.empty_like(order_in)
    inv[order_in] = np.arange(order_in.size)
    return plexus_row_gather(inv[order_out[t_rows[0]:t_rows[1]]], bounds)


def split_classes(sizes: dict, quantities) -> dict:
    r"""What a rank's even splits of ``quantities`` depend on, per axis ``a`` of ``sizes`` (``g`` members): the class
    of each coordinate ``c`` (``{axis: (class id per coordinate)}``, cached: do not change it), equal for two coordinates when they lie on the
    same side of :math:`X \bmod g` for every ``X`` of ``quantities`` and of those split once along any axis (an even
    split is :math:`\lfloor X/g \rfloor + [c < X \bmod g]`). Ranks of the same class on every axis hold blocks of
    the same sizes of all of them and of their parts split once more — two levels, as deep as any Plexus record
    splits (a part of a part of a part may differ within a class: add the intermediate sizes to ``quantities``
    before splitting deeper): a model that reads sizes alone prices one rank per class."""
    return _split_classes(tuple((a, int(g)) for a, g in sizes.items()), frozenset(int(q) for q in quantities))


@lru_cache(maxsize=256)
def _split_classes(sizes: tuple, quantities: frozenset) -> dict:
    xs = set(quantities)
    for q in quantities:
        for _, g in sizes:
            xs.update((q // g, q // g + 1))
    rem = {g: sorted({x % g for x in xs}) for _, g in sizes}
    # coordinate c's class: how many of the axis' distinct remainders lie above it
    return {a: tuple(sum(c < m for m in rem[g]) for c in range(g)) for a, g in sizes}  # shared by the cache: read-only


@dataclass(frozen=True)
class PlexusSchedule:
    r"""What one rank of the Plexus grid moves in one layer, as :class:`~gridgnn.distributed.accounting.Transfer`
    records: the engine (:mod:`gridgnn.parallel.plexus`) runs them (``Comm.execute``), the byte model
    (:class:`~gridgnn.planner.primitives.PlexusVolume`) sums them and the memory model sizes its gather buffers
    from them. Rows are counted in the unit the caller prices (a node row of the tensor's local columns, a row
    of the weight block, an edge's values, one element of a parameter).

    Args:
        n: vertices; ``shape``: ``(Gx, Gy, Gz)``; ``me``: this rank's coordinates.
        layer: the layer's :class:`PlexusLayerLayout` (its linear and graph layouts, ``None`` where it has none).
        nnz: edges of the layer's adjacency shard ``A[V^t, V^r]``; ``block_rows``: blocked aggregation (§5.2).
    """

    n: int
    shape: tuple
    me: tuple
    layer: PlexusLayerLayout
    nnz: int = 0
    block_rows: int = 0

    def __post_init__(self):  # what every record asks, once (a planner builds a schedule per rank and layer)
        sizes = dict(zip(PLEXUS_AXES, map(int, self.shape)))
        coords = dict(zip(PLEXUS_AXES, map(int, self.me)))
        object.__setattr__(self, "_sizes", sizes)
        object.__setattr__(self, "_coords", coords)
        object.__setattr__(self, "_rows", {a: even_size(self.n, sizes[a], coords[a]) for a in PLEXUS_AXES})

    def size(self, axis: str) -> int:
        return self._sizes[axis]

    def coord(self, axis: str) -> int:
        return self._coords[axis]

    def nrows(self, axis: str) -> int:
        """Rows of this rank's vertex block along ``axis`` (``|V^axis|``)."""
        return self._rows[axis]

    def cols(self, width: int, axis: str | None) -> tuple[int, int]:
        """This rank's column block of a ``width``-column tensor split along ``axis`` (``None``: every column)."""
        if axis is None:
            return 0, width
        return even_range(width, self._sizes[axis], self._coords[axis])

    def ncols(self, width: int, axis: str | None) -> int:
        return width if axis is None else even_size(width, self._sizes[axis], self._coords[axis])

    def _t(self, kind: str, axis: str, **kw):
        return Transfer(kind, axis, self.size(axis), self.coord(axis), **kw)

    # ------------------------------------------------------------------ split tensors (Alg. 1 line 2)
    def parts(self, lay: PlexusNodeLayout) -> tuple:
        """Rows of each part of a split tensor's row block ``V^rows``, cut along its third axis."""
        return even_sizes(self.nrows(lay.rows), self.size(lay.third))

    def part_rows(self, lay: PlexusNodeLayout) -> int:
        """Rows this rank holds of a tensor of layout ``lay`` (its part when split)."""
        return self.parts(lay)[self.coord(lay.third)] if lay.split else self.nrows(lay.rows)

    def gather_parts(self, lay: PlexusNodeLayout):
        """A split tensor's parts all-gathered over its third axis (rows of its local columns)."""
        return self._t("allgather", lay.third, pieces=self.parts(lay))

    def scatter_parts(self, lay: PlexusNodeLayout):
        """The adjoint of :meth:`gather_parts`: partial sums of the whole row block reduce-scattered into the parts."""
        return self._t("reducescatter", lay.third, pieces=self.parts(lay))

    def input_parts(self) -> tuple:
        """Rows of each part of the layer-0 input's row block, held split over its third axis."""
        return self.parts(self.layer.input)

    def input_gather(self):
        """The split layer-0 input's parts all-gathered over its third axis (rows of its local columns)."""
        return self.gather_parts(self.layer.input)

    # ------------------------------------------------------------------ linear (Alg. 1 lines 6–8, 15–20)
    def weight_parts(self, width: int) -> tuple:
        """Rows of each part of the weight block ``W[C^q, C^t]`` of a ``width → ·`` linear along the row axis."""
        lin = self.layer.linear
        return even_sizes(self.ncols(width, lin.cols), self.size(lin.rows))

    def weight_gather(self, width: int):
        """The weight block's parts all-gathered over ``r`` (line 6; rows of ``|C^t(out)|`` elements)."""
        return self._t("allgather", self.layer.linear.rows, pieces=self.weight_parts(width), exact=True)

    def weight_scatter(self, width: int):
        """``∂W_blk`` reduce-scattered over ``r`` into the parts (lines 15–16)."""
        return self._t("reducescatter", self.layer.linear.rows, pieces=self.weight_parts(width), exact=True)

    def linear_sum(self):
        """``X W_blk``, partial over the input's column blocks, all-reduced over ``q`` (line 8)."""
        lin = self.layer.linear
        return self._t("allreduce", lin.cols, rows=self.nrows(lin.rows))

    def linear_back(self):
        """``∂X = ∂Y W_blkᵀ``, partial over the output's column blocks, all-reduced over ``t`` (lines 19–20)."""
        lin = self.layer.linear
        return self._t("allreduce", lin.third, rows=self.nrows(lin.rows))

    def column_pieces(self, width: int) -> tuple:
        """Columns of each block of a ``width``-column tensor along the linear's column axis."""
        return even_sizes(width, self.size(self.layer.linear.cols))

    def linear_scatter(self, width: int):
        """Scattered ``X_part W[C^q, :]``, partial over ``q``, reduce-scattered into the output's column blocks
        (pieces of transposed rows: one per column, the part's rows long)."""
        return self._t("reducescatter", self.layer.linear.cols, pieces=self.column_pieces(width))

    def linear_gather(self, width: int):
        """The adjoint of :meth:`linear_scatter`: ``∂Y``'s column blocks all-gathered over ``q``."""
        return self._t("allgather", self.layer.linear.cols, pieces=self.column_pieces(width))

    def weight_sums(self, elements: int) -> list:
        """Scattered: the gradient of the weight rows ``W[C^q, :]`` (``elements``) summed over the ranks holding
        other rows — the rows axis, then the third."""
        lin = self.layer.linear
        return [self._t("allreduce", a, rows=int(elements), exact=True) for a in (lin.rows, lin.third)]

    # ------------------------------------------------------------------ graph primitives (lines 3–4, 22–23)
    def aggregate(self) -> list:
        """``A[V^t, V^r] X`` partial over ``r``: all-reduced in blocks of ``block_rows`` rows (§5.2), else whole;
        scattered: reduce-scattered into the output's parts along ``r``."""
        gr = self.layer.graph
        if gr.scatter:
            return [self._t("reducescatter", gr.rows, pieces=self.parts(gr.after_spmm()))]
        rows = self.nrows(gr.third)
        step = self.block_rows if 0 < self.block_rows < rows else max(1, rows)
        return [self._t("allreduce", gr.rows, rows=min(step, rows - r0)) for r0 in range(0, max(1, rows), step)]

    def row_all(self):
        """Per-row statistics of ``V^t`` (a row's edges are spread along ``r``) reduced over ``r``."""
        gr = self.layer.graph
        return self._t("allreduce", gr.rows, rows=self.nrows(gr.third))

    def edge_sum(self):
        """An edge tensor partial over the column blocks ``C^q`` (``∂e`` of an SpMM, an SDDMM's dot) reduced."""
        return self._t("allreduce", self.layer.graph.cols, rows=self.nnz)

    def source_sum(self):
        """A gradient of the ``(r, q)`` tensor partial over ``t`` (each rank's shard saw ``V^t`` alone) reduced."""
        gr = self.layer.graph
        return self._t("allreduce", gr.third, rows=self.nrows(gr.rows))

    def dst_gather(self, counts):
        """The destination rows ``V^t`` gathered over ``r`` from their holders, ``counts[k]`` from member ``k``
        (:func:`plexus_destinations`)."""
        return self._t("allgather", self.layer.graph.rows, pieces=tuple(int(c) for c in counts))

    def dst_scatter(self, counts):
        """The adjoint of :meth:`dst_gather`: partial gradients of the destination rows summed onto their holders."""
        return self._t("reducescatter", self.layer.graph.rows, pieces=tuple(int(c) for c in counts))

    # ------------------------------------------------------------------ column reductions and parameters
    def col_all(self, lay: PlexusNodeLayout):
        """A per-row statistic of a tensor of layout ``lay`` partial over its column blocks, reduced over them."""
        return self._t("allreduce", lay.cols, rows=self.nrows(lay.rows))

    def bias_sum(self, elements: int) -> list:
        """A bias' gradient (this rank's column block of it: ``elements``) summed over the output's row blocks (and
        their parts, when it is split)."""
        out = self.layer.output
        return [self._t("allreduce", a, rows=int(elements), exact=True)
                for a in (out.rows,) + ((out.third,) if out.split else ())]

    def param_sums(self, lay: PlexusNodeLayout, elements: int) -> list:
        """A replicated parameter's gradient (``elements``) partial over the ranks holding different blocks of a
        tensor of layout ``lay``: summed over its rows, its columns and, for the split layer-0 input, the third
        axis — axis by axis."""
        axes = (lay.rows, lay.cols) + ((lay.third,) if lay.split else ())
        return [self._t("allreduce", a, rows=int(elements), exact=True) for a in axes]


class SummaGeometry:
    r"""Blocks and panels of a ``pr × pc × z`` grid for ``n`` vertices (see the module docstring).

    Attributes:
        fine: ``even_bounds(n, pr·z)``; ``B(i, k)`` = ``fine[i·z + k] : fine[i·z + k + 1]``.
        panels[k]: list of ``(v0, v1, i_owner, j_owner)`` for fiber layer ``k``.
    """

    def __init__(self, n: int, pr: int, pc: int, z: int):
        if pr * z > n:
            raise GridGnnError(f"grid needs {pr * z} vertex blocks but the graph has only {n} vertices")
        self.n, self.pr, self.pc, self.z = n, pr, pc, z
        self.fine = even_bounds(n, pr * z)
        self.panels = []
        for k in range(z):
            ranges = [self.block(i, k) for i in range(pr)]
            total = sum(b - a for a, b in ranges)
            cuts = even_bounds(total, pc)  # positions in the concatenated V_k sequence
            out, pos = [], 0
            for i, (a, b) in enumerate(ranges):
                start = a
                while start < b:
                    off = pos + (start - a)
                    j = int(np.searchsorted(cuts, off, side="right") - 1)
                    end = min(b, a + (int(cuts[j + 1]) - pos))
                    out.append((start, end, i, j))
                    start = end
                pos += b - a
            self.panels.append(out)

        self._arrays: dict = {}

    def panel_arrays(self, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(rows, owner row, owner column)`` of every panel of fiber layer ``k``, as ``int64`` arrays (cached)."""
        if k not in self._arrays:
            pan = np.array(self.panels[k], dtype=np.int64).reshape(-1, 4)
            self._arrays[k] = (pan[:, 1] - pan[:, 0], pan[:, 2], pan[:, 3])
        return self._arrays[k]

    def column_pieces(self, width: int) -> tuple:
        """The column blocks ``C_j`` of ``width`` columns over the ``pc`` process columns (cached)."""
        key = ("cols", int(width))
        if key not in self._arrays:
            self._arrays[key] = even_sizes(width, self.pc)
        return self._arrays[key]

    def block(self, i: int, k: int) -> tuple[int, int]:
        return block_range(self.fine, i * self.z + k)

    def rows(self, i: int) -> tuple[int, int]:
        return int(self.fine[i * self.z]), int(self.fine[(i + 1) * self.z])

    def fiber_bounds(self, i: int) -> np.ndarray:
        """Boundaries of ``B(i, 0..z-1)`` relative to the start of ``R_i``."""
        return self.fine[i * self.z:(i + 1) * self.z + 1] - self.fine[i * self.z]

    def fiber_pieces(self, i: int) -> tuple:
        """Rows of ``B(i, 0..z-1)``, a tuple of ints (cached)."""
        key = ("fiber", int(i))
        if key not in self._arrays:
            self._arrays[key] = tuple(int(d) for d in np.diff(self.fiber_bounds(i)))
        return self._arrays[key]


@dataclass(frozen=True)
class SummaSchedule:
    r"""What rank ``(i, j, k)`` of the SUMMA family moves for one matrix version, as
    :class:`~gridgnn.distributed.accounting.Transfer` records: the engine
    (:class:`~gridgnn.parallel.summa.SummaGraph`) runs them, the byte model
    (:class:`~gridgnn.planner.primitives.SummaVolume`) sums them. Rows are counted in the unit the caller prices
    (a sparse panel's index array in entries of :attr:`index_bytes`, its edge tensors per edge, node tensors per
    row).

    Args:
        shape: ``(n, pr, pc, z)`` of the :class:`SummaGeometry` ``geo``; ``i, j, k``: this rank.
        axes: ``(row axis, column axis, fiber axis or None)`` of the grid.
        panel_nnz: nonzeros of every panel of fiber layer ``k`` in the rows ``R_i`` of this version.
    """

    shape: tuple
    i: int
    j: int
    k: int
    axes: tuple
    panel_nnz: tuple
    geo: SummaGeometry = field(compare=False, repr=False)

    @classmethod
    def of(cls, geo: SummaGeometry, i: int, j: int, k: int, axes, panel_nnz) -> "SummaSchedule":
        return cls((geo.n, geo.pr, geo.pc, geo.z), int(i), int(j), int(k), tuple(axes),
                   tuple(map(int, panel_nnz)), geo)

    @cached_property
    def nnz_array(self) -> np.ndarray:
        """:attr:`panel_nnz` as an ``int64`` array."""
        return np.asarray(self.panel_nnz, np.int64)

    @cached_property
    def index_bytes(self) -> int:
        """Bytes per entry of a panel's index array on the wire (and in the patterns read from it): 4 while the
        vertex count and every panel's nonzeros fit ``int32`` (:func:`~gridgnn.ops.pattern.index_bytes`), else 8
        — one width for every panel of the layer, the same on the owner and the receivers."""
        return index_bytes(self.geo.n, max(self.panel_nnz, default=0))

    @property
    def index_dtype(self) -> torch.dtype:
        """The torch dtype of :attr:`index_bytes`."""
        return torch.int32 if self.index_bytes == 4 else torch.int64

    def _t(self, kind, which: int, **kw):
        group = (self.geo.pr, self.geo.pc, self.geo.z)[which]
        me = (self.i, self.j, self.k)[which]
        return Transfer(kind, self.axes[which] or "", group, me, **kw)

    @property
    def nrow(self) -> int:
        r0, r1 = self.geo.rows(self.i)
        return r1 - r0

    def panels(self) -> range:
        """The panels of fiber layer ``k`` (CAGNET Alg. 3 line 3: every rank of the layer visits them all)."""
        return range(len(self.panel_nnz))

    def own_panels(self) -> list[int]:
        """The panels this rank's column owns (their edges live here)."""
        return [p for p, pan in enumerate(self.geo.panels[self.k]) if pan[3] == self.j]

    def pattern(self, p: int):
        """The index array of ``M[R_i, p]`` (``|R_i| + 1 + nnz`` entries of :attr:`index_bytes`) broadcast along the process row
        from the owner column (Alg. 3 line 9)."""
        return self._t("bcast", 1, rows=self.nrow + 1 + self.panel_nnz[p], root=self.geo.panels[self.k][p][3],
                       tag="bcast_sparse", exact=True)

    def edges(self, p: int, push: bool = False):
        """An edge tensor of panel ``p`` (``nnz`` edges) from the owner column; ``push``: a partial one summed
        onto it."""
        if push:
            return self._t("reduce", 1, rows=self.panel_nnz[p], root=self.geo.panels[self.k][p][3])
        return self._t("bcast", 1, rows=self.panel_nnz[p], root=self.geo.panels[self.k][p][3], tag="bcast_sparse",
                       exact=True)

    def rows_of(self, p: int, push: bool = False):
        """Node rows of panel ``p`` along the process column from the owner row (Alg. 3 line 10); ``push``: the
        adjoint, summed onto it."""
        v0, v1, io, _ = self.geo.panels[self.k][p]
        return self._t("reduce" if push else "bcast", 0, rows=v1 - v0, root=io)

    def panel_bytes(self, which: str, push: bool = False):
        """``(collective, axis, sent, recv, calls)`` of every panel's :meth:`pattern`, :meth:`edges` or
        :meth:`rows_of` record (``which``; ``push``: the adjoint) summed for one-byte rows, without building them
        (``None`` when nothing moves): a rank visits every panel of its layer, ``P·(pr + pc)`` records per call on
        the whole grid. Each record is a broadcast or a reduce, linear in its rows, so the sum is the accounting
        formula on the rows of the panels this rank roots and on those of the others (the tests check it equals
        the records' own). Cached: a step asks it again for every primitive of the layer."""
        key = (which, bool(push))
        if key not in self._summed:
            self._summed[key] = self._panel_bytes(which, push)
        return self._summed[key]

    @cached_property
    def _summed(self) -> dict:
        return {}

    def _panel_bytes(self, which: str, push: bool):
        from ..distributed import accounting

        panels = self.geo.panels[self.k]
        if not panels:
            return None
        axis = 0 if which == "rows_of" else 1
        group = (self.geo.pr, self.geo.pc)[axis]
        if group == 1:
            return None
        me = (self.i, self.j)[axis]
        panel_rows, owner_row, owner_col = self.geo.panel_arrays(self.k)
        roots = (owner_row, owner_col)[axis]
        if which == "rows_of":
            rows = panel_rows
        else:
            rows = self.nnz_array + (self.nrow + 1 if which == "pattern" else 0)
        mine = roots == me
        one = accounting.reduce if push else accounting.bcast
        s0, r0 = one(me, me, float(rows[mine].sum()))
        s1, r1 = one(me, (me + 1) % group, float(rows[~mine].sum()))
        key = "reduce" if push else ("bcast_sparse" if which != "rows_of" else "bcast")
        return key, self.axes[axis] or "", s0 + s1, r0 + r1, len(panels)

    def fiber_pieces(self) -> tuple:
        return self.geo.fiber_pieces(self.i)

    def fiber_gather(self):
        """``X[B(i, k)] → X[R_i]``: an all-gather over the fiber (rows of every layer's block)."""
        return self._t("allgather", 2, pieces=self.fiber_pieces())

    def fiber_scatter(self):
        """``T[R_i]`` partial over the fiber → ``T[B(i, k)]``: Split-3D's reduce-scatter."""
        return self._t("reducescatter", 2, pieces=self.fiber_pieces())

    def fiber_all(self, rows: int):
        """An all-reduce of ``rows`` rows over the fiber."""
        return self._t("allreduce", 2, rows=rows)

    def gather_cols(self, width: int):
        """``T[:, C_j] → T``: an all-gather of the column blocks of ``width`` along the process row (pieces of
        transposed rows: one per column, ``|B(i, k)|`` long)."""
        return self._t("allgather", 1, pieces=self.geo.column_pieces(width))

    def col_all(self, rows: int):
        """The sum of ``rows`` rows over the process row's columns (the adjoint of their replication)."""
        return self._t("allreduce", 1, rows=rows)

    def row_all(self) -> list:
        """Per-row statistics of ``R_i`` summed over the process row's columns, then the fiber."""
        return [self.col_all(self.nrow), self.fiber_all(self.nrow)]


def plexus_row_gather(positions: np.ndarray, bounds: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
    r"""How the ranks along a node tensor's row axis hand one rank the rows ``positions`` (indices in the tensor's
    vertex order) — the destination rows of an adjacency shard, whose per-node values (GAT's destination
    score, the destination side of an SDDMM) live on the ranks holding those vertices as *source* rows.

    Returns ``(take, where)``: ``take[k]`` = the positions member ``k`` of the axis holds (block ``k`` of
    ``bounds``), in ``positions`` order; ``where`` = for the concatenation of the members' rows, the index in
    ``positions`` each lands at. Every rank of one group along the axis asks for the same ``positions``, so an
    all-gather delivers them and a reduce-scatter is its adjoint."""
    owner = np.searchsorted(bounds, positions, side="right") - 1
    order = np.argsort(owner, kind="stable")
    take = [positions[order[owner[order] == k]] for k in range(bounds.size - 1)]
    return take, order
