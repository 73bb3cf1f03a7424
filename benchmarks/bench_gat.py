"""GAT epoch time and peak memory at P = 1: gridgnn serial GAT (primitives) next to a PyG ``GATConv`` stack with
the same widths, each in its own subprocess (so each peak is its own), measured in the same invocation.

Two layers: 8 heads × 8 hidden (concatenated, ELU), one output head; dropout 0.6 on inputs and attention;
Adam lr 0.005; float32; median over the timed epochs of forward + loss + backward + Adam step.
Usage: python benchmarks/bench_gat.py [--data SPEC] [--epochs 10] [--warmup 2]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

DEFAULT = "synthetic:sbm?n=100000&classes=8&avg_degree=20&features=64"


def worker(impl: str, spec: str, epochs: int, warmup: int) -> dict:
    import numpy as np
    import torch
    import torch.nn.functional as F

    from gridgnn.graph import gcn_normalize
    from gridgnn.graph.spec import load_graph
    from gridgnn.planner.memory import measured_peak_bytes

    torch.manual_seed(0)
    g = load_graph(spec)
    x = torch.from_numpy(np.asarray(g.x, dtype=np.float32))
    y = torch.from_numpy(g.y)
    train = torch.from_numpy(g.train_mask & (g.y >= 0))
    f, c = g.num_features, g.num_classes
    if impl == "pyg":
        from torch_geometric.nn import GATConv

        ei = torch.from_numpy(g.edge_index())
        convs = torch.nn.ModuleList([GATConv(f, 8, heads=8, dropout=0.6), GATConv(64, c, heads=1, concat=False,
                                                                                 dropout=0.6)])

        def forward():
            h = F.dropout(x, 0.6, training=True)
            h = F.elu(convs[0](h, ei))
            h = F.dropout(h, 0.6, training=True)
            return convs[1](h, ei)

        params = convs.parameters()
    else:
        from gridgnn.nn import GAT
        from gridgnn.parallel.serial import build_serial

        plan = build_serial(gcn_normalize(g), dtype=torch.float32)
        model = GAT([f, 8, c], heads=8, out_heads=1, dropout=0.6, attn_dropout=0.6, dtype=torch.float32)
        model.train()

        def forward():
            model.epoch += 1
            return model(x, plan)

        params = model.parameters()
    opt = torch.optim.Adam(params, lr=0.005, weight_decay=5e-4)
    times = []
    for epoch in range(warmup + epochs):
        t0 = time.perf_counter()
        opt.zero_grad()
        out = forward()
        F.cross_entropy(out[train], y[train]).backward()
        opt.step()
        if epoch >= warmup:
            times.append(time.perf_counter() - t0)
    return {"epoch_ms": 1e3 * statistics.median(times), "peak_bytes": measured_peak_bytes(), "n": g.n, "nnz": g.nnz}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=DEFAULT)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--worker", choices=("pyg", "gridgnn"))
    args = ap.parse_args()
    if args.worker:
        print("RESULT " + json.dumps(worker(args.worker, args.data, args.epochs, args.warmup)))
        return
    res = {}
    for impl in ("pyg", "gridgnn"):
        r = subprocess.run([sys.executable, __file__, "--worker", impl, "--data", args.data, "--epochs",
                            str(args.epochs), "--warmup", str(args.warmup)], capture_output=True, text=True)
        line = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
        if not line:
            raise SystemExit(f"{impl} failed:\n{r.stderr[-2000:]}")
        res[impl] = json.loads(line[0][7:])
    n, nnz = res["gridgnn"]["n"], res["gridgnn"]["nnz"]
    print(f"data: {args.data} (n={n}, {nnz} stored edges), 8 heads x 8 + 1 output head, float32, "
          f"median of {args.epochs} epochs")
    print("| run | epoch time (ms, median) | × PyG | peak memory (MiB) | × PyG |")
    print("|---|---|---|---|---|")
    for impl, name in (("pyg", "PyG GATConv"), ("gridgnn", "gridgnn serial GAT")):
        r = res[impl]
        print(f"| {name} | {r['epoch_ms']:.1f} | {r['epoch_ms'] / res['pyg']['epoch_ms']:.2f} | "
              f"{r['peak_bytes'] / 2**20:.0f} | {r['peak_bytes'] / res['pyg']['peak_bytes']:.2f} |")


if __name__ == "__main__":
    main()
