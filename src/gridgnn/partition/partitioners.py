r"""Vertex partitioners behind one interface: random, METIS (cut / volume), Mt-KaHyPar (column-net volume)
and ``balanced`` (ours: METIS start + max-send-volume refinement).

Paper: Mukhopadhyay et al., *Sparsity-Aware Communication for Distributed GNN Training*, ICPP'24, §5 (a
partitioner must lower both the total volume and the volume of the busiest process; Table 2: METIS leaves the
bottleneck sending 1.7–2.7× the average) and §7.1.1 (Graph-VB against METIS). Related: Acer, Selvitopi &
Aykanat, *Improving performance of sparse matrix dense matrix multiplication on large-scale parallel systems*
(Graph-VB, 2016); Deveci, Kaya, Uçar & Çatalyürek, *Hypergraph partitioning for multiple communication cost
metrics* (UMPa, JPDC 2015).

Every method returns a vertex → part map ``part`` (``int64[n]``, original order, every part non-empty) and
:func:`partition_graph` wraps it in a :class:`~gridgnn.partition.layout.RowPartition` (the stable relabeling
that makes every part a contiguous block of rows). ``parts`` is ``P`` for the 1D algorithms and ``P/c`` for
1.5D.

Methods:

* ``random`` — a seeded random permutation, then equal-size blocks of rows (the sparsity-oblivious default).
* ``metis`` — METIS k-way (pymetis) on the symmetrized pattern :math:`A + A^\mathsf{T}` without self-loops,
  edge-cut objective, vertex weights = nnz of the row of :math:`M` + 1 (the row of :math:`M + I`), so the
  SpMM work per part is balanced within ``1 + imbalance``.
* ``metis-vol`` — the same graph and weights with METIS' total-communication-volume objective.
* ``hypergraph`` — Mt-KaHyPar, column-net model of :math:`M` (net :math:`j` = rows with a nonzero in column
  :math:`j` plus the self-pin :math:`j`), connectivity−1 objective = exactly the total volume of
  :func:`~gridgnn.partition.quality.volume_matrix`; same vertex weights; Mt-KaHyPar's ``DEFAULT`` preset,
  seeded but **not bit-reproducible** (parallel refinement); save it with ``gridgnn partition --out`` to reuse
  it. ``GRIDGNN_MTKAHYPAR_PRESET=deterministic`` selects the reproducible preset, which measured 6× slower at
  R-MAT scale 14 (62 s vs 10 s on 2 cores, 16 parts) and did not finish in 6 minutes at scale 16, 64 parts.
* ``balanced`` — ``metis`` (nnz-weighted, edge cut), then :func:`~gridgnn.partition.refine.refine_max_volume`,
  which lowers the maximum send (then receive) volume per part while the total volume grows by at most 5 %
  (in practice it falls) and the nnz balance bound holds. Deterministic for a seed (a Mt-KaHyPar start,
  ``hypergraph`` and ``balanced:best``'s, is as reproducible as Mt-KaHyPar's preset: ``GRIDGNN_MTKAHYPAR_PRESET`` above).
  ``balanced:<start>`` refines another start (``metis-vol``, ``hypergraph``, ``random``), and
  ``balanced:best`` refines the metis, metis-vol and hypergraph starts and keeps the lowest maximum send
  volume. Why METIS and not the lowest-total start: in our runs (R-MAT scale 14–16, SBM, 16–256 parts)
  refining METIS' partition ended within ~1 % of, or well below, the maximum reached from metis-vol's or
  Mt-KaHyPar's lower-total partitions (those pack hubs into a few parts whose send volume local moves cannot
  unload), and METIS is 3–64× faster than metis-vol and 18–85× faster than Mt-KaHyPar there
  (``docs/benchmarks.md``).

After every graph partitioner, vertices without any edge (no communication wherever they are; ~25 % of an
R-MAT graph) are spread over the parts with the fewest vertices within the nnz bound
(:func:`spread_isolated`; METIS piles them into one part with ~3× the mean rows of :math:`H`). A partitioner
that leaves a part empty (possible when ``parts`` exceeds the number of connected components) is repaired
deterministically: the lightest vertex of the heaviest part moves into the empty part.

A method whose measured peak memory (:func:`partition_peak_bytes`) exceeds the memory available is refused before
it starts, with the bytes it would need: METIS needs 100–220 bytes per stored nonzero (more on skewed graphs, whose
coarsening is slow), Mt-KaHyPar about 220 (and about 9 µs per nonzero on 2 cores: 69 s at R-MAT scale 18).
"""
from __future__ import annotations

