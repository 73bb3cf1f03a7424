r"""Sharded datasets on disk: each rank reads only the blocks it owns (Plexus §5.4, parallel data loading).

Paper: Ranjan et al., *Plexus: Taming Billion-edge Graphs with 3D Parallel Full-graph GNN Training*, §5.4:
"statically shards processed data into 2D files (e.g., 8x8), and the loader only loads, merges, and extracts
necessary shards" — for ogbn-papers100M on 64 GPUs CPU memory fell from 146 GB to 9 GB.

The stored matrix is the GCN propagation matrix :math:`\hat M = D^{-1/2}(M+I)D^{-1/2}`
(:func:`~gridgnn.graph.graph.gcn_normalize`, rows = destinations) after the permutations of
:mod:`gridgnn.partition.permute` (``perm[new] = old``):

.. math::

    \hat M^{rc} = P_r \hat M P_c^\mathsf{T} \quad (\text{even layers}), \qquad
    \hat M^{cr} = P_c \hat M P_r^\mathsf{T} \quad (\text{odd layers, only when } P_r \ne P_c),

each cut into the same :math:`R \times C` blocks by ``row_bounds = even_bounds(n, R)`` and
``col_bounds = even_bounds(n, C)``; block :math:`(a, b)` of a version holds its rows
``row_bounds[a]:row_bounds[a+1]`` and columns ``col_bounds[b]:col_bounds[b+1]``.

Directory layout (format version 2)::

    meta.json            n, nnz (of M), matrix_nnz (stored, of M̂), num_features, num_classes, directed, weighted,
                         blocks [R, C], row_bounds, col_bounds, method, seed, normalized, nnz_max_over_mean
                         (+ per version), block_nnz and block_nnz_cols (per version, the entries and the
                         distinct columns of every block), node_chunk_bounds, node_arrays (dtype and trailing shape), files (every
                         file name below) and checksums (the same structure as files: {"sha256", "bytes"} of each)
    perm_r.npy perm_c.npy
    rc/block_A_B.npz     CSR of block (A, B): indptr (int64[rows+1]), indices (int32/int64, block-local
                         columns, sorted), data (float64), shape (int64[2])
    cr/block_A_B.npz     the "cr" version (absent when perm_r == perm_c)
    nodes/NAME_K.npy     node array NAME ∈ {x, y, train_mask, val_mask, test_mask} for the original ids
                         node_chunk_bounds[K]:node_chunk_bounds[K+1]

Node data is stored in the **original** vertex order (chunked), so that any permutation can fetch its rows:
:meth:`ShardedDataset.node_rows` reads one chunk at a time and keeps only the requested rows, so its peak
memory is the output plus one chunk. Every file is a plain ``.npy``/``.npz`` read by
:mod:`gridgnn.graph.safe_io` (no pickles, sizes checked against the headers before allocating); ``meta.json`` is
written last, so an interrupted write leaves a directory the reader rejects. The reader trusts nothing in
``meta.json``: see :class:`ShardedDataset` for the checks.

**Content hashes** (format version 2). The writer records the SHA-256 and the byte size of every file it writes
(``checksums``, at the same place as its name in ``files``). Opening a dataset compares the size of every file with
``meta.json`` (one ``stat`` each, no read); each file's SHA-256 is computed, streamed, when the file is read and
before it is parsed — the permutations and the label and train-mask chunks when the dataset is opened, a block
file by :meth:`ShardedDataset.submatrix`, a node chunk by :meth:`ShardedDataset.node_rows` — so a rank hashes
only the files it reads, once (a file is hashed again only when its ``stat`` changed). A block whose values
were scaled, two swapped blocks or an edited feature chunk are refused with one line naming the file, instead of
training silently on other numbers. Version 1 datasets (no hashes) are refused: write them again with
``gridgnn shard``.

Memory of one rank of an :math:`R \times C` grid that reads one row band × one column band of one version and
its node rows: :math:`\approx \mathrm{nnz}/(RC)` entries plus :math:`n/C` feature rows, against
:math:`2\,\mathrm{nnz}` entries and :math:`n` rows for the whole dataset.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from ..errors import GridGnnError
from .files import atomic_write
from .graph import SPLITS, Graph, SplitFacts, _check_node_types, gcn_normalize
from .pipeline import _is_layout, typed_layout
from .safe_io import (MAX_ID, DataFileError, check_alloc, memmap_npy, npy_header, read_npy, read_npz,
                      regular_file, short)

__all__ = ["FORMAT_VERSION", "NODE_ARRAYS", "write_sharded", "ShardedDataset"]

#: What a loader noted about a graph that its input pipeline reads (:mod:`gridgnn.graph.pipeline`), kept in
#: ``meta.json``'s ``data_notes`` (optional: a dataset written before has none, and its features are used as stored)
DATA_NOTES = ("feature_norm", "features", "split_default", "duplicate_edges_merged", "symmetrized")

#: Version written to ``meta.json``; the reader refuses any other. 2: ``checksums`` (SHA-256 and size of every
#: file) and ``weighted``; 1 had neither.
FORMAT_VERSION = 2

#: Largest value of the GCN matrix M̂ where it is bounded by 1 (:func:`values_bounded`), plus the rounding of
#: ``w_ij / sqrt(d_i d_j)`` in float64.
VALUE_BOUND = 1.0 + 1e-9

#: Node arrays stored when the graph has them.
NODE_ARRAYS = ("x", "y", "train_mask", "val_mask", "test_mask")

_VERSIONS = ("rc", "cr")


def _even_bounds(n: int, parts: int) -> np.ndarray:
    # local copy of partition.layout.even_bounds: graph/ sits below partition/ in the dependency order
    base, extra = divmod(n, parts)
    sizes = np.full(parts, base, dtype=np.int64)
    sizes[:extra] += 1
    return np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)


def _check_perm(perm, n: int, what: str) -> np.ndarray:
    p = np.asarray(perm)
    if p.ndim != 1 or p.size != n or (p.size and not np.issubdtype(p.dtype, np.integer)):
        raise GridGnnError(f"{what} must be an integer array of length n={n}, got shape {p.shape} "
                           f"dtype {p.dtype}")
    p = p.astype(np.int64, copy=False)
    if p.size and (p.min() < 0 or p.max() >= n or np.any(np.bincount(p, minlength=n) != 1)):
        raise GridGnnError(f"{what} is not a permutation of 0..{n - 1}")
    return p


def _permuted(mat: sp.csr_matrix, perm_r: np.ndarray, perm_c: np.ndarray) -> sp.csr_matrix:
    r""":math:`P_r \hat M P_c^\mathsf{T}` (rows gathered, columns relabeled by the inverse of ``perm_c``)."""
    n = mat.shape[0]
    out = mat[perm_r]
    inv_c = np.empty(n, dtype=np.int64)
    inv_c[perm_c] = np.arange(n, dtype=np.int64)
    out = sp.csr_matrix((out.data, inv_c[out.indices], out.indptr), shape=(n, n))
    out.sort_indices()
    return out


def file_checksum(path) -> dict:
    """``{"sha256": hex, "bytes": size}`` of a file, read in chunks (constant memory)."""
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        digest = hashlib.file_digest(fh, "sha256").hexdigest()
    return {"sha256": digest, "bytes": int(size)}


def values_bounded(normalized: bool, directed: bool, weighted: bool) -> bool:
    r"""Whether every stored value is at most 1: true for :math:`\hat M = D^{-1/2}(M+I)D^{-1/2}` of a symmetric
    :math:`M` (:math:`d_i \ge w_{ij}` and :math:`d_j \ge w_{ji} = w_{ij}`) and of an unweighted one (an
    off-diagonal entry is :math:`1/\sqrt{d_i d_j}` with :math:`d_i \ge 2`); not for a weighted directed
    :math:`M` (an edge of weight 100 from a vertex whose only in-edge is its self-loop gives
    :math:`100/\sqrt{101}`), nor for an unnormalized store (raw weights)."""
    return bool(normalized and (not directed or not weighted))


def above_one_error(name: str, largest: float) -> GridGnnError:
    """The one line that refuses to write a normalized matrix holding a value above 1 where it cannot."""
    return GridGnnError(f"the normalized matrix of {name} holds {largest:.6g}, above 1, which an undirected or "
                        "unweighted graph cannot: is it marked undirected but not symmetric?")


def _block_name(version: str, a: int, b: int) -> str:
    return f"{version}/block_{a:03d}_{b:03d}.npz"


def block_index_dtype(cb: np.ndarray):
    """The dtype of a block's column indices: int32 while every column block is narrower than :math:`2^{31}`."""
    return np.int32 if int(np.diff(cb).max()) < 2 ** 31 else np.int64


