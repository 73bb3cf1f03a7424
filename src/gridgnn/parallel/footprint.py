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

from dataclasses import dataclass

import numpy as np

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
        overlap: ``--overlap`` (two transfers in flight); hash_bytes: host bytes per element the dropout hash
            allocates; kept: 1 with ``--keep best``'s copy of the parameters; moments: the optimizer's state tensors
            per parameter; counters: it keeps float32 step counters; edge_ids: the model asks for the edges'
            original ids (:attr:`~gridgnn.parallel.trace.Trace.edge_ids`), which a graph then keeps (host);
            off_diagonal: it asks for the self-loop mask built from them (``g.off_diagonal``, kept on the device).
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
    hash_bytes: int
    kept: int
    moments: int
    counters: bool
    edge_ids: bool = False
    off_diagonal: bool = False


class Ledger:
    """One rank's contributions per component, tagged host (``"host"``) or the computing device (``"dev"``):
    :meth:`add` sums, :meth:`cand` keeps the largest candidate of a peak component with what it is."""

    def __init__(self):
        self.sums = {"dev": dict.fromkeys(COMPONENTS, 0), "host": dict.fromkeys(COMPONENTS, 0)}
        self.cands = {"dev": {k: (0, "") for k in MAX_COMPONENTS}, "host": {k: (0, "") for k in MAX_COMPONENTS}}

    def add(self, comp: str, nbytes, where: str = "dev") -> None:
        self.sums[where][comp] += int(round(nbytes))

    def copy(self) -> "Ledger":
        """An independent ledger of the same contributions (a rank of the same sizes as this one's)."""
        out = Ledger()
        out.sums = {w: dict(d) for w, d in self.sums.items()}
        out.cands = {w: dict(d) for w, d in self.cands.items()}
        return out

    def cand(self, comp: str, nbytes, what: str, where: str = "dev") -> None:
        nbytes = int(round(nbytes))
        if nbytes > self.cands[where][comp][0]:
            self.cands[where][comp] = (nbytes, what)

    def pick(self, where_list) -> tuple[dict, dict]:
        """``(bytes per component, what each peak component is)`` over the tags in ``where_list``."""
        out, what = {}, {}
        for comp in COMPONENTS:
            if comp in MAX_COMPONENTS:
                best = (0, "")
                for w in where_list:  # the largest candidate (the first of equal ones)
                    if self.cands[w][comp][0] > best[0]:
                        best = self.cands[w][comp]
                out[comp], what[comp] = best
            else:
                out[comp] = sum(self.sums[w][comp] for w in where_list)
        return out, what


# ----------------------------------------------------------------------------------------------- shared rules
def edge_id_bytes(acc: "Ledger", ctx: MemoryContext, edges: float) -> None:
    """What a graph of ``edges`` local edges keeps of their original ids where the model asks for them: the ids (16
    bytes per edge, host) and the self-loop mask made of them (one byte per edge, on the device)."""
    acc.add("adjacency", 16 * edges * ctx.edge_ids, "host")
    acc.add("adjacency", edges * ctx.off_diagonal)


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


def backward_temporaries(ctx: MemoryContext, layer: int) -> tuple[int, int]:
    """Node columns and edge columns of layer ``layer``'s backward temporaries: two node tensors of the widest
    kept width and the fetched width, two edge tensors of the widest heads, and the dropout outputs the backward
    recomputes (:attr:`~gridgnn.parallel.trace.Trace.recomputed`)."""
    cols, fetched, heads, _ = ctx.layers[layer]
    again = [(kind, c) for l, kind, c in ctx.trace.recomputed if l == layer]
    return (2 * cols + fetched + max((c for kind, c in again if kind == "node"), default=0),
            2 * heads + max((c for kind, c in again if kind == "edge"), default=0))