import heapq
import importlib.util
import os
import threading

import numpy as np
import scipy.sparse as sp

from ..distributed.machine import usable_cores
from ..errors import GridGnnError
from ..graph.safe_io import check_alloc
from .layout import RowPartition
from .quality import as_csr, volume_matrix

__all__ = ["METHODS", "partition_graph", "partition_vector", "vertex_weights", "symmetric_pattern",
           "column_nets", "repair_empty_parts", "spread_isolated", "load_partition_file", "write_partition_file"]

#: Methods accepted by :func:`partition_graph` (and ``gridgnn partition --method``).
METHODS = ("random", "metis", "metis-vol", "hypergraph", "balanced")

_PACKAGES = {"metis": "pymetis", "metis-vol": "pymetis", "hypergraph": "mtkahypar"}


# ---------------------------------------------------------------------------------------------- inputs
def vertex_weights(mat: sp.csr_matrix) -> np.ndarray:
    """``int64[n]``: nnz of each row of M plus one (the row of M + I), so isolated vertices weigh 1."""
    return np.diff(mat.indptr).astype(np.int64) + 1


def symmetric_pattern(mat: sp.csr_matrix) -> tuple[np.ndarray, np.ndarray]:
    r"""``(xadj, adjncy)`` of the pattern of :math:`A + A^\mathsf{T}` without self-loops (sorted, no duplicates)."""
    n = mat.shape[0]
    pat = sp.csr_matrix((np.ones(mat.indices.size, dtype=np.int8), mat.indices, mat.indptr), shape=(n, n))
    sym = (pat + pat.T).tocoo()
    keep = sym.row != sym.col
    sym = sp.csr_matrix((np.ones(int(keep.sum()), dtype=np.int8), (sym.row[keep], sym.col[keep])), shape=(n, n))
    sym.sum_duplicates()
    sym.sort_indices()
    return sym.indptr.astype(np.int64), sym.indices.astype(np.int64)


def column_nets(mat: sp.csr_matrix) -> tuple[np.ndarray, np.ndarray]:
    r"""``(ptr, pins)``: net :math:`j` = :math:`\{i : M_{ij} \ne 0\} \cup \{j\}` (column-net model with the
    self-pin), as a CSR-like pin list over the ``n`` nets (sorted, no duplicates)."""
    n = mat.shape[0]
    pat = sp.csr_matrix((np.ones(mat.indices.size, dtype=np.int8), mat.indices, mat.indptr), shape=(n, n))
    nets = (pat.T + sp.identity(n, dtype=np.int8, format="csr")).tocsr()
    nets.sum_duplicates()
    nets.sort_indices()
    return nets.indptr.astype(np.int64), nets.indices.astype(np.int64)


# ---------------------------------------------------------------------------------------------- methods
def _random(mat, parts, seed, imbalance, weights):
    return RowPartition.random(mat.shape[0], parts, seed).part_of_old()


def _import(method: str):
    pkg = _PACKAGES[method]
    try:
        return __import__(pkg)
    except ImportError as exc:  # pragma: no cover - exercised with a monkeypatched import in tests
        raise GridGnnError(f"partition method {method!r} needs the package {pkg!r}, which is not installed "
                           f"(pip install 'gridgnn[partition]' or pip install {pkg}): {exc}") from exc


