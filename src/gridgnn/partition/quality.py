r"""Partition quality: communication volume of the sparsity-aware SpMM, edge cut, load balance.

Paper: Mukhopadhyay et al., *Sparsity-Aware Communication for Distributed Graph Neural Network Training*,
ICPP'24, §4.1 (``NnzCols``) and §5 / Table 2 (average vs. maximum volume, load imbalance).

Let :math:`M` be the :math:`n \times n` aggregation matrix (rows = destinations :math:`i`, columns = sources
:math:`j`, :meth:`gridgnn.graph.Graph.csr`) and ``part`` a vertex → part map. Part :math:`p` computes the rows
``part == p`` of :math:`MH` and needs from part :math:`q \ne p` the rows of :math:`H`

.. math::

    \mathrm{NnzCols}(p, q) = \{\, j : \mathrm{part}[j] = q,\ \exists i:\ \mathrm{part}[i] = p,\ M_{ij} \ne 0 \,\},
    \qquad V[q \to p] = |\mathrm{NnzCols}(p, q)| .

Per part, :math:`\mathrm{send}[q] = \sum_{p \ne q} V[q \to p]` and :math:`\mathrm{recv}[p] = \sum_{q \ne p}
V[q \to p]`; the total :math:`\sum_q \mathrm{send}[q]` is the connectivity−1 cut of the column-net hypergraph
(net :math:`j` = column :math:`j`, pins = the rows with a nonzero in column :math:`j` plus the self-pin
:math:`j`): :math:`\sum_j (\lambda_j - 1)`. Diagonal entries never cost volume, so the GCN matrix
:math:`D^{-1/2}(M+I)D^{-1/2}` has the same volumes as :math:`M`.

All volumes are in **rows of** :math:`H`; bytes are ``rows × f × 4`` (float32 features of width ``f``). The
forward SpMM uses :math:`M`; the backward one uses :math:`M^\mathsf{T}` — pass ``mat.T`` for it (equal for
undirected graphs).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..errors import GridGnnError

__all__ = ["as_csr", "volume_matrix", "send_recv_volumes", "edge_cut", "part_loads", "quality_report",
           "REPORT_KEYS"]

#: The keys every report has (the ``FILE.json`` written by ``gridgnn partition --out FILE``).
REPORT_KEYS = ("edge_cut", "total_volume_rows", "max_send_rows", "mean_send_rows", "max_recv_rows",
               "mean_recv_rows", "send_imbalance", "nnz_imbalance", "messages", "seconds", "peak_rss_bytes")


def as_csr(graph_or_csr) -> sp.csr_matrix:
    """The aggregation matrix M (rows = destinations) of a :class:`~gridgnn.graph.Graph` or a SciPy matrix."""
    if hasattr(graph_or_csr, "csr") and callable(graph_or_csr.csr):
        mat = graph_or_csr.csr()
    elif sp.issparse(graph_or_csr):
        mat = sp.csr_matrix(graph_or_csr)
    else:
        raise GridGnnError(f"expected a gridgnn Graph or a SciPy sparse matrix, got {type(graph_or_csr).__name__}")
    if mat.shape[0] != mat.shape[1]:
        raise GridGnnError(f"aggregation matrix must be square, got {mat.shape[0]}×{mat.shape[1]}")
    return mat


def _check_part(part, n: int, parts: int) -> np.ndarray:
    part = np.asarray(part).reshape(-1)
    if part.size != n:
        raise GridGnnError(f"partition has {part.size} entries for a graph with {n} vertices")
    if part.size and not np.issubdtype(part.dtype, np.integer):
        raise GridGnnError("partition entries must be integers")
    part = part.astype(np.int64)
    if parts < 1:
        raise GridGnnError(f"number of parts must be positive, got {parts}")
    if part.size and (part.min() < 0 or part.max() >= parts):
        bad = part[(part < 0) | (part >= parts)][0]
        raise GridGnnError(f"partition names part {int(bad)}, valid parts are 0..{parts - 1}")
    return part


def _needed_pairs(mat: sp.csr_matrix, part: np.ndarray, parts: int) -> tuple[np.ndarray, np.ndarray]:
    r"""The distinct pairs (p, j) with some row i of part p having :math:`M_{ij} \ne 0`."""
    n = mat.shape[0]
    pattern = sp.csr_matrix((np.ones(mat.indices.size, dtype=np.int8), mat.indices, mat.indptr), shape=mat.shape)
    # S (parts × n) sums the rows of each part; its product with the pattern has one entry per distinct (p, j)
    sel = sp.csr_matrix((np.ones(n, dtype=np.int8), part, np.arange(n + 1)), shape=(n, parts)).T.tocsr()
    need = (sel.astype(np.int32) @ pattern.astype(np.int32)).tocsr()
    need.eliminate_zeros()
    p = np.repeat(np.arange(parts, dtype=np.int64), np.diff(need.indptr))
    return p, need.indices.astype(np.int64)


def volume_matrix(mat, part, parts: int) -> np.ndarray:
    r"""Rows of :math:`H` that part ``q`` sends to part ``p`` in one sparsity-aware SpMM :math:`MH`.

    Args:
        mat: the aggregation matrix :math:`M` (SciPy sparse or :class:`~gridgnn.graph.Graph`; rows = destinations).
            Pass ``mat.T`` for the backward product :math:`M^\mathsf{T} G`.
        part: ``int[n]`` part of every vertex (original order).
        parts: number of parts :math:`K`.

    Returns:
        ``int64[K, K]``, entry ``[q, p]`` = :math:`V[q \to p] = |\mathrm{NnzCols}(p, q)|`; the diagonal is 0.

    *Communication*: entry ``[q, p]`` × f × 4 bytes is what the all-to-allv of Algorithm 1 (ICPP'24) moves
    from rank ``q`` to rank ``p``.
    """
    mat = as_csr(mat)
    part = _check_part(part, mat.shape[0], parts)
    p, j = _needed_pairs(mat, part, parts)
    q = part[j]
    off = p != q
    vol = np.bincount(q[off] * parts + p[off], minlength=parts * parts).astype(np.int64)
    return vol.reshape(parts, parts)


def send_recv_volumes(mat, part, parts: int) -> tuple[np.ndarray, np.ndarray]:
    """``(send, recv)``: ``int64[K]`` rows sent / received per part (row / column sums of :func:`volume_matrix`)."""
    vol = volume_matrix(mat, part, parts)
    return vol.sum(axis=1), vol.sum(axis=0)


def edge_cut(mat, part) -> int:
    r"""Edges of the symmetrized pattern :math:`A + A^\mathsf{T}` (no self-loops) whose ends lie in different
    parts, each undirected edge counted once — the quantity METIS minimizes."""
    mat = as_csr(mat)
    part = np.asarray(part).reshape(-1).astype(np.int64)
    coo = mat.tocoo()
    i = coo.row.astype(np.int64)
    j = coo.col.astype(np.int64)
    keep = (i != j) & (part[i] != part[j])
    lo = np.minimum(i[keep], j[keep])
    hi = np.maximum(i[keep], j[keep])
    if lo.size == 0:
        return 0
    return int(np.unique(lo * mat.shape[0] + hi).size)


def part_loads(mat, part, parts: int) -> tuple[np.ndarray, np.ndarray]:
    """``(nnz, vertices)``: ``int64[K]`` stored nonzeros (rows of M) and vertices per part."""
    mat = as_csr(mat)
    part = _check_part(part, mat.shape[0], parts)
    row_nnz = np.diff(mat.indptr).astype(np.int64)
    return (np.bincount(part, weights=row_nnz, minlength=parts).astype(np.int64),
            np.bincount(part, minlength=parts).astype(np.int64))


def _imbalance(x: np.ndarray) -> float:
    mean = float(np.mean(x)) if x.size else 0.0
    return float(np.max(x) / mean - 1.0) if mean > 0 else 0.0


def quality_report(mat, part, parts: int, f: int = 128) -> dict:
    r"""Communication and balance statistics of a partition (ICPP'24 Table 2 columns and more).

    Args:
        mat: aggregation matrix :math:`M` (rows = destinations) or a :class:`~gridgnn.graph.Graph`.
        part: ``int[n]`` part of every vertex, original order.
        parts: number of parts :math:`K`.
        f: feature width used for the byte columns (``bytes = rows × f × 4``), default 128.

    Returns:
        A dict with ``edge_cut`` (undirected cut edges of :math:`A + A^\mathsf{T}`), ``total_volume_rows``,
        ``max_send_rows``, ``mean_send_rows``, ``max_recv_rows``, ``mean_recv_rows``, ``send_imbalance``
        (max/mean − 1, the paper's "load imbalance"), ``recv_imbalance``, ``nnz_imbalance`` and
        ``vertex_imbalance`` (max/mean − 1 of stored nonzeros / vertices per part), ``messages`` (pairs
        :math:`q \ne p` with :math:`V[q \to p] > 0`), ``parts``, ``f``, the byte versions
        ``total_volume_bytes``, ``max_send_bytes``, ``mean_send_bytes``, ``max_recv_bytes``, and the per-part
        lists ``send_rows``, ``recv_rows``, ``part_nnz``, ``vertices``. ``seconds`` and ``peak_rss_bytes`` are
        added by the caller that timed the partitioner (:mod:`gridgnn.commands.partition`).
    """
    mat = as_csr(mat)
    part = _check_part(part, mat.shape[0], parts)
    vol = volume_matrix(mat, part, parts)
    send = vol.sum(axis=1)
    recv = vol.sum(axis=0)
    nnz, verts = part_loads(mat, part, parts)
    total = int(send.sum())
    row_bytes = int(f) * 4
    rep = {
        "parts": int(parts),
        "f": int(f),
        "edge_cut": edge_cut(mat, part),
        "total_volume_rows": total,
        "max_send_rows": int(send.max()),
        "mean_send_rows": total / parts,
        "max_recv_rows": int(recv.max()),
        "mean_recv_rows": total / parts,
        "send_imbalance": _imbalance(send),
        "recv_imbalance": _imbalance(recv),
        "nnz_imbalance": _imbalance(nnz),
        "vertex_imbalance": _imbalance(verts),
        "messages": int(np.count_nonzero(vol)),
        "total_volume_bytes": total * row_bytes,
        "max_send_bytes": int(send.max()) * row_bytes,
        "mean_send_bytes": total / parts * row_bytes,
        "max_recv_bytes": int(recv.max()) * row_bytes,
        "send_rows": send.tolist(),
        "recv_rows": recv.tolist(),
        "part_nnz": nnz.tolist(),
        "vertices": verts.tolist(),
    }
    return rep
