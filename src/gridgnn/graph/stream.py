r"""A text edge list, Matrix Market file or generated R-MAT graph larger than memory, sharded in passes (``gridgnn
shard --memory-budget``, issue 45): bit for bit the dataset that :func:`~gridgnn.graph.sharded.write_sharded` writes
of the graph :func:`~gridgnn.graph.loaders.load_edgelist` (:func:`~gridgnn.graph.loaders.load_mtx`,
:func:`~gridgnn.graph.synthetic.rmat_graph`) gives, while this process holds one piece of the file, one band of
rows or a few arrays of one number per vertex at a time. Ids are 64-bit throughout.

The passes, with what each holds:

1. **parse** (:class:`StreamedEdgeList`): the file a piece at a time, checked as the loader checks it
   (:func:`~gridgnn.graph.loaders.edgelist_chunks`, :func:`~gridgnn.graph.loaders.mtx_chunks`: a symmetric Matrix
   Market file's mirrored entries spilled apart and appended after the listed ones, the loader's order); each piece's edges spilled to a scratch folder as binary
   (``int64`` ids, ``float64`` weights); the largest id (or, with ``relabel``, the distinct ids). A generated R-MAT
   graph (:meth:`StreamedEdgeList.rmat`) is generated a piece of edges at a time instead (self-loops left out).
2. **bucket**: every edge into the band of rows of its destination; bands are contiguous vertex ranges of about
   equal entry counts, as many as the budget needs.
3. **merge**: per band, the band's rows of :math:`M` exactly as the loader builds the whole matrix (SciPy's
   COO → CSR of the band's edges in file order sums the duplicates; an unweighted entry is 1), and, for an
   undirected or undetermined graph, each merged entry sent transposed to the band of its column.
4. **symmetrize** (``directed=0``: :math:`\max(M, M^\mathsf{T})` per band) or **detect** (``directed`` not given:
   :math:`M \ne M^\mathsf{T}` counted per band).
5. **degrees**: per band, the rows of :math:`M + I` (:func:`~gridgnn.graph.graph.with_self_loops`) and their
   :math:`D^{-1/2}`; in- and out-degrees for the degree features.
6. **normalize and permute**: per band, :math:`\hat M`'s rows (:func:`~gridgnn.graph.graph.scale_rows`); every
   entry sent, with its new row and column, to the band of its new row in each matrix version.
7. **write**: per block of the dataset, its CSR sorted by column (:func:`~gridgnn.graph.sharded.write_block`, as
   the in-memory path writes it); the node arrays (a file's degree features; a generated graph's own features,
   labels and masks) and ``meta.json``. A block is the unit
   written, so the dataset's ``--blocks`` must cut the matrix into blocks that fit the budget.

Every operation is row-local with the in-memory path's arithmetic in the same order, which is why the values are
the same bits. The scratch folder (``gridgnn shard`` puts it beside ``--out``) is removed before ``meta.json`` is
written. A band holds whole rows, so one vertex of more entries than a band's share of the budget makes its band
larger than the share (only the blocks written in pass 7 are checked against the budget).
"""
from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from ..errors import GridGnnError
from .graph import inverse_sqrt_degrees, negative_weight_error, scale_rows, union_max, with_self_loops
from .loaders import (_check_file, check_count_options, count_from_largest, degree_columns, edgelist_chunks,
                      header_count, mtx_chunks, out_of_range)
from .safe_io import check_vertex_count, human_bytes
from .synthetic import RmatStream
from .sharded import (VALUE_BOUND, _check_blocks, above_one_error, _check_node_chunks, _check_perm, _even_bounds, block_index_dtype,
                      dataset_meta, prepare_dir, values_bounded, write_block, write_meta, write_node_arrays,
                      write_perms)

__all__ = ["StreamedEdgeList", "BAND_BYTES_PER_ENTRY", "BYTES_PER_VERTEX", "TEXT_BYTES_PER_BYTE", "disk_need",
           "check_disk"]