def _metis(mat, parts, seed, imbalance, weights, objective: str = "cut"):
    method = "metis" if objective == "cut" else "metis-vol"
    pymetis = _import(method)
    xadj, adjncy = symmetric_pattern(mat)
    opts = pymetis.Options(seed=int(seed) % (2 ** 31), ufactor=max(1, int(round(imbalance * 1000))),
                           objtype=int(pymetis.ObjType.CUT if objective == "cut" else pymetis.ObjType.VOL),
                           contig=0)
    try:
        res = pymetis.part_graph(int(parts), pymetis.CSRAdjacency(xadj, adjncy), vweights=weights,
                                 options=opts, recursive=False)
    except Exception as exc:  # METIS reports failures as exceptions with terse messages
        raise GridGnnError(f"partition method {method!r} (pymetis) failed for {parts} parts on "
                           f"{mat.shape[0]} vertices: {exc}") from exc
    return np.asarray(res.vertex_part, dtype=np.int64)


_KAHYPAR_LOCK = threading.Lock()
_KAHYPAR_STATE: dict = {}


def _kahypar_initializer(mtkahypar):
    with _KAHYPAR_LOCK:
        if "init" not in _KAHYPAR_STATE:
            threads = max(1, min(usable_cores(), 16))
            _KAHYPAR_STATE["init"] = mtkahypar.initialize(threads, False)
        return _KAHYPAR_STATE["init"]


def _hypergraph(mat, parts, seed, imbalance, weights):
    mtkahypar = _import("hypergraph")
    n = mat.shape[0]
    ptr, pins = column_nets(mat)
    sizes = np.diff(ptr)
    # nets with the self-pin only never cost volume; Mt-KaHyPar needs at least one net, keep one if all trivial
    keep = np.flatnonzero(sizes > 1)
    nets = [pins[ptr[j]:ptr[j + 1]].tolist() for j in keep]
    if not nets:
        nets = [[0]]
    try:
        init = _kahypar_initializer(mtkahypar)
        preset = os.environ.get("GRIDGNN_MTKAHYPAR_PRESET", "default").strip().upper()
        if not hasattr(mtkahypar.PresetType, preset):
            raise GridGnnError(f"GRIDGNN_MTKAHYPAR_PRESET={preset.lower()!r} is not a Mt-KaHyPar preset (use "
                               "default, quality, highest_quality, deterministic, large_k)")
        ctx = init.context_from_preset(getattr(mtkahypar.PresetType, preset))
        ctx.set_partitioning_parameters(int(parts), float(imbalance), mtkahypar.Objective.KM1)
        ctx.logging = False
        mtkahypar.set_seed(int(seed) % (2 ** 31))
        hg = init.create_hypergraph(ctx, n, len(nets), nets, weights.tolist(), [1] * len(nets))
        phg = hg.partition(ctx)
        part = np.asarray(phg.get_partition(), dtype=np.int64)
    except GridGnnError:
        raise
    except Exception as exc:
        raise GridGnnError(f"partition method 'hypergraph' (mtkahypar) failed for {parts} parts on "
                           f"{n} vertices: {exc}") from exc
    return part


def _balanced(mat, parts, seed, imbalance, weights, start: str):
    from .refine import refine_max_volume

    if start == "best":
        candidates = []
        for method in ("metis", "metis-vol", "hypergraph"):
            try:
                candidates.append(_balanced(mat, parts, seed, imbalance, weights, method))
            except GridGnnError:
                continue
        if not candidates:
            raise GridGnnError("partition method 'balanced:best' needs pymetis or mtkahypar")
        keys = []
        for part in candidates:
            send = volume_matrix(mat, part, parts).sum(axis=1)
            keys.append((int(send.max()), int(send.sum())))
        return candidates[min(range(len(keys)), key=keys.__getitem__)]
    if start not in _DISPATCH:
        raise GridGnnError(f"unknown start {start!r} for partition method 'balanced'; use balanced:<method> with "
                           f"one of random, metis, metis-vol, hypergraph, best")
    try:
        part = _DISPATCH[start](mat, parts, seed, imbalance, weights)
    except GridGnnError as exc:
        raise GridGnnError(f"partition method 'balanced' could not compute its {start!r} start: {exc}") from exc
    if start != "random":
        part = spread_isolated(mat, part, parts, weights, imbalance)
    part = repair_empty_parts(part, parts, weights)
    bound = _balance_bound(weights, parts, imbalance, part)
    part, _ = refine_max_volume(mat, part, parts, weights=weights, max_load=bound, seed=seed)
    return part


