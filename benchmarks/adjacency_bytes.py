"""Bytes a rank's adjacency costs per stored nonzero, on every family, measured from the tensors its plan holds.

One spawned group of P ranks builds each algorithm's plan for a GCN (float32) on the same graph, runs one training
step (so what is built on first use, such as a transpose, exists) and counts every tensor its graphs keep, by
storage (``tests/planner/_measure.py``, the count the memory tests compare the model with, byte for byte). Prints per
algorithm the stored nonzeros of the largest rank's copies of the matrix (``shard_nnz``: one per block-row block, per
SUMMA matrix version, per Plexus shard), its adjacency bytes split into index and value bytes, and both per stored
nonzero per copy. Every family keeps a pattern (row pointer, column; the row of each edge only on a GPU) and its
transposed order per copy; the block-row families hold the columns in their stages' patterns (the oblivious 1D's
CAGNET stage loop), with each stage's edge positions where a block row splits in several stages.

Usage: python benchmarks/adjacency_bytes.py [--data SPEC] [--nproc 4] [--algos 1d,1d-sa,...]
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from gridgnn.distributed.launch import launch  # noqa: E402
from gridgnn.graph.spec import load_graph  # noqa: E402
from tests.planner._measure import Counter, measure_rank  # noqa: E402

SHAPES = {"1d": (4,), "1d-sa": (4,), "1.5d": (2, 2), "1.5d-sa": (2, 2), "2d": (2, 2), "3d": (1, 2, 2),
          "plexus": (2, 2, 1), "edge": (1, 4)}


def split_bytes(plan) -> tuple[int, int]:
    """``(index bytes, value bytes)`` of the tensors the plan's graphs hold (each storage once: the memory tests'
    :class:`Counter`, one for each kind, sharing what they have seen)."""
    idx, val = Counter(), Counter()
    val.seen = idx.seen
    graphs = [plan.dgraph] if hasattr(plan, "dgraph") else list(plan.graphs.values())
    for g in graphs:
        for t in g.held()[0]:
            (val if t.is_floating_point() else idx).tensor(t)
    return idx.total, val.total


def worker(ctx, graph, cases, dims):
    from gridgnn.distributed import Comm, ProcessGrid
    from gridgnn.parallel import algorithm
    from gridgnn.train.rank_layout import build_rank, make_source
    from tests.planner._measure import model_builder

    ctx.init()
    out = []
    for algo, shape in cases:
        kind = algorithm(algo).grid
        c = shape[1] if kind == "1.5d" else 1
        grid = ProcessGrid.build(kind, "cpu", replication=c, shape=shape if kind in ("2d", "3d") else None)
        comm = Comm(grid)
        source, rows = make_source(graph, algo, ctx.world_size, replication=c, shape=shape, method="random", seed=1)
        plan, data = build_rank(graph, algo, comm, dims, source=source, rows=rows, dtype=torch.float32,
                                model=model_builder("gcn", dims, 0.5, torch.float64))
        m = measure_rank(plan, data, comm, dims, dropout=0.5)
        idx, val = split_bytes(plan)
        out.append({"adjacency": m["adjacency"], "index": idx, "values": val, "copies": plan.shard_nnz()})
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="synthetic:rmat?scale=15&edge_factor=16&features=16&classes=8")
    ap.add_argument("--nproc", type=int, default=4)
    ap.add_argument("--algos", default=",".join(SHAPES))
    args = ap.parse_args()
    graph = load_graph(args.data)
    algos = args.algos.split(",")
    cases = [(a, SHAPES[a]) for a in algos]
    dims = [graph.num_features, 64, graph.num_classes]
    res = launch(worker, args.nproc, graph, cases, dims, device="cpu", collect=True)
    print(f"{args.data}: n = {graph.n}, stored nonzeros {graph.nnz}; GCN {dims}, float32, P = {args.nproc}")
    print("| algo | grid | copies × nnz (largest rank) | adjacency MiB | index B/nnz | values B/nnz | total B/nnz |")
    print("|---|---|---|---|---|---|---|")
    for k, (a, shape) in enumerate(cases):
        r = max(range(args.nproc), key=lambda q: res[q][k]["adjacency"])
        m = res[r][k]
        z = sum(m["copies"])
        print(f"| {a} | {'x'.join(map(str, shape))} | {len(m['copies'])} × {z / max(1, len(m['copies'])):.0f} "
              f"| {m['adjacency'] / 2 ** 20:.1f} | {m['index'] / z:.1f} | {m['values'] / z:.1f} "
              f"| {m['adjacency'] / z:.1f} |", flush=True)


if __name__ == "__main__":
    main()
