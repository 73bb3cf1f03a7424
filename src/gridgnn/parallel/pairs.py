r"""Rows of a plan's output layout for arbitrary vertices: what a pair decoder (link prediction, issue 26) reads.

Every algorithm leaves the last layer's output ``Z`` (``n × d``) spread over the ranks as its logits: rank ``r``
holds the rows ``plan.out_rows()`` (original ids) and the columns ``plan.out_cols(d)``, and a row may be held by
several ranks (the replicas of 1.5D, the ranks of a Plexus fiber). A pair ``(u, v)`` may be scored anywhere, so a
rank that scores pairs fetches the rows of their endpoints:

* :class:`RowDirectory` learns once (a set-up all-gather of every rank's ids and column range) who holds which
  rows: per column piece, the holders of each vertex, one of which (chosen by the vertex id, spreading the load)
  is its *primary*;
* :func:`fetch_rows` (autograd) asks each primary for the rows it needs — one all-to-allv of counts, one of ids,
  one of the rows — and in the backward sends each fetched row's gradient to **every** holder of it (one
  all-to-allv), which adds it to its own rows' gradient. Every holder then holds the full gradient of its rows,
  as after a node-classification loss, so the encoder's backward and gradient sums are those of node
  classification.

Communication is logged in the phases ``decode`` (the fetch) and ``decode_bwd`` (the gradients);
:meth:`RowDirectory.volume` gives the bytes of a fetch without processes (the tests compare them).
"""
from __future__ import annotations

import numpy as np
import torch

from ..errors import GridGnnError


class RowDirectory:
    r"""Who holds which rows of a ``width``-wide output layout (collective: every rank builds it alike).

    Args:
        comm: the run's communication layer (its whole grid is used).
        node_ids: this rank's output rows, original vertex ids (``plan.out_rows()``).
        cols: this rank's output columns ``(c0, c1)`` (``plan.out_cols(width)``; may be empty).
        width: ``d``, the full width; ``n``: the number of vertices.
    """

    def __init__(self, comm, node_ids: np.ndarray, cols: tuple[int, int], width: int, n: int):
        self.comm = comm
        self.axes = tuple(comm.grid.names)
        self.world = comm.grid.size(self.axes)
        self.me = comm.grid.rank(self.axes)
        self.width, self.n = int(width), int(n)
        node_ids = np.asarray(node_ids, dtype=np.int64)
        if self.world == 1:
            ids, spans = [node_ids], [[int(cols[0]), int(cols[1])]]
        else:
            dev = comm.wire_device()
            with comm.phase("setup"):
                got = comm.all_gather_rows(torch.as_tensor(node_ids).to(dev), self.axes)
                spans = comm.all_gather_json([int(cols[0]), int(cols[1])], self.axes)
            ids = [t.cpu().numpy() for t in got]
        self._build(ids, spans)

    @classmethod
    def from_layout(cls, ids: list[np.ndarray], spans: list[tuple[int, int]], width: int, n: int,
                    me: int = 0) -> "RowDirectory":
        """The directory of a layout given whole (every rank's ids and column range), without processes (as rank
        ``me``): what :meth:`volume` reads in the byte model."""
        d = cls.__new__(cls)
        d.comm, d.axes, d.world, d.me, d.width, d.n = None, (), len(ids), int(me), int(width), int(n)
        d._build([np.asarray(i, dtype=np.int64) for i in ids], spans)
        return d

    def _build(self, ids: list[np.ndarray], spans) -> None:
        width = self.width
        self.ids = ids
        self.spans = [tuple(int(v) for v in s) for s in spans]
        self.pieces = sorted({s for s in self.spans if s[1] > s[0]})
        at = 0
        for a, b in self.pieces:
            if a != at:
                raise GridGnnError(f"the output layout's column ranges do not tile [0, {width}): {self.pieces}")
            at = b
        if at != width:
            raise GridGnnError(f"the output layout's column ranges do not tile [0, {width}): {self.pieces}")
        self.piece_of = [self.pieces.index(s) if s[1] > s[0] else -1 for s in self.spans]
        self.holders = []  # per piece: (ptr[n + 1], ranks), the holders of each vertex in rank order
        self.primary = np.empty((len(self.pieces), self.n), dtype=np.int64)
        for k in range(len(self.pieces)):
            ranks = [r for r in range(self.world) if self.piece_of[r] == k]
            v = np.concatenate([ids[r] for r in ranks])
            owner = np.concatenate([np.full(len(ids[r]), r, dtype=np.int64) for r in ranks])
            order = np.lexsort((owner, v))
            v, owner = v[order], owner[order]
            count = np.bincount(v, minlength=self.n)
            if (count == 0).any():
                missing = int(np.flatnonzero(count == 0)[0])
                raise GridGnnError(f"vertex {missing} is held by no rank in columns {self.pieces[k]} of the output")
            ptr = np.concatenate([[0], np.cumsum(count)])
            self.holders.append((ptr, owner))
            self.primary[k] = owner[ptr[:-1] + np.arange(self.n) % count]
        self.my_row = np.full(self.n, -1, dtype=np.int64)
        self.my_row[ids[self.me]] = np.arange(len(ids[self.me]))

    def route(self, want: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """For the sorted unique vertices ``want``: per rank ``q``, the ids whose rows ``q`` sends (``q`` is their
        primary in its piece) and the ids of which ``q`` holds a copy it only receives gradients for (both sorted)."""
        data = [np.empty(0, np.int64) for _ in range(self.world)]
        copy = [np.empty(0, np.int64) for _ in range(self.world)]
        for k in range(len(self.pieces)):
            ptr, owner = self.holders[k]
            count = ptr[want + 1] - ptr[want]
            first = np.repeat(ptr[want], count)
            offset = np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count)
            hold = owner[first + offset]
            vid = np.repeat(want, count)
            primary = hold == np.repeat(self.primary[k][want], count)
            for q in np.unique(hold):
                mine = hold == q
                data[q] = np.concatenate([data[q], vid[mine & primary]])
                copy[q] = np.concatenate([copy[q], vid[mine & ~primary]])
        return data, copy

    def volume(self, wants: list[np.ndarray], elem_bytes: int) -> dict:
        """Bytes of one :func:`fetch_rows` where rank ``r`` wants the sorted unique vertices ``wants[r]``, without
        processes: ``{"decode.alltoallv": (sent[P], recv[P], calls[P]), "decode_bwd.alltoallv": (...)}`` (a rank's
        own block is not counted; the ids travel as ``int64``)."""
        P = self.world
        sent = {ph: np.zeros(P) for ph in ("decode", "decode_bwd")}
        recv = {ph: np.zeros(P) for ph in ("decode", "decode_bwd")}
        for r in range(P):
            data, copy = self.route(np.asarray(wants[r], dtype=np.int64))
            for q in range(P):
                if q == r:
                    continue
                k = self.piece_of[q]
                w = 0 if k < 0 else self.pieces[k][1] - self.pieces[k][0]
                nd, nc = len(data[q]), len(copy[q])
                ask = 2 * 8 + (nd + nc) * 8  # the counts, then the ids
                rows = nd * w * elem_bytes
                sent["decode"][r] += ask
                recv["decode"][q] += ask
                sent["decode"][q] += rows
                recv["decode"][r] += rows
                grads = (nd + nc) * w * elem_bytes
                sent["decode_bwd"][r] += grads
                recv["decode_bwd"][q] += grads
        calls = np.full(P, 3.0 if P > 1 else 0.0), np.full(P, 1.0 if P > 1 else 0.0)
        return {"decode.alltoallv": (sent["decode"], recv["decode"], calls[0]),
                "decode_bwd.alltoallv": (sent["decode_bwd"], recv["decode_bwd"], calls[1])}


