"""Cora, standard split, 200 epochs: test accuracy per seed for serial and every algorithm at P=4, and the largest
gap to serial. ``--model gcn``: 2 layers, hidden 16, dropout 0.5, lr 0.01. ``--model gat``: 2 layers, 8 heads × 8
hidden, one output head, dropout 0.6 on inputs and attention, lr 0.005. ``--model agnn``: PyG's example (Linear 16
→ ReLU → AGNN β fixed → AGNN β trained → Linear: ``--layers 4``), dropout 0.5, lr 0.01. ``--model sage``:
GraphSAGE (root weight) with ``--aggr`` (default mean), 2 layers, hidden 16, dropout 0.5, lr 0.01. ``--model va``:
vanilla attention at its defaults (2 layers, hidden 16, dropout 0.5, lr 0.01, ``--feature-norm auto``: unit-L2
feature rows; ``--feature-norm none`` for the features as loaded).
Weight decay 5e-4. ``--device cuda``: one GPU per process (NCCL); with one GPU, ``--nproc 1`` runs every algorithm's
code on one process. Usage: python benchmarks/cora_accuracy.py [CORA_DIR] [--seeds 5] [--model gcn|gat|agnn|sage|va]
[--device cpu|cuda]
"""
from __future__ import annotations

import argparse
import os
import statistics

from _common import every_algorithm, run


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("cora", nargs="?", default=os.path.join(here, "..", "..", "shared", "data", "planetoid", "cora"))
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--nproc", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=200)
    ap.add_argument("--model", choices=("gcn", "gat", "agnn", "sage", "va"), default="gcn")
    ap.add_argument("--feature-norm", default="auto", choices=("auto", "none", "l2"))
    ap.add_argument("--aggr", default="mean", help="--model sage: mean, sum, max or min")
    ap.add_argument("--algos", default=None, help="comma-separated subset (serial always runs)")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    args = ap.parse_args()
    if args.model == "gat":
        hyper = dict(model="gat", layers=2, heads=8, hidden=8, lr=0.005, dropout=0.6, attn_dropout=0.6)
    elif args.model == "agnn":
        hyper = dict(model="agnn", layers=4, hidden=16, lr=0.01, dropout=0.5)
    elif args.model == "sage":
        hyper = dict(model="sage", aggr=args.aggr, layers=2, hidden=16, lr=0.01, dropout=0.5)
    else:
        hyper = dict(model=args.model, layers=2, hidden=16, lr=0.01, dropout=0.5)
    hyper["feature_norm"] = args.feature_norm
    hyper["device"] = args.device

    configs = every_algorithm(args.nproc, args.algos)
    acc = {c[0]: [] for c in configs}
    epoch_s = {c[0]: [] for c in configs}
    for seed in range(args.seeds):
        for algo, p, kw in configs:
            s = run(data=f"planetoid:{args.cora}", algo=algo, nproc=p, epochs=args.epochs, seed=seed,
                    weight_decay=5e-4, **hyper, **kw)
            acc[algo].append(s["test_acc"])
            epoch_s[algo].append(s["epoch_time_median_s"])
            print(f"  seed {seed} {algo} P={p}: test {acc[algo][-1]:.3f}, median epoch "
                  f"{1e3 * epoch_s[algo][-1]:.1f} ms", flush=True)  # (a run cut short keeps what it finished)
        print(f"seed {seed}: " + "  ".join(f"{a}={acc[a][-1]:.3f}" for a, _, _ in configs), flush=True)

    print(f"\n{args.device}: | algo | P | mean test acc ({args.seeds} seeds) | max abs diff to serial (same seed) | "
          "median epoch (ms) |")
    print("|---|---|---|---|---|")
    for algo, p, kw in configs:
        c = kw.get("replication", 1)
        gap = max(abs(a - b) for a, b in zip(acc[algo], acc["serial"]))
        grid = f"{p} (c={c})" if c > 1 else f"{p} (default grid)" if algo in ("2d", "3d", "plexus") else f"{p}"
        print(f"| {algo} | {grid} | {statistics.mean(acc[algo]):.4f} | {gap:.4f} | "
              f"{1e3 * statistics.median(epoch_s[algo]):.1f} |")


if __name__ == "__main__":
    main()
