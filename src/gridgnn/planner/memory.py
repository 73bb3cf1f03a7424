r"""Memory guard: the peak memory of every rank, estimated from the layout before anything large is allocated,
the memory a rank may use, the peak it actually used, and the two checks that fail early with the numbers.

A rank's peak is the sum of eight components — ``runtime``, ``graph``, ``adjacency``, ``features``,
``parameters``, ``activations``, ``buffers`` and ``workspace`` (:data:`~gridgnn.parallel.footprint.COMPONENTS`) —
whose formulas, inputs and measured constants ``docs/memory.md`` states. Each family's part is its family object's
:meth:`~gridgnn.parallel.family.Family.memory` (in its file, written into a
:class:`~gridgnn.parallel.footprint.Ledger` from the records of its schedule); this module adds what is the same for
every family — the runtime, the whole-graph copy (:func:`graph_copy_bytes`) and the set-up transient — and checks
the sum (:func:`check_fits`). Every model, GCN included, is read from its trace
(:func:`gridgnn.parallel.trace.trace`: what autograd saves, the primitive calls); GCN's activations, parameters,
adjacency and features are then exact (tested byte for byte against real steps).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..distributed.machine import (MIB, RUNTIME_PRIVATE_BYTES,
                                  RUNTIME_SHARED_BYTES, format_gib)
from ..errors import GridGnnError
from ..ops import kernels, triton_kernels
from ..ops.device_paths import device_paths
from ..parallel.footprint import Ledger, MemoryContext, layers_of
from ..partition.counts import nnz_patterns

#: Allowance on a CUDA device for cuBLAS/cuSPARSE workspaces (not measured here: no GPU on the build machine;
#: cuBLAS reserves up to 32 MiB per handle on Hopper). The CUDA context itself is already outside
#: ``torch.cuda.mem_get_info``'s free bytes when a rank asks.
CUDA_RUNTIME_BYTES = 64 * MIB
#: Peak of :func:`~gridgnn.graph.gcn_normalize` (its result included): ``36 ẑ + 44 n`` bytes (tracemalloc).
NORMALIZE_PEAK_BYTES_PER_NNZ, NORMALIZE_PEAK_BYTES_PER_NODE = 36, 44
#: Peak of permuting :math:`\hat M` (``M[perm_r][:, perm_c]``, the result included): ``25 ẑ + 21 n`` bytes.
PERMUTE_PEAK_BYTES_PER_NNZ, PERMUTE_PEAK_BYTES_PER_NODE = 25, 21
#: Peak of reading a submatrix from a sharded dataset (the returned block included), per nonzero read.
SHARDED_READ_PEAK_BYTES_PER_NNZ = 48
#: Peak of :func:`~gridgnn.nn.dropout.keep_mask_reference` per element of the masked block (three ``uint64``
#: arrays); the numba kernel (:func:`~gridgnn.ops.kernels.keyed_mask`) allocates only the 1-byte mask.
DROPOUT_HASH_BYTES_PER_ELEMENT = 24
DROPOUT_FUSED_HASH_BYTES_PER_ELEMENT = 1
#: Peak of :func:`~gridgnn.nn.dropout.keep_mask_tensor` on a device without Triton per element of a chunk of rows
#: (:data:`~gridgnn.ops.hashing.DEVICE_MASK_CHUNK` elements at most: three ``int64`` temporaries), beside the 1-byte
#: mask of every element (torch's profiler, the host taking the device's paths)
DROPOUT_DEVICE_HASH_BYTES_PER_CHUNK_ELEMENT = 24


def dropout_hash_workspace(device: str) -> tuple[int, int, str]:
    """``(bytes per masked element, bytes per element of a chunk, where)`` while a rank on ``device`` hashes a
    dropout mask (the kernel it would use, :func:`~gridgnn.ops.device_paths.device_paths`): on the host the numba
    kernel (the mask alone) or NumPy's reference; on a device Triton's kernel (the mask alone) or the torch
    ``int64`` reference by chunks of rows (``"dev"``: in the device's memory)."""
    if not device_paths(device):
        return (DROPOUT_FUSED_HASH_BYTES_PER_ELEMENT if kernels.enabled() else DROPOUT_HASH_BYTES_PER_ELEMENT), 0, \
            "host"
    if triton_kernels.usable(device) and triton_kernels.on("node_mask"):
        return DROPOUT_FUSED_HASH_BYTES_PER_ELEMENT, 0, "dev"
    return DROPOUT_FUSED_HASH_BYTES_PER_ELEMENT, DROPOUT_DEVICE_HASH_BYTES_PER_CHUNK_ELEMENT, "dev"



# ----------------------------------------------------------------------------------------------- results
@dataclass(frozen=True)
class RankMemory:
    r"""Estimated peak bytes of one rank.

    Attributes:
        rank: global rank.
        per_component: bytes per component (:data:`~gridgnn.parallel.footprint.COMPONENTS`) in the memory the rank computes in (host
            memory on CPU, the GPU's memory on CUDA).
        host_per_component: CUDA only: what stays in host memory (runtime, the graph copy, SciPy blocks,
            the dropout hash, set-up transients); empty on CPU, where everything is in ``per_component``.
        buffers_what, workspace_what: what the ``buffers`` / ``workspace`` at the peak are.
        moment: the moment of the step the peak comes at (the backward of a layer's primitive, the start of a
            layer's forward, the end of the forward, the optimizer step); ``per_component["activations"]`` are the saved tensors still held then.
            ``"the set-up"`` where the set-up transient is the peak: the ``workspace`` then holds what it needs
            beyond the components (the step's peak moment's) that exist later.
        saved_activations: every tensor autograd keeps by the end of the forward, with the logits (the
            activations component at that moment).
        largest: the largest ``buffers`` and ``workspace`` of any moment of the step (in the memory the rank
            computes in).
    """

    rank: int
    per_component: dict
    host_per_component: dict = field(default_factory=dict)
    buffers_what: str = ""
    workspace_what: str = ""
    moment: str = ""
    saved_activations: int = 0
    largest: dict = field(default_factory=dict)

    @property
    def total(self) -> int:
        return int(sum(self.per_component.values()))

    @property
    def host_total(self) -> int:
        return int(sum(self.host_per_component.values()))


@dataclass(frozen=True)
class MemoryEstimate:
    r"""Per-rank estimates of one configuration; ``total`` and ``per_component`` are those of the peak rank.

    Attributes:
        algo, shape, device: the configuration (``device`` ``"cpu"`` or ``"cuda"``).
        elem_bytes: bytes per element of the training dtype.
        ranks: one :class:`RankMemory` per rank (those asked for, in order).
    """

    algo: str
    shape: tuple
    device: str
    ranks: tuple
    elem_bytes: int = 4

    @property
    def peak(self) -> RankMemory:
        """The rank with the largest total (the first one on ties)."""
        return max(self.ranks, key=lambda r: (r.total, -r.rank))

    @property
    def total(self) -> int:
        return self.peak.total

    @property
    def per_component(self) -> dict:
        return dict(self.peak.per_component)

    @property
    def host_total(self) -> int:
        """CUDA: the largest host-memory share of a rank (0 on CPU)."""
        return max(r.host_total for r in self.ranks)

    def describe(self) -> str:
        """``"1.23 GiB (adjacency 0.5 GiB, ...)"`` of the peak rank."""
        parts = ", ".join(f"{k} {format_gib(v)}" for k, v in self.per_component.items() if v > 0)
        return f"{format_gib(self.total)} ({parts})"


def _finish(acc: Ledger, rank: int, device: str, setup: tuple[float, str]) -> RankMemory:
    """One rank's :class:`RankMemory` from its ledger. ``setup = (bytes, what)``: the set-up transient beyond the
    runtime and the graph copy (host memory); it counts where it exceeds what exists later (see the module
    docstring)."""
    later_parts = ("adjacency", "features", "parameters", "activations", "buffers")
    if device == "cpu":
        comps, what = acc.pick(("dev", "host"))
        later = sum(comps[k] for k in later_parts)
        if setup[0] - later > comps["workspace"]:
            comps["workspace"], what["workspace"], what["moment"] = int(setup[0] - later), setup[1], "the set-up"
        return RankMemory(rank, comps, {}, what["buffers"], what["workspace"], what["moment"],
                          acc.sums["dev"]["activations"] + acc.sums["host"]["activations"], acc.largest(("dev", "host")))
    dev, what = acc.pick(("dev",))
    host, hwhat = acc.pick(("host",))
    later = sum(host[k] for k in later_parts)
    if setup[0] - later > host["workspace"]:
        host["workspace"], hwhat["workspace"] = int(setup[0] - later), setup[1]
    return RankMemory(rank, dev, host, what["buffers"], what["workspace"] or hwhat["workspace"], what["moment"],
                      acc.sums["dev"]["activations"], acc.largest(("dev",)))


# ----------------------------------------------------------------------------------------------- helpers
def _index_bytes(n: int, nnz: float) -> int:
    """SciPy's index dtype: int32 while shape and nnz fit, else int64."""
    return 4 if max(n, nnz) <= np.iinfo(np.int32).max else 8


def graph_copy_bytes(n: int, nnz: int, f0: int, *, source: str = "memory", nnz_hat: int | None = None,
                     versions: int = 1, feature_bytes: int = 4, weighted: bool = False, labels: bool = True,
                     orders: int = 1) -> int:
    r"""Bytes of the whole-graph data a rank's process holds (the ``graph`` component).

    ``source="memory"`` (:class:`~gridgnn.parallel.source.InMemorySource`): the Graph
    :math:`8(n+1) + 8\,nnz\,[+ 8\,nnz] + n f_0 s_x + [8n + 3n]`, the normalized :math:`\hat M` and ``versions``
    permuted copies, :math:`(1+\text{versions})(8\hat z + \iota(\hat z + n + 1))`, and ``orders`` vertex orders
    :math:`8n`; ``"serial"``: the Graph only (:math:`\hat M` lives in the plan as torch tensors);
    ``"sharded"``: the two orders :math:`16n`; ``"none"``: 0.
    """
    nnz_hat = nnz + n if nnz_hat is None else nnz_hat
    graph = 8 * (n + 1) + 8 * nnz + (8 * nnz if weighted else 0) + n * f0 * feature_bytes + (11 * n if labels else 0)
    if source == "serial":
        return int(graph)
    if source == "sharded":
        return 16 * n
    if source == "none":
        return 0
    if source != "memory":
        raise GridGnnError(f"unknown graph source {source!r}; use memory, serial, sharded or none")
    idx = _index_bytes(n, nnz_hat)
    mat = 8 * nnz_hat + idx * (nnz_hat + n + 1)
    return int(graph + (1 + versions) * mat + orders * 8 * n)


# ----------------------------------------------------------------------------------------------- estimate
#: Bytes per parameter of a trace of a model (its float64 parameters, their gradients and Glorot's draws)
TRACE_BYTES_PER_PARAMETER = 24


def estimate_rank_memory(algo: str, shape, n: int, nnz: int, dims, *, elem_bytes: int = 4,
                         directed: bool = False, double: bool = False, row_bounds=None, pattern=None,
                         dropout: float = 0.5, block_rows: int = 0, train_rows=None,
                         source: str | None = None, feature_bytes: int = 4, weighted: bool = False,
                         device: str = "cpu", runtime_bytes: int | None = None, ranks=None,
                         trace=None, overlap: bool = False, keep_best: bool = False,
                         optimizer_state: tuple[int, bool] = (2, True)) -> MemoryEstimate:
    r"""Peak memory of every rank of one training configuration (``docs/memory.md`` states the components and
    their formulas) of the model whose :class:`~gridgnn.parallel.trace.Trace` is ``trace``.

    Args:
        algo: ``serial``, ``1d``, ``1d-sa``, ``1.5d``, ``1.5d-sa``, ``2d``, ``3d`` or ``plexus``.
        shape: the mesh shape (``(P,)``, ``(P/c, c)``, ``(pr, pc)``, ``(x, y, z)``; serial ``(1,)``).
        n, nnz: vertices and stored edges of the graph (``Graph.nnz``; :math:`\hat M` adds up to ``n``
            self-loops, counted exactly when ``pattern`` is given).
        dims: ``[f_0, hidden..., classes]``.
        elem_bytes: bytes per element of the training dtype (4 float32, 8 float64).
        directed: the graph is directed (row-block and SUMMA plans keep the transposed blocks).
        double: the 2D/3D/Plexus layout has two vertex orders (``double-perm``): two matrix versions.
        row_bounds: block bounds of the 1D/1.5D row partition (``RowPartition.bounds``; default even).
        pattern: nonzeros of the permuted :math:`\hat M` in the plan's labels: a SciPy matrix (exact), an
            :class:`~gridgnn.partition.counts.NnzHistogram`, or ``{"rc": ..., "cr": ...}`` (see :func:`~gridgnn.partition.counts.pattern_of`); default: spread
            evenly.
        dropout: drop probability (masks and hashing exist only when it is positive).
        block_rows: Plexus blocked aggregation (0 = off).
        train_rows: labelled training rows among each rank's logits rows (an int, a sequence by rank or
            ``rank -> int``); default all of them (an upper bound).
        source: ``"memory"`` (default; ``"serial"`` for ``algo="serial"``), ``"sharded"`` or ``"none"``:
            what the process holds of the whole graph (:func:`graph_copy_bytes`).
        feature_bytes: bytes per element of the stored features (``Graph.x``, float32 by default).
        weighted: the Graph stores edge weights.
        device: ``"cpu"`` or ``"cuda"`` (``per_component`` is then GPU memory; the host part is reported
            separately).
        runtime_bytes: the per-process baseline (default :data:`~gridgnn.distributed.machine.RUNTIME_PRIVATE_BYTES` +
            :data:`~gridgnn.distributed.machine.RUNTIME_SHARED_BYTES` on CPU, :data:`CUDA_RUNTIME_BYTES` on the GPU).
        ranks: which global ranks to estimate (default all).
        trace: the model's trace on this algorithm (:func:`gridgnn.train.rank_layout.model_trace`; GCN's on
            ``dims``: :func:`gridgnn.train.rank_layout.gcn_trace`); required.
        overlap: ``--overlap``: the oblivious stage loops hold two remote blocks at a time.
        keep_best: ``--keep best``: every rank holds a copy of its parameters from the best epoch so far.
        optimizer_state: ``(tensors, step counters)``: the optimizer's state tensors per parameter (Adam and AdamW
            2, SGD with momentum 1, plain SGD 0) and whether it counts steps (Adam's float32 counters).

    Returns:
        :class:`MemoryEstimate` (``.ranks`` per rank, ``.peak``, ``.total``, ``.per_component``).

    Raises:
        GridGnnError: an unknown algorithm, a shape that does not fit it, or no ``trace``.
    """
    from ..parallel import algorithm

    spec = algorithm(algo)
    dims = [int(d) for d in dims]
    if len(dims) < 2 or min(dims) < 1:
        raise GridGnnError(f"dims must hold at least two positive widths, got {dims}")
    if trace is None:  # the model is a room above: its trace comes from there
        raise GridGnnError("estimate_rank_memory needs the model's trace (gridgnn.train.rank_layout.model_trace, "
                           "or gcn_trace for GCN)")
    single = spec.one_process
    shape = (1,) if single else tuple(int(s) for s in shape)
    if min(shape) < 1:
        raise GridGnnError(f"mesh shape {shape} has an empty axis")
    dev = "cuda" if str(device).startswith("cuda") else "cpu"
    world = math.prod(shape)
    nnz_hat_given = nnz + n
    pats = nnz_patterns(pattern, n, nnz_hat_given)
    nnz_hat = pats["rc"].total
    e = int(elem_bytes)
    src_kind = source or "memory"
    if single and src_kind == "memory":
        src_kind = "serial"  # the serial plan converts M̂ to torch tensors and keeps no SciPy copy
    L = len(dims) - 1
    double = bool(double) and not spec.row_partitioned
    versions = 2 if double and L >= 2 else 1  # the "cr" version is built only when an odd layer uses it
    graph_bytes = graph_copy_bytes(n, nnz, dims[0], source=src_kind, nnz_hat=nnz_hat, versions=versions,
                                   feature_bytes=feature_bytes, weighted=weighted, orders=2 if double else 1)
    edge_dim = getattr(trace, "edge_dim", 0) or 0
    if edge_dim and src_kind != "none":
        # a model that reads edge features: the whole table each rank looks its edges up in (``edge_attr`` as
        # loaded, counted at feature_bytes; a sharded dataset's handed-over table adds its CSR), and the lookup's
        # int64 keys of every edge
        graph_bytes += nnz * edge_dim * feature_bytes + 16 * nnz + (8 * (n + 1 + nnz) if src_kind == "sharded" else 0)
    relations = getattr(trace, "relations", 0) or 0
    if relations and src_kind != "none":
        # a model that reads relation types: the whole table of per-entry relation counts (int32), the relations'
        # in-degrees (float64, n × R) and the lookup's int64 keys of every edge (the CSR of a handed-over table)
        graph_bytes += nnz * relations * 4 + n * relations * 8 + 16 * nnz \
            + (8 * (n + 1 + nnz) if src_kind == "sharded" and not edge_dim else 0)
    ctx = MemoryContext(n=n, dims=dims, e=e, directed=bool(directed), double=double, pats=pats,
                        dropout=float(dropout), train_rows=train_rows, idx=_index_bytes(n, nnz_hat),
                        block_rows=int(block_rows), src=src_kind, dev=dev, versions=versions, trace=trace,
                        layers=layers_of(dims, trace), overlap=bool(overlap), hash_workspace=dropout_hash_workspace(dev),
                        kept=int(bool(keep_best)), moments=int(optimizer_state[0]), counters=bool(optimizer_state[1]),
                        edge_ids=bool(getattr(trace, "edge_ids", False)),
                        off_diagonal=bool(getattr(trace, "off_diagonal", False)),
                        select_layers=frozenset(c.layer for c in trace.calls if c.name == "spmm_select"))
    which = range(world) if ranks is None else [int(r) for r in ranks]
    for r in which:
        if not 0 <= r < world:
            raise GridGnnError(f"rank {r} outside the {world} ranks of mesh {shape}")
    per = spec.family.memory(spec, ctx, shape, row_bounds=row_bounds, ranks=which)
    out = []
    for r in which:
        acc, read_nnz = per[r]
        host_runtime = RUNTIME_PRIVATE_BYTES + RUNTIME_SHARED_BYTES
        if dev == "cpu":
            acc.add("runtime", host_runtime if runtime_bytes is None else runtime_bytes, "host")
        else:
            acc.add("runtime", CUDA_RUNTIME_BYTES if runtime_bytes is None else runtime_bytes, "dev")
            acc.add("runtime", host_runtime, "host")
        acc.add("graph", graph_bytes, "host")
        out.append(_finish(acc, r, dev, _setup_transient(ctx, read_nnz)))
    return MemoryEstimate(algo, shape, dev, tuple(out), e)


def _setup_transient(ctx, read_nnz: float) -> tuple[float, str]:
    r"""Set-up peak beyond the graph component: normalizing and permuting :math:`\hat M` (in memory), or
    reading the largest block (sharded)."""
    n, nnz_hat, idx = ctx.n, ctx.pats["rc"].total, ctx.idx
    mat = 8 * nnz_hat + idx * (nnz_hat + n + 1)
    norm_peak = NORMALIZE_PEAK_BYTES_PER_NNZ * nnz_hat + NORMALIZE_PEAK_BYTES_PER_NODE * n
    if ctx.src == "serial":
        return norm_peak, "gcn_normalize at set-up"
    if ctx.src == "memory":
        versions = ctx.versions
        a = norm_peak - (1 + versions) * mat
        b = PERMUTE_PEAK_BYTES_PER_NNZ * nnz_hat + PERMUTE_PEAK_BYTES_PER_NODE * n - mat
        return (a, "gcn_normalize at set-up") if a >= b else (b, "permuting the normalized matrix at set-up")
    if ctx.src == "sharded":
        return SHARDED_READ_PEAK_BYTES_PER_NNZ * read_nnz, "reading the largest shard at set-up"
    return 0.0, ""


# ----------------------------------------------------------------------------------------------- checks
def _advice(estimate: "MemoryEstimate", comps: list) -> str:
    """What to change, from the largest components of the peak rank (at most three, no repeats)."""
    out = []
    for k, _ in comps:
        if k == "graph" or (k == "workspace" and "set-up" in estimate.peak.workspace_what):
            a = "a sharded dataset (gridgnn shard, then --data sharded:DIR) so that no rank holds the whole graph"
        elif k == "workspace" and "dropout" in estimate.peak.workspace_what:
            a = "--dropout 0 (no dropout-mask hashing)"
        elif k in ("activations", "parameters", "workspace"):
            a = "a smaller --hidden or fewer --layers"
        elif k in ("adjacency", "features", "buffers"):
            a = "more processes (on more machines)"
        elif k == "runtime":
            a = "fewer local processes"
        else:
            continue
        if a not in out:
            out.append(a)
        if len(out) == 3:
            break
    if estimate.elem_bytes == 8:
        out.append("--dtype float32")
    if not out:
        return "a machine with more memory"
    return ", ".join(out[:-1]) + " or " + out[-1] if len(out) > 1 else out[0]


def check_fits(estimate: MemoryEstimate, available: int, *, nproc_local: int = 1) -> None:
    r"""Raise :class:`~gridgnn.errors.GridGnnError` when the peak rank cannot fit.

    ``available`` is the free memory of the machine (CPU, measured before the ranks started) or of the rank's
    GPU (CUDA), shared by ``nproc_local`` ranks. The shared-library pages (:data:`~gridgnn.distributed.machine.RUNTIME_SHARED_BYTES`) are
    counted once per machine on CPU: the ranks fit when :math:`N (\text{total} - S) + S \le \text{available}`,
    i.e. when the peak rank's total is at most :math:`(\text{available} - S)/N + S` "per rank". The one-line
    message prints the peak rank's need and components, the memory per rank and what to change.
    """
    if nproc_local < 1:
        raise GridGnnError(f"nproc_local must be >= 1, got {nproc_local}")
    peak = estimate.peak
    need = peak.total
    shared = RUNTIME_SHARED_BYTES if estimate.device == "cpu" and \
        peak.per_component.get("runtime", 0) >= RUNTIME_SHARED_BYTES else 0
    per_rank = (available - shared) / nproc_local + shared
    if need <= per_rank:
        return
    listed = ", ".join(f"{k} {format_gib(v)}" for k, v in peak.per_component.items() if v > 0)
    # advice from the components that matter (a tenth of the need or more), largest first
    comps = sorted(((k, v) for k, v in peak.per_component.items() if v >= 0.1 * need), key=lambda kv: -kv[1])
    where = "GPU memory" if estimate.device == "cuda" else "memory"
    procs = f"{nproc_local} local process{'es' if nproc_local != 1 else ''}"
    who = f"each rank needs about {format_gib(need)} ({listed})" if len(estimate.ranks) == 1 else \
        f"each rank needs up to about {format_gib(need)} (rank {peak.rank} of {estimate.algo}: {listed})"
    raise GridGnnError(
        f"{who} but {format_gib(max(per_rank, 0))} of {where} are available per rank ({format_gib(available)} free "
        f"for {procs}); use {_advice(estimate, comps)}")