#: Peak bytes per stored entry of a band while it is merged, symmetrized, normalized or written (the band's edges,
#: SciPy's COO → CSR copies, the transposed rows and the maximum, the permuted keys): sets the number of bands.
BAND_BYTES_PER_ENTRY = 200
#: Peak bytes per stored entry of one block while pass 7 writes it (its entries read back, the COO → CSR copies).
BLOCK_BYTES_PER_ENTRY = 96
#: Arrays of one number per vertex held across the passes: the two permutations and their inverses, D^-1/2, the
#: degrees, the band counts, the distinct ids and the features (with their float64 temporaries).
BYTES_PER_VERTEX = 200
#: Python's parse of one byte of edge-list text (the lines, their tokens, the parsed arrays): sets the piece size.
TEXT_BYTES_PER_BYTE = 64
#: The smallest piece of text read at a time.
MIN_PIECE_BYTES = 1 << 16
#: Scratch bytes of one spilled entry (``int64`` row and column, ``float64`` value) and of one entry of a band's
#: merged CSR (``int64`` column, ``float64`` value; its row pointer is 8 bytes per vertex).
SPILL_BYTES_PER_ENTRY = 24
MERGED_BYTES_PER_ENTRY = 16


class _Buckets:
    """Append-only binary buckets in a scratch folder: bucket ``k`` holds one file per column (fixed dtypes), the
    rows appended in order (a stable scatter keeps the file order inside every bucket)."""

    def __init__(self, folder: Path, name: str, dtypes: tuple):
        self.folder = folder / name
        self.folder.mkdir(parents=True)
        self.dtypes = dtypes
        self.rows: dict[int, int] = {}

    def _file(self, k: int, j: int) -> Path:
        return self.folder / f"{k}.{j}"

    def add(self, k: int, *columns) -> None:
        """Append ``columns`` (equal lengths) to bucket ``k``."""
        for j, (col, dt) in enumerate(zip(columns, self.dtypes)):
            with open(self._file(k, j), "ab") as fh:
                np.ascontiguousarray(col, dtype=dt).tofile(fh)
        self.rows[k] = self.rows.get(k, 0) + len(columns[0])

    def scatter(self, keys: np.ndarray, *columns) -> None:
        """Append each row to the bucket its key names, in the given order within each bucket."""
        order = np.argsort(keys, kind="stable")
        keys = keys[order]
        cuts = np.flatnonzero(np.diff(keys)) + 1
        for lo, hi in zip(np.concatenate([[0], cuts]), np.concatenate([cuts, [keys.size]])):
            if hi > lo:
                sel = order[lo:hi]
                self.add(int(keys[lo]), *[c[sel] for c in columns])

    def read(self, k: int) -> list[np.ndarray]:
        """Bucket ``k``'s columns (empty arrays when it has no rows)."""
        if k not in self.rows:
            return [np.zeros(0, dt) for dt in self.dtypes]
        return [np.fromfile(self._file(k, j), dtype=dt) for j, dt in enumerate(self.dtypes)]

    def pieces(self, k: int, rows: int):
        """Bucket ``k``'s columns, ``rows`` at a time."""
        total = self.rows.get(k, 0)
        handles = [open(self._file(k, j), "rb") for j in range(len(self.dtypes))] if total else []
        try:
            for start in range(0, total, rows):
                count = min(rows, total - start)
                yield [np.fromfile(fh, dtype=dt, count=count) for fh, dt in zip(handles, self.dtypes)]
        finally:
            for fh in handles:
                fh.close()

    def drop(self, k: int) -> None:
        for j in range(len(self.dtypes)):
            self._file(k, j).unlink(missing_ok=True)
        self.rows.pop(k, None)


_CSR_PARTS = (("indptr", np.int64), ("indices", np.int64), ("data", np.float64))


def _save_csr(folder: Path, k: int, mat: sp.csr_matrix) -> None:
    """A band's CSR as raw binary scratch files (this process's own, read back by :func:`_load_csr`)."""
    for name, dt in _CSR_PARTS:
        np.ascontiguousarray(getattr(mat, name), dtype=dt).tofile(folder / f"{k}.{name}")


