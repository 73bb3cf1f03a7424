"""Bytes per epoch and epoch time of every algorithm and grid shape at P = 4 and P = 8, one graph, one run.

Usage: python benchmarks/bench_algos.py [--data SPEC] [--nprocs 4,8] [--epochs 10] [--hidden 64] [--layers 3]
Prints a Markdown table: fwd+bwd bytes per epoch moved over all ranks (per collective the larger of the totals
sent and received), the busiest rank's
received and sent bytes, the median epoch time, and bytes and time as a ratio to 1d (the oblivious baseline)
measured in the same run.
"""
from __future__ import annotations

import argparse

from _common import run


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="synthetic:sbm?n=20000&classes=8&avg_degree=16&features=64")
    ap.add_argument("--nprocs", default="4,8")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=3)
    args = ap.parse_args()


    def factor2(p):
        return [(a, p // a) for a in range(1, p + 1) if p % a == 0]


    def factor3(p):
        return [(a, b, p // (a * b)) for a in range(1, p + 1) for b in range(1, p + 1) if p % (a * b) == 0]


    print(f"data {args.data}, {args.layers}-layer GCN, hidden {args.hidden}, {args.epochs} epochs, float32\n")
    print("| P | algo | grid | partition | MB/epoch fwd+bwd (moved, all ranks) | max rank recv MB | "
          "max rank send MB | epoch ms | bytes × 1d | time × 1d | test acc |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for p in map(int, args.nprocs.split(",")):
        configs = [("1d", {}, "random"), ("1d-sa", {}, "metis"), ("1.5d", {"replication": 2}, "random"),
                   ("1.5d-sa", {"replication": 2}, "metis")]
        configs += [("2d", {"grid": ",".join(map(str, s))}, "random") for s in factor2(p)]
        configs += [("3d", {"grid": ",".join(map(str, s))}, "random") for s in factor3(p)]
        configs += [("plexus", {"grid": ",".join(map(str, s))}, "double-perm") for s in factor3(p)]
        base = None
        for algo, kw, part in configs:
            try:
                s = run(data=args.data, algo=algo, nproc=p, partition=part, epochs=args.epochs, hidden=args.hidden,
                        layers=args.layers, **kw)
            except SystemExit as exc:  # report and go on with the other configurations
                print(f"| {p} | {algo} | {kw.get('grid', '')} | {part} | failed (exit {exc.code}) | | | | | | |", flush=True)
                continue
            ph = s["comm_bytes_per_epoch"]["by_phase"]
            train = sum(v for k, v in ph.items() if k.split(".")[0] in ("fwd", "bwd"))
            t = s["epoch_time_median_s"]
            if base is None:
                base = (train, t)
            grid = "x".join(map(str, s["grid"]))
            print(f"| {p} | {algo} | {grid} | {part} | {train / 1e6:.2f} | {s['max_rank_recv_bytes_per_epoch'] / 1e6:.2f} "
                  f"| {s['max_rank_send_bytes_per_epoch'] / 1e6:.2f} | {t * 1e3:.1f} | {train / base[0]:.2f} "
                  f"| {t / base[1]:.2f} | {s['test_acc']:.3f} |", flush=True)


if __name__ == "__main__":
    main()
