r"""The :class:`Graph` container and GCN normalization.

Convention (the same as PyG ``GCNConv``): an edge ``j → i`` (``edge_index[0] = j``, ``edge_index[1] = i``)
aggregates the features of ``j`` into ``i``. The adjacency is stored as CSR with **rows = destinations** and
**columns = sources**, i.e. the matrix :math:`M` with :math:`(M H)_i = \sum_{j \to i} M_{ij} H_j`. This is the
:math:`A^\mathsf{T}` of the CAGNET paper (forward uses :math:`A^\mathsf{T}`, backward uses :math:`A`).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace

import numpy as np
import scipy.sparse as sp

from ..errors import GridGnnError
from .safe_io import MAX_ID, check_vertex_count


#: edge features are looked up by the 64-bit key ``dst · n + src``
MAX_FEATURED_VERTICES = 3_000_000_000
#: relation types a typed graph may have (its per-relation weights are dense, ``nnz × R``)
MAX_RELATIONS = 4096


def _lookup(keys: np.ndarray, want: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(position, found)`` of each of ``want`` in the ascending ``keys`` (position meaningful where found)."""
    at = np.searchsorted(keys, want)
    if keys.size == 0:
        return at, np.zeros(np.shape(want), dtype=bool)
    return at, (at < keys.size) & (keys[np.minimum(at, keys.size - 1)] == want)


