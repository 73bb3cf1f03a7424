r"""Heterogeneous graphs: vertex types and relation types on the one vertex layout every algorithm shares.

A heterogeneous graph becomes one :class:`~gridgnn.graph.graph.Graph` as PyG's ``HeteroData.to_homogeneous``
numbers it: the vertices of each type in turn (type ``t`` holds ids ``offsets[t] .. offsets[t+1] - 1``, in the
type's own order; :attr:`Graph.node_types <gridgnn.graph.graph.Graph.node_types>`), and each edge type is a
relation (``edge_type`` = its index in the edge-type list; :attr:`Graph.edge_type_counts
<gridgnn.graph.graph.Graph.edge_type_counts>`; ``meta["relations"]`` names them ``src__rel__dst``).

**Features of different widths.** Type ``t``'s features (``d_t`` wide) fill columns ``c_t .. c_t + d_t - 1`` of
one ``n × Σ d_t`` matrix, zero elsewhere (a type without features gets one column of ones: a learned vector per
type). A model's first ``linear`` on that matrix is then exactly a typed linear — one weight ``d_t × f`` per vertex
type, PyG ``HeteroLinear`` without a bias — so every model and algorithm reads a heterogeneous graph with no code of
its own. ``meta["feature_columns"]`` records the ``c_t``.

**Labels.** Each type's ``y`` and masks go to its vertices; the others are unlabelled (``-1``) and in no split.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import GridGnnError
from .graph import MAX_RELATIONS, Graph
from .synthetic import _check_float, _check_int, planetoid_like_split

_MASKS = ("train_mask", "val_mask", "test_mask")


def homogeneous(types: list[dict], relations: list[tuple[str, np.ndarray, np.ndarray]], *, name: str,
                meta: dict | None = None) -> Graph:
    r"""One typed :class:`Graph` from vertex types and relations (see the module docstring).

    Args:
        types: per vertex type, in order, ``{"name": str, "n": int, "x": [n_t, d_t] or None, "y": [n_t] or None,
            "train_mask"/"val_mask"/"test_mask": [n_t] or None}``.
        relations: per relation, ``(name, src, dst)`` with ``src``/``dst`` already in the joint numbering.
    """
    from .loaders import _node_arrays

    if not types:
        raise GridGnnError("a heterogeneous graph needs at least one vertex type")
    if not relations or len(relations) > MAX_RELATIONS:
        raise GridGnnError(f"a heterogeneous graph needs 1 to {MAX_RELATIONS} edge types, got {len(relations)}")
    checked = []
    for t in types:  # the loaders' checks of x, y and masks, per type
        count = int(t["n"])
        if count < 0:
            raise GridGnnError(f"vertex type {t['name']!r} has a negative count")
        arrays = _node_arrays(f"vertex type {t['name']!r}", count, t.get("x"), t.get("y"),
                              {m: t.get(m) for m in _MASKS})
        checked.append((str(t["name"]), count, arrays))
    offsets = np.cumsum([0] + [c for _, c, _ in checked]).tolist()
    n = offsets[-1]
    widths = [a["x"].shape[1] if "x" in a else 1 for _, _, a in checked]
    columns = [0, *np.cumsum(widths).tolist()]
    x = np.zeros((n, columns[-1]), dtype=np.float32)
    labelled = any("y" in a for _, _, a in checked)
    y = np.full(n, -1, dtype=np.int64) if labelled else None
    masks = {m: np.zeros(n, dtype=bool) for m in _MASKS if any(m in a for _, _, a in checked)}
    for i, (_, _, a) in enumerate(checked):
        lo, hi = offsets[i], offsets[i + 1]
        if "x" in a:
            x[lo:hi, columns[i]:columns[i + 1]] = a["x"]
        else:
            x[lo:hi, columns[i]] = 1.0
        if "y" in a:
            y[lo:hi] = a["y"]
        for m in masks:
            if m in a:
                masks[m][lo:hi] = a[m]
    src = np.concatenate([np.asarray(s, dtype=np.int64).reshape(-1) for _, s, _ in relations])
    dst = np.concatenate([np.asarray(d, dtype=np.int64).reshape(-1) for _, _, d in relations])
    kind = np.concatenate([np.full(np.asarray(s).size, r, dtype=np.int64) for r, (_, s, _) in enumerate(relations)])
    info = dict(meta or {})
    info.update(relations=[r for r, _, _ in relations], feature_columns=columns[:-1],
                vertex_types=[name for name, _, _ in checked])
    g = Graph.from_edges(src, dst, n, edge_type=kind, num_relations=len(relations), x=x, y=y, name=name,
                         node_types={"names": [name for name, _, _ in checked], "offsets": offsets}, meta=info,
                         **masks)
    if y is not None and g.y.max(initial=-1) < 0:
        raise GridGnnError("no vertex of any type has a label (y >= 0)")
    if g.nnz == 0:
        raise GridGnnError("empty graph (no edges of any type)")
    return g


def from_hetero(data, *, name: str = "hetero") -> Graph:
    r"""Convert a PyG ``HeteroData`` (see the module docstring): every node type (``x``, ``y``, masks, its vertex
    count) and every edge type (``edge_index`` in the types' own ids) in the object's order. Edge features of a
    ``HeteroData`` are not read (``meta["edge_features_dropped"]`` says so)."""
    from .loaders import _as_numpy

    what = f"HeteroData '{name}'"
    types = []
    index = {}
    for nt in data.node_types:
        store = data[nt]
        count = store.num_nodes
        if count is None:
            raise GridGnnError(f"{what}: node type {nt!r} has no vertex count (no x, no num_nodes)")
        t = {"name": nt, "n": int(count)}
        for key in ("x", "y", *_MASKS):
            arr = _as_numpy(getattr(store, key, None)) if key in store else None
            if arr is not None and key in _MASKS and arr.ndim == 2:
                arr = arr[:, 0]
            t[key] = arr
        index[nt] = len(types)
        types.append(t)
    offsets = np.cumsum([0] + [t["n"] for t in types])
    relations, dropped = [], []
    for et in data.edge_types:
        s, rel, d = et
        for nt in (s, d):
            if nt not in index:
                raise GridGnnError(f"{what}: edge type {et} names the node type {nt!r}, which has no vertices")
        ei = _as_numpy(getattr(data[et], "edge_index", None))
        if ei is None or ei.ndim != 2 or ei.shape[0] != 2:
            raise GridGnnError(f"{what}: edge type {et} needs edge_index of shape [2, E]")
        if ei.size and not np.issubdtype(ei.dtype, np.integer):
            raise GridGnnError(f"{what}: edge type {et} has edge_index of dtype {ei.dtype}; ids must be integers")
        for row, nt in ((0, s), (1, d)):
            if ei.shape[1] and (int(ei[row].min()) < 0 or int(ei[row].max()) >= types[index[nt]]["n"]):
                raise GridGnnError(f"{what}: edge type {et} has a {nt!r} id out of range 0..{types[index[nt]]['n'] - 1}")
        ei = ei.astype(np.int64)
        relations.append((f"{s}__{rel}__{d}", ei[0] + offsets[index[s]], ei[1] + offsets[index[d]]))
        if "edge_weight" in data[et]:  # (a typed graph takes no weights: a weight-0 edge would count as an edge)
            raise GridGnnError(f"{what}: edge type {et} has edge_weight; a typed graph takes no edge weights (its "
                               "relations are its edge types): leave them out, or build an untyped graph")
        if "edge_attr" in data[et]:
            dropped.append(f"{s}__{rel}__{d}")
    meta = {"source": "HeteroData"}
    if dropped:
        meta["edge_features_dropped"] = "edge features of a HeteroData are not read: " + ", ".join(dropped)
    try:
        return homogeneous(types, relations, name=name, meta=meta)
    except GridGnnError as exc:
        raise GridGnnError(f"{what}: {exc}") from None


def typed_sbm_graph(n: int = 3000, classes: int = 4, types: int = 3, relations: int = 4, avg_degree: float = 8.0,
                    features: int = 16, p_in: float = 0.7, noise: float = 3.0, train_per_class: int = 20,
                    seed: int = 0) -> Graph:
    r"""A typed stochastic block model where relations differ: what R-GCN's per-relation weights are for.

    **Vertices.** ``n`` vertices in ``types`` types of (nearly) equal size, numbered type by type; each has a class
    ``c_v`` (balanced, random order). Type ``t``'s features are ``features + 4t`` wide (the types differ in width,
    as in real heterogeneous data): :math:`x_v = \mu_{t, c_v} + \mathrm{noise}\cdot\varepsilon_v` with class means
    per type. Only type 0 is labelled (the target type; the others' ``y`` is ``-1``), with the split of
    :func:`~gridgnn.graph.synthetic.planetoid_like_split` (``train_per_class`` per class).

    **Relations.** Relation ``r`` joins sources of type ``(r + 1) mod T`` to destinations of type ``r mod T``
    (:math:`r \ge T`: within type ``r mod T``). It has ``n_dst · avg_degree / relations`` edges: a uniform
    destination ``u``, and with probability ``p_in`` a source of class :math:`(c_u + r) \bmod C` (else a uniform
    class). Each relation thus shifts the classes by its own amount: averaging every relation alike (GCN) blurs the
    signal, a weight per relation can undo each shift.
    """
    n = _check_int("n", n, 2)
    k = _check_int("classes", classes, 2)
    nt = _check_int("types", types, 1)
    nr = _check_int("relations", relations, 1)
    f = _check_int("features", features, 1)
    d = _check_float("avg_degree", avg_degree, 0.0, lo_open=True)
    p_in = _check_float("p_in", p_in, 0.0, 1.0)
    noise = _check_float("noise", noise, 0.0)
    if n < nt * k:
        raise GridGnnError(f"n ({n}) must be at least types × classes ({nt * k})")
    if nr > MAX_RELATIONS:
        raise GridGnnError(f"relations must be at most {MAX_RELATIONS}, got {nr}")
    if d * n / nr > 64 * n * math.log2(n + 1) + 1e7:
        raise GridGnnError(f"avg_degree {d:g} is implausibly large for n={n}")
    rng = np.random.default_rng(seed)
    sizes = [n // nt + (1 if t < n % nt else 0) for t in range(nt)]
    offsets = np.cumsum([0] + sizes)
    cls = np.concatenate([rng.permutation(np.arange(s, dtype=np.int64) % k) for s in sizes])
    by_class = []  # per type, per class: the joint ids of its members
    for t in range(nt):
        ids = np.arange(offsets[t], offsets[t + 1])
        by_class.append([ids[cls[ids] == c] for c in range(k)])
    vtypes = []
    for t in range(nt):
        ids = np.arange(offsets[t], offsets[t + 1])
        width = f + 4 * t
        means = rng.standard_normal((k, width))
        x = means[cls[ids]] + noise * rng.standard_normal((ids.size, width))
        vt = {"name": f"type{t}", "n": sizes[t], "x": x}
        if t == 0:
            train, val, test = planetoid_like_split(cls[ids], seed=seed + 1, per_class=train_per_class)
            vt.update(y=cls[ids], train_mask=train, val_mask=val, test_mask=test)
        vtypes.append(vt)
    rels = []
    for r in range(nr):
        t_dst = r % nt
        t_src = (r + 1) % nt if r < nt else t_dst
        m = max(1, int(round(sizes[t_dst] * d / nr)))
        dst = rng.integers(offsets[t_dst], offsets[t_dst + 1], m)
        want = np.where(rng.random(m) < p_in, (cls[dst] + r) % k, rng.integers(0, k, m))
        src = np.empty(m, dtype=np.int64)
        for c in range(k):
            pick = want == c
            members = by_class[t_src][c]
            src[pick] = members[rng.integers(0, members.size, int(pick.sum()))]
        keep = src != dst
        rels.append((f"type{t_src}__r{r}__type{t_dst}", src[keep], dst[keep]))
    meta = dict(generator="typed-sbm", n=n, classes=k, types=nt, relations=nr, avg_degree=d, features=f, p_in=p_in,
                noise=noise, train_per_class=int(train_per_class), seed=seed)
    return homogeneous(vtypes, rels, name=f"typed-sbm-n{n}-t{nt}-r{nr}", meta=meta)
