r"""Synthetic graph generators: a degree-corrected stochastic block model and R-MAT (Graph500).

Both are fully vectorized NumPy (no Python loop over vertices or edges), deterministic for a seed, and return
undirected :class:`~gridgnn.graph.graph.Graph` objects without self-loops or duplicate edges.

* :func:`sbm_graph` is the *accuracy* benchmark: labels are the blocks, edges are homophilous and features are
  noisy class means, so that a feature-only MLP is mediocre and a GCN, which averages over neighbours, clearly
  better.
* :func:`rmat_graph` is the *scale and timing* benchmark: a skewed power-law-like graph with random features
  and random labels (nothing to learn).
"""
from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp

from ..errors import GridGnnError
from .graph import Graph
from .loaders import default_split
from .safe_io import check_alloc

__all__ = ["sbm_graph", "rmat_graph", "planetoid_like_split"]


def _check_int(name: str, value, lo: int) -> int:
    try:
        ok = not isinstance(value, bool) and int(value) == value and value >= lo
    except (TypeError, ValueError, OverflowError):
        ok = False
    if not ok:
        raise GridGnnError(f"{name} must be an integer >= {lo}, got {value!r}")
    return int(value)


def _check_float(name: str, value, lo: float, hi: float | None = None, lo_open: bool = False) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise GridGnnError(f"{name} must be a number, got {value!r}") from None
    bad = not math.isfinite(v) or (v <= lo if lo_open else v < lo) or (hi is not None and v > hi)
    if bad:
        rng = f"{'(' if lo_open else '['}{lo}, {hi if hi is not None else 'inf'}]"
        raise GridGnnError(f"{name} must be in {rng}, got {value!r}")
    return v


def _from_undirected_pairs(u: np.ndarray, v: np.ndarray, n: int, **kwargs) -> Graph:
    """Graph from unique pairs ``u < v`` sorted by ``(u, v)`` (:func:`_unique_pairs`' order; each becomes two stored
    entries), its CSR placed directly: row ``r`` holds its columns below ``r`` (the pairs ``(c, r)``: the upper
    triangle's column ``r``, from SciPy's counting transpose), then those above (the pairs ``(r, c)``, in order)."""
    u, v = np.asarray(u, np.int64), np.asarray(v, np.int64)
    key = u * n + v
    if u.size and (np.any(u >= v) or np.any(key[1:] <= key[:-1])):  # (a caller's bug: the placement needs the order)
        raise ValueError("_from_undirected_pairs needs unique pairs u < v sorted by (u, v)")
    del key
    above = np.bincount(u, minlength=n)
    upper_ptr = np.zeros(n + 1, np.int64)
    np.cumsum(above, out=upper_ptr[1:])
    lower = sp.csr_matrix((np.ones(v.size, np.bool_), v, upper_ptr), shape=(n, n)).T.tocsr()  # sorted rows
    below = np.diff(lower.indptr)
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(below + above, out=indptr[1:])
    indices = np.empty(int(indptr[-1]), np.int64)
    indices[np.repeat(indptr[:-1] - lower.indptr[:-1], below) + np.arange(v.size)] = lower.indices
    del lower
    indices[np.repeat(indptr[:-1] + below - upper_ptr[:-1], above) + np.arange(u.size)] = v
    return Graph(indptr=indptr, indices=indices, values=None, n=n, directed=False, **kwargs)


