r"""Vertex permutations that spread the nonzeros of the adjacency evenly over the blocks of a 2D/3D grid.

Paper: Ranjan et al., *Plexus: Taming Billion-edge Graphs with 3D Parallel Full-graph GNN Training*, §5.1
("Double Permutation for Load Balancing") and Table 3.

In a 2D (or the 2D planes of a 3D / Plexus) layout the :math:`n \times n` aggregation matrix :math:`M` is cut
into :math:`R \times C` blocks by the row bounds ``even_bounds(n, R)`` and the column bounds
``even_bounds(n, C)``; the SpMM time of a layer is set by the block with the most nonzeros, so the measure of
quality is

.. math::

    \rho = \frac{\max_{a,b} \mathrm{nnz}(B_{ab})}{\operatorname{mean}_{a,b} \mathrm{nnz}(B_{ab})} \ \ge 1 .

Permutations follow the convention of :class:`~gridgnn.partition.layout.RowPartition`: ``perm[new] = old``.
The permuted matrix :math:`P_r M P_c^\mathsf{T}` has entries :math:`(P_r M P_c^\mathsf{T})_{ab} =
M_{\mathrm{perm}_r[a],\,\mathrm{perm}_c[b]}`.

Methods (:data:`METHODS`):

* ``identity`` — the original order. Spatially ordered graphs (road networks, meshes) put almost every
  nonzero in the diagonal blocks: :math:`\rho \approx \min(R, C)`.
* ``single-perm`` — one random :math:`P`, used for rows and columns: :math:`P M P^\mathsf{T}`. The diagonal of
  :math:`\hat M = D^{-1/2}(M+I)D^{-1/2}` (the self-loops, :math:`n` of the :math:`n(\bar d + 1)` nonzeros)
  stays in the diagonal blocks, so :math:`\rho` stays well above 1 on sparse graphs (Plexus Table 3: 3.24 on
  ``europe_osm``, :math:`\bar d \approx 2`; a geometric graph with :math:`\bar d = 2.1` gives 3.28 on
  :math:`\hat M` but 1.03 on :math:`M`).
* ``double-perm`` — two independent random permutations (Plexus):
  layer :math:`\ell` even uses :math:`P_r M P_c^\mathsf{T}` (input rows in :math:`P_c` order, output rows in
  :math:`P_r` order), layer :math:`\ell` odd uses :math:`P_c M P_r^\mathsf{T}`, so the output order of each
  layer is the input order of the next:

  .. math::

      F_1 = \sigma\bigl((P_r M P_c^\mathsf{T})(P_c F_0) W_0\bigr), \qquad
      F_2 = \sigma\bigl((P_c M P_r^\mathsf{T}) F_1 W_1\bigr).

  Row and column of every nonzero land in independent uniformly random blocks; :math:`\rho \to 1`
  (Plexus: 1.001 on ``europe_osm``). Two versions of the matrix are stored.
* ``balanced-perm`` (beyond Plexus) — row and column permutations that assign vertices to row blocks and
  column blocks largest-nnz-first to the least-loaded block (equal block sizes): the classic LPT greedy, so
  every row band and every column band holds almost exactly :math:`\mathrm{nnz}/R` (resp. :math:`/C`)
  nonzeros. On skewed graphs (R-MAT) a few hub rows make the random row bands of ``double-perm`` uneven
  (:math:`\rho \approx 1.18` at scale 16 on 8×8); balancing the bands brings it to :math:`\approx 1.016`
  (``docs/benchmarks.md``).

Which matrix to measure: the one that is multiplied, :math:`\hat M` (:func:`~gridgnn.graph.graph.gcn_normalize`,
with self-loops) — its diagonal is what keeps ``single-perm`` imbalanced. The functions accept any square
SciPy matrix or a :class:`~gridgnn.graph.graph.Graph` (then :math:`M` without self-loops).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..errors import GridGnnError
from .layout import even_bounds

__all__ = ["METHODS", "single_permutation", "double_permutation", "balanced_permutation", "make_permutations",
           "inverse_permutation", "check_permutation", "permute_matrix", "block_nnz", "nnz_max_over_mean",
           "nnz_max_over_mean_used", "balance_report"]

#: Permutation methods of :func:`make_permutations` (``gridgnn shard --method``, ``gridgnn partition --method``).
METHODS = ("identity", "single-perm", "double-perm", "balanced-perm")


# ---------------------------------------------------------------------------------------------- helpers
def _csr(mat) -> sp.csr_matrix:
    if hasattr(mat, "csr") and callable(mat.csr):
        mat = mat.csr()
    if not sp.issparse(mat):
        raise GridGnnError(f"expected a gridgnn Graph or a SciPy sparse matrix, got {type(mat).__name__}")
    mat = sp.csr_matrix(mat)
    if mat.shape[0] != mat.shape[1]:
        raise GridGnnError(f"adjacency must be square, got {mat.shape[0]}×{mat.shape[1]}")
    return mat


def _check_n(n) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise GridGnnError(f"number of vertices must be a positive integer, got {n!r}")
    return int(n)


def _check_blocks(blocks, n: int, what: str) -> int:
    if isinstance(blocks, bool) or not isinstance(blocks, (int, np.integer)) or blocks < 1:
        raise GridGnnError(f"number of {what} blocks must be a positive integer, got {blocks!r}")
    if blocks > n:
        raise GridGnnError(f"{blocks} {what} blocks for only {n} vertices (at most one block per vertex)")
    return int(blocks)


def _bounds(spec, n: int, what: str) -> np.ndarray:
    """Block bounds from a count (``even_bounds``) or an explicit ``[0, ..., n]`` array."""
    if isinstance(spec, (int, np.integer)) and not isinstance(spec, bool):
        return even_bounds(n, _check_blocks(spec, n, what))
    b = np.asarray(spec, dtype=np.int64).reshape(-1)
    if b.size < 2 or b[0] != 0 or b[-1] != n or np.any(np.diff(b) < 0):
        raise GridGnnError(f"{what} bounds must rise from 0 to n={n}, got {b.tolist()[:8]}"
                           f"{' ...' if b.size > 8 else ''}")
    return b


def check_permutation(perm, n: int, what: str = "permutation") -> np.ndarray:
    """Return ``perm`` as ``int64[n]`` after checking it is a permutation of ``0..n-1``.

    Raises:
        GridGnnError: wrong length, an id out of range or a repeated id (naming it).
    """
    p = np.asarray(perm)
    if p.ndim != 1 or p.size != n:
        raise GridGnnError(f"{what} has shape {p.shape}, expected ({n},)")
    if p.size and not np.issubdtype(p.dtype, np.integer):
        raise GridGnnError(f"{what} must hold integer vertex ids, got dtype {p.dtype}")
    p = p.astype(np.int64, copy=False)
    if p.size and (p.min() < 0 or p.max() >= n):
        bad = p[(p < 0) | (p >= n)][0]
        raise GridGnnError(f"{what} names vertex {int(bad)}, valid ids are 0..{n - 1}")
    counts = np.bincount(p, minlength=n)
    if np.any(counts != 1):
        raise GridGnnError(f"{what} is not a permutation: vertex {int(np.flatnonzero(counts != 1)[0])} appears "
                           f"{int(counts[counts != 1][0])} times")
    return p


def inverse_permutation(perm: np.ndarray) -> np.ndarray:
    """``inv`` with ``inv[perm[k]] = k`` (``inv[old] = new``)."""
    perm = np.asarray(perm, dtype=np.int64)
    inv = np.empty_like(perm)
    inv[perm] = np.arange(perm.size, dtype=np.int64)
    return inv


def permute_matrix(mat, perm_r: np.ndarray, perm_c: np.ndarray) -> sp.csr_matrix:
    r""":math:`P_r M P_c^\mathsf{T}` in the new labels: entry :math:`(a, b) = M_{\mathrm{perm}_r[a],
    \mathrm{perm}_c[b]}` (CSR, sorted indices, no explicit copies of the dense structure).

    Rows are gathered in ``perm_r`` order and column ids relabeled by :math:`\mathrm{perm}_c^{-1}`, which is
    :math:`O(\mathrm{nnz})` plus one sort of each row.
    """
    mat = _csr(mat)
    n = mat.shape[0]
    perm_r = np.asarray(perm_r, dtype=np.int64)
    perm_c = np.asarray(perm_c, dtype=np.int64)
    out = mat[perm_r]
    inv_c = inverse_permutation(perm_c)
    out = sp.csr_matrix((out.data, inv_c[out.indices], out.indptr), shape=(n, n))
    out.sort_indices()
    return out


# ---------------------------------------------------------------------------------------------- permutations
def single_permutation(n: int, seed: int = 0) -> np.ndarray:
    r"""A uniformly random permutation ``perm[new] = old`` (Plexus §5.1, :math:`P M P^\mathsf{T}`).

    Args:
        n: number of vertices.
        seed: seed of ``numpy.random.default_rng``.

    Returns:
        ``int64[n]``.
    """
    n = _check_n(n)
    return np.random.default_rng(seed).permutation(n).astype(np.int64)


def double_permutation(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    r"""Two independent uniformly random permutations :math:`(P_r, P_c)` (Plexus §5.1, double permutation).

    They come from two independent streams spawned from ``seed`` (:class:`numpy.random.SeedSequence`), and are
    guaranteed distinct for :math:`n \ge 2` (a collision, possible only for tiny :math:`n`, draws
    :math:`P_c` again).

    Returns:
        ``(perm_r, perm_c)``, each ``int64[n]`` with ``perm[new] = old``.
    """
    n = _check_n(n)
    ss_r, ss_c = np.random.SeedSequence(seed).spawn(2)
    perm_r = np.random.default_rng(ss_r).permutation(n).astype(np.int64)
    rng_c = np.random.default_rng(ss_c)
    perm_c = rng_c.permutation(n).astype(np.int64)
    while n >= 2 and np.array_equal(perm_r, perm_c):
        perm_c = rng_c.permutation(n).astype(np.int64)
    return perm_r, perm_c


def _lpt_assign(weights: np.ndarray, caps: np.ndarray, order: np.ndarray) -> np.ndarray:
    r"""Greedy LPT with capacities: visit vertices in ``order``; each goes to the block of least load (ties:
    lowest block id) that still has room. Returns the block of every vertex.

    Exactly equivalent to the heap formulation (pop the least-loaded block, push it back while it has room),
    but vectorized over runs of equal weight: :math:`k` consecutive items of weight :math:`w` are placed at the
    :math:`k` smallest keys :math:`(\ell_b + t w,\ b)`, :math:`0 \le t < \mathrm{room}_b`, of the merged
    per-block sequences (found by bisection on the key threshold), which is the order in which repeated pops
    would place them. The number of runs is the number of distinct weights, :math:`O(\sqrt{\mathrm{nnz}})`.
    """
    nb = caps.size
    load = np.zeros(nb, dtype=np.int64)
    room = caps.astype(np.int64).copy()
    block = np.empty(weights.size, dtype=np.int64)
    w_sorted = weights[order]
    # runs of equal weight in visiting order
    starts = np.flatnonzero(np.concatenate([[True], w_sorted[1:] != w_sorted[:-1]])) if w_sorted.size else []
    ends = np.concatenate([starts[1:], [w_sorted.size]]) if w_sorted.size else []
    ids = np.arange(nb, dtype=np.int64)
    for s, e in zip(starts, ends):
        s, e = int(s), int(e)
        k = e - s
        w = int(w_sorted[s])
        if k <= 4:  # short run: direct pops
            for i in range(s, e):
                cand = np.where(room > 0, load, np.iinfo(np.int64).max)
                b = int(np.argmin(cand))
                block[order[i]] = b
                load[b] += w
                room[b] -= 1
            continue
        if w == 0:
            # constant keys: the least-loaded block (then lowest id) fills up before the next one
            picks = []
            for b in np.lexsort((ids, load)):
                if room[b] > 0 and len(picks) < k:
                    take = min(int(room[b]), k - len(picks))
                    picks.extend([b] * take)
                    room[b] -= take
            block[order[s:e]] = np.asarray(picks, dtype=np.int64)
            continue

        def count_below(T: int) -> np.ndarray:  # items of each block with key < T
            c = -((load - T) // w)  # ceil((T - load) / w)
            return np.clip(c, 0, room)

        # smallest U with count_below(U) >= k; then the k-th smallest key is T = U - 1
        lo = int(load[room > 0].min())          # count_below(lo) == 0 < k
        hi = int(load.max()) + k * w + 1        # count_below(hi) >= k (the rooms add up to >= k)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if int(count_below(mid).sum()) >= k:
                hi = mid
            else:
                lo = mid
        T = hi - 1
        cnt = count_below(T)                    # every key < T is taken
        rest = k - int(cnt.sum())
        if rest > 0:  # then keys equal to T, at most one per block, lowest block id first
            t = (T - load) // w
            eq = (load <= T) & ((T - load) % w == 0) & (t < room) & (t == cnt)
            extra = np.flatnonzero(eq)[:rest]
            cnt[extra] += 1
        # the pick sequence: keys (load_b + t w, b) in lexicographic order
        pb = np.repeat(ids, cnt)
        pt = np.arange(pb.size) - np.repeat(np.cumsum(cnt) - cnt, cnt)
        keys = load[pb] + pt * w
        seq = pb[np.lexsort((pb, keys))]
        block[order[s:e]] = seq
        load += cnt * w
        room -= cnt
    return block


def _balanced_side(weights: np.ndarray, blocks: int, rng: np.random.Generator) -> np.ndarray:
    n = weights.size
    caps = np.diff(even_bounds(n, blocks))
    tie = rng.permutation(n)
    order = np.lexsort((tie, -weights))           # nnz descending, ties in seeded random order
    block = _lpt_assign(weights, caps, order)
    within = rng.permutation(n)                   # random order inside each block
    return np.lexsort((within, block)).astype(np.int64)


def balanced_permutation(mat, row_blocks: int, col_blocks: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    r"""balanced-perm (beyond Plexus): row and column permutations that assign vertices to row blocks and
    column blocks largest-nnz-first to the least-loaded block (equal block sizes).

    Rows: vertices are visited by row nnz :math:`r_v = |\{j : M_{vj} \ne 0\}|` descending (ties in a seeded
    random order) and each goes to the row block of least load :math:`\sum_{v \in a} r_v` among those that
    still have room; block :math:`a` holds exactly ``even_bounds(n, row_blocks)`` sizes (equal up to one).
    Columns: the same with column nnz :math:`c_v` and ``col_blocks``, from an independent random stream, so
    :math:`P_r \ne P_c` even for a symmetric :math:`M`. Without the size constraint LPT keeps every band's
    load within one vertex's nnz of the others (:math:`\max_a L_a - \min_a L_a \le \max_v r_v`); with equal
    sizes the light vertices that come last fill the gaps, so the row bands of :math:`P_r M P_c^\mathsf{T}`
    come out nearly equal, and the columns of each band spread over the (equally balanced) column bands.

    The permutation lists block 0's vertices first, then block 1's, …; inside a block the order is random
    (seeded), so sub-blocking a block (Plexus §5.2 blocked aggregation) stays balanced too.

    The "cr" version :math:`P_c M P_r^\mathsf{T}` (odd layers) is balanced by the same argument when
    :math:`M` is symmetric and ``row_blocks == col_blocks`` (then it is the transpose of the "rc" version).

    Args:
        mat: the :math:`n \times n` matrix (SciPy sparse or :class:`~gridgnn.graph.graph.Graph`); only its
            pattern counts. Pass :math:`\hat M` (with self-loops) to balance what is multiplied.
        row_blocks, col_blocks: :math:`R` and :math:`C`.
        seed: seed of tie-breaking and of the order inside blocks.

    Returns:
        ``(perm_r, perm_c)``, ``int64[n]`` each, ``perm[new] = old``.

    Cost: :math:`O(\mathrm{nnz} + n \log n)` time; the greedy is vectorized over runs of equal nnz.
    """
    mat = _csr(mat)
    n = mat.shape[0]
    row_blocks = _check_blocks(row_blocks, n, "row")
    col_blocks = _check_blocks(col_blocks, n, "column")
    row_nnz = np.diff(mat.indptr).astype(np.int64)
    col_nnz = np.bincount(mat.indices, minlength=n).astype(np.int64)
    ss_r, ss_c = np.random.SeedSequence(seed).spawn(2)
    perm_r = _balanced_side(row_nnz, row_blocks, np.random.default_rng(ss_r))
    perm_c = _balanced_side(col_nnz, col_blocks, np.random.default_rng(ss_c))
    return perm_r, perm_c


def make_permutations(method: str, mat, row_blocks: int, col_blocks: int, seed: int = 0
                      ) -> tuple[np.ndarray, np.ndarray]:
    r"""``(perm_r, perm_c)`` of a method in :data:`METHODS` (``identity`` and ``single-perm`` return the same
    array twice, so that the two matrix versions coincide).

    Raises:
        GridGnnError: unknown method (listing the valid ones).
    """
    if method == "balanced-perm":
        return balanced_permutation(_csr(mat), row_blocks, col_blocks, seed)
    return permutations_of_size(method, _csr(mat).shape[0], seed)


#: the methods whose permutations depend on the vertex count and the seed alone (not on the matrix)
SIZE_ONLY_METHODS = ("identity", "single-perm", "double-perm")


def size_only_versions(method: str) -> int:
    """The matrix versions a dataset of a :data:`SIZE_ONLY_METHODS` method holds: 1 where its two permutations are
    one (``identity``, ``single-perm``), 2 for ``double-perm`` (what :func:`permutations_of_size` returns, known
    before the permutations are made)."""
    return 2 if method == "double-perm" else 1


def permutations_of_size(method: str, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """:func:`make_permutations` of a method of :data:`SIZE_ONLY_METHODS`, from the vertex count alone (what a
    graph sharded in passes knows before it has read its matrix)."""
    if method == "identity":
        p = np.arange(n, dtype=np.int64)
        return p, p
    if method == "single-perm":
        p = single_permutation(n, seed)
        return p, p
    if method == "double-perm":
        return double_permutation(n, seed)
    if method in METHODS:
        raise GridGnnError(f"the {method} permutation reads the matrix; with the graph sharded in passes use one "
                           f"of {', '.join(SIZE_ONLY_METHODS)}")
    raise GridGnnError(f"unknown permutation method {method!r}; valid: {', '.join(METHODS)}")


# ---------------------------------------------------------------------------------------------- balance
def block_nnz(mat, perm_r, perm_c, row_bounds, col_bounds) -> np.ndarray:
    r"""Nonzeros of every block of :math:`P_r M P_c^\mathsf{T}`.

    A nonzero :math:`M_{ij}` moves to :math:`(\mathrm{perm}_r^{-1}[i], \mathrm{perm}_c^{-1}[j])`; its block is
    found by a binary search in the bounds and all blocks are counted with one ``bincount`` (no permuted copy
    of :math:`M` is built).

    Args:
        mat: :math:`n \times n` SciPy sparse matrix or :class:`~gridgnn.graph.graph.Graph`.
        perm_r, perm_c: ``int[n]``, ``perm[new] = old`` (``None``: the matrix's own order).
        row_bounds, col_bounds: block bounds ``[0, ..., n]`` or block counts (then ``even_bounds``).

    Returns:
        ``int64[R, C]``.
    """
    mat = _csr(mat)
    n = mat.shape[0]
    rb = _bounds(row_bounds, n, "row")
    cb = _bounds(col_bounds, n, "column")
    R, C = rb.size - 1, cb.size - 1
    # block of every original vertex as a row / as a column
    row_block = np.searchsorted(rb, np.arange(n), side="right") - 1
    if perm_r is not None:
        row_block[check_permutation(perm_r, n, "perm_r")] = row_block.copy()
    col_block = np.searchsorted(cb, np.arange(n), side="right") - 1
    if perm_c is not None:
        col_block[check_permutation(perm_c, n, "perm_c")] = col_block.copy()
    mat.sum_duplicates()
    key = np.repeat(row_block * C, np.diff(mat.indptr)) + col_block[mat.indices]
    return np.bincount(key, minlength=R * C).astype(np.int64).reshape(R, C)


def _ratio(counts: np.ndarray) -> float:
    mean = float(counts.mean())
    return float(counts.max()) / mean if mean > 0 else 1.0


def nnz_max_over_mean(mat, perm_r, perm_c, row_bounds, col_bounds) -> float:
    r""":math:`\max_{ab} \mathrm{nnz}(B_{ab}) / \operatorname{mean}_{ab} \mathrm{nnz}(B_{ab})` of
    :func:`block_nnz` (1.0 for a matrix without nonzeros)."""
    return _ratio(block_nnz(mat, perm_r, perm_c, row_bounds, col_bounds))


def nnz_max_over_mean_used(mat, perm_r, perm_c, row_blocks, col_blocks) -> float:
    r"""Max/mean nnz over the blocks of **both** matrix versions that training multiplies.

    With double (or balanced) permutation the layers alternate (Plexus §5.1): even layers use
    :math:`P_r M P_c^\mathsf{T}` ("rc"), odd layers :math:`P_c M P_r^\mathsf{T}` ("cr"), both cut into the same
    :math:`R \times C` blocks (``row_blocks``/``col_blocks`` counts or bounds). This returns

    .. math::

        \rho_\mathrm{used} = \frac{\max\bigl(\max_{ab} \mathrm{nnz}(B^{rc}_{ab}),\ \max_{ab}
        \mathrm{nnz}(B^{cr}_{ab})\bigr)}{\operatorname{mean}\bigl(\{\mathrm{nnz}(B^{rc}_{ab})\} \cup
        \{\mathrm{nnz}(B^{cr}_{ab})\}\bigr)},

    the max over the union of the :math:`2RC` blocks divided by their mean (both versions have the same nnz,
    so the mean is :math:`\mathrm{nnz}/(RC)`). When ``perm_r`` equals ``perm_c`` (identity, single-perm) the two
    versions are the same matrix and this is :func:`nnz_max_over_mean`.
    """
    mat = _csr(mat)
    rc = block_nnz(mat, perm_r, perm_c, row_blocks, col_blocks)
    if np.array_equal(np.asarray(perm_r), np.asarray(perm_c)):
        return _ratio(rc)
    cr = block_nnz(mat, perm_c, perm_r, row_blocks, col_blocks)
    return _ratio(np.concatenate([rc.reshape(-1), cr.reshape(-1)]))


def balance_report(mat, perm_r, perm_c, row_blocks, col_blocks) -> dict:
    """``nnz_max_over_mean`` (the used value, see :func:`nnz_max_over_mean_used`) and the per-version values
    ``nnz_max_over_mean_rc`` / ``nnz_max_over_mean_cr`` plus ``max_block_nnz`` and ``mean_block_nnz``."""
    mat = _csr(mat)
    rc = block_nnz(mat, perm_r, perm_c, row_blocks, col_blocks)
    same = np.array_equal(np.asarray(perm_r), np.asarray(perm_c))
    cr = rc if same else block_nnz(mat, perm_c, perm_r, row_blocks, col_blocks)
    both = np.concatenate([rc.reshape(-1), cr.reshape(-1)])
    return dict(nnz_max_over_mean=_ratio(both), nnz_max_over_mean_rc=_ratio(rc), nnz_max_over_mean_cr=_ratio(cr),
                max_block_nnz=int(both.max()), mean_block_nnz=float(both.mean()), versions=1 if same else 2)
