r"""Sampling on many processes (MLSys'24 §5): graph replicated, or graph 1.5D-partitioned with Algorithm 2.

**Who samples what.** Minibatches are handed out in bulks of ``P·k``: bulk ``t`` holds minibatches
``t·P·k … (t+1)·P·k − 1`` of the epoch; rank ``r`` (process ``P(i, j)``, ``r = i·c + j``) trains the ``k`` of
them at ``(t·k + s)·P + r``, ``s < k`` (fewer, or none, at the end of an epoch), so step ``g`` of the epoch sums
minibatches ``g·P … g·P + P − 1`` whatever ``k``. The samples do not depend on where they are
drawn (:mod:`gridgnn.sampling.matrix`: keyed randomness), so the two modes below give the same minibatches.

* ``replicated`` (§5.1): every rank holds the whole pattern ``A`` and samples its own ``k`` minibatches — no
  communication.
* ``partitioned`` (§5.2, Algorithm 2): the grid is ``P/c × c`` (axes ``"row"``, ``"rep"``, as 1.5D); ``A`` is split
  into ``P/c`` block rows by vertex id, block ``i`` held by the ``c`` members of process row ``i``. Process row
  ``i`` samples the ``c·k`` minibatches of its members together: every SpGEMM ``Q_i A`` (one per hop, and LADIES'
  row extraction ``Q_R A``) is computed as in Algorithm 2 — member ``j`` handles the column blocks ``k`` of its
  stage chunk: it sends the owner ``P(k, j)`` the ids of the rows it needs (``NnzCols(Q_ik)``), receives those
  rows of ``A_k`` (degrees, then column ids), multiplies, and the partial products are summed over the process
  row (each member's partial ``(row, column, value)`` triples to the others, then a local sum). Every member
  then holds ``P_i`` and samples the group's rows itself.
  GraphSAGE needs no sum: its ``Q`` has one nonzero per row, so each row of ``Q A`` is one row of ``A``, fetched
  whole by the one member whose chunk holds its block. That member samples it (the selection is per row and
  keyed, so where it runs does not matter) and the members exchange only what they kept — per produced row its
  count, then the kept columns — in place of the partial products (``PartitionedPattern.sage_rows``).
  Extraction needs no communication.

*Communication* (phase ``"sample"``, per call and rank ``P(i, j)``; ``R = P/c``; ``V_{ik}`` = distinct
frontier vertices of process row ``i`` in block ``k``; ``d_v`` = degrees): along ``"row"``, an all-to-allv of
request counts (8 bytes to each other member), one of the requested ids (``8 V_{ik}`` to owner ``k``), one of
the degrees of the requested rows (``8 V_{lk}`` back) and one of their column ids (``8 Σ d_v``); along
``"rep"`` (``c > 1``), an all-gather of the payload sizes (8 bytes) and an all-to-allv of the payload to each
other member: GraphSAGE ``8`` bytes per produced row and per kept column (``min(s, d_v)`` of them), a product
``24`` bytes per nonzero of the partial product. :func:`sampling_bytes` computes all of it without processes.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch

from ..errors import GridGnnError
from ..partition import even_bounds
from ..partition.layout import stage_chunks
from .matrix import BulkSample, _pattern, local_product, local_sage_rows, sample_bulk, sample_rows

MODES = ("replicated", "partitioned")
PHASE = "sample"


def rank_batches(num_batches: int, world: int, k: int, bulk: int, rank: int) -> np.ndarray:
    """Indices of the (at most ``k``) minibatches rank ``rank`` trains in bulk ``bulk``: ``(bulk·k + s)·P + rank``
    for its steps ``s`` (:func:`schedule`)."""
    ids = (bulk * k + np.arange(k, dtype=np.int64)) * world + rank
    return ids[ids < num_batches]


def num_bulks(num_batches: int, world: int, k: int) -> int:
    return max(1, -(-num_batches // (world * k)))


class PartitionedPattern:
    """Block row ``i`` of the pattern on every member of process row ``i`` (``comm``: the 1.5D grid)."""

    def __init__(self, comm, adj: sp.spmatrix):
        self.comm = comm
        a = _pattern(adj)
        self.n = a.shape[0]
        self.blocks = comm.grid.size("row")
        self.c = comm.grid.size("rep")
        self.i, self.j = comm.grid.rank("row"), comm.grid.rank("rep")
        self.bounds = even_bounds(self.n, self.blocks)
        lo, hi = int(self.bounds[self.i]), int(self.bounds[self.i + 1])
        self.local = sp.csr_matrix(a[lo:hi])  # A_i: rows lo … hi − 1, every column
        self.chunk = stage_chunks(self.blocks, self.c)[self.j]

    def _fetch(self, need: dict) -> tuple[np.ndarray, sp.csr_matrix]:
        """The rows ``need[k]`` of every block ``k`` of this member's chunk, from their owners ``P(k, j)``
        (Algorithm 2's exchange along ``"row"``): ``(their ids, sorted; those rows of A)``."""
        comm = self.comm
        wanted = request(comm, [need.get(k, np.zeros(0, np.int64)) for k in range(self.blocks)], "row")
        lo = int(self.bounds[self.i])
        rows = [self.local[t - lo] for t in wanted]  # the rows of A_i each member of column j needs
        deg_in = _exchange(comm, [np.diff(r.indptr).astype(np.int64) for r in rows],
                           [len(need.get(k, ())) for k in range(self.blocks)], "row")
        cols = _exchange(comm, [r.indices.astype(np.int64) for r in rows], [int(d.sum()) for d in deg_in], "row")
        order = [k for k in range(self.blocks) if k in need]
        fetched_ids = np.concatenate([need[k] for k in order]) if order else np.zeros(0, np.int64)
        indptr = np.zeros(len(fetched_ids) + 1, dtype=np.int64)
        indptr[1:] = np.cumsum(np.concatenate([deg_in[k] for k in order])) if order else []
        indices = np.concatenate([cols[k] for k in order]) if order else np.zeros(0, np.int64)
        return fetched_ids, sp.csr_matrix((np.ones(len(indices)), indices, indptr), shape=(len(fetched_ids), self.n))

    def product(self, q: sp.csr_matrix) -> sp.csr_matrix:
        """``Q A`` for this process row's ``Q`` (the same on its ``c`` members), by Algorithm 2."""
        q = sp.csr_matrix(q)
        with self.comm.phase(PHASE):
            fetched_ids, a_hat = self._fetch(needs(q, self.bounds, self.chunk))
            partial = sp.coo_matrix(_restrict_columns(q, fetched_ids) @ a_hat)
            return self._sum_over_row(partial, q.shape[0])

    def sage_rows(self, nodes: np.ndarray, row_keys: np.ndarray, s: int) -> tuple[np.ndarray, np.ndarray]:
        """GraphSAGE's sample of the rows ``nodes`` of ``A`` (this process row's stacked frontier), as
        :func:`gridgnn.sampling.matrix.sample_rows` returns it for the whole pattern. Row ``r`` of ``Q A`` is
        row ``nodes[r]`` of ``A``, which one member alone produces (the one whose chunk holds its block): it
        fetches the row as Algorithm 2 does, samples it there, and the members exchange what they kept —
        per produced row its count, then the kept columns — instead of summing partial products."""
        nodes = np.asarray(nodes, dtype=np.int64)
        with self.comm.phase(PHASE):
            fetched_ids, a_hat = self._fetch(needs_of(nodes, self.bounds, self.chunk))
            mine = produced_rows(nodes, self.bounds, self.chunk)
            r, cols = sample_rows(a_hat.indptr, a_hat.indices, np.searchsorted(fetched_ids, nodes[mine]),
                                  np.asarray(row_keys)[mine], s)
            counts = np.bincount(r, minlength=len(mine)).astype(np.int64)
            if self.c == 1:
                return mine[r], cols
            got = self._gather_over_row(np.concatenate([counts, cols]))
        chunks = stage_chunks(self.blocks, self.c)
        counts = np.zeros(len(nodes), dtype=np.int64)
        parts = []
        for m, payload in enumerate(got):
            rows_m = produced_rows(nodes, self.bounds, chunks[m])
            counts[rows_m] = payload[:len(rows_m)]
            parts.append((rows_m, payload[:len(rows_m)], payload[len(rows_m):]))
        start = np.zeros(len(nodes) + 1, dtype=np.int64)
        start[1:] = np.cumsum(counts)
        out = np.empty(int(start[-1]), dtype=np.int64)
        for rows_m, counts_m, cols_m in parts:
            first = np.repeat(start[rows_m], counts_m)
            within = np.arange(len(cols_m)) - np.repeat(np.cumsum(counts_m) - counts_m, counts_m)
            out[first + within] = cols_m
        return np.repeat(np.arange(len(nodes), dtype=np.int64), counts), out

    def _gather_over_row(self, payload: np.ndarray) -> list[np.ndarray]:
        """Every member's ``int64`` vector along ``"rep"`` (sizes all-gathered, then one all-to-allv)."""
        dev = self.comm.wire_device()
        sizes = self.comm.all_gather(torch.tensor([len(payload)], dtype=torch.int64, device=dev), "rep")
        return _exchange(self.comm, [payload] * self.c, [int(v.item()) for v in sizes], "rep")

    def _sum_over_row(self, partial: sp.coo_matrix, m: int) -> sp.csr_matrix:
        """The partial products summed over the process row (``"rep"``)."""
        dev = self.comm.wire_device()
        trip = torch.from_numpy(np.stack([partial.row.astype(np.float64), partial.col.astype(np.float64),
                                          partial.data.astype(np.float64)], axis=1).reshape(-1, 3)).to(dev)
        if self.c > 1:
            sizes = self.comm.all_gather(torch.tensor([trip.shape[0]], dtype=torch.int64, device=dev), "rep")
            got = self.comm.all_to_all_v([trip] * self.c, [int(s.item()) for s in sizes], "rep")
            trip = torch.cat(got)
        t = trip.cpu().numpy()
        out = sp.csr_matrix((t[:, 2], (t[:, 0].astype(np.int64), t[:, 1].astype(np.int64))), shape=(m, self.n))
        out.sum_duplicates()
        return out


def _exchange(comm, send: list[np.ndarray], recv_rows: list[int], axis: str) -> list[np.ndarray]:
    """All-to-allv of ``int64`` vectors (``send[k]`` to axis-rank ``k``) on the backend's wire device."""
    dev = comm.wire_device()
    got = comm.all_to_all_v([torch.from_numpy(np.ascontiguousarray(v, dtype=np.int64)).reshape(-1, 1).to(dev)
                             for v in send], recv_rows, axis)
    return [t.reshape(-1).cpu().numpy() for t in got]


def request(comm, need: list[np.ndarray], axis: str) -> list[np.ndarray]:
    """Send ``need[k]`` (ids) to axis-rank ``k``; returns the ids each member asked of this rank (request counts
    first, then the ids: two all-to-allv)."""
    g = comm.grid.size(axis)
    asked = _exchange(comm, [np.array([len(v)]) for v in need], [1] * g, axis)
    return _exchange(comm, need, [int(a[0]) for a in asked], axis)


def fetch_rows(comm, x_local: torch.Tensor, bounds: np.ndarray, ids: np.ndarray, axis: str = "row") -> torch.Tensor:
    r"""Rows ``ids`` (global vertex ids) of a node tensor held as block rows along ``axis`` (block ``k`` =
    vertices ``bounds[k] … bounds[k+1] − 1`` on axis-rank ``k``; this rank holds ``x_local``), in the order of
    ``ids`` (§6: the all-to-allv along the process column). Requests, then one all-to-allv of the rows."""
    g, me = comm.grid.size(axis), comm.grid.rank(axis)
    uniq, inv = np.unique(np.asarray(ids, dtype=np.int64), return_inverse=True)
    blk = np.searchsorted(bounds, uniq, side="right") - 1
    need = [uniq[blk == k] for k in range(g)]
    wanted = request(comm, need, axis)
    lo = int(bounds[me])
    dev = x_local.device
    send = [x_local[torch.from_numpy(w - lo).to(dev)] for w in wanted]
    got = comm.all_to_all_v(send, [len(v) for v in need], axis)
    rows = torch.cat(got) if got else x_local[:0]
    return rows[torch.from_numpy(inv.reshape(-1)).to(rows.device)]


def needs(q: sp.csr_matrix, bounds: np.ndarray, chunk) -> dict:
    """``{k: sorted distinct columns of Q in block k}`` for the blocks ``k`` of ``chunk`` (NnzCols(Q_ik))."""
    return needs_of(q.indices, bounds, chunk)


def needs_of(ids: np.ndarray, bounds: np.ndarray, chunk) -> dict:
    """``{k: sorted distinct ids in block k}`` for the blocks ``k`` of ``chunk``."""
    cols = np.unique(np.asarray(ids, dtype=np.int64))
    blk = np.searchsorted(bounds, cols, side="right") - 1
    return {int(k): cols[blk == k] for k in chunk}


def produced_rows(nodes: np.ndarray, bounds: np.ndarray, chunk) -> np.ndarray:
    """Positions of the frontier rows whose vertex lies in a block of ``chunk`` (the rows of GraphSAGE's ``Q A``
    the member with that chunk produces), ascending."""
    blk = np.searchsorted(bounds, nodes, side="right") - 1
    return np.flatnonzero(np.isin(blk, np.fromiter(chunk, dtype=np.int64)))


def _restrict_columns(q: sp.csr_matrix, keep: np.ndarray) -> sp.csr_matrix:
    """``Q`` restricted to the columns ``keep`` (sorted), renumbered ``0 … len(keep) − 1``."""
    coo = sp.coo_matrix(q)
    at = np.searchsorted(keep, coo.col)
    ok = at < len(keep)
    ok[ok] = keep[at[ok]] == coo.col[ok]
    return sp.csr_matrix((coo.data[ok], (coo.row[ok], at[ok])), shape=(q.shape[0], len(keep)))


def check_mode(mode: str) -> None:
    if mode not in MODES:
        raise GridGnnError(f"--sample-graph must be one of {', '.join(MODES)} (got {mode!r})")


def sample_rank(comm, adj: sp.spmatrix, batches: list[np.ndarray], fanouts, *, k: int, bulk: int, sampler: str,
                mode: str, seed: int, epoch: int, pattern: PartitionedPattern | None = None) -> BulkSample:
    """This rank's minibatches of bulk ``bulk`` (at most ``k``), sampled as ``mode`` says. ``comm``: the 1.5D
    grid (``partitioned``), or anything with ``grid.world_size`` / ``grid.global_rank`` (``replicated``);
    ``pattern``: the :class:`PartitionedPattern` built once."""
    check_mode(mode)
    world, rank = comm.grid.world_size, comm.grid.global_rank
    if mode == "replicated":
        ids = rank_batches(len(batches), world, k, bulk, rank)
        return sample_bulk(adj, [batches[t] for t in ids], fanouts, sampler=sampler, seed=seed, epoch=epoch,
                           batch_ids=ids)
    pattern = pattern or PartitionedPattern(comm, adj)
    c = pattern.c
    group = [rank_batches(len(batches), world, k, bulk, pattern.i * c + m) for m in range(c)]
    ids = np.concatenate(group)
    both = sample_bulk(None, [batches[t] for t in ids], fanouts, sampler=sampler, seed=seed, epoch=epoch,
                       batch_ids=ids, product=pattern.product, n=pattern.n, sage_rows=pattern.sage_rows)
    start = sum(len(g) for g in group[:pattern.j])
    return both.subset(start, start + len(group[pattern.j]))


def sampling_bytes(adj: sp.spmatrix, batches: list[np.ndarray], fanouts, *, world: int, c: int, k: int,
                   sampler: str, seed: int, epoch: int, bulks=None) -> dict:
    """Bytes every rank sends and receives while sampling the bulks ``bulks`` (default: all of the epoch) in the
    ``partitioned`` mode: ``{"sample.<collective>": (sent[P], received[P])}``, computed without processes."""
    a = _pattern(adj)
    n = a.shape[0]
    R = world // c
    bounds = even_bounds(n, R)
    chunks = stage_chunks(R, c)
    out: dict = {}

    def add(key, r, s, v):
        sent, recv = out.setdefault(f"{PHASE}.{key}", (np.zeros(world), np.zeros(world)))
        sent[r] += s
        recv[r] += v

    deg = np.diff(a.indptr)
    base, base_rows = local_product(a), local_sage_rows(a)
    for bulk in (range(num_bulks(len(batches), world, k)) if bulks is None else bulks):
        calls = []  # per process row, its calls in order: ("product", Q) or ("rows", frontier, s)
        for i in range(R):
            recorded = []

            def product(q, recorded=recorded):
                recorded.append(("product", sp.csr_matrix(q)))
                return base(q)

            def rows(nodes, row_keys, s, recorded=recorded):
                recorded.append(("rows", np.asarray(nodes, dtype=np.int64), s))
                return base_rows(nodes, row_keys, s)

            ids = np.concatenate([rank_batches(len(batches), world, k, bulk, i * c + m) for m in range(c)])
            sample_bulk(None, [batches[t] for t in ids], fanouts, sampler=sampler, seed=seed, epoch=epoch,
                        batch_ids=ids, product=product, n=n, sage_rows=rows)
            calls.append(recorded)
        for t in range(len(calls[0])):
            for j in range(c):
                need = [needs_of(calls[i][t][1].indices if calls[i][t][0] == "product" else calls[i][t][1],
                                 bounds, chunks[j]) for i in range(R)]
                for i in range(R):
                    r = i * c + j
                    if R > 1:
                        add("alltoallv", r, 8 * (R - 1), 8 * (R - 1))  # request counts
                        mine = sum(len(v) for kk, v in need[i].items() if kk != i)
                        theirs = sum(len(need[l].get(i, ())) for l in range(R) if l != i)
                        add("alltoallv", r, 8 * mine, 8 * theirs)  # requested ids
                        add("alltoallv", r, 8 * theirs, 8 * mine)  # degrees of the requested rows
                        d_out = sum(int(deg[need[l][i]].sum()) for l in range(R) if l != i and i in need[l])
                        d_in = sum(int(deg[v].sum()) for kk, v in need[i].items() if kk != i)
                        add("alltoallv", r, 8 * d_out, 8 * d_in)  # their column ids
            if c > 1:
                for i in range(R):
                    sizes = [_row_payload(calls[i][t], a, deg, bounds, chunks[j]) for j in range(c)]
                    for j in range(c):
                        r = i * c + j
                        add("allgather", r, 8 * (c - 1), 8 * (c - 1))
                        add("alltoallv", r, sizes[j] * (c - 1), sum(sizes) - sizes[j])
    return out


def _row_payload(call, a: sp.csr_matrix, deg: np.ndarray, bounds: np.ndarray, chunk) -> int:
    """Bytes the member with ``chunk`` sends each other member of its process row after one call: GraphSAGE
    (``rows``) — per row it produced, its kept count and the kept columns (8 bytes each); a product — its partial
    ``(row, column, value)`` triples (24 bytes per nonzero)."""
    if call[0] == "rows":
        nodes, s = call[1], call[2]
        d = deg[nodes[produced_rows(nodes, bounds, chunk)]]
        return 8 * (len(d) + int((d if s < 0 else np.minimum(d, s)).sum()))
    q = call[1]
    have = np.concatenate(list(needs(q, bounds, chunk).values()) or [np.zeros(0, np.int64)])
    return 24 * (_restrict_columns(q, np.sort(have)) @ a[np.sort(have)]).nnz


def fetch_bytes(frontiers: list, bounds: np.ndarray, c: int, row_bytes: int) -> tuple[np.ndarray, np.ndarray]:
    """Bytes each rank sends and receives in one :func:`fetch_rows` along ``"row"`` when rank ``r`` fetches the
    vertices ``frontiers[r]`` (``row_bytes`` per feature row): request counts, ids, rows."""
    world = len(frontiers)
    R = world // c
    sent, recv = np.zeros(world), np.zeros(world)
    if R == 1:
        return sent, recv
    need = []
    for ids in frontiers:
        uniq = np.unique(np.asarray(ids, dtype=np.int64))
        blk = np.searchsorted(bounds, uniq, side="right") - 1
        need.append(np.bincount(blk, minlength=R))
    for r in range(world):
        i, j = divmod(r, c)
        mine = need[r].sum() - need[r][i]  # rows it asks of the others
        asked = sum(need[l * c + j][i] for l in range(R) if l != i)  # rows the others ask of it
        sent[r] += 8 * (R - 1) + 8 * mine + row_bytes * asked
        recv[r] += 8 * (R - 1) + 8 * asked + row_bytes * mine
    return sent, recv


def schedule(num_batches: int, world: int, k: int) -> list[tuple[int, int, list[int]]]:
    """The steps of an epoch: ``(bulk, s, [minibatch of each rank or −1])`` — rank ``r`` trains minibatch
    ``(bulk·k + s)·P + r`` in step ``s`` of bulk ``bulk``, if it exists; steps where no rank has one are skipped.
    The ``g``-th step of the epoch (``g = bulk·k + s``) sums minibatches ``g·P … g·P + P − 1`` whatever ``k``:
    ``--bulk`` changes when a minibatch is sampled, never which update it joins."""
    out = []
    for bulk in range(num_bulks(num_batches, world, k)):
        for s in range(k):
            ids = [t if t < num_batches else -1 for t in ((bulk * k + s) * world + r for r in range(world))]
            if any(t >= 0 for t in ids):
                out.append((bulk, s, ids))
    return out


__all__ = ["MODES", "PartitionedPattern", "fetch_bytes", "fetch_rows", "num_bulks", "rank_batches", "sample_rank",
           "sampling_bytes", "schedule"]
