r"""Reading an OGB node-property-prediction dataset directory in its raw layout, without the ``ogb`` package.

The layout (as downloaded and unpacked by ``ogb``, e.g. ``ogbn_arxiv/``):

.. code-block:: text

    raw/edge.csv.gz             one edge "src,dst" per line (0-based ids, no header)
    raw/node-feat.csv.gz        one line of comma-separated floats per node (row i = node i)
    raw/node-label.csv.gz       one label per node; "nan" or an empty line = unlabelled (-1)
    raw/num-node-list.csv.gz    optional: one integer, the number of nodes
    raw/num-edge-list.csv.gz    optional: one integer, the number of edge lines
    raw/edge-feat.csv.gz        optional: one line of comma-separated floats per edge line (the edge features,
                                ``Graph.edge_attr``; a duplicate edge line merges as without them, and drops
                                them with a note in ``Graph.meta``)
    split/<name>/{train,valid,test}.csv.gz   one node index per line (e.g. split/time for ogbn-arxiv)

A link-property-prediction dataset (``ogbl-*``: no ``node-label.csv.gz``, ``num-node-list.csv.gz`` required) holds
its edge split instead, as OGB writes it (``torch.save`` of a dict of arrays or tensors, read with
``torch.load(weights_only=True)``: no code is run):

.. code-block:: text

    split/<name>/train.pt     {"edge": [E, 2], ...}  (ogbl-citation2: {"source_node": [E], "target_node": [E]})
    split/<name>/{valid,test}.pt  {"edge": [E, 2], "edge_neg": [M, 2], ...}  (negatives scored against every
                              positive: Hits@K; ogbl-citation2: "target_node_neg": [E, K], K per positive: MRR)

The graph's edges (``raw/edge.csv.gz``) are the training edges, which pass the messages for every split; the split is kept as
``Graph.meta["link_split"]`` (:class:`~gridgnn.graph.links.GivenLinkSplit`), which ``--task link`` trains and
evaluates on.

Other files (``node_year.csv.gz``, ``mapping/``, ``processed/``) are not read. An edge ``src,dst`` is the edge
``src → dst`` (OGB's ``edge_index[0]`` is the source), stored in row ``dst`` of the :class:`Graph`.

Every file is gzip-compressed CSV, parsed by ``numpy.loadtxt`` from a stream whose decompressed size is capped
before anything is allocated: ``n`` (from ``num-node-list``, else the label lines) passes
:func:`~gridgnn.graph.safe_io.check_vertex_count`, features take at most ``n`` rows of the column count of
their first line (the ``n × f`` ``float32`` array is checked against the memory available first), and an edge
file without ``num-edge-list`` may decompress to at most a quarter of the memory available. Bad input raises
one :class:`~gridgnn.errors.GridGnnError` line that starts with the file (or directory) it concerns.
"""
from __future__ import annotations

import gzip
import io
import re
import warnings
import zlib
from pathlib import Path

import numpy as np

from ..errors import GridGnnError
from .graph import Graph
from .loaders import _check_empty, _check_file, _is_number, _node_arrays, _parse_int, _prefixed, apply_defaults
from .safe_io import MAX_ID, available_memory, check_alloc, check_vertex_count, human_bytes, short

__all__ = ["OGB_SPLIT_FILES", "load_ogb"]

#: The three files of a split folder, in the order train, validation, test.
OGB_SPLIT_FILES = ("train.csv.gz", "valid.csv.gz", "test.csv.gz")

_MASKS = ("train_mask", "val_mask", "test_mask")
_FIRST_LINE_MAX = 1 << 24  # bytes of the first feature line (a line of 100,000 floats is ~1.5 MB)
_CHARS_PER_VALUE = 48  # generous text budget of one number and its separator
_GZIP_ERRORS = (OSError, EOFError, zlib.error)


