"""Edge-parallel training (``--algo edge``) against ``1d-sa`` and Plexus: bytes per epoch, epoch time and peak memory
per rank, on an SBM and an R-MAT graph at P = 2, 4, 8, one run per configuration, measured in the same session.

Usage: python benchmarks/bench_edge.py [--graphs sbm,rmat] [--nprocs 2,4,8] [--epochs 8] [--hidden 64] [--layers 3]
       [--model gcn]
Prints a Markdown table per graph: MB moved per epoch (fwd + bwd + gradients, all ranks: per collective the larger
of the totals sent and received), the busiest rank's received MB, the median epoch time, the largest measured peak
memory of a rank (and the memory guard's estimate of it), and bytes and time as a ratio to ``1d-sa`` (random rows:
the same vertex order as ``edge``'s) in the same run.
"""
from __future__ import annotations

import argparse

from _common import run

GRAPHS = {"sbm": "synthetic:sbm?n=20000&classes=8&avg_degree=16&features=64",
          "rmat": "synthetic:rmat?scale=14&edge_factor=16&features=64&classes=8"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--graphs", default="sbm,rmat")
    ap.add_argument("--nprocs", default="2,4,8")
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--model", default="gcn")
    args = ap.parse_args()
    extra = dict(heads=4, hidden=args.hidden // 4) if args.model == "gat" else dict(hidden=args.hidden)
    for name in args.graphs.split(","):
        data = GRAPHS.get(name, name)
        print(f"\n{name}: {data}, {args.layers}-layer {args.model.upper()}, hidden {args.hidden}, "
              f"{args.epochs} epochs, float32\n")
        print("| P | algo | grid | partition | MB/epoch moved | max rank recv MB | epoch ms | peak rank MB (est.) "
              "| bytes × 1d-sa | time × 1d-sa |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for p in map(int, args.nprocs.split(",")):
            base = None
            for algo, part in (("1d-sa", "random"), ("1d-sa", "metis"), ("plexus", "random"), ("edge", "random")):
                try:
                    s = run(data=data, algo=algo, nproc=p, partition=part, epochs=args.epochs, layers=args.layers,
                            model=args.model, **extra)
                except SystemExit as exc:
                    print(f"| {p} | {algo} | | {part} | failed (exit {exc.code}) | | | | | |", flush=True)
                    continue
                moved = sum(s["comm_bytes_per_epoch"]["by_phase"].values())
                t = s["epoch_time_median_s"]
                if base is None:
                    base = (moved, t)
                peak = max(s["peak_memory_bytes"])
                est = max(s["estimated_peak_memory_bytes"])
                print(f"| {p} | {algo} | {'x'.join(map(str, s['grid']))} | {part} | {moved / 1e6:.1f} "
                      f"| {s['max_rank_recv_bytes_per_epoch'] / 1e6:.1f} | {t * 1e3:.1f} | {peak / 2**20:.0f} "
                      f"({est / 2**20:.0f}) | {moved / base[0]:.2f} | {t / base[1]:.2f} |", flush=True)


if __name__ == "__main__":
    main()