def write_band(band: sp.csr_matrix, out: Path, version: str, a: int, cb: np.ndarray) -> tuple[list, list, list]:
    """Cut the row band ``a`` of a permuted matrix version (its rows, every column; CSR with sorted indices) into
    its column blocks and write them; returns the C file names, their nonzero counts and their distinct columns."""
    rows = band.shape[0]
    C = cb.size - 1
    idx_dtype = block_index_dtype(cb)
    local_row = np.repeat(np.arange(rows, dtype=np.int64), np.diff(band.indptr))
    blk = np.searchsorted(cb, band.indices, side="right") - 1
    # stable: inside each (block, row) the columns stay sorted
    order = np.argsort(blk * rows + local_row, kind="stable")
    blk_sorted = blk[order]
    row_sorted = local_row[order]
    col_sorted = band.indices[order]
    data_sorted = band.data[order]
    edges = np.searchsorted(blk_sorted, np.arange(C + 1), side="left")
    names, counts, cols = [], [], []
    for b in range(C):
        s, e = int(edges[b]), int(edges[b + 1])
        nrow = np.bincount(row_sorted[s:e], minlength=rows)
        indptr = np.concatenate([[0], np.cumsum(nrow)]).astype(np.int64)
        name, distinct = write_block(out, version, a, b, indptr, (col_sorted[s:e] - cb[b]).astype(idx_dtype),
                                     data_sorted[s:e], rows, int(cb[b + 1] - cb[b]))
        names.append(name)
        counts.append(e - s)
        cols.append(distinct)
    return names, counts, cols


def write_block(out: Path, version: str, a: int, b: int, indptr, indices, data, rows: int, cols: int) -> tuple:
    """Block ``(a, b)`` of a matrix version as its ``.npz`` (CSR: block-local sorted columns); returns its name and
    its distinct columns (``block_nnz_cols``: the rows a sparsity-aware fetch of this block moves)."""
    name = _block_name(version, a, b)
    np.savez(out / name, indptr=np.asarray(indptr, np.int64), indices=indices, data=np.asarray(data, np.float64),
             shape=np.array([rows, cols], dtype=np.int64))
    return name, int(np.count_nonzero(np.bincount(indices, minlength=cols))) if len(indices) else 0


def _write_version(mat: sp.csr_matrix, out: Path, version: str, rb: np.ndarray, cb: np.ndarray) -> tuple:
    """Cut ``mat`` into blocks and write them; returns the R×C list of file names, the ``int64[R, C]`` counts and
    the ``int64[R, C]`` distinct columns."""
    (out / version).mkdir(parents=True, exist_ok=True)
    names, counts, cols = [], [], []
    for a in range(rb.size - 1):
        row_names, row_counts, row_cols = write_band(mat[int(rb[a]):int(rb[a + 1])], out, version, a, cb)
        names.append(row_names)
        counts.append(row_counts)
        cols.append(row_cols)
    shape = (rb.size - 1, cb.size - 1)
    return names, np.array(counts, dtype=np.int64).reshape(shape), np.array(cols, dtype=np.int64).reshape(shape)


def _checksums(out: Path, files):
    """``files`` (names, nested) → the same structure of :func:`file_checksum` of each file."""
    if isinstance(files, str):
        return file_checksum(out / files)
    if isinstance(files, list):
        return [_checksums(out, f) for f in files]
    return {k: _checksums(out, v) for k, v in files.items()}


def _check_blocks(blocks, n: int) -> tuple[int, int]:
    try:
        R, C = (int(v) for v in blocks)
    except (TypeError, ValueError):
        raise GridGnnError(f"blocks must be a pair (R, C), got {blocks!r}") from None
    if R < 1 or C < 1 or R > n or C > n:
        raise GridGnnError(f"blocks {R}×{C} invalid for n={n}: each count must be in 1..n")
    return R, C


def _check_node_chunks(node_chunks, n: int, R: int, C: int) -> int:
    if node_chunks is None:
        node_chunks = max(1, min(R * C, math.ceil(n / 1024)))
    if isinstance(node_chunks, bool) or int(node_chunks) != node_chunks or not 1 <= node_chunks <= n:
        raise GridGnnError(f"--node-chunks (node_chunks) must be an integer in 1..n={n}, got {node_chunks!r}")
    return int(node_chunks)


