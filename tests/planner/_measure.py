r"""Byte counts of the tensors real plans build, for comparison with :mod:`gridgnn.planner.memory`.

Everything is counted from the objects themselves (torch ``nbytes``, SciPy array ``nbytes``), by identity of
the underlying storage, so shared tensors (the undirected backward engine, replicated shards) count once.
"""
from __future__ import annotations

import numpy as np
import torch


class Counter:
    """The bytes of the memory the counted tensors and arrays span, each byte once: the union of their address
    ranges (a tensor made from an array with ``torch.from_numpy`` is the array's memory, counted once)."""

    def __init__(self):
        self.spans: dict[int, int] = {}  # start address → end

    @property
    def total(self) -> int:
        total, reach = 0, 0
        for start, end in sorted(self.spans.items()):
            if end > reach:
                total += end - max(start, reach)
                reach = end
        return total

    def _span(self, start: int, nbytes: int) -> None:
        if nbytes:
            self.spans[start] = max(self.spans.get(start, 0), start + nbytes)

    def tensor(self, t) -> None:
        if t is None:
            return
        if t.layout == torch.sparse_csr:
            for part in (t.crow_indices(), t.col_indices(), t.values()):
                self.tensor(part)
            return
        s = t.untyped_storage()
        self._span(s.data_ptr(), s.nbytes())

    def array(self, a) -> None:
        if a is None:
            return
        base = a
        while isinstance(base, np.ndarray) and base.base is not None and isinstance(base.base, np.ndarray):
            base = base.base
        self._span(base.__array_interface__["data"][0], base.nbytes)

    def scipy(self, m) -> None:
        for a in (m.data, m.indices, m.indptr):
            self.array(a)


def adjacency_bytes(plan) -> int:
    """Every sparse block a plan keeps (torch tensors and the SciPy blocks of the block-row engines)."""
    c = Counter()
    graphs = list(plan.graphs.values()) if hasattr(plan, "graphs") else [plan.dgraph]
    for g in graphs:
        tensors, arrays = g.held()
        for t in tensors:
            c.tensor(t)
        for a in arrays:
            c.array(a)
    return c.total


def feature_bytes(data, plan=None) -> int:
    """The rank's input block, labels and masks, and (given ``plan``) what its graphs looked up of the edge table:
    the local edges' features and input-edge mask, their relation weights."""
    c = Counter()
    c.tensor(data.x)
    c.tensor(data.y)
    for m in data.masks.values():
        c.tensor(m)
    c.tensor(data.train_rows)
    graphs = [] if plan is None else [plan.dgraph] if hasattr(plan, "dgraph") else \
        list(getattr(plan, "graphs", {}).values())
    for g in graphs:
        for t in (*(g._edge_cache or ()), g._relation_cache):
            c.tensor(t)
    return c.total


def parameter_bytes(model, opt=None) -> int:
    """Parameters, their gradients and the optimizer's state tensors."""
    c = Counter()
    for p in model.parameters():
        c.tensor(p)
        c.tensor(p.grad)
        if opt is not None:
            for v in opt.state.get(p, {}).values():
                if torch.is_tensor(v):
                    c.tensor(v)
    return c.total


def graph_bytes(graph, source=None, rows=None) -> int:
    """The Graph's arrays, and an InMemorySource's normalized matrix, cached versions and vertex orders."""
    c = Counter()
    for name in ("indptr", "indices", "values", "x", "y", "train_mask", "val_mask", "test_mask"):
        c.array(getattr(graph, name))
    if source is not None:
        c.scipy(source._mat)
        for m in source._versions.values():
            c.scipy(m)
        c.array(source.perm_r)
        c.array(source.perm_c)
    if rows is not None:
        c.array(rows.perm)
    return c.total


def train_step_saved(model, plan, comm, data, *, epoch: int = 0):
    """One forward/backward with a saved-tensor hook: ``(activation bytes, loss, logits)``.

    Activation bytes = storages autograd saved that are not parameters, the rank's input data or what its graphs
    hold (their values and edge-table lookups: :func:`feature_bytes` counts those), dedup by storage, plus the
    logits block; 0-dim scalars are not activations."""
    from gridgnn.ops.masked import Recomputed, recomputing
    from gridgnn.train.step import forward_backward

    graphs = [plan.dgraph] if hasattr(plan, "dgraph") else list(getattr(plan, "graphs", {}).values())
    graph_values = [g.gcn_values for g in graphs]  # adjacency, not activations
    exclude = {t.untyped_storage().data_ptr() for t in list(model.parameters()) + [data.x, data.y]
               + list(data.masks.values()) + [data.train_rows] + graph_values}
    saved: dict = {}

    def looked_up() -> set:  # the graphs' edge-table lookups (features, relation weights): made on first use
        return {t.untyped_storage().data_ptr() for g in graphs
                for t in (*(g._edge_cache or ()), g._relation_cache) if t is not None}

    def kept(t):  # what autograd keeps: a tensor, or a dropout output's input and mask (recomputed; a mask drawn
        # again is not kept)
        for u in ((t.x,) if t.redrawn else (t.x, t.mask)) if isinstance(t, Recomputed) else (t,):
            if u.dim() > 0 and u.layout == torch.strided:
                s = u.untyped_storage()
                if s.data_ptr() not in exclude and s.data_ptr() not in looked_up():
                    saved[s.data_ptr()] = s.nbytes()

    with recomputing(observe=kept):  # (the model's own call nests it: an observer sees inside)
        loss, logits = forward_backward(model, plan, comm, data, epoch=epoch)
    ls = logits.untyped_storage()
    saved.setdefault(ls.data_ptr(), ls.nbytes())
    return sum(saved.values()), loss, logits