def _load_csr(folder: Path, k: int, shape) -> sp.csr_matrix:
    indptr, indices, data = (np.fromfile(folder / f"{k}.{name}", dtype=dt) for name, dt in _CSR_PARTS)
    return sp.csr_matrix((data, indices, indptr), shape=shape)


def disk_need(n: int, listed: int, *, reverses: bool, symmetrize: bool, versions: int, blocks: tuple[int, int],
              node_bytes: int) -> tuple[int, int, int]:
    r"""``(scratch, dataset, together)``: the most bytes the passes hold in the scratch folder at once, the bytes of
    the written dataset, and the most both hold at once (where they share a disk) — upper bounds, for a check of
    the disk before the passes.

    ``listed`` entries are spilled in pass 1 (:data:`SPILL_BYTES_PER_ENTRY` each); pass 2 copies them into bands
    (both copies on disk until the first is dropped); pass 3 merges a band at a time into CSR
    (:data:`MERGED_BYTES_PER_ENTRY` per entry and 8 bytes per vertex) and, with ``reverses`` (an undirected or
    undetermined graph), spills each merged entry transposed; pass 4, with ``symmetrize``, may double the merged
    entries (the maximum with the transpose); pass 6 spills every entry of :math:`\hat M` (the merged ones and the
    ``n`` self-loops) once per matrix version (``versions``, 1 or 2) while the merged bands are still there; pass 7
    writes the dataset (per version every entry as a column of at most 8 bytes and a ``float64`` value, each
    block's ``int64`` row pointer; the permutations and ``node_bytes`` of node arrays) while it drops the spilled
    blocks."""
    R, C = blocks
    merged = 2 * listed if symmetrize else listed
    entries = merged + n  # M̂: the merged entries and the self-loops
    spill, csr = SPILL_BYTES_PER_ENTRY, MERGED_BYTES_PER_ENTRY
    trans = spill * listed if reverses else 0
    permuted = spill * versions * entries
    scratch = max(2 * spill * listed,                                     # pass 2
                  spill * listed + csr * listed + 8 * n + trans,          # pass 3
                  csr * merged + 8 * n + trans,                           # pass 4
                  csr * merged + 8 * n + permuted)                        # pass 6
    dataset = versions * (16 * entries + 8 * C * (n + R)) + 16 * n + node_bytes
    return scratch, dataset, max(scratch, permuted + dataset)              # pass 7 beside the others


def _existing(folder: Path) -> Path:
    """``folder``, or its nearest parent that exists (where a folder not made yet will lie)."""
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return folder


def _device(folder: Path) -> int:
    """The filesystem ``folder`` lies on."""
    return folder.stat().st_dev


def check_disk(scratch, out, need: tuple[int, int, int], *, held: int = 0) -> None:
    """Refuse, in one line, passes whose :func:`disk_need` ``need`` would not fit the free disk of the scratch
    folder and of the dataset's folder (both at once where they share a filesystem); ``held``: scratch bytes already
    on disk (counted in ``need``, no longer free)."""
    scratch, out = _existing(Path(scratch)), _existing(Path(out))
    need_scratch, need_dataset, need_together = need
    if _device(scratch) == _device(out):
        wants = [(scratch, need_together, held, "the scratch files and the dataset")]
    else:
        wants = [(scratch, need_scratch, held, "the scratch files"), (out, need_dataset, 0, "the dataset")]
    for folder, want, mine, what in wants:
        free = shutil.disk_usage(folder).free
        if want > free + mine:
            spilled = f" beside the {human_bytes(mine)} of edges spilled already" if mine else ""
            raise GridGnnError(f"sharding in passes needs up to about {human_bytes(want)} of disk for {what} in "
                               f"{folder}, but {human_bytes(free)} are free there{spilled}: free disk space or put "
                               "--out on a larger disk")