def _balance_bound(weights: np.ndarray, parts: int, imbalance: float, start: np.ndarray) -> int:
    """Largest allowed part weight: ``(1 + imbalance) ×`` the mean, or the start's maximum if that is larger
    (refinement never makes balance worse than its start, and never fails because the start was loose)."""
    mean = float(weights.sum()) / parts
    start_max = int(np.bincount(start, weights=weights, minlength=parts).max())
    return max(int(np.floor((1.0 + imbalance) * mean)), start_max, int(weights.max()))


_DISPATCH = {
    "random": _random,
    "metis": lambda m, k, s, e, w: _metis(m, k, s, e, w, "cut"),
    "metis-vol": lambda m, k, s, e, w: _metis(m, k, s, e, w, "vol"),
    "hypergraph": _hypergraph,
}  # (balanced and balanced:<start>: _method_fn, from the start they refine)


def _method_fn(method: str):
    start = balanced_start(method) if isinstance(method, str) else None
    if start is not None:
        return lambda m, k, s, e, w: _balanced(m, k, s, e, w, start)
    if method not in _DISPATCH:
        raise GridGnnError(f"unknown partition method {method!r}; choose one of {', '.join(METHODS)} "
                           f"(or balanced:<start method>, or a partition file)")
    return _DISPATCH[method]


# ---------------------------------------------------------------------------------------------- repair
def repair_empty_parts(part: np.ndarray, parts: int, weights: np.ndarray | None = None) -> np.ndarray:
    """Make every part non-empty, deterministically: while some part is empty, move the lightest vertex
    (ties: lowest id) of the heaviest part that has at least two vertices into the lowest-numbered empty
    part. Requires ``parts <= n``."""
    part = np.asarray(part, dtype=np.int64).copy()
    n = part.size
    if parts > n:
        raise GridGnnError(f"cannot split {n} vertices into {parts} non-empty parts")
    w = np.ones(n, dtype=np.int64) if weights is None else np.asarray(weights, dtype=np.int64)
    counts = np.bincount(part, minlength=parts)
    if counts.min() > 0:
        return part
    load = np.bincount(part, weights=w, minlength=parts).astype(np.int64)
    for e in np.flatnonzero(counts == 0):
        cand = np.flatnonzero(counts >= 2)
        h = cand[np.argmax(load[cand])]  # argmax: first (lowest id) among the heaviest
        members = np.flatnonzero(part == h)
        v = members[np.argmin(w[members])]  # lightest, lowest id
        part[v] = e
        counts[h] -= 1
        counts[e] += 1
        load[h] -= w[v]
        load[e] += w[v]
    return part


