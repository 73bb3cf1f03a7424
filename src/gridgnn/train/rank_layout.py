r"""Per-rank set-up shared by the trainer and the fidelity harness: vertex order / partition → block source
→ algorithm plan → this rank's blocks."""
from __future__ import annotations

import functools
import math
import os

import numpy as np
import scipy.sparse as sp
import torch

from ..distributed.machine import available_memory, format_gib
from ..errors import GridGnnError
from ..graph import Graph, gcn_normalize
from ..nn import GCN
from ..parallel import algorithm, build_plan, one_process
from ..parallel.registry import layout_rules
from ..parallel.trace import trace
from ..parallel.blockrow import serial_plan
from ..parallel.source import InMemorySource
from ..partition import BUILTIN_PARTITIONS, RowPartition, even_bounds
from ..planner.memory import TRACE_BYTES_PER_PARAMETER, estimate_rank_memory
from .step import LocalData

GRAPH_PARTITIONERS = ("metis", "metis-vol", "hypergraph", "balanced")
PERMUTATIONS = ("random", "single-perm", "identity", "double-perm", "balanced-perm")
#: the vertex orders that depend on ``n`` and the seed alone (cheap to build again; the others read the graph)
SEEDED_ORDERS = ("random", "single-perm", "identity", "double-perm")


def num_blocks(algo: str, world: int, replication: int) -> int:
    """Row blocks of a block-row ``algo``: P for 1D, P/c for 1.5D, 1 for serial (the registry's rule)."""
    return algorithm(algo).row_blocks(world, replication)


def vertex_blocks(algo: str, world: int, replication: int, shape) -> int:
    """The most blocks any axis of ``algo``'s layout splits the vertices into: a graph needs at least this many
    vertices."""
    return algorithm(algo).vertex_blocks(world, replication, shape)


def check_vertex_count(n: int, algo: str, world: int, replication: int, shape) -> None:
    """Refuse a graph of ``n`` vertices that ``algo`` on ``world`` processes cannot split."""
    blocks = vertex_blocks(algo, world, replication, shape)
    if n < blocks:
        raise GridGnnError(f"cannot split {n} vertices into {blocks} vertex blocks ({algo} on {world} processes)")


def make_partition(graph: Graph, parts: int, method: str, seed: int) -> RowPartition:
    r"""Block rows of the 1D/1.5D algorithms: ``random`` (default: random permutation + equal blocks),
    ``identity`` (input order, equal blocks), a graph partitioner (``metis``, ``metis-vol``, ``hypergraph``,
    ``balanced``), or a partition FILE (one part id per vertex, original order)."""
    if graph.n < parts:
        raise GridGnnError(f"cannot split {graph.n} vertices into {parts} row blocks")
    if method == "random":
        return RowPartition.random(graph.n, parts, seed)
    if method == "single-perm":  # the order `gridgnn shard --method single-perm` writes
        from ..partition.permute import single_permutation

        return RowPartition(single_permutation(graph.n, seed), even_bounds(graph.n, parts), method)
    if method == "identity":
        return RowPartition.identity(graph.n, parts)
    if method in GRAPH_PARTITIONERS:
        from ..partition.partitioners import partition_graph

        return partition_graph(graph, parts, method, seed=seed)
    if os.path.exists(method):
        from ..partition.partitioners import load_partition_file

        return load_partition_file(method, graph.n, parts)
    raise GridGnnError(f"--partition {method!r} is neither a method ({', '.join(BUILTIN_PARTITIONS + GRAPH_PARTITIONERS)}) "
                       f"nor an existing partition file")


def make_permutations(graph: Graph, method: str, seed: int, blocks: tuple[int, int], *,
                      normalized=None) -> tuple[np.ndarray, np.ndarray]:
    r"""Row and column vertex orders of the 2D/3D/Plexus layouts: ``random``/``single-perm`` (one random
    permutation), ``identity``, ``double-perm`` (Plexus §5.1: distinct row and column permutations, alternated
    by layer), ``balanced-perm`` (largest-nnz-first to the least-loaded of ``blocks`` row/column blocks; the only
    one that reads the matrix, ``normalized`` when the caller has it)."""
    from ..partition.permute import make_permutations as permutations

    if method not in PERMUTATIONS:
        raise GridGnnError(f"--partition {method!r} does not apply to 2D/3D/Plexus; choose one of "
                           f"{', '.join(PERMUTATIONS)}")
    if method != "balanced-perm":  # the others depend on n and the seed alone
        normalized = sp.csr_matrix((graph.n, graph.n))
    elif normalized is None:
        normalized = gcn_normalize(graph)
    return permutations("single-perm" if method == "random" else method, normalized, blocks[0], blocks[1],
                        seed=seed)