class _FetchRows(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z, directory, want, phase):
        d = directory
        comm, axes, P = d.comm, d.axes, d.world
        dev = z.device
        data, copy = d.route(want)
        with comm.phase(phase):
            counts = comm.all_to_all_v([torch.tensor([[len(data[q]), len(copy[q])]], dtype=torch.int64, device=dev)
                                        for q in range(P)], [1] * P, axes)
            counts = [tuple(int(v) for v in c.reshape(-1).tolist()) for c in counts]
            asked = comm.all_to_all_v([torch.from_numpy(np.concatenate([data[q], copy[q]])).to(dev)
                                       for q in range(P)], [a + b for a, b in counts], axes)
            asked = [a.cpu().numpy() for a in asked]
            rows = [d.my_row[a] for a in asked]  # this rank's rows each asker will send gradients for
            if any((r < 0).any() for r in rows):
                raise GridGnnError("a rank was asked for a row it does not hold (the directory is inconsistent)")
            send = [z[torch.from_numpy(rows[q][:counts[q][0]]).to(dev)].reshape(-1) for q in range(P)]
            widths = [0 if d.piece_of[q] < 0 else d.pieces[d.piece_of[q]][1] - d.pieces[d.piece_of[q]][0]
                      for q in range(P)]
            got = comm.all_to_all_v(send, [len(data[q]) * widths[q] for q in range(P)], axes)
        out = z.new_zeros((len(want), d.width))
        for q in range(P):
            if len(data[q]):
                a, b = d.pieces[d.piece_of[q]]
                at = torch.from_numpy(np.searchsorted(want, data[q])).to(dev)
                out[at, a:b] = got[q].reshape(len(data[q]), b - a)
        ctx.directory, ctx.want, ctx.data, ctx.copy = d, want, data, copy
        ctx.rows, ctx.widths, ctx.local = rows, widths, z.shape
        return out

    @staticmethod
    def backward(ctx, grad):
        d, want, P = ctx.directory, ctx.want, ctx.directory.world
        comm, dev = d.comm, grad.device
        send = []
        for q in range(P):
            ids = np.concatenate([ctx.data[q], ctx.copy[q]])
            if not len(ids):
                send.append(grad.new_zeros(0))
                continue
            a, b = d.pieces[d.piece_of[q]]
            at = torch.from_numpy(np.searchsorted(want, ids)).to(dev)
            send.append(grad[at, a:b].reshape(-1))
        mine = ctx.widths[d.me]
        with comm.phase("decode_bwd"):
            got = comm.all_to_all_v(send, [len(ctx.rows[q]) * mine for q in range(P)], d.axes)
        gz = grad.new_zeros(ctx.local)
        for q in range(P):
            if len(ctx.rows[q]):
                gz.index_add_(0, torch.from_numpy(ctx.rows[q]).to(dev), got[q].reshape(len(ctx.rows[q]), mine))
        return gz, None, None, None


def fetch_rows(z: torch.Tensor, directory: RowDirectory, want: np.ndarray, *, phase: str = "decode") -> torch.Tensor:
    """The full rows (``len(want) × d``) of the sorted unique vertices ``want`` from the output layout whose local
    block is ``z`` (collective: every rank calls it, each with its own ``want``; logged in ``phase``, the backward
    in ``decode_bwd``). One process: ``z``'s rows."""
    want = np.asarray(want, dtype=np.int64)
    if directory.world == 1:
        return z[torch.from_numpy(directory.my_row[want]).to(z.device)]
    return _FetchRows.apply(z, directory, want, phase)