#: the options a model built by :func:`model_builder` gets from the data it reads (the measured graphs': four
#: edge features, three relation types)
DATA_OPTIONS = {"gine": {"edge_dim": 4}, "gatv2": {"edge_dim": 4}, "rgcn": {"num_relations": 3, "bases": 2}}


def model_builder(name: str, dims, dropout: float, dtype=torch.float32, **given):
    """``plan → model`` of the built-in model ``name`` with its default options (``sage+sum``: SAGE with
    ``aggr="sum"``; a model that reads edge data: :data:`DATA_OPTIONS`) and the options ``given``."""
    from gridgnn.nn import resolve_model

    base, _, aggr = name.partition("+")
    options = {"aggr": aggr} if aggr else dict(DATA_OPTIONS.get(base, {}))
    options.update(given)

    def build(plan):
        return resolve_model(base).from_options(dims, plan=plan, dtype=dtype, seed=0, dropout=dropout, **options)
    return build


def measure_rank(plan, data, comm, dims, *, dropout: float, dtype=torch.float32, model: str = "gcn") -> dict:
    """Build the model and Adam on this rank's plan, run one training step, and count every component the
    estimate predicts (exactly for GCN)."""
    model = model_builder(model, dims, dropout, dtype)(plan)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    opt.zero_grad(set_to_none=True)
    act, _, _ = train_step_saved(model, plan, comm, data, epoch=1)
    opt.step()
    return {"adjacency": adjacency_bytes(plan), "features": feature_bytes(data, plan),
            "parameters": parameter_bytes(model, opt), "activations": act,
            "train_rows": int(data.masks["train"].sum())}


def distributed_measure(ctx, cases) -> list[dict]:
    """Worker for :func:`gridgnn.distributed.launch.launch`: ``cases`` = ``[(graph, algo, shape, partition, dims,
    dropout[, model])]``; returns this rank's measurements of every case, on the launch's device."""
    from gridgnn.distributed import Comm, ProcessGrid
    from gridgnn.parallel import algorithm
    from gridgnn.train.rank_layout import build_rank, make_source

    ctx.init()
    out, grids = [], {}
    for graph, algo, shape, partition, dims, dropout, *model in cases:
        name = model[0] if model else "gcn"
        kind = algorithm(algo).grid
        c = shape[1] if kind == "1.5d" else 1
        key = (kind, tuple(shape))
        if key not in grids:  # every rank builds the same meshes in the same order
            grids[key] = ProcessGrid.build(kind, ctx.device.split(":")[0], replication=c,
                                           shape=shape if kind in ("2d", "3d") else None)
        comm = Comm(grids[key])
        source, rows = make_source(graph, algo, ctx.world_size, replication=c, shape=shape, method=partition, seed=1)
        plan, data = build_rank(graph, algo, comm, dims, source=source, rows=rows, dtype=torch.float32,
                                device=ctx.device, model=model_builder(name, dims, dropout, torch.float64))
        out.append(measure_rank(plan, data, comm, dims, dropout=dropout, model=name))
    return out


def gcn_estimate(algo: str, shape, n: int, nnz: int, dims, **kw):
    """:func:`gridgnn.planner.memory.estimate_rank_memory` of GCN on ``dims`` (its cached trace,
    :func:`gridgnn.train.rank_layout.gcn_trace`, with the estimate's dropout and vertex orders) unless a ``trace`` is
    given."""
    from gridgnn.planner.memory import estimate_rank_memory
    from gridgnn.train.rank_layout import gcn_trace

    if kw.get("trace") is None:
        kw["trace"] = gcn_trace(tuple(dims), algo, dropout=kw.get("dropout", 0.5) > 0,
                                double=bool(kw.get("double", False)))
    return estimate_rank_memory(algo, shape, n, nnz, dims, **kw)