class _CappedGzip(io.RawIOBase):
    """The decompressed bytes of a gzip file; reading more than ``cap`` bytes raises :class:`GridGnnError`."""

    def __init__(self, path: Path, cap: int, why: str) -> None:
        super().__init__()
        self._path, self._cap, self._why, self._count = path, int(cap), why, 0
        self._gz = gzip.open(path, "rb")

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        k = self._gz.readinto(buf)
        self._count += k
        if self._count > self._cap:
            raise GridGnnError(f"{self._path}: decompresses to more than {human_bytes(self._cap)} ({self._why})")
        return k

    def close(self) -> None:
        try:
            self._gz.close()
        finally:
            super().close()


def _text(path: Path, cap: int, why: str, *, errors: str = "strict") -> io.TextIOWrapper:
    return io.TextIOWrapper(io.BufferedReader(_CappedGzip(path, cap, why), 1 << 20), encoding="ascii",
                            errors=errors, newline=None)


def _gzip_error(path: Path, exc: BaseException) -> GridGnnError:
    text = str(exc).replace("\n", " ").strip() or type(exc).__name__
    return GridGnnError(f"{path}: not a readable gzip file ({short(text, 120)})")


def _read_bytes(path: Path, cap: int, why: str) -> bytes:
    """The whole decompressed content of ``path``, at most ``cap`` bytes."""
    try:
        with gzip.open(path, "rb") as fh:
            data = fh.read(cap + 1)
    except _GZIP_ERRORS as exc:
        raise _gzip_error(path, exc) from None
    if len(data) > cap:
        raise GridGnnError(f"{path}: decompresses to more than {human_bytes(cap)} ({why})")
    return data


def _bad_line(path: Path, cap: int, ncols: int | None, what: str, integer: bool) -> GridGnnError | None:
    """The first malformed line of a CSV file, described with its 1-based line number; ``None`` when every line
    parses. Runs only after the fast parse failed."""
    try:
        with _text(path, cap, "while looking for the malformed line", errors="replace") as fh:
            for k, line in enumerate(fh, start=1):
                s = line.strip()
                if not s:
                    continue
                toks = s.split(",")
                if ncols is None:
                    ncols = len(toks)
                if len(toks) != ncols:
                    return GridGnnError(f"{path}: line {k}: expected {ncols} comma-separated columns, found "
                                        f"{len(toks)}")
                for t in toks:
                    t = t.strip()
                    if integer:
                        v = _parse_int(t)
                        if v is None:
                            return GridGnnError(f"{path}: line {k}: {what} {short(t)} is not an integer")
                        if not -MAX_ID - 1 <= v <= MAX_ID:
                            return GridGnnError(f"{path}: line {k}: {what} {short(t)} does not fit 64 bits")
                    elif not _is_number(t):
                        return GridGnnError(f"{path}: line {k}: {what} {short(t)} is not a number")
    except _GZIP_ERRORS as exc:
        return _gzip_error(path, exc)
    return None


def _loadtxt(path: Path, dtype, *, cap: int, why: str, ndmin: int, max_rows: int | None = None,
             ncols: int | None = None, what: str) -> np.ndarray:
    """``numpy.loadtxt`` of a gzip CSV file (comma-separated, no comments) from a capped stream."""
    try:
        with _text(path, cap, why) as fh, warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "input contained no data": the caller checks the size
            return np.loadtxt(fh, dtype=dtype, delimiter=",", comments=None, ndmin=ndmin, max_rows=max_rows)
    except _GZIP_ERRORS as exc:
        raise _gzip_error(path, exc) from None
    except (ValueError, OverflowError, TypeError) as exc:  # includes UnicodeDecodeError
        integer = np.issubdtype(np.dtype(dtype), np.integer)
        raise _bad_line(path, cap, ncols, what, integer) or \
            GridGnnError(f"{path}: malformed CSV: {short(str(exc), 160)}") from None