@dataclass(kw_only=True)
class Graph:
    r"""A graph with node data, held as CSR arrays (rows = destinations, columns = sources).

    Args:
        indptr: ``int64[n+1]`` CSR row pointer.
        indices: ``int64[nnz]`` source vertex of each stored entry.
        values: ``float64[nnz]`` edge weights, or ``None`` for an unweighted graph (all ones).
        n: number of vertices.
        directed: ``False`` when the stored matrix (its pattern, for a typed graph) is symmetric.
        x: ``float32[n, f]`` node features.
        y: ``int64[n]`` labels, ``-1`` for unlabelled nodes, or ``None`` (no labels).
        train_mask, val_mask, test_mask: ``bool[n]`` or ``None``.
        name: a short label for reports.
        meta: free-form, JSON-friendly notes (source file, spec, how features and the split were made).
        edge_attr: ``float[nnz, d]`` edge features, row ``k`` belonging to the stored entry ``k`` (CSR order: by
            destination, then source), or ``None``. A layer reads those of its local edges as
            ``g.edge_features`` on every algorithm.
        edge_type_counts: ``int32[nnz, R]``: 1 where the stored entry ``k`` is an edge of relation ``r``, else 0
            (a typed graph, PyG ``RGCNConv``'s ``edge_type``; a pair of vertices may be joined by several
            relations, each once), or ``None`` (one relation). A layer reads the local edges' per-relation mean
            weights as ``g.relation_values`` on every algorithm. Build it with ``Graph.from_edges(...,
            edge_type=...)``.
        node_types: ``None``, or the vertex types of a heterogeneous graph as ``{"names": [...], "offsets":
            [...]}``: vertices ``offsets[t] .. offsets[t+1] - 1`` are those of type ``names[t]``, in the type's own
            order (PyG ``HeteroData.to_homogeneous``'s numbering), so per-vertex outputs map back per type.
        original_ids: ``int64[n]``, strictly increasing, or ``None``. Set by a loader called with
            ``relabel=True`` (``?relabel=1`` in a data spec): vertex ``i`` of this graph is vertex
            ``original_ids[i]`` of the file, so per-vertex outputs (``--save-logits``) can be mapped back with
            ``original_ids[row]``. ``None`` when the ids are the file's own.
    """

    indptr: np.ndarray
    indices: np.ndarray
    values: np.ndarray | None = None
    n: int
    directed: bool = False
    x: np.ndarray | None = None
    y: np.ndarray | None = None
    train_mask: np.ndarray | None = None
    val_mask: np.ndarray | None = None
    test_mask: np.ndarray | None = None
    name: str = "graph"
    meta: dict = field(default_factory=dict)
    original_ids: np.ndarray | None = None
    edge_attr: np.ndarray | None = None
    edge_type_counts: np.ndarray | None = None
    node_types: dict | None = None

    _relation_degree = None  # the edges of each relation into each vertex (relation_rows), counted once
    _edge_keys = None  # (dst·n + src of every stored entry, sorted?) for find_edges, built once
    _loop_fill = None  # loop_fill(), built once

    def __post_init__(self) -> None:
        self._edge_keys = self._loop_fill = None  # (the lookups of this graph's own arrays)
        self.indptr = np.ascontiguousarray(self.indptr, dtype=np.int64)
        self.indices = np.ascontiguousarray(self.indices, dtype=np.int64)
        if self.values is not None:
            self.values = np.ascontiguousarray(self.values, dtype=np.float64)
        self.validate()

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_edges(cls, src, dst, n: int | None = None, *, weights=None, directed: bool | None = None,
                   edge_attr=None, edge_type=None, num_relations: int | None = None, **kwargs) -> "Graph":
        """Build from edge arrays ``src → dst``. Duplicate edges are merged (weights summed; unweighted
        duplicates count once: gridgnn's one duplicate-edge rule, PyG ``coalesce``; ``meta["duplicate_edges_merged"]``
        says how many were merged). ``directed=None`` detects symmetry; ``directed=False`` symmetrizes.

        ``edge_attr`` (``[E, d]``, one row per given edge) travels with its edge into CSR order. Edges that carry
        features are not merged: a duplicate edge is refused. ``directed=False`` gives an edge given in one
        direction its reverse with the same features; an edge given in both directions keeps each direction's
        own (PyG ``to_undirected`` without a reduction).

        ``edge_type`` (``int[E]``, values in ``0 .. num_relations - 1``; ``num_relations`` defaults to the largest
        type + 1) makes a typed graph (:attr:`edge_type_counts`): the relations joining a pair are one stored entry
        that counts each relation once (an edge given more than once with the same relation is merged, as
        everywhere). A typed graph
        is stored as given (``directed=False`` is refused: R-GCN gives the reverse direction a relation of its
        own); it takes no ``edge_attr`` nor ``weights``."""
        src = np.asarray(src).reshape(-1)
        dst = np.asarray(dst).reshape(-1)
        if src.shape != dst.shape:
            raise GridGnnError(f"edge arrays differ in length: {src.size} sources, {dst.size} destinations")
        for arr, what in ((src, "source"), (dst, "destination")):
            if arr.size and not np.issubdtype(arr.dtype, np.integer):
                if not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr)):
                    raise GridGnnError(f"edge {what} ids must be integers")
        for arr, what in ((src, "source"), (dst, "destination")):
            if arr.size and np.issubdtype(arr.dtype, np.unsignedinteger) and arr.max() > MAX_ID:
                raise GridGnnError(f"edge {what} id {int(arr.max())} does not fit a 64-bit signed id")
            if arr.size and np.issubdtype(arr.dtype, np.floating) and np.abs(arr).max() > MAX_ID:
                raise GridGnnError(f"edge {what} id {float(np.abs(arr).max()):g} does not fit a 64-bit id")
        src = src.astype(np.int64)
        dst = dst.astype(np.int64)
        if n is None:
            n = int(max(src.max(initial=-1), dst.max(initial=-1))) + 1
        n = int(n)
        _check_ids(src, n, "source")
        _check_ids(dst, n, "destination")
        if weights is not None:
            weights = np.asarray(weights, dtype=np.float64).reshape(-1)
            if weights.shape != src.shape:
                raise GridGnnError(f"{weights.size} edge weights for {src.size} edges")
            if not np.all(np.isfinite(weights)):
                raise GridGnnError("edge weights contain NaN or inf")
        if n > 0:
            check_vertex_count(n, "graph")
        if edge_attr is not None and n > MAX_FEATURED_VERTICES:
            raise GridGnnError(f"edge features on a graph of {n} vertices: at most {MAX_FEATURED_VERTICES} (edge keys "
                               "are dst·n + src in 64 bits)")
        if edge_type is not None:
            if edge_attr is not None or weights is not None or directed is False:
                raise GridGnnError("a typed graph (edge_type) is stored as given: it takes no edge_attr, no edge "
                                   "weights and no directed=False (give each direction its relation)")
            return cls._from_typed_edges(src, dst, n, edge_type, num_relations, **kwargs)
        if edge_attr is not None:
            return cls._from_edges_with_features(src, dst, n, weights, directed, edge_attr, **kwargs)
        data = weights if weights is not None else np.ones(src.size, dtype=np.float64)
        mat = sp.coo_matrix((data, (dst, src)), shape=(n, n)).tocsr()
        mat.sum_duplicates()
        _note_merged(kwargs, src.size - mat.nnz)
        if weights is None:
            mat.data[:] = 1.0
        if directed is False:
            # symmetrize: an edge given in one or both directions becomes one undirected edge (max weight)
            mat = union_max(mat, mat.T.tocsr())
            kwargs["meta"] = {**(kwargs.get("meta") or {}), "symmetrized": 1}  # the input pipeline records it
        if directed is None:
            directed = (mat != mat.T).nnz != 0
        return cls.from_scipy(mat, directed=bool(directed), weighted=weights is not None, **kwargs)

    @classmethod
    def _from_edges_with_features(cls, src, dst, n, weights, directed, edge_attr, **kwargs) -> "Graph":
        attr = np.asarray(edge_attr)
        if attr.ndim == 1:
            attr = attr.reshape(-1, 1)
        if attr.ndim != 2 or attr.shape[0] != src.size:
            raise GridGnnError(f"edge_attr has shape {tuple(attr.shape)}, expected ({src.size}, d): one row per edge")
        w = np.ones(src.size) if weights is None else weights
        key = dst * n + src
        order = np.argsort(key, kind="stable")
        key = key[order]
        if key.size > 1 and np.any(key[1:] == key[:-1]):
            k = int(key[1:][key[1:] == key[:-1]][0])
            raise GridGnnError(f"edge {k % n} → {k // n} is given more than once and edges carry features "
                               "(edge_attr): duplicate edges would merge their features; remove the duplicates")
        src, dst, w, attr = src[order], dst[order], w[order], attr[order]
        if directed is None:
            back, found = _lookup(key, src * n + dst)
            directed = not (found.all() and np.array_equal(w[back], w))
        elif directed is False:  # add the reverse of every edge given in one direction, with its features
            _, found = _lookup(key, src * n + dst)
            missing = ~found
            src, dst = np.concatenate([src, dst[missing]]), np.concatenate([dst, src[missing]])
            w, attr = np.concatenate([w, w[missing]]), np.concatenate([attr, attr[missing]])
            order = np.argsort(dst * n + src, kind="stable")
            src, dst, w, attr = src[order], dst[order], w[order], attr[order]
            back = np.searchsorted(dst * n + src, src * n + dst)
            if not np.array_equal(w[back], w):
                raise GridGnnError("the two directions of an undirected edge carry different weights; mark the "
                                   "graph directed")
            kwargs["meta"] = {**(kwargs.get("meta") or {}), "symmetrized": 1}
        indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(dst, minlength=n), out=indptr[1:])
        values = None if weights is None or np.all(w == 1.0) else w
        return cls(indptr=indptr, indices=src, values=values, n=n, directed=bool(directed), edge_attr=attr,
                   **kwargs)

    @classmethod
    def _from_typed_edges(cls, src, dst, n, edge_type, num_relations, **kwargs) -> "Graph":
        kind = np.asarray(edge_type).reshape(-1)
        if kind.shape != src.shape:
            raise GridGnnError(f"{kind.size} edge types for {src.size} edges")
        if kind.size and (not np.issubdtype(kind.dtype, np.integer) or kind.min() < 0):
            raise GridGnnError("edge types (edge_type) must be integers >= 0")
        if kind.size and int(kind.max()) >= MAX_RELATIONS:  # compared as Python ints: no wrap of a huge unsigned id
            raise GridGnnError(f"edge type {int(kind.max())}: at most {MAX_RELATIONS} relation types")
        if n > MAX_FEATURED_VERTICES:
            raise GridGnnError(f"relation types on a graph of {n} vertices: at most {MAX_FEATURED_VERTICES} (edge "
                               "keys are dst·n + src in 64 bits)")
        kind = kind.astype(np.int64)
        top = int(kind.max(initial=-1)) + 1
        r = top if num_relations is None else int(num_relations)
        if r < 1 or r < top or r > MAX_RELATIONS:
            raise GridGnnError(f"num_relations {r} for edge types up to {top - 1}: it must be in [max type + 1, "
                               f"{MAX_RELATIONS}]" if r >= 1 else "a typed graph needs at least one relation")
        key = dst * n + src
        entries, inverse = np.unique(key, return_inverse=True)
        counts = np.bincount(inverse.reshape(-1) * r + kind, minlength=entries.size * r)
        if counts.size and counts.max() > np.iinfo(np.int32).max:
            raise GridGnnError("an edge is given more than 2^31 - 1 times with one relation")
        counts = counts.reshape(entries.size, r)
        _note_merged(kwargs, int(kind.size - np.count_nonzero(counts)))
        counts = np.minimum(counts, 1).astype(np.int32)  # an edge given twice with one relation counts once
        e_dst, e_src = entries // n if n else entries, entries % n if n else entries
        indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(e_dst, minlength=n), out=indptr[1:])
        _, found = _lookup(entries, e_src * n + e_dst)  # directed: the pattern's (the relations may differ)
        return cls(indptr=indptr, indices=e_src, n=n, directed=not bool(found.all()), edge_type_counts=counts,
                   **kwargs)

    @property
    def num_relations(self) -> int:
        """The number of relation types ``R`` of a typed graph (``0``: untyped)."""
        return 0 if self.edge_type_counts is None else int(self.edge_type_counts.shape[1])

    def relation_rows(self, dst: np.ndarray, src: np.ndarray) -> np.ndarray:
        r"""``float64[k, R]``: the weight of the edge ``src → dst`` in each relation's mean, :math:`c_r(v\to u) /
        |N_r(u)|` (``c_r``: how many edges of relation ``r`` join them, :math:`|N_r(u)|`: the edges of relation
        ``r`` into ``u``; PyG ``RGCNConv``'s ``aggr="mean"`` per relation). Zero for a pair the graph does not
        hold (a self-loop of the pattern :math:`M + I`)."""
        if self.edge_type_counts is None:
            raise GridGnnError("this graph carries no relation types (edge_type)")
        dst = np.asarray(dst, dtype=np.int64)
        return self.relation_counts(dst, src) / np.maximum(self.relation_degree()[dst], 1.0)

    def relation_counts(self, dst: np.ndarray, src: np.ndarray) -> np.ndarray:
        r"""``float64[k, R]``: :math:`c_r(v\to u)` of each edge ``src → dst``, the edges of relation ``r`` joining
        them (zero for a pair the graph does not hold)."""
        dst = np.asarray(dst, dtype=np.int64)
        at, found = self.find_edges(dst, src)
        out = np.zeros((dst.size, self.num_relations), dtype=np.float64)
        out[found] = self.edge_type_counts[at[found]]
        return out

    def relation_degree(self) -> np.ndarray:
        r"""``float64[n, R]``: :math:`|N_r(u)|`, the edges of each relation into each vertex (built once)."""
        if self._relation_degree is None:  # per CSR row (destination): the sum of its entries' counts
            deg = np.zeros((self.n, self.num_relations), dtype=np.float64)
            full = np.diff(self.indptr) > 0
            if full.any():
                deg[full] = np.add.reduceat(self.edge_type_counts, self.indptr[:-1][full], axis=0, dtype=np.float64)
            self._relation_degree = deg
        return self._relation_degree

    @staticmethod
    def unmerged_features(src, dst, n: int, edge_attr) -> tuple[object, str | None]:
        """``(edge_attr, None)``, or ``(None, why)`` when some edge is given twice: a loader of a multigraph keeps
        it loadable (duplicates merged, as without features) and says why its features are gone."""
        if edge_attr is None:
            return None, None
        key = np.asarray(dst, dtype=np.int64) * int(n) + np.asarray(src, dtype=np.int64)
        repeated = key.size - np.unique(key).size
        if not repeated:
            return edge_attr, None
        return None, (f"{repeated} edges are given more than once, and duplicate edges are "
                      "merged: their features were dropped")

    @property
    def edge_dim(self) -> int:
        """Width of the edge features (``0``: none)."""
        return 0 if self.edge_attr is None else int(self.edge_attr.shape[1])

    def edge_rows(self, dst: np.ndarray, src: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        r"""The features of the edges ``src → dst`` (original ids) and whether each is an edge of the graph.

        An edge the graph does not hold — a self-loop that GCN's :math:`M + I` adds to the pattern every algorithm
        aggregates over — gets PyG's ``add_remaining_self_loops(fill_value="mean")`` features: the mean of the
        features of the edges into its vertex (zeros for a vertex without any). Returns ``(float[k, d],
        bool[k])``."""
        if self.edge_attr is None:
            raise GridGnnError("this graph carries no edge features (edge_attr)")
        dst = np.asarray(dst, dtype=np.int64)
        at, found = self.find_edges(dst, src)  # rows with edge features are sorted (validate)
        out = np.zeros((dst.size, self.edge_dim), dtype=np.float64)
        out[found] = self.edge_attr[at[found]]
        if not found.all():
            fill = self.loop_fill()
            out[~found] = fill[dst[~found]]
        return out, found

    def find_edges(self, dst, src) -> tuple[np.ndarray, np.ndarray]:
        """``(stored entry, found)`` of each edge ``src → dst``: where the graph stores it (meaningful where found,
        for a graph whose rows are sorted) and whether it holds it."""
        n = self.n
        if self._edge_keys is None:  # built once (a sampled minibatch looks its edges up every step)
            keys = np.repeat(np.arange(n, dtype=np.int64), np.diff(self.indptr)) * n + self.indices
            ordered = not (keys.size > 1 and np.any(keys[1:] < keys[:-1]))  # else a hand-built CSR, rows unsorted
            self._edge_keys = (keys if ordered else np.sort(keys), ordered)
        keys, ordered = self._edge_keys
        want = np.asarray(dst, dtype=np.int64) * n + np.asarray(src, dtype=np.int64)
        if not ordered:
            return np.full(want.shape, -1), _lookup(keys, want)[1]
        return _lookup(keys, want)

    def loop_fill(self) -> np.ndarray:
        """``float[n, d]``: the mean of the features of the edges into each vertex (zeros without any) — PyG's
        ``fill_value="mean"`` for the self-loops it adds. An edge of weight 0 is no edge of the matrix the layers
        aggregate over (:func:`gcn_normalize` stores none), so its features are no part of the mean."""
        if self._loop_fill is None:  # built once (a sampled minibatch looks its self entries up every step)
            rows = np.repeat(np.arange(self.n, dtype=np.int64), np.diff(self.indptr))
            attr = np.asarray(self.edge_attr, dtype=np.float64)
            if self.values is not None:
                weighted = np.asarray(self.values) != 0
                rows, attr = rows[weighted], attr[weighted]
            total = np.zeros((self.n, self.edge_dim), dtype=np.float64)
            np.add.at(total, rows, attr)
            self._loop_fill = total / np.maximum(np.bincount(rows, minlength=self.n), 1)[:, None]
        return self._loop_fill

    @classmethod
    def from_scipy(cls, mat, *, directed: bool | None = None, weighted: bool = True, **kwargs) -> "Graph":
        """Build from a SciPy sparse matrix whose rows are destinations and columns sources (edge features: build
        with :meth:`from_edges`, which moves them with their entries)."""
        if kwargs.get("edge_attr") is not None:
            raise GridGnnError("Graph.from_scipy takes no edge_attr (it sorts and merges the entries); build the graph "
                               "with Graph.from_edges(src, dst, n, edge_attr=...)")
        stored = mat.nnz if sp.issparse(mat) else None  # (a COO or a CSR matrix may store an entry twice)
        mat = sp.csr_matrix(mat)
        if mat.shape[0] != mat.shape[1]:
            raise GridGnnError(f"adjacency must be square, got {mat.shape[0]}×{mat.shape[1]}")
        mat.sum_duplicates()
        if stored is not None:
            _note_merged(kwargs, stored - mat.nnz)
        mat.sort_indices()
        asymmetric = (mat != mat.T).nnz != 0
        if directed is None:
            directed = asymmetric
        elif directed is False and asymmetric:
            raise GridGnnError("graph is marked undirected but its adjacency is not symmetric; mark it directed "
                               "or store both directions of every edge")
        values = mat.data.astype(np.float64) if weighted and not np.all(mat.data == 1.0) else None
        return cls(indptr=mat.indptr, indices=mat.indices, values=values, n=mat.shape[0],
                   directed=bool(directed), **kwargs)

    # ------------------------------------------------------------------ views
    @property
    def nnz(self) -> int:
        return int(self.indices.size)

    @property
    def num_features(self) -> int:
        return 0 if self.x is None else int(self.x.shape[1])

    @property
    def num_classes(self) -> int:
        if self.y is None:
            return 0
        return int(self.y.max(initial=-1)) + 1

    def csr(self) -> sp.csr_matrix:
        """The stored matrix M (rows = destinations) as SciPy CSR (float64)."""
        data = self.values if self.values is not None else np.ones(self.nnz, dtype=np.float64)
        return sp.csr_matrix((data, self.indices, self.indptr), shape=(self.n, self.n))

    def edge_index(self) -> np.ndarray:
        """``int64[2, nnz]`` in PyG order (row 0 = source, row 1 = destination)."""
        dst = np.repeat(np.arange(self.n, dtype=np.int64), np.diff(self.indptr))
        return np.stack([self.indices, dst])

    def with_(self, **changes) -> "Graph":
        return replace(self, **changes)

    def fingerprint(self) -> dict[str, str]:
        """What identifies this graph's data, part by part (a BLAKE2b digest of each part's arrays, their dtypes and
        shapes; ``"none"`` for a part the graph lacks): ``edges`` (the stored matrix, its direction and relation
        types), ``edge_features``, ``features``, ``labels``, ``masks`` and ``ids`` (:attr:`original_ids`). A
        checkpoint records it, so that a resume on other data of the same size is refused."""
        def digest(*arrays) -> str:
            if all(a is None for a in arrays):
                return "none"
            h = hashlib.blake2b(digest_size=16)
            for a in arrays:
                if a is None:
                    h.update(b"-")
                    continue
                a = np.ascontiguousarray(a)
                h.update(f"{a.dtype.str}{a.shape}".encode())
                h.update(a.reshape(-1).view(np.uint8) if a.size else b"")
            return h.hexdigest()

        directed = np.array([self.directed])
        return {"edges": digest(self.indptr, self.indices, self.values, directed, self.edge_type_counts),
                "edge_features": digest(self.edge_attr), "features": digest(self.x), "labels": digest(self.y),
                "masks": digest(self.train_mask, self.val_mask, self.test_mask), "ids": digest(self.original_ids)}

    def symmetrized(self) -> "Graph":
        """This graph with every edge in both directions, as :meth:`from_edges` ``(directed=False)`` builds it (the
        larger weight of a pair in both; node arrays kept): what a model trained on a symmetrized graph is given
        at inference. A graph that is undirected already comes back as it is; one with edge features or
        relation types is refused (their reverse edges would need values of their own)."""
        if not self.directed:
            return self
        if self.edge_attr is not None or self.edge_type_counts is not None:
            raise GridGnnError("the model was trained on a symmetrized graph (reverse edges added); this graph is "
                               "directed and carries edge features or relation types: give it with both "
                               "directions of every edge")
        mat = self.csr()
        mat = union_max(mat, mat.T.tocsr())
        values = mat.data.astype(np.float64) if self.values is not None else None
        return replace(self, indptr=mat.indptr, indices=mat.indices, values=values, directed=False,
                       meta={**self.meta, "symmetrized": 1})

    # ------------------------------------------------------------------ checks
    def validate(self) -> None:
        n = self.n
        if n <= 0:
            raise GridGnnError("graph has no vertices")
        if self.indptr.shape != (n + 1,) or self.indptr[0] != 0 or np.any(np.diff(self.indptr) < 0):
            raise GridGnnError(f"invalid CSR row pointer for n={n}")
        if self.indptr[-1] != self.indices.size:
            raise GridGnnError(f"CSR row pointer ends at {self.indptr[-1]} but there are {self.indices.size} indices")
        _check_ids(self.indices, n, "neighbour")
        if self.values is not None:
            if self.values.shape != self.indices.shape:
                raise GridGnnError(f"{self.values.size} edge values for {self.indices.size} edges")
            if not np.all(np.isfinite(self.values)):
                raise GridGnnError("edge weights contain NaN or inf")
        if self.x is not None:
            self.x = np.asarray(self.x)
            if self.x.ndim != 2 or self.x.shape[0] != n:
                raise GridGnnError(f"features have shape {tuple(self.x.shape)}, expected ({n}, f)")
            if not np.all(np.isfinite(self.x)):
                raise GridGnnError("node features contain NaN or inf")
        if self.y is not None:
            self.y = np.asarray(self.y).astype(np.int64).reshape(-1)
            if self.y.shape[0] != n:
                raise GridGnnError(f"{self.y.shape[0]} labels for {n} vertices")
            if np.any(self.y < -1):
                raise GridGnnError("labels must be >= 0 (or -1 for unlabelled)")
            if self.y.size and self.y.max() >= n:
                raise GridGnnError(f"label {int(self.y.max())} implies {int(self.y.max()) + 1} classes, more than "
                                   f"the {n} vertices (class ids must be below the vertex count)")
        for name in ("train_mask", "val_mask", "test_mask"):
            m = getattr(self, name)
            if m is not None:
                m = np.asarray(m).astype(bool).reshape(-1)
                if m.shape[0] != n:
                    raise GridGnnError(f"{name} has {m.shape[0]} entries for {n} vertices")
                setattr(self, name, m)
        if self.edge_attr is not None:
            a = np.asarray(self.edge_attr)
            if a.ndim != 2 or a.shape[0] != self.indices.size or not np.issubdtype(a.dtype, np.number):
                raise GridGnnError(f"edge features (edge_attr) have shape {tuple(a.shape)}, expected "
                                   f"({self.indices.size}, d): one numeric row per stored edge")
            if not np.all(np.isfinite(a)):
                raise GridGnnError("edge features (edge_attr) contain NaN or inf")
            self._require_edge_keys("edge features (edge_attr)", "Graph.from_edges")
            self.edge_attr = np.ascontiguousarray(a, dtype=np.float32 if a.dtype == np.float32 else np.float64)
        if self.edge_type_counts is not None:
            c = np.asarray(self.edge_type_counts)
            if c.ndim != 2 or c.shape[0] != self.indices.size or not np.issubdtype(c.dtype, np.integer) \
                    or not 1 <= c.shape[1] <= MAX_RELATIONS:
                raise GridGnnError(f"edge_type_counts have shape {tuple(c.shape)} ({c.dtype}), expected "
                                   f"({self.indices.size}, R) integers with 1 <= R <= {MAX_RELATIONS}")
            if c.size and c.min() < 0:
                raise GridGnnError("edge_type_counts must be 0 or 1 (whether an edge is of each relation)")
            many = np.flatnonzero((c > 1).any(axis=1)) if c.size else ()
            if len(many):  # (from_edges counts a relation of a pair once: an edge given twice is merged)
                k = int(many[0])
                src, dst = int(self.indices[k]), int(np.searchsorted(self.indptr, k, side="right") - 1)
                if self.original_ids is not None and len(self.original_ids) == n:
                    src, dst = int(self.original_ids[src]), int(self.original_ids[dst])
                raise GridGnnError(f"edge_type_counts: edge {src} -> {dst} is of a relation {int(c[k].max())} "
                                   f"times, and {len(many) - 1} more edges are of one more than once; a relation "
                                   "joins a pair once (an edge given twice with one relation is merged): 0 or 1")
            empty = np.flatnonzero(~c.any(axis=1)) if c.size else np.empty(0, np.int64)
            if empty.size:  # a stored edge of no relation carries no message (like a zero or negative weight)
                k = int(empty[0])
                src, dst = int(self.indices[k]), int(np.searchsorted(self.indptr, k, side="right") - 1)
                raise GridGnnError(f"edge_type_counts: edge {src} -> {dst} belongs to no relation (its counts are "
                                   f"all zero), and {empty.size - 1} more; every stored edge needs a count of at "
                                   "least 1 in some relation")
            self._require_edge_keys("relation types (edge_type_counts)", "Graph.from_edges(..., edge_type=...)")
            self.edge_type_counts = np.ascontiguousarray(c, dtype=np.int32)
            self._relation_degree = None
        if self.node_types is not None:
            _check_node_types(self.node_types, n)
        if self.original_ids is not None:
            ids = np.asarray(self.original_ids)
            if ids.shape != (n,) or (ids.size and not np.issubdtype(ids.dtype, np.integer)):
                raise GridGnnError(f"original_ids must be an integer array of length n={n}, got shape "
                                   f"{ids.shape} dtype {ids.dtype}")
            ids = np.ascontiguousarray(ids, dtype=np.int64)
            if ids.size and (ids[0] < 0 or np.any(np.diff(ids) <= 0)):
                raise GridGnnError("original_ids must be non-negative and strictly increasing")
            self.original_ids = ids


    def _require_edge_keys(self, what: str, build: str) -> None:
        """Per-entry edge data is looked up by the key ``dst · n + src``: each CSR row's sources sorted and unique,
        and ``n`` small enough for 64-bit keys."""
        rows = np.repeat(np.arange(self.n, dtype=np.int64), np.diff(self.indptr))
        if self.indices.size > 1 and np.any((np.diff(self.indices) <= 0) & (rows[1:] == rows[:-1])):
            raise GridGnnError(f"{what} need each CSR row's sources sorted and without duplicates (build the graph "
                               f"with {build})")
        if self.n > MAX_FEATURED_VERTICES:
            raise GridGnnError(f"{what} on a graph of {self.n} vertices: at most {MAX_FEATURED_VERTICES} (edge keys "
                               "are dst·n + src in 64 bits)")

def _note_merged(kwargs: dict, merged: int) -> None:
    """Record in the graph's ``meta`` (a copy of the one given) how many duplicate edges were merged."""
    if merged > 0:
        kwargs["meta"] = {**(kwargs.get("meta") or {}), "duplicate_edges_merged": int(merged)}


def union_max(a: sp.csr_matrix, b: sp.csr_matrix) -> sp.csr_matrix:
    """The entries stored in ``a`` or in ``b`` (same shape, no duplicates), each with the larger of its stored values
    where both store one, as CSR with sorted indices. SciPy's ``a.maximum(b)`` compares an entry with the other's
    implicit zero, which gives this where every stored value is positive; otherwise an entry only one side stores
    keeps its own value here, a negative or zero one too (a symmetrized edge keeps its weight, for the weight checks
    to see), by a merge of the two in row order."""
    a, b = sp.csr_matrix(a), sp.csr_matrix(b)
    a.sort_indices()
    b.sort_indices()
    if np.all(a.data > 0) and np.all(b.data > 0):
        out = a.maximum(b).tocsr()
        out.sort_indices()
        return out
    rows, cols = a.shape
    key_a, key_b = (np.repeat(np.arange(rows, dtype=np.int64) * cols, np.diff(m.indptr)) + m.indices
                    for m in (a, b))
    pos = np.searchsorted(key_a, key_b)  # where each of b's entries is, or goes, among a's
    both = pos < key_a.size
    both[both] = key_a[pos[both]] == key_b[both]
    data_a = a.data.astype(np.result_type(a.data, b.data))
    data_a[pos[both]] = np.maximum(data_a[pos[both]], b.data[both])
    only_b = ~both
    at = pos[only_b] + np.arange(int(only_b.sum()))  # b's own entries' places in the union
    from_a = np.ones(key_a.size + at.size, dtype=bool)
    from_a[at] = False
    indices = np.empty(from_a.size, dtype=np.result_type(a.indices, b.indices))
    data = np.empty(from_a.size, dtype=data_a.dtype)
    indices[from_a], indices[at] = a.indices, b.indices[only_b]
    data[from_a], data[at] = data_a, b.data[only_b]
    per_row = np.diff(a.indptr) + np.bincount(np.repeat(np.arange(rows), np.diff(b.indptr))[only_b], minlength=rows)
    indptr = np.zeros(rows + 1, dtype=np.int64)
    np.cumsum(per_row, out=indptr[1:])
    out = sp.csr_matrix((data, indices, indptr), shape=(rows, cols))
    out.has_sorted_indices = True
    return out


def _check_node_types(types, n: int) -> None:
    names, offsets = (types.get("names"), types.get("offsets")) if isinstance(types, dict) else (None, None)
    if not isinstance(names, list) or not all(isinstance(t, str) for t in names) or not names \
            or not isinstance(offsets, list) or len(offsets) != len(names) + 1 \
            or not all(isinstance(o, int) for o in offsets) or offsets[0] != 0 or offsets[-1] != n \
            or any(b < a for a, b in zip(offsets, offsets[1:])):
        raise GridGnnError(f"node_types must be {{'names': [type, ...], 'offsets': [0, ..., {n}]}} with "
                           "non-decreasing offsets, one more than names")


def _check_ids(ids: np.ndarray, n: int, what: str) -> None:
    if ids.size and (ids.min() < 0 or ids.max() >= n):
        bad = ids[(ids < 0) | (ids >= n)][0]
        raise GridGnnError(f"{what} id {int(bad)} out of range for a graph with {n} vertices (valid 0..{n - 1})")


def require_nonnegative_weights(graph: Graph) -> None:
    """The GCN normalization divides by weighted degrees, which signed weights can make zero or negative (a row
    would be zeroed without a word): refuse them, naming the first negative edge. A graph may hold signed weights;
    training on one is what is refused."""
    if graph.values is None:
        return
    negative = np.flatnonzero(graph.values < 0)
    if negative.size:
        k = int(negative[0])
        src, dst = int(graph.indices[k]), int(np.searchsorted(graph.indptr, k, side="right") - 1)
        if graph.original_ids is not None:  # a relabelled file: its own ids
            src, dst = int(graph.original_ids[src]), int(graph.original_ids[dst])
        raise negative_weight_error(src, dst, float(graph.values[k]), negative.size - 1)


def negative_weight_error(src: int, dst: int, weight: float, more: int) -> GridGnnError:
    """The one line that refuses negative edge weights, naming the first (``src -> dst``, ids of the file)."""
    return GridGnnError(f"edge weights must be non-negative to train (the normalization divides by weighted "
                        f"degrees): edge {src} -> {dst} has weight {weight:g}, and {more} more are negative")


def gcn_normalize(graph: Graph) -> sp.csr_matrix:
    r"""The GCN propagation matrix :math:`\hat M = D^{-1/2}(M + I)D^{-1/2}`, rows = destinations.

    Same convention as PyG ``gcn_norm`` with ``add_self_loops=True``: existing self-loops keep their weight,
    missing ones get weight 1 (``add_remaining_self_loops``), and :math:`D_{ii} = \sum_j (M+I)_{ij}` is the
    weighted in-degree of the destination. For undirected graphs this is the symmetric normalization.

    Returns:
        ``float64`` CSR matrix (n × n) with sorted indices.
    """
    require_nonnegative_weights(graph)
    mat = with_self_loops(graph.csr(), 0)
    return scale_rows(mat, 0, inverse_sqrt_degrees(mat))


def with_self_loops(rows: sp.csr_matrix, lo: int) -> sp.csr_matrix:
    r"""Rows ``lo, lo+1, …`` of :math:`M + I` as :func:`gcn_normalize` forms it (``rows``: those rows of :math:`M`,
    all ``n`` columns): existing self-loops keep their weight, missing ones get 1. Row by row the same arithmetic
    as on the whole matrix, so a matrix processed a band of rows at a time (``gridgnn shard`` streaming) gets the
    same bits."""
    h, n = rows.shape
    rows = sp.csr_matrix(rows)
    row = lo + np.repeat(np.arange(h), np.diff(rows.indptr))
    has_loop = np.zeros(h, dtype=bool)
    has_loop[row[rows.indices == row] - lo] = True
    add = np.where(has_loop, 0.0, 1.0)  # existing self-loops keep their weight, missing ones get 1
    diag = sp.csr_matrix((add, lo + np.arange(h), np.arange(h + 1)), shape=(h, n))
    return (rows + diag).tocsr()


def inverse_sqrt_degrees(rows: sp.csr_matrix) -> np.ndarray:
    r""":math:`D^{-1/2}` of rows of :math:`M + I` (:func:`with_self_loops`): each row's weighted degree to the power
    :math:`-1/2`, 0 for a row of degree 0."""
    deg = np.asarray(rows.sum(axis=1)).reshape(-1)
    dinv = np.zeros_like(deg)
    pos = deg > 0
    dinv[pos] = deg[pos] ** -0.5
    return dinv


def scale_rows(rows: sp.csr_matrix, lo: int, dinv: np.ndarray) -> sp.csr_matrix:
    r"""Rows ``lo, …`` of :math:`D^{-1/2}(M + I)D^{-1/2}` from those rows of :math:`M + I` and every vertex's
    :math:`D^{-1/2}` (``dinv``, length ``n``)."""
    h = rows.shape[0]
    # D^-1/2 (M + I) D^-1/2 entry by entry, (d_i · m_ij) · d_j as the product with the diagonals rounds it. An entry
    # of weight zero (a zero-weight loop or edge) is no edge and is dropped; an edge of positive weight out of a
    # vertex of degree zero (d_j = 0: its own loop of weight zero, no weighted edge in) stays, an explicit zero,
    # since the pattern of this matrix is the graph every other layer aggregates over (SAGE, GAT, ... as PyG's)
    if rows.nnz and rows.data.min() <= 0:  # (weights are non-negative: a zero entry, without a pass over them)
        rows = sp.csr_matrix(rows, copy=True)
        rows.eliminate_zeros()
    row = lo + np.repeat(np.arange(h), np.diff(rows.indptr))
    out = sp.csr_matrix(((dinv[row] * rows.data) * dinv[rows.indices], rows.indices.copy(), rows.indptr.copy()),
                        shape=rows.shape)
    out.sort_indices()
    return out


SPLITS = ("train", "val", "test")


@dataclass
class SplitFacts:
    """What training checks of a graph's splits (:func:`gridgnn.train.data_checks.check_splits`), gathered from
    its masks whole or a chunk of vertices at a time (a sharded dataset's node chunks): ``labelled_val`` the
    validation vertices with a label, ``overlaps`` ``{(a, b): (count, first vertex)}`` for each pair of splits
    whose masks share vertices."""

    labelled_val: int = 0
    overlaps: dict = field(default_factory=dict)

    def add(self, masks: dict, y, offset: int = 0) -> None:
        """Count the vertices ``offset ..`` of ``masks`` (``{split: bool array or None}``) with labels ``y``."""
        val = masks.get("val")
        if val is not None and y is not None:
            self.labelled_val += int((np.asarray(val, bool) & (np.asarray(y) >= 0)).sum())
        for i, a in enumerate(SPLITS):
            for b in SPLITS[i + 1:]:
                if masks.get(a) is None or masks.get(b) is None:
                    continue
                both = np.flatnonzero(np.asarray(masks[a], bool) & np.asarray(masks[b], bool))
                if both.size:
                    count, first = self.overlaps.get((a, b), (0, offset + int(both[0])))
                    self.overlaps[(a, b)] = (count + int(both.size), first)

    @classmethod
    def of(cls, graph: Graph) -> "SplitFacts":
        facts = cls()
        facts.add({s: getattr(graph, f"{s}_mask") for s in SPLITS}, graph.y)
        return facts
