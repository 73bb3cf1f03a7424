r"""Memory guard: the peak memory of every rank, estimated from the layout before anything large is allocated,
the memory a rank may use, the peak it actually used, and the two checks that fail early with the numbers.

A rank's peak is the sum of eight components (bytes; :math:`e` = bytes per element of ``--dtype``,
:math:`\iota` = bytes of a SciPy index, 4 below :math:`2^{31}` rows and entries, else 8;
:math:`\hat z` = nonzeros of the normalized matrix :math:`\hat M` (the graph's ``nnz`` plus the self-loops that
:func:`~gridgnn.graph.gcn_normalize` adds, at most ``n``)):

=============== =======================================================================================
``runtime``     the Python/torch process itself (:data:`~gridgnn.distributed.machine.RUNTIME_PRIVATE_BYTES` +
                :data:`~gridgnn.distributed.machine.RUNTIME_SHARED_BYTES`, measured, see below)
``graph``       what the process holds of the whole graph: in memory (``source="memory"``), the
                :class:`~gridgnn.graph.Graph` (``8(n+1) + 8 nnz`` CSR, ``[8 nnz]`` weights,
                ``n f_0 s_x`` features, ``8n`` labels, ``3n`` masks), the normalized :math:`\hat M` and
                each permuted version (``8 ẑ + ι(ẑ + n + 1)`` each, 1 version, 2 with the double
                permutation) and the vertex orders (``8n`` each); serial: the Graph only; sharded: the
                two orders ``16n``
``adjacency``   the plan's sparse blocks. Torch CSR: :math:`8(r+1) + (8+e)\,z`; SciPy CSR (kept by the
                block-row engines): :math:`\iota(r+1) + (\iota+8)\,z`; SUMMA panel:
                :math:`8(r+1+z) + e\,z`. A directed graph (and any double permutation of 2D/3D) keeps the
                transposed blocks too; a Plexus shard :math:`A[V^t, V^r]` keeps its pattern with the
                transposed order, :math:`8(n_t+1) + 8(n_r+1) + (32+e)\,z`, and the edge ids (host)
``features``    the layer-0 input block :math:`r_0 c_0 e` + labels and masks of the logits rows ``11 r_L``
``parameters``  this rank's weights and biases, their gradients and the optimizer's state (Adam's two moments:
                ``4 e × elements`` in all; SGD's momentum: 3, plain SGD: 2) + Adam's step counters (4 bytes per tensor)
``activations`` tensors autograd keeps for backward: per layer the input side (dropped input, or
                :math:`\hat M H` when the layer aggregates before the weight), the boolean dropout mask
                (layers :math:`> 0`, 1 byte per element), the ReLU output (all but the last layer); Plexus' ``linear`` keeps its input
                block and the gathered weight block (none where its row axis has one member: the weight is
                its own parameter); plus the logits and what the loss keeps (``m`` rows)
``buffers``     the largest communication working set of a step (see the table)
``workspace``   the largest local temporary of a step: the gradients and SpMM outputs of one layer's
                backward (serial :math:`n(f_{out} + \max(f_{in}, f_{out}))e`, block-row
                :math:`n_i(f_{out} + \max(f_{in}, f_{out}) + w)e`, SUMMA and Plexus likewise on their
                blocks), the optimizer's temporaries (parameter bytes), the dropout hash
                (:func:`dropout_hash_bytes_per_element` per input element), or the set-up
                transient (normalizing / permuting :math:`\hat M`, reading shards) where it exceeds
                everything allocated after it
=============== =======================================================================================

``buffers`` and ``workspace`` are peaks of different moments; their sum makes ``total`` an upper bound by at
most the smaller of the two. Communication buffers per product of width :math:`w` (bytes :math:`w e` per row),
rank on block ``i`` handling stages ``S``:

=============== =======================================================================================
``1d``/``1.5d`` one remote block at a time (CAGNET's memory bound): :math:`\max_{q \in S, q \ne i} n_q\,we`;
                with ``--overlap`` two (the two largest; likewise the panels of ``2d``/``3d``)
``-sa`` twins   the send copies, their flattened message, the received rows and the assembled input:
                :math:`\max(2s + v,\; s + v + n_i[i \in S] + v)\,we`, :math:`s = \sum_{k\ne i} V_{ik}`
                (rows sent), :math:`v = \sum_{q \in S, q \ne i} V_{qi}` (rows received),
                :math:`V_{qp} = |NnzCols(p, q)|`
``2d``/``3d``   one SUMMA panel: the sparse panel :math:`8(|R_i|+1+z_p) + e z_p` when another column owns
                it, plus :math:`|p|\,|C_j| e` when another row owns it; 3D's fiber reduce-scatter
                :math:`(2|R_i| + z|B|)|C_j| e`; the row gather of the partial SUMMA :math:`|B|(2w - |C_j|)e`
``plexus``      the all-gathered shards: layer-0 input :math:`(G_c+1)\lceil n_a/G_c\rceil w e + n_a w e`, the
                weight block :math:`(G_c+1)\lceil w_{in}/G_c\rceil w_{out} e`, the weight-gradient
                reduce-scatter :math:`(2 w_{in} + G_c\,|\text{own rows}|) w_{out} e` (blocked aggregation
                all-reduces row blocks of the SpMM output in place: no buffer)
all but plexus  the flat gradient for the gradient all-reduce: parameter bytes
=============== =======================================================================================

The SUMMA and Plexus branches size these from the records of each rank's schedule
(:class:`~gridgnn.partition.layout.SummaSchedule`, :class:`~gridgnn.partition.layout.PlexusSchedule`: the
panels' roots and sizes, the fiber and column pieces, the weight and input parts), the block-row branch from its
:class:`~gridgnn.partition.layout.BlockRowSchedule` — the records the engines run.

Gloo's all-reduce and broadcast work in place (measured: under 2 MiB of scratch for a 200 MiB all-reduce and
none for a broadcast), so they add no buffer.

**How the runtime baseline was measured** (torch 2.13.0+cpu, NumPy, SciPy 1.17.1, Python 3.11, Linux 6.18),
from ``/proc/self/status`` of ranks started by :func:`gridgnn.distributed.launch.launch`. After
``import gridgnn.train.trainer``, ``init_process_group("gloo")`` and one all-reduce (P = 1 … 32; the value does
not change with P): ``RssAnon`` 155 MiB (private to each process), ``RssFile`` 82 MiB (shared libraries, shared
by all local processes through the page cache), ``VmRSS`` 237 MiB. After ``train_worker`` trained a 64-vertex
SBM graph for 2 epochs (serial, and 1d/1d-sa/2d/plexus at P = 4; the lazily loaded optimizer and autograd code,
tqdm): ``RssAnon`` 222 MiB, ``RssFile`` 100 MiB, ``VmRSS`` 323 MiB. The numba kernels
(:mod:`gridgnn.ops.kernels`, loaded from numba's cache by every rank that trains on CPU) add 34 MiB of
``RssAnon`` and 105 MiB of ``RssFile`` (LLVM's shared library), measured as the difference of the peaks of the
same 1d-sa run at P = 2 with and without them (``GRIDGNN_KERNELS=torch``) — the constants below use these sums
(without the kernels the runtime is overestimated by 139 MiB).
``import torch_geometric`` (only the Planetoid loader does) adds 100 MiB of ``RssAnon``
(:data:`~gridgnn.distributed.machine.PYG_IMPORT_BYTES`). Against ``ru_maxrss`` of real runs (SBM, n = 200 000, 4 M edges, 64 features,
hidden 128/256, 2 epochs: serial, 1d, 1d-sa, 1.5d, 2d, 3d, plexus at P ≤ 4) the total was within −12 % … +12 %
of the measured peak of every rank (ranks of one run differ by up to 10 % among themselves: the C allocator keeps
freed memory mapped).
The set-up constants (:data:`NORMALIZE_PEAK_BYTES_PER_NNZ` …) are ``tracemalloc`` peaks of
:func:`~gridgnn.graph.gcn_normalize`, a permutation and a shard read on R-MAT and SBM graphs.

**Every other model** (GAT, AGNN, VA, SAGE, a model of the user's own) is estimated from its trace
(:func:`gridgnn.parallel.trace.trace`, the same one step on a 3-vertex graph that the byte models and the layout
checks read): ``runtime``, ``graph``, ``adjacency`` and ``features`` as above (plus, on Plexus, the
destination-row gather of a layer that reads destination values: ``8(n_t + |V^t ∩ V^r|)``); ``parameters`` from
the trace's parameter count (Plexus: the ``linear`` weights on their shards, every other parameter whole);
``activations`` = every tensor autograd saved in the trace (a hook, one entry per storage), a node tensor scaled
to the rank's rows and columns of its layout, an edge tensor to the rank's edges of its layer, plus the logits
and targets (the sparsity-aware algorithms keep the received rows for a primitive whose edge values need a
gradient); ``buffers`` as above with each layer's widest fetched node tensor; ``workspace`` per layer two node
tensors of the widest kept width, the fetched width and two edge tensors of the widest heads. Tested against one
real step of every built-in model on every algorithm at P = 4: activations within 1.5x of what autograd saved
(0.76 … 1.24 measured), parameters exact (Plexus at most 10 % above), adjacency and features exact.

Inputs are what a rank knows after partitioning and before building its plan; the exact per-block nonzeros
and ``NnzCols`` come from ``pattern`` (the permuted matrix itself, or a :class:`~gridgnn.partition.counts.NnzHistogram` of per-block
counts such as a sharded dataset's ``meta.json`` holds); without it the nonzeros are spread evenly
(the expectation under a random permutation) and ``NnzCols`` is its balls-in-bins expectation
:math:`n_q(1 - (1 - 1/n_q)^{z_{pq}})`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..distributed.machine import (MIB, RUNTIME_PRIVATE_BYTES,
                                  RUNTIME_SHARED_BYTES, format_gib)
from ..errors import GridGnnError
from ..partition import block_range, even_bounds
from ..partition.counts import nnz_patterns
from ..partition.layout import layer_version
from ..parallel.blockrow import BlockRowFamily
from ..parallel.plexus import PlexusFamily
from ..parallel.summa import SummaFamily

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
#: What autograd keeps of a dropout: the boolean mask.
DROPOUT_MASK_BYTES_PER_ELEMENT = 1


def dropout_hash_bytes_per_element() -> int:
    """Host bytes per masked element while the dropout mask is hashed (the kernel in use)."""
    from ..ops import kernels

    return DROPOUT_FUSED_HASH_BYTES_PER_ELEMENT if kernels.enabled() else DROPOUT_HASH_BYTES_PER_ELEMENT

COMPONENTS = ("runtime", "graph", "adjacency", "features", "parameters", "activations", "buffers", "workspace")
_MAX_COMPONENTS = ("buffers", "workspace")  # peaks of one moment (the largest candidate), not sums


# ----------------------------------------------------------------------------------------------- results
@dataclass(frozen=True)
class RankMemory:
    r"""Estimated peak bytes of one rank.

    Attributes:
        rank: global rank.
        per_component: bytes per component (:data:`COMPONENTS`) in the memory the rank computes in (host
            memory on CPU, the GPU's memory on CUDA).
        host_per_component: CUDA only: what stays in host memory (runtime, the graph copy, SciPy blocks,
            the dropout hash, set-up transients); empty on CPU, where everything is in ``per_component``.
        buffers_what, workspace_what: which moment the ``buffers`` / ``workspace`` peak belongs to.
    """

    rank: int
    per_component: dict
    host_per_component: dict = field(default_factory=dict)
    buffers_what: str = ""
    workspace_what: str = ""

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


class _Acc:
    """Collects one rank's contributions, tagged host or device."""

    def __init__(self):
        self.sums = {"dev": dict.fromkeys(COMPONENTS, 0), "host": dict.fromkeys(COMPONENTS, 0)}
        self.cands = {"dev": {k: (0, "") for k in _MAX_COMPONENTS}, "host": {k: (0, "") for k in _MAX_COMPONENTS}}

    def add(self, comp: str, nbytes, where: str = "dev") -> None:
        self.sums[where][comp] += int(round(nbytes))

    def cand(self, comp: str, nbytes, what: str, where: str = "dev") -> None:
        nbytes = int(round(nbytes))
        if nbytes > self.cands[where][comp][0]:
            self.cands[where][comp] = (nbytes, what)

    def persistent(self, where: str) -> int:
        """Bytes that exist from the plan's construction on (everything after set-up but the max components)."""
        s = self.sums[where]
        return s["adjacency"] + s["features"] + s["parameters"] + s["activations"]

    def finish(self, rank: int, device: str, setup: tuple[float, str]) -> RankMemory:
        """``setup = (bytes, what)``: the set-up transient beyond the runtime and the graph copy (host memory);
        it counts where it exceeds what exists later (see the module docstring)."""
        def pick(where_list):
            out, what = {}, {}
            for comp in COMPONENTS:
                if comp in _MAX_COMPONENTS:
                    best = (0, "")
                    for w in where_list:  # the largest candidate (the first of equal ones)
                        if self.cands[w][comp][0] > best[0]:
                            best = self.cands[w][comp]
                    out[comp], what[comp] = best
                else:
                    out[comp] = sum(self.sums[w][comp] for w in where_list)
            return out, what

        if device == "cpu":
            comps, what = pick(("dev", "host"))
            later = sum(comps[k] for k in ("adjacency", "features", "parameters", "activations", "buffers"))
            if setup[0] - later > comps["workspace"]:
                comps["workspace"], what["workspace"] = int(setup[0] - later), setup[1]
            return RankMemory(rank, comps, {}, what["buffers"], what["workspace"])
        dev, what = pick(("dev",))
        host, hwhat = pick(("host",))
        later = sum(host[k] for k in ("adjacency", "features", "parameters", "activations", "buffers"))
        if setup[0] - later > host["workspace"]:
            host["workspace"], hwhat["workspace"] = int(setup[0] - later), setup[1]
        return RankMemory(rank, dev, host, what["buffers"], what["workspace"] or hwhat["workspace"])


# ----------------------------------------------------------------------------------------------- pattern
# ----------------------------------------------------------------------------------------------- helpers
def _index_bytes(n: int, nnz: float) -> int:
    """SciPy's index dtype: int32 while shape and nnz fit, else int64."""
    return 4 if max(n, nnz) <= np.iinfo(np.int32).max else 8


def _torch_csr(rows: int, nnz: float, e: int) -> float:
    return 8 * (rows + 1) + (8 + e) * nnz





def _train_rows(train_rows, rank: int, rows: int) -> int:
    if train_rows is None:
        return rows
    if callable(train_rows):
        return int(train_rows(rank))
    if np.ndim(train_rows) == 0:
        return int(train_rows)
    return int(train_rows[rank])


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
def estimate_rank_memory(algo: str, shape, n: int, nnz: int, dims, *, elem_bytes: int = 4,
                         directed: bool = False, double: bool = False, row_bounds=None, pattern=None,
                         dropout: float = 0.5, bias: bool = True, block_rows: int = 0, train_rows=None,
                         source: str | None = None, feature_bytes: int = 4, weighted: bool = False,
                         device: str = "cpu", runtime_bytes: int | None = None, ranks=None,
                         trace=None, overlap: bool = False, keep_best: bool = False,
                         optimizer_state: tuple[int, bool] = (2, True)) -> MemoryEstimate:
    r"""Peak memory of every rank of one training configuration (see the module docstring for the components
    and their formulas): of GCN on ``dims``, or of the model whose :class:`~gridgnn.parallel.trace.Trace` is
    ``trace`` (any model: see "Every other model" in the module docstring).

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
        bias: the model has biases.
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
        trace: the model's trace on this algorithm (:func:`gridgnn.train.rank_layout.model_trace`); default:
            GCN on ``dims``, whose components are exact.
        overlap: ``--overlap``: the oblivious stage loops hold two remote blocks at a time.
        keep_best: ``--keep best``: every rank holds a copy of its parameters from the best epoch so far.
        optimizer_state: ``(tensors, step counters)``: the optimizer's state tensors per parameter (Adam and AdamW
            2, SGD with momentum 1, plain SGD 0) and whether it counts steps (Adam's float32 counters).

    Returns:
        :class:`MemoryEstimate` (``.ranks`` per rank, ``.peak``, ``.total``, ``.per_component``).

    Raises:
        GridGnnError: an unknown algorithm or a shape that does not fit it.
    """
    from ..parallel import algorithm

    spec = algorithm(algo)
    dims = [int(d) for d in dims]
    if len(dims) < 2 or min(dims) < 1:
        raise GridGnnError(f"dims must hold at least two positive widths, got {dims}")
    single = spec.grid == "single"
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
    ctx = dict(n=n, dims=dims, e=e, directed=bool(directed), double=double, pats=pats, dropout=float(dropout),
               bias=bool(bias), train_rows=train_rows, idx=_index_bytes(n, nnz_hat), block_rows=int(block_rows),
               src=src_kind, dev=dev, versions=versions, trace=trace, layers=_layers(dims, trace),
               overlap=bool(overlap), hash_bytes=dropout_hash_bytes_per_element(), kept=int(bool(keep_best)),
               moments=int(optimizer_state[0]), counters=bool(optimizer_state[1]))
    which = range(world) if ranks is None else [int(r) for r in ranks]
    for r in which:
        if not 0 <= r < world:
            raise GridGnnError(f"rank {r} outside the {world} ranks of mesh {shape}")
    per = _family_memory(spec, ctx, shape, row_bounds, which)
    out = []
    for r in which:
        acc, setup = per[r]
        host_runtime = RUNTIME_PRIVATE_BYTES + RUNTIME_SHARED_BYTES
        if dev == "cpu":
            acc.add("runtime", host_runtime if runtime_bytes is None else runtime_bytes, "host")
        else:
            acc.add("runtime", CUDA_RUNTIME_BYTES if runtime_bytes is None else runtime_bytes, "dev")
            acc.add("runtime", host_runtime, "host")
        acc.add("graph", graph_bytes, "host")
        out.append(acc.finish(r, dev, setup))
    return MemoryEstimate(algo, shape, dev, tuple(out), e)


def _family_memory(spec, ctx, shape, row_bounds, which) -> dict:
    """``{rank: (accumulator, set-up peak)}`` of ``spec``'s family: the block-row model (serial apart; a family that
    subclasses block-row, such as ``edge``, through the stages and edges it states), SUMMA's, Plexus' (GCN exact, a
    traced model, plexus-rs)."""
    family = spec.family
    if isinstance(family, BlockRowFamily):
        if spec.grid == "single":
            return _serial(ctx, ctx["pats"]["rc"].total)
        return _rowblock(ctx, spec, shape, row_bounds, which)
    if isinstance(family, SummaFamily):
        return _summa(ctx, spec, shape, which)
    if isinstance(family, PlexusFamily):
        if spec.scatter:
            return _plexus_scattered(ctx, shape, which)
        return _plexus(ctx, shape, which) if ctx["trace"] is None else _plexus_traced(ctx, shape, which)
    raise GridGnnError(f"{spec.name}: the memory model has no estimate of the {family.name} family")


def _setup_transient(ctx, read_nnz: float) -> tuple[float, str]:
    r"""Set-up peak beyond the graph component: normalizing and permuting :math:`\hat M` (in memory), or
    reading the largest block (sharded)."""
    n, nnz_hat, idx = ctx["n"], ctx["pats"]["rc"].total, ctx["idx"]
    mat = 8 * nnz_hat + idx * (nnz_hat + n + 1)
    norm_peak = NORMALIZE_PEAK_BYTES_PER_NNZ * nnz_hat + NORMALIZE_PEAK_BYTES_PER_NODE * n
    if ctx["src"] == "serial":
        return norm_peak, "gcn_normalize at set-up"
    if ctx["src"] == "memory":
        versions = ctx["versions"]
        a = norm_peak - (1 + versions) * mat
        b = PERMUTE_PEAK_BYTES_PER_NNZ * nnz_hat + PERMUTE_PEAK_BYTES_PER_NODE * n - mat
        return (a, "gcn_normalize at set-up") if a >= b else (b, "permuting the normalized matrix at set-up")
    if ctx["src"] == "sharded":
        return SHARDED_READ_PEAK_BYTES_PER_NNZ * read_nnz, "reading the largest shard at set-up"
    return 0.0, ""


def _dropout_hash(acc: _Acc, ctx, layer: int, elements: float) -> None:
    if ctx["dropout"] > 0:
        acc.cand("workspace", ctx["hash_bytes"] * elements, f"dropout mask hashing, layer {layer}",
                 "host")


def _layers(dims, trace) -> list[tuple[int, int, int, int]]:
    r"""Per layer ``(columns, fetched, heads, consumed)``: the widest node tensor the step keeps, the widest node
    tensor a primitive of the layer fetches across ranks (GCN: :math:`\min(f_{in}, f_{out})`), the widest edge
    tensor (GCN: none) and the layer's input width."""
    if trace is None:
        return [(max(fi, fo), min(fi, fo), 0, fi) for fi, fo in zip(dims[:-1], dims[1:])]
    fetch = {"spmm", "spmm_select", "sddmm_add", "sddmm_dot", "at_destinations"}
    out = []
    for l, (fi, fo) in enumerate(zip(dims[:-1], dims[1:])):
        cols = [s.cols for s in trace.saved if s.layer == l and s.kind == "node"]
        heads = [s.cols for s in trace.saved if s.layer == l and s.kind == "edge"]
        widths = [c.width for c in trace.calls if c.layer == l and c.name in fetch]
        out.append((max([fi, fo, *cols]), max(widths, default=0), max(heads, default=0), fi))
    return out


def _traced(acc: _Acc, ctx, rank: int, node, edges, out_rows: int, out_cols: int, graph_of=None) -> None:
    r"""Activations and workspace of a traced model: every tensor autograd saved in the trace, scaled to this
    rank (``node(layout, columns)`` and ``edges(layer)`` give its local elements), the logits and targets; per
    layer the backward's temporaries (two node tensors of the widest kept width, the fetched width, and two edge
    tensors of the widest heads) and the dropout hash of its input. ``graph_of(layer)``: which of the rank's
    graphs a layer uses (each looks the edge table up once; default: one graph for every layer)."""
    e = ctx["e"]
    for s in ctx["trace"].saved:
        size = s.itemsize or e
        if s.kind == "node":
            acc.add("activations", node(s.layout, s.layer, s.cols) * size)
        elif s.kind == "edge":
            acc.add("activations", edges(s.layer) * s.cols * size)
        else:
            acc.add("activations", s.cols * size)
    m = _train_rows(ctx["train_rows"], rank, out_rows)
    acc.add("activations", out_rows * out_cols * e + 8 * m)  # the logits and the targets
    per_edge = 0
    if ctx["trace"].edge_dim:  # the local edges' features and the mask of the input's edges (g.edge_features)
        per_edge += ctx["trace"].edge_dim * e + 1
    if getattr(ctx["trace"], "relations", 0):  # the local edges' per-relation mean weights (g.relation_values)
        per_edge += ctx["trace"].relations * e
    if per_edge:  # once per graph of the rank (SUMMA: per matrix version, Plexus: per layer)
        first = {}
        for l in range(len(ctx["layers"])):
            first.setdefault(0 if graph_of is None else graph_of(l), l)
        acc.add("features", sum(edges(l) for l in first.values()) * per_edge)
    for l, (cols, fetched, heads, fi) in enumerate(ctx["layers"]):
        acc.cand("workspace", (node(None, l, 2 * cols + fetched) + 2 * edges(l) * heads) * e,
                 f"layer {l} backward temporaries")
        _dropout_hash(acc, ctx, l, node(None, l, fi))


def _model_params(acc: _Acc, ctx, dims, *, grad_allreduce: bool) -> None:
    """Parameters of the whole model, held by every rank (block-row, SUMMA, serial)."""
    tr = ctx["trace"]
    if tr is not None:
        _params(acc, ctx, tr.nparams, tr.ntensors, grad_allreduce=grad_allreduce)
        return
    L = len(dims) - 1
    _params(acc, ctx, sum(fi * fo + (fo if ctx["bias"] else 0) for fi, fo in zip(dims[:-1], dims[1:])),
            2 * L if ctx["bias"] else L, grad_allreduce=grad_allreduce)


def _rowblock_activations(acc: _Acc, ctx, rows: int, rank: int) -> None:
    """Serial/1D/1.5D: what autograd keeps per layer (see :class:`~gridgnn.parallel.base.RowBlockPlan`)."""
    dims, e, p = ctx["dims"], ctx["e"], ctx["dropout"]
    L = len(dims) - 1
    for l, (fi, fo) in enumerate(zip(dims[:-1], dims[1:])):
        if p > 0 or fo >= fi:  # the dropped input (H W first) or M̂ H (aggregate first) is a new saved tensor
            acc.add("activations", rows * fi * e)
        if p > 0 and l > 0:
            acc.add("activations", rows * fi * DROPOUT_MASK_BYTES_PER_ELEMENT)  # the boolean dropout mask
        if l < L - 1:
            acc.add("activations", rows * fo * e)  # ReLU output
    m = _train_rows(ctx["train_rows"], rank, rows)
    acc.add("activations", rows * dims[-1] * e + m * dims[-1] * e + 8 * m)  # logits, log-softmax, targets


def _serial(ctx, nnz_hat: int):
    n, dims, e = ctx["n"], ctx["dims"], ctx["e"]
    acc = _Acc()
    _blockrow_graph(acc, e, rows=n, nnz=nnz_hat, stages=[(n, nnz_hat)], single_block=True)
    acc.add("features", n * dims[0] * e + 11 * n)
    _model_params(acc, ctx, dims, grad_allreduce=False)
    if ctx["trace"] is not None:
        _traced(acc, ctx, 0, lambda lay, l, cols: n * cols, lambda l: nnz_hat, n, dims[-1])
    else:
        _rowblock_activations(acc, ctx, n, 0)
        for l, (fi, fo) in enumerate(zip(dims[:-1], dims[1:])):
            acc.cand("workspace", n * (fo + max(fi, fo)) * e, f"layer {l} backward temporaries")
            _dropout_hash(acc, ctx, l, n * fi)
    return {0: (acc, _setup_transient(ctx, nnz_hat))}


def _blockrow_graph(acc: _Acc, e: int, *, rows: int, nnz: float, stages, single_block: bool = False,
                    send: float = 0.0) -> None:
    """What a :class:`~gridgnn.parallel.blockrow.BlockRowGraph` keeps: the local pattern (row pointer, column
    and row of each edge), the GCN values, the edge ids (host); then per stage ``(n_q, nnz_q)`` a pattern with its
    transpose (and the stage's edge positions unless it holds every local edge) — one block reuses the local
    pattern. Sparsity-aware, the stages are the block's own rows and the remote halo, plus the send lists."""
    acc.add("adjacency", 8 * (rows + 1) + (16 + e) * nnz)
    acc.add("adjacency", 16 * nnz, "host")
    acc.add("adjacency", 8 * send)
    if not len(stages):
        return
    size, nnz_q = np.asarray(stages, np.float64).reshape(-1, 2).T  # one pair per stage
    if single_block:
        acc.add("adjacency", np.round(8 * (size + 1) + 16 * nnz_q).sum())
        return
    acc.add("adjacency", np.round(8 * (rows + 1) + 16 * nnz_q + 8 * (size + 1) + 16 * nnz_q).sum())
    acc.add("adjacency", np.round(8 * nnz_q[nnz_q != nnz]).sum())


def _params(acc: _Acc, ctx, elements: float, tensors: int, *, grad_allreduce: bool) -> None:
    """Parameters, gradients and the optimizer's state (Adam's two moments: 4e per element in all),
    ``--keep best``'s copy of the best epoch's parameters (e per element) + Adam's float32 step counters."""
    e = ctx["e"]
    acc.add("parameters", (2 + ctx["moments"] + ctx["kept"]) * e * elements + (4 * tensors if ctx["counters"] else 0))
    acc.cand("workspace", e * elements, "optimizer step temporaries")
    if grad_allreduce:
        acc.cand("buffers", e * elements, "flat gradient of the gradient all-reduce")


def _rowblock(ctx, spec, shape, row_bounds, which):
    """Serial excepted, the block-row family: each rank's block, its stages' edges (the family's ``stages``; where
    it splits a block's edges by count, ``rank_nnz``: ``edge``) and the buffers its schedule
    (:class:`~gridgnn.partition.layout.BlockRowSchedule`, the one the engine runs) receives into."""
    from ..partition.layout import BlockRowSchedule

    n, dims, e = ctx["n"], ctx["dims"], ctx["e"]
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
    pat = ctx["pats"]["rc"]
    z = pat.counts(bounds, bounds)  # z[p, q]: nonzeros of block (p, q)
    v = pat.nnz_cols(bounds) if sa else None
    stage_lists = spec.family.stages(spec, world, c)  # each rank's, as its engine multiplies them
    rank_nnz = spec.family.rank_nnz(spec, pat.total, world)
    out = {}
    size_tuple = tuple(int(s) for s in sizes)
    for r in which:
        i = r // c
        stages = stage_lists[r]
        counts = BlockRowSchedule.sparsity_aware_counts(v, i, stages) if sa else ()
        sched = BlockRowSchedule(size_tuple, i, stages, "row", "rep", c, *counts)
        ni = int(sizes[i])
        acc = _Acc()
        mine = i in stages
        staged = np.asarray(stages, np.int64)
        zrow = float(rank_nnz[r]) if rank_nnz is not None else float(z[i, staged].sum())
        if sa:  # two stages: the block's own rows (when it is a stage) and the rows received (the remote halo)
            halo = sched.halo_transfer()
            send, recv = float(sum(halo.send)), float(sum(halo.recv))
            own = float(z[i, i]) if mine else 0.0
            parts = ([(ni, own)] if mine else []) + ([(recv, zrow - own)] if any(q != i for q in stages) else [])
            _blockrow_graph(acc, e, rows=ni, nnz=zrow, stages=parts, send=send)
        else:
            per_stage = [zrow] if rank_nnz is not None else z[i, staged]
            _blockrow_graph(acc, e, rows=ni, nnz=zrow, single_block=nb == 1,
                            stages=np.stack([sizes[staged], per_stage], axis=1))
        acc.add("features", ni * dims[0] * e + 11 * ni)
        _model_params(acc, ctx, dims, grad_allreduce=nb > 1)
        if ctx["trace"] is not None:
            _traced(acc, ctx, r, lambda lay, l, cols: ni * cols, lambda l: zrow, ni, dims[-1])
            if sa:  # a sparsity-aware primitive whose edge values need a gradient keeps the received rows
                acc.add("activations", sum(recv * c.width * e for c in ctx["trace"].calls
                                           if c.name in ("sddmm_add", "sddmm_dot") or
                                           c.name in ("spmm", "spmm_select") and c.grads[0] and c.width))
        else:
            _rowblock_activations(acc, ctx, ni, r)
        roots, remote = sched.remote_stages() if not sa else (np.zeros(0, np.int64), np.zeros(0, np.int64))
        # the largest block broadcast to this rank (the first of them); --overlap: the next stage's block arrives
        # while this one computes (two at a time; an upper bound: the two largest)
        big = int(roots[np.argmax(remote)]) if remote.size else None
        held = int(np.sort(remote)[-2:].sum()) if ctx["overlap"] else (int(remote.max()) if remote.size else 0)
        for l, (cols, w, heads, fi) in enumerate(ctx["layers"]):
            if ctx["trace"] is None:
                acc.cand("workspace", ni * (cols + dims[l + 1] + w) * e, f"layer {l} backward temporaries")
                _dropout_hash(acc, ctx, l, ni * fi)
            if sa:
                # fetch: the rows sent, their flat copy, the halo received; push: the halo's partial sums, their
                # pieces and flat copy, the rows received (with --overlap the own block's part alongside)
                rows = max(2 * send + recv, send + 3 * recv + (ni if ctx["overlap"] else 0))
                acc.cand("buffers", rows * w * e, f"{algo} all-to-allv rows, layer {l} fwd")
            elif big is not None:
                acc.cand("buffers", held * w * e, f"{algo} broadcast of block {big}"
                         + (" and the next" if ctx["overlap"] else "") + f", layer {l} fwd")
        out[r] = (acc, _setup_transient(ctx, float(z[i, :].sum())))
    return out


def _summa(ctx, spec, shape, which):
    from ..distributed.grid import coords_of
    from ..partition.layout import SummaGeometry as Geometry
    from ..partition.layout import SummaSchedule

    n, dims, e = ctx["n"], ctx["dims"], ctx["e"]
    algo, axes = spec.name, 2 if spec.grid == "2d" else 3
    if len(shape) != axes:
        raise GridGnnError(f"{algo} needs a {axes}-axis mesh, got {tuple(shape)}")
    pr, pc = shape[0], shape[1]
    zf = shape[2] if len(shape) == 3 else 1
    geo = Geometry(n, pr, pc, zf)
    L = len(dims) - 1
    cuts = sorted({int(c) for c in geo.fine} | {int(v) for k in range(zf) for p in geo.panels[k] for v in p[:2]})
    cuts = np.asarray(cuts, dtype=np.int64)
    pos = {int(c): t for t, c in enumerate(cuts)}
    used = ["rc"] + (["cr"] if ctx["double"] and L >= 2 else [])
    grids = {v: ctx["pats"][v].counts(cuts, cuts) for v in used}
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

    out = {}
    for r in which:
        i, j, k = (coords_of(r, shape) + (0,))[:3]
        r0, r1 = geo.rows(i)
        nr = r1 - r0
        b0, b1 = geo.block(i, k)
        nbk = b1 - b0
        acc = _Acc()
        largest = 0.0
        owned_by = {}
        # the engine's schedule per matrix version (the panels' nonzeros from the pattern's counts)
        sched = {v: SummaSchedule.of(geo, i, j, k, ("row", "col", "fiber" if zf > 1 else None), panel_nnz(v, i, k))
                 for v in used}
        panel_rows, _, panel_owner = geo.panel_arrays(k)
        mine = panel_owner == j
        for v in used:  # one SummaGraph per matrix version: the owned panels M[R_i, p], jo(p) = j
            z = np.asarray(sched[v].panel_nnz, np.int64)[mine]
            # pattern (crow, col, row) + its transpose (t_crow, t_col, t_perm) + the broadcast index array
            # (sched[v].pattern(p): nr + 1 + z entries)
            acc.add("adjacency", int((8 * (nr + 1 + 2 * z) + 8 * (panel_rows[mine] + 1 + 2 * z)
                                      + 8 * (nr + 1 + z)).sum()))
            owned = float(z.sum())
            largest = max(largest, float(z.max(initial=0)))
            acc.add("adjacency", (e + 8) * owned)  # GCN values and the row of every local edge
            acc.add("adjacency", 16 * owned, "host")  # edge ids
            owned_by[v] = owned
        acc.add("features", nbk * dims[0] * e + 11 * nbk)
        _model_params(acc, ctx, dims, grad_allreduce=pr * zf > 1)

        def version(l):
            return layer_version(l, ctx["double"])

        if ctx["trace"] is not None:
            _traced(acc, ctx, r, lambda lay, l, cols: nbk * cols, lambda l: owned_by[version(l)], nbk, dims[-1],
                    graph_of=version)
        else:
            _rowblock_activations(acc, ctx, nbk, r)
        for l, (cols, width, heads, fi) in enumerate(ctx["layers"]):
            if ctx["trace"] is None:
                acc.cand("workspace", nbk * (cols + dims[l + 1] + width) * e, f"layer {l} backward temporaries")
                _dropout_hash(acc, ctx, l, nbk * fi)
            sv = sched[version(l)]
            gather = sv.gather_cols(width)  # the column blocks C_j of the layer's width
            wj = gather.pieces[j]
            # a received panel (its owner column is not j): its index array (sv.pattern(p): nr + 1 + z entries),
            # the pattern built from it and its values (sv.edges(p): z); every panel: its rows sv.rows_of(p)
            z = np.asarray(sv.panel_nnz, np.float64)
            held = np.where(panel_owner == j, 0.0, 8 * (2 * (nr + 1) + 3 * z) + e * z) + panel_rows * wj * e
            held = held.tolist()
            # --overlap: the next panel arrives while this one computes (two at a time; the two largest)
            best = sum(sorted(held)[-2:]) if ctx["overlap"] else max(held, default=0.0)
            acc.cand("buffers", best + nr * wj * e, f"{algo} panel broadcast" + (" and the next" if ctx["overlap"]
                                                                                 else "") + f", layer {l}")
            fiber = sv.fiber_scatter()
            if fiber.moves:
                acc.cand("buffers", (2 * fiber.total_rows + fiber.group * fiber.pieces[fiber.me]) * wj * e,
                         f"{algo} fiber reduce-scatter, layer {l}")
            if gather.moves:
                acc.cand("buffers", 2 * nbk * gather.group * gather.largest_piece * e,
                         f"{algo} column all-gather, layer {l}")
        out[r] = (acc, _setup_transient(ctx, largest))
    return out


def _plexus_grid(ctx, shape, layouts):
    r"""``(vertex bounds per axis, count)`` of a Plexus grid: ``count(version, rows, cols)`` = nonzeros of
    :math:`\hat M` in a block (from the pattern's prefix sums on every axis's cuts)."""
    from ..partition.layout import PLEXUS_AXES

    n = ctx["n"]
    if len(shape) != 3:
        raise GridGnnError(f"plexus needs a 3-axis mesh, got {tuple(shape)}")
    g = dict(zip(PLEXUS_AXES, shape))
    for ax, size in g.items():
        if size > n:
            raise GridGnnError(f"grid axis {ax} has {size} processes but the graph only {n} vertices")
    vb = {ax: even_bounds(n, g[ax]) for ax in PLEXUS_AXES}
    cuts = np.unique(np.concatenate(list(vb.values())))
    pos = {int(c): t for t, c in enumerate(cuts)}
    used = sorted({lay.graph.version if ctx["double"] else "rc" for lay in layouts if lay.graph is not None})
    pre = {v: np.pad(ctx["pats"][v].counts(cuts, cuts), ((1, 0), (1, 0))).cumsum(0).cumsum(1) for v in used}

    def count(v, rr, cc):
        s = pre[v]
        a, b, c, d = pos[rr[0]], pos[rr[1]], pos[cc[0]], pos[cc[1]]
        return float(s[b, d] - s[a, d] - s[b, c] + s[a, c])

    return vb, count


def _plexus_rank(ctx, shape, layouts, rank: int):
    """``(coordinates, schedules)`` of one Plexus rank: its :class:`~gridgnn.partition.layout.PlexusSchedule` per
    layer (the engine's: vertex rows and column blocks, the parts and gathers whose buffers it sizes)."""
    from ..distributed.grid import coords_of
    from ..partition.layout import PLEXUS_AXES, PlexusSchedule

    coords = tuple(coords_of(rank, shape))
    return dict(zip(PLEXUS_AXES, coords)), [PlexusSchedule(ctx["n"], tuple(shape), coords, lay) for lay in layouts]


def _weight_buffers(acc: "_Acc", s, fi: int, w_out: int, e: int, layer: int) -> None:
    """The buffers of a Plexus ``linear``'s weight all-gather and its gradient's reduce-scatter (schedule ``s``)."""
    get = s.weight_gather(fi)
    if get.moves:
        mine = get.pieces[get.me]
        acc.cand("buffers", (get.group + 1) * get.largest_piece * w_out * e, f"plexus weight all-gather, layer {layer}")
        acc.cand("buffers", (2 * get.total_rows + get.group * mine) * w_out * e,
                 f"plexus weight-gradient reduce-scatter, layer {layer}")


def _input_gather_buffer(acc: "_Acc", s, c_in: int, e: int) -> None:
    """The all-gather of the split layer-0 input over its third axis (schedule ``s`` of layer 0)."""
    get = s.input_gather()
    n_in = get.total_rows
    acc.cand("buffers", ((get.group + 1) * get.largest_piece * c_in + n_in * c_in) * e if get.moves else n_in * c_in * e,
             "plexus all-gather of the layer-0 input")


def gcn_program(dims) -> list[tuple[str, ...]]:
    """GCN's order of ``linear`` and ``spmm`` per layer (:func:`gridgnn.nn.gcn.gcn_layer`: the narrower side is
    aggregated), the program the Plexus layouts follow."""
    return [("linear", "spmm") if fo < fi else ("spmm", "linear") for fi, fo in zip(dims[:-1], dims[1:])]


def _plexus(ctx, shape, which):
    from ..partition.layout import plexus_layouts

    dims, e = ctx["dims"], ctx["e"]
    L = len(dims) - 1
    program = gcn_program(dims)
    layouts = plexus_layouts(program)
    vb, count = _plexus_grid(ctx, shape, layouts)

    p = ctx["dropout"]
    out = {}
    for r in which:
        me, scheds = _plexus_rank(ctx, shape, layouts, r)
        nrows, ncols = scheds[0].nrows, scheds[0].ncols
        acc = _Acc()
        seen = set()
        largest = 0.0
        nparams = 0
        for l, (fi, fo) in enumerate(zip(dims[:-1], dims[1:])):
            lay = layouts[l]
            gr, lin = lay.graph, lay.linear
            key = (gr.third, gr.rows, gr.version if ctx["double"] else "rc")
            rows_t, rows_r = block_range(vb[gr.third], me[gr.third]), block_range(vb[gr.rows], me[gr.rows])
            if key not in seen:  # pattern (crow, col, row) + its transpose (t_crow, t_col, t_perm), values, edge ids
                seen.add(key)
                z = count(key[2], rows_t, rows_r)
                acc.add("adjacency", 8 * (rows_t[1] - rows_t[0] + 1) + 8 * (rows_r[1] - rows_r[0] + 1) + (32 + e) * z)
                acc.add("adjacency", 16 * z, "host")
                largest = max(largest, z)
            w_in, w_out = ncols(fi, lin.cols), ncols(fo, lin.third)
            get = scheds[l].weight_gather(fi)
            nparams += get.pieces[get.me] * w_out + (ncols(fo, lay.output.cols) if ctx["bias"] else 0)
            n_lin = nrows(lin.rows)
            # saved by linear: its input (the aggregated M̂H, the gathered layer-0 input, or the dropped input;
            # with no dropout a later layer's input is the previous ReLU output) and the gathered weight block (the
            # parameter itself where nothing is gathered)
            fresh = program[l][0] == "spmm" or l == 0 or p > 0
            acc.add("activations", ((n_lin * w_in) if fresh else 0) * e + (w_in * w_out * e if get.moves else 0))
            inp = lay.input
            n_in, c_in = nrows(inp.rows), ncols(fi, inp.cols)
            if p > 0 and l > 0:
                acc.add("activations", n_in * c_in * DROPOUT_MASK_BYTES_PER_ELEMENT)  # dropout mask of the input
            if l < L - 1:
                acc.add("activations", nrows(lay.output.rows) * ncols(fo, lay.output.cols) * e)  # ReLU output
            if l == 0:
                in_rows = scheds[0].input_parts()[me[inp.third]]
                acc.add("features", in_rows * c_in * e)
                _dropout_hash(acc, ctx, l, in_rows * c_in)
                _input_gather_buffer(acc, scheds[0], c_in, e)
            else:
                _dropout_hash(acc, ctx, l, n_in * c_in)
            _weight_buffers(acc, scheds[l], fi, w_out, e, l)
            n_t, w_g = nrows(gr.third), ncols(min(fi, fo), gr.cols)
            acc.cand("workspace", e * (2 * n_t * w_g + w_in * w_out + 2 * n_lin * max(w_in, w_out)),
                     f"layer {l} backward temporaries")
        last = layouts[-1].output
        rows_out = nrows(last.rows)
        c_loc = ncols(dims[-1], last.cols)
        acc.add("features", 11 * rows_out)
        m = _train_rows(ctx["train_rows"], r, rows_out)
        acc.add("activations", rows_out * c_loc * e + m * (c_loc * e + 1 + 8))  # logits, softmax, flags, targets
        _params(acc, ctx, nparams, 2 * L if ctx["bias"] else L, grad_allreduce=False)
        out[r] = (acc, _setup_transient(ctx, largest))
    return out


#: primitives that read node values at the destinations of the edges (on Plexus: a row gather along ``r``)
_READS_DST = ("sddmm_add", "sddmm_dot", "at_destinations")


def _plexus_traced(ctx, shape, which):
    """Plexus for a traced model: the layouts of its program (as the engine fixes them), its adjacency shards and
    layer-0 input as for GCN, the linear weights sharded as :class:`~gridgnn.parallel.plexus.PlexusPlan` shards
    them (other parameters counted whole), the saved tensors on their layouts."""
    from ..partition.layout import plexus_layouts, plexus_program

    n, dims, e, tr = ctx["n"], ctx["dims"], ctx["e"], ctx["trace"]
    L = len(dims) - 1
    layouts = plexus_layouts([plexus_program([c.name for c in tr.calls if c.layer == l]) for l in range(L)])
    vb, count = _plexus_grid(ctx, shape, layouts)
    out = {}
    for r in which:
        me, scheds = _plexus_rank(ctx, shape, layouts, r)
        nrows, ncols = scheds[0].nrows, scheds[0].ncols
        acc = _Acc()
        shards, gathers, largest = {}, set(), 0.0
        for l, lay in enumerate(layouts):
            gr = lay.graph
            if gr is None:
                continue
            key = (gr.third, gr.rows, gr.version if ctx["double"] else "rc")
            rows_t, rows_r = block_range(vb[gr.third], me[gr.third]), block_range(vb[gr.rows], me[gr.rows])
            if key not in shards:  # pattern + transpose, values, edge ids (as for GCN)
                shards[key] = z = count(key[2], rows_t, rows_r)
                acc.add("adjacency", 8 * (rows_t[1] - rows_t[0] + 1) + 8 * (rows_r[1] - rows_r[0] + 1) + (32 + e) * z)
                acc.add("adjacency", 16 * z, "host")
                largest = max(largest, z)
            shards[l] = shards[key]
            if key not in gathers and any(c.layer == l and c.name in _READS_DST for c in tr.calls):
                # the destination-row gather (PlexusGraph.dst_spec): where each row lands (n_t) and which of them
                # this rank holds, the overlap of its V^t and V^r blocks (its expectation with two vertex orders)
                gathers.add(key)
                n_t, n_r = rows_t[1] - rows_t[0], rows_r[1] - rows_r[0]
                held = n_t * n_r / n if ctx["double"] else max(0, min(rows_t[1], rows_r[1]) - max(rows_t[0], rows_r[0]))
                acc.add("adjacency", 8 * (n_t + held))
        inp = layouts[0].input
        c_in = ncols(dims[0], inp.cols)
        acc.add("features", scheds[0].input_parts()[me[inp.third]] * c_in * e)
        if scheds[0].input_gather().moves:
            _input_gather_buffer(acc, scheds[0], c_in, e)
        local, whole = 0, 0
        for c in tr.calls:
            if c.name != "linear":
                continue
            s = scheds[c.layer]
            w_out = s.ncols(c.out_width, layouts[c.layer].linear.third)
            get = s.weight_gather(c.width)
            local += get.pieces[get.me] * w_out
            whole += c.width * c.out_width
            _weight_buffers(acc, s, c.width, w_out, e, c.layer)
        _params(acc, ctx, local + max(tr.nparams - whole, 0), tr.ntensors, grad_allreduce=False)
        last = layouts[-1].output
        rows_out = nrows(last.rows)
        acc.add("features", 11 * rows_out)

        def node(lay, l, cols):
            lay = lay or layouts[l].output
            return nrows(lay.rows) * ncols(cols, lay.cols)

        _traced(acc, ctx, r, node, lambda l: shards.get(l, 0.0), rows_out, ncols(dims[-1], last.cols),
                graph_of=lambda l: l)  # a graph per layer
        out[r] = (acc, _setup_transient(ctx, largest))
    return out


def _plexus_shards(ctx, acc: "_Acc", layouts, vb, count, me) -> tuple[dict, float]:
    """The adjacency shards a Plexus rank builds, one per ``(third, rows, version)`` (pattern + transpose,
    values, edge ids): ``({layer: nnz}, largest nnz)``."""
    shards, largest = {}, 0.0
    for l, lay in enumerate(layouts):
        gr = lay.graph
        if gr is None:
            continue
        key = (gr.third, gr.rows, gr.version if ctx["double"] else "rc")
        if key not in shards:
            rows_t, rows_r = block_range(vb[gr.third], me[gr.third]), block_range(vb[gr.rows], me[gr.rows])
            shards[key] = z = count(key[2], rows_t, rows_r)
            acc.add("adjacency", 8 * (rows_t[1] - rows_t[0] + 1) + 8 * (rows_r[1] - rows_r[0] + 1) + (32 + ctx["e"]) * z)
            acc.add("adjacency", 16 * z, "host")
            largest = max(largest, z)
        shards[l] = shards[key]
    return shards, largest


def _gather_buffer(acc: "_Acc", get, cols: int, e: int, what: str) -> None:
    """An all-gather of row pieces ``get`` (``cols`` columns): the padded pieces received and the result."""
    if get.moves:
        acc.cand("buffers", ((get.group + 1) * get.largest_piece + get.total_rows) * cols * e, what)


def _plexus_scattered(ctx, shape, which):
    """``plexus-rs`` (GCN, or a traced model of its primitives): the adjacency shards as for plexus; every node
    tensor held as this rank's part of its row block; the weight rows of the input's column block with every output
    column, and the bias block; saved per layer: ``linear``'s input part, the ReLU output part, the dropout mask of
    the input part; the gathers of ``spmm`` (its input over ``t``, ``∂Y`` over ``r``) and of ``linear``'s ``∂Y``
    (column blocks over ``q``) and the partial sums before each reduce-scatter as candidate buffers."""
    from ..partition.layout import plexus_layouts, plexus_program

    dims, e, p, tr = ctx["dims"], ctx["e"], ctx["dropout"], ctx["trace"]
    L = len(dims) - 1
    program = (gcn_program(dims) if tr is None else
               [plexus_program([c.name for c in tr.calls if c.layer == l]) for l in range(L)])
    layouts = plexus_layouts(program, scatter=True)
    vb, count = _plexus_grid(ctx, shape, layouts)
    out = {}
    for r in which:
        me, scheds = _plexus_rank(ctx, shape, layouts, r)
        ncols = scheds[0].ncols
        acc = _Acc()
        shards, largest = _plexus_shards(ctx, acc, layouts, vb, count, me)
        inp = layouts[0].input
        c_in = ncols(dims[0], inp.cols)
        acc.add("features", scheds[0].part_rows(inp) * c_in * e)
        last = layouts[-1].output
        rows_out = scheds[0].part_rows(last)
        acc.add("features", 11 * rows_out)
        nparams, tensors = 0, 0
        for l, (fi, fo) in enumerate(zip(dims[:-1], dims[1:])):
            lay, s = layouts[l], scheds[l]
            n_part = s.part_rows(lay.input)  # every tensor of the layer: the same part of its rows (or the next)
            if lay.linear is not None:
                if tr is None:  # GCN's weight rows W[C^q, :] (a traced model: per linear call, below)
                    nparams, tensors = nparams + ncols(fi, lay.linear.cols) * fo, tensors + 1
                _gather_buffer(acc, s.linear_gather(fo), s.part_rows(lay.linear), e, f"plexus-rs ∂Y gather, layer {l}")
                acc.cand("buffers", 2 * s.part_rows(lay.linear) * fo * e, f"plexus-rs linear partial sums, layer {l}")
            if ctx["bias"] and tr is None:
                nparams, tensors = nparams + ncols(fo, lay.output.cols), tensors + 1
            if lay.graph is not None:
                gr, w_g = lay.graph, ncols(min(fi, fo), lay.graph.cols)
                _gather_buffer(acc, s.gather_parts(gr), w_g, e, f"plexus-rs spmm input gather, layer {l}")
                _gather_buffer(acc, s.gather_parts(gr.after_spmm()), w_g, e, f"plexus-rs spmm ∂Y gather, layer {l}")
                acc.cand("buffers", 2 * s.nrows(gr.third) * w_g * e, f"plexus-rs spmm partial sums, layer {l}")
            if tr is not None:
                continue
            lin = lay.linear
            if program[l][0] == "spmm" or p > 0:  # linear saves its input: the aggregation or the dropped input
                acc.add("activations", s.part_rows(lin) * ncols(fi, lin.cols) * e)
            if p > 0 and l > 0:
                acc.add("activations", n_part * ncols(fi, lay.input.cols) * DROPOUT_MASK_BYTES_PER_ELEMENT)
            if l < L - 1:
                acc.add("activations", s.part_rows(lay.output) * ncols(fo, lay.output.cols) * e)  # ReLU output
            _dropout_hash(acc, ctx, l, n_part * ncols(fi, lay.input.cols))
            acc.cand("workspace", e * (2 * s.nrows(lay.output.third) * max(fi, fo) + ncols(fi, lay.input.cols) * fo
                                       + 2 * n_part * max(fi, fo)), f"layer {l} backward temporaries")
        c_loc = ncols(dims[-1], last.cols)
        if tr is None:
            m = _train_rows(ctx["train_rows"], r, rows_out)
            acc.add("activations", rows_out * c_loc * e + m * (c_loc * e + 1 + 8))  # logits, softmax, flags, targets
            _params(acc, ctx, nparams, tensors, grad_allreduce=False)
        else:
            lins = [c for c in tr.calls if c.name == "linear"]
            local = sum(ncols(c.width, layouts[c.layer].linear.cols) * c.out_width for c in lins)
            whole = sum(c.width * c.out_width for c in lins)
            _params(acc, ctx, local + max(tr.nparams - whole, 0), tr.ntensors, grad_allreduce=False)

            def node(lay, l, cols):
                lay = lay or layouts[l].output
                return scheds[l].part_rows(lay) * ncols(cols, lay.cols)

            _traced(acc, ctx, r, node, lambda l: shards.get(l, 0.0), rows_out, c_loc, graph_of=lambda l: l)
        out[r] = (acc, _setup_transient(ctx, largest))
    return out


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