def _one_count(path: Path, what: str) -> int:
    """The single positive integer of ``num-node-list.csv.gz`` / ``num-edge-list.csv.gz``."""
    lines = [s.strip() for s in _read_bytes(path, 1 << 20, f"expected one integer, the number of {what}")
             .decode("ascii", "replace").splitlines() if s.strip()]
    if len(lines) != 1:
        raise GridGnnError(f"{path}: expected one integer (the number of {what} of one graph), found "
                           f"{len(lines)} lines (several graphs: not a node property prediction dataset)")
    v = _parse_int(lines[0])
    if v is None or v < 0 or v > MAX_ID:
        raise GridGnnError(f"{path}: the number of {what} {short(lines[0])} is not a non-negative integer")
    return v


def _labels(path: Path, n: int | None) -> np.ndarray:
    """``int64`` labels, one line per node, ``-1`` for ``nan`` or an empty line."""
    cap = 64 * n + 64 if n is not None else available_memory() // 16
    raw = _read_bytes(path, cap, "the labels of the nodes" if n is None else f"labels of {n} nodes")
    if raw.endswith(b"\r\n"):
        raw = raw[:-2]
    elif raw.endswith(b"\n"):
        raw = raw[:-1]
    if not raw:
        raise GridGnnError(f"{path}: no labels (the file is empty)")
    if b"," in raw:
        i = raw.index(b",")
        end = raw.find(b"\n", i)
        first = raw[raw.rfind(b"\n", 0, i) + 1:end if end >= 0 else len(raw)]
        raise GridGnnError(f"{path}: labels have {first.count(b',') + 1} columns per node: multi-label targets "
                           f"(e.g. ogbn-proteins) are not single-class node classification, which is what gridgnn "
                           f"trains")
    raw = re.sub(rb"(?m)^[ \t\r]*$", b"nan", raw)  # an empty line is an unlabelled node
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            y = np.loadtxt(io.BytesIO(raw), dtype=np.float64, comments=None, ndmin=1)
    except (ValueError, OverflowError, TypeError):
        for k, line in enumerate(raw.split(b"\n"), start=1):
            tok = line.decode("ascii", "replace").strip()
            if not _is_number(tok):
                raise GridGnnError(f"{path}: line {k}: label {short(tok)} is not a number (class id, or nan = "
                                   f"unlabelled)") from None
        raise GridGnnError(f"{path}: malformed labels") from None
    missing = np.isnan(y)
    bad = np.flatnonzero(~missing & (~np.isfinite(y) | (y != np.round(y))))
    if bad.size:
        k = int(bad[0])
        raise GridGnnError(f"{path}: line {k + 1}: label {float(y[k])!r} is not an integer class id")
    y[missing] = -1
    if y.size and (y.max() > MAX_ID or y.min() < -1):
        k = int(np.argmax((y > MAX_ID) | (y < -1)))
        raise GridGnnError(f"{path}: line {k + 1}: label {y[k]:.0f} is not a class id (>= 0, or nan = unlabelled)")
    return y.astype(np.int64)


def _features(path: Path, n: int, unit: str = "node") -> np.ndarray:
    """``float32[n, f]`` features, one row per ``unit`` (node, or edge for ``edge-feat``); ``f`` is the column
    count of the first line."""
    try:
        with gzip.open(path, "rb") as fh:
            first = fh.readline(_FIRST_LINE_MAX)
    except _GZIP_ERRORS as exc:
        raise _gzip_error(path, exc) from None
    if len(first) >= _FIRST_LINE_MAX and not first.endswith(b"\n"):
        raise GridGnnError(f"{path}: line 1 is longer than {human_bytes(_FIRST_LINE_MAX)}")
    if not first.strip():
        raise GridGnnError(f"{path}: no features on line 1 (expected {n} lines of comma-separated numbers)")
    f = first.count(b",") + 1
    check_alloc(n * f * 4, f"{path}: {n}×{f} float32 features")
    x = _loadtxt(path, np.float32, cap=(n + 1) * (f * _CHARS_PER_VALUE + 16),
                 why=f"{n} lines of {f} numbers expected", ndmin=2, max_rows=n + 1, ncols=f, what="feature")
    if x.shape[0] != n:
        rows = f"more than {n}" if x.shape[0] > n else x.shape[0]
        raise GridGnnError(f"{path}: features have {rows} rows for {n} {unit}s (one row per {unit})")
    if not np.all(np.isfinite(x)):
        k = int(np.flatnonzero(~np.isfinite(x).all(axis=1))[0])
        raise GridGnnError(f"{path}: row {k + 1}: features contain NaN or inf (or overflow float32)")
    return x