def order_key(algo: str, world: int, *, replication: int = 1, shape=None, method: str = "random",
              seed: int = 0) -> tuple:
    """What :func:`vertex_orders` of these arguments depends on: configurations with equal keys share their vertex
    orders (and so their block source) — a block-row partition per row-block count, a permutation per method and
    seed (and, for ``balanced-perm``, the adjacency blocks it balances)."""
    if algorithm(algo).row_partitioned:
        return ("rows", num_blocks(algo, world, replication), method, seed)
    blocks = layout_blocks(algo, tuple(shape)) if method == "balanced-perm" else None
    return ("perm", method, seed, blocks)


def layout_blocks(algo: str, shape: tuple[int, ...]) -> tuple[int, int]:
    """Row × column blocks of the adjacency shards a layout uses (for balanced-perm and reports)."""
    return algorithm(algo).layout_blocks(shape)


def make_source(graph: Graph, algo: str, world: int, *, replication: int = 1, shape=None, method: str = "random",
                seed: int = 0, normalized=None):
    r"""``(source, rows)``: the in-memory block source and, for block-row algorithms, the partition. ``normalized``:
    :math:`\hat M` of ``graph`` when the caller has it."""
    perm_r, perm_c, rows = vertex_orders(graph, algo, world, replication=replication, shape=shape, method=method,
                                         seed=seed, normalized=normalized)
    return InMemorySource(graph, perm_r, perm_c, method=method, normalized=normalized), rows


def vertex_orders(graph: Graph, algo: str, world: int, *, replication: int = 1, shape=None, method: str = "random",
                  seed: int = 0, normalized=None):
    """``(perm_r, perm_c, rows)``: the row and column vertex orders of ``algo``'s layout (``perm[new] = old``;
    the same array for one order) and, for block-row algorithms, the partition (else ``None``)."""
    if algorithm(algo).row_partitioned:
        rows = make_partition(graph, num_blocks(algo, world, replication), method, seed)
        return rows.perm, rows.perm, rows
    perm_r, perm_c = make_permutations(graph, method, seed, layout_blocks(algo, tuple(shape)), normalized=normalized)
    return perm_r, perm_c, None


def build_rank(graph: Graph, algo: str, comm, dims, *, source=None, rows: RowPartition | None = None,
               dtype=torch.float32, device="cpu", block_rows: int = 0, model=None, trace=None, edges=None):
    """Returns ``(plan, data)`` for this rank: the algorithm and the local blocks it trains on. ``model``: a
    function ``plan → model`` of the model to be trained (default: GCN on ``dims``). The model is traced first
    (:func:`model_trace`), on every rank alike: a model the layout cannot run equal to serial is refused here,
    before any collective; Plexus lays its tensors out after the trace (``trace``: that trace, when the caller has
    it already). ``edges``: the graph whose edge features the local edges read (default: ``graph``, or the
    in-memory source's)."""
    if trace is None:
        trace = model_trace(dims, model, algo, double=bool(getattr(source, "double", False)))
    if one_process(algo):
        plan = serial_plan(graph, dtype=dtype, device=device)
    else:
        plan = build_plan(algo, comm, source, dims, rows=rows, dtype=dtype, device=device, block_rows=block_rows,
                          program=trace.calls)
    plan.raw_grad_axes = trace.raw_grad_axes
    if edges is None:  # the graph whose edge features the local edges read
        edges = graph if source is None else getattr(source, "graph", None)
    attach_edge_features(plan, edges, len(dims) - 1)
    return plan, local_data(graph if source is None else source, plan, dtype=dtype, device=device)


def attach_edge_features(plan, graph, layers: int) -> None:
    """Give every layer's distributed graph the graph whose edge features and relation types its local edges read (looked up by
    original edge ids on first use, so every partition and permutation reads the same features)."""
    if graph is None or (getattr(graph, "edge_attr", None) is None
                         and getattr(graph, "edge_type_counts", None) is None):
        return
    for layer in range(layers):
        plan.graph(layer).edge_table = graph


def gcn_trace(dims, algo: str, *, dropout: bool = True, bias: bool = True, double: bool = False):
    """:func:`model_trace` of GCN on ``dims`` laid out for ``algo`` (with dropout or without, with biases or
    without; ``double``: two vertex orders), cached: what the memory model reads of GCN (the trace is the same
    whatever the dropout probability, so long as it is positive). A GCN whose parameters cannot be made here to
    trace it (:data:`~gridgnn.planner.memory.TRACE_BYTES_PER_PARAMETER` each) is refused in one line."""
    return _gcn_trace(tuple(int(d) for d in dims), str(algo), bool(dropout), bool(bias), bool(double))


