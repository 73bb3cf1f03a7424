"""Minibatch vs full-graph training of one model: test accuracy per seed on Cora (standard split) and the embedded
SBM (gridgnn's default graph), full-graph serial next to minibatch training serially and at P = 4 with the graph
replicated and partitioned (c = 2) for sampling.

Both (``--model sage``, the default): SAGE-mean, 2 layers, hidden 16, dropout 0.5, lr 0.01, weight decay 5e-4,
200 epochs, the epoch of the best validation accuracy; ``--model gcn``: the same with GCN; ``--model gat``: PyG's
Cora GAT (8 heads of 8, dropout 0.6 on inputs and attention, lr 0.005). Minibatches: 64 training vertices (Cora's and the SBM's 140 / 160 training vertices make 3
minibatches per epoch), fanout 10,10 — the 2-layer counterpart of the paper's 15,10,5 at this scale (Cora's mean
degree is 3.9, so 10 keeps most neighbourhoods whole and samples the hubs); evaluation on the full
neighbourhood in minibatches of 1024. Usage: python benchmarks/minibatch_accuracy.py [--model sage|gcn|gat]
[--seeds 5] [--cora DIR] [--datasets cora,sbm]
"""
from __future__ import annotations

import argparse
import os
import statistics

from _common import run


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("--cora", default=os.path.join(here, "..", "..", "shared", "data", "planetoid", "cora"))
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--epochs", type=int, default=200)
    ap.add_argument("--datasets", default="cora,sbm")
    ap.add_argument("--model", default="sage", choices=("sage", "gcn", "gat"))
    args = ap.parse_args()
    data = {"cora": f"planetoid:{args.cora}", "sbm": None}
    hyper = dict(model=args.model, layers=2, hidden=16, lr=0.01, dropout=0.5, weight_decay=5e-4, epochs=args.epochs)
    if args.model == "gat":
        hyper.update(hidden=8, heads=8, dropout=0.6, lr=0.005)
    mini = dict(sampler="sage", fanout="10,10", batch_size=64, eval_batch_size=1024)
    configs = [("full-graph serial", dict()), ("minibatch P=1", dict(**mini)),
               ("minibatch P=4 replicated", dict(**mini, nproc=4, sample_graph="replicated")),
               ("minibatch P=4 partitioned c=2", dict(**mini, nproc=4, replication=2, sample_graph="partitioned"))]
    for name in args.datasets.split(","):
        acc = {c: [] for c, _ in configs}
        for seed in range(args.seeds):
            for cname, kw in configs:
                s = run(data=data[name], seed=seed, **hyper, **kw)
                acc[cname].append(s["test_acc"])
            print(f"{name} seed {seed}: " + "  ".join(f"{c}={acc[c][-1]:.3f}" for c, _ in configs), flush=True)
        full = statistics.mean(acc["full-graph serial"])
        print(f"\n{name}:\n\n| run | mean test acc ({args.seeds} seeds) | − full-graph | per seed |")
        print("|---|---|---|---|")
        for cname, _ in configs:
            m = statistics.mean(acc[cname])
            print(f"| {cname} | {m:.4f} | {m - full:+.4f} | {', '.join(f'{a:.3f}' for a in acc[cname])} |",
                  flush=True)


if __name__ == "__main__":
    main()