def _edges(path: Path, n: int, num_edges: int | None) -> np.ndarray:
    """``int64[E, 2]`` edges ``src, dst``, every id in ``0..n-1``."""
    if num_edges is not None:
        check_alloc(num_edges * 16, f"{path}: {num_edges} edges")
        cap, why = (num_edges + 1) * _CHARS_PER_VALUE, f"num-edge-list declares {num_edges} edges"
        max_rows = num_edges + 1
    else:
        cap, why = available_memory() // 4, "a quarter of the memory available; add raw/num-edge-list.csv.gz"
        max_rows = None
    e = _loadtxt(path, np.int64, cap=cap, why=why, ndmin=2, max_rows=max_rows, ncols=2, what="vertex id")
    if e.size == 0:
        raise GridGnnError(f"{path}: empty graph (no edges in the file)")
    if e.shape[1] != 2:
        raise GridGnnError(f"{path}: expected 2 columns (src,dst) per edge, found {e.shape[1]}")
    if num_edges is not None and e.shape[0] != num_edges:
        rows = f"more than {num_edges}" if e.shape[0] > num_edges else e.shape[0]
        raise GridGnnError(f"{path}: {rows} edges, but num-edge-list.csv.gz declares {num_edges}")
    bad = np.flatnonzero(((e < 0) | (e >= n)).any(axis=1))
    if bad.size:
        k = int(bad[0])
        v = int(e[k, 0] if not 0 <= e[k, 0] < n else e[k, 1])
        raise GridGnnError(f"{path}: edge {k + 1} ({int(e[k, 0])},{int(e[k, 1])}): vertex id {v} out of range for "
                           f"{n} nodes (valid 0..{n - 1})")
    return e


def _split_dir(d: Path, split: str | None) -> tuple[str, Path]:
    root = d / "split"
    if not root.is_dir():
        raise GridGnnError(f"{d}: no split/ folder (an OGB dataset holds split/<name>/{{train,valid,test}}.csv.gz)")
    try:
        names = sorted(p.name for p in root.iterdir() if p.is_dir())
    except OSError as exc:
        raise GridGnnError(f"{root}: cannot list the split folders: {exc.strerror or exc}") from None
    listed = ", ".join(short(s) for s in names) or "none"
    if split is None:
        if len(names) != 1:
            if not names:
                raise GridGnnError(f"{root}: no split folder (expected split/<name>/train.csv.gz etc.)")
            raise GridGnnError(f"{root}: several splits ({listed}); pick one with ?split=NAME")
        split = names[0]
    elif split not in names:
        raise GridGnnError(f"{root}: no split {short(split)}; available: {listed}")
    return split, root / split


def _split_masks(sdir: Path, n: int) -> dict[str, np.ndarray]:
    masks: dict[str, np.ndarray] = {}
    owner = np.full(n, -1, dtype=np.int8)  # which split file holds each node
    for k, (fname, key) in enumerate(zip(OGB_SPLIT_FILES, _MASKS)):
        p = sdir / fname
        idx = _loadtxt(p, np.int64, cap=(n + 1) * 24, why=f"at most {n} node indices expected", ndmin=1,
                       max_rows=n + 1, ncols=1, what="node index")
        if idx.ndim != 1:
            raise GridGnnError(f"{p}: expected one node index per line, found {idx.shape[1]} columns")
        bad = np.flatnonzero((idx < 0) | (idx >= n))
        if bad.size:
            raise GridGnnError(f"{p}: node index {int(idx[bad[0]])} out of range for {n} nodes (valid 0..{n - 1})")
        clash = np.flatnonzero((owner[idx] >= 0) & (owner[idx] != k))
        if clash.size:
            i = int(idx[clash[0]])
            raise GridGnnError(f"{sdir}: node {i} is in both {OGB_SPLIT_FILES[owner[i]]} and {fname} (the splits "
                               f"must be disjoint)")
        owner[idx] = k
        m = np.zeros(n, dtype=bool)
        m[idx] = True
        masks[key] = m
    return masks


