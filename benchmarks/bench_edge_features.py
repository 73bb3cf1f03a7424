"""Edge features: the serial GINE and GATv2 against PyG's ``GINEConv`` / ``GATv2Conv`` stacks (the same weights) —
forward+backward time of one step, measured in the same process — and, at P, the bytes one training epoch moves
for GINE and GATv2 next to GCN and GAT of the same widths on each algorithm (what the compositions cost on the
wire).

Usage: python benchmarks/bench_edge_features.py [--n 20000] [--degree 10] [--features 32] [--edge-dim 8]
[--hidden 64] [--heads 4] [--repeats 5] [--nproc 4] [--algos 1d,1d-sa,1.5d,2d,3d]
"""
from __future__ import annotations

import argparse

import numpy as np
import torch

from _common import against_pyg, run
from gridgnn.graph.spec import load_graph
from gridgnn.nn import GATv2, GINE
from gridgnn.parallel.blockrow import serial_plan
from gridgnn.train.rank_layout import attach_edge_features

LAYOUTS = {"1d": {}, "1d-sa": {}, "1.5d": {"replication": 2}, "1.5d-sa": {"replication": 2}, "2d": {}, "3d": {}}


def serial_table(spec: str, args) -> None:
    g = load_graph(spec)
    x = torch.from_numpy(g.x)
    ei, ea = torch.from_numpy(g.edge_index()), torch.from_numpy(g.edge_attr)
    classes = g.num_classes
    models = {"gine": GINE([g.num_features, args.hidden, classes], edge_dim=args.edge_dim, dropout=0.0),
              "gatv2": GATv2([g.num_features, args.hidden // args.heads, classes], heads=args.heads, out_heads=1,
                             edge_dim=args.edge_dim, dropout=0.0, attn_dropout=0.0)}
    print(f"serial, {g.name}: n={g.n}, nnz={g.nnz}, {g.num_features} features, {args.edge_dim} edge features; "
          f"forward+backward of one step, median of {args.repeats} (torch threads {torch.get_num_threads()})")
    print(f"{'model':8s} {'gridgnn ms':>11s} {'PyG ms':>8s} {'ratio':>6s} {'max |diff|':>11s}")
    for name, model in models.items():
        model.eval()
        plan = serial_plan(g, dtype=torch.float32)
        attach_edge_features(plan, g, model.num_layers)
        a, b, diff = against_pyg(model, plan, x, (x, ei, ea), args.repeats)
        print(f"{name:8s} {1e3 * a:11.1f} {1e3 * b:8.1f} {a / b:6.2f} {diff:11.2e}")


def bytes_table(spec: str, args) -> None:
    algos = args.algos.split(",")
    print(f"\nP={args.nproc}, bytes one training epoch moves (fwd+bwd+grad over all ranks), 1 epoch")
    print(f"{'algo':8s} {'gcn':>12s} {'gine':>12s} {'gine/gcn':>9s} {'gat':>12s} {'gatv2':>12s} {'gatv2/gat':>10s}")
    pairs = {"gcn": dict(model="gcn", hidden=args.hidden), "gine": dict(model="gine", hidden=args.hidden),
             "gat": dict(model="gat", heads=args.heads, hidden=args.hidden // args.heads),
             "gatv2": dict(model="gatv2", heads=args.heads, hidden=args.hidden // args.heads)}
    for algo in algos:
        got = {}
        for name, kw in pairs.items():
            s = run(data=spec, algo=algo, nproc=args.nproc, epochs=1, **LAYOUTS[algo], **kw)
            got[name] = sum(v for k, v in s["comm_bytes_per_epoch"]["by_phase"].items()
                            if k.split(".")[0] in ("fwd", "bwd", "grad"))
        print(f"{algo:8s} {got['gcn']:12,.0f} {got['gine']:12,.0f} {got['gine'] / got['gcn']:9.3f} "
              f"{got['gat']:12,.0f} {got['gatv2']:12,.0f} {got['gatv2'] / got['gat']:10.3f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--degree", type=float, default=10.0)
    ap.add_argument("--features", type=int, default=32)
    ap.add_argument("--edge-dim", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--nproc", type=int, default=4)
    ap.add_argument("--algos", default="1d,1d-sa,1.5d,2d,3d")
    args = ap.parse_args()
    spec = (f"synthetic:sbm?n={args.n}&classes=8&avg_degree={args.degree:g}&features={args.features}"
            f"&edge_features={args.edge_dim}")
    np.set_printoptions(precision=3)
    serial_table(spec, args)
    if args.nproc > 1:
        bytes_table(spec, args)


if __name__ == "__main__":
    main()