def spread_isolated(mat: sp.csr_matrix, part: np.ndarray, parts: int, weights: np.ndarray,
                    imbalance: float = 0.05) -> np.ndarray:
    r"""Re-place the vertices that have no edge (no off-diagonal nonzero in their row or column of M).

    They cost no communication wherever they are, but graph partitioners pile them into one or two parts
    (R-MAT: ~25 % of the vertices are isolated, and METIS leaves one part with ~3× the mean number of rows of
    :math:`H`). Deterministically, in increasing id, each goes to the part with the fewest vertices (ties: lowest
    id) among those whose weight stays ≤ ``max((1 + imbalance) × mean, current maximum)``; if none has room,
    to the lightest part. Volumes and the edge cut are unchanged.
    """
    part = np.asarray(part, dtype=np.int64).copy()
    n = part.size
    rows = np.repeat(np.arange(n), np.diff(mat.indptr))
    off = mat.indices != rows
    has_edge = np.zeros(n, dtype=bool)
    has_edge[rows[off]] = True
    has_edge[mat.indices[off]] = True
    iso = np.flatnonzero(~has_edge)
    if iso.size == 0:
        return part
    w = np.asarray(weights, dtype=np.int64)
    cap = max(int(np.floor((1.0 + imbalance) * w.sum() / parts)),
              int(np.bincount(part, weights=w, minlength=parts).max()))
    keep = has_edge
    count = np.bincount(part[keep], minlength=parts).astype(np.int64)
    load = np.bincount(part[keep], weights=w[keep], minlength=parts).astype(np.int64)
    heap = [(int(count[p]), p) for p in range(parts)]
    heapq.heapify(heap)
    for v in iso.tolist():
        wv = int(w[v])
        skipped = []
        chosen = -1
        while heap:
            c, p = heapq.heappop(heap)
            if c != count[p]:
                continue  # stale entry
            if load[p] + wv <= cap:
                chosen = p
                break
            skipped.append((c, p))
        for item in skipped:
            heapq.heappush(heap, item)
        if chosen < 0:
            chosen = int(np.argmin(load))
        part[v] = chosen
        count[chosen] += 1
        load[chosen] += wv
        heapq.heappush(heap, (int(count[chosen]), chosen))
    return part


# ---------------------------------------------------------------------------------------------- memory
#: Mt-KaHyPar's peak bytes per stored nonzero of :math:`M` (its column nets as the Python lists its binding takes,
#: then its own hypergraph), measured beside the graph: 153–197 on R-MAT scale 14–18 and SBM (2¹⁶ vertices).
HYPERGRAPH_BYTES_PER_NNZ = 220
#: METIS' (pymetis) peak bytes per stored nonzero: the symmetric pattern it reads and its coarsening levels,
#: ``max(floor, slope · (log2 nnz − 17))`` — measured 88, 95, 122, 141, 164 on R-MAT scale 14, 16, 18, 19, 20
#: (a skewed graph coarsens slowly, so the levels grow with it) and 91 on an SBM of 2¹⁶ vertices.
METIS_BYTES_PER_NNZ_FLOOR = 100
METIS_BYTES_PER_NNZ_SLOPE = 22


def balanced_start(method: str) -> str | None:
    """The start method ``balanced`` refines (``balanced:<start>``; plain ``balanced``: METIS), ``None`` for a
    method that is not ``balanced``."""
    if method == "balanced":
        return "metis"
    return method.split(":", 1)[1] if method.startswith("balanced:") else None


def partition_peak_bytes(method: str, n: int, nnz: int, *, symmetric: bool = True, parts: int = 1) -> int:
    r"""Peak memory of ``method`` beside the graph it partitions (``n`` vertices, ``nnz`` stored nonzeros of
    :math:`M`; not ``symmetric``: METIS reads :math:`M + M^\mathsf{T}`, up to twice the entries): the partitioner's
    own structures, plus the per-vertex arrays of the part map, the weights and the refinement (``balanced``: its
    start's peak; ``balanced:best``: the largest of the starts whose package is installed, which it runs one at a
    time; then the refinement's table of part counts per net, ``int32[n × parts]``). An upper estimate from the
    measurements above."""
    start = balanced_start(method)
    if start is not None:  # the start's peak, then the refinement's count table beside its two int64 patterns
        refine = 4 * n * int(parts) + 16 * nnz + 32 * n + 64 * n  # (patterns of M and of Mᵀ + I)
        return max(partition_peak_bytes(start, n, nnz, symmetric=symmetric), refine)
    if method == "best":
        installed = [m for m in ("metis", "hypergraph") if importlib.util.find_spec(_PACKAGES[m]) is not None]
        return max([partition_peak_bytes(m, n, nnz, symmetric=symmetric) for m in installed], default=64 * n)
    per_nnz, read = 0.0, nnz
    if method in ("metis", "metis-vol"):
        read = nnz if symmetric else 2 * nnz
        per_nnz = max(METIS_BYTES_PER_NNZ_FLOOR, METIS_BYTES_PER_NNZ_SLOPE * (np.log2(max(read, 2)) - 17))
    elif method == "hypergraph":
        per_nnz = HYPERGRAPH_BYTES_PER_NNZ
    return int(per_nnz * read + 64 * n)


