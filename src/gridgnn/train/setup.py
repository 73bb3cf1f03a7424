r"""Per-rank set-up shared by the trainer and the fidelity harness: partition → permuted matrix →
algorithm plan → this rank's rows."""
from __future__ import annotations

import os

import numpy as np
import torch

from ..errors import GridGnnError
from ..graph import Graph, gcn_normalize
from ..parallel import GRID_OF, build_plan, is_symmetric
from ..parallel.serial import build_serial
from ..partition import RowPartition
from .step import LocalData

BUILTIN_PARTITIONS = ("random", "identity")
GRAPH_PARTITIONERS = ("metis", "metis-vol", "hypergraph", "balanced")


def num_blocks(algo: str, world: int, replication: int) -> int:
    """Row blocks of ``algo``: P for 1D, P/c for 1.5D, 1 for serial."""
    if algo == "serial":
        return 1
    return world if GRID_OF[algo] == "1d" else world // replication


def make_partition(graph: Graph, parts: int, method: str, seed: int) -> RowPartition:
    r"""``random`` (default: random permutation + equal blocks), ``identity`` (input order, equal blocks),
    a graph partitioner (``metis``, ``metis-vol``, ``hypergraph``, ``balanced``), or a partition FILE
    (one part id per vertex, original order)."""
    if method == "random":
        return RowPartition.random(graph.n, parts, seed)
    if method == "identity":
        return RowPartition.identity(graph.n, parts)
    if graph.n < parts:
        raise GridGnnError(f"cannot split {graph.n} vertices into {parts} row blocks")
    if method in GRAPH_PARTITIONERS:
        from ..partition.partitioners import partition_graph

        return partition_graph(graph, parts, method, seed=seed)
    if os.path.exists(method):
        from ..partition.partitioners import load_partition_file

        return load_partition_file(method, graph.n, parts)
    raise GridGnnError(f"--partition {method!r} is neither a method ({', '.join(BUILTIN_PARTITIONS + GRAPH_PARTITIONERS)}) "
                       f"nor an existing partition file")


def build_rank(graph: Graph, algo: str, comm, rows: RowPartition | None, *, dtype=torch.float32,
               device="cpu", semiring: str = "sum"):
    """Returns ``(plan, data)`` for this rank: the algorithm and the local rows it trains on."""
    mat = gcn_normalize(graph)
    if algo == "serial":
        plan = build_serial(mat, dtype=dtype, device=device)
    else:
        matp = rows.permute_matrix(mat)
        plan = build_plan(algo, comm, matp, rows, symmetric=is_symmetric(matp), dtype=dtype, device=device,
                          semiring=semiring)
    ids = plan.rows.perm[plan.local_slice]
    return plan, local_data(graph, ids, dtype=dtype, device=device)


def local_data(graph: Graph, ids: np.ndarray, *, dtype, device) -> LocalData:
    if graph.x is None:
        raise GridGnnError("the graph has no node features")
    if graph.y is None:
        raise GridGnnError("node classification needs labels, and this graph has none")
    n_train = int((graph.train_mask & (graph.y >= 0)).sum()) if graph.train_mask is not None else 0
    if n_train == 0:
        raise GridGnnError("the graph has no training nodes (empty train mask)")
    masks = {}
    for name in ("train", "val", "test"):
        m = getattr(graph, f"{name}_mask")
        m = np.zeros(graph.n, bool) if m is None else m
        masks[name] = torch.from_numpy(m[ids] & (graph.y[ids] >= 0)).to(device)
    return LocalData(x=torch.from_numpy(np.asarray(graph.x[ids], dtype=np.float64)).to(dtype).to(device),
                     y=torch.from_numpy(graph.y[ids]).to(device), masks=masks, node_ids=ids, n_train=n_train)