def load_ogb(directory, *, split: str | None = None, directed: bool = False, seed: int = 0) -> Graph:
    r"""Load an OGB node-property-prediction dataset from its raw directory (see the module docstring).

    ``n`` is the integer of ``raw/num-node-list.csv.gz`` when present, else the number of label lines; the
    features and labels must have exactly ``n`` rows, edge ids and split indices must lie in ``0..n-1``, and the
    three split files must be disjoint. Unlabelled nodes (``nan`` or an empty label line) get ``y = -1`` (training
    ignores them even when a split lists them). Multi-label targets (several label columns, ogbn-proteins),
    heterogeneous graphs (``raw/relations/``, ogbn-mag) and the binary layout of ogbn-papers100M
    (``raw/data.npz``) are refused. Duplicate edges are merged.

    Args:
        directory: the dataset folder (holding ``raw/`` and ``split/``), e.g. ``ogbn_arxiv``.
        split: the folder under ``split/`` to use; ``None`` takes the only one and refuses several.
        directed: ``False`` (default, what the OGB examples do for ogbn-arxiv and ogbn-products) adds the reverse
            of every edge (an undirected graph, duplicates merged); ``True`` keeps the file's edges as directed
            ``src → dst`` (stored in row ``dst``).
        seed: unused (the split is the dataset's); accepted for a uniform loader signature.

    Returns:
        A :class:`Graph` named after the directory with ``x`` ``float32[n, f]``, ``y`` ``int64[n]`` and the three
        masks of the split; ``meta`` holds ``source``, ``split`` and ``ogb_split`` (the split folder's name).

    Raises:
        GridGnnError: one line naming the file or directory: a missing file or folder, an ambiguous or unknown
            split, a corrupt gzip stream, a malformed line, row counts that differ from ``n``, out-of-range ids,
            overlapping splits, multi-label targets, more data than the memory available.
    """
    d = Path(directory)
    if not d.exists():
        raise GridGnnError(f"{d}: OGB dataset directory not found")
    if not d.is_dir():
        raise GridGnnError(f"{d}: not a directory (expected an OGB dataset folder with raw/ and split/)")
    raw = d / "raw"
    if not raw.is_dir():
        raise GridGnnError(f"{d}: no raw/ folder (expected the OGB raw layout: raw/edge.csv.gz, "
                           f"raw/node-feat.csv.gz, raw/node-label.csv.gz, split/<name>/)")
    if (raw / "relations").is_dir() or (raw / "num-node-dict.csv.gz").exists():
        raise GridGnnError(f"{raw}: a heterogeneous OGB dataset (e.g. ogbn-mag) is not supported (one node and "
                           f"edge type only)")
    if (raw / "data.npz").exists() and not (raw / "edge.csv.gz").exists():
        raise GridGnnError(f"{raw}: the binary raw layout (data.npz, e.g. ogbn-papers100M) is not supported; "
                           f"expected edge.csv.gz")
    split_name, sdir = _split_dir(d, split)
    if not (raw / "node-label.csv.gz").exists() and (sdir / "train.pt").exists():
        return _load_ogbl(d, raw, split_name, sdir, directed=directed, seed=seed)
    edge_p, feat_p, label_p = (_check_file(raw / f) for f in ("edge.csv.gz", "node-feat.csv.gz",
                                                                  "node-label.csv.gz"))
    for f in OGB_SPLIT_FILES:
        _check_file(sdir / f)

    n = None
    if (raw / "num-node-list.csv.gz").exists():
        num_p = _check_file(raw / "num-node-list.csv.gz")
        n = _one_count(num_p, "nodes")
        check_vertex_count(n, str(num_p))
    y = _labels(label_p, n)
    if n is None:
        n = int(y.size)
        check_vertex_count(n, f"{label_p}: {n} label lines")
    elif y.size != n:
        last = " — its last line, empty or nan, is one node too many (a trailing blank line?)" \
            if y.size == n + 1 and int(y[-1]) == -1 else ""
        raise GridGnnError(f"{label_p}: {y.size} labels for {n} nodes (num-node-list.csv.gz; one line per node, "
                           f"nan or empty = unlabelled){last}")
    y = _node_arrays(label_p, n, None, y, {})["y"]
    x = _features(feat_p, n)
    num_edges = None
    if (raw / "num-edge-list.csv.gz").exists():
        num_edges = _one_count(_check_file(raw / "num-edge-list.csv.gz"), "edges")
    e = _edges(edge_p, n, num_edges)
    edge_attr = None
    if (raw / "edge-feat.csv.gz").exists():  # one row per edge line, in the same order (e.g. ogbn-proteins)
        edge_attr = _features(_check_file(raw / "edge-feat.csv.gz"), int(e.shape[0]), unit="edge")
    masks = _split_masks(sdir, n)
    name = d.name if d.name not in ("", ".", "..") else d.resolve().name
    edge_attr, dropped = Graph.unmerged_features(e[:, 0], e[:, 1], n, edge_attr)
    try:
        g = Graph.from_edges(e[:, 0], e[:, 1], n, directed=bool(directed), name=name or "ogb", x=x, y=y,
                             edge_attr=edge_attr, **masks)
    except GridGnnError as exc:
        raise _prefixed(edge_p, exc) from None
    del e
    if dropped:
        g.meta["edge_features_dropped"] = f"{edge_p}: {dropped}"
    g.meta.update(source=str(d), split=f"ogb split/{split_name}", ogb_split=split_name,
                  edges="directed as in the file" if directed else "symmetrized (reverse edges added)")
    return apply_defaults(_check_empty(g, edge_p), seed=seed)