def prepare_dir(out_dir) -> Path:
    """The dataset folder, created, without a ``meta.json`` (a half-rewritten folder must not look complete)."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise GridGnnError(f"sharded output {out} exists and is not a directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
        stale = out / "meta.json"
        if stale.exists():
            stale.unlink()
    except OSError as exc:
        raise GridGnnError(f"cannot create sharded dataset directory {out}: {exc.strerror or exc}") from exc
    return out


def write_sharded(graph: Graph, out_dir, *, perm_r, perm_c, blocks=(8, 8), partition_name: str = "identity",
                  normalize: bool = True, seed: int | None = None, node_chunks: int | None = None) -> dict:
    r"""Write ``graph`` as a sharded dataset directory (see the module docstring for the layout).

    Args:
        graph: the :class:`~gridgnn.graph.graph.Graph` (node arrays that are ``None`` are not stored).
        out_dir: output directory (created; existing files of the same names are overwritten).
        perm_r, perm_c: ``int[n]`` permutations, ``perm[new] = old``; equal arrays store one version.
        blocks: ``(R, C)``, blocks of every matrix version (default 8×8), each at most ``n``.
        partition_name: the permutation method, recorded in ``meta.json`` (e.g. ``"double-perm"``).
        normalize: store :math:`\hat M = D^{-1/2}(M+I)D^{-1/2}` (default) or, if ``False``, :math:`M` as is.
        seed: the permutation seed, recorded in ``meta.json``.
        node_chunks: chunks of the original order for node arrays (default ``min(R·C, ceil(n/1024))``, ≥ 1).

    Returns:
        The ``meta`` dict written to ``meta.json``.

    Raises:
        GridGnnError: bad blocks, permutations or output path.
    """
    if not isinstance(graph, Graph):
        raise GridGnnError(f"write_sharded needs a gridgnn Graph, got {type(graph).__name__}")
    n = graph.n
    R, C = _check_blocks(blocks, n)
    perm_r = _check_perm(perm_r, n, "perm_r")
    perm_c = _check_perm(perm_c, n, "perm_c")
    same = bool(np.array_equal(perm_r, perm_c))
    node_chunks = _check_node_chunks(node_chunks, n, R, C)
    out = prepare_dir(out_dir)

    mat = gcn_normalize(graph) if normalize else graph.csr()
    mat = sp.csr_matrix(mat)
    mat.sum_duplicates()
    if values_bounded(normalize, graph.directed, graph.values is not None) and mat.nnz \
            and float(mat.data.max()) > VALUE_BOUND:  # what the reader refuses: never write it
        raise above_one_error(graph.name, float(mat.data.max()))
    rb = _even_bounds(n, R)
    cb = _even_bounds(n, C)
    files = write_perms(out, perm_r, perm_c)
    block_counts, block_cols = {}, {}
    for version, (pr, pc) in (("rc", (perm_r, perm_c)), ("cr", (perm_c, perm_r))):
        if version == "cr" and same:
            break
        pm = _permuted(mat, pr, pc)
        files[version], block_counts[version], block_cols[version] = _write_version(pm, out, version, rb, cb)
        del pm
    node_arrays, files["nodes"], nb = write_node_arrays(
        out, {name: getattr(graph, name) for name in NODE_ARRAYS}, n, node_chunks)
    meta = dataset_meta(
        out, files, n=n, nnz=graph.nnz, matrix_nnz=mat.nnz, n_train=_labelled_train(graph),
        num_features=graph.num_features, num_classes=graph.num_classes, directed=graph.directed,
        normalized=normalize, rb=rb, cb=cb, method=partition_name, seed=seed, same=same, block_counts=block_counts,
        block_cols=block_cols, nb=nb, node_arrays=node_arrays, weighted=graph.values is not None, name=graph.name, graph_meta=graph.meta)
    # a typed graph's layout (what its model file records and inference compares) and its vertex types' id ranges
    types, node_types = typed_layout(graph.meta), graph.node_types
    if graph.edge_dim:  # (a model that would read them is refused on this dataset rather than trained without)
        meta["edge_features_not_written"] = int(graph.edge_dim)
    if types is not None:
        meta["types"] = types
    if node_types is not None:
        meta["node_types"] = {"names": [str(t) for t in node_types["names"]],
                              "offsets": [int(o) for o in node_types["offsets"]]}
    return write_meta(out, meta)


def write_perms(out: Path, perm_r: np.ndarray, perm_c: np.ndarray) -> dict:
    """The two permutation files; returns the ``files`` dict that names them."""
    np.save(out / "perm_r.npy", perm_r)
    np.save(out / "perm_c.npy", perm_c)
    return {"perm_r": "perm_r.npy", "perm_c": "perm_c.npy"}


def write_node_arrays(out: Path, arrays: dict, n: int, node_chunks: int) -> tuple[dict, dict, np.ndarray]:
    """Node arrays (``{name: array or None}``, original vertex order) in ``node_chunks`` chunks; returns their
    ``node_arrays`` (dtype and trailing shape), their file names and the chunk bounds."""
    nb = _even_bounds(n, node_chunks)
    (out / "nodes").mkdir(exist_ok=True)
    node_arrays, names_of = {}, {}
    for name in NODE_ARRAYS:
        arr = arrays.get(name)
        if arr is None:
            continue
        arr = np.ascontiguousarray(arr)
        node_arrays[name] = dict(dtype=arr.dtype.str, shape=list(arr.shape[1:]))
        names = []
        for k in range(node_chunks):
            fname = f"nodes/{name}_{k:04d}.npy"
            np.save(out / fname, arr[nb[k]:nb[k + 1]])
            names.append(fname)
        names_of[name] = names
    return node_arrays, names_of, nb


def dataset_meta(out: Path, files: dict, *, n: int, nnz: int, matrix_nnz: int, n_train: int, num_features: int,
                 num_classes: int, directed: bool, normalized: bool, rb, cb, method: str, seed, same: bool,
                 block_counts: dict, block_cols: dict, nb, node_arrays: dict, weighted: bool, name: str,
                 graph_meta: dict) -> dict:
    """The ``meta.json`` of a dataset whose files are written (their checksums are taken here)."""
    def ratio(c: np.ndarray) -> float:
        return float(c.max() / c.mean()) if c.mean() > 0 else 1.0

    allc = np.concatenate([c.reshape(-1) for c in block_counts.values()])
    return dict(
        format_version=FORMAT_VERSION, n=int(n), nnz=int(nnz), matrix_nnz=int(matrix_nnz), n_train=int(n_train),
        num_features=int(num_features), num_classes=int(num_classes), directed=bool(directed),
        normalized=bool(normalized), blocks=[rb.size - 1, cb.size - 1], row_bounds=rb.tolist(),
        col_bounds=cb.tolist(), method=str(method), seed=seed, versions=["rc"] if same else ["rc", "cr"],
        nnz_max_over_mean=ratio(allc),
        nnz_max_over_mean_by_version={v: ratio(c) for v, c in block_counts.items()},
        block_nnz={v: c.tolist() for v, c in block_counts.items()},
        block_nnz_cols={v: c.tolist() for v, c in block_cols.items()},
        node_chunk_bounds=nb.tolist(), node_arrays=node_arrays, files=files,
        checksums=_checksums(out, files), weighted=bool(weighted),
        name=name, spec=graph_meta.get("spec"),
        data_notes={k: graph_meta[k] for k in DATA_NOTES if isinstance(graph_meta.get(k), (str, int))},
    )


#: the largest ``meta.json`` read (its per-block lists of a 1000 × 1000 grid in both versions take about 0.2 GiB)
META_MAX_BYTES = 1 << 30


def _read_meta(path: Path):
    """``meta.json``'s JSON value (``ValueError``: larger than :data:`META_MAX_BYTES`, or not JSON)."""
    with open(path, "rb") as fh:  # (a read of N bytes allocates N first: the file's size, within the bound)
        raw = fh.read(min(os.fstat(fh.fileno()).st_size, META_MAX_BYTES) + 1)
    if len(raw) > META_MAX_BYTES:
        raise ValueError(f"larger than {META_MAX_BYTES} bytes")
    return json.loads(raw.decode("utf-8"))


def foreign_entry(folder: Path, *, ignore=()) -> str | None:
    """The first entry of ``folder`` that is not part of the sharded dataset its ``meta.json`` describes — a file
    the meta does not list, a link, a folder of another name, or ``meta.json`` itself when it is no dataset's —
    as a path relative to ``folder``; ``None`` when the folder holds that dataset and nothing else (``ignore``:
    names at the top that do not count, as a lock file). What replacing the folder would delete besides a
    dataset."""
    folder = Path(folder)
    try:
        meta = _read_meta(folder / "meta.json")
    except (OSError, ValueError, RecursionError):
        meta = None
    if not isinstance(meta, dict) or not isinstance(meta.get("format_version"), int) \
            or not isinstance(meta.get("files"), dict):
        return "meta.json"
    listed = {"meta.json"}

    def collect(v):
        if isinstance(v, str):
            listed.add(v)
        elif isinstance(v, (list, dict)):
            for w in (v.values() if isinstance(v, dict) else v):
                collect(w)
    collect(meta["files"])
    for root, dirs, files in os.walk(folder):
        rel = Path(root).relative_to(folder)
        for name in sorted(dirs) + sorted(files):
            path = (rel / name).as_posix()
            if rel == Path(".") and name in ignore:
                continue
            if os.path.islink(os.path.join(root, name)):
                return f"{path} (a link)"
            if name in dirs and (rel != Path(".") or name not in (*_VERSIONS, "nodes")):
                return f"{path}/"
            if name in files and path not in listed:
                return path
    return None


