r"""Fidelity harness: run one forward/backward of a GCN with a distributed algorithm on every rank and
return what the serial reference must reproduce (logits in original node order, parameter gradients,
loss) plus the communication log. Used by the test suite; also handy to check a new machine.

One spawned group runs many cases, so process start-up is paid once per P.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from .dist import Comm, NullComm, ProcessGrid
from .graph import Graph
from .nn import GCN
from .parallel import GRID_OF
from .partition import RowPartition
from .train.setup import build_rank, make_partition, num_blocks
from .train.step import forward_backward


@dataclass
class Case:
    graph: Graph
    algo: str
    dims: list
    replication: int = 1
    partition: str | RowPartition = "random"
    dropout: float = 0.0
    seed: int = 0
    epoch: int = 0


@dataclass
class CaseResult:
    node_ids: np.ndarray
    logits: np.ndarray
    grads: list
    loss: float
    comm: dict = field(default_factory=dict)
    volume_rows: dict = field(default_factory=dict)
    rank: int = 0


def run_case(case: Case, comm) -> CaseResult:
    dtype = torch.float64
    if case.algo == "serial":
        rows = None
    elif isinstance(case.partition, RowPartition):
        rows = case.partition
    else:
        parts = num_blocks(case.algo, comm.grid.world_size, case.replication)
        rows = make_partition(case.graph, parts, case.partition, case.seed)
    comm.log.reset()
    plan, data = build_rank(case.graph, case.algo, comm, rows, dtype=dtype)
    setup = comm.log.snapshot()
    comm.log.reset()
    model = GCN(case.dims, dropout=case.dropout, seed=case.seed, dtype=dtype)
    loss, logits = forward_backward(model, plan, comm, data, epoch=case.epoch)
    vol = {}
    agg = plan.aggregate
    if hasattr(agg, "fwd"):
        vol = {"fwd": agg.fwd.volume_rows(), "bwd": agg.bwd.volume_rows()}
    stats = {k: (v.sent, v.recv, v.calls) for k, v in comm.log.snapshot().items()}
    stats.update({k: (v.sent, v.recv, v.calls) for k, v in setup.items()})
    return CaseResult(data.node_ids.copy(), logits.numpy().copy(),
                      [p.grad.detach().numpy().copy() for p in model.parameters()], float(loss), stats, vol,
                      comm.grid.global_rank)


def serial_case(case: Case) -> CaseResult:
    return run_case(Case(**{**case.__dict__, "algo": "serial"}), NullComm())


def distributed_worker(ctx, cases: list[Case]) -> list[CaseResult]:
    """Worker for :func:`gridgnn.dist.launch.launch`: runs every case on this rank."""
    ctx.init()
    out, grids = [], {}
    for case in cases:
        kind = GRID_OF[case.algo]
        key = (kind, case.replication)
        if key not in grids:  # every rank builds the same meshes in the same order
            grids[key] = ProcessGrid.build(kind, "cpu", replication=case.replication)
        out.append(run_case(case, Comm(grids[key])))
    return out


def assemble(results: list[CaseResult], n: int) -> np.ndarray:
    """Logits of all ranks in original node order (replicas must agree; the first one is used)."""
    f = results[0].logits.shape[1]
    full = np.full((n, f), np.nan)
    for r in results:
        full[r.node_ids] = r.logits
    return full