def _unique_pairs(u: np.ndarray, v: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Drop self-loops, orient every pair as ``(min, max)`` and drop duplicates (vectorized)."""
    keep = u != v
    lo = np.minimum(u[keep], v[keep]).astype(np.int64)
    hi = np.maximum(u[keep], v[keep]).astype(np.int64)
    key = lo * n + hi
    key.sort()  # sort + adjacent-difference is much faster than np.unique's hash path for int64 keys
    if key.size:
        key = key[np.concatenate([[True], key[1:] != key[:-1]])]
    return key // n, key % n


def planetoid_like_split(y: np.ndarray, seed: int = 0, *, per_class: int = 20, num_val: int = 500,
                         num_test: int = 1000) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r"""A Planetoid-style split, scaled down for small graphs.

    Training takes ``min(per_class, max(1, |class| // 5))`` random vertices of each class (20 per class as in
    Planetoid once classes have ≥ 100 vertices); validation and test then take ``min(num_val, n // 5)`` and
    ``min(num_test, n // 5)`` random vertices of the rest.

    Args:
        y: ``int64[n]`` labels in ``0..k-1``.
        seed: seed of the random choices.

    Returns:
        ``(train_mask, val_mask, test_mask)``, disjoint ``bool[n]``.
    """
    if not per_class >= 1:  # (every generator's train_per_class ends here)
        raise GridGnnError(f"train_per_class must be at least 1 (got {per_class})")
    per_class = int(per_class)
    y = np.asarray(y, dtype=np.int64)
    n = y.size
    rng = np.random.default_rng(seed)
    k = int(y.max()) + 1
    # random priority per vertex; the per_class smallest priorities within each class are the training nodes
    prio = rng.random(n)
    order = np.lexsort((prio, y))  # by class, then priority
    counts = np.bincount(y, minlength=k)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n) - np.repeat(starts, counts)
    take = np.minimum(per_class, np.maximum(1, counts // 5))
    train = rank < take[y]
    rest = rng.permutation(np.flatnonzero(~train))
    nv = min(num_val, n // 5)
    nt = max(0, min(num_test, n // 5, rest.size - nv))
    val = np.zeros(n, dtype=bool)
    test = np.zeros(n, dtype=bool)
    val[rest[:nv]] = True
    test[rest[nv:nv + nt]] = True
    return train, val, test


def sbm_graph(n: int = 4000, classes: int = 8, avg_degree: float = 10.0, features: int = 32, seed: int = 0,
              p_in_ratio: float = 0.6, noise: float = 4.0, degree_exponent: float = 2.5,
              train_per_class: int = 20, edge_features: int = 0) -> Graph:
    r"""A degree-corrected stochastic block model with class-correlated noisy features.

    **Blocks and labels.** Vertex ``v`` gets label ``y_v = b_v``; the ``classes`` blocks are as equal as possible
    (sizes differ by at most one), assigned in random order.

    **Degrees.** Each vertex has a propensity :math:`\theta_v \sim \mathrm{Pareto}(\gamma)`, i.e.
    :math:`P(\theta_v > t) = t^{-\gamma}` for :math:`t \ge 1` with ``degree_exponent`` :math:`\gamma` (clipped at :math:`\sqrt{n \cdot \bar d}` so that no vertex
    expects more neighbours than exist), so degrees are heterogeneous (a few hubs, many low-degree vertices).

    **Edges.** :math:`m = n \bar d / 2` undirected edges are drawn: the first endpoint :math:`u` with probability
    :math:`\propto \theta_u`; with probability ``p_in_ratio`` the second endpoint is drawn from :math:`u`'s own
    block, otherwise from a uniformly chosen other block, in both cases :math:`\propto \theta`. Self-loops and
    duplicates are dropped and more edges are drawn (a few vectorized rounds) until exactly :math:`m` distinct
    edges exist, so the mean degree is :math:`2m/n \approx \bar d` and the fraction of within-block edges is
    about ``p_in_ratio`` (the edge homophily).

    **Features.** Each class :math:`c` has a mean :math:`\mu_c \sim \mathcal N(0, I_f)`; vertex features are
    :math:`x_v = \mu_{y_v} + \mathrm{noise}\cdot\varepsilon_v`, :math:`\varepsilon_v \sim \mathcal N(0, I_f)`.
    With the defaults (``noise = 4``, ``p_in_ratio = 0.6``, :math:`\bar d = 10`, 32 features, 8 classes) the
    features alone are a weak signal, while a 2-layer GCN (hidden 16, 100 epochs, 20 labels per class) reaches
    about 0.85 test accuracy (chance is 1/8), because neighbourhood averaging shrinks the noise.

    **Split.** :func:`planetoid_like_split`: ``train_per_class`` (default 20) training vertices per class, 500
    validation and 1000 test vertices (fewer for small graphs: at most a fifth of each class for training and of
    ``n`` for val/test); minibatch benchmarks raise ``train_per_class`` to have many minibatches.

    Args:
        n: number of vertices (default 4000).
        classes: number of blocks / classes (default 8), at least 2.
        avg_degree: target mean degree :math:`\bar d` (default 10), ``0 < avg_degree < n - 1``.
        features: feature dimension ``f`` (default 32).
        edge_features: width ``d`` of edge features (default 0: none). Edge :math:`\{u, v\}` carries
            :math:`[y_u = y_v]\, a + \epsilon_{uv}` in both directions, with one loading :math:`a \sim \mathcal
            N(0, I_d)` and noise :math:`\epsilon_{uv} \sim \mathcal N(0, I_d)` per undirected edge: whether an edge
            stays within its block, blurred (drawn after everything else, so the graph is the one without them).
        seed: seed of every random choice (``numpy.random.default_rng``).
        p_in_ratio: fraction of edges that stay inside a block (default 0.6), in ``[0, 1]``.
        noise: standard deviation of the per-vertex Gaussian noise relative to the unit-variance class means
            (default 4.0).
        degree_exponent: Pareto tail exponent :math:`\gamma > 1` of the degree propensities (default 2.5;
            smaller = more skewed).

    Returns:
        An undirected :class:`Graph` (``x`` ``float32[n, f]``, ``y`` ``int64[n]``, three masks) with
        ``meta`` recording the generator parameters.
    """
    n = _check_int("n", n, 2)
    k = _check_int("classes", classes, 2)
    f = _check_int("features", features, 1)
    if k > n:
        raise GridGnnError(f"classes ({k}) must not exceed n ({n})")
    d = _check_float("avg_degree", avg_degree, 0.0, lo_open=True)
    h = _check_float("p_in_ratio", p_in_ratio, 0.0, 1.0)
    noise = _check_float("noise", noise, 0.0)
    gamma = _check_float("degree_exponent", degree_exponent, 1.0, lo_open=True)
    m = int(round(n * d / 2))
    max_edges = n * (n - 1) // 2
    if m < 1 or m > 0.5 * max_edges:
        raise GridGnnError(f"avg_degree {d} gives {m} edges for n={n}; need 1 ≤ edges ≤ {max_edges // 2} "
                           "(at most half of all possible pairs)")
    check_alloc(sbm_generation_bytes(n, d, f), f"synthetic:sbm with n={n}, avg_degree={d:g}, features={f}")
    rng = np.random.default_rng(seed)

    # blocks (labels), balanced and in random order
    y = rng.permutation(np.arange(n, dtype=np.int64) % k)
    # degree propensities: Pareto with x_min = 1
    theta = rng.pareto(gamma, n) + 1.0
    theta = np.minimum(theta, max(1.0, math.sqrt(n * d)))

    # members of each block and their sampling probabilities (propensities normalized within the block)
    order = np.argsort(y, kind="stable")
    counts = np.bincount(y, minlength=k)
    bstart = np.concatenate([[0], np.cumsum(counts)[:-1]])
    pglobal = theta / theta.sum()

    def draw_edges(draw: int) -> tuple[np.ndarray, np.ndarray]:
        # first endpoints ∝ theta: multinomial counts per vertex, expanded and shuffled (O(n + draw))
        u = rng.permutation(np.repeat(np.arange(n, dtype=np.int64), rng.multinomial(draw, pglobal)))
        inside = rng.random(draw) < h
        vb = np.where(inside, y[u], (y[u] + rng.integers(1, k, size=draw)) % k)
        # second endpoints ∝ theta within the target block; the edges wanting block b (in random order,
        # since u is shuffled) receive the block's multinomial draw (loop over blocks, not edges)
        need_b = np.bincount(vb, minlength=k)
        vals = []
        for b in range(k):
            members = order[bstart[b]:bstart[b] + counts[b]]
            pb = theta[members] / theta[members].sum()
            vals.append(np.repeat(members, rng.multinomial(need_b[b], pb)))
        v = np.empty(draw, dtype=np.int64)
        v[np.argsort(vb, kind="stable")] = np.concatenate(vals)
        return u, v

    us = np.empty(0, dtype=np.int64)
    vs = np.empty(0, dtype=np.int64)
    need = m
    for _ in range(64):
        u, v = draw_edges(int(need * 1.15) + 16)
        us, vs = _unique_pairs(np.concatenate([us, u]), np.concatenate([vs, v]), n)
        need = m - us.size
        if need <= 0:
            break
    else:  # pragma: no cover - only for pathological parameters
        raise GridGnnError(f"could not draw {m} distinct edges for n={n}, avg_degree={d}")
    if us.size > m:  # keep a random subset of exactly m edges
        keep = np.sort(rng.choice(us.size, size=m, replace=False))
        us, vs = us[keep], vs[keep]

    means = rng.standard_normal((k, f))
    x = (means[y] + noise * rng.standard_normal((n, f))).astype(np.float32)
    train, val, test = planetoid_like_split(y, seed=seed + 1, per_class=train_per_class)
    meta = dict(generator="sbm", n=n, classes=k, avg_degree=d, features=f, seed=seed, p_in_ratio=h,
                noise=noise, degree_exponent=gamma, train_per_class=int(train_per_class))
    g = _from_undirected_pairs(us, vs, n, x=x, y=y, train_mask=train, val_mask=val, test_mask=test,
                               name=f"sbm-n{n}-k{k}", meta=meta)
    ef = _check_int("edge_features", edge_features, 0)
    if ef:
        meta["edge_features"] = ef
        dst = np.repeat(np.arange(n, dtype=np.int64), np.diff(g.indptr))
        pair = np.minimum(dst, g.indices) * n + np.maximum(dst, g.indices)
        _, which = np.unique(pair, return_inverse=True)
        loading = rng.standard_normal(ef)
        noise = rng.standard_normal((int(which.max(initial=-1)) + 1, ef))
        same = (y[dst] == y[g.indices]).astype(np.float64)
        g = g.with_(edge_attr=(same[:, None] * loading + noise[which]).astype(np.float32))
    return g


# Peak working memory of the generators (bytes), checked before they start so that an absurd size is one error
# line, not a MemoryError: per drawn edge the int64 endpoint draws (about 1.15 m of them, with their
# concatenation and the sort of _unique_pairs) and the symmetric CSR of the result; per feature the float64
# noise, the float64 class means gathered per vertex and the float32 result; per vertex labels, propensities,
# masks and orders. Set 15-70 % above the tracemalloc peaks of SBM (n = 1e5..2e5, degree 20..50) and R-MAT
# (scale 16..17) graphs: a ceiling that refuses the impossible, not a prediction.
SBM_BYTES_PER_EDGE = 160
SBM_BYTES_PER_FEATURE = 20
RMAT_BYTES_PER_EDGE = 96
RMAT_BYTES_PER_FEATURE = 12
GENERATOR_BYTES_PER_VERTEX = 96



def sbm_generation_bytes(n: int, avg_degree: float, features: int) -> int:
    """Peak working memory of :func:`sbm_graph` (an upper estimate, see :data:`SBM_BYTES_PER_EDGE`)."""
    return int(SBM_BYTES_PER_EDGE * round(n * avg_degree / 2) + n * (SBM_BYTES_PER_FEATURE * features
                                                                     + GENERATOR_BYTES_PER_VERTEX))


def rmat_generation_bytes(scale: int, edge_factor: int, features: int) -> int:
    """Peak working memory of :func:`rmat_graph` (an upper estimate, see :data:`RMAT_BYTES_PER_EDGE`)."""
    n = 1 << scale
    return int(RMAT_BYTES_PER_EDGE * n * edge_factor + n * (RMAT_BYTES_PER_FEATURE * features
                                                            + GENERATOR_BYTES_PER_VERTEX))


# Graph500 R-MAT quadrant probabilities
_RMAT_A, _RMAT_B, _RMAT_C = 0.57, 0.19, 0.19  # d = 1 - a - b - c = 0.05


def rmat_graph(scale, edge_factor=16, seed=0, features=16, classes=4) -> Graph:
    r"""An R-MAT graph with the Graph500 parameters :math:`(a, b, c, d) = (0.57, 0.19, 0.19, 0.05)`.

    :math:`2^{\text{scale}} \cdot \text{edge\_factor}` edges are generated bit by bit (each of the ``scale``
    levels picks a quadrant for all edges at once), vertex ids are scrambled by a random permutation (as
    Graph500 does), and the result is symmetrized with self-loops and duplicates removed, so the final mean
    degree is somewhat below ``2 * edge_factor``. Many vertices are isolated and the degree distribution is very
    skewed.

    Features are i.i.d. standard Gaussian and labels uniformly random, so **there is nothing to learn**: use it
    for scaling, partitioning and timing tests, not for accuracy. The masks are a random 60/20/20 split.

    Args:
        scale: :math:`\log_2` of the vertex count (1..30).
        edge_factor: generated edges per vertex before symmetrization and deduplication (default 16).
        seed: seed of every random choice.
        features: feature dimension (default 16).
        classes: number of random classes (default 4).

    Returns:
        An undirected :class:`Graph` with ``n = 2**scale`` vertices, ``x`` ``float32[n, features]``,
        ``y`` ``int64[n]`` and three masks.
    """
    stream = RmatStream(scale, edge_factor, seed, features, classes)
    n, m = stream.n, stream.m
    check_alloc(rmat_generation_bytes(stream.scale, stream.edge_factor, stream.features),
                f"synthetic:rmat with scale={scale}, edge_factor={edge_factor}, features={features}")
    perm, rng = stream.permutation()
    key = np.empty(m, np.int64)  # each generated pair's key (min·n + max), self-loops left out
    kept = 0
    for e0 in range(0, m, RMAT_CHUNK_EDGES):
        here = pair_keys(*stream.edges(e0, min(m, e0 + RMAT_CHUNK_EDGES), perm), n)
        key[kept:kept + here.size] = here
        kept += here.size
    key = key[:kept]
    key.sort()  # sort + adjacent-difference is much faster than np.unique's hash path for int64 keys
    if key.size:
        key = key[np.concatenate([[True], key[1:] != key[:-1]])]
    u, v = key // n, key % n
    del key
    x, y, (train, val, test) = stream.node_data(rng)
    return _from_undirected_pairs(u, v, n, x=x, y=y, train_mask=train, val_mask=val, test_mask=test,
                                  name=stream.name, meta=stream.meta())


#: generated edges per piece of :func:`rmat_graph` (the pieces' arrays are about 40 bytes per edge)
RMAT_CHUNK_EDGES = 1 << 22
#: feature draws (float64) per piece of rows of :meth:`RmatStream.node_data`
RMAT_FEATURE_ELEMENTS = 1 << 22


def pair_keys(u: np.ndarray, v: np.ndarray, n: int) -> np.ndarray:
    """The key ``min·n + max`` of every pair ``(u, v)`` with ``u ≠ v`` (an undirected edge; self-loops dropped)."""
    keep = u != v
    lo = np.minimum(u[keep], v[keep]).astype(np.int64)
    return lo * n + np.maximum(u[keep], v[keep])


class RmatStream:
    r"""The random draws of :func:`rmat_graph`, in pieces: the stream of ``numpy.random.default_rng(seed)``
    (PCG64), each piece read where it lies in it. The stream holds, in order, the ``scale`` levels' ``float32``
    uniforms of all ``m = n·edge_factor`` edges (level by level; a ``float32`` is half of one 64-bit step, so the
    uniforms of edges ``e0:e1`` of level ``L`` start ``(L·m + e0)/2`` steps in, for even ``e0`` and ``m``, where
    PCG64's ``advance`` goes), then the vertex permutation, the features and the labels. So a piece of the edges
    is generated alone, in any order, and the pieces together are the graph whatever the piece size:
    :func:`rmat_graph` generates a piece of the edge list at a time, ``gridgnn shard`` spills the pieces to disk
    (:mod:`gridgnn.graph.stream`).

    Attributes: ``n``, ``m``, ``name`` and :func:`rmat_graph`'s arguments (checked)."""

    def __init__(self, scale, edge_factor=16, seed=0, features=16, classes=4):
        self.scale = _check_int("scale", scale, 1)
        if self.scale > 30:
            raise GridGnnError(f"scale must be at most 30, got {scale}")
        self.edge_factor = _check_int("edge_factor", edge_factor, 1)
        self.features = _check_int("features", features, 1)
        self.classes = _check_int("classes", classes, 1)
        self.seed = seed
        self.n = 1 << self.scale
        self.m = self.n * self.edge_factor  # even: every piece of even start begins on a whole 64-bit step
        self.name = f"rmat-s{self.scale}-e{self.edge_factor}"
        self._state = np.random.default_rng(seed).bit_generator.state

    def _at(self, steps: int) -> np.random.Generator:
        """A generator ``steps`` 64-bit draws into the stream."""
        bits = np.random.PCG64()
        bits.state = self._state
        bits.advance(int(steps))
        return np.random.Generator(bits)

    def permutation(self) -> tuple[np.ndarray, np.random.Generator]:
        """The vertex permutation (Graph500's scrambling of the ids) and the generator after it (the node data's)."""
        rng = self._at(self.scale * self.m // 2)
        return rng.permutation(self.n), rng

    def edges(self, e0: int, e1: int, perm: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Generated edges ``e0:e1`` (``e0`` even) as ``(source, destination)`` permuted vertex ids (``int64``): each
        of the ``scale`` levels picks a quadrant, most significant bit first."""
        if e0 % 2:
            raise ValueError("a piece of R-MAT edges starts at an even edge")
        src = np.zeros(e1 - e0, dtype=np.int32)  # scale ≤ 30
        dst = np.zeros(e1 - e0, dtype=np.int32)
        ab, abc = _RMAT_A + _RMAT_B, _RMAT_A + _RMAT_B + _RMAT_C
        for level in range(self.scale):
            r = self._at((level * self.m + e0) // 2).random(e1 - e0, dtype=np.float32)
            src <<= 1
            src |= r >= ab                                     # quadrants c, d
            dst <<= 1
            dst |= ((r >= _RMAT_A) & (r < ab)) | (r >= abc)    # quadrants b, d
            del r
        return perm[src], perm[dst]

    def node_bytes(self) -> int:
        """Bytes of :meth:`node_data`'s arrays: float32 features, int64 labels and three boolean masks per vertex
        (the features' float64 draws are made a bounded piece of rows at a time)."""
        return self.n * (4 * self.features + 8 + 3)

    def node_data(self, rng: np.random.Generator):
        """``(x, y, (train, val, test))``: i.i.d. standard Gaussian features, uniform labels, a 60/20/20 split
        (``rng``: the generator :meth:`permutation` handed back). The features are drawn a piece of rows at a time
        (the same draws as one call: a normal takes whole 64-bit steps), so their float64 draws never double them."""
        x = np.empty((self.n, self.features), np.float32)
        rows = max(1, RMAT_FEATURE_ELEMENTS // self.features)
        for r0 in range(0, self.n, rows):
            x[r0:r0 + rows] = rng.standard_normal((min(self.n, r0 + rows) - r0, self.features))
        y = rng.integers(0, self.classes, size=self.n).astype(np.int64)
        return x, y, default_split(self.n, y, self.seed)

    def meta(self) -> dict:
        """The graph's ``meta`` (the generator and its parameters)."""
        return dict(generator="rmat", scale=self.scale, edge_factor=self.edge_factor, seed=self.seed,
                    features=self.features, classes=self.classes, a=_RMAT_A, b=_RMAT_B, c=_RMAT_C,
                    d=1 - (_RMAT_A + _RMAT_B + _RMAT_C))
