"""One serial GraphSAGE step with a selecting aggregation (max) next to the mean: the memory the torch allocator
held (``bench_local.allocated_peak``: the tensors alive plus the step's own peak, torch.profiler's memory timeline)
against the memory guard's estimate of the same step, less its runtime constant and the host's copy of the graph.
The allocator's view holds neither. The estimate also counts what NumPy holds, the edges' original ids (16 bytes
per edge), and it books a ``linear``'s backward as two tensors of its layer's widest width, an upper bound.

Usage: python benchmarks/selection_memory.py [--data SPEC] [--hidden 64]
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "src"))
sys.path.insert(0, HERE)

from bench_local import allocated_peak, serial_step  # noqa: E402
from gridgnn.graph.spec import load_graph  # noqa: E402
from gridgnn.nn import MODELS  # noqa: E402
from gridgnn.parallel.blockrow import serial_plan  # noqa: E402
from gridgnn.train.config import TrainConfig  # noqa: E402
from gridgnn.train.rank_layout import estimate_memory, model_trace  # noqa: E402
from gridgnn.train.rank_setup import build_model  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="synthetic:sbm?n=20000&classes=8&avg_degree=20&features=64")
    ap.add_argument("--hidden", type=int, default=64)
    args = ap.parse_args()
    g = load_graph(args.data)
    dims = [g.num_features, args.hidden, g.num_classes]
    x = torch.from_numpy(np.asarray(g.x, dtype=np.float32))
    y = torch.from_numpy(g.y)
    train = torch.from_numpy(np.flatnonzero(g.train_mask & (g.y >= 0)))
    plan = serial_plan(g, dtype=torch.float32)
    print(f"data: {args.data}; GraphSAGE {dims}, dropout 0.5, float32, serial")
    print("\n| aggregation | allocated (MiB) | estimate (MiB) | estimate / allocated | the estimate's peak |")
    print("|---|---:|---:|---:|---|")
    for aggr in ("mean", "max"):
        net = MODELS["sage"].from_options(dims, plan=None, dtype=torch.float32, seed=0, dropout=0.5, aggr=aggr)
        step = serial_step(net, torch.optim.Adam(net.parameters(), lr=0.01), x, plan, y, train)
        step()
        step()
        held = allocated_peak(step)
        cfg = TrainConfig(model="sage", hidden=args.hidden, layers=len(dims) - 1, dropout=0.5, aggr=aggr)
        tr = model_trace(dims, lambda p: build_model(cfg, dims, p, torch.float64), "serial")
        r = estimate_memory(g, None, "serial", (1,), dims, elem_bytes=4, dropout=0.5, trace=tr).ranks[0]
        est = r.total - r.per_component["runtime"] - r.per_component["graph"]
        print(f"| {aggr} | {held / 2**20:.1f} | {est / 2**20:.1f} | {est / held:.2f} | {r.moment} |", flush=True)


if __name__ == "__main__":
    main()
