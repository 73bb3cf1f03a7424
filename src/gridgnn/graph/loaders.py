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

Bad input raises :class:`~gridgnn.errors.GridGnnError` with a one-line message that starts with the file name,
never another exception type; files are parsed by this package (no pickles run, no ``scipy.io.mmread``, no
``numpy.load``), and nothing of size ``n`` is allocated before the vertex count is checked:

* **Plausible vertex count.** When ``n`` comes from the largest id of an edge list or from a Matrix Market
  header, ``n > 2 * entries + 1,000,000`` is refused (``entries`` edges touch at most ``2 * entries`` vertices, so
  more than a million vertices would be isolated: a typo or a hashed id, not a graph). Pass ``?num_nodes=N`` to
  confirm the count, or ``?relabel=1`` to compact the ids to ``0..k-1``; the file's ids are then kept in
  :attr:`Graph.original_ids <gridgnn.graph.graph.Graph.original_ids>` (vertex ``i`` is the file's
  ``original_ids[i]``), which :func:`save_npz` stores too.
* **Memory ceiling.** Even a confirmed ``n`` is refused when ``n * 64`` bytes (the per-vertex arrays of a
  :class:`Graph` and their transient copies) exceed the memory available (``MemAvailable`` of
  ``/proc/meminfo``). Ids must fit ``int64``.
* **Labels.** Class ids must be below the vertex count (``max label + 1 <= n``).
"""
from __future__ import annotations

import io
import json
import math
import warnings
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from ..errors import GridGnnError
from .graph import Graph
from .planetoid import PARTS as PLANETOID_PARTS
from .planetoid import read_planetoid_arrays
from .safe_io import (MAX_ID, check_plausible_vertex_count, check_vertex_count, read_npz, regular_file,
                      short)

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
    return degree_columns(np.diff(np.asarray(indptr, dtype=np.int64)),
                          np.bincount(np.asarray(indices, dtype=np.int64), minlength=n))


def degree_columns(indeg: np.ndarray, outdeg: np.ndarray) -> np.ndarray:
    """:func:`degree_features` from each vertex's in-degree and out-degree (counts of stored entries)."""
    indeg, outdeg = indeg.astype(np.float64), outdeg.astype(np.float64)
    return np.stack([np.ones(indeg.size), np.log1p(indeg), np.log1p(outdeg)], axis=1).astype(np.float32)


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
        graph.meta["split_default"] = f"random 60/20/20 (seed {seed})"  # a silent choice: said on the console
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


#: ``--feature-norm`` values (``auto``: the model's :attr:`~gridgnn.nn.base.Model.FEATURE_NORM`, else the data's
#: convention: ``row`` for ``planetoid:``; see :mod:`gridgnn.graph.pipeline`)
FEATURE_NORMS = ("auto", "none", "row", "l2")