def dropout_hash(acc: Ledger, ctx: MemoryContext, layer: int, elements: float) -> None:
    """The host memory of hashing a dropout mask of ``elements`` (a workspace candidate)."""
    if ctx.dropout > 0:
        acc.cand("workspace", ctx.hash_bytes * elements, f"dropout mask hashing, layer {layer}", "host")


def traced(acc: Ledger, ctx: MemoryContext, rank: int, node, edges, out_rows: int, out_cols: int,
           graph_of=None, *, skip=frozenset(), flags: bool = False) -> None:
    r"""Activations and workspace of a traced model: every tensor autograd saved in the trace, scaled to this
    rank (``node(layout, layer, columns)`` and ``edges(layer)`` give its local elements), the logits and targets;
    per layer the backward's temporaries (two node tensors of the widest kept width, the fetched width, and two
    edge tensors of the widest heads, the dropout outputs it recomputes: :func:`backward_temporaries`) and the
    dropout hash of its input. ``graph_of(layer)``: which of the rank's
    graphs a layer uses (each looks the edge table up once; default: one graph for every layer). ``skip``: indices
    of saved tensors the family counts otherwise; ``flags``: the loss over logits split in class blocks
    (``sharded_cross_entropy``) keeps a flag per labelled row."""
    e, tr = ctx.e, ctx.trace
    m = train_rows_at(ctx.train_rows, rank, out_rows)
    for j, s in enumerate(tr.saved):
        if j in skip:
            continue
        size = s.itemsize or e
        if s.kind == "node":
            acc.add("activations", node(s.layout, s.layer, s.cols) * size)
        elif s.kind == "edge":
            acc.add("activations", edges(s.layer) * s.cols * size)
        elif s.kind == "loss":  # a row per labelled logits row, at the logits' columns of this rank
            acc.add("activations", m * out_cols * s.cols // max(1, ctx.dims[-1]) * size)
        else:
            acc.add("activations", s.cols * size)
    acc.add("activations", out_rows * out_cols * e + (8 + flags) * m)  # the logits, the targets (and flags)
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
    for l, (_, _, _, fi) in enumerate(ctx.layers):
        node_cols, edge_cols = backward_temporaries(ctx, l)
        acc.cand("workspace", (node(None, l, node_cols) + edges(l) * edge_cols) * e, f"layer {l} backward temporaries")
        dropout_hash(acc, ctx, l, node(None, l, fi))


def params(acc: Ledger, ctx: MemoryContext, elements: float, tensors: int, *, grad_allreduce: bool) -> None:
    """Parameters, gradients and the optimizer's state (Adam's two moments: 4e per element in all),
    ``--keep best``'s copy of the best epoch's parameters (e per element) + Adam's float32 step counters; the
    optimizer's temporaries and (``grad_allreduce``) the flat gradient the trainer all-reduces."""
    e = ctx.e
    acc.add("parameters", (2 + ctx.moments + ctx.kept) * e * elements + (4 * tensors if ctx.counters else 0))
    acc.cand("workspace", e * elements, "optimizer step temporaries")
    if grad_allreduce:
        acc.cand("buffers", e * elements, "flat gradient of the gradient all-reduce")


def model_params(acc: Ledger, ctx: MemoryContext, *, grad_allreduce: bool) -> None:
    """Parameters of the whole model, held by every rank (block-row, SUMMA, serial)."""
    params(acc, ctx, ctx.trace.nparams, ctx.trace.ntensors, grad_allreduce=grad_allreduce)


def rows_model(acc: Ledger, ctx: MemoryContext, rank: int, rows: int, edges, graph_of=None) -> None:
    """Activations and workspace of a model on a block of ``rows`` whole rows whose layer ``l`` has ``edges(l)``
    local edges (block-row, SUMMA): its trace scaled to the block (``graph_of`` as for :func:`traced`)."""
    traced(acc, ctx, rank, lambda lay, l, cols: rows * cols, edges, rows, ctx.dims[-1], graph_of=graph_of)
