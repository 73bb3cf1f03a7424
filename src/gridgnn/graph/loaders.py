r"""Loaders that turn files (and PyG ``Data`` objects) into a :class:`~gridgnn.graph.graph.Graph`.

Every loader returns a validated :class:`Graph` whose CSR matrix has **rows = destinations** and
**columns = sources** (an edge ``j → i`` is the entry ``M[i, j]``), the convention of PyG ``GCNConv``.

Documented defaults, applied by :func:`apply_defaults` after loading:

* **Features.** A graph without features gets :func:`degree_features`: three ``float32`` columns
  ``[1, log(1 + in-degree), log(1 + out-degree)]`` (unweighted degrees; for an undirected graph the last two
  columns are equal).
* **Labels.** A graph without labels keeps ``y = None`` and no masks (training refuses such a graph).
* **Split.** Labels without any mask get :func:`default_split`: a seeded random 60/20/20 split of the labelled
  vertices (``y >= 0``). When at least one mask is given, the masks are kept as they are.

Bad input raises :class:`~gridgnn.errors.GridGnnError` with a one-line message that starts with the file name.
"""
from __future__ import annotations

import math
import os
import pickle
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from ..errors import GridGnnError
from .graph import Graph

__all__ = [
    "from_pyg", "load_planetoid", "load_edgelist", "load_mtx", "load_npz", "save_npz",
    "degree_features", "default_split", "apply_defaults", "row_normalize",
]

_MASKS = ("train_mask", "val_mask", "test_mask")


# ---------------------------------------------------------------------------------------------- defaults
def degree_features(indptr: np.ndarray, indices: np.ndarray, n: int) -> np.ndarray:
    r"""Degree-based node features for graphs that come without features.

    Args:
        indptr: ``int64[n+1]`` CSR row pointer (rows = destinations).
        indices: ``int64[nnz]`` source of each stored entry.
        n: number of vertices.

    Returns:
        ``float32[n, 3]``: columns ``[1, log(1 + in-degree), log(1 + out-degree)]`` where the in-degree of ``i``
        counts the stored entries of row ``i`` (edges ``j → i``) and the out-degree of ``j`` counts the entries
        of column ``j``.
    """
    indeg = np.diff(np.asarray(indptr, dtype=np.int64)).astype(np.float64)
    outdeg = np.bincount(np.asarray(indices, dtype=np.int64), minlength=n).astype(np.float64)
    return np.stack([np.ones(n), np.log1p(indeg), np.log1p(outdeg)], axis=1).astype(np.float32)


