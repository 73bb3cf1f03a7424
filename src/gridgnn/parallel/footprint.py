r"""What a family's memory model writes into: one rank's :class:`Ledger` of bytes per component, the
:class:`MemoryContext` of the configuration it is asked about, and the accounting every family shares (the
parameters with their optimizer state, the tensors a model's trace saved scaled to a rank's layout, the dropout
hash).

Each family file answers :meth:`~gridgnn.parallel.family.Family.memory` with its own layout (its blocks, its
schedule's records, the buffers its engine receives into) and these helpers; :mod:`gridgnn.planner.memory` sums
the ledgers with what is the same for every family (the runtime, the whole-graph copy, the set-up transients) and
checks the result. The components and their formulas are listed in ``docs/memory.md``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..ops import hashing
from ..ops import masked
from ..ops.masked import recompute_rows, redraws
from ..ops.pattern import SDDMM_CHUNK_ELEMENTS

#: the components of a rank's peak, in report order
COMPONENTS = ("runtime", "graph", "adjacency", "features", "parameters", "activations", "buffers", "workspace")
#: components that are peaks of one moment (the largest candidate), not sums
MAX_COMPONENTS = ("buffers", "workspace")


@dataclass(frozen=True)
class MemoryContext:
    r"""One configuration, as every family's memory model reads it.

    Attributes:
        n: vertices; dims: ``[f_0, hidden..., classes]``; e: bytes per element of the training dtype.
        directed: the graph is directed; double: two vertex orders (2D/3D/Plexus ``double-perm``).
        pats: the nonzero patterns of :math:`\hat M` per version (``"rc"``, ``"cr"``;
            :func:`~gridgnn.partition.counts.nnz_patterns`).
        dropout: the model's; train_rows: labelled rows per rank (an int, a sequence, ``rank -> int`` or
            ``None``: every logits row).
        idx: bytes of a SciPy index; block_rows: Plexus blocked aggregation (0: off).
        src: what the process holds of the whole graph (``memory``, ``serial``, ``sharded``, ``none``).
        dev: ``cpu`` or ``cuda``; versions: permuted matrix versions held in memory.
        trace: the model's :class:`~gridgnn.parallel.trace.Trace`.
        layers: per layer ``(columns, fetched, heads, consumed)`` (:func:`layers_of`).
        overlap: ``--overlap`` (two transfers in flight); hash_workspace: what hashing a dropout mask allocates,
            ``(bytes per element, bytes per element of a chunk of rows, "host" or "dev")``
            (:func:`~gridgnn.planner.memory.dropout_hash_workspace`); kept: 1 with ``--keep best``'s copy of the parameters; moments: the optimizer's state tensors
            per parameter; counters: it keeps float32 step counters; edge_ids: the model asks for the edges'
            original ids (:attr:`~gridgnn.parallel.trace.Trace.edge_ids`), which a graph then keeps (host);
            off_diagonal: it asks for the self-loop mask built from them (``g.off_diagonal``, kept on the device);
            select_layers: the layers that aggregate over a selecting semiring (``spmm_select``: max, min), whose
            graphs keep the sources' ids as tie-break keys (:func:`source_key_bytes`).
    """

    n: int
    dims: list
    e: int
    directed: bool
    double: bool
    pats: dict
    dropout: float
    train_rows: object
    idx: int
    block_rows: int
    src: str
    dev: str
    versions: int
    trace: object
    layers: list
    overlap: bool
    hash_workspace: tuple
    kept: int
    moments: int
    counters: bool
    edge_ids: bool = False
    off_diagonal: bool = False
    select_layers: frozenset = frozenset()


#: a moment of a training step: ``(horizon, label)``; the saved tensors of positions up to ``horizon`` are held then
#: (a position is :attr:`~gridgnn.parallel.trace.SavedTensor.pos`: how many primitive calls the forward had made)
Moment = tuple


class Ledger:
    """One rank's contributions per component, tagged host (``"host"``) or the computing device (``"dev"``):
    :meth:`add` sums, :meth:`saved` sums an activation with the position it is saved at, :meth:`cand` keeps the
    largest candidate of a peak component with what it is — at the moments of the step it exists at, or at every
    one. :meth:`pick` then reads the step as a timeline: the peak is the moment whose activations still held,
    buffers and workspace add up to the most."""

    def __init__(self):
        self.sums = {"dev": dict.fromkeys(COMPONENTS, 0), "host": dict.fromkeys(COMPONENTS, 0)}
        self.cands = {"dev": {k: (0, "") for k in MAX_COMPONENTS}, "host": {k: (0, "") for k in MAX_COMPONENTS}}
        self.positions: dict = {"dev": {}, "host": {}}  # position → activation bytes saved there
        self.at: dict = {}  # moment → {where: {component: (bytes, what)}}

    def add(self, comp: str, nbytes, where: str = "dev") -> None:
        self.sums[where][comp] += int(round(nbytes))

    def saved(self, nbytes, pos: int, where: str = "dev") -> None:
        """An activation of ``nbytes``, saved at position ``pos`` of the forward (0: before the first call, counted
        as held all the step — the logits and targets are given there) and freed by the backward of the primitive
        before it."""
        nbytes = int(round(nbytes))
        self.sums[where]["activations"] += nbytes
        self.positions[where][int(pos)] = self.positions[where].get(int(pos), 0) + nbytes

    def copy(self) -> "Ledger":
        """An independent ledger of the same contributions (a rank of the same sizes as this one's)."""
        out = Ledger()
        out.sums = {w: dict(d) for w, d in self.sums.items()}
        out.cands = {w: dict(d) for w, d in self.cands.items()}
        out.positions = {w: dict(d) for w, d in self.positions.items()}
        out.at = {m: {w: dict(d) for w, d in per.items()} for m, per in self.at.items()}
        return out

    def cand(self, comp: str, nbytes, what: str, where: str = "dev", at=None) -> None:
        """A candidate for the peak component ``comp`` (``buffers``, ``workspace``) that exists at the moments
        ``at`` (:data:`Moment`; ``None`` or none given: at every moment of the step)."""
        nbytes = int(round(nbytes))
        moments = list(at) if at is not None else []
        if not moments:
            if nbytes > self.cands[where][comp][0]:
                self.cands[where][comp] = (nbytes, what)
            return
        for m in moments:
            per = self.at.setdefault(m, {}).setdefault(where, {})
            if nbytes > per.get(comp, (0, ""))[0]:
                per[comp] = (nbytes, what)

    def largest(self, where_list) -> dict:
        """The largest candidate of each peak component at any moment, over the tags in ``where_list``."""
        out = {}
        for comp in MAX_COMPONENTS:
            cands = [self.cands[w][comp][0] for w in where_list]
            cands += [per[w][comp][0] for per in self.at.values() for w in where_list if comp in per.get(w, {})]
            out[comp] = max(cands, default=0)
        return out

    def pick(self, where_list) -> tuple[dict, dict]:
        """``(bytes per component, what each peak component is)`` over the tags in ``where_list``, at the step's
        peak moment: the one whose held activations, buffers and workspace add up to the most (``what["moment"]``
        names it). The moments are the end of the forward (every activation held) and those a candidate was given
        at; a candidate given at no moment counts at every one."""
        base = {comp: sum(self.sums[w][comp] for w in where_list) for comp in COMPONENTS}
        saved = sorted((p, b) for w in where_list for p, b in self.positions[w].items())
        unplaced = base["activations"] - sum(b for _, b in saved)  # added without a position: held all the step

        def held(horizon) -> int:
            return unplaced + sum(b for p, b in saved if p <= horizon)

        def largest(comp, m) -> tuple[int, str]:
            best = (0, "")
            for w in where_list:  # the largest candidate (the first of equal ones)
                for c in (self.cands[w][comp], self.at.get(m, {}).get(w, {}).get(comp, (0, ""))):
                    if c[0] > best[0]:
                        best = c
            return best

        moments = [(math.inf, "the end of the forward")] + sorted(self.at, key=lambda m: (m[0], m[1]))
        best = None
        for m in moments:
            peaks = {comp: largest(comp, m) for comp in MAX_COMPONENTS}
            total = held(m[0]) + sum(b for b, _ in peaks.values())
            if best is None or total > best[0]:
                best = (total, m, peaks)
        _, m, peaks = best
        out = dict(base)
        out["activations"] = held(m[0])
        what = {"moment": m[1]}
        for comp, (b, w) in peaks.items():
            out[comp], what[comp] = b, w
        return out, what


# ----------------------------------------------------------------------------------------------- shared rules
def edge_id_bytes(acc: "Ledger", ctx: MemoryContext, edges: float) -> None:
    """What a graph of ``edges`` local edges keeps of their original ids where the model asks for them: the ids (16
    bytes per edge, host) and the self-loop mask made of them (one byte per edge, on the device)."""
    acc.add("adjacency", 16 * edges * ctx.edge_ids, "host")
    acc.add("adjacency", edges * ctx.off_diagonal)


def source_key_bytes(acc: "Ledger", ctx: MemoryContext, edges: float, layers=None) -> None:
    """The tie-break keys (each edge's source's original id, ``int64``, on the device) a graph of ``edges`` local
    edges keeps once one of its ``layers`` (default: any) aggregates over a selecting semiring
    (:class:`~gridgnn.parallel.aggregate.SourceKeys`; SUMMA's kept per panel on a device). A device's are a copy;
    the host's are a view of the edges' original source ids (:func:`edge_id_bytes`)."""
    if ctx.dev != "cpu" and (ctx.select_layers if layers is None else ctx.select_layers & set(layers)):
        acc.add("adjacency", 8 * edges)  # (on the host they are the edges' source ids themselves, booked with them)


#: a selecting semiring's forward (:func:`gridgnn.ops.semiring.partial` folded into a ``Selection``), in bytes, the
#: larger of two phases. Forming the messages: per element of its output block ``(a, b)`` → ``a·e + b`` (the running
#: best, winning edge and key, the partial's), per message of a run ``(c, d)`` → ``c + d·e`` (the messages, their
#: masked copy, the int64 candidates and keys; runs of whole rows up to
#: :data:`~gridgnn.ops.pattern.SDDMM_CHUNK_ELEMENTS`). Folding a partial into the winners (and settling them
#: across ranks): per output element ``SELECT_FOLD`` ``(f, g)`` → ``f·e + g`` — the serial plan's fold holds
#: ``2e + 49``, a stage's edge map 2 more, Plexus' settle the partial too, ``3e + 51``, which is booked for all.
#: Its backward's beyond the two gradients, per output element (the chosen edges' sources, flat indices, the routed
#: values). Measured with torch's profiler on the serial plan in float32 and float64
#: (``tests/planner/test_memory.py::test_a_selections_forward_and_backward_take_what_the_model_books``).
SELECT_OUT, SELECT_RUN, SELECT_FOLD, SELECT_BACKWARD = (2, 24), (28, 1), (3, 51), 33
#: on a GPU, per output element more in the selection's backward: its routing adds through a sorted ``index_put_``
#: (:func:`~gridgnn.ops.pattern.add_at`), whose CUDA kernel (torch's ``index_put_with_sort_kernel``) holds per index
#: an ``int64`` linear index, its sorted copy, the original positions and a range, and the radix sort's double
#: buffer of keys and values. Read from torch's source, not measured: only a GPU measures it
#: (``tests/planner/test_memory.py::test_on_a_gpu_a_selections_backward_takes_what_the_model_books``).
SELECT_BACKWARD_SORT = 48


def selection_bytes(ctx: MemoryContext, out: float, edges: float, width: int) -> tuple[float, float]:
    """``(forward, backward beyond the gradients)`` bytes of a selecting aggregation of ``width`` columns whose
    output block has ``out`` local elements over ``edges`` local edges (the forward's input is the caller's; on a GPU,
    ``ctx.dev``, the backward's sort: :data:`SELECT_BACKWARD_SORT`)."""
    e = ctx.e
    run = min(float(SDDMM_CHUNK_ELEMENTS), edges * width)
    messages = (SELECT_OUT[0] * e + SELECT_OUT[1]) * out + (SELECT_RUN[0] + SELECT_RUN[1] * e) * run
    sort = SELECT_BACKWARD_SORT if getattr(ctx, "dev", "cpu") != "cpu" else 0
    return max(messages, (SELECT_FOLD[0] * e + SELECT_FOLD[1]) * out), (SELECT_BACKWARD + sort) * out


#: bytes each logits row's labels hold: the label (int64) and the train, val and test masks (bool)
LABEL_BYTES_PER_ROW = 11


def labels(acc: Ledger, ctx, rank: int, rows: int) -> None:
    """The labels and masks of ``rank``'s ``rows`` logits rows, and the positions of its labelled training rows
    (int64, found once: the loss indexes by them every step, :attr:`gridgnn.train.step.LocalData.train_rows`)."""
    acc.add("features", LABEL_BYTES_PER_ROW * rows + 8 * train_rows_at(ctx.train_rows, rank, rows))


def train_rows_at(train_rows, rank: int, rows: int) -> int:
    """Labelled training rows among ``rows`` logits rows of ``rank`` (``None``: all of them)."""
    if train_rows is None:
        return rows
    if callable(train_rows):
        return int(train_rows(rank))
    if np.ndim(train_rows) == 0:
        return int(train_rows)
    return int(train_rows[rank])


#: primitives that fetch node values across ranks
FETCHING = ("spmm", "spmm_select", "sddmm_add", "sddmm_dot", "at_destinations")


def layers_of(dims, trace) -> list[tuple[int, int, int, int]]:
    r"""Per layer ``(columns, fetched, heads, consumed)``: the widest node tensor the step keeps, the widest node
    tensor a primitive of the layer fetches across ranks (GCN: :math:`\min(f_{in}, f_{out})`), the widest edge
    tensor (GCN: none) and the layer's input width."""
    out = []
    for l, (fi, fo) in enumerate(zip(dims[:-1], dims[1:])):
        cols = [s.cols for s in trace.saved if s.layer == l and s.kind == "node"]
        heads = [s.cols for s in trace.saved if s.layer == l and s.kind == "edge"]
        widths = [c.width for c in trace.calls if c.layer == l and c.name in FETCHING]
        out.append((max([fi, fo, *cols]), max(widths, default=0), max(heads, default=0), fi))
    return out


def backward_temporaries(ctx: MemoryContext, k: int, node=None, product_input=None) -> tuple[float, int]:
    """Node columns (elements, given ``node``) and edge columns of the temporaries of the backward of the trace's call
    ``k`` (and of the raw operations after it, which run just before it): two node tensors of its layer's widest kept
    width (the incoming gradient and the one it gives) — for a ``linear``, its incoming gradient beside the larger of
    the input it recomputes and the input's gradient, which every family's product makes after letting that input go
    (:func:`~gridgnn.ops.lean_backward.product`), with one more of the input's width where another product of the
    layer may have given the input a gradient already, and at least two of its output's width (the products of one
    input by several weights side by side, :func:`~gridgnn.parallel.base.stacked_linears`: their views' gradients and
    their concatenation) —, two edge tensors of its layer's widest heads, and the dropout outputs it recomputes
    (:attr:`~gridgnn.parallel.trace.Trace.recomputed`; the masks it draws again for them:
    :func:`redrawn_mask_columns`). What a primitive moves — the rows or panels it receives, the partial sums it sends
    and the output it assembles from them — is its family's ``buffers``. A call of a layer's attention chain (its
    edge-valued primitives: the scores, the edge softmax, an aggregation whose edge values need a gradient) holds the
    two edge tensors of every call of the chain: on the whole-row layouts one fused kernel runs the chain's backward
    at once, and elsewhere its edge gradients and the partial sums pushed per panel or stage overlap.
    ``node(columns)`` (the rank's elements of that many columns of the layer): the first in elements, a ``linear``'s
    recomputed input counted as the block of rows it recomputes at once where it is larger
    (:data:`~gridgnn.ops.masked.RECOMPUTE_BLOCK`, :func:`~gridgnn.ops.lean_backward.keep_input`): whether it is, and
    the block's columns, are read off ``product_input(columns)``, the ``(rows, columns)`` of the rank's block of the
    product's input (default: the layer's rows, every column, as ``node`` counts them); without ``node``, in
    columns, the input counted whole."""
    call = ctx.trace.calls[k]
    unit = node if node is not None else (lambda columns: columns)
    cols, _, heads, _ = ctx.layers[call.layer]
    chain = [c for c in ctx.trace.calls if c.layer == call.layer and _edge_valued(c)]
    edge = 2 * sum(c.heads for c in chain) if _edge_valued(call) else 2 * heads
    again = recomputed_at(ctx, k)
    node_again = max((c for kind, c, _ in again if kind == "node"), default=0)
    if call.name == "linear":  # its weight's gradient first, the recomputed input let go, then the input's gradient
        # (ops.lean_backward.product): the incoming gradient beside the larger of the two; at least two of the
        # output's width (a product by weights side by side, plan.linears: its views' gradients and their
        # concatenation)
        given = call.width if call.grads and call.grads[0] else 0
        # where the layer has another product, its input's gradient may already wait in autograd's buffer (GraphSAGE
        # aggregating first: the root term's and the aggregate's both reach the dropped input)
        waiting = given if sum(c.layer == call.layer and c.name == "linear" for c in ctx.trace.calls) > 1 else 0
        at_once = node_again if node is None else _recomputed_at_once(node_again, node, product_input)
        elements = max(2 * unit(call.out_width), unit(call.out_width) + max(at_once, unit(given))) + unit(waiting)
    else:
        elements = unit(2 * cols + node_again)
    return elements, edge + max((c for kind, c, _ in again if kind == "edge"), default=0)


def product_block(columns: int, node, product_input=None) -> tuple[float, int]:
    """``(rows, columns)`` of the rank's block of a product's input of ``columns``: ``product_input(columns)``, or by
    default ``node``'s rows (``node(columns) / columns``) and every column."""
    return product_input(columns) if product_input is not None else (node(columns) / columns, columns)


def _recomputed_at_once(columns: int, node, product_input) -> float:
    """The elements of a product's recomputed input of ``columns`` its backward holds at once on the rank: its whole
    block on the rank (:func:`product_block`), or where that is larger than :data:`~gridgnn.ops.masked.
    RECOMPUTE_BLOCK`, a block of its rows (:class:`~gridgnn.ops.masked.RowBlocks`)."""
    if not columns:
        return 0
    rows, local = product_block(columns, node, product_input)
    whole = rows * local
    return whole if whole <= masked.RECOMPUTE_BLOCK else recompute_block(local)


def recompute_block(columns: int) -> int:
    """The elements of a block of rows of a product's recomputed input of ``columns`` (:data:`~gridgnn.ops.masked.
    RECOMPUTE_BLOCK` elements of whole rows, one row at least: :class:`~gridgnn.ops.masked.RowBlocks`)."""
    return recompute_rows(columns) * columns


def recomputed_at(ctx: MemoryContext, k: int) -> list[tuple[str, int, bool]]:
    """``(kind, columns, redrawn)`` of the dropout outputs the backward of the trace's call ``k`` recomputes
    (:attr:`~gridgnn.parallel.trace.Trace.recomputed`; ``redrawn``: :func:`mask_redrawn`)."""
    return [(kind, c, mask_redrawn(ctx, kind)) for l, kind, c, pos in ctx.trace.recomputed if max(pos - 1, 0) == k]


def mask_redrawn(ctx: MemoryContext, kind: str) -> bool:
    """Whether the device estimated (``ctx.dev``) draws a keyed dropout mask of ``kind`` (``"node"``, ``"edge"``)
    again in the backward instead of keeping it (:func:`gridgnn.ops.masked.redraws`: numba on the host, Triton on a
    GPU, as present where the estimate is made; ``GRIDGNN_KERNELS=torch`` turns both off)."""
    return redraws(ctx.dev, f"{kind}_mask")


def redrawn_mask_columns(ctx: MemoryContext, k: int) -> tuple[int, int]:
    """Node columns and edge columns (heads) of the dropout masks (1 byte per element) that the backward of the
    trace's call ``k`` draws again instead of reading them kept (:func:`gridgnn.ops.masked.dropped`; the widest of
    each kind, one at a time; :func:`mask_redrawn`)."""
    again = [(kind, c) for kind, c, redrawn in recomputed_at(ctx, k) if redrawn]
    return (max((c for kind, c in again if kind == "node"), default=0),
            max((c for kind, c in again if kind == "edge"), default=0))


def attention_layers(trace) -> dict:
    """``{layer: heads}`` of the layers with an aggregation whose edge values need a gradient (attention: the
    coefficients' gradient is pushed beside the rows'), with the most edge-value columns of such a call."""
    out: dict = {}
    for c in trace.calls:
        if c.name == "spmm" and c.grads and c.grads[0] and c.width:
            out[c.layer] = max(out.get(c.layer, 0), c.heads)
    return out


def _edge_valued(call) -> bool:
    """A primitive of an attention chain: it makes or takes edge values that need a gradient."""
    return call.name in ("sddmm_add", "sddmm_dot", "edge_softmax") or \
        call.name in ("spmm", "spmm_select") and bool(call.grads) and call.grads[0] and call.heads > 0


# ----------------------------------------------------------------------------------------------- the step's moments
#: the optimizer's step: the backward has freed every saved tensor but those held all the step (position 0)
STEP_MOMENT = (0, "the optimizer step")


def forward_calls(trace) -> list:
    """``(index, call)`` of the trace's calls that the forward makes (not the trainer's ``param_grad`` sums)."""
    return [(k, c) for k, c in enumerate(trace.calls) if c.name != "param_grad"]


def backward_of(ctx: MemoryContext, k: int) -> Moment:
    """The moment of the backward of the trace's call ``k``: what the forward saved up to and during that call is
    still held (the later calls' backward has freed theirs)."""
    c = ctx.trace.calls[k]
    return (k + 1, f"layer {c.layer} {c.name} backward (call {k})")


def selection_forward(ctx: MemoryContext, k: int) -> Moment:
    """The moment of the forward of the trace's call ``k``, a selecting aggregation (``spmm_select``: its messages
    and running winners, :func:`selection_bytes`): what the calls before it saved is held."""
    return (k, f"layer {ctx.trace.calls[k].layer} spmm_select forward (call {k})")


def moments_of(ctx: MemoryContext, layer: int, names=None) -> list:
    """The backward moments of layer ``layer``'s calls (of the primitives in ``names``; default every one), and the
    forward moment of a selecting aggregation among them (what it fetches is held while it selects)."""
    out = []
    for k, c in forward_calls(ctx.trace):
        if c.layer == layer and (names is None or c.name in names):
            out += [backward_of(ctx, k)] + ([selection_forward(ctx, k)] if c.name == "spmm_select" else [])
    return out


def layer_start(ctx: MemoryContext, layer: int) -> list:
    """The moment layer ``layer``'s forward starts (before its first primitive): what earlier layers saved is held."""
    ks = [k for k, c in forward_calls(ctx.trace) if c.layer == layer]
    return [(ks[0], f"layer {layer} forward")] if ks else []


def dropout_hash(acc: Ledger, ctx: MemoryContext, layer: int, elements: float) -> None:
    """The memory of hashing a dropout mask of ``elements`` (a workspace candidate, as layer ``layer``'s forward
    starts; ``ctx.hash_workspace``: bytes per element, per element of a chunk of rows, where)."""
    if ctx.dropout > 0:
        per_element, per_chunk_element, where = ctx.hash_workspace
        nbytes = per_element * elements + per_chunk_element * min(elements, hashing.DEVICE_MASK_CHUNK)
        acc.cand("workspace", nbytes, f"dropout mask hashing, layer {layer}", where, at=layer_start(ctx, layer))


def traced(acc: Ledger, ctx: MemoryContext, rank: int, node, edges, out_rows: int, out_cols: int,
           graph_of=None, *, skip=frozenset(), flags: bool = False, winners=None, product_input=None,
           memo: dict | None = None) -> None:
    r"""Activations and workspace of a traced model: every tensor autograd saved in the trace, scaled to this
    rank (``node(layout, layer, columns)`` and ``edges(layer)`` give its local elements) at the position it was
    saved at, the logits and targets (held all the step);
    the temporaries of each primitive's backward (:func:`backward_temporaries`) at its moment, and per layer the
    dropout hash of its input as it starts. ``graph_of(layer)``: which
    of the rank's graphs a layer uses (each looks the edge table up once; default: one graph for every layer).
    ``skip``: indices of saved tensors the family counts otherwise; ``flags``: the loss over logits split in class
    blocks (``sharded_cross_entropy``) keeps a flag per labelled row; ``winners(layer, columns)``: the local
    elements of a selection's winners where they do not lie as its output (default: ``node`` of their layout);
    ``product_input(layer, columns)``: the ``(rows, columns)`` of the rank's block of a layer's ``linear`` input
    (default: the layer's rows as ``node`` counts them, every column). ``memo``: what depends on ``ctx`` and the
    sizes ``node`` and ``product_input`` give alone, kept for the next rank of the same sizes (a class of ranks)."""
    e, tr = ctx.e, ctx.trace
    memo = {} if memo is None else memo

    def once(key, compute):
        if key not in memo:
            memo[key] = compute()
        return memo[key]

    m = train_rows_at(ctx.train_rows, rank, out_rows)
    for j, s in enumerate(tr.saved):
        if j in skip or s.mask and once(("redrawn", s.mask), lambda: mask_redrawn(ctx, s.mask)):  # (a mask drawn
            continue  # again is not kept)
        size = s.itemsize or e
        if s.kind == "node":
            acc.saved(node(s.layout, s.layer, s.cols) * size, s.pos)
        elif s.kind == "winners":
            acc.saved((winners(s.layer, s.cols) if winners else node(s.layout, s.layer, s.cols)) * size, s.pos)
        elif s.kind == "edge":
            acc.saved(edges(s.layer) * s.cols * size, s.pos)
        elif s.kind == "loss":  # a row per labelled logits row, at the logits' columns of this rank
            acc.saved(m * out_cols * s.cols // max(1, ctx.dims[-1]) * size, s.pos)
        else:
            acc.saved(s.cols * size, s.pos)
    acc.saved(out_rows * out_cols * e + (8 + flags) * m, 0)  # the logits, the targets (and flags)
    per_edge = 0
    if tr.edge_dim:  # the local edges' features and the mask of the input's edges (g.edge_features)
        per_edge += tr.edge_dim * e + 1
    if getattr(tr, "relations", 0):  # the local edges' per-relation mean weights (g.relation_values)
        per_edge += tr.relations * e
    if per_edge:  # once per graph of the rank (SUMMA: per matrix version, Plexus: per layer)
        first = {}
        for l in range(len(ctx.layers)):
            first.setdefault(0 if graph_of is None else graph_of(l), l)
        acc.add("features", sum(edges(l) for l in first.values()) * per_edge)
    won = {s.pos - 1: (winners(s.layer, s.cols) if winners else node(s.layout, s.layer, s.cols))
           for s in tr.saved if s.kind == "winners"}  # a selection's output block, by its call
    for k, c in forward_calls(tr):
        node_elements, edge_cols = once(("backward", k), lambda: backward_temporaries(
            ctx, k, lambda cols, l=c.layer: node(None, l, cols),
            None if product_input is None else lambda cols, l=c.layer: product_input(l, cols)))
        mask_node, mask_edge = once(("masks", k), lambda: redrawn_mask_columns(ctx, k))
        extra = 0.0
        if c.name == "spmm_select":  # its forward's selection and messages, with its input; its backward's routing
            out = won.get(k, node(None, c.layer, c.width))
            forward, extra = selection_bytes(ctx, out, edges(c.layer), c.width)
            acc.cand("workspace", forward + node(None, c.layer, c.width) * e, f"layer {c.layer} spmm_select forward",
                     at=[selection_forward(ctx, k)])
        acc.cand("workspace", (node_elements + edges(c.layer) * edge_cols) * e
                 + node(None, c.layer, mask_node) + edges(c.layer) * mask_edge + extra,
                 f"layer {c.layer} {c.name} backward temporaries", at=[backward_of(ctx, k)])
    for l, (cols, _, heads, fi) in enumerate(ctx.layers):
        if not moments_of(ctx, l):  # a layer of raw operations alone: its gradients at every moment
            acc.cand("workspace", (node(None, l, 2 * cols) + edges(l) * 2 * heads) * e, f"layer {l} backward temporaries")
        dropout_hash(acc, ctx, l, node(None, l, fi))


def params(acc: Ledger, ctx: MemoryContext, elements: float, tensors: int, *, grad_allreduce: bool) -> None:
    """Parameters, gradients and the optimizer's state (Adam's two moments: 4e per element in all),
    ``--keep best``'s copy of the best epoch's parameters (e per element) + Adam's float32 step counters; the
    optimizer's temporaries and (``grad_allreduce``) the flat gradient the trainer all-reduces."""
    e = ctx.e
    acc.add("parameters", (2 + ctx.moments + ctx.kept) * e * elements + (4 * tensors if ctx.counters else 0))
    acc.cand("workspace", e * elements, "optimizer step temporaries", at=[STEP_MOMENT])
    if grad_allreduce:
        acc.cand("buffers", e * (elements + tensors), "flat gradient of the gradient all-reduce")


def model_params(acc: Ledger, ctx: MemoryContext, *, grad_allreduce: bool) -> None:
    """Parameters of the whole model, held by every rank (block-row, SUMMA, serial)."""
    params(acc, ctx, ctx.trace.nparams, ctx.trace.ntensors, grad_allreduce=grad_allreduce)


def rows_model(acc: Ledger, ctx: MemoryContext, rank: int, rows: int, edges, graph_of=None, winners=None) -> None:
    """Activations and workspace of a model on a block of ``rows`` whole rows whose layer ``l`` has ``edges(l)``
    local edges (block-row, SUMMA): its trace scaled to the block (``graph_of``, ``winners`` as for
    :func:`traced`)."""
    traced(acc, ctx, rank, lambda lay, l, cols: rows * cols, edges, rows, ctx.dims[-1], graph_of=graph_of,
           winners=winners)
