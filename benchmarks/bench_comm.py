"""Cheaper communication (``--comm-dtype``, ``--overlap``): per algorithm at P, the bytes one epoch moves in the
training step (phases fwd, bwd, grad), the epoch time and the test accuracy with float32, bfloat16 and ``auto`` on
the wire and with ``overlap`` (1d, 1d-sa, 1.5d, 1.5d-sa, 2d, 3d; ``overlap+bfloat16`` both; ``+grad-bfloat16``: the
weights' gradients in bfloat16 too, ``--grad-dtype``), measured in the same run, with the
ratio of the narrowed bytes to float32's (all of the step, and its node data: phases fwd and bwd, where the
max reductions and the loss stay exact) and the accuracy gap; ``auto``'s decisions (sites kept exact) are printed.

Usage: python benchmarks/bench_comm.py [--data planetoid:DIR] [--model gcn|gat] [--seeds 1] [--nproc 4]
[--epochs 200] [--algos 1d,1d-sa,...] [--variants float32,bfloat16,auto,overlap,overlap+bfloat16,bfloat16+grad-bfloat16] [--hidden H]
"""
from __future__ import annotations

import argparse
import os
import statistics

from _common import run

from gridgnn.parallel.registry import overlap_algorithms

STEP = ("fwd", "bwd", "grad")
LAYOUTS = {"1d": {}, "1d-sa": {}, "1.5d": {"replication": 2}, "1.5d-sa": {"replication": 2}, "2d": {}, "3d": {},
           "plexus": {}, "plexus-rs": {}}


def step_bytes(summary: dict, phases=STEP) -> float:
    return sum(v for k, v in summary["comm_bytes_per_epoch"]["by_phase"].items() if k.split(".")[0] in phases)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    cora = os.path.join(here, "..", "..", "shared", "data", "planetoid", "cora")
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=f"planetoid:{cora}")
    ap.add_argument("--model", choices=("gcn", "gat"), default="gcn")
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--nproc", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=200)
    ap.add_argument("--algos", default=",".join(LAYOUTS))
    ap.add_argument("--variants", default="float32,bfloat16,auto")
    ap.add_argument("--hidden", type=int, default=None, help="the model's hidden width (default: the Cora setup's)")
    args = ap.parse_args()
    if args.model == "gat":
        hyper = dict(model="gat", layers=2, heads=8, hidden=8, lr=0.005, dropout=0.6, attn_dropout=0.6)
    else:
        hyper = dict(model="gcn", layers=2, hidden=16, lr=0.01, dropout=0.5)
    variants = args.variants.split(",")
    if args.hidden:
        hyper["hidden"] = args.hidden
    print(f"{args.data.split('/')[-1]} {args.model} P={args.nproc} {args.epochs} epochs, {args.seeds} seed(s); "
          f"bytes: one epoch's training step (fwd+bwd+grad), moved over all ranks")
    print(f"{'algo':8s} {'variant':16s} {'bytes/epoch':>12s} {'ratio':>6s} {'fwd+bwd':>8s} {'test acc (mean)':>16s} "
          f"{'gap':>7s} {'epoch ms':>9s}  auto kept exact")
    for algo in args.algos.split(","):
        base_bytes = base_acc = base_node = None
        for variant in variants:
            parts = variant.split("+")  # e.g. overlap+bfloat16, bfloat16+grad-bfloat16
            overlap, grad = "overlap" in parts, "bfloat16" if "grad-bfloat16" in parts else None
            wire = next((t for t in parts if t in ("float32", "bfloat16", "float16", "auto")), "float32")
            if overlap and algo not in overlap_algorithms() or grad and algo.startswith("plexus"):
                continue
            accs, summ = [], None
            for seed in range(args.seeds):
                summ = run(data=args.data, algo=algo, nproc=args.nproc, epochs=args.epochs, seed=seed,
                           weight_decay=5e-4, comm_dtype=None if wire == "float32" else wire, overlap=overlap,
                           grad_dtype=grad,
                           **LAYOUTS[algo],
                           **hyper)
                accs.append(summ["test_acc"])
            acc = statistics.mean(accs)
            moved, node = step_bytes(summ), step_bytes(summ, ("fwd", "bwd"))
            if variant == "float32":
                base_bytes, base_acc, base_node = moved, acc, node
            ratio = moved / base_bytes if base_bytes else float("nan")
            node_ratio = node / base_node if base_node else float("nan")
            gap = acc - base_acc if base_acc is not None else float("nan")
            kept = ""
            if wire == "auto" and summ["comm_wire"]:
                kept = ", ".join(summ["comm_wire"]["kept_exact"]) or "none"
            print(f"{algo:8s} {variant:16s} {moved:12.0f} {ratio:6.3f} {node_ratio:8.3f} {acc:16.4f} {gap:+7.4f} "
                  f"{summ['epoch_time_median_s'] * 1e3:9.1f}  {kept}", flush=True)


if __name__ == "__main__":
    main()