#: The three files of a link split folder (``ogbl-*``), in the order train, validation, test.
OGBL_SPLIT_FILES = ("train.pt", "valid.pt", "test.pt")


def _load_pt(path: Path) -> dict:
    """A split file of an ``ogbl-*`` dataset: a dict of arrays (NumPy or torch), read by the checked reader
    (:func:`~gridgnn.graph.saved.read_torch`: without running code, dense finite CPU tensors only)."""
    import torch

    from .saved import read_torch

    _check_file(path)
    safe = [np.ndarray, np.dtype, type(np.dtype("int64")), type(np.dtype("float32")), type(np.dtype("float64")),
            type(np.dtype("int32"))]
    core = getattr(np, "_core", None) or getattr(np, "core")
    safe.append(core.multiarray._reconstruct)
    # OGB's files were pickled by NumPy 1, which named the function numpy.core.multiarray._reconstruct
    safe.append((core.multiarray._reconstruct, "numpy.core.multiarray._reconstruct"))
    obj = read_torch(path, "an OGB split file", safe_globals=safe)  # plain, dense, finite; no code runs
    if not isinstance(obj, dict):
        raise GridGnnError(f"{path}: expected a dict of arrays (OGB's split format), found {type(obj).__name__}")
    out = {}
    for k, v in obj.items():
        if not isinstance(v, (np.ndarray, torch.Tensor)):
            raise GridGnnError(f"{path}: {k} is a {type(v).__name__}, not an array (OGB's split format)")
        out[k] = v.numpy() if isinstance(v, torch.Tensor) else v
    return out