def normalize_features(x: np.ndarray | None, how: str, *, in_place: bool = False) -> np.ndarray | None:
    r"""``--feature-norm``: ``"none"`` gives ``x``; ``"row"`` each row divided by its sum (Kipf & Welling,
    :func:`row_normalize`; zero-sum rows stay zero); ``"l2"`` each row divided by its L2 norm (the sums and norms
    in float64; all-zero rows stay zero), in ``x``'s floating dtype — into ``x`` itself when ``in_place`` (a
    float array the caller owns), else into one new array; the work goes in blocks of rows, so no float64 copy of
    the whole matrix is made. A row's result depends on that row alone, so any subset of rows (a rank's block, a
    sharded chunk) is normalized alike."""
    if x is None or how == "none":
        return x
    if how not in ("l2", "row"):
        raise GridGnnError(f"--feature-norm must be none, row or l2 here, got {how!r}")
    x = np.asarray(x)
    floating = np.issubdtype(x.dtype, np.floating)
    out = x if in_place and floating else np.empty(x.shape, x.dtype if floating else np.float32)
    step = max(1, (1 << 22) // max(1, x.shape[1]))  # about 32 MiB of float64 per block
    for r0 in range(0, x.shape[0], step):
        block = x[r0:r0 + step].astype(np.float64)
        norm = block.sum(axis=1) if how == "row" else np.sqrt(np.einsum("ij,ij->i", block, block))
        inv = np.zeros_like(norm)
        np.divide(1.0, norm, out=inv, where=norm != 0 if how == "row" else norm > 0)
        out[r0:r0 + step] = block * inv[:, None]
    return out


# ---------------------------------------------------------------------------------------------- helpers
def _check_file(path) -> Path:
    """An existing, readable regular file (a FIFO or device could block or never end)."""
    return regular_file(path, "file")[0]


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
        if t.dtype in (torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2):  # (no NumPy dtype holds them)
            t = t.float()
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
        if y.size and y.max() >= n:
            top = int(y.max()) if y.dtype.kind in "iu" else f"{float(y.max()):.0f}"
            raise GridGnnError(f"{path}: label {top} is not below the {n} vertices (class ids must be 0..n-1, "
                               f"-1 = unlabelled)")
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
    is the :class:`Graph` convention; it must be an integer tensor. Duplicate edges are merged (one edge per source
    and destination, given weights added; ``meta["duplicate_edges_merged"]`` counts them and a training run says
    so on its console); ``directed`` is detected from the symmetry of
    the adjacency. ``data.edge_weight`` (if present, shape ``[E]``) becomes the edge weights; ``data.edge_attr``
    (``[E, d]`` or ``[E]``) the edge features (:attr:`Graph.edge_attr <gridgnn.graph.graph.Graph.edge_attr>`; a
    multigraph — some edge given twice — is merged as without them, its features dropped and
    ``meta["edge_features_dropped"]`` saying so; a model that reads them is then refused with that reason).
    ``data.edge_type`` (``[E]``) makes a typed graph (:attr:`Graph.edge_type_counts
    <gridgnn.graph.graph.Graph.edge_type_counts>`, PyG ``RGCNConv``'s convention; no weights nor edge features
    with it). ``y`` of shape ``[n, 1]`` is flattened; 2-D masks (several splits) use their first column.
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
    if not np.issubdtype(ei.dtype, np.integer):  # PyG's layers index with it: integer vertex ids only
        raise GridGnnError(f"{what}: edge_index has dtype {ei.dtype}; it must hold integer vertex ids "
                           "(torch.long), as PyG's layers require")
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
        kind = _as_numpy(getattr(data, "edge_type", None))
        if kind is not None:  # a typed graph (RGCNConv's edge_type): stored as given, every edge counted
            if w is not None or getattr(data, "edge_attr", None) is not None:
                raise GridGnnError("a typed graph (edge_type) takes no edge_weight nor edge_attr in gridgnn")
            count = getattr(data, "num_relations", None)  # a Data may say how many (an absent top relation)
            g = Graph.from_edges(ei[0], ei[1], int(n), edge_type=kind.reshape(-1), name=name,
                                 num_relations=None if count is None else int(count), **node)
            dropped = None
        else:
            attr, dropped = Graph.unmerged_features(ei[0], ei[1], int(n),
                                                    _as_numpy(getattr(data, "edge_attr", None)))
            g = Graph.from_edges(ei[0], ei[1], int(n), weights=w, directed=None, name=name, edge_attr=attr, **node)
        if dropped:
            g.meta["edge_features_dropped"] = dropped
    except GridGnnError as e:
        raise _prefixed(what, e) from None
    _check_empty(g, what)
    return apply_defaults(g, seed=seed)


# ---------------------------------------------------------------------------------------------- Planetoid
def load_planetoid(directory, *, seed: int = 0) -> Graph:
    r"""Load a Planetoid citation graph (Cora, CiteSeer, PubMed) from its raw files.

    The directory holds ``ind.<name>.{x,tx,allx,y,ty,ally,graph,test.index}`` (the name is inferred from the
    ``ind.<name>.x`` file). The pickled files are read by :func:`~gridgnn.graph.planetoid.read_planetoid_arrays`
    with a restricted unpickler that admits only numpy arrays, ``scipy.sparse`` matrices, ``defaultdict`` and
    builtins (no code from the files runs; anything else is refused with an error naming the file and the
    global). The result equals PyG's ``read_planetoid_data``: self-loops and duplicate edges removed, zero
    feature rows for CiteSeer's isolated test nodes, and the standard split (20 labelled nodes per class for
    training, 500 for validation, 1000 for test). The graph is symmetrized (undirected). The features are the
    files' (PyG's ``Planetoid`` without transforms); ``meta["feature_norm"] = "row"`` marks their conventional
    normalization (Kipf & Welling, :func:`row_normalize`), which ``--feature-norm auto`` applies when training
    (and records in the model, so ``predict`` applies it to PyG's raw copy of the graph too).

    Args:
        directory: the folder with the raw files.
        seed: unused (the standard split is fixed); accepted for a uniform loader signature.

    Returns:
        A :class:`Graph` with ``x`` ``float32[n, f]``, ``y`` ``int64[n]`` and the three standard masks.

    Raises:
        GridGnnError: a missing directory or file, a refused or malformed pickle, sizes that do not fit together
            (e.g. test ids far beyond the adjacency dict), naming the file.
    """
    d = Path(directory)
    if not d.exists():
        raise GridGnnError(f"{d}: Planetoid directory not found")
    if not d.is_dir():
        raise GridGnnError(f"{d}: not a directory (expected the folder with ind.<name>.* files)")
    names = sorted(p.name[len("ind."):-len(".x")] for p in d.glob("ind.*.x"))
    if len(names) != 1:
        found = "none" if not names else ", ".join(short(n) for n in names[:5])
        raise GridGnnError(f"{d}: expected exactly one Planetoid dataset (ind.<name>.x), found {found}")
    prefix = names[0]
    for part in PLANETOID_PARTS:
        _check_file(d / f"ind.{prefix}.{part}")
    data = read_planetoid_arrays(d, prefix)  # its messages name the file
    x = data["x"]  # raw: --feature-norm auto row-normalizes (meta["feature_norm"]), the model records it
    ei = data["edge_index"]
    n = int(data["y"].shape[0])
    masks = {m: data[m] for m in _MASKS}
    try:
        node = _node_arrays(d, n, x, data["y"], masks)
        g = Graph.from_edges(ei[0], ei[1], n, directed=False, name=prefix, **node)
    except GridGnnError as e:
        raise _prefixed(d, e) from None
    g.meta.update(source=str(d), features="as in the files", feature_norm="row", split="planetoid standard")
    return apply_defaults(_check_empty(g, d), seed=seed)


# ---------------------------------------------------------------------------------------------- ids
def _parse_int(tok: str) -> int | None:
    body = tok[1:] if tok[:1] in "+-" else tok
    if not body.isascii() or not body.isdigit() or len(body) > 4000:
        return None
    return int(tok)


def _is_number(tok: str) -> bool:
    """Whether ``tok`` is a number as a text file writes one: what Python's ``float`` reads, less what only Python
    reads (underscores between digits, digits of other scripts)."""
    return _plain(tok) and _reads_as_number(tok)


def _reads_as_number(tok: str) -> bool:
    """Whether Python's ``float`` reads ``tok`` (``1_0`` and ``١٠`` too): a line of such tokens is no header."""
    try:
        float(tok)
        return True
    except ValueError:
        return False


def _plain(text: str) -> bool:
    """Whether ``text`` (tokens joined) holds nothing that Python's ``int`` and ``float`` read beyond a file's
    numbers: ``1_0`` is 10 to Python and ``٣`` is 3; both are refused as numbers of a file."""
    return text.isascii() and "_" not in text


def _int_column(p, col: list, linenos: list, what: str) -> np.ndarray:
    """``int64`` ids of one text column; a token that is not an integer or does not fit is named with its line."""
    if _plain("".join(col)):
        try:
            return np.array(col, dtype=np.int64)
        except (ValueError, OverflowError, TypeError):
            pass
    for k, t in enumerate(col):
        v = _parse_int(t)
        if v is None:
            raise GridGnnError(f"{p}: line {linenos[k]}: {what} {short(t)} is not an integer")
        if not -MAX_ID - 1 <= v <= MAX_ID:
            raise GridGnnError(f"{p}: line {linenos[k]}: {what} {short(t)} does not fit a 64-bit id "
                               f"(largest {MAX_ID})")
    raise GridGnnError(f"{p}: {what}s are not all integers")


def _vertex_count(p, ids: np.ndarray, linenos, *, num_nodes, relabel: bool, entries: int, header_n=None):
    r"""Apply the vertex-count rules of :mod:`~gridgnn.graph.safe_io`; returns ``(n, ids, original_ids)``.

    ``ids`` are the 0-based ids of the file, ``int64[E, 2]``; ``header_n`` is the count a file header declares
    (Matrix Market, whose indices are already checked against it), ``None`` when ``n`` comes from the largest id.
    """
    check_count_options(p, num_nodes, relabel)
    if relabel:
        uniq, inv = np.unique(ids, return_inverse=True)
        return int(uniq.size), inv.reshape(ids.shape).astype(np.int64), uniq.astype(np.int64)
    if header_n is not None:
        return header_count(p, header_n, num_nodes, entries), ids, None
    if num_nodes is not None:
        n = int(num_nodes)
        check_vertex_count(n, f"{p}: num_nodes={n}")
        out_of_range(p, ids, linenos, n)
        return n, ids, None
    return count_from_largest(p, int(ids.max()) if ids.size else -1, entries), ids, None


def header_count(p, header_n: int, num_nodes, entries: int) -> int:
    """The vertex count a file header declares (Matrix Market), confirmed by ``num_nodes`` where given, under the
    plausibility rule for ``entries`` entries otherwise, and the memory ceiling."""
    n = int(header_n)
    if num_nodes is not None and int(num_nodes) != n:
        raise GridGnnError(f"{p}: num_nodes={num_nodes} differs from the {n} vertices of the header")
    if num_nodes is None:
        check_plausible_vertex_count(n, entries, str(p), confirm=f"?num_nodes={n} or ?relabel=1")
    check_vertex_count(n, str(p))
    return n


def check_count_options(p, num_nodes, relabel: bool) -> None:
    """``num_nodes=`` and ``relabel=`` as the vertex-count rules accept them."""
    if relabel and num_nodes is not None:
        raise GridGnnError(f"{p}: give either num_nodes= or relabel=1, not both")
    if num_nodes is not None and (isinstance(num_nodes, bool) or int(num_nodes) != num_nodes or num_nodes <= 0):
        raise GridGnnError(f"{p}: num_nodes must be a positive integer, got {short(num_nodes)}")


def out_of_range(p, ids: np.ndarray, linenos, n: int) -> None:
    """Refuse the first edge (in file order) whose id is not below ``n``, naming its line."""
    if ids.size and int(ids.max()) >= n:
        k = int(np.flatnonzero((ids >= n).any(axis=1))[0])
        raise GridGnnError(f"{p}: line {linenos[k]}: vertex id {int(ids[k].max())} out of range for {n} "
                           f"vertices (valid 0..{n - 1})")


def count_from_largest(p, top: int, entries: int) -> int:
    """``n = largest id + 1`` of a file of ``entries`` edges, under the plausibility rule and the memory ceiling."""
    if top >= MAX_ID:
        raise GridGnnError(f"{p}: vertex id {top} leaves no room for a 64-bit vertex count; pass ?relabel=1")
    n = top + 1
    check_plausible_vertex_count(n, entries, str(p), confirm="?num_nodes=N (ids must be below N) or ?relabel=1 "
                                                             "(ids compacted to 0..k-1)")
    check_vertex_count(n, str(p))
    return n


# ---------------------------------------------------------------------------------------------- edge list
def _text_pieces(p: Path, chunk_bytes: int | None):
    """``([lines], first line number)`` of the file in pieces that end at a line end (``\\n``, ``\\r\\n`` or a lone
    ``\\r``; ``chunk_bytes``: about that many bytes each, ``None``: the whole file at once), decoded as UTF-8 (a bad
    byte is named by its offset in the file; a leading byte-order mark is dropped). The lines come in a one-item list for the caller to take out
    (``.pop()``): the generator keeps no reference to them, nor to the bytes, while it waits."""
    try:
        fh = open(p, "rb")
    except OSError as e:
        raise GridGnnError(f"{p}: cannot read file: {e.strerror or e}") from None
    with fh:
        offset, lineno, rest, ended = 0, 1, b"", False
        while not ended:
            try:
                block = fh.read(-1 if chunk_bytes is None else chunk_bytes)
            except OSError as e:
                raise GridGnnError(f"{p}: cannot read file: {e.strerror or e}") from None
            ended = not block
            raw = rest + block
            del block
            if chunk_bytes is None or ended:
                cut = len(raw)  # whole (no chunk size, or the end of the file): everything left
            else:  # after the last line end; a final \r waits for the next block (it may start with \n)
                cut = max(raw.rfind(b"\n"), raw.rfind(b"\r", 0, len(raw) - 1)) + 1
                if cut == 0:
                    rest = raw  # no line end yet: read on
                    continue
            piece, rest = raw[:cut], raw[cut:]
            del raw
            try:
                text = piece.decode("utf-8")
            except UnicodeDecodeError as e:
                bad = offset + e.start
                raise GridGnnError(f"{p}: not UTF-8 text (byte {bad} is {piece[e.start:e.start + 1]!r}); an edge "
                                   f"list is a text file") from None
            if offset == 0:
                text = text.removeprefix("\ufeff")  # a byte-order mark (some Windows editors write one)
            offset += len(piece)
            del piece
            if text:  # lines end at \n, \r\n or \r only (str.splitlines would also end them at \f, \x1c, ...)
                box = [text.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
                if box[0][-1] == "":
                    box[0].pop()  # (the piece ends at a line end: no line after it)
                del text
                count = len(box[0])
                yield box, lineno
                lineno += count


def edgelist_chunks(path, *, edge_features: bool = False, chunk_bytes: int | None = None):
    r"""The edges of a text edge list (:func:`load_edgelist`'s format and checks), parsed a piece of the file at a
    time: yields ``(ids, weights, attr, linenos)`` — ``int64[E, 2]`` ``(src, dst)`` ids as in the file (checked
    non-negative), ``float64[E]`` weights (a third column) or ``None``, ``float64[E, d]`` edge features (with
    ``edge_features``) or ``None``, and each edge's line number. ``chunk_bytes``: about that many bytes of text per
    piece (``None``: the whole file as one). Every piece has the first edge line's column count."""
    p = Path(path)
    ncols = first = None
    for box, start in _text_pieces(p, chunk_bytes):
        lines = box.pop()
        rows: list[list[str]] = []
        linenos: list[int] = []
        for lineno, line in enumerate(lines, start=start):
            s = line.strip()
            if not s or s[0] in "#%":
                continue
            toks = s.replace(",", " ").split()
            if first is None and not rows and not any(_reads_as_number(t) for t in toks):
                continue  # header line (a line of 1_0 or ١٠ is no header: its numbers are refused below)
            rows.append(toks)
            linenos.append(lineno)
        del lines
        if not rows:
            continue
        if ncols is None:
            ncols, first = len(rows[0]), linenos[0]
            if edge_features and ncols < 3:
                raise GridGnnError(f"{p}: line {first}: expected src dst and at least one edge feature "
                                   f"(edge_features=1), found {ncols} columns")
            if not edge_features and ncols not in (2, 3):
                raise GridGnnError(f"{p}: line {first}: expected 2 or 3 columns (src dst [weight]), found {ncols}"
                                   + (" (edge features in the later columns: edge_features=1)" if ncols > 3 else ""))
        lens = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
        bad = np.flatnonzero(lens != ncols)
        if bad.size:
            k = int(bad[0])
            raise GridGnnError(f"{p}: line {linenos[k]}: expected {ncols} columns (as on line {first}), "
                               f"found {len(rows[k])}")
        ids = np.empty((len(rows), 2), dtype=np.int64)
        for c in (0, 1):
            ids[:, c] = _int_column(p, [r[c] for r in rows], linenos, "vertex id")
        neg = np.flatnonzero((ids < 0).any(axis=1))
        if neg.size:
            k = int(neg[0])
            raise GridGnnError(f"{p}: line {linenos[k]}: negative vertex id {int(ids[k].min())} (ids are 0-based)")
        weights = attr = None
        if edge_features:
            try:
                if not _plain("".join("".join(r[2:]) for r in rows)):
                    raise ValueError
                attr = np.array([r[2:] for r in rows], dtype=np.float64)
            except (ValueError, OverflowError, TypeError):
                k = next(i for i, r in enumerate(rows) if not all(_is_number(t) for t in r[2:]))
                raise GridGnnError(f"{p}: line {linenos[k]}: an edge feature is not a number") from None
        elif ncols == 3:
            col = [r[2] for r in rows]
            try:
                if not _plain("".join(col)):
                    raise ValueError
                weights = np.array(col, dtype=np.float64)
            except (ValueError, OverflowError, TypeError):
                k = next((i for i, t in enumerate(col) if not _is_number(t)), 0)
                raise GridGnnError(f"{p}: line {linenos[k]}: weight {short(col[k])} is not a number") from None
            nonfin = np.flatnonzero(~np.isfinite(weights))
            if nonfin.size:
                k = int(nonfin[0])
                raise GridGnnError(f"{p}: line {linenos[k]}: weight {short(col[k])} is NaN or inf")
        del rows
        yield ids, weights, attr, linenos


def load_edgelist(path, directed: bool | None = None, *, num_nodes: int | None = None, relabel: bool = False,
                  seed: int = 0, edge_features: bool = False) -> Graph:
    r"""Load a text edge list: one edge ``src dst`` or ``src dst weight`` per line (with ``edge_features``:
    ``src dst f_1 ... f_d``, the columns after the two ids being the edge's features).

    Columns are separated by whitespace or commas; lines starting with ``#`` or ``%`` and blank lines are
    ignored, and lines made only of non-numbers before the first edge (a CSV header such as ``src,dst``) are
    skipped. Vertex ids are 0-based integers that fit ``int64``; ``n = max id + 1`` unless ``num_nodes`` is
    given. Duplicate edges
    are merged (weights summed). The file holds no node data, so :func:`apply_defaults` gives degree features
    and ``y = None``.

    **Vertex count.** ``E`` edge lines touch at most ``2E`` vertices. When ``max id + 1 > 2E + 1,000,000`` (over
    a million vertices would have no edge, e.g. one id ``999999999999``) the file is refused unless
    ``num_nodes`` confirms the count or ``relabel`` compacts the ids; ``n`` beyond what the memory available can
    hold (64 bytes per vertex) is refused even when confirmed. See :mod:`gridgnn.graph.safe_io`.

    Args:
        path: the file (UTF-8 text).
        directed: ``None`` (default) detects symmetry; ``False`` symmetrizes (an edge listed in one direction
            becomes undirected, the larger weight wins); ``True`` keeps the edges as directed ``src → dst``.
        num_nodes: vertex count (to include isolated trailing vertices, or to confirm a count the plausibility
            rule refuses); ids must be below it.
        relabel: map the distinct ids, in increasing order, to ``0..k-1``; the file's ids are kept in
            :attr:`Graph.original_ids <gridgnn.graph.graph.Graph.original_ids>` (vertex ``i`` is the file's
            ``original_ids[i]``). Vertices without an edge do not exist then.
        seed: unused here (no labels); accepted for a uniform loader signature.
        edge_features: the columns after ``src dst`` are edge features (``Graph.edge_attr``; no weight column, and a
            duplicate edge is refused rather than merged).

    Returns:
        A :class:`Graph` with ``n`` vertices and the listed edges (``values`` set when a weight column exists and
        not all weights are 1).

    Raises:
        GridGnnError: one line naming the file (and the line): not UTF-8, bad columns, a non-integer, negative or
            64-bit-overflowing id, an implausible or too large vertex count, a bad weight.
    """
    p = _check_file(path)
    chunks = list(edgelist_chunks(p, edge_features=edge_features))
    if not chunks:
        raise GridGnnError(f"{p}: empty graph (no edges in the file)")
    ((ids, weights, attr, linenos),) = chunks  # the whole file is one chunk
    n, ids, original = _vertex_count(p, ids, linenos, num_nodes=num_nodes, relabel=relabel, entries=len(ids))
    try:
        g = Graph.from_edges(ids[:, 0], ids[:, 1], n, weights=weights, directed=directed, name=p.stem,
                             original_ids=original, edge_attr=attr)
    except GridGnnError as e:
        raise _prefixed(p, e) from None
    g.meta["source"] = str(p)
    if original is not None:
        g.meta["relabeled"] = f"{n} distinct ids compacted to 0..{n - 1}; file ids in Graph.original_ids"
    return apply_defaults(_check_empty(g, p), seed=seed)


# ---------------------------------------------------------------------------------------------- Matrix Market
_MM_FIELDS = ("real", "integer", "pattern", "double", "complex")


def _mtx_entry_error(p, body: bytes, lineno: int, ncols: int, rows: int, *,
                     integer: bool = False) -> GridGnnError | None:
    """The first malformed entry line of ``body`` (the lines after the size line ``lineno``), described with its
    line number; ``None`` when every line is well formed. ``integer``: the header declares an ``integer`` field,
    whose values must be whole. Runs only after the fast parse failed."""
    for k, line in enumerate(io.BytesIO(body), start=lineno + 1):
        s = line.decode("ascii").strip()
        if not s or s.startswith("%"):
            continue
        toks = s.split()
        if len(toks) != ncols:
            return GridGnnError(f"{p}: line {k}: expected {ncols} columns, found {len(toks)}")
        for t in toks[:2]:
            v = _parse_int(t)
            if v is None:
                return GridGnnError(f"{p}: line {k}: index {short(t)} is not an integer")
            if not 1 <= v <= rows:
                return GridGnnError(f"{p}: line {k}: index {short(t)} out of range 1..{rows}")
        if ncols == 3:
            if not _is_number(toks[2]):
                return GridGnnError(f"{p}: line {k}: value {short(toks[2])} is not a number")
            if not math.isfinite(float(toks[2])):
                return GridGnnError(f"{p}: line {k}: value {short(toks[2])} is NaN or inf")
            if integer and not float(toks[2]).is_integer():
                return GridGnnError(f"{p}: line {k}: value {short(toks[2])} is not an integer, as the header's "
                                    f"'integer' field declares")
    return None
_MM_SYMMETRIES = ("general", "symmetric", "skew-symmetric", "hermitian")


def mtx_header(p, readline) -> tuple[str, str, int, int, int]:
    """``(field, symmetry, rows, entries, line number of the size line)`` of a Matrix Market file whose lines
    ``readline()`` returns (ASCII bytes, ``b""`` at the end): the banner, comment lines, the size line; checked as
    :func:`load_mtx` states. The next ``readline()`` returns the first line after the size line."""
    lineno, header = 0, []
    while len(header) < 2:
        raw = readline()
        if not raw:
            break
        line = raw.decode("ascii").strip()
        lineno += 1
        if not header or (line and not line.startswith("%")):
            header.append((lineno, line))
    first = header[0][1] if header else ""
    banner = first.split()
    if len(banner) != 5 or banner[0].lower() != "%%matrixmarket" or banner[1].lower() != "matrix":
        raise GridGnnError(f"{p}: not a Matrix Market file (the first line must be '%%MatrixMarket matrix "
                           f"coordinate FIELD SYMMETRY', got {short(first)})")
    fmt, field, symmetry = (t.lower() for t in banner[2:])
    if fmt != "coordinate":
        raise GridGnnError(f"{p}: Matrix Market format {short(fmt)} is not supported (need 'coordinate')")
    if field == "complex" or symmetry == "hermitian":
        raise GridGnnError(f"{p}: complex Matrix Market values are not supported")
    if field not in _MM_FIELDS or symmetry not in _MM_SYMMETRIES:
        raise GridGnnError(f"{p}: not a Matrix Market file (unknown field {short(field)} or symmetry "
                           f"{short(symmetry)})")
    if len(header) < 2:
        raise GridGnnError(f"{p}: Matrix Market file without the size line 'rows cols entries'")
    size_lineno, size_line = header[1]
    vals = [_parse_int(t) for t in size_line.split()]
    if len(vals) != 3 or any(v is None or v < 0 or v > MAX_ID for v in vals):
        raise GridGnnError(f"{p}: line {size_lineno}: malformed Matrix Market size line {short(size_line)} "
                           f"(expected three non-negative integers 'rows cols entries')")
    rows, cols, nnz = vals
    if rows != cols:
        raise GridGnnError(f"{p}: adjacency must be square, got {rows}×{cols}")
    if rows == 0:
        raise GridGnnError(f"{p}: empty graph (0 vertices)")
    if nnz == 0:
        raise GridGnnError(f"{p}: empty graph (the header declares no entries)")
    return field, symmetry, rows, nnz, lineno


def _mtx_room(p, nnz: int, nbytes: int) -> None:
    """Refuse a header that declares more entries than the ``nbytes`` after the size line can hold."""
    if nnz > nbytes // 4 + 1:  # an entry line takes at least 4 bytes ("1 1\n")
        raise GridGnnError(f"{p}: the header declares {nnz} entries, the file has {nbytes} bytes after "
                           f"the size line (at most {nbytes // 4 + 1} entries)")


def _mtx_entries(p, body: bytes, lineno: int, field: str, rows: int, nnz: int, *, declared: int | None = None):
    """The entry lines of ``body`` (ASCII; the lines after line ``lineno``) as ``(ij, weights, count)``:
    ``int64[E, 2]`` 1-based ``(i, j)`` checked in ``1..rows``, ``float64[E]`` finite values (``None`` for a
    ``pattern`` file) and ``E``. ``nnz``: the entries the header declares, all in ``body``; or, where ``body`` is a
    piece of the file, the entries still to come of the ``declared`` ones (the piece may hold fewer, never more)."""
    ncols = 2 if field == "pattern" else 3
    dtype = [("i", np.int64), ("j", np.int64)] + ([("v", np.float64)] if ncols == 3 else [])
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            entries = np.loadtxt(io.BytesIO(body), dtype=dtype, comments="%", ndmin=1, encoding="ascii",
                                 max_rows=nnz + 1)
    except (ValueError, OverflowError, TypeError) as e:
        raise _mtx_entry_error(p, body, lineno, ncols, rows) or \
            GridGnnError(f"{p}: malformed Matrix Market entries: {short(str(e), 160)}") from None
    if entries.size > nnz or (declared is None and entries.size != nnz):
        raise _count_error(p, nnz if declared is None else declared, "more" if entries.size > nnz else entries.size)
    ij = np.stack([entries["i"], entries["j"]], axis=1)
    weights = None if ncols == 2 else np.ascontiguousarray(entries["v"])
    del entries
    if np.any((ij < 1) | (ij > rows)) or (weights is not None and not np.all(np.isfinite(weights))):
        raise _mtx_entry_error(p, body, lineno, ncols, rows) or \
            GridGnnError(f"{p}: an entry index is out of range 1..{rows} or a value is NaN or inf")
    if field == "integer" and not np.array_equal(weights, np.floor(weights)):
        raise _mtx_entry_error(p, body, lineno, ncols, rows, integer=True) or \
            GridGnnError(f"{p}: a value is not an integer, as the header's 'integer' field declares")
    return ij, weights, len(ij)


def mtx_chunks(path, *, chunk_bytes: int):
    r"""A Matrix Market file (:func:`load_mtx`'s format and checks) a piece at a time: returns ``(field,
    symmetry, rows, entries, pieces)``, ``pieces`` yielding ``(ij, weights)`` — ``int64[E, 2]`` 0-based ``(i, j)``
    in file order and ``float64[E]`` values (``None`` for ``pattern``) — of about ``chunk_bytes`` bytes of text
    each; the entries' count is checked against the header's as the pieces run out. Lines end at a line feed
    (CRLF too), as :func:`load_mtx` counts them; of a file with several faults, the first in file order is named."""
    p = _check_file(path)
    try:
        fh = open(p, "rb")
    except OSError as e:
        raise GridGnnError(f"{p}: cannot read file: {e.strerror or e}") from None
    size = p.stat().st_size
    offset, lineno = 0, 0

    def readline():
        nonlocal offset, lineno
        line = fh.readline()
        _ascii_or_refuse(p, line, offset, lineno)
        offset += len(line)
        lineno += line.count(b"\n")
        return line

    try:
        field, symmetry, rows, nnz, lineno = mtx_header(p, readline)
        _mtx_room(p, nnz, size - offset)
    except BaseException:
        fh.close()
        raise

    def pieces():
        nonlocal offset, lineno
        seen, rest = 0, b""
        with fh:
            while True:
                block = fh.read(chunk_bytes)
                raw = rest + block
                cut = len(raw) if not block else raw.rfind(b"\n") + 1
                if block and cut == 0:
                    rest = raw
                    continue
                piece, rest = raw[:cut], raw[cut:]
                del raw
                _ascii_or_refuse(p, piece, offset, lineno)
                offset += len(piece)
                if piece:
                    ij, w, count = _mtx_entries(p, piece, lineno, field, rows, nnz - seen, declared=nnz)
                    seen += count
                    if count:
                        yield ij - 1, w
                lineno += piece.count(b"\n")
                if not block:
                    break
        if seen != nnz:
            raise _count_error(p, nnz, seen)

    return field, symmetry, rows, nnz, pieces()


def _count_error(p, declared: int, found) -> GridGnnError:
    """A Matrix Market file whose entry lines are not the header's count (``found``: a number, or ``"more"``)."""
    return GridGnnError(f"{p}: the header declares {declared} entries, the file has {found} entry lines")


def _ascii_or_refuse(p, raw: bytes, offset: int, lineno: int) -> None:
    """:func:`load_mtx`'s refusal of a byte that is not ASCII (``raw`` starts at byte ``offset`` of the file, on
    line ``lineno + 1``)."""
    if not raw.isascii():
        pos = int(np.argmax(np.frombuffer(raw, dtype=np.uint8) > 127))
        line = lineno + raw.count(b"\n", 0, pos) + 1
        raise GridGnnError(f"{p}: not a Matrix Market file (byte {offset + pos} on line {line} is not ASCII)")


def load_mtx(path, *, num_nodes: int | None = None, relabel: bool = False, seed: int = 0) -> Graph:
    r"""Load a Matrix Market coordinate file.

    The entry ``(i, j)`` is the edge ``i → j`` (PyG ``src = i``, ``dst = j``), so the stored matrix of the
    :class:`Graph` (rows = destinations) is the transpose of the file's matrix. A ``symmetric`` file is
    undirected (each off-diagonal entry stands for both directions); ``skew-symmetric`` files give ``-a`` to the
    mirrored entry; ``general`` files are directed unless the matrix turns out symmetric. ``pattern`` files are
    unweighted; ``real``/``integer`` values become edge weights (dropped when all are 1). Complex values and
    dense ``array`` files are refused. Duplicate entries are summed. Node data come from :func:`apply_defaults`.

    The file is parsed here (not by ``scipy.io.mmread``): the banner, comment lines, the size line
    ``rows cols entries`` (``entries`` must fit the bytes that follow, before anything is allocated), then
    exactly ``entries`` lines of 1-based indices in ``1..rows`` (read by ``numpy.loadtxt``; a malformed line is
    reported with its line number). **Vertex count.** The
    header's ``n`` is refused when ``n > 2 * entries + 1,000,000`` unless ``num_nodes=n`` confirms it or
    ``relabel`` compacts the ids (see :func:`load_edgelist`), and always when it exceeds the memory available.

    Args:
        path: the ``.mtx`` file (a square matrix, ``n × n``).
        num_nodes: confirms the header's ``n`` (must equal it).
        relabel: compact the indices that occur to ``0..k-1``; the file's (0-based) indices are kept in
            :attr:`Graph.original_ids <gridgnn.graph.graph.Graph.original_ids>`.
        seed: unused here (no labels); accepted for a uniform loader signature.

    Raises:
        GridGnnError: one line naming the file (and the line) for any malformed header or entry.
    """
    p = _check_file(path)
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise GridGnnError(f"{p}: cannot read file: {e.strerror or e}") from None
    _ascii_or_refuse(p, raw, 0, 0)
    head = io.BytesIO(raw)
    field, symmetry, rows, nnz, lineno = mtx_header(p, head.readline)
    body = raw[head.tell():]
    del raw, head
    _mtx_room(p, nnz, len(body))
    ij, weights, _ = _mtx_entries(p, body, lineno, field, rows, nnz)
    del body
    ij -= 1
    if symmetry in ("symmetric", "skew-symmetric"):
        off = ij[:, 0] != ij[:, 1]
        ij = np.concatenate([ij, ij[off][:, ::-1]])
        if weights is not None:
            weights = np.concatenate([weights, -weights[off] if symmetry == "skew-symmetric" else weights[off]])
    n, ij, original = _vertex_count(p, ij, None, num_nodes=num_nodes, relabel=relabel, entries=nnz,
                                    header_n=rows)
    directed = False if symmetry == "symmetric" else None
    try:
        g = Graph.from_edges(ij[:, 0], ij[:, 1], n, weights=weights, directed=directed, name=p.stem,
                             original_ids=original)
    except GridGnnError as e:
        raise _prefixed(p, e) from None
    g.meta["source"] = str(p)
    if original is not None:
        g.meta["relabeled"] = f"{n} distinct indices compacted to 0..{n - 1}; file ids in Graph.original_ids"
    return apply_defaults(_check_empty(g, p), seed=seed)


# ---------------------------------------------------------------------------------------------- npz
#: Arrays read by :func:`load_npz`: allowed dtype kinds and largest item size (others are not read).
_NPZ_KEYS = {
    "indptr": ("iu", 8), "indices": ("iu", 8), "data": ("biuf", 8), "shape": ("iu", 8), "format": ("US", 64),
    "directed": ("biu", 8), "name": ("US", 4096), "x": ("biuf", 8), "y": ("biuf", 8), "train_mask": ("biuf", 8),
    "val_mask": ("biuf", 8), "test_mask": ("biuf", 8), "original_ids": ("iu", 8), "edge_attr": ("biuf", 8),
    "edge_type_counts": ("iu", 8), "node_type_names": ("US", 1024), "node_type_offsets": ("iu", 8),
    "relation_names": ("US", 1024), "data_notes": ("US", 1 << 20),
}

#: What a loader noted about a graph that its input pipeline reads (:mod:`gridgnn.graph.pipeline`: the features'
#: conventional normalization, degree features, a default split, reverse edges added; a typed graph's vertex types
#: and feature columns), which :func:`save_npz` keeps in ``data_notes`` (JSON) so that a graph saved and loaded again
#: trains and predicts as it did: each note's type.
NPZ_NOTES = {"feature_norm": str, "features": str, "split_default": str, "symmetrized": int, "vertex_types": list,
             "feature_columns": list}


def _data_notes(p, text: str) -> dict:
    """``data_notes`` of an npz, checked: an object of :data:`NPZ_NOTES` of their types (one line naming the file)."""
    try:
        notes = json.loads(text)
    except ValueError:
        notes = None
    if not isinstance(notes, dict) or any(k not in NPZ_NOTES or isinstance(v, bool) or not isinstance(v, NPZ_NOTES[k])
                                          for k, v in notes.items()) \
            or not all(isinstance(t, str) for t in notes.get("vertex_types", [])) \
            or not all(type(c) is int for c in notes.get("feature_columns", [])):
        raise GridGnnError(f"{p}: 'data_notes' must be a JSON object of {', '.join(NPZ_NOTES)}, got {short(text)}")
    return notes


def _one(p, arrs: dict, key: str):
    a = arrs[key]
    if a.size != 1:
        raise GridGnnError(f"{p}: '{key}' must hold one value, holds {a.size}")
    v = a.reshape(-1)[0].item()
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else v


def _fits_int64(p, a: np.ndarray, key: str) -> np.ndarray:
    if a.size and a.dtype.kind == "u" and int(a.max()) > MAX_ID:
        raise GridGnnError(f"{p}: '{key}' holds {int(a.max())}, beyond 64-bit ids")
    return a.astype(np.int64)


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
        ``x`` ``float[n, f]``, ``y`` ``int[n]`` (-1 = unlabelled, classes below ``n``),
        ``train_mask``/``val_mask``/``test_mask`` ``bool[n]`` (all optional; defaults of :func:`apply_defaults`);
        ``name`` (optional string); ``original_ids`` ``int[n]`` (optional, see
        :attr:`Graph.original_ids <gridgnn.graph.graph.Graph.original_ids>`); ``edge_attr`` ``float[nnz, d]``
        (optional: the features of the stored entries, in their order). Other members are not read.

    The archive is read by :func:`~gridgnn.graph.safe_io.read_npz` (no pickles; object, string-where-numbers,
    complex and structured dtypes refused; every member's size checked against its header before allocating).
    ``n`` is the length of the stored row pointer minus one, so it needs no plausibility check, but it must fit
    the memory available (64 bytes per vertex).

    Args:
        path: the ``.npz`` file.
        seed: seed of the default split (used only when ``y`` is given without masks).

    Raises:
        GridGnnError: one line naming the file: not a zip archive (or a ``.npy`` renamed), a truncated or
            corrupt member, a refused dtype, a wrong shape, an invalid CSR, out-of-range ids or labels.
    """
    p = _check_file(path)
    arrs = read_npz(p, _NPZ_KEYS)
    for key in ("indptr", "indices"):
        if key not in arrs:
            raise GridGnnError(f"{p}: missing array '{key}' (need indptr, indices; found {sorted(arrs)})")
    if "format" in arrs:
        fmt = str(_one(p, arrs, "format"))
        if fmt != "csr":
            raise GridGnnError(f"{p}: sparse format {short(fmt)} is not supported (need 'csr')")
    indptr, indices = arrs["indptr"], arrs["indices"]
    for key, a in (("indptr", indptr), ("indices", indices)):
        if a.ndim != 1:
            raise GridGnnError(f"{p}: '{key}' must be a 1-D integer array, got {a.dtype} of shape {a.shape}")
    indptr = _fits_int64(p, indptr, "indptr")
    indices = _fits_int64(p, indices, "indices")
    if "shape" in arrs:
        shape = tuple(int(s) for s in _fits_int64(p, arrs["shape"], "shape").reshape(-1))
        if len(shape) != 2 or shape[0] != shape[1]:
            raise GridGnnError(f"{p}: adjacency must be square, got shape {shape}")
        n = shape[0]
    else:
        n = indptr.size - 1
    if n <= 0:
        raise GridGnnError(f"{p}: empty graph (0 vertices)")
    if indptr.size != n + 1:
        raise GridGnnError(f"{p}: indptr has {indptr.size} entries, expected n+1 = {n + 1}")
    check_vertex_count(n, str(p))
    if indptr[0] != 0 or np.any(np.diff(indptr) < 0) or indptr[-1] != indices.size:
        raise GridGnnError(f"{p}: invalid CSR: indptr must start at 0, not decrease and end at "
                           f"len(indices) = {indices.size} (starts at {int(indptr[0])}, ends at {int(indptr[-1])})")
    if indices.size and indices.min() < 0:
        raise GridGnnError(f"{p}: negative vertex id {int(indices.min())} in indices")
    if indices.size and indices.max() >= n:
        raise GridGnnError(f"{p}: vertex id {int(indices.max())} out of range for {n} vertices "
                           f"(valid 0..{n - 1})")
    values = None
    if "data" in arrs:
        values = arrs["data"]
        if values.shape != indices.shape:
            raise GridGnnError(f"{p}: 'data' has {values.size} edge weights (shape {values.shape}) for "
                               f"{indices.size} indices")
        values = values.astype(np.float64)
        if not np.all(np.isfinite(values)):
            raise GridGnnError(f"{p}: edge weights 'data' contain NaN or inf")
    node = _node_arrays(p, n, arrs.get("x"), arrs.get("y"), {m: arrs.get(m) for m in _MASKS})
    original = arrs.get("original_ids")
    directed = None
    if "directed" in arrs:
        directed = bool(_one(p, arrs, "directed"))
    name = str(_one(p, arrs, "name")) if "name" in arrs else p.stem
    mat = sp.csr_matrix((values if values is not None else np.ones(indices.size), indices, indptr), shape=(n, n))
    attr = arrs.get("edge_attr")
    typed = _typed_arrays(p, arrs)
    node = {**node, **typed}  # the vertex types, whatever the edges carry
    try:
        if "edge_type_counts" in arrs:  # a typed graph: the CSR as stored, its relation counts per entry
            if attr is not None or values is not None:
                raise GridGnnError("a typed graph (edge_type_counts) takes no 'data' nor 'edge_attr'")
            counts = node.pop("edge_type_counts")
            g = Graph(indptr=indptr, indices=indices, n=n, directed=True, original_ids=original, name=name,
                      edge_type_counts=counts, **node)
            pattern = g.csr()
            asymmetric = (pattern != pattern.T).nnz != 0
            if directed is False and asymmetric:
                raise GridGnnError("graph is marked undirected but its adjacency is not symmetric; mark it "
                                   "directed or store both directions of every edge")
            g.directed = asymmetric if directed is None else bool(directed)
            if "relation_names" in arrs:
                names = [str(t) for t in arrs["relation_names"].reshape(-1)]
                if len(names) != g.num_relations:
                    raise GridGnnError(f"{len(names)} relation_names for {g.num_relations} relations")
                g.meta["relations"] = names
        elif attr is not None:  # the features follow their entries: CSR order, no merging of duplicates
            dst = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
            g = Graph.from_edges(indices, dst, n, weights=values, directed=None, name=name,
                                 original_ids=original, edge_attr=attr, **node)
            if directed is False and g.directed:
                raise GridGnnError("graph is marked undirected but its adjacency is not symmetric; mark it "
                                   "directed or store both directions of every edge")
            g.directed = g.directed if directed is None else bool(directed)
        else:
            g = Graph.from_scipy(mat, directed=directed, weighted=values is not None, name=name,
                                 original_ids=original, **node)
    except GridGnnError as e:
        raise _prefixed(p, e) from None
    g.meta["source"] = str(p)
    notes = _data_notes(p, str(_one(p, arrs, "data_notes"))) if "data_notes" in arrs else {}
    g = apply_defaults(_check_empty(g, p), seed=seed)
    g.meta.update(notes)
    return g


def _typed_arrays(p, arrs: dict) -> dict:
    """``edge_type_counts`` and ``node_types`` of an npz that has them (names and offsets together)."""
    out = {}
    if "edge_type_counts" in arrs:
        out["edge_type_counts"] = arrs["edge_type_counts"]
    if "relation_names" in arrs and "edge_type_counts" not in arrs:
        raise GridGnnError(f"{p}: relation_names without edge_type_counts")
    names, offsets = arrs.get("node_type_names"), arrs.get("node_type_offsets")
    if (names is None) != (offsets is None):
        raise GridGnnError(f"{p}: node_type_names and node_type_offsets go together")
    if names is not None:
        out["node_types"] = {"names": [str(t) for t in names.reshape(-1)],
                             "offsets": [int(o) for o in offsets.reshape(-1)]}
    return out


def save_npz(graph: Graph, path) -> Path:
    r"""Write ``graph`` in the format read by :func:`load_npz` (CSR with rows = destinations).

    Stores ``indptr``, ``indices``, ``shape``, ``format='csr'``, ``directed``, ``name``, and ``data``, ``x``,
    ``y``, the masks, ``original_ids``, ``edge_attr``, ``edge_type_counts`` (with ``relation_names`` from
    ``meta["relations"]``) and the vertex types when they are not ``None``, and what the loader noted that the input
    pipeline reads (``data_notes``: :data:`NPZ_NOTES`). Uncompressed (``numpy.savez``).

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
    for key in ("x", "y") + _MASKS + ("original_ids", "edge_attr", "edge_type_counts"):
        val = getattr(graph, key)
        if val is not None:
            arrs[key] = val
    if graph.node_types is not None:
        arrs["node_type_names"] = np.array(graph.node_types["names"])
        arrs["node_type_offsets"] = np.array(graph.node_types["offsets"], dtype=np.int64)
    if graph.edge_type_counts is not None and len(graph.meta.get("relations", ())) == graph.num_relations:
        arrs["relation_names"] = np.array([str(r) for r in graph.meta["relations"]])
    notes = {k: int(v) if kind is int else v for k, kind in NPZ_NOTES.items()  # (a generator's own "features": its
             if isinstance(v := graph.meta.get(k), (int, bool) if kind is int else kind)}  # count, not a note)
    if notes:
        arrs["data_notes"] = np.array(json.dumps(notes, default=int))
    try:
        np.savez(p, **arrs)
    except OSError as e:
        raise GridGnnError(f"{p}: cannot write file: {e}") from None
    return p
