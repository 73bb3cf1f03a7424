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

Directory layout (format version 1)::

    meta.json            n, nnz (of M), matrix_nnz (stored, of M̂), num_features, num_classes, directed, blocks [R, C], row_bounds, col_bounds,
                         method, seed, normalized, nnz_max_over_mean (+ per version), node_chunk_bounds,
                         node_arrays (dtype and trailing shape), files (every file name below)
    perm_r.npy perm_c.npy
    rc/block_A_B.npz     CSR of block (A, B): indptr (int64[rows+1]), indices (int32/int64, block-local
                         columns, sorted), data (float64), shape (int64[2])
    cr/block_A_B.npz     the "cr" version (absent when perm_r == perm_c)
    nodes/NAME_K.npy     node array NAME ∈ {x, y, train_mask, val_mask, test_mask} for the original ids
                         node_chunk_bounds[K]:node_chunk_bounds[K+1]

Node data is stored in the **original** vertex order (chunked), so that any permutation can fetch its rows:
:meth:`ShardedDataset.node_rows` reads one chunk at a time and keeps only the requested rows, so its peak
memory is the output plus one chunk. Every file is a plain ``.npy``/``.npz`` read with
``allow_pickle=False``; ``meta.json`` is written last, so an interrupted write leaves a directory the reader
rejects.

