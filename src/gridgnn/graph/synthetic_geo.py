r"""A random geometric graph whose vertex order follows space: the worst case for blocked layouts.

Road networks (``europe_osm`` in Plexus, Table 3) and meshes are *spatially local*: a vertex's neighbours are
close to it in space, and the file order usually follows space too, so nearly all nonzeros of the adjacency
lie in a narrow band around the diagonal. Cut into :math:`R \times C` blocks, only the diagonal blocks are
full, and the max/mean nnz over blocks is close to :math:`\min(R, C)` (Plexus measured 7.70 on 8×8 shards of
``europe_osm``). :func:`geometric_graph` reproduces that structure at any size, with no download.

Construction (vectorized; :class:`scipy.spatial.cKDTree` finds the pairs):

1. :math:`n` points uniform in the unit square.
2. Points are sorted along a Hilbert curve over a :math:`2^k \times 2^k` grid of cells (:math:`4^k \ge n`),
   ties (points in one cell) by their :math:`x` coordinate, so vertex ids follow space.
3. Every pair of points at distance :math:`\le r` becomes an undirected edge (no self-loops, no duplicates).
   The radius solves :math:`n\,\bigl(\pi r^2 - \tfrac{8}{3} r^3 + \tfrac12 r^4\bigr) = \bar d` — the expected
   degree of a uniform point in the unit square including the boundary loss — so the mean degree is
   :math:`\approx \bar d`.
"""
from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp

from ..errors import GridGnnError
from .graph import Graph
from .loaders import default_split

__all__ = ["geometric_graph", "hilbert_index", "geometric_radius"]


def hilbert_index(ix: np.ndarray, iy: np.ndarray, order: int) -> np.ndarray:
    r"""Position of the cells ``(ix, iy)`` along the Hilbert curve of a :math:`2^{\mathrm{order}}` grid.

    The classic bit-by-bit construction (rotate/flip the quadrant at each level), vectorized over all cells:
    consecutive indices are edge-adjacent cells, so sorting by it keeps neighbours close.

    Args:
        ix, iy: integer cell coordinates in ``0 .. 2**order - 1``.
        order: number of bits per coordinate (``0 <= order <= 31``).

    Returns:
        ``int64`` array of curve positions in ``0 .. 4**order - 1``.
    """
    x = np.asarray(ix, dtype=np.int64).copy()
    y = np.asarray(iy, dtype=np.int64).copy()
    d = np.zeros(x.shape, dtype=np.int64)
    side = 1 << order
    s = side >> 1
    while s > 0:
        rx = (x & s) > 0
        ry = (y & s) > 0
        d += s * s * ((3 * rx) ^ ry)
        # rotate the quadrant so that the sub-curve has the standard orientation
        flip = ~ry
        both = flip & rx
        x = np.where(both, side - 1 - x, x)
        y = np.where(both, side - 1 - y, y)
        x, y = np.where(flip, y, x), np.where(flip, x, y)
        s >>= 1
    return d


def geometric_radius(n: int, avg_degree: float) -> float:
    r"""Radius :math:`r` with expected degree :math:`\bar d` for :math:`n` uniform points in the unit square.

    Solves :math:`n(\pi r^2 - \tfrac83 r^3 + \tfrac12 r^4) = \bar d` by bisection on :math:`(0, 1]`; the left
    side is the mean area of a radius-:math:`r` disc clipped to the square, times :math:`n`.
    """
    target = avg_degree / n

    def area(r: float) -> float:
        return math.pi * r * r - 8.0 / 3.0 * r ** 3 + 0.5 * r ** 4

    lo, hi = 0.0, 1.0
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if area(mid) < target:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def geometric_graph(n: int = 100_000, avg_degree: float = 10.0, seed: int = 0, *, features: int = 16,
                    classes: int = 4, noise: float = 2.0) -> Graph:
    r"""Random geometric graph in the unit square, vertices numbered along a Hilbert curve.

    See the module docstring for the construction. Labels are the ``classes`` vertical strips of the square
    (:math:`y_v = \lfloor \mathrm{classes}\cdot p_{v,x} \rfloor`), so they are spatially homophilous;
    features are noisy class means :math:`x_v = \mu_{y_v} + \mathrm{noise}\cdot\varepsilon_v` with
    :math:`\mu_c, \varepsilon_v \sim \mathcal N(0, I)`; masks are a seeded 60/20/20 split.

    Args:
        n: number of vertices (default 100 000), at least 2.
        avg_degree: target mean degree :math:`\bar d` (default 10), ``0 < avg_degree < n - 1``.
        seed: seed of every random choice.
        features: feature dimension (default 16).
        classes: number of label strips (default 4).
        noise: feature noise relative to the unit-variance class means (default 2.0).

    Returns:
        An undirected :class:`~gridgnn.graph.graph.Graph` without self-loops, vertices in Hilbert order;
        ``meta`` holds the generator parameters and the radius.
    """
    if isinstance(n, bool) or int(n) != n or n < 2:
        raise GridGnnError(f"n must be an integer >= 2, got {n!r}")
    n = int(n)
    try:
        d = float(avg_degree)
    except (TypeError, ValueError):
        raise GridGnnError(f"avg_degree must be a number, got {avg_degree!r}") from None
    if not (math.isfinite(d) and 0 < d < n - 1):
        raise GridGnnError(f"avg_degree must be in (0, n-1) = (0, {n - 1}), got {avg_degree!r}")
    for name, v in (("features", features), ("classes", classes)):
        if isinstance(v, bool) or int(v) != v or v < 1:
            raise GridGnnError(f"{name} must be an integer >= 1, got {v!r}")
    from scipy.spatial import cKDTree

    rng = np.random.default_rng(seed)
    pts = rng.random((n, 2))
    order = max(1, math.ceil(math.log(n, 4)) + 1)  # cells hold fewer than one point on average
    cells = np.minimum((pts * (1 << order)).astype(np.int64), (1 << order) - 1)
    h = hilbert_index(cells[:, 0], cells[:, 1], order)
    pts = pts[np.lexsort((pts[:, 0], h))]
    r = geometric_radius(n, d)
    pairs = cKDTree(pts).query_pairs(r, output_type="ndarray").astype(np.int64)
    u, v = pairs[:, 0], pairs[:, 1]
    rows = np.concatenate([u, v])
    cols = np.concatenate([v, u])
    mat = sp.csr_matrix((np.ones(rows.size), (rows, cols)), shape=(n, n))
    mat.sum_duplicates()
    mat.sort_indices()
    k = int(classes)
    y = np.minimum((pts[:, 0] * k).astype(np.int64), k - 1)
    means = rng.standard_normal((k, int(features)))
    x = (means[y] + float(noise) * rng.standard_normal((n, int(features)))).astype(np.float32)
    train, val, test = default_split(n, y, seed)
    meta = dict(generator="geometric", n=n, avg_degree=d, radius=r, seed=seed, features=int(features),
                classes=k, order="hilbert")
    return Graph(indptr=mat.indptr, indices=mat.indices, values=None, n=n, directed=False, x=x, y=y,
                 train_mask=train, val_mask=val, test_mask=test, name=f"geometric-n{n}", meta=meta)
