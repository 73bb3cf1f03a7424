r"""Byte model per distributed primitive, and a model step as the sum of its primitives' bytes.

A model's *trace* — which primitives a training step calls, on what widths, and which inputs need gradients —
is recorded once by running the model on a tiny serial plan (:class:`TracePlan`); it does not depend on the
graph or on the number of processes. :class:`BlockRowVolume` gives each primitive's per-rank bytes for one
layout of the block-row family (``serial``, ``1d``, ``1d-sa``, ``1.5d``, ``1.5d-sa``) from the pattern alone,
in the accounting convention of ``gridgnn.dist.comm``; :func:`step_bytes` adds them up with the gradient
all-reduce. Tests compare the sum with the bytes every rank measures, per collective and phase.

Per primitive (``w`` = bytes per fetched row; *fetch* / *push* / *rep* as in :mod:`gridgnn.parallel.blockrow`):

=================  ===========================================  =============================================
primitive          forward                                      backward
=================  ===========================================  =============================================
``spmm``           fetch(W) + rep(W)                            [oblivious, ∂e: fetch(W)] + [∂X: push(W) + rep(W)]
``sddmm_add``      fetch(K)                                     rep(K) + push(K) + rep(K)
``sddmm_dot``      fetch(W)                                     [oblivious: fetch(W)] + push(W) + rep(W) + rep(W)
``edge_softmax``   rep(K) (max) + rep(K) (sum)                  rep(K)
=================  ===========================================  =============================================
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import torch

from ..partition import RowPartition


@dataclass(frozen=True)
class PrimitiveCall:
    """One primitive of a traced step: ``width`` = columns of the node tensor it fetches (heads for the
    score primitives), ``heads`` = columns of its edge values, ``grads`` = which inputs need a gradient."""

    name: str
    layer: int
    width: int
    heads: int
    grads: tuple[bool, ...]


class _TraceGraph:
    def __init__(self, inner, layer: int, calls: list):
        self._inner, self._layer, self._calls = inner, layer, calls

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def _log(self, name, width, heads, *inputs):
        self._calls.append(PrimitiveCall(name, self._layer, int(width), int(heads),
                                         tuple(bool(t.requires_grad) for t in inputs)))

    def spmm(self, values, x):
        self._log("spmm", x.shape[1], 1 if values.dim() == 1 else values.shape[1], values, x)
        return self._inner.spmm(values, x)

    def sddmm_add(self, s_dst, s_src):
        self._log("sddmm_add", s_src.shape[1], s_src.shape[1], s_dst, s_src)
        return self._inner.sddmm_add(s_dst, s_src)

    def sddmm_dot(self, x_dst, x_src, heads: int = 1):
        self._log("sddmm_dot", x_src.shape[1], heads, x_dst, x_src)
        return self._inner.sddmm_dot(x_dst, x_src, heads)

    def edge_softmax(self, e):
        self._log("edge_softmax", e.shape[1] if e.dim() > 1 else 1, e.shape[1] if e.dim() > 1 else 1, e)
        return self._inner.edge_softmax(e)


class TracePlan:
    """Wraps a serial plan; records every primitive the model calls through ``graph(l)``."""

    def __init__(self, plan):
        self._plan = plan
        self.calls: list[PrimitiveCall] = []

    def __getattr__(self, name):
        return getattr(self._plan, name)

    def graph(self, layer: int):
        return _TraceGraph(self._plan.graph(layer), layer, self.calls)


def trace_graph(f0: int):
    """A 3-vertex path with ``f0`` features: enough to run any model once."""
    from ..graph import Graph

    x = np.arange(3 * f0, dtype=np.float64).reshape(3, f0) / (3 * f0)
    return Graph.from_edges([0, 1], [1, 2], 3, directed=False, x=x, y=np.array([0, 1, 0]),
                            train_mask=np.ones(3, bool), val_mask=np.ones(3, bool), test_mask=np.ones(3, bool))


class BlockRowVolume:
    r"""Per-rank bytes of each block-row primitive for ``algo`` on ``world`` processes.

    Args:
        algo: ``serial``, ``1d``, ``1d-sa``, ``1.5d`` or ``1.5d-sa``.
        matp: the permuted matrix (``n × n`` CSR, rows = destinations, the partition's labels).
        rows: the block-row partition; ``replication``: ``c`` of 1.5D.
    """

    def __init__(self, algo: str, matp: sp.csr_matrix, rows: RowPartition, world: int, replication: int = 1):
        from ..parallel.p15d import chunks

        self.world = world
        self.sa = algo.endswith("-sa")
        self.c = replication if algo.startswith("1.5d") else 1
        self.nb = world // self.c
        self.sizes = rows.sizes().astype(np.float64)
        self.chunks = chunks(self.nb, self.c)
        self.block = [r // self.c for r in range(world)]
        self.column = [r % self.c for r in range(world)]
        if self.sa:
            self.v = nnz_cols(sp.csr_matrix(matp), rows.bounds)

    def _new(self) -> dict:
        return {}

    def _add(self, out: dict, key: str, r: int, sent: float, recv: float) -> None:
        if key not in out:
            out[key] = (np.zeros(self.world), np.zeros(self.world))
        out[key][0][r] += sent
        out[key][1][r] += recv

    def fetch(self, out: dict, row_bytes: float, *, push: bool = False) -> None:
        """A fetch of ``row_bytes``-byte rows (``push``: its adjoint)."""
        if self.nb == 1:
            return
        for r in range(self.world):
            i, j = self.block[r], self.column[r]
            stages = self.chunks[j]
            if self.sa:
                v = self.v
                give = sum(v[i, l] for l in range(self.nb) if l != i) * row_bytes if i in stages else 0.0
                take = sum(v[q, i] for q in stages if q != i) * row_bytes
                self._add(out, "alltoallv", r, take if push else give, give if push else take)
            else:
                own = self.sizes[i] * row_bytes if i in stages else 0.0
                other = sum(self.sizes[q] for q in stages if q != i) * row_bytes
                self._add(out, "reduce" if push else "bcast", r, other if push else own, own if push else other)

    def rep(self, out: dict, row_bytes: float) -> None:
        """Ring all-reduce of a row-block result along ``"rep"``."""
        if self.c == 1:
            return
        for r in range(self.world):
            v = 2.0 * (self.c - 1) / self.c * self.sizes[self.block[r]] * row_bytes
            self._add(out, "allreduce", r, v, v)

    def primitive(self, call: PrimitiveCall, elem_bytes: int) -> tuple[dict, dict]:
        """``(forward, backward)`` bytes of one primitive call: ``{"<collective>": (sent[P], recv[P])}``."""
        fwd, bwd = {}, {}
        w = call.width * elem_bytes
        k = call.heads * elem_bytes
        if call.name == "spmm":
            need_v, need_x = call.grads
            self.fetch(fwd, w)
            self.rep(fwd, w)
            if need_v and not self.sa:
                self.fetch(bwd, w)
            if need_x:
                self.fetch(bwd, w, push=True)
                self.rep(bwd, w)
        elif call.name == "sddmm_add":
            self.fetch(fwd, k)
            self.rep(bwd, k)
            self.fetch(bwd, k, push=True)
            self.rep(bwd, k)
        elif call.name == "sddmm_dot":
            self.fetch(fwd, w)
            if not self.sa:
                self.fetch(bwd, w)
            self.fetch(bwd, w, push=True)
            self.rep(bwd, w)
            self.rep(bwd, w)
        elif call.name == "edge_softmax":
            self.rep(fwd, k)
            self.rep(fwd, k)
            self.rep(bwd, k)
        else:
            raise ValueError(f"no byte model for primitive {call.name!r}")
        return fwd, bwd

    def grad_axis_size(self) -> int:
        return self.nb


def nnz_cols(matp: sp.csr_matrix, bounds: np.ndarray) -> np.ndarray:
    """``V[q, l] = |NnzCols(l, q)|``: distinct columns of block ``q`` with an entry in block row ``l`` (the rows
    the owner of ``q`` sends to ``l``; in 1.5D only within the process column whose chunk holds ``q``)."""
    k = bounds.size - 1
    col_block = np.searchsorted(bounds, np.arange(matp.shape[1]), side="right") - 1
    v = np.zeros((k, k), dtype=np.int64)
    for l in range(k):
        cols = np.unique(matp.indices[matp.indptr[bounds[l]]:matp.indptr[bounds[l + 1]]])
        v[:, l] = np.bincount(col_block[cols], minlength=k)
    return v


def step_bytes(calls: list[PrimitiveCall], volume: BlockRowVolume, nparams: int, elem_bytes: int) -> dict:
    r"""Per-rank bytes of one training step, keyed ``"<phase>.<collective>"`` → ``(sent[P], recv[P])``: the sum
    of the traced primitives' forward and backward bytes plus the ring all-reduce of the ``nparams`` parameter
    gradients over the block axis."""
    total: dict = {}
    for call in calls:
        for phase, vols in zip(("fwd", "bwd"), volume.primitive(call, elem_bytes)):
            for key, (s, r) in vols.items():
                k = f"{phase}.{key}"
                if k not in total:
                    total[k] = (np.zeros(volume.world), np.zeros(volume.world))
                total[k][0][:] += s
                total[k][1][:] += r
    g = volume.grad_axis_size()
    if g > 1:
        v = 2.0 * (g - 1) / g * nparams * elem_bytes
        total["grad.allreduce"] = (np.full(volume.world, v), np.full(volume.world, v))
    return total


def trace_model(build_model, f0: int) -> tuple[list[PrimitiveCall], int]:
    """Run ``build_model(plan)`` once (forward, loss, backward) on a tiny serial plan in float64; returns the
    primitive calls and the number of parameters. ``build_model`` gets the plan (for parameter slices)."""
    from ..graph import gcn_normalize
    from ..ops.loss import masked_cross_entropy
    from ..parallel.serial import build_serial

    g = trace_graph(f0)
    plan = TracePlan(build_serial(gcn_normalize(g)))
    model = build_model(plan)
    model.train()
    out = model(torch.from_numpy(g.x), plan)
    masked_cross_entropy(out, torch.from_numpy(g.y), torch.ones(3, dtype=torch.bool), 3).backward()
    return plan.calls, sum(p.numel() for p in model.parameters())
