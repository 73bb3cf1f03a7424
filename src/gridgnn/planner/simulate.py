r"""The simulator: what every rank of a configuration sends and receives in one training step, computed from the
graph and the layout alone — no processes, no collectives.

A step's bytes are the sum of the byte models of the primitives the model calls (its *trace*,
:func:`~gridgnn.parallel.trace.trace`), for the algorithm's layout of this graph
(:class:`~gridgnn.planner.primitives.BlockRowVolume`, :class:`~gridgnn.planner.primitives.SummaVolume`,
:class:`~gridgnn.planner.primitives.PlexusVolume`), plus the loss's collectives and the gradient all-reduce, keyed
``"<phase>.<collective>"`` (phases ``fwd``, ``bwd``, ``grad``) in the accounting convention of
:mod:`gridgnn.distributed.comm`. The test suite checks these numbers against the bytes every rank measures, for
every model and algorithm and P ∈ {1, 2, 4, 8}.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..parallel.trace import trace
from .primitives import step_bytes, step_work, volume_model


@dataclass
class StepVolume:
    r"""One training step of one configuration, per rank.

    Attributes:
        bytes (dict): ``{"<phase>.<collective>": (sent[P], recv[P], calls[P])}``: bytes sent and received and
            collective calls (messages) per rank.
        world (int): ``P``. ``nparams`` (int): the model's parameters. ``calls`` (list): the traced primitives.
        detail (dict): the same volumes by grid axis, ``{(phase, collective, axis): (sent, recv, calls)}``.
        axes (dict): ``{axis: (members, stride)}`` of the layout's grid axes.
        work (dict): per-rank local work ``{unit: array[P]}`` (:func:`~gridgnn.planner.primitives.step_work`).
        trace: the model's :class:`~gridgnn.parallel.trace.Trace` on this layout (the memory model reads it too).
        own_share: sparsity-aware, each rank's share of its nonzeros in its own block (``None`` elsewhere);
        grad_buckets: the gradient all-reduce's buckets; grad_narrow: they cross narrowed (``--grad-dtype``) — what
            ``--overlap`` can hide (:func:`~gridgnn.planner.timing.predict_step`, :meth:`overlap_facts`).
    """

    bytes: dict
    world: int
    nparams: int
    calls: list
    detail: dict = field(default_factory=dict)
    axes: dict = field(default_factory=dict)
    work: dict = field(default_factory=dict)
    trace: object = None
    own_share: object = None
    grad_buckets: int = 1
    grad_narrow: bool = False

    def overlap_facts(self) -> dict:
        """The keyword arguments :func:`~gridgnn.planner.timing.predict_step` prices ``--overlap`` with."""
        return {"own_share": self.own_share, "grad_buckets": self.grad_buckets, "grad_narrow": self.grad_narrow}

    def per_rank(self) -> list[dict]:
        """``[{"sent": {key: bytes}, "recv": {key: bytes}, "sent_total", "recv_total"}]`` of every rank."""
        out = []
        for r in range(self.world):
            keys = [k for k, v in sorted(self.bytes.items()) if v[0][r] or v[1][r] or v[2][r]]
            sent = {k: float(self.bytes[k][0][r]) for k in keys}
            recv = {k: float(self.bytes[k][1][r]) for k in keys}
            calls = {k: int(self.bytes[k][2][r]) for k in keys}
            out.append({"rank": r, "sent": sent, "recv": recv, "calls": calls, "sent_total": sum(sent.values()),
                        "recv_total": sum(recv.values()), "calls_total": sum(calls.values())})
        return out

    def pair_matrix(self) -> np.ndarray:
        r"""``M[a, b]``: bytes rank ``b`` receives from rank ``a`` in one step, attributed from the per-axis volumes:
        what ``b`` receives in a collective along an axis is split over the other members of its group in
        proportion to what each of them sends in that collective (exact for broadcasts, whose one sender is the
        root; for reduces with different roots, the ring collectives and all-to-allv it spreads a member's bytes
        over its group rather than naming the actual partner)."""
        out = np.zeros((self.world, self.world))
        for (_, _, axis), (sent, recv, _) in self.detail.items():
            g, stride = self.axes[axis]
            if g <= 1:
                continue
            for b in range(self.world):
                if not recv[b]:
                    continue
                k = (b // stride) % g
                peers = [b + (m - k) * stride for m in range(g) if m != k]
                weights = np.array([sent[a] for a in peers], dtype=np.float64)
                if weights.sum() <= 0:
                    weights = np.ones(len(peers))
                out[peers, b] += recv[b] * weights / weights.sum()
        return out

    def moved_by_phase(self) -> dict:
        """Per key, the bytes *moved*: the larger of the totals sent and received over the ranks (what
        ``summary.json``'s ``comm_bytes_per_epoch.by_phase`` reports for a run)."""
        return {k: float(max(v[0].sum(), v[1].sum())) for k, v in sorted(self.bytes.items())
                if v[0].sum() or v[1].sum()}


def step_volume(graph, algo: str, world: int, *, source, rows, shape, replication: int, build_model, traits: dict,
                elem_bytes: int = 4, block_rows: int = 0, wire_bytes: int | None = None,
                loss: bool = True, grad_bucket_bytes: int | None = None,
                grad_wire_bytes: int | None = None, traced=None) -> StepVolume:
    r"""The per-rank bytes of one training step.

    Args:
        graph: the :class:`~gridgnn.graph.Graph` (its features' width and its labelled training vertices count).
        algo (str): the ``--algo``; ``world`` (int): ``P``; ``shape``: the process grid (2d/3d/plexus).
        source, rows: the layout (``rows``: the block-row partition, ``None`` for 2d/3d/plexus).
        replication (int): ``c`` of 1.5D.
        build_model: ``plan → model`` (traced once on a tiny serial plan, in float64).
        traits (dict): the algorithm's plan traits (:attr:`~gridgnn.parallel.registry.Algorithm.traits`).
        elem_bytes (int, optional): bytes per element (4 for float32, 8 for float64). (default: ``4``)
        block_rows (int, optional): Plexus blocked aggregation (``--blocked-aggregation``; 0 = off). (default: ``0``)
        wire_bytes (int, optional): bytes per element of node data on the wire (``--comm-dtype``; ``None``: as
            held). (default: ``None``)
        loss (bool, optional): count the node-classification loss's collectives (link prediction has none: its
            decoder's are :meth:`gridgnn.parallel.pairs.RowDirectory.volume`). (default: ``True``)
        grad_bucket_bytes (int, optional): the gradient all-reduce's bucket size (``None``: 25 MiB, the trainer's).
        grad_wire_bytes (int, optional): bytes per element of the gradient buckets on the wire (``--grad-dtype``;
            ``None``: as held).
        traced (optional): the model's :class:`~gridgnn.parallel.trace.Trace` with this algorithm's layout rules and
            vertex orders, when the caller has it (a planner traces a model once per algorithm and order). (default:
            ``None``: traced here)
    """
    from ..parallel.registry import layout_rules
    from ..parallel.registry import algorithm

    if traced is None:
        rules = layout_rules(algo, double=bool(getattr(source, "double", False)))
        traced = trace(build_model, graph.num_features, traits, rules)
    calls, nparams = traced.calls, traced.nparams
    volume = volume_model(algorithm(algo), graph=graph, source=source, rows=rows, shape=shape, world=world,
                          replication=replication, calls=calls, block_rows=block_rows)
    detail: dict = {}
    total = step_bytes(calls, volume, traced.param_sizes or nparams, elem_bytes, detail, wire_bytes=wire_bytes,
                       loss=loss, grad_bucket_bytes=grad_bucket_bytes, grad_wire_bytes=grad_wire_bytes)
    from ..distributed.accounting import GRAD_BUCKET_BYTES, grad_buckets

    sizes = [k * elem_bytes for k in (traced.param_sizes or ((nparams,) if nparams else ()))]
    return StepVolume(total, world, nparams, calls, detail, dict(volume.axes), step_work(calls, volume), traced,
                      getattr(volume, "own_share", None), len(grad_buckets(sizes, grad_bucket_bytes or GRAD_BUCKET_BYTES)),
                      grad_wire_bytes is not None and grad_wire_bytes < elem_bytes)
