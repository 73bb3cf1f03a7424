r"""The accounting convention, written once: the bytes one rank sends and receives in each collective.

:class:`~gridgnn.distributed.comm.Comm` records every call it runs through these functions, and the byte models
(:mod:`gridgnn.planner.primitives`) sum the same functions over a layout's schedule — a :class:`Transfer` per
collective — so a measured byte and a modelled one come from one formula. Per rank (``M`` = message bytes,
``g`` = group size; a group of one moves nothing):

* broadcast — the root sends ``M`` once (pipelined ring), every other member receives ``M``;
* reduce (the adjoint of a broadcast) — every other member sends ``M``, the root receives ``M`` once;
* gather — every other member sends its ``M`` (the padded block), the root receives ``(g−1)·M``;
* all-to-all(v) — the actual per-peer sizes, data to and from oneself not counted;
* all-reduce — ring: ``2(g−1)/g · M`` each way;
* all-gather — ``(g−1)`` pieces each way (pieces of different heights are padded to the largest);
* reduce-scatter — the pieces sent to the others, and ``(g−1)`` copies of one's own piece received.

Node data narrowed on the wire (:mod:`gridgnn.distributed.wire`) moves in the narrow type by the same rules, except
the two reductions that then add in the tensor's type: a ``reduce`` is a gather onto the root (two members) or an
all-to-all of ``g`` padded pieces and the gather of their sums (:func:`reduce_padded`), an all-reduce an
all-to-all of ``g`` padded pieces and their all-gather (:func:`allreduce_padded`).
"""
from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple


#: bytes of parameter gradients per all-reduce bucket (PyTorch DDP's default ``bucket_cap_mb``, 25 MiB)
GRAD_BUCKET_BYTES = 25 * 2 ** 20


def grad_buckets(sizes, cap_bytes: int = GRAD_BUCKET_BYTES) -> list[list[int]]:
    """The parameter gradients' all-reduce buckets: indices into ``sizes`` (each tensor's bytes, model order) in
    buckets of at most ``cap_bytes`` (a larger tensor alone), filled from the last tensor back — the backward
    produces the last layers' gradients first — and each listing its tensors in model order (one bucket: the
    whole model in order)."""
    out, cur, size = [], [], 0
    for k in range(len(sizes) - 1, -1, -1):
        if cur and size + sizes[k] > cap_bytes:
            out.append(cur[::-1])
            cur, size = [], 0
        cur.append(k)
        size += sizes[k]
    if cur:
        out.append(cur[::-1])
    return out


def grad_bucket_elements(elements) -> int:
    """Elements one gradient bucket's all-reduce carries: its tensors' gradients (``elements``: each tensor's, a zero
    one where a rank has none) and one count per tensor of the ranks that had it — a tensor no rank had keeps no
    gradient, as in serial training (:class:`~gridgnn.train.step.GradReducer`)."""
    elements = [int(k) for k in elements]
    return sum(elements) + len(elements)


def bcast(me: int, root: int, m: float) -> tuple[float, float]:
    """``(sent, recv)`` of axis-rank ``me`` in a broadcast of ``m`` bytes from axis-rank ``root``."""
    return (m, 0.0) if me == root else (0.0, m)


def reduce(me: int, root: int, m: float) -> tuple[float, float]:
    """``(sent, recv)`` of axis-rank ``me`` in a sum of ``m`` bytes onto axis-rank ``root``."""
    return (0.0, m) if me == root else (m, 0.0)


def gather(me: int, root: int, g: int, m: float) -> tuple[float, float]:
    """``(sent, recv)`` of axis-rank ``me`` in a gather of ``m`` bytes per member onto axis-rank ``root``."""
    return (0.0, (g - 1) * m) if me == root else (m, 0.0)


def allreduce(g: int, m: float) -> tuple[float, float]:
    """``(sent, recv)`` of a member of a ring all-reduce of ``m`` bytes over ``g`` members."""
    v = 2.0 * (g - 1) / g * m if g > 1 else 0.0
    return v, v


def allreduce_padded(g: int, piece: float) -> tuple[float, float]:
    """``(sent, recv)`` of a member of an all-reduce run as an all-to-all of ``g`` pieces of ``piece`` bytes (the
    buffer padded to ``g`` equal pieces) and the all-gather of the summed pieces: ``2(g−1)`` pieces each way."""
    v = 2.0 * (g - 1) * piece if g > 1 else 0.0
    return v, v


def reduce_padded(me: int, root: int, g: int, piece: float) -> tuple[float, float]:
    """``(sent, recv)`` of axis-rank ``me`` in a sum onto ``root`` run as an all-to-all of ``g`` pieces of ``piece``
    bytes (each member sums one) and the gather of the sums onto the root."""
    if me == root:
        return float((g - 1) * piece), float(2 * (g - 1) * piece)
    return float(g * piece), float((g - 1) * piece)