# ---------------------------------------------------------------------------------------------- entry points
def partition_vector(graph_or_csr, parts: int, method: str, *, seed: int = 0,
                     imbalance: float = 0.05) -> np.ndarray:
    r"""Vertex → part map (``int64[n]``, original order, every part non-empty) by ``method``.

    Args:
        graph_or_csr: :class:`~gridgnn.graph.Graph` or SciPy sparse :math:`M` (rows = destinations).
        parts: number of parts (``P`` for 1D, ``P/c`` for 1.5D), ``1 <= parts <= n``.
        method: one of :data:`METHODS`.
        seed: seed of the randomized partitioners (each method is deterministic for a seed, but those that run
            Mt-KaHyPar: ``hypergraph``, ``balanced:hypergraph``, ``balanced:best``).
        imbalance: allowed load imbalance ε: the nnz weight of every part ≤ (1 + ε) × mean (METIS' ``ufactor``,
            Mt-KaHyPar's ε; ``random`` balances rows instead), default 0.05.

    Raises:
        GridGnnError: unknown method (the message lists the methods), a missing package (names the method and
            the package), ``parts`` out of range, or a partitioner failure.
    """
    fn = _method_fn(method)
    mat = as_csr(graph_or_csr)
    n = mat.shape[0]
    parts = int(parts)
    if parts < 1:
        raise GridGnnError(f"number of parts must be positive, got {parts}")
    if parts > n:
        raise GridGnnError(f"cannot split {n} vertices into {parts} non-empty parts")
    if not (0.0 <= float(imbalance) < 10.0):
        raise GridGnnError(f"imbalance must be in [0, 10), got {imbalance}")
    if parts == 1:
        return np.zeros(n, dtype=np.int64)
    symmetric = getattr(graph_or_csr, "directed", True) is False  # (a bare matrix: counted as directed)
    check_alloc(partition_peak_bytes(method, n, mat.nnz, symmetric=symmetric, parts=parts),
                f"partition method {method!r} on {n} vertices and {mat.nnz} stored nonzeros")
    weights = vertex_weights(mat)
    part = fn(mat, parts, int(seed), float(imbalance), weights)
    part = np.asarray(part, dtype=np.int64).reshape(-1)
    if part.size != n or (n and (part.min() < 0 or part.max() >= parts)):
        raise GridGnnError(f"partition method {method!r} returned an invalid part map "
                           f"({part.size} entries for {n} vertices, {parts} parts)")
    if method != "random" and not method.startswith("balanced"):  # balanced spreads before refining
        part = spread_isolated(mat, part, parts, weights, float(imbalance))
    return repair_empty_parts(part, parts, weights)


def partition_graph(graph_or_csr, parts: int, method: str, *, seed: int = 0,
                    imbalance: float = 0.05) -> RowPartition:
    r"""Partition the vertices of a graph into ``parts`` contiguous row blocks.

    The single entry point behind ``gridgnn partition`` and ``gridgnn train --partition``. See the module
    docstring for the methods and :func:`partition_vector` for the arguments.

    Returns:
        :class:`~gridgnn.partition.layout.RowPartition` with ``perm[new] = old`` (stable within a part),
        ``bounds`` of the ``parts`` non-empty blocks, and ``method`` = the method name.
        ``rp.part_of_old()`` gives the vertex → part map back.
    """
    if method == "random":  # exactly RowPartition.random: equal-size blocks after a seeded permutation
        mat = as_csr(graph_or_csr)
        n = mat.shape[0]
        if int(parts) < 1 or int(parts) > n:
            raise GridGnnError(f"cannot split {n} vertices into {parts} non-empty parts")
        rp = RowPartition.random(n, int(parts), seed)
        return rp
    part = partition_vector(graph_or_csr, parts, method, seed=seed, imbalance=imbalance)
    return RowPartition.from_parts(part, int(parts), method)