def default_split(n: int, y: np.ndarray | None, seed: int = 0,
                  fractions: tuple[float, float, float] = (0.6, 0.2, 0.2)
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r"""A seeded random train/val/test split of the labelled vertices.

    Args:
        n: number of vertices.
        y: ``int64[n]`` labels (``-1`` = unlabelled, never put in a mask) or ``None`` (all vertices eligible).
        seed: seed of the permutation (``numpy.random.default_rng``).
        fractions: train, val and test fractions of the eligible vertices (default 60/20/20). The train and
            val sizes are rounded down; test takes its share of the rest.

    Returns:
        ``(train_mask, val_mask, test_mask)``, three disjoint ``bool[n]`` arrays.
    """
    if y is None:
        eligible = np.arange(n, dtype=np.int64)
    else:
        y = np.asarray(y).reshape(-1)
        if y.shape[0] != n:
            raise GridGnnError(f"{y.shape[0]} labels for {n} vertices")
        eligible = np.flatnonzero(y >= 0)
    ftr, fva, fte = fractions
    if min(fractions) < 0 or ftr + fva + fte > 1 + 1e-9:
        raise GridGnnError(f"split fractions {fractions} must be non-negative and sum to at most 1")
    perm = np.random.default_rng(seed).permutation(eligible)
    m = perm.size
    ntr = int(math.floor(ftr * m + 1e-9))
    nva = int(math.floor(fva * m + 1e-9))
    nte = min(m - ntr - nva, int(math.floor(fte * m + 1e-9 + 0.5)))
    masks = []
    for lo, hi in ((0, ntr), (ntr, ntr + nva), (ntr + nva, ntr + nva + nte)):
        mask = np.zeros(n, dtype=bool)
        mask[perm[lo:hi]] = True
        masks.append(mask)
    return masks[0], masks[1], masks[2]


def apply_defaults(graph: Graph, *, seed: int = 0) -> Graph:
    r"""Fill in the documented defaults (see the module docstring) and return the same graph.

    Args:
        graph: a graph, changed in place: ``x`` (degree features if ``None``, else cast to ``float32``) and, when
            ``y`` is given and all three masks are ``None``, the masks of :func:`default_split` with ``seed``.
    """
    if graph.x is None:
        graph.x = degree_features(graph.indptr, graph.indices, graph.n)
        graph.meta.setdefault("features", "degree")
    else:
        graph.x = np.ascontiguousarray(graph.x, dtype=np.float32)
    if graph.y is not None and all(getattr(graph, m) is None for m in _MASKS):
        graph.train_mask, graph.val_mask, graph.test_mask = default_split(graph.n, graph.y, seed)
        graph.meta.setdefault("split", f"random 60/20/20 (seed {seed})")
    return graph


def row_normalize(x: np.ndarray) -> np.ndarray:
    r"""Divide each row by its sum (Kipf & Welling); rows that sum to zero stay zero.

    Args:
        x: ``[n, f]`` features.

    Returns:
        ``float32[n, f]``.
    """
    x = np.asarray(x, dtype=np.float64)
    s = x.sum(axis=1, keepdims=True)
    inv = np.zeros_like(s)
    np.divide(1.0, s, out=inv, where=s != 0)
    return (x * inv).astype(np.float32)


# ---------------------------------------------------------------------------------------------- helpers
def _check_file(path) -> Path:
    p = Path(path)
    if not p.exists():
        raise GridGnnError(f"{p}: file not found")
    if not p.is_file():
        raise GridGnnError(f"{p}: not a regular file (cannot read)")
    if not os.access(p, os.R_OK):
        raise GridGnnError(f"{p}: cannot read file (permission denied)")
    return p


def _prefixed(path, err: GridGnnError) -> GridGnnError:
    msg = str(err)
    prefix = f"{path}: "
    return GridGnnError(msg if msg.startswith(prefix) else prefix + msg)


def _check_empty(g: Graph, path) -> Graph:
    if g.nnz == 0:
        raise GridGnnError(f"{path}: empty graph (no edges)")
    return g


def _as_numpy(t):
    if t is None:
        return None
    if hasattr(t, "detach"):  # a torch tensor (sparse layouts are densified)
        import torch

        t = t.detach().cpu()
        if t.layout != torch.strided:
            t = t.to_dense()
        return t.numpy()
    return np.asarray(t)


def _node_arrays(path, n: int, x, y, masks: dict) -> dict:
    """Check and convert x / y / masks read from a file; messages name the array and the sizes."""
    out = {}
    if x is not None:
        x = np.asarray(x)
        if x.ndim == 1:
            x = x.reshape(-1, 1)
        if x.ndim != 2:
            raise GridGnnError(f"{path}: features x must be 2-D, got shape {x.shape}")
        if not (np.issubdtype(x.dtype, np.number) or x.dtype == bool):
            raise GridGnnError(f"{path}: features x have non-numeric dtype {x.dtype}")
        if x.shape[0] != n:
            raise GridGnnError(f"{path}: features x have {x.shape[0]} rows for {n} vertices")
        if np.issubdtype(x.dtype, np.inexact) and not np.all(np.isfinite(x)):
            raise GridGnnError(f"{path}: features x contain NaN or inf")
        out["x"] = np.ascontiguousarray(x, dtype=np.float32)
        if not np.all(np.isfinite(out["x"])):
            raise GridGnnError(f"{path}: features x overflow float32 (inf)")
    if y is not None:
        y = np.asarray(y)
        if y.ndim == 2 and y.shape[1] == 1:
            y = y.reshape(-1)
        if y.ndim != 1:
            raise GridGnnError(f"{path}: labels y must be 1-D (one class per vertex), got shape {y.shape}")
        if y.shape[0] != n:
            raise GridGnnError(f"{path}: labels y have {y.shape[0]} entries for {n} vertices")
        if not np.issubdtype(y.dtype, np.integer):
            if not np.issubdtype(y.dtype, np.floating) or not np.all(np.isfinite(y)) or np.any(y != np.round(y)):
                raise GridGnnError(f"{path}: labels y must be integers (class ids, -1 = unlabelled)")
        y = y.astype(np.int64)
        if np.any(y < -1):
            raise GridGnnError(f"{path}: labels y contain {int(y.min())}; labels must be >= 0 (or -1 = unlabelled)")
        out["y"] = y
    for name, m in masks.items():
        if m is None:
            continue
        m = np.asarray(m)
        if m.ndim != 1:
            raise GridGnnError(f"{path}: {name} must be 1-D, got shape {m.shape}")
        if m.shape[0] != n:
            raise GridGnnError(f"{path}: {name} has {m.shape[0]} entries for {n} vertices")
        if m.dtype != bool:
            if not np.issubdtype(m.dtype, np.number) or not np.all(np.isin(m, (0, 1))):
                raise GridGnnError(f"{path}: {name} must be boolean (or 0/1)")
        out[name] = m.astype(bool)
    return out


# ---------------------------------------------------------------------------------------------- PyG
def from_pyg(data, *, seed: int = 0, name: str = "pyg") -> Graph:
    r"""Convert a PyG ``Data`` object.

    ``edge_index[0]`` is the source and ``edge_index[1]`` the destination (PyG ``source_to_target`` flow), which
    is the :class:`Graph` convention. Duplicate edges are merged; ``directed`` is detected from the symmetry of
    the adjacency. ``data.edge_weight`` (if present, shape ``[E]``) becomes the edge weights; ``edge_attr`` is
    ignored. ``y`` of shape ``[n, 1]`` is flattened; 2-D masks (several splits) use their first column.
    Defaults of :func:`apply_defaults` fill missing features and masks.

    Args:
        data: ``torch_geometric.data.Data`` with ``edge_index`` ``int64[2, E]``, optional ``x`` ``[n, f]``,
            ``y`` ``[n]``, ``train_mask``/``val_mask``/``test_mask`` ``bool[n]`` and ``edge_weight`` ``[E]``.
        seed: seed of the default split (used only when ``y`` is given without masks).
        name: graph name for reports.
    """
    what = f"PyG Data '{name}'"
    ei = _as_numpy(getattr(data, "edge_index", None))
    if ei is None or ei.ndim != 2 or ei.shape[0] != 2:
        raise GridGnnError(f"{what}: edge_index must have shape [2, E], got "
                           f"{None if ei is None else tuple(ei.shape)}")
    n = data.num_nodes
    if n is None or n == 0:
        raise GridGnnError(f"{what}: empty graph (no vertices)")
    w = _as_numpy(getattr(data, "edge_weight", None))
    masks = {}
    for m in _MASKS:
        arr = _as_numpy(getattr(data, m, None))
        if arr is not None and arr.ndim == 2:
            arr = arr[:, 0]
        masks[m] = arr
    try:
        node = _node_arrays(what, int(n), _as_numpy(getattr(data, "x", None)),
                            _as_numpy(getattr(data, "y", None)), masks)
        g = Graph.from_edges(ei[0], ei[1], int(n), weights=w, directed=None, name=name, **node)
    except GridGnnError as e:
        raise _prefixed(what, e) from None
    _check_empty(g, what)
    return apply_defaults(g, seed=seed)


# ---------------------------------------------------------------------------------------------- Planetoid
def load_planetoid(directory, *, seed: int = 0) -> Graph:
    r"""Load a Planetoid citation graph (Cora, CiteSeer, PubMed) from its raw files.

    The directory holds ``ind.<name>.{x,tx,allx,y,ty,ally,graph,test.index}`` (the name is inferred from the
    ``ind.<name>.x`` file). The files are read with PyG's ``torch_geometric.io.read_planetoid_data`` (which
    removes self-loops and duplicate edges and gives the standard split: 20 labelled nodes per class for
    training, 500 for validation, 1000 for test). The graph is symmetrized (undirected) and the features are
    row-normalized as in Kipf & Welling (:func:`row_normalize`: each row divided by its sum, zero rows stay zero).

    Args:
        directory: the folder with the raw files.
        seed: unused (the standard split is fixed); accepted for a uniform loader signature.

    Returns:
        A :class:`Graph` with ``x`` ``float32[n, f]``, ``y`` ``int64[n]`` and the three standard masks.
    """
    d = Path(directory)
    if not d.exists():
        raise GridGnnError(f"{d}: Planetoid directory not found")
    if not d.is_dir():
        raise GridGnnError(f"{d}: not a directory (expected the folder with ind.<name>.* files)")
    names = sorted(p.name[len("ind."):-len(".x")] for p in d.glob("ind.*.x"))
    if len(names) != 1:
        found = "none" if not names else ", ".join(names)
        raise GridGnnError(f"{d}: expected exactly one Planetoid dataset (ind.<name>.x), found {found}")
    prefix = names[0]
    for part in ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index"):
        _check_file(d / f"ind.{prefix}.{part}")
    from torch_geometric.io import read_planetoid_data

    try:
        data = read_planetoid_data(str(d), prefix)
    except (OSError, EOFError, ValueError, TypeError, IndexError, RuntimeError, KeyError,
            pickle.UnpicklingError) as e:
        raise GridGnnError(f"{d}: cannot read Planetoid files ind.{prefix}.*: {type(e).__name__}: {e}") from None
    x = row_normalize(_as_numpy(data.x))
    ei = _as_numpy(data.edge_index)
    n = int(data.num_nodes)
    masks = {m: _as_numpy(getattr(data, m)) for m in _MASKS}
    try:
        node = _node_arrays(d, n, x, _as_numpy(data.y), masks)
        g = Graph.from_edges(ei[0], ei[1], n, directed=False, name=prefix, **node)
    except GridGnnError as e:
        raise _prefixed(d, e) from None
    g.meta.update(source=str(d), features="row-normalized", split="planetoid standard")
    return apply_defaults(_check_empty(g, d), seed=seed)


# ---------------------------------------------------------------------------------------------- edge list
def _parse_int(tok: str) -> int | None:
    try:
        return int(tok)
    except ValueError:
        return None


def _is_number(tok: str) -> bool:
    try:
        float(tok)
        return True
    except ValueError:
        return False


def load_edgelist(path, directed: bool | None = None, *, num_nodes: int | None = None,
                  seed: int = 0) -> Graph:
    r"""Load a text edge list: one edge ``src dst`` or ``src dst weight`` per line.

    Columns are separated by whitespace or commas; lines starting with ``#`` or ``%`` and blank lines are
    ignored, and a first line made only of non-numbers (a CSV header such as ``src,dst``) is skipped. Vertex ids
    are 0-based integers; ``n = max id + 1`` unless ``num_nodes`` is given. Duplicate edges are merged (weights
    summed). The file holds no node data, so :func:`apply_defaults` gives degree features and ``y = None``.

    Args:
        path: the file.
        directed: ``None`` (default) detects symmetry; ``False`` symmetrizes (an edge listed in one direction
            becomes undirected, the larger weight wins); ``True`` keeps the edges as directed ``src → dst``.
        num_nodes: vertex count (to include isolated trailing vertices); ids must be below it.
        seed: unused here (no labels); accepted for a uniform loader signature.

    Returns:
        A :class:`Graph` with ``n`` vertices and the listed edges (``values`` set when a weight column exists and
        not all weights are 1).
    """
    p = _check_file(path)
    try:
        with open(p, "r", encoding="utf-8") as fh:
            text = fh.read()
    except (OSError, UnicodeDecodeError) as e:
        raise GridGnnError(f"{p}: cannot read file: {e}") from None
    rows: list[list[str]] = []
    linenos: list[int] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        s = line.strip()
        if not s or s[0] in "#%":
            continue
        toks = s.replace(",", " ").split()
        if not rows and not any(_is_number(t) for t in toks):
            continue  # header line
        rows.append(toks)
        linenos.append(lineno)
    if not rows:
        raise GridGnnError(f"{p}: empty graph (no edges in the file)")
    ncols = len(rows[0])
    if ncols not in (2, 3):
        raise GridGnnError(f"{p}: line {linenos[0]}: expected 2 or 3 columns (src dst [weight]), found {ncols}")
    lens = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
    bad = np.flatnonzero(lens != ncols)
    if bad.size:
        k = int(bad[0])
        raise GridGnnError(f"{p}: line {linenos[k]}: expected {ncols} columns (as on line {linenos[0]}), "
                           f"found {len(rows[k])}")
    ids = np.empty((len(rows), 2), dtype=np.int64)
    for c in (0, 1):
        col = [r[c] for r in rows]
        try:
            ids[:, c] = np.array(col, dtype=np.int64)
        except (ValueError, OverflowError):
            k = next(i for i, t in enumerate(col) if _parse_int(t) is None or abs(_parse_int(t)) >= 2 ** 62)
            raise GridGnnError(f"{p}: line {linenos[k]}: vertex id {col[k]!r} is not an integer") from None
    neg = np.flatnonzero((ids < 0).any(axis=1))
    if neg.size:
        k = int(neg[0])
        raise GridGnnError(f"{p}: line {linenos[k]}: negative vertex id {int(ids[k].min())} (ids are 0-based)")
    if num_nodes is not None:
        if num_nodes <= 0:
            raise GridGnnError(f"{p}: num_nodes must be positive, got {num_nodes}")
        big = np.flatnonzero((ids >= num_nodes).any(axis=1))
        if big.size:
            k = int(big[0])
            raise GridGnnError(f"{p}: line {linenos[k]}: vertex id {int(ids[k].max())} out of range "
                               f"for {num_nodes} vertices (valid 0..{num_nodes - 1})")
    weights = None
    if ncols == 3:
        col = [r[2] for r in rows]
        try:
            weights = np.array(col, dtype=np.float64)
        except ValueError:
            k = next(i for i, t in enumerate(col) if not _is_number(t))
            raise GridGnnError(f"{p}: line {linenos[k]}: weight {col[k]!r} is not a number") from None
        nonfin = np.flatnonzero(~np.isfinite(weights))
        if nonfin.size:
            k = int(nonfin[0])
            raise GridGnnError(f"{p}: line {linenos[k]}: weight {col[k]!r} is NaN or inf")
    n = int(num_nodes) if num_nodes is not None else int(ids.max()) + 1
    try:
        g = Graph.from_edges(ids[:, 0], ids[:, 1], n, weights=weights, directed=directed, name=p.stem)
    except GridGnnError as e:
        raise _prefixed(p, e) from None
    g.meta["source"] = str(p)
    return apply_defaults(_check_empty(g, p), seed=seed)


# ---------------------------------------------------------------------------------------------- Matrix Market
def load_mtx(path, *, seed: int = 0) -> Graph:
    r"""Load a Matrix Market coordinate file with ``scipy.io.mmread``.

    The entry ``(i, j)`` is the edge ``i → j`` (PyG ``src = i``, ``dst = j``), so the stored matrix of the
    :class:`Graph` (rows = destinations) is the transpose of the file's matrix. A ``symmetric`` file is
    undirected; ``general`` and ``skew-symmetric`` files are directed unless the matrix turns out symmetric.
    ``pattern`` files are unweighted; ``real``/``integer`` values become edge weights (dropped when all are 1).
    Complex values and dense ``array`` files are refused. Node data come from :func:`apply_defaults`.

    Args:
        path: the ``.mtx`` file (a square matrix, ``n × n``).
        seed: unused here (no labels); accepted for a uniform loader signature.
    """
    import scipy.io

    p = _check_file(path)
    try:
        rows, cols, _, fmt, field, symmetry = scipy.io.mminfo(str(p))
    except (OSError, ValueError, IndexError, UnicodeDecodeError) as e:
        raise GridGnnError(f"{p}: not a Matrix Market file: {e}") from None
    if fmt != "coordinate":
        raise GridGnnError(f"{p}: Matrix Market format '{fmt}' is not supported (need 'coordinate')")
    if field == "complex" or symmetry == "hermitian":
        raise GridGnnError(f"{p}: complex Matrix Market values are not supported")
    if rows != cols:
        raise GridGnnError(f"{p}: adjacency must be square, got {rows}×{cols}")
    if rows == 0:
        raise GridGnnError(f"{p}: empty graph (0 vertices)")
    try:
        mat = scipy.io.mmread(str(p))
    except (OSError, ValueError, IndexError, TypeError, UnicodeDecodeError) as e:
        raise GridGnnError(f"{p}: malformed Matrix Market file: {e}") from None
    coo = sp.coo_matrix(mat)
    if coo.nnz and (coo.row.min() < 0 or coo.col.min() < 0 or coo.row.max() >= rows or coo.col.max() >= cols):
        raise GridGnnError(f"{p}: entry index out of range for a {rows}×{cols} matrix")
    weights = None if field == "pattern" else np.asarray(coo.data, dtype=np.float64)
    if weights is not None and not np.all(np.isfinite(weights)):
        raise GridGnnError(f"{p}: edge weights contain NaN or inf")
    directed = False if symmetry == "symmetric" else None
    try:
        g = Graph.from_edges(coo.row, coo.col, int(rows), weights=weights, directed=directed, name=p.stem)
    except GridGnnError as e:
        raise _prefixed(p, e) from None
    g.meta["source"] = str(p)
    return apply_defaults(_check_empty(g, p), seed=seed)


# ---------------------------------------------------------------------------------------------- npz
def load_npz(path, *, seed: int = 0) -> Graph:
    r"""Load a graph from a NumPy ``.npz`` archive holding SciPy-style CSR arrays.

    **The CSR stored in the file has rows = destinations and columns = sources** (the :class:`Graph`
    convention): row ``i`` lists the in-neighbours ``j`` of ``i``, i.e. the edges ``j → i``. For an undirected
    graph the two readings coincide. A file written by ``scipy.sparse.save_npz`` of a CSR matrix is accepted and
    read with the same convention.

    Keys:
        ``indptr`` ``int[n+1]``, ``indices`` ``int[nnz]`` (required); ``data`` ``float[nnz]`` edge weights
        (optional, absent = all ones); ``shape`` ``(n, n)`` (optional, default ``n = len(indptr) - 1``);
        ``format`` (optional, must be ``csr``); ``directed`` (optional bool, absent = detected);
        ``x`` ``float[n, f]``, ``y`` ``int[n]`` (-1 = unlabelled), ``train_mask``/``val_mask``/``test_mask``
        ``bool[n]`` (all optional; defaults of :func:`apply_defaults`); ``name`` (optional string).

    Args:
        path: the ``.npz`` file.
        seed: seed of the default split (used only when ``y`` is given without masks).
    """
    p = _check_file(path)
    try:
        with np.load(p, allow_pickle=False) as z:
            arrs = {k: z[k] for k in z.files}
    except (OSError, ValueError, EOFError, KeyError) as e:
        raise GridGnnError(f"{p}: cannot read .npz archive: {e}") from None
    for key in ("indptr", "indices"):
        if key not in arrs:
            raise GridGnnError(f"{p}: missing array '{key}' (need indptr, indices; found {sorted(arrs)})")
    if "format" in arrs:
        fmt = np.asarray(arrs["format"]).reshape(-1)[0].item()
        fmt = fmt.decode() if isinstance(fmt, bytes) else str(fmt)
        if fmt != "csr":
            raise GridGnnError(f"{p}: sparse format '{fmt}' is not supported (need 'csr')")
    indptr, indices = arrs["indptr"], arrs["indices"]
    for key, a in (("indptr", indptr), ("indices", indices)):
        if a.ndim != 1 or not np.issubdtype(a.dtype, np.integer):
            raise GridGnnError(f"{p}: '{key}' must be a 1-D integer array, got {a.dtype} of shape {a.shape}")
    if "shape" in arrs:
        shape = tuple(int(s) for s in np.asarray(arrs["shape"]).reshape(-1))
        if len(shape) != 2 or shape[0] != shape[1]:
            raise GridGnnError(f"{p}: adjacency must be square, got shape {shape}")
        n = shape[0]
    else:
        n = indptr.size - 1
    if n <= 0:
        raise GridGnnError(f"{p}: empty graph (0 vertices)")
    if indptr.size != n + 1:
        raise GridGnnError(f"{p}: indptr has {indptr.size} entries, expected n+1 = {n + 1}")
    if indptr[0] != 0 or np.any(np.diff(indptr) < 0) or indptr[-1] != indices.size:
        raise GridGnnError(f"{p}: invalid CSR: indptr must start at 0, not decrease and end at "
                           f"len(indices) = {indices.size} (ends at {int(indptr[-1])})")
    if indices.size and indices.min() < 0:
        raise GridGnnError(f"{p}: negative vertex id {int(indices.min())} in indices")
    if indices.size and indices.max() >= n:
        raise GridGnnError(f"{p}: vertex id {int(indices.max())} out of range for {n} vertices "
                           f"(valid 0..{n - 1})")
    values = None
    if "data" in arrs:
        values = np.asarray(arrs["data"])
        if values.shape != indices.shape:
            raise GridGnnError(f"{p}: 'data' has {values.size} edge weights for {indices.size} indices")
        if not np.issubdtype(values.dtype, np.number):
            raise GridGnnError(f"{p}: 'data' has non-numeric dtype {values.dtype}")
        values = values.astype(np.float64)
        if not np.all(np.isfinite(values)):
            raise GridGnnError(f"{p}: edge weights 'data' contain NaN or inf")
    node = _node_arrays(p, n, arrs.get("x"), arrs.get("y"), {m: arrs.get(m) for m in _MASKS})
    directed = None
    if "directed" in arrs:
        directed = bool(np.asarray(arrs["directed"]).reshape(-1)[0])
    name = str(arrs["name"].reshape(-1)[0]) if "name" in arrs else p.stem
    mat = sp.csr_matrix((values if values is not None else np.ones(indices.size), indices, indptr), shape=(n, n))
    try:
        g = Graph.from_scipy(mat, directed=directed, weighted=values is not None, name=name, **node)
    except GridGnnError as e:
        raise _prefixed(p, e) from None
    g.meta["source"] = str(p)
    return apply_defaults(_check_empty(g, p), seed=seed)


def save_npz(graph: Graph, path) -> Path:
    r"""Write ``graph`` in the format read by :func:`load_npz` (CSR with rows = destinations).

    Stores ``indptr``, ``indices``, ``shape``, ``format='csr'``, ``directed``, ``name``, and ``data``, ``x``,
    ``y`` and the masks when they are not ``None``. Uncompressed (``numpy.savez``).

    Args:
        graph: the graph to write.
        path: destination; NumPy appends ``.npz`` when missing.

    Returns:
        The path written.
    """
    p = Path(path)
    if p.suffix != ".npz":
        p = p.with_name(p.name + ".npz")
    arrs = dict(indptr=graph.indptr, indices=graph.indices, shape=np.array([graph.n, graph.n], dtype=np.int64),
                format=np.array("csr"), directed=np.array(bool(graph.directed)), name=np.array(str(graph.name)))
    if graph.values is not None:
        arrs["data"] = graph.values
    for key in ("x", "y") + _MASKS:
        val = getattr(graph, key)
        if val is not None:
            arrs[key] = val
    try:
        np.savez(p, **arrs)
    except OSError as e:
        raise GridGnnError(f"{p}: cannot write file: {e}") from None
    return p