def write_meta(out: Path, meta: dict) -> dict:
    """``meta.json``, written last and atomically (:func:`~gridgnn.graph.files.atomic_write`: a folder without it is
    no dataset)."""
    with atomic_write(str(out / "meta.json"), "w") as fh:
        json.dump(meta, fh, indent=1)
    return meta


def _labelled_train(graph: Graph) -> int:
    """Number of training nodes with a label (the loss normalizer every rank needs)."""
    if graph.train_mask is None or graph.y is None:
        return 0
    return int((np.asarray(graph.train_mask, bool) & (np.asarray(graph.y) >= 0)).sum())


#: dtype kinds allowed for each node array, and its trailing shape rank
_NODE_KINDS = {"x": ("biuf", 1), "y": ("iu", 0), "train_mask": ("b", 0), "val_mask": ("b", 0), "test_mask": ("b", 0)}


def _is_int(v) -> bool:
    return type(v) is int


def _changed(f, what: str) -> str:
    return (f"{f}: {what}: the file was changed or swapped after gridgnn shard wrote it; write the dataset again "
            "with `gridgnn shard`")


class ShardedDataset:
    r"""Reader of a directory written by :func:`write_sharded`; reads files only when asked.

    Opening reads ``meta.json``, the two permutations (:math:`2n` ids), the headers of the node chunks and the
    label and train-mask chunks (one chunk at a time, :math:`9n` bytes in all). :meth:`submatrix` reads only
    the block files that intersect the requested range; :meth:`node_rows` only the node chunks that hold the
    requested ids.

    Nothing in ``meta.json`` is trusted: every field is type- and range-checked and checked against the stored
    arrays before use:

    * ``n``, ``blocks``, the bounds (rising from 0 to ``n``, ``R + 1`` and ``C + 1`` of them), ``versions``
      (``["rc"]`` exactly when ``perm_r == perm_c``, else ``["rc", "cr"]``; both permutation files must hold
      permutations of ``0..n-1``);
    * ``files``: every entry is a relative path that stays inside the dataset folder once resolved (``..``,
      absolute paths and symbolic links that lead out are refused) and names a regular file when read;
    * ``node_arrays`` against the header of every stored chunk (shape and dtype), ``num_features`` against the
      width of ``x``, ``num_classes`` against the largest stored label (``max(y) + 1``), ``n_train`` against the
      count of labelled training nodes in the stored ``y`` and ``train_mask``;
    * ``block_nnz`` (per version, summing to ``matrix_nnz``; ``matrix_nnz`` equals ``nnz`` for an unnormalized
      store and is at most ``nnz + n`` with the self-loops of :math:`\hat M`), and, when a block is read, its
      shape against the bounds and its entry count against ``block_nnz``; its values are finite, and for a
      normalized store non-negative and, where :func:`values_bounded` (an undirected or unweighted graph), at
      most 1;
    * ``block_nnz_cols`` (optional: per version, the distinct columns of every block, which the memory and byte
      models read as the rows a sparsity-aware fetch moves on these cuts): each at most its block's entries and
      width;
    * ``row_bounds`` and ``col_bounds`` are the even split of ``n`` into ``R`` and ``C`` blocks (what the writer
      writes: other bounds would contradict the block files that only the ranks read);
    * ``checksums``: a SHA-256 and a size for every file of ``files``; opening compares every file's size (a
      ``stat``), and every file's SHA-256 is checked when it is read, before it is parsed (see the module
      docstring).

    Args:
        path: the dataset directory.
        feature_norm: ``"none"``, ``"row"`` or ``"l2"``: how :meth:`node_rows` hands out the rows of ``x``
            (:func:`~gridgnn.graph.loaders.normalize_features`; row by row, so any subset reads alike).

    Raises:
        GridGnnError: missing directory or ``meta.json`` (naming the path), unreadable or inconsistent
            ``meta.json`` (naming the field), unsupported ``format_version``, invalid permutation files, a path
            outside the folder, stored arrays that contradict ``meta.json``.
    """

    def __init__(self, path, *, feature_norm: str = "none") -> None:
        self.path = Path(path)
        self.feature_norm = feature_norm
        if not self.path.is_dir():
            raise GridGnnError(f"sharded dataset directory {self.path} does not exist")
        try:
            self._root = self.path.resolve()
        except (OSError, RuntimeError) as exc:
            raise GridGnnError(f"cannot resolve sharded dataset directory {self.path}: {exc}") from None
        mpath = self.path / "meta.json"
        if not mpath.is_file():
            raise GridGnnError(f"{mpath} not found: {self.path} is not a sharded dataset (or its write did not "
                               "finish); write one with `gridgnn shard`")
        self._mpath = mpath
        self._inside("meta.json", "meta.json")
        try:
            meta = _read_meta(mpath)
        except (OSError, ValueError, RecursionError) as exc:
            raise GridGnnError(f"cannot read {mpath}: {type(exc).__name__}: {str(exc)[:200]}") from None
        if not isinstance(meta, dict):
            raise GridGnnError(f"{mpath} does not hold a JSON object")
        fv = meta.get("format_version")
        if fv == 1:
            raise GridGnnError(f"{mpath} has format_version 1 (written by an older gridgnn, without the content "
                               f"hashes that format_version {FORMAT_VERSION} checks); write the dataset again with "
                               "`gridgnn shard`")
        if fv != FORMAT_VERSION:
            raise GridGnnError(f"{mpath} has format_version {short(fv)}; this gridgnn reads format_version "
                               f"{FORMAT_VERSION} (rewrite the dataset with `gridgnn shard`)")
        self._verified: dict[str, tuple] = {}
        self._check_meta(meta)
        self._check_sizes()
        self.meta = meta
        self.directed = bool(meta["directed"])
        self.num_features = int(meta["num_features"])
        self.num_classes = int(meta["num_classes"])
        self.method = str(meta.get("method", ""))
        self.perm_r = self._load_perm(self._files["perm_r"], self._sums["perm_r"], "perm_r")
        self.perm_c = self._load_perm(self._files["perm_c"], self._sums["perm_c"], "perm_c")
        same = bool(np.array_equal(self.perm_r, self.perm_c))
        if same and "cr" in self.versions:
            raise GridGnnError(f"{mpath} is inconsistent: versions lists 'cr' but perm_r == perm_c (then both "
                               f"versions are the same matrix and only 'rc' is written)")
        if not same and "cr" not in self.versions:
            raise GridGnnError(f"{mpath} is inconsistent: perm_r != perm_c but versions lists only 'rc' (odd "
                               f"layers would use P_r M P_c^T instead of P_c M P_r^T)")
        self.block_cols = self._check_block_cols(meta.get("block_nnz_cols"))
        self._check_node_arrays()

    # ------------------------------------------------------------------ validation
    def _bad(self, msg: str) -> GridGnnError:
        return GridGnnError(f"{self._mpath} is inconsistent: {msg}")

    def _int(self, meta: dict, key: str, lo: int, hi: int) -> int:
        v = meta.get(key)
        if not _is_int(v) or not lo <= v <= hi:
            raise self._bad(f"{key} must be an integer in {lo}..{hi}, got {short(v)}")
        return v

    def _bounds(self, value, what: str, parts: int | None) -> np.ndarray:
        n = self.n
        if (not isinstance(value, list) or len(value) < 2 or len(value) > n + 1
                or (parts is not None and len(value) != parts + 1) or not all(_is_int(v) for v in value)):
            want = f"{parts + 1} integers" if parts is not None else "a list of at least 2 integers"
            raise self._bad(f"{what} must be {want} rising from 0 to n={n}, got {short(value)}")
        arr = np.asarray(value if all(0 <= v <= n for v in value) else [-1, -1], dtype=np.int64)
        if arr[0] != 0 or arr[-1] != n or np.any(np.diff(arr) < 0):
            raise self._bad(f"{what} must rise from 0 to n={n}" + (f" in {parts} blocks" if parts is not None else "")
                            + f", got {short(value)}")
        if parts is not None:
            even = _even_bounds(n, parts)
            if not np.array_equal(arr, even):
                raise self._bad(f"{what} must be the even split of n={n} into {parts} blocks, "
                                f"{short(even.tolist(), 60)} (what gridgnn shard writes), got {short(value, 60)}")
        return arr

    def _inside(self, rel, what: str) -> Path:
        r"""``self.path / rel`` after checking it stays inside the dataset folder (no ``..``, absolute path or
        symbolic link leading out)."""
        if not isinstance(rel, str) or not rel or "\x00" in rel or len(rel) > 4096:
            raise self._bad(f"files entry for {what} must be a relative path, got {short(rel)}")
        if Path(rel).is_absolute():
            raise self._bad(f"files entry for {what} is the absolute path {short(rel, 80)}; every file must lie "
                            f"inside {self.path}")
        f = self.path / rel
        try:
            real = f.resolve()
        except (OSError, RuntimeError, ValueError) as exc:
            raise self._bad(f"files entry for {what} {short(rel, 80)} cannot be resolved: {exc}") from None
        if real == self._root or not real.is_relative_to(self._root):
            raise self._bad(f"files entry for {what} {short(rel, 80)} leads to {real}, outside the dataset folder "
                            f"{self._root}")
        return f

    def _grid(self, value, what: str, check) -> list:
        R, C = self.blocks
        if not isinstance(value, list) or len(value) != R or \
                any(not isinstance(row, list) or len(row) != C for row in value):
            raise self._bad(f"{what} is not {R}×{C}")
        return [[check(value[a][b], f"{what}[{a}][{b}]") for b in range(C)] for a in range(R)]

    def _check_block_cols(self, value) -> dict | None:
        """``block_nnz_cols`` (per version, the distinct columns of every block; absent from datasets written before
        it): each at most its block's entries and its block's width."""
        if value is None:
            return None
        if not isinstance(value, dict):
            raise self._bad(f"block_nnz_cols must be an object with one grid per version, got {short(value)}")
        widths, heights = np.diff(self.col_bounds), np.diff(self.row_bounds)
        out = {}
        for v in self.versions:
            nnz = self._block_nnz[v]
            grid = self._grid(value.get(v), f"block_nnz_cols[{v!r}]", lambda x, what: x)
            for a, row in enumerate(grid):
                for b, x in enumerate(row):  # a row of the block has at most one entry per distinct column
                    low, top = -(-nnz[a][b] // max(1, int(heights[a]))), min(nnz[a][b], int(widths[b]))
                    if not _is_int(x) or not low <= x <= top:
                        raise self._bad(f"block_nnz_cols[{v!r}][{a}][{b}] must be an integer in {low}..{top}, "
                                        f"got {short(x)}")
            out[v] = grid
        return out

    def _check_meta(self, meta: dict) -> None:
        self.n = self._int(meta, "n", 1, MAX_ID)
        # what opening allocates: perm_r, perm_c and the permutation check (about 32 bytes per vertex); a rank
        # reads only its blocks and node rows afterwards, so the 64-byte ceiling of a whole Graph does not apply
        check_alloc(32 * self.n, f"{self._mpath}: opening a dataset of n={self.n} vertices (its two permutations)")
        n = self.n
        blocks = meta.get("blocks")
        if not isinstance(blocks, list) or len(blocks) != 2 or not all(_is_int(v) and 1 <= v <= n for v in blocks):
            raise self._bad(f"blocks must be two integers in 1..n={n}, got {short(blocks)}")
        self.blocks = (blocks[0], blocks[1])
        self.row_bounds = self._bounds(meta.get("row_bounds"), "row_bounds", self.blocks[0])
        self.col_bounds = self._bounds(meta.get("col_bounds"), "col_bounds", self.blocks[1])
        self.node_chunk_bounds = self._bounds(meta.get("node_chunk_bounds"), "node_chunk_bounds", None)
        versions = meta.get("versions")
        if versions not in (["rc"], ["rc", "cr"]):
            raise self._bad(f"versions must be ['rc'] or ['rc', 'cr'], got {short(versions)}")
        self.versions = tuple(versions)
        for key in ("directed", "normalized", "weighted"):
            if type(meta.get(key)) is not bool:
                raise self._bad(f"{key} must be true or false, got {short(meta.get(key))}")
        nnz = self._int(meta, "nnz", 0, MAX_ID)
        mnnz = self._int(meta, "matrix_nnz", 0, MAX_ID)
        if not meta["normalized"] and mnnz != nnz:
            raise self._bad(f"matrix_nnz={mnnz} but the unnormalized matrix has nnz={nnz} entries")
        if meta["normalized"] and mnnz > nnz + n:
            raise self._bad(f"matrix_nnz={mnnz} exceeds nnz + n = {nnz + n} (the normalized matrix only adds "
                            f"self-loops)")
        block_nnz = meta.get("block_nnz")
        if not isinstance(block_nnz, dict):
            raise self._bad(f"block_nnz must be an object with one grid per version, got {short(block_nnz)}")

        def count(v, what):
            if not _is_int(v) or not 0 <= v <= mnnz:
                raise self._bad(f"{what} must be an integer in 0..matrix_nnz={mnnz}, got {short(v)}")
            return v

        self._block_nnz = {}
        for v in self.versions:
            grid = self._grid(block_nnz.get(v), f"block_nnz[{v!r}]", count)
            total = sum(sum(row) for row in grid)
            if total != mnnz:
                raise self._bad(f"block_nnz[{v!r}] sums to {total}, matrix_nnz is {mnnz}")
            self._block_nnz[v] = grid

        files = meta.get("files")
        if not isinstance(files, dict):
            raise self._bad(f"files must be an object, got {short(files)}")
        self._files = {"perm_r": self._inside(files.get("perm_r"), "perm_r"),
                       "perm_c": self._inside(files.get("perm_c"), "perm_c")}
        for v in self.versions:
            self._files[v] = self._grid(files.get(v), f"files[{v!r}]", self._inside)

        arrays = meta.get("node_arrays")
        if not isinstance(arrays, dict) or not set(arrays) <= set(NODE_ARRAYS):
            raise self._bad(f"node_arrays must be an object with keys among {', '.join(NODE_ARRAYS)}, got "
                            f"{short(arrays)}")
        nodes = files.get("nodes")
        if not isinstance(nodes, dict):
            raise self._bad(f"files['nodes'] must be an object, got {short(nodes)}")
        chunks = self.node_chunk_bounds.size - 1
        self._node_info: dict[str, tuple[np.dtype, tuple]] = {}
        self._files["nodes"] = {}
        for name, info in arrays.items():
            kinds, rank = _NODE_KINDS[name]
            if not isinstance(info, dict) or not isinstance(info.get("dtype"), str) \
                    or not isinstance(info.get("shape"), list):
                raise self._bad(f"node_arrays[{name!r}] must hold dtype and shape, got {short(info)}")
            try:
                dtype = np.dtype(info["dtype"])
            except (TypeError, ValueError):
                raise self._bad(f"node_arrays[{name!r}] has an unknown dtype {short(info['dtype'])}") from None
            if dtype.kind not in kinds or dtype.fields is not None or dtype.subdtype is not None \
                    or not 0 < dtype.itemsize <= 8:
                raise self._bad(f"node_arrays[{name!r}] has dtype {dtype}, expected kind {'/'.join(kinds)}")
            tail = info["shape"]
            if len(tail) != rank or not all(_is_int(t) and 0 <= t <= MAX_ID for t in tail):
                raise self._bad(f"node_arrays[{name!r}] has trailing shape {short(tail)}, expected {rank} "
                                f"dimension(s)")
            self._node_info[name] = (dtype, tuple(tail))
            lst = nodes.get(name)
            if not isinstance(lst, list) or len(lst) != chunks:
                raise self._bad(f"files['nodes'][{name!r}] must list {chunks} chunk files (node_chunk_bounds), "
                                f"got {short(lst)}")
            self._files["nodes"][name] = [self._inside(rel, f"{name} chunk {k}") for k, rel in enumerate(lst)]
        self._check_checksums(meta.get("checksums"))
        self._bounded = values_bounded(meta["normalized"], meta["directed"], meta["weighted"])

        f = self._node_info["x"][1][0] if "x" in self._node_info else 0
        nf = self._int(meta, "num_features", 0, MAX_ID)
        if nf != f:
            raise self._bad(f"num_features={nf} but the stored features x have {f} columns")
        self._int(meta, "num_classes", 0, n)
        self._int(meta, "n_train", 0, n)
        if "y" not in self._node_info and meta["num_classes"] != 0:
            raise self._bad(f"num_classes={meta['num_classes']} but no labels y are stored")

    def _leaf(self, value, what: str) -> dict:
        if (not isinstance(value, dict) or set(value) != {"sha256", "bytes"} or not isinstance(value["sha256"], str)
                or len(value["sha256"]) != 64 or any(c not in "0123456789abcdef" for c in value["sha256"])
                or not _is_int(value["bytes"]) or not 0 <= value["bytes"] <= MAX_ID):
            raise self._bad(f"{what} must be {{\"sha256\": 64 hex digits, \"bytes\": size}}, got {short(value)}")
        return value

    def _check_checksums(self, sums) -> None:
        """``checksums``: one ``{"sha256", "bytes"}`` for every entry of ``files``, at the same place."""
        if not isinstance(sums, dict):
            raise self._bad(f"checksums must be an object shaped like files, got {short(sums)}")
        self._sums = {"perm_r": self._leaf(sums.get("perm_r"), "checksums['perm_r']"),
                      "perm_c": self._leaf(sums.get("perm_c"), "checksums['perm_c']")}
        for v in self.versions:
            self._sums[v] = self._grid(sums.get(v), f"checksums[{v!r}]", self._leaf)
        nodes = sums.get("nodes")
        if not isinstance(nodes, dict):
            raise self._bad(f"checksums['nodes'] must be an object, got {short(nodes)}")
        self._sums["nodes"] = {}
        for name, files in self._files["nodes"].items():
            lst = nodes.get(name)
            if not isinstance(lst, list) or len(lst) != len(files):
                raise self._bad(f"checksums['nodes'][{name!r}] must hold {len(files)} entries, got {short(lst)}")
            self._sums["nodes"][name] = [self._leaf(v, f"checksums['nodes'][{name!r}][{k}]")
                                         for k, v in enumerate(lst)]

    def _all_files(self):
        """``(path, checksum, what)`` of every file of the dataset."""
        out = [(self._files[k], self._sums[k], f"{k} file") for k in ("perm_r", "perm_c")]
        for v in self.versions:
            out += [(f, self._sums[v][a][b], "block file") for a, row in enumerate(self._files[v])
                    for b, f in enumerate(row)]
        for name, files in self._files["nodes"].items():
            out += [(f, self._sums["nodes"][name][k], "node chunk") for k, f in enumerate(files)]
        return out

    def _check_sizes(self) -> None:
        """Every file exists, is a regular file and has the size ``checksums`` records (a ``stat`` each, nothing
        read): a truncated, replaced or swapped file is refused when the dataset is opened — by the launching
        process, before any rank starts."""
        for f, want, what in self._all_files():
            try:
                _, size = regular_file(f, what)
            except DataFileError as exc:
                raise GridGnnError(f"{what} {f} is missing" if exc.missing else f"{what} {f}: {exc.reason}") \
                    from None
            if size != want["bytes"]:
                raise GridGnnError(_changed(f, f"its size ({size} bytes) does not match meta.json "
                                               f"({want['bytes']} bytes)"))

    def _verify(self, f: Path, want: dict) -> None:
        """The SHA-256 of file ``f`` against ``meta.json`` (streamed; skipped when this reader already verified
        the file and its ``stat`` is unchanged).

        Raises:
            DataFileError: missing or not a regular file (the caller names the kind of file).
            GridGnnError: another size or hash than ``meta.json`` records.
        """
        p, _ = regular_file(f, "file")
        try:
            st = os.stat(p)
            ident = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
            if self._verified.get(str(f)) == ident:
                return
            if st.st_size != want["bytes"]:
                raise GridGnnError(_changed(f, f"its size ({st.st_size} bytes) does not match meta.json "
                                               f"({want['bytes']} bytes)"))
            got = file_checksum(p)
        except OSError as exc:
            raise DataFileError(f, f"cannot read: {exc.strerror or exc}") from None
        if got["sha256"] != want["sha256"]:
            raise GridGnnError(_changed(f, "its content does not match the SHA-256 hash in meta.json"))
        self._verified[str(f)] = ident

    def _check_node_arrays(self) -> None:
        r"""Headers of every node chunk against ``node_arrays``; ``num_classes`` and ``n_train`` against the
        stored labels and train mask, and the masks' ``split_facts`` (read one chunk at a time)."""
        nb = self.node_chunk_bounds
        for name, (dtype, tail) in self._node_info.items():
            for k, f in enumerate(self._files["nodes"][name]):
                try:
                    hdr = npy_header(f, kinds=_NODE_KINDS[name][0], max_itemsize=8)
                except DataFileError as exc:
                    raise GridGnnError(f"node chunk {f} is {'missing' if exc.missing else 'corrupt'}: "
                                       f"{exc.reason}") from None
                want = (int(nb[k + 1] - nb[k]),) + tail
                if hdr.shape != want or hdr.dtype != dtype:
                    raise GridGnnError(f"node chunk {f} is corrupt: shape {hdr.shape} dtype {hdr.dtype}, meta.json "
                                       f"says {want} {dtype}")
        top, n_train = -1, 0
        self.split_facts = SplitFacts()  # what training checks of the splits (check_splits), chunk by chunk
        for k in range(nb.size - 1):
            y = np.asarray(self._chunk("y", k)) if "y" in self._node_info else None
            masks = {s: np.asarray(self._chunk(f"{s}_mask", k)) if f"{s}_mask" in self._node_info else None
                     for s in SPLITS}
            self.split_facts.add(masks, y, int(nb[k]))
            if y is None:
                continue
            if y.size:
                if y.min() < -1:
                    raise GridGnnError(f"node chunk {self._files['nodes']['y'][k]} is corrupt: label "
                                       f"{int(y.min())} (labels are >= 0, -1 = unlabelled)")
                top = max(top, int(y.max()))
            if masks["train"] is not None:
                n_train += int((masks["train"].astype(bool) & (y >= 0)).sum())
            del y, masks
        if top >= self.n:
            raise GridGnnError(f"{self._files['nodes']['y'][0].parent}: a stored label {top} is not below "
                               f"n={self.n}")
        if self.num_classes != top + 1:
            raise self._bad(f"num_classes={self.num_classes} but the stored labels give {top + 1} (largest label "
                            f"{top})")
        if self.meta["n_train"] != n_train:
            raise self._bad(f"n_train={self.meta['n_train']} but the stored train_mask and y hold {n_train} "
                            f"labelled training nodes")

    # ------------------------------------------------------------------ helpers
    def _chunk(self, name: str, k: int) -> np.ndarray:
        """Node chunk ``k`` of ``name``, memory-mapped after checking its header against ``meta.json``."""
        f = self._files["nodes"][name][k]
        dtype, tail = self._node_info[name]
        rows = int(self.node_chunk_bounds[k + 1] - self.node_chunk_bounds[k])
        try:
            self._verify(f, self._sums["nodes"][name][k])
            chunk = memmap_npy(f, kinds=_NODE_KINDS[name][0], max_itemsize=8)
        except DataFileError as exc:
            if exc.missing:
                raise GridGnnError(f"node chunk {f} is missing") from None
            raise GridGnnError(f"node chunk {f} is corrupt or unreadable: {exc.reason}") from None
        if chunk.shape != (rows,) + tail or chunk.dtype != dtype:
            raise GridGnnError(f"node chunk {f} is corrupt: shape {chunk.shape} dtype {chunk.dtype}, "
                               f"expected {(rows,) + tail} {dtype}")
        return chunk

    def _load_perm(self, f: Path, want: dict, what: str) -> np.ndarray:
        try:
            self._verify(f, want)
            p = read_npy(f, kinds="iu", max_itemsize=8)
        except DataFileError as exc:
            raise GridGnnError(f"cannot read {what} file {f}: {exc.reason}") from None
        try:
            return _check_perm(p, self.n, what)
        except GridGnnError as exc:
            raise GridGnnError(f"{f}: {exc}") from None

    def _resolve(self, version: str) -> str:
        if version not in _VERSIONS:
            raise GridGnnError(f"unknown matrix version {short(version)}; valid: 'rc' (P_r M P_c^T), "
                               f"'cr' (P_c M P_r^T)")
        if version not in self.versions:
            return "rc"  # perm_r == perm_c: both versions are the same matrix
        return version

    def _load_block(self, version: str, a: int, b: int) -> sp.csr_matrix:
        f = self._files[version][a][b]
        rows = int(self.row_bounds[a + 1] - self.row_bounds[a])
        cols = int(self.col_bounds[b + 1] - self.col_bounds[b])
        keys = {"indptr": ("iu", 8), "indices": ("iu", 8), "data": ("f", 8), "shape": ("iu", 8)}
        try:
            self._verify(f, self._sums[version][a][b])
            z = read_npz(f, keys)
        except DataFileError as exc:
            if exc.missing:
                raise GridGnnError(f"block file {f} is missing") from None
            raise GridGnnError(f"block file {f} is corrupt or unreadable: {exc.reason}") from None
        missing = [k for k in keys if k not in z]
        if missing:
            raise GridGnnError(f"block file {f} is corrupt: no array {', '.join(missing)}")
        indptr, indices, data, shape = z["indptr"], z["indices"], z["data"], z["shape"]
        want = self._block_nnz[version][a][b]
        bad = None
        if shape.tolist() != [rows, cols]:
            bad = f"shape {short(shape.tolist())} but meta.json says {rows}×{cols}"
        elif indptr.shape != (rows + 1,) or indptr[0] != 0 or np.any(np.diff(indptr.astype(np.int64)) < 0):
            bad = "invalid row pointer"
        elif int(indptr[-1]) != indices.size or indices.shape != data.shape or indices.ndim != 1:
            bad = f"row pointer ends at {int(indptr[-1])}, {indices.size} indices, {data.size} values"
        elif indices.size != want:
            bad = f"{indices.size} entries but meta.json block_nnz says {want}"
        elif indices.size and (indices.min() < 0 or int(indices.max()) >= cols):
            bad = f"column index out of range 0..{cols - 1}"
        elif self.block_cols is not None and \
                (distinct := int(np.count_nonzero(np.bincount(indices, minlength=cols)))) != \
                self.block_cols[version][a][b]:
            bad = f"{distinct} distinct columns but meta.json block_nnz_cols says {self.block_cols[version][a][b]}"
        elif not np.all(np.isfinite(data)):
            bad = "values are not finite"
        elif self.meta["normalized"] and np.any(data < 0):
            bad = "negative values (a normalized adjacency has none)"
        elif self._bounded and data.size and float(data.max()) > VALUE_BOUND:
            bad = (f"value {float(data.max()):.6g} above 1 (the normalized adjacency of an undirected or unweighted "
                   "graph has none)")
        if bad:
            raise GridGnnError(f"block file {f} is corrupt: {bad}")
        return sp.csr_matrix((data.astype(np.float64), indices.astype(np.int64), indptr.astype(np.int64)),
                             shape=(rows, cols))

    @staticmethod
    def _check_range(rng, n: int, what: str) -> tuple[int, int]:
        try:
            lo, hi = (int(v) for v in rng)
        except (TypeError, ValueError):
            raise GridGnnError(f"{what} must be a pair (start, stop), got {rng!r}") from None
        if not 0 <= lo <= hi <= n:
            raise GridGnnError(f"{what} [{lo}, {hi}) is not inside [0, {n}]")
        return lo, hi

    # ------------------------------------------------------------------ public
    def data_notes(self) -> dict:
        """``meta.json``'s ``data_notes`` (what the graph's loader noted: its features' conventional normalization,
        degree features, a default split, merged duplicates), checked; ``{}`` for a dataset written without them."""
        notes = self.meta.get("data_notes") or {}
        if not isinstance(notes, dict):
            raise self._bad(f"data_notes must be an object, got {short(notes)}")
        return {k: v for k, v in notes.items() if k in DATA_NOTES and isinstance(v, (str, int))
                and not isinstance(v, bool)}

    def types(self) -> dict | None:
        """A typed graph's layout (``{"vertices", "columns", "relations"}``: :func:`~gridgnn.graph.pipeline.typed_layout`)
        as written, checked; ``None`` for another graph."""
        types = self.meta.get("types")
        if types is not None and not _is_layout(types):
            raise self._bad(f"types must be an object of vertices, columns and relations, got {short(types)}")
        return types

    def edge_features_not_written(self) -> int:
        """The width of the source graph's edge features, which the dataset does not hold (0: it had none)."""
        width = self.meta.get("edge_features_not_written", 0)
        if not _is_int(width) or width < 0:
            raise self._bad(f"edge_features_not_written must be an integer >= 0, got {short(width)}")
        return int(width)

    def fingerprint(self) -> dict[str, str]:
        """What identifies this dataset's data (a checkpoint records it, as a graph's
        :meth:`~gridgnn.graph.graph.Graph.fingerprint`): a digest of every file's SHA-256 (``checksums``) and of what
        ``meta.json`` says they mean — no file is read. It depends on the layout too: the same graph sharded
        otherwise is another dataset to a resume (a dataset written in passes never holds the graph whole to hash
        it, and both paths write the same ``meta.json``)."""
        keys = ("checksums", "data_notes", "normalized", "directed", "weighted", "types", "node_types", "n", "nnz")
        text = json.dumps({k: self.meta.get(k) for k in keys}, sort_keys=True, default=str)
        return {"files": hashlib.blake2b(text.encode(), digest_size=16).hexdigest()}

    def node_types(self) -> dict | None:
        """The vertex types' names and id ranges (``{"names", "offsets"}``) as written, checked; ``None``."""
        types = self.meta.get("node_types")
        if types is not None:
            try:
                _check_node_types(types, self.n)
            except GridGnnError as exc:
                raise self._bad(str(exc)) from None
        return types

    def graph_meta(self) -> dict:
        """A copy of ``meta.json`` without the per-file lists (n, nnz, blocks, bounds, method, balance, ...)."""
        return {k: v for k, v in self.meta.items() if k not in ("files", "block_nnz", "block_nnz_cols", "checksums")}

    @property
    def double(self) -> bool:
        """Whether two matrix versions are stored (``perm_r != perm_c``)."""
        return "cr" in self.versions

    def perms(self) -> tuple[np.ndarray, np.ndarray]:
        """``(perm_r, perm_c)``, ``perm[new] = old``."""
        return self.perm_r, self.perm_c

    def submatrix(self, version: str, row_range, col_range) -> sp.csr_matrix:
        r"""Rows ``[r0, r1)`` × columns ``[c0, c1)`` of a matrix version, in its permuted labels.

        Version ``"rc"`` is :math:`P_r \hat M P_c^\mathsf{T}` (row :math:`a` is original vertex
        ``perm_r[a]``, column :math:`b` is ``perm_c[b]``); ``"cr"`` is :math:`P_c \hat M P_r^\mathsf{T}` and
        falls back to ``"rc"`` when the permutations are equal. Only the block files that intersect the range
        are read; each is sliced before the pieces are merged.

        Returns:
            ``float64`` CSR of shape ``(r1 - r0, c1 - c0)`` with sorted indices.

        Raises:
            GridGnnError: unknown version, a range outside ``[0, n]``, or a missing/corrupt block (naming it).
        """
        version = self._resolve(version)
        r0, r1 = self._check_range(row_range, self.n, "row range")
        c0, c1 = self._check_range(col_range, self.n, "column range")
        R, C = self.blocks
        rb, cb = self.row_bounds, self.col_bounds
        bands = []
        for a in range(R):
            ra0, ra1 = int(rb[a]), int(rb[a + 1])
            lo, hi = max(r0, ra0), min(r1, ra1)
            if lo >= hi:
                continue
            pieces = []
            for b in range(C):
                cb0, cb1 = int(cb[b]), int(cb[b + 1])
                clo, chi = max(c0, cb0), min(c1, cb1)
                if clo >= chi:
                    continue
                blk = self._load_block(version, a, b)
                pieces.append(blk[lo - ra0:hi - ra0, clo - cb0:chi - cb0])
                del blk
            if pieces:
                band = pieces[0] if len(pieces) == 1 else sp.hstack(pieces, format="csr")
            else:
                band = sp.csr_matrix((hi - lo, c1 - c0))
            bands.append(sp.csr_matrix(band))
        if not bands:
            out = sp.csr_matrix((r1 - r0, c1 - c0))
        elif len(bands) == 1:
            out = bands[0]
        else:
            out = sp.vstack(bands, format="csr")
        out = sp.csr_matrix(out, dtype=np.float64)
        out.sort_indices()
        return out

    def node_array_names(self) -> tuple[str, ...]:
        return tuple(self._node_info)

    def node_rows(self, name: str, ids) -> np.ndarray | None:
        r"""Rows of node array ``name`` for the original vertex ids ``ids``, in the order of ``ids``.

        ``None`` when ``name`` is one of :data:`NODE_ARRAYS` that the graph did not have (e.g. no labels), as
        the in-memory block source does.

        Reads only the chunks that contain a requested id, one at a time (peak memory: the output plus one
        chunk). For the input rows of a rank that owns columns :math:`[c_0, c_1)` of version ``"rc"`` pass
        ``perm_c[c0:c1]``.

        Raises:
            GridGnnError: unknown array name, ids out of range, missing/corrupt chunk (naming it).
        """
        arrays = self._node_info
        if name in NODE_ARRAYS and name not in arrays:
            return None
        if name not in arrays:
            raise GridGnnError(f"node array {short(name)} is not stored in {self.path}; stored: "
                               f"{', '.join(arrays) or 'none'}")
        ids = np.asarray(ids)
        if ids.size and not np.issubdtype(ids.dtype, np.integer):
            raise GridGnnError(f"node ids must be integers, got dtype {ids.dtype}")
        ids = ids.astype(np.int64).reshape(-1)
        if ids.size and (ids.min() < 0 or ids.max() >= self.n):
            bad = ids[(ids < 0) | (ids >= self.n)][0]
            raise GridGnnError(f"node id {int(bad)} out of range 0..{self.n - 1}")
        dtype, tail = arrays[name]
        out = np.empty((ids.size,) + tail, dtype=dtype)
        order = np.argsort(ids, kind="stable")
        sids = ids[order]
        nb = self.node_chunk_bounds
        edges = np.searchsorted(sids, nb, side="left")
        for k in range(nb.size - 1):
            s, e = int(edges[k]), int(edges[k + 1])
            if s == e:
                continue
            chunk = self._chunk(name, k)
            part = np.asarray(chunk[sids[s:e] - nb[k]])
            del chunk
            if part.dtype.kind == "f" and not np.all(np.isfinite(part)):
                raise GridGnnError(f"node chunk {self._files['nodes'][name][k]} is corrupt: NaN or inf values")
            if name == "y" and part.size and (part.min() < -1 or part.max() >= self.num_classes):
                raise GridGnnError(f"node chunk {self._files['nodes'][name][k]} is corrupt: labels outside "
                                   f"-1..{self.num_classes - 1}")
            out[order[s:e]] = part
        if name == "x" and self.feature_norm != "none":
            from .loaders import normalize_features

            out = normalize_features(out, self.feature_norm)
        return out

    def node_array(self, name: str) -> np.ndarray:
        """The whole node array ``name`` in original order (reads every chunk)."""
        return self.node_rows(name, np.arange(self.n, dtype=np.int64))

    def __repr__(self) -> str:
        R, C = self.blocks
        return (f"ShardedDataset({str(self.path)!r}, n={self.n}, blocks={R}x{C}, "
                f"method={self.meta.get('method')!r}, versions={list(self.versions)})")