# ---------------------------------------------------------------------------------------------- files
def write_partition_file(path, part) -> None:
    """Write the part of every vertex in original order, one integer per line (the METIS / Graph-VB format).

    Args:
        path: output file.
        part: ``int[n]`` vertex → part map, or a :class:`~gridgnn.partition.layout.RowPartition`.
    """
    with open(path, "w", encoding="ascii") as fh:
        fh.write(partition_text(part))


def partition_text(part) -> str:
    """The partition file's text: the part of every vertex in original order, one integer per line."""
    if isinstance(part, RowPartition):
        part = part.part_of_old()
    part = np.asarray(part).reshape(-1).astype(np.int64)
    return "\n".join(map(str, part.tolist())) + "\n" if part.size else ""


def load_partition_file(path, n: int, parts: int) -> RowPartition:
    """Read a partition file (one part id per vertex, original order) into a :class:`RowPartition`.

    The file is ASCII text: exactly ``n`` lines, each one integer in ``0..parts-1`` (surrounding spaces are
    allowed, as are blank lines at the end), and every part must own at least one vertex (an empty block would
    give a rank no rows). A file larger than 32 bytes per vertex (plus 1 MiB) is refused before it is read.

    Raises:
        GridGnnError: missing or unreadable file, not a regular file, not ASCII, too large, wrong line count, a
            token that is not a plain decimal integer, a part id out of range (however many digits it has), or
            an empty part — naming the file and the line.
    """
    import stat
    from pathlib import Path

    p = Path(path)
    try:
        st = os.stat(p)
    except OSError as exc:
        raise GridGnnError(f"cannot read partition file {path}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        raise GridGnnError(f"cannot read partition file {path}: not a regular file")
    limit = 32 * n + (1 << 20)
    if st.st_size > limit:
        raise GridGnnError(f"partition file {path} has {st.st_size} bytes, more than {limit} for {n} vertices "
                           f"(one part id per line)")
    try:
        with open(p, "rb") as fh:
            raw = fh.read(limit + 1)
    except OSError as exc:
        raise GridGnnError(f"cannot read partition file {path}: {exc.strerror or exc}") from exc
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise GridGnnError(f"partition file {path}, line {line}: byte {raw[exc.start]:#04x} is not ASCII (expected "
                           f"one part id per line)") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    lines = [ln[:-1] if ln.endswith("\r") else ln for ln in lines]
    while lines and not lines[-1].strip():
        lines.pop()
    if len(lines) != n:
        raise GridGnnError(f"partition file {path} has {len(lines)} lines, expected one part id per vertex "
                           f"({n} vertices)")
    part = np.empty(n, dtype=np.int64)
    for k, line in enumerate(lines):
        tok = line.strip()
        body = tok[1:] if tok[:1] in "+-" else tok
        if not body.isdigit():
            shown = repr(tok) if len(tok) <= 40 else repr(tok[:37]) + "..."
            raise GridGnnError(f"partition file {path}, line {k + 1}: {shown} is not an integer part id")
        if len(body) > 40:
            raise GridGnnError(f"partition file {path}, line {k + 1}: part {tok[:20]}... ({len(body)} digits) out "
                               f"of range 0..{parts - 1}")
        v = int(tok)  # at most 40 digits: compared as a Python int, never stored before the range check
        if v < 0 or v >= parts:
            raise GridGnnError(f"partition file {path}, line {k + 1}: part {v} out of range 0..{parts - 1}")
        part[k] = v
    counts = np.bincount(part, minlength=parts)
    empty = np.flatnonzero(counts == 0)
    if empty.size:
        raise GridGnnError(f"partition file {path} leaves part {int(empty[0])} empty "
                           f"({empty.size} of {parts} parts have no vertex)")
    return RowPartition.from_parts(part, parts, "file")