class StreamedEdgeList:
    r"""An edge list parsed once, a piece at a time, into a scratch folder (pass 1 of the module docstring); then
    :meth:`write_sharded` writes the dataset (passes 2–7) under ``memory_budget`` bytes.

    Args:
        path: the edge-list file (:func:`~gridgnn.graph.loaders.load_edgelist`'s format; no edge features), or with
            ``fmt="mtx"`` a Matrix Market file (:func:`~gridgnn.graph.loaders.load_mtx`'s; ``directed`` then follows
            its symmetry).
        scratch: a new folder for the spilled edges (removed by :meth:`close`).
        memory_budget: bytes this process may use for the passes' data.
        directed, num_nodes, relabel: as :func:`~gridgnn.graph.loaders.load_edgelist` takes them.
        spec: the data SPEC, recorded in ``meta.json`` as the in-memory path records it.

    Attributes:
        n (int): vertices; ``entries`` (int): edges spilled (those the file lists; a symmetric Matrix Market file's
        mirrored ones too); ``weighted`` (bool): a weight column.
    """

    def __init__(self, path, scratch, *, memory_budget: int, directed: bool | None = None, num_nodes=None,
                 relabel: bool = False, spec: str | None = None, fmt: str = "edgelist"):
        self.path = p = _check_file(path)
        check_count_options(p, num_nodes, relabel)
        self._open(scratch, memory_budget, directed, spec)
        piece = max(MIN_PIECE_BYTES, self.budget // TEXT_BYTES_PER_BYTE)
        header_n = None
        if fmt == "mtx":
            header_n = self._parse_mtx(p, piece, relabel)
        else:
            for ids, w, _, linenos in edgelist_chunks(p, chunk_bytes=piece):
                if num_nodes is not None:
                    out_of_range(p, ids, linenos, int(num_nodes))
                self._add(ids, w, relabel)
        if not self.entries:
            raise GridGnnError(f"{p}: empty graph (no edges in the file)")
        if relabel:
            self.n, self.original_ids = int(self._uniq.size), self._uniq.astype(np.int64)
        elif header_n is not None:
            self.n, self.original_ids = header_count(p, header_n, num_nodes, self._header_entries), None
        elif num_nodes is not None:
            self.n, self.original_ids = int(num_nodes), None
            check_vertex_count(self.n, f"{p}: num_nodes={self.n}")
        else:
            self.n, self.original_ids = count_from_largest(p, self._top, self.entries), None

    def _open(self, scratch, memory_budget: int, directed: bool | None, spec: str | None) -> None:
        """The state before pass 1: the budget, the scratch folder and its edge bucket, nothing spilled yet."""
        self.budget = int(memory_budget)
        self.directed, self.spec = directed, spec
        self.scratch = Path(scratch)
        self.scratch.mkdir(parents=True)
        self.edges = _Buckets(self.scratch, "edges", (np.int64, np.int64, np.float64))
        self._top, self._uniq, self.entries, self.weighted = -1, None, 0, False
        self._mirrored = False  # the spilled edges hold both directions already (a symmetric Matrix Market file)
        self.nodes = None  # a generated graph's node arrays, name and meta (else the degree features are written)

    @classmethod
    def rmat(cls, scratch, *, memory_budget: int, spec: str | None = None, scale, edge_factor=16, seed=0,
             features=16, classes=4, disk: tuple | None = None) -> "StreamedEdgeList":
        r"""Pass 1 of a generated R-MAT graph (:func:`~gridgnn.graph.synthetic.rmat_graph`'s arguments): its edges
        generated a budget's share at a time (:class:`~gridgnn.graph.synthetic.RmatStream`: the same draws as the
        whole graph's), self-loops left out, each spilled once (the passes merge its duplicates and symmetrize, as
        :func:`~gridgnn.graph.synthetic.rmat_graph` keeps each pair once, both ways); the node arrays generated
        whole (one number per vertex each, and the features). :meth:`write_sharded` then writes the dataset the
        in-memory path writes of ``rmat_graph``, bit for bit. ``disk``: ``(out, versions, blocks)`` of the dataset
        to come, for :func:`check_disk` before any edge is generated."""
        stream = RmatStream(scale, edge_factor, seed, features, classes)
        self = cls.__new__(cls)
        self.path = Path(stream.name)
        self._open(scratch, memory_budget, False, spec)
        self.n, self.original_ids = stream.n, None
        self.nodes = dict(bytes=stream.node_bytes())
        self._room()  # the vertices' arrays and the node data fit, or one line now (before either is made)
        if disk is not None:  # and the disk holds the passes (every generated edge spilled, at most)
            out, versions, blocks = disk
            check_disk(self.scratch, out, self.disk_need(versions=versions, blocks=blocks, listed=stream.m))
        perm, rng = stream.permutation()
        x, y, (train, val, test) = stream.node_data(rng)
        self.nodes.update(arrays=dict(x=x, y=y, train_mask=train, val_mask=val, test_mask=test), name=stream.name,
                          graph_meta={**stream.meta(), "spec": spec})
        piece = 2 * max(1, self._piece_rows() // 2)  # even: every piece starts on a whole step of the stream
        for e0 in range(0, stream.m, piece):
            src, dst = stream.edges(e0, min(stream.m, e0 + piece), perm)
            keep = src != dst
            self._add(np.stack([src[keep], dst[keep]], axis=1).astype(np.int64), None, False)
        if not self.entries:
            raise GridGnnError(f"{stream.name}: empty graph (every generated edge is a self-loop)")
        return self

    def _add(self, ids: np.ndarray, w, relabel: bool) -> None:
        """Spill the edges ``ids`` (``int64[E, 2]`` ``(src, dst)``) with their weights ``w`` (or ``None``)."""
        self._top = max(self._top, int(ids.max()))
        if relabel:
            here = np.unique(ids)
            self._uniq = here if self._uniq is None else np.union1d(self._uniq, here)
        self.weighted = w is not None
        self.edges.add(0, ids[:, 1], ids[:, 0], np.ones(len(ids)) if w is None else w)  # (dst, src, w)
        self.entries += len(ids)

    def _parse_mtx(self, p: Path, piece: int, relabel: bool) -> int:
        """Pass 1 of a Matrix Market file (:func:`~gridgnn.graph.loaders.load_mtx`'s reading): the entries ``i → j``
        in file order, then — a symmetric or skew-symmetric file — every off-diagonal entry mirrored (negated for
        skew-symmetric), in that order as the loader concatenates them; ``directed`` follows the symmetry. Returns
        the header's vertex count."""
        field, symmetry, rows, self._header_entries, chunks = mtx_chunks(p, chunk_bytes=piece)
        mirrored = symmetry in ("symmetric", "skew-symmetric")
        mirror = _Buckets(self.scratch, "mirror", (np.int64, np.int64, np.float64)) if mirrored else None
        for ij, w in chunks:
            self._add(ij, w, relabel)
            if mirror is not None:
                off = ij[:, 0] != ij[:, 1]
                v = np.ones(int(off.sum())) if w is None else (-w[off] if symmetry == "skew-symmetric" else w[off])
                mirror.add(0, ij[off, 0], ij[off, 1], v)  # the edge j → i: (dst, src) = (i, j)
        if mirror is not None:
            for dst, src, v in mirror.pieces(0, self._piece_rows()):
                self._add(np.stack([src, dst], axis=1), None if field == "pattern" else v, relabel)
            mirror.drop(0)
        self._mirrored = mirrored
        self.directed = False if symmetry == "symmetric" else None
        return rows

    def close(self) -> None:
        """Remove the scratch folder."""
        shutil.rmtree(self.scratch, ignore_errors=True)

    # ------------------------------------------------------------------ the passes
    def _edge_pieces(self):
        """The spilled edges in file order, ``(dst, src, w)`` in vertex ids (relabelled), a budget's share at a time."""
        for dst, src, w in self.edges.pieces(0, self._piece_rows()):
            if self.original_ids is not None:
                dst, src = np.searchsorted(self.original_ids, dst), np.searchsorted(self.original_ids, src)
            yield dst, src, w

    def _piece_rows(self) -> int:
        """Edges read back from a scratch bucket at a time: a budget's share."""
        return max(1 << 12, self.budget // (4 * BAND_BYTES_PER_ENTRY))

    def _room(self) -> int:
        """The budget left beside the arrays of one number per vertex (refused when there is none)."""
        fixed = BYTES_PER_VERTEX * self.n
        nodes = self.nodes["bytes"] if self.nodes is not None else 0
        if fixed + nodes >= self.budget:
            held = f" and its node data ({nodes} bytes)" if nodes else ""
            raise GridGnnError(f"a memory budget of {self.budget} bytes cannot hold the {self.n} vertices' arrays "
                               f"({BYTES_PER_VERTEX} bytes each, {fixed} in all){held}; give a larger "
                               "--memory-budget")
        return self.budget - fixed - nodes

    def disk_need(self, *, versions: int, blocks: tuple[int, int], listed: int | None = None) -> tuple[int, int, int]:
        """:func:`disk_need` of this graph's passes (``listed``: the entries spilled, by default those spilled)."""
        node_bytes = self.nodes["bytes"] if self.nodes is not None else 12 * self.n  # or 3 float32 degree columns
        return disk_need(self.n, self.entries if listed is None else listed, reverses=self.directed is not True,
                         symmetrize=self.directed is False and not self._mirrored, versions=versions, blocks=blocks,
                         node_bytes=node_bytes)

    def _bands(self, transposed: bool) -> np.ndarray:
        """Bounds of contiguous vertex bands of about equal entry counts (each edge in its destination's band, and
        with ``transposed`` in its source's too), as many as the budget needs."""
        n = self.n
        count = np.zeros(n, np.int64)
        for dst, src, _ in self._edge_pieces():
            count += np.bincount(dst, minlength=n)
            if transposed:
                count += np.bincount(src, minlength=n)
        total = int(count.sum())
        bands = max(1, min(n, math.ceil(total * BAND_BYTES_PER_ENTRY / self._room())))
        cum = np.cumsum(count)
        cuts = np.searchsorted(cum, total * np.arange(1, bands) / bands, side="right")
        return np.unique(np.concatenate([[0], cuts, [n]])).astype(np.int64)

    def write_sharded(self, out_dir, *, perm_r, perm_c, blocks, partition_name: str, seed, normalize: bool = True,
                      node_chunks: int | None = None) -> dict:
        """Write the dataset (passes 2–7); returns its ``meta`` (as :func:`~gridgnn.graph.sharded.write_sharded`)."""
        n, p = self.n, self.path
        R, C = _check_blocks(blocks, n)
        perm_r, perm_c = _check_perm(perm_r, n, "perm_r"), _check_perm(perm_c, n, "perm_c")
        same = bool(np.array_equal(perm_r, perm_c))
        node_chunks = _check_node_chunks(node_chunks, n, R, C)
        out = prepare_dir(out_dir)
        directed = self.directed
        room = self._room()
        # the blocks of M̂ hold about this many entries each (the listed edges, their reverses, the self-loops):
        # refused now rather than after the passes when one block could not be written at once
        listed = self.entries if self._mirrored or directed is True else 2 * self.entries  # with the reverses
        expected = (listed + n) / (R * C)
        if expected * BLOCK_BYTES_PER_ENTRY > room:
            raise GridGnnError(f"the {R}x{C} blocks of this graph would hold about {expected:.0f} entries each, more "
                               f"than a memory budget of {self.budget} bytes lets this process write at once "
                               f"({BLOCK_BYTES_PER_ENTRY} bytes each, beside {BYTES_PER_VERTEX} per vertex): cut the "
                               "matrix into more --blocks or give a larger --memory-budget")
        check_disk(self.scratch, out, self.disk_need(versions=1 if same else 2, blocks=(R, C)),
                   held=SPILL_BYTES_PER_ENTRY * self.entries)
        bounds = self._bands(transposed=directed is not True)
        nb_rows = bounds.size - 1

        def band_of(v):
            return np.searchsorted(bounds, v, side="right") - 1

        # pass 2: every edge into its destination's band
        by_row = _Buckets(self.scratch, "rows", (np.int64, np.int64, np.float64))
        for dst, src, w in self._edge_pieces():
            by_row.scatter(band_of(dst), dst, src, w)
        self.edges.drop(0)
        # pass 3: merge per band (and send each merged entry to its column's band, transposed)
        merged_dir = self.scratch / "merged"
        merged_dir.mkdir()
        trans = _Buckets(self.scratch, "trans", (np.int64, np.int64, np.float64)) if directed is not True else None
        merged = 0
        for k in range(nb_rows):
            lo, hi = int(bounds[k]), int(bounds[k + 1])
            dst, src, w = by_row.read(k)
            mat = sp.coo_matrix((w, (dst - lo, src)), shape=(hi - lo, n)).tocsr()
            mat.sum_duplicates()
            if self.weighted and not np.all(np.isfinite(mat.data)):  # (finite weights whose sum overflows)
                raise GridGnnError(f"{p}: edge weights contain NaN or inf (after duplicate edges' weights are added)")
            merged += dst.size - mat.nnz
            if not self.weighted:
                mat.data[:] = 1.0
            by_row.drop(k)
            _save_csr(merged_dir, k, mat)
            if trans is not None:
                row = lo + np.repeat(np.arange(hi - lo, dtype=np.int64), np.diff(mat.indptr))
                trans.scatter(band_of(mat.indices), mat.indices.astype(np.int64), row, mat.data)
        # pass 4: symmetrize, or detect symmetry
        asymmetric = 0
        if trans is not None:
            for k in range(nb_rows):
                lo, hi = int(bounds[k]), int(bounds[k + 1])
                mat = _load_csr(merged_dir, k, (hi - lo, n))
                r, c, v = trans.read(k)
                mt = sp.coo_matrix((v, (r - lo, c)), shape=(hi - lo, n)).tocsr()
                mt.sum_duplicates()
                trans.drop(k)
                if directed is False:
                    _save_csr(merged_dir, k, union_max(mat, mt))
                else:
                    asymmetric += (mat != mt).nnz
            if directed is None:
                directed = asymmetric != 0
        # pass 5: M's degrees, M + I's D^-1/2, the weights' checks
        indeg, outdeg = np.zeros(n, np.int64), np.zeros(n, np.int64)
        dinv = np.zeros(n) if normalize else None
        nnz, values_kept, negative, first_negative = 0, False, 0, None
        for k in range(nb_rows):
            lo, hi = int(bounds[k]), int(bounds[k + 1])
            mat = _load_csr(merged_dir, k, (hi - lo, n))
            mat.sum_duplicates()
            nnz += mat.nnz
            indeg[lo:hi] = np.diff(mat.indptr)
            outdeg += np.bincount(mat.indices, minlength=n)
            if self.weighted and not np.all(mat.data == 1.0):
                values_kept = True
            neg = np.flatnonzero(mat.data < 0)
            if neg.size and first_negative is None:
                e = int(neg[0])
                first_negative = (int(mat.indices[e]), lo + int(np.searchsorted(mat.indptr, e, side="right") - 1),
                                  float(mat.data[e]))
            negative += neg.size
            if normalize:
                dinv[lo:hi] = inverse_sqrt_degrees(with_self_loops(mat, lo))
        if nnz == 0:
            raise GridGnnError(f"{p}: empty graph (no edges)")
        if normalize and values_kept and negative:
            src, dst, w = first_negative
            if self.original_ids is not None:
                src, dst = int(self.original_ids[src]), int(self.original_ids[dst])
            raise negative_weight_error(src, dst, w, negative - 1)
        # pass 6: M̂'s rows, each entry to the band of its new row in each version
        rb, cb = _even_bounds(n, R), _even_bounds(n, C)
        versions = [("rc", perm_r, perm_c)] + ([] if same else [("cr", perm_c, perm_r)])
        inverse = {}
        for perm in (perm_r, perm_c):
            inv = np.empty(n, np.int64)
            inv[perm] = np.arange(n, dtype=np.int64)
            inverse[id(perm)] = inv
        # (a block of the dataset at a time is what pass 7 holds: the entries go to the bucket of their block)
        permuted = {v: _Buckets(self.scratch, v, (np.int64, np.int64, np.float64)) for v, _, _ in versions}
        matrix_nnz, largest = 0, 0.0
        bounded = values_bounded(normalize, directed, values_kept)
        for k in range(nb_rows):
            lo, hi = int(bounds[k]), int(bounds[k + 1])
            mat = _load_csr(merged_dir, k, (hi - lo, n))
            mat.sum_duplicates()
            mat = scale_rows(with_self_loops(mat, lo), lo, dinv) if normalize else mat
            matrix_nnz += mat.nnz
            if mat.nnz:
                largest = max(largest, float(mat.data.max()))
            row = lo + np.repeat(np.arange(hi - lo, dtype=np.int64), np.diff(mat.indptr))
            for v, pr, pc in versions:
                new_row, new_col = inverse[id(pr)][row], inverse[id(pc)][mat.indices]
                block = (np.searchsorted(rb, new_row, side="right") - 1) * C \
                    + np.searchsorted(cb, new_col, side="right") - 1
                permuted[v].scatter(block, new_row, new_col, mat.data)
            for name, _ in _CSR_PARTS:
                (merged_dir / f"{k}.{name}").unlink()
        if bounded and matrix_nnz and largest > VALUE_BOUND:
            raise above_one_error(p.stem, largest)
        # pass 7: the blocks, the node arrays, meta.json
        files = write_perms(out, perm_r, perm_c)
        block_counts, block_cols = {}, {}
        idx_dtype = block_index_dtype(cb)
        for v, _, _ in versions:
            biggest = max(permuted[v].rows.values(), default=0)
            if biggest * BLOCK_BYTES_PER_ENTRY > room:
                raise GridGnnError(f"a block of the {R}x{C} dataset holds {biggest} entries, more than a memory budget "
                                   f"of {self.budget} bytes lets this process write at once ({BLOCK_BYTES_PER_ENTRY} "
                                   f"bytes each): cut the matrix into more --blocks")
            (out / v).mkdir(parents=True, exist_ok=True)
            names, counts, cols = [[None] * C for _ in range(R)], np.zeros((R, C), np.int64), np.zeros((R, C), np.int64)
            for a in range(R):
                for b in range(C):
                    shape = (int(rb[a + 1] - rb[a]), int(cb[b + 1] - cb[b]))
                    new_row, new_col, val = permuted[v].read(a * C + b)
                    blk = sp.coo_matrix((val, (new_row - rb[a], new_col - cb[b])), shape=shape).tocsr()
                    blk.sum_duplicates()
                    permuted[v].drop(a * C + b)
                    names[a][b], cols[a, b] = write_block(out, v, a, b, blk.indptr, blk.indices.astype(idx_dtype),
                                                          blk.data, *shape)
                    counts[a, b] = blk.nnz
            files[v], block_counts[v], block_cols[v] = names, counts, cols
        if self.nodes is None:  # a file's graph: the degree features, as the loaders give it
            arrays, name = {"x": degree_columns(indeg, outdeg)}, p.stem
            graph_meta = {"spec": self.spec, "features": "degree"}
            if merged:
                graph_meta["duplicate_edges_merged"] = int(merged)
            if self.directed is False:
                graph_meta["symmetrized"] = 1
            n_train, num_features, num_classes = 0, 3, 0
        else:  # a generated graph's own node arrays, name and meta
            arrays, name, graph_meta = self.nodes["arrays"], self.nodes["name"], self.nodes["graph_meta"]
            n_train = int((arrays["train_mask"] & (arrays["y"] >= 0)).sum())
            num_features, num_classes = int(arrays["x"].shape[1]), int(arrays["y"].max(initial=-1)) + 1
        node_arrays, files["nodes"], nb = write_node_arrays(out, arrays, n, node_chunks)
        self.close()
        meta = dataset_meta(out, files, n=n, nnz=nnz, matrix_nnz=matrix_nnz, n_train=n_train,
                            num_features=num_features, num_classes=num_classes, directed=bool(directed),
                            normalized=normalize, rb=rb, cb=cb, method=partition_name, seed=seed, same=same,
                            block_counts=block_counts, block_cols=block_cols, nb=nb,
                            node_arrays=node_arrays, weighted=values_kept, name=name, graph_meta=graph_meta)
        return write_meta(out, meta)