Memory of one rank of an :math:`R \times C` grid that reads one row band × one column band of one version and
its node rows: :math:`\approx \mathrm{nnz}/(RC)` entries plus :math:`n/C` feature rows, against
:math:`2\,\mathrm{nnz}` entries and :math:`n` rows for the whole dataset.
"""
from __future__ import annotations

import json
import math
import os
import zipfile
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from ..errors import GridGnnError
from .graph import Graph, gcn_normalize

__all__ = ["FORMAT_VERSION", "NODE_ARRAYS", "write_sharded", "ShardedDataset"]

#: Version written to ``meta.json``; the reader refuses any other.
FORMAT_VERSION = 1

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


def _block_name(version: str, a: int, b: int) -> str:
    return f"{version}/block_{a:03d}_{b:03d}.npz"


def _write_version(mat: sp.csr_matrix, out: Path, version: str, rb: np.ndarray, cb: np.ndarray) -> list:
    """Cut ``mat`` into blocks and write them; returns the R×C list of file names."""
    (out / version).mkdir(parents=True, exist_ok=True)
    R, C = rb.size - 1, cb.size - 1
    names = []
    idx_dtype = np.int32 if int(np.diff(cb).max()) < 2 ** 31 else np.int64
    for a in range(R):
        r0, r1 = int(rb[a]), int(rb[a + 1])
        band = mat[r0:r1]
        rows = r1 - r0
        local_row = np.repeat(np.arange(rows, dtype=np.int64), np.diff(band.indptr))
        blk = np.searchsorted(cb, band.indices, side="right") - 1
        # stable: inside each (block, row) the columns stay sorted
        order = np.argsort(blk * rows + local_row, kind="stable")
        blk_sorted = blk[order]
        row_sorted = local_row[order]
        col_sorted = band.indices[order]
        data_sorted = band.data[order]
        edges = np.searchsorted(blk_sorted, np.arange(C + 1), side="left")
        row_names = []
        for b in range(C):
            s, e = int(edges[b]), int(edges[b + 1])
            counts = np.bincount(row_sorted[s:e], minlength=rows)
            indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
            name = _block_name(version, a, b)
            np.savez(out / name, indptr=indptr, indices=(col_sorted[s:e] - cb[b]).astype(idx_dtype),
                     data=data_sorted[s:e].astype(np.float64),
                     shape=np.array([rows, int(cb[b + 1] - cb[b])], dtype=np.int64))
            row_names.append(name)
        names.append(row_names)
    return names


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
    try:
        R, C = (int(v) for v in blocks)
    except (TypeError, ValueError):
        raise GridGnnError(f"blocks must be a pair (R, C), got {blocks!r}") from None
    if R < 1 or C < 1 or R > n or C > n:
        raise GridGnnError(f"blocks {R}×{C} invalid for n={n}: each count must be in 1..n")
    perm_r = _check_perm(perm_r, n, "perm_r")
    perm_c = _check_perm(perm_c, n, "perm_c")
    same = bool(np.array_equal(perm_r, perm_c))
    if node_chunks is None:
        node_chunks = max(1, min(R * C, math.ceil(n / 1024)))
    if isinstance(node_chunks, bool) or int(node_chunks) != node_chunks or not 1 <= node_chunks <= n:
        raise GridGnnError(f"node_chunks must be an integer in 1..n={n}, got {node_chunks!r}")
    node_chunks = int(node_chunks)
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise GridGnnError(f"sharded output {out} exists and is not a directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
        stale = out / "meta.json"
        if stale.exists():
            stale.unlink()  # a half-rewritten directory must not look complete
    except OSError as exc:
        raise GridGnnError(f"cannot create sharded dataset directory {out}: {exc.strerror or exc}") from exc

    mat = gcn_normalize(graph) if normalize else graph.csr()
    mat = sp.csr_matrix(mat)
    mat.sum_duplicates()
    rb = _even_bounds(n, R)
    cb = _even_bounds(n, C)
    np.save(out / "perm_r.npy", perm_r)
    np.save(out / "perm_c.npy", perm_c)
    files: dict = {"perm_r": "perm_r.npy", "perm_c": "perm_c.npy"}
    block_counts = {}
    for version, (pr, pc) in (("rc", (perm_r, perm_c)), ("cr", (perm_c, perm_r))):
        if version == "cr" and same:
            break
        pm = _permuted(mat, pr, pc)
        files[version] = _write_version(pm, out, version, rb, cb)
        del pm
        block_counts[version] = _count_blocks(mat, pr, pc, rb, cb)

    # node arrays, chunked in original order
    nb = _even_bounds(n, node_chunks)
    (out / "nodes").mkdir(exist_ok=True)
    node_arrays = {}
    files["nodes"] = {}
    for name in NODE_ARRAYS:
        arr = getattr(graph, name)
        if arr is None:
            continue
        arr = np.ascontiguousarray(arr)
        node_arrays[name] = dict(dtype=arr.dtype.str, shape=list(arr.shape[1:]))
        names = []
        for k in range(node_chunks):
            fname = f"nodes/{name}_{k:04d}.npy"
            np.save(out / fname, arr[nb[k]:nb[k + 1]])
            names.append(fname)
        files["nodes"][name] = names

    def ratio(c: np.ndarray) -> float:
        return float(c.max() / c.mean()) if c.mean() > 0 else 1.0

    allc = np.concatenate([c.reshape(-1) for c in block_counts.values()])
    meta = dict(
        format_version=FORMAT_VERSION, n=int(n), nnz=int(graph.nnz), matrix_nnz=int(mat.nnz),
        n_train=_labelled_train(graph),
        num_features=graph.num_features,
        num_classes=graph.num_classes, directed=bool(graph.directed), normalized=bool(normalize),
        blocks=[R, C], row_bounds=rb.tolist(), col_bounds=cb.tolist(), method=str(partition_name),
        seed=seed, versions=["rc"] if same else ["rc", "cr"],
        nnz_max_over_mean=ratio(allc),
        nnz_max_over_mean_by_version={v: ratio(c) for v, c in block_counts.items()},
        block_nnz={v: c.tolist() for v, c in block_counts.items()},
        node_chunk_bounds=nb.tolist(), node_arrays=node_arrays, files=files,
        name=graph.name, spec=graph.meta.get("spec"),
    )
    tmp = out / "meta.json.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(meta, fh, indent=1)
    os.replace(tmp, out / "meta.json")
    return meta


def _labelled_train(graph: Graph) -> int:
    """Number of training nodes with a label (the loss normalizer every rank needs)."""
    if graph.train_mask is None or graph.y is None:
        return 0
    return int((np.asarray(graph.train_mask, bool) & (np.asarray(graph.y) >= 0)).sum())


def _count_blocks(mat, pr, pc, rb, cb) -> np.ndarray:
    n = mat.shape[0]
    R, C = rb.size - 1, cb.size - 1
    row_block = np.empty(n, dtype=np.int64)
    row_block[pr] = np.searchsorted(rb, np.arange(n), side="right") - 1
    col_block = np.empty(n, dtype=np.int64)
    col_block[pc] = np.searchsorted(cb, np.arange(n), side="right") - 1
    key = np.repeat(row_block * C, np.diff(mat.indptr)) + col_block[mat.indices]
    return np.bincount(key, minlength=R * C).reshape(R, C).astype(np.int64)


class ShardedDataset:
    r"""Reader of a directory written by :func:`write_sharded`; reads files only when asked.

    Opening reads ``meta.json`` and the two permutations (:math:`2n` ids). :meth:`submatrix` reads only the
    block files that intersect the requested range; :meth:`node_rows` only the node chunks that hold the
    requested ids.

    Args:
        path: the dataset directory.

    Raises:
        GridGnnError: missing directory or ``meta.json`` (naming the path), unreadable or inconsistent
            ``meta.json``, unsupported ``format_version``, invalid permutation files.
    """

    def __init__(self, path) -> None:
        self.path = Path(path)
        if not self.path.is_dir():
            raise GridGnnError(f"sharded dataset directory {self.path} does not exist")
        mpath = self.path / "meta.json"
        if not mpath.is_file():
            raise GridGnnError(f"{mpath} not found: {self.path} is not a sharded dataset (or its write did not "
                               "finish); write one with `gridgnn shard`")
        try:
            with open(mpath, encoding="utf-8") as fh:
                meta = json.load(fh)
        except (OSError, ValueError) as exc:
            raise GridGnnError(f"cannot read {mpath}: {exc}") from exc
        if not isinstance(meta, dict):
            raise GridGnnError(f"{mpath} does not hold a JSON object")
        fv = meta.get("format_version")
        if fv != FORMAT_VERSION:
            raise GridGnnError(f"{mpath} has format_version {fv!r}; this gridgnn reads format_version "
                               f"{FORMAT_VERSION} (rewrite the dataset with `gridgnn shard`)")
        try:
            self.n = int(meta["n"])
            self.blocks = tuple(int(v) for v in meta["blocks"])
            self.row_bounds = np.asarray(meta["row_bounds"], dtype=np.int64)
            self.col_bounds = np.asarray(meta["col_bounds"], dtype=np.int64)
            self.node_chunk_bounds = np.asarray(meta["node_chunk_bounds"], dtype=np.int64)
            self.versions = tuple(meta["versions"])
            files = meta["files"]
            for v in self.versions:
                if v not in _VERSIONS:
                    raise ValueError(f"unknown version {v!r}")
                grid = files[v]
                if len(grid) != self.blocks[0] or any(len(r) != self.blocks[1] for r in grid):
                    raise ValueError(f"files[{v!r}] is not {self.blocks[0]}×{self.blocks[1]}")
            for name in meta["node_arrays"]:
                if len(files["nodes"][name]) != self.node_chunk_bounds.size - 1:
                    raise ValueError(f"files['nodes'][{name!r}] does not match node_chunk_bounds")
        except (KeyError, TypeError, ValueError) as exc:
            raise GridGnnError(f"{mpath} is inconsistent: {exc!r}") from exc
        for bounds, what, parts in ((self.row_bounds, "row_bounds", self.blocks[0]),
                                    (self.col_bounds, "col_bounds", self.blocks[1]),
                                    (self.node_chunk_bounds, "node_chunk_bounds", None)):
            if (bounds.size < 2 or bounds[0] != 0 or bounds[-1] != self.n or np.any(np.diff(bounds) < 0)
                    or (parts is not None and bounds.size != parts + 1)):
                raise GridGnnError(f"{mpath}: {what} must rise from 0 to n={self.n}"
                                   + (f" in {parts} blocks" if parts is not None else ""))
        self.meta = meta
        self.directed = bool(meta.get("directed", False))
        self.num_features = int(meta.get("num_features", 0))
        self.num_classes = int(meta.get("num_classes", 0))
        self.method = str(meta.get("method", ""))
        self.perm_r = self._load_perm(files["perm_r"], "perm_r")
        self.perm_c = self._load_perm(files["perm_c"], "perm_c")

    # ------------------------------------------------------------------ helpers
    def _file(self, rel: str) -> Path:
        return self.path / rel

    def _load_perm(self, rel: str, what: str) -> np.ndarray:
        f = self._file(rel)
        try:
            p = np.load(f, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise GridGnnError(f"cannot read {what} file {f}: {exc}") from exc
        try:
            return _check_perm(p, self.n, what)
        except GridGnnError as exc:
            raise GridGnnError(f"{f}: {exc}") from None

    def _resolve(self, version: str) -> str:
        if version not in _VERSIONS:
            raise GridGnnError(f"unknown matrix version {version!r}; valid: 'rc' (P_r M P_c^T), "
                               f"'cr' (P_c M P_r^T)")
        if version not in self.versions:
            return "rc"  # perm_r == perm_c: both versions are the same matrix
        return version

    def _load_block(self, version: str, a: int, b: int) -> sp.csr_matrix:
        f = self._file(self.meta["files"][version][a][b])
        rows = int(self.row_bounds[a + 1] - self.row_bounds[a])
        cols = int(self.col_bounds[b + 1] - self.col_bounds[b])
        try:
            with np.load(f, allow_pickle=False) as z:
                indptr, indices, data, shape = z["indptr"], z["indices"], z["data"], z["shape"]
        except FileNotFoundError:
            raise GridGnnError(f"block file {f} is missing") from None
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
            raise GridGnnError(f"block file {f} is corrupt or unreadable: {exc}") from exc
        bad = None
        if shape.tolist() != [rows, cols]:
            bad = f"shape {shape.tolist()} but meta.json says {rows}×{cols}"
        elif indptr.shape != (rows + 1,) or indptr[0] != 0 or np.any(np.diff(indptr) < 0):
            bad = "invalid row pointer"
        elif indptr[-1] != indices.size or indices.size != data.size:
            bad = f"row pointer ends at {int(indptr[-1])}, {indices.size} indices, {data.size} values"
        elif indices.size and (indices.min() < 0 or indices.max() >= cols):
            bad = f"column index out of range 0..{cols - 1}"
        elif not np.issubdtype(data.dtype, np.floating) or not np.all(np.isfinite(data)):
            bad = "values are not finite floats"
        if bad:
            raise GridGnnError(f"block file {f} is corrupt: {bad}")
        return sp.csr_matrix((data, indices, indptr), shape=(rows, cols))

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
    def graph_meta(self) -> dict:
        """A copy of ``meta.json`` without the per-file lists (n, nnz, blocks, bounds, method, balance, ...)."""
        return {k: v for k, v in self.meta.items() if k not in ("files", "block_nnz")}

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
        return tuple(self.meta["node_arrays"])

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
        arrays = self.meta["node_arrays"]
        if name in NODE_ARRAYS and name not in arrays:
            return None
        if name not in arrays:
            raise GridGnnError(f"node array {name!r} is not stored in {self.path}; stored: "
                               f"{', '.join(arrays) or 'none'}")
        ids = np.asarray(ids)
        if ids.size and not np.issubdtype(ids.dtype, np.integer):
            raise GridGnnError(f"node ids must be integers, got dtype {ids.dtype}")
        ids = ids.astype(np.int64).reshape(-1)
        if ids.size and (ids.min() < 0 or ids.max() >= self.n):
            bad = ids[(ids < 0) | (ids >= self.n)][0]
            raise GridGnnError(f"node id {int(bad)} out of range 0..{self.n - 1}")
        info = arrays[name]
        dtype = np.dtype(info["dtype"])
        tail = tuple(int(v) for v in info["shape"])
        out = np.empty((ids.size,) + tail, dtype=dtype)
        order = np.argsort(ids, kind="stable")
        sids = ids[order]
        nb = self.node_chunk_bounds
        edges = np.searchsorted(sids, nb, side="left")
        for k in range(nb.size - 1):
            s, e = int(edges[k]), int(edges[k + 1])
            if s == e:
                continue
            f = self._file(self.meta["files"]["nodes"][name][k])
            rows = int(nb[k + 1] - nb[k])
            try:
                chunk = np.load(f, mmap_mode="r", allow_pickle=False)
            except FileNotFoundError:
                raise GridGnnError(f"node chunk {f} is missing") from None
            except (OSError, ValueError, EOFError) as exc:
                raise GridGnnError(f"node chunk {f} is corrupt or unreadable: {exc}") from exc
            if chunk.shape != (rows,) + tail or chunk.dtype != dtype:
                raise GridGnnError(f"node chunk {f} is corrupt: shape {chunk.shape} dtype {chunk.dtype}, "
                                   f"expected {(rows,) + tail} {dtype}")
            out[order[s:e]] = chunk[sids[s:e] - nb[k]]
            del chunk
        return out

    def node_array(self, name: str) -> np.ndarray:
        """The whole node array ``name`` in original order (reads every chunk)."""
        return self.node_rows(name, np.arange(self.n, dtype=np.int64))

    def __repr__(self) -> str:
        R, C = self.blocks
        return (f"ShardedDataset({str(self.path)!r}, n={self.n}, blocks={R}x{C}, "
                f"method={self.meta.get('method')!r}, versions={list(self.versions)})")
