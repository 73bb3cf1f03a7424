r"""Minibatch sampling as sparse matrix products (MLSys'24 §4, Algorithm 1), for ``k`` minibatches at once (§4.1.4,
§4.2.4).

For each hop from the batch outwards (Algorithm 1, ``l = L … 1``):

1. ``P ← Q A`` (SciPy CSR SpGEMM; ``A`` is the graph's pattern with rows = destinations, so row ``v`` of ``A``
   lists the vertices ``v`` aggregates from). GraphSAGE: ``Q`` has one row per frontier vertex (a 1 in its
   column), so row ``r`` of ``P`` is the neighbourhood of frontier vertex ``r``. LADIES: ``Q`` has one row per
   minibatch (1s at its frontier), so :math:`P_{iv} = e_v`, the number of the frontier's edges from ``v``.
2. ``NORM(P)``: GraphSAGE divides each row by its sum (:math:`1/\deg`); LADIES squares first,
   :math:`p_v = e_v^2 / \sum_u e_u^2` (the paper's Figure 1 example: ``[1/7, 0, 1/7, 1/7, 4/7, 0]``).
3. ``SAMPLE``: ``s`` distinct columns per row drawn without replacement from the row's distribution — exactly,
   as successive draws with redraw-until-distinct would (the paper's inverse-transform procedure), by the
   equivalent one-pass rule of Efraimidis and Spirakis: each candidate ``v`` gets the key
   :math:`\log(u_v) / p_v` and the ``s`` largest keys win (GraphSAGE's candidates of a row weigh the same, so
   there the ``s`` largest ``u_v`` win: no logarithm). A row with at most ``s`` candidates keeps them all
   (``min(s, deg)`` neighbours); ``s = -1`` keeps every neighbour.
4. ``EXTRACT``: the layer's block, ``rows`` = the frontier, ``columns`` = the next frontier: the frontier itself
   first (so a layer with a root term reads its targets' own rows, as PyG's samplers order them), then the newly
   sampled vertices by id. GraphSAGE: the sampled entries, weight ``1 / (sampled count of the row)`` (the mean
   over the sample). LADIES: :math:`Q_R A Q_C` — the frontier's edges to the sampled vertices — weighted by
   :math:`1 / p_v` and row-normalized (LADIES' debiasing; the paper is silent on it).

**Randomness.** The uniform :math:`u_v` of a candidate is a keyed hash of (seed, epoch, hop, minibatch index,
row vertex, ``v``) (:mod:`gridgnn.ops.hashing`; the selection runs as a row-parallel numba kernel,
:func:`gridgnn.ops.kernels.top_per_row`, with :func:`top_per_row_reference` its NumPy reference), so the sample of a minibatch is the same whether it is drawn
alone or in a bulk of ``k``, on whichever rank, for any number of processes.

**Bulk.** ``k`` minibatches are stacked: ``Q`` has the rows of all of them and one SpGEMM serves all. The
blocks are block diagonal over minibatches; LADIES' column extraction (the paper's block-diagonal
``diag(A_R1 … A_Rk) · [Q_C1; …; Q_Ck]``) is done without the ``kn``-row selection matrix: each entry's
(minibatch, column) key is looked up in the sorted keys of the sampled set — the same product in
``O(nnz log nnz)`` and no ``k·n`` array, which is what lets LADIES run more than one layer.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ..errors import GridGnnError
from ..ops import kernels
from ..ops.hashing import chain, mix, open_uniform

SAMPLERS = ("sage", "ladies")


@dataclass
class BulkSample:
    r"""The samples of ``k`` minibatches, stacked.

    Attributes:
        sampler: ``"sage"`` or ``"ladies"``.
        batch_ids: ``int64[k]``: the index of each stacked minibatch in its epoch.
        nodes: ``L + 1`` arrays of global vertex ids: ``nodes[L]`` the minibatches' target vertices,
            ``nodes[0]`` the input frontier whose features a forward pass reads; minibatch ``i`` holds
            ``nodes[l][ptr[l][i]:ptr[l][i + 1]]``, its targets first.
        ptr: ``L + 1`` arrays of ``k + 1`` offsets into ``nodes[l]``.
        blocks: ``L`` CSR matrices; ``blocks[l]`` is ``len(nodes[l + 1]) × len(nodes[l])`` (rows = destinations,
            the weights of the aggregation from layer ``l`` to ``l + 1``), block diagonal over minibatches.
    """

    sampler: str
    batch_ids: np.ndarray
    nodes: list
    ptr: list
    blocks: list

    @property
    def k(self) -> int:
        return int(len(self.batch_ids))

    @property
    def num_layers(self) -> int:
        return len(self.blocks)

    def batch(self, i: int) -> "BulkSample":
        """Minibatch ``i`` of the stack as a sample of its own (``k = 1``)."""
        return self.subset(i, i + 1)

    def subset(self, i0: int, i1: int) -> "BulkSample":
        """Minibatches ``i0 … i1 − 1`` of the stack, stacked."""
        nodes = [v[p[i0]:p[i1]] for v, p in zip(self.nodes, self.ptr)]
        ptr = [p[i0:i1 + 1] - p[i0] for p in self.ptr]
        blocks = [sp.csr_matrix(b[self.ptr[l + 1][i0]:self.ptr[l + 1][i1], self.ptr[l][i0]:self.ptr[l][i1]])
                  for l, b in enumerate(self.blocks)]
        return BulkSample(self.sampler, self.batch_ids[i0:i1].copy(), nodes, ptr, blocks)


def minibatches(vertices: np.ndarray, batch_size: int, *, seed: int = 0, epoch: int = 0) -> list[np.ndarray]:
    """``vertices`` in a keyed random order of ``(seed, epoch)``, cut into minibatches of ``batch_size`` (the last
    one may be smaller; none is dropped)."""
    if batch_size < 1:
        raise GridGnnError(f"--batch-size must be at least 1 (got {batch_size})")
    v = np.asarray(vertices, dtype=np.int64)
    order = np.argsort(chain(int(seed), int(epoch), 0x5A3D, v), kind="stable")
    v = v[order]
    return [v[i:i + batch_size] for i in range(0, len(v), batch_size)]


def _pattern(adj: sp.spmatrix) -> sp.csr_matrix:
    a = sp.csr_matrix(adj, dtype=np.float64, copy=True)
    a.sum_duplicates()
    a.data[:] = 1.0
    a.sort_indices()
    return a


def _selection(rows: np.ndarray, cols: np.ndarray, shape) -> sp.csr_matrix:
    return sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=shape)


def _stack(batches) -> tuple[np.ndarray, np.ndarray]:
    sizes = [len(b) for b in batches]
    ptr = np.zeros(len(sizes) + 1, dtype=np.int64)
    ptr[1:] = np.cumsum(sizes)
    nodes = np.concatenate([np.asarray(b, dtype=np.int64) for b in batches]) if batches else np.zeros(0, np.int64)
    return nodes, ptr


def layer_probabilities(adj: sp.spmatrix, frontiers: list[np.ndarray], sampler: str) -> sp.csr_matrix:
    """Steps 1–2 of Algorithm 1 for stacked frontiers: ``NORM(Q A)`` (GraphSAGE: one row per frontier vertex;
    LADIES: one row per frontier)."""
    a = _pattern(adj)
    nodes, ptr = _stack(frontiers)
    return _probabilities(local_product(a), a.shape[0], nodes, ptr, sampler)[0]


def local_product(a: sp.csr_matrix):
    """``Q ↦ Q A`` with the whole pattern ``a`` at hand (SciPy's SpGEMM)."""
    def product(q: sp.csr_matrix) -> sp.csr_matrix:
        return sp.csr_matrix(q @ a)
    return product


def frontier_rows(nodes: np.ndarray, ptr: np.ndarray, n: int, sampler: str) -> sp.csr_matrix:
    """``Q``: GraphSAGE — one row per frontier vertex (a 1 in its column); LADIES — one row per minibatch
    (1s at its frontier)."""
    if sampler == "sage":
        return _selection(np.arange(len(nodes)), nodes, (len(nodes), n))
    owner = np.repeat(np.arange(len(ptr) - 1, dtype=np.int64), np.diff(ptr))
    return _selection(owner, nodes, (len(ptr) - 1, n))


def _probabilities(product, n: int, nodes: np.ndarray, ptr: np.ndarray, sampler: str):
    """``(NORM(Q A), the row of each of its entries)``."""
    p = product(frontier_rows(nodes, ptr, n, sampler))  # SpGEMM: P = Q A
    p.sort_indices()
    rows = np.repeat(np.arange(p.shape[0], dtype=np.int64), np.diff(p.indptr))
    if sampler == "ladies":
        p.data = p.data ** 2
    sums = np.asarray(p.sum(axis=1)).reshape(-1)
    p.data = p.data / sums[rows]
    return p, rows


def sample_bulk(adj: sp.spmatrix | None, batches: list[np.ndarray], fanouts: list[int], *, sampler: str = "sage",
                seed: int = 0, epoch: int = 0, batch_ids=None, product=None, n: int | None = None,
                sage_rows=None) -> BulkSample:
    """Sample ``len(fanouts)`` layers for each minibatch of ``batches`` (lists of distinct global vertex ids),
    all at once.

    Args:
        adj: ``n × n`` graph, rows = destinations (its values are ignored: the pattern is sampled).
        fanouts: per hop from the batch outwards (PyG's order: ``[15, 10, 5]`` samples 15 neighbours of each
            batch vertex first): GraphSAGE — neighbours per frontier vertex; LADIES — vertices per minibatch and
            layer. ``-1``: all.
        batch_ids: index of each minibatch in the epoch (keys its randomness; default ``0 … k−1``).
        product: ``Q ↦ Q A`` (binary ``A``, CSR): a distributed SpGEMM (:mod:`gridgnn.sampling.distributed`)
            in place of ``adj``, with ``n`` its order. Every rank of such a product calls it the same number of
            times (once per hop, once more per LADIES hop for the row extraction), whatever its minibatches.
        sage_rows: GraphSAGE only — ``(frontier, row keys, s) ↦ (rows, columns)`` of the kept entries of ``Q A``
            in row, then column order (what :func:`sample_rows` returns for the whole pattern), used instead
            of ``product``: each row of ``Q A`` is one row of ``A``, sampled where it is read (a distributed one:
            :meth:`gridgnn.sampling.distributed.PartitionedPattern.sage_rows`). Default: with ``adj``, the rows of
            ``A`` read in place; with ``product`` only, the rows of ``Q A`` it forms.
    """
    if sampler not in SAMPLERS:
        raise GridGnnError(f"--sampler must be one of {', '.join(SAMPLERS)} (got {sampler!r})")
    if not fanouts or any(int(s) == 0 or int(s) < -1 for s in fanouts):
        raise GridGnnError(f"--fanout needs positive sizes or -1 (all) for every layer (got {list(fanouts)})")
    if product is None:
        a = _pattern(adj)
        n, product = a.shape[0], local_product(a)
        if sampler == "sage" and sage_rows is None:
            sage_rows = local_sage_rows(a)  # GraphSAGE's rows of Q A read in place (no SpGEMM needed)
    if sampler == "sage" and sage_rows is None:
        sage_rows = product_sage_rows(product, n)
    k = len(batches)
    ids = np.arange(k, dtype=np.int64) if batch_ids is None else np.asarray(batch_ids, dtype=np.int64)
    nodes, ptr = _stack(batches)
    if nodes.size and (nodes.min() < 0 or nodes.max() >= n):
        raise GridGnnError(f"minibatch vertices must lie in [0, {n})")
    out_nodes, out_ptr, out_blocks = [nodes], [ptr], []
    for hop, s in enumerate(fanouts):
        owner = np.repeat(np.arange(k, dtype=np.int64), np.diff(ptr))
        row_batch = owner if sampler == "sage" else np.arange(k, dtype=np.int64)
        row_vertex = nodes if sampler == "sage" else np.zeros(k, dtype=np.int64)
        row_keys = chain(int(seed), int(epoch), hop + 1, ids[row_batch], row_vertex)  # one key per row of P
        if sampler == "sage":  # Q selects one vertex per row: Q A is those rows of A
            r, c = sage_rows(nodes, row_keys, int(s))
            r, cols, vals, nxt, nptr = _extract_sage(nodes, ptr, owner, r, c, n)
        else:
            p, rows = _probabilities(product, n, nodes, ptr, sampler)
            keep = top_per_row(p, rows, int(s), row_keys)
            sure = np.diff(p.indptr) <= s if s >= 0 else np.ones(p.shape[0], dtype=bool)
            if sure.any():  # every candidate of the row kept, each surely: its debiasing weight 1/p is 1 (the plain
                p.data[sure[rows]] = 1.0  # mean, exact), whether by -1 or by a fanout at or past the candidates
            extract = _extract_ladies if kernels.enabled() else _extract_ladies_reference
            r, cols, vals, nxt, nptr = extract(product, nodes, ptr, owner, p, rows, keep, n)
        indptr = np.zeros(len(nodes) + 1, dtype=np.int64)
        indptr[1:] = np.cumsum(np.bincount(r, minlength=len(nodes)))  # r is in row order, no entry twice
        block = sp.csr_matrix((vals, cols, indptr), shape=(len(nodes), len(nxt)))
        block.sort_indices()
        out_blocks.append(block)
        nodes, ptr = nxt, nptr
        out_nodes.append(nodes)
        out_ptr.append(ptr)
    return BulkSample(sampler, ids, out_nodes[::-1], out_ptr[::-1], out_blocks[::-1])


def local_sage_rows(a: sp.csr_matrix):
    """``(frontier, row keys, s) ↦`` :func:`sample_rows` of the pattern ``a`` at hand."""
    def rows(nodes: np.ndarray, row_keys: np.ndarray, s: int):
        return sample_rows(a.indptr, a.indices, nodes, row_keys, s)
    return rows


def product_sage_rows(product, n: int):
    """``(frontier, row keys, s) ↦`` :func:`sample_rows` of ``Q A`` formed by ``product`` (``Q``: one row per frontier
    vertex) — for a product without a row sampler of its own."""
    def rows(nodes: np.ndarray, row_keys: np.ndarray, s: int):
        p = product(frontier_rows(nodes, None, n, "sage"))
        p.sort_indices()
        return sample_rows(p.indptr, p.indices, np.arange(len(nodes), dtype=np.int64), row_keys, s)
    return rows


def sample_rows(indptr: np.ndarray, indices: np.ndarray, nodes: np.ndarray, row_keys: np.ndarray,
                s: int) -> tuple[np.ndarray, np.ndarray]:
    """GraphSAGE's SAMPLE of the CSR rows ``nodes`` (probabilities ``1/deg``, one key per row): ``(row, column)``
    of the kept entries in row, then column order. A row's candidates weigh the same, so the Efraimidis–Spirakis
    keys ``log(u)/p`` of :func:`top_per_row` order as the uniforms ``u``: the ``min(s, deg)`` largest ``u`` win
    (ties, of probability 2⁻⁵³, to the earlier entry), compared as the 53-bit integers they are made of. The numba
    kernel :func:`gridgnn.ops.kernels.sage_rows` when available, else NumPy sorts."""
    nodes = np.asarray(nodes, dtype=np.int64)
    if kernels.enabled():
        return kernels.sage_rows(indptr, indices, nodes, row_keys, s)
    deg = (indptr[nodes + 1] - indptr[nodes]).astype(np.int64)
    sel = np.zeros(len(nodes) + 1, dtype=np.int64)
    sel[1:] = np.cumsum(deg)
    rows = np.repeat(np.arange(len(nodes), dtype=np.int64), deg)
    at = np.arange(sel[-1], dtype=np.int64) - sel[rows] + np.asarray(indptr, dtype=np.int64)[nodes][rows]
    cols = np.asarray(indices, dtype=np.int64)[at]
    if s < 0:
        return rows, cols
    with np.errstate(over="ignore"):
        bits = (mix(np.asarray(row_keys, dtype=np.uint64)[rows] + cols.astype(np.uint64)) >> np.uint64(11))
    order = np.lexsort((-bits.astype(np.int64), rows))  # per row, the largest uniforms first (stable: ties by position)
    keep = np.sort(order[np.arange(len(rows)) - sel[rows[order]] < s])
    return rows[keep], cols[keep]


def top_per_row(p: sp.csr_matrix, rows: np.ndarray, s: int, row_keys: np.ndarray) -> np.ndarray:
    """Positions (in ``p``'s CSR order) of the ``s`` winners of each row: the largest ``log(u) / p`` with ``u`` the
    open uniform of ``mix(row_keys[row] + column)`` (all of a row with at most ``s`` entries; every entry for
    ``s = -1``). The numba kernel :func:`gridgnn.ops.kernels.top_per_row` when available."""
    if s < 0:
        return np.arange(p.nnz)
    if kernels.enabled():
        return np.flatnonzero(kernels.top_per_row(p.indptr, p.indices, p.data, row_keys, s))
    return top_per_row_reference(p, rows, s, row_keys)


def top_per_row_reference(p: sp.csr_matrix, rows: np.ndarray, s: int, row_keys: np.ndarray) -> np.ndarray:
    """:func:`top_per_row` in NumPy: one ``lexsort`` of every candidate by (row, key)."""
    with np.errstate(over="ignore"):
        hashes = mix(np.asarray(row_keys, dtype=np.uint64)[rows] + p.indices.astype(np.uint64))
    key = np.log(open_uniform(hashes)) / p.data
    order = np.lexsort((-key, rows))
    rank = np.arange(p.nnz) - p.indptr[rows[order]]
    return np.sort(order[rank < s])


def _extract_ladies(product, nodes, ptr, owner, p, rows, keep, n):
    """LADIES' EXTRACT with the per-minibatch numba kernel :func:`gridgnn.ops.kernels.relabel` (minibatches in
    parallel, no global sort): ``(block rows, block columns, weights, next nodes, next ptr)``."""
    k = len(ptr) - 1
    r, c = rows[keep], p.indices[keep]
    add_ptr = np.zeros(k + 1, dtype=np.int64)
    add_ptr[1:] = np.cumsum(np.bincount(r, minlength=k))
    ar = _row_extraction(product, nodes, n)
    nxt, nptr, cols, pv = kernels.relabel(nodes, ptr, c, p.data[keep], add_ptr, ar.indices, ar.indptr[ptr])
    inside = cols >= 0
    rr = np.repeat(np.arange(len(nodes), dtype=np.int64), np.diff(ar.indptr))[inside]
    return rr, cols[inside], _ladies_weights(rr, 1.0 / pv[inside], len(nodes)), nxt, nptr


def _extract_sage(nodes, ptr, owner, r, c, n):
    """GraphSAGE's EXTRACT of the kept entries ``(r, c)`` (frontier row, vertex; row order): with
    :func:`kernels.relabel` when available, else by sorts of (minibatch, vertex) keys."""
    k = len(ptr) - 1
    counts = np.bincount(r, minlength=len(nodes)).astype(np.float64)
    if not kernels.enabled():
        nxt, nptr = _next_frontier(nodes, ptr, owner, owner[r], c, n)
        return r, _positions(owner[r], c, nxt, nptr, n), 1.0 / counts[r], nxt, nptr
    add_ptr = np.zeros(k + 1, dtype=np.int64)
    add_ptr[1:] = np.cumsum(np.bincount(owner[r], minlength=k))
    nxt, nptr, cols, _ = kernels.relabel(nodes, ptr, c, np.zeros(len(c)), add_ptr, c, add_ptr)
    return r, cols, 1.0 / counts[r], nxt, nptr


def _extract_ladies_reference(product, nodes, ptr, owner, p, rows, keep, n):
    """:func:`_extract_ladies` with NumPy sorts of (minibatch, vertex) keys over the whole bulk."""
    nxt, nptr = _next_frontier(nodes, ptr, owner, rows[keep], p.indices[keep], n)
    r, c, vals = _ladies_block(product, nodes, owner, p, rows, keep, n)
    return r, _positions(owner[r], c, nxt, nptr, n), vals, nxt, nptr


def _row_extraction(product, nodes, n) -> sp.csr_matrix:
    """``A_R = Q_R A``: the rows of the stacked frontier (one per frontier vertex)."""
    q_r = _selection(np.arange(len(nodes)), nodes, (len(nodes), n))
    ar = product(q_r)
    ar.sort_indices()
    return ar


def _ladies_weights(r: np.ndarray, w: np.ndarray, m: int) -> np.ndarray:
    """LADIES' debiased weights ``1/p_v`` of the block's entries, row-normalized."""
    sums = np.bincount(r, weights=w, minlength=m)
    return w / sums[r]


def _next_frontier(nodes, ptr, owner, sample_batch, sample_col, n):
    """Per minibatch: its frontier, then the sampled vertices not in it, by id."""
    k = len(ptr) - 1
    frontier_keys = owner * n + nodes
    new = np.setdiff1d(np.unique(sample_batch * n + sample_col), frontier_keys, assume_unique=True)
    new_batch = new // n
    batch = np.concatenate([owner, new_batch])
    group = np.concatenate([np.zeros(len(nodes), np.int64), np.ones(len(new), np.int64)])
    pos = np.concatenate([np.arange(len(nodes)), np.arange(len(new))])
    order = np.lexsort((pos, group, batch))
    nxt = np.concatenate([nodes, new % n])[order]
    nptr = np.zeros(k + 1, dtype=np.int64)
    nptr[1:] = np.cumsum(np.bincount(batch, minlength=k))
    return nxt, nptr


def _positions(batch, col, nxt, nptr, n):
    """Column of ``(batch, col)`` in the stacked next frontier (every pair must be there)."""
    owner = np.repeat(np.arange(len(nptr) - 1, dtype=np.int64), np.diff(nptr))
    keys = owner * n + nxt
    order = np.argsort(keys, kind="stable")
    at = np.searchsorted(keys[order], batch * n + col)
    return order[at]


def _ladies_block(product, nodes, owner, p, rows, keep, n):
    r"""``Q_R A Q_C`` for stacked minibatches: the frontier's edges to its minibatch's sampled vertices, weighted
    :math:`1/p_v` and row-normalized."""
    sampled = np.sort(rows[keep] * n + p.indices[keep])  # (minibatch, vertex) keys, unique
    ar = _row_extraction(product, nodes, n)
    r = np.repeat(np.arange(len(nodes), dtype=np.int64), np.diff(ar.indptr))
    key = owner[r] * n + ar.indices
    at = np.minimum(np.searchsorted(sampled, key), max(len(sampled) - 1, 0))
    inside = sampled[at] == key if len(sampled) else np.zeros(len(key), dtype=bool)
    r, c, key = r[inside], ar.indices[inside], key[inside]
    pkeys = rows * n + p.indices  # sorted: rows ascending, columns sorted within a row
    return r, c, _ladies_weights(r, 1.0 / p.data[np.searchsorted(pkeys, key)], len(nodes))