def _pairs(path: Path, d: dict, n: int, *, negative: bool) -> tuple[np.ndarray, int | None]:
    """``(int64[2, m], K or None)``: the positives (``negative`` False) or the negatives of one split file."""
    def ids(a, what):
        a = np.asarray(a)
        if not np.issubdtype(a.dtype, np.integer):
            raise GridGnnError(f"{path}: {what} must hold integer vertex ids, found {a.dtype}")
        a = a.astype(np.int64)
        if a.size and (a.min() < 0 or a.max() >= n):
            raise GridGnnError(f"{path}: {what}: vertex id out of range for {n} nodes (valid 0..{n - 1})")
        return a

    key = "edge_neg" if negative else "edge"
    if key in d:
        e = ids(d[key], key)
        if e.ndim != 2 or e.shape[1] != 2:
            raise GridGnnError(f"{path}: {key} must be [E, 2] (source, target), found shape {list(e.shape)}")
        return e.T.copy(), None
    if "source_node" in d and ("target_node_neg" if negative else "target_node") in d:
        src = ids(d["source_node"], "source_node").reshape(-1)
        if not negative:
            dst = ids(d["target_node"], "target_node").reshape(-1)
            if dst.shape != src.shape:
                raise GridGnnError(f"{path}: source_node and target_node differ in length")
            return np.stack([src, dst]), None
        neg = ids(d["target_node_neg"], "target_node_neg")
        if neg.ndim != 2 or neg.shape[0] != src.size:
            raise GridGnnError(f"{path}: target_node_neg must be [E, K], one row per source_node")
        k = int(neg.shape[1])
        return np.stack([np.repeat(src, k), neg.reshape(-1)]), k
    want = "edge_neg (or source_node, target_node_neg)" if negative else "edge (or source_node, target_node)"
    raise GridGnnError(f"{path}: no {want} in the split file (keys: {', '.join(map(str, d)) or 'none'})")


def _load_ogbl(d: Path, raw: Path, split_name: str, sdir: Path, *, directed: bool, seed: int) -> Graph:
    """:func:`load_ogb` of a link-property-prediction dataset (see the module docstring)."""
    from .links import GivenLinkSplit

    edge_p = _check_file(raw / "edge.csv.gz")
    num_p = raw / "num-node-list.csv.gz"
    if not num_p.exists():
        raise GridGnnError(f"{raw}: no num-node-list.csv.gz (a link dataset has no labels to count its nodes by)")
    n = _one_count(_check_file(num_p), "nodes")
    check_vertex_count(n, str(num_p))
    x = _features(_check_file(raw / "node-feat.csv.gz"), n) if (raw / "node-feat.csv.gz").exists() else None
    num_edges = None
    if (raw / "num-edge-list.csv.gz").exists():
        num_edges = _one_count(_check_file(raw / "num-edge-list.csv.gz"), "edges")
    e = _edges(edge_p, n, num_edges)
    files = [_load_pt(sdir / f) for f in OGBL_SPLIT_FILES]
    train, _ = _pairs(sdir / "train.pt", files[0], n, negative=False)
    if not train.size:  # (the loss of no positive edges is NaN: a run said it "diverged")
        raise GridGnnError(f"{sdir / 'train.pt'} holds no positive edges to train on")
    val, _ = _pairs(sdir / "valid.pt", files[1], n, negative=False)
    test, _ = _pairs(sdir / "test.pt", files[2], n, negative=False)
    val_neg, kv = _pairs(sdir / "valid.pt", files[1], n, negative=True)
    test_neg, kt = _pairs(sdir / "test.pt", files[2], n, negative=True)
    if kv != kt:
        raise GridGnnError(f"{sdir}: valid.pt and test.pt give their negatives differently (per positive in one "
                           "only)")
    name = d.name if d.name not in ("", ".", "..") else d.resolve().name
    try:
        g = Graph.from_edges(e[:, 0], e[:, 1], n, directed=bool(directed), name=name or "ogbl", x=x)
    except GridGnnError as exc:
        raise _prefixed(edge_p, exc) from None
    g.meta.update(source=str(d), ogb_split=split_name, task="link",
                  edges="directed as in the file" if directed else "symmetrized (reverse edges added)",
                  link_split=GivenLinkSplit(train=train, val=val, test=test, val_neg=val_neg, test_neg=test_neg,
                                            neg_per_positive=kv))
    return apply_defaults(_check_empty(g, edge_p), seed=seed)