def grad_allreduce(g: int, nbytes: float, narrow: tuple | None = None) -> tuple[float, float, int]:
    """``(sent, recv, calls)`` of a member in the all-reduce of one gradient bucket of ``nbytes`` bytes: a ring, or,
    ``narrow = (elements, wire bytes per element)`` (``--grad-dtype``), the padded all-to-all and all-gather."""
    if narrow is None:
        return (*allreduce(g, nbytes), 1)
    elements, wire = narrow
    return (*allreduce_padded(g, -(-int(elements) // g) * wire), 2)


def allgather(g: int, piece: float) -> tuple[float, float]:
    """``(sent, recv)`` of a member of an all-gather of ``piece`` bytes per member (the padded piece)."""
    v = (g - 1) * piece
    return v, v


def reducescatter(me: int, pieces) -> tuple[float, float]:
    """``(sent, recv)`` of axis-rank ``me`` in a reduce-scatter whose member ``k`` keeps ``pieces[k]`` bytes."""
    return reducescatter_of(sum(pieces), pieces[me], len(pieces))


def reducescatter_of(total: float, mine: float, g: int) -> tuple[float, float]:
    """:func:`reducescatter` from the pieces' sum ``total`` and this member's ``mine`` (``g`` members): the others'
    pieces sent, ``g − 1`` copies of one's own received."""
    return float(total - mine), float((g - 1) * mine)


@lru_cache(maxsize=1 << 12)
def _piece_facts(pieces: tuple) -> tuple[int, int]:
    """``(sum, max)`` of a record's row pieces (cached: the members of a group share one tuple of pieces, and a
    planner prices it for every one of them)."""
    return sum(pieces), max(pieces)


def alltoallv(me: int, send, recv) -> tuple[float, float]:
    """``(sent, recv)`` of axis-rank ``me`` sending ``send[k]`` bytes to and receiving ``recv[k]`` bytes from each
    member ``k``."""
    return (float(sum(s for k, s in enumerate(send) if k != me)),
            float(sum(r for k, r in enumerate(recv) if k != me)))


class Transfer(NamedTuple):
    r"""One collective of a layout's schedule, seen from one rank: what an engine runs and a byte model sums (a
    named tuple: a schedule of P ranks holds up to P² of them).

    Args:
        kind: ``"bcast"``, ``"reduce"``, ``"allreduce"``, ``"alltoallv"``, ``"allgather"`` or ``"reducescatter"``.
        axis: the mesh axis it runs along; ``group``: that axis' size; ``me``: this rank's coordinate on it.
        rows: rows of the message (``bcast``/``reduce``: the root's block; ``allreduce``: the local block).
        root: the axis-rank of the root (``bcast``, ``reduce``; −1 otherwise).
        send, recv: rows sent to and received from each member (``alltoallv``).
        pieces: rows of each member's piece (``allgather``: padded to the largest; ``reducescatter``).
        tag: the name it is recorded under when not ``kind`` (``"bcast_sparse"``: a sparse panel's arrays).
        exact: never narrowed on the wire (weights and their gradients, a sparse panel's arrays); ``False``: node
            rows or partial sums, which ``--comm-dtype`` may narrow.
    """

    kind: str
    axis: str
    group: int
    me: int
    rows: int = 0
    root: int = -1
    send: tuple = ()
    recv: tuple = ()
    pieces: tuple = ()
    tag: str = ""
    exact: bool = False

    @property
    def key(self) -> str:
        """The collective's name in the communication log."""
        return self.tag or self.kind

    @property
    def moves(self) -> bool:
        """Whether anything is called (a group of one is not)."""
        return self.group > 1

    @property
    def total_rows(self) -> int:
        """Rows of all the pieces (``allgather``/``reducescatter``), summed once per tuple of pieces."""
        return _piece_facts(self.pieces)[0]

    @property
    def largest_piece(self) -> int:
        """Rows of the largest piece, the one an all-gather pads the others to."""
        return _piece_facts(self.pieces)[1]

    def calls(self, wire_elem: int = 0) -> int:
        """Collective calls this record makes: a narrowed all-reduce is an all-to-all and an all-gather, a narrowed
        ``reduce`` of more than two members an all-to-all and a gather (``wire_elem``: as in :meth:`bytes`)."""
        if not self.moves:
            return 0
        if wire_elem and (self.kind == "allreduce" or (self.kind == "reduce" and self.group > 2)):
            return 2
        return 1

    def bytes(self, row_bytes: float, wire_elem: int = 0) -> tuple[float, float]:
        """``(sent, recv)`` of this rank for rows of ``row_bytes`` bytes; ``wire_elem``: the rows are narrowed node
        data of ``wire_elem`` bytes per element (a ``reduce`` and an all-reduce then sum padded pieces; a
        ``reduce`` of two members is a gather)."""
        if not self.moves:
            return 0.0, 0.0
        if self.kind == "bcast":
            return bcast(self.me, self.root, self.rows * row_bytes)
        if self.kind == "reduce":
            if wire_elem and self.group == 2:
                return gather(self.me, self.root, self.group, self.rows * row_bytes)
            if wire_elem:
                numel = round(self.rows * row_bytes / wire_elem)
                return reduce_padded(self.me, self.root, self.group, -(-numel // self.group) * wire_elem)
            return reduce(self.me, self.root, self.rows * row_bytes)
        if self.kind == "allreduce":
            if wire_elem:
                numel = round(self.rows * row_bytes / wire_elem)
                return allreduce_padded(self.group, -(-numel // self.group) * wire_elem)
            return allreduce(self.group, self.rows * row_bytes)
        if self.kind == "alltoallv":
            if float(row_bytes).is_integer():  # whole rows of whole bytes: the sums are exact either way
                return (float((sum(self.send) - self.send[self.me]) * row_bytes),
                        float((sum(self.recv) - self.recv[self.me]) * row_bytes))
            return alltoallv(self.me, [s * row_bytes for s in self.send], [r * row_bytes for r in self.recv])
        if self.kind == "allgather":
            return allgather(self.group, self.largest_piece * row_bytes)
        if self.kind == "reducescatter":  # (the pieces summed in rows once per group)
            return reducescatter_of(self.total_rows * row_bytes, self.pieces[self.me] * row_bytes, len(self.pieces))
        raise ValueError(f"no accounting for collective {self.kind!r}")