@functools.lru_cache(maxsize=256)
def _gcn_trace(dims: tuple, algo: str, dropout: bool, bias: bool, double: bool):
    dims = list(dims)
    elements = sum(math.prod(s) for group in GCN.parameter_shapes(dims, bias=bias).values() for s in group)
    need, avail = TRACE_BYTES_PER_PARAMETER * elements, available_memory()
    if need > avail:  # the trace builds the model (on a 3-vertex graph): the parameters cannot be made here
        raise GridGnnError(f"GCN with widths {dims} has {elements:.3g} parameters: tracing it takes "
                           f"{format_gib(need)} but {format_gib(avail)} are free; try a smaller --hidden or fewer "
                           "--layers")

    def model(plan):
        return GCN(dims, dropout=0.5 if dropout else 0.0, bias=bias, seed=0, dtype=torch.float64, plan=plan)
    return model_trace(dims, model, algo, double=double)


def model_trace(dims, model=None, algo: str = "serial", *, double: bool = False):
    """The :class:`~gridgnn.parallel.trace.Trace` of one training step of ``model`` (``plan → model``; default GCN
    on ``dims`` with dropout, :func:`gcn_trace`) on a tiny serial plan, checked against the layouts of ``algo``
    (``double``: two vertex orders)."""
    if model is None:
        return gcn_trace(dims, algo, double=double)
    return trace(model, dims[0], algorithm(algo).traits, layout_rules(algo, double=double))


def local_data(src, plan, *, dtype, device) -> LocalData:
    """This rank's input block, and labels/masks of its logits rows, from a Graph or a block source."""
    def rows(name, ids):
        if isinstance(src, Graph):
            a = getattr(src, name)
            return None if a is None else np.asarray(a)[ids]
        return src.node_rows(name, ids)

    n_train = _train_count(src)
    ids = plan.out_rows()
    y = rows("y", ids)
    if y is None:  # an unlabelled dataset (inference): every row unlabelled, as -1 marks it
        y = np.full(len(ids), -1, dtype=np.int64)
    masks = {}
    for name in ("train", "val", "test"):
        m = rows(f"{name}_mask", ids)
        m = np.zeros(len(ids), bool) if m is None else np.asarray(m, bool)
        masks[name] = torch.from_numpy(m & (y >= 0)).to(device)
    x = plan.input(src.x if isinstance(src, Graph) else None)
    if not isinstance(x, torch.Tensor):
        x = torch.from_numpy(np.asarray(x, dtype=np.float64))
    return LocalData(x=x.to(dtype).to(device), y=torch.from_numpy(np.asarray(y, dtype=np.int64)).to(device),
                     masks=masks, node_ids=ids, n_train=n_train)


def _train_count(src) -> int:
    if isinstance(src, Graph):
        if src.train_mask is None or src.y is None:
            raise GridGnnError("the graph has no labelled training nodes")
        return int((src.train_mask & (src.y >= 0)).sum())
    if hasattr(src, "graph"):
        return _train_count(src.graph)
    return int(src.graph_meta()["n_train"])


def estimate_memory(graph: Graph | None, source, algo: str, shape, dims, *, rows: RowPartition | None = None,
                    elem_bytes: int, dropout: float, block_rows: int = 0, device: str = "cpu", trace=None,
                    overlap: bool = False, keep_best: bool = False, optimizer_state: tuple[int, bool] = (2, True),
                    handed: bool = False):
    r"""The :class:`~gridgnn.planner.memory.MemoryEstimate` of every rank of this run, from what each rank
    knows before it builds its plan: the graph (or the sharded dataset's ``meta.json``), the layout (``rows``
    of a block-row algorithm, the vertex orders of ``source``) and the model whose :func:`model_trace` on
    ``algo`` is ``trace`` (``None``: GCN on the widths ``dims``);
    ``keep_best``: ``--keep best``'s copy of the parameters; ``optimizer_state``: the optimizer's state tensors per
    parameter and whether it counts steps (:func:`~gridgnn.train.optim.memory_state`); ``handed``: a plan of a run
    whose ranks will receive ``graph`` as shards (:func:`~gridgnn.train.launching.ranks_get_shards`), estimated as
    those ranks estimate it. Every rank computes the same numbers, so a run that cannot fit is refused alike on
    every rank."""
    from ..partition.counts import pattern_of

    double = bool(getattr(source, "double", False))
    in_memory = graph is not None and not handed
    g_or_src = graph if graph is not None else source
    weighted = in_memory and graph.values is not None
    if trace is None:
        trace = gcn_trace(tuple(dims), algo, dropout=dropout > 0, double=double)
    return estimate_rank_memory(
        algo, (1,) if one_process(algo) else tuple(shape), g_or_src.n,
        graph.nnz if graph is not None else int(source.meta["nnz"]), dims, elem_bytes=elem_bytes,
        directed=bool(g_or_src.directed), double=double, row_bounds=None if rows is None else rows.bounds,
        pattern=None if source is None else pattern_of(source, layers=len(dims) - 1),
        dropout=dropout, block_rows=block_rows, source=("memory" if in_memory else "sharded"),
        weighted=weighted, device=device, trace=trace, overlap=overlap, keep_best=keep_best,
        optimizer_state=optimizer_state,
        feature_bytes=graph.x.dtype.itemsize if in_memory and graph.x is not None else 4)
