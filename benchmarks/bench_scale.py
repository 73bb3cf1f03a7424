"""Every stage of a big graph's way through gridgnn, timed and with its peak memory (issue 45): an R-MAT graph sharded
(`gridgnn shard`: generate, normalize, permute, write the blocks), trained on P ranks from the shards (`gridgnn
train --data sharded:DIR`: the ranks' start-up by stage (the summary's `startup_s`: the launch, each rank's read of
its blocks, the process group, the memory guard, the plan and its blocks, the model), the first epoch, the
median epoch) and every vertex predicted (`gridgnn predict`), for each algorithm asked; each rank's measured peak
next to the memory guard's estimate.

Each stage runs as its own process (`os.wait4` gives its peak resident set; the ranks report their own peaks in
`summary.json`), so the numbers are those of the command line a user runs.

``--memory-budget`` is handed to `gridgnn shard`: below what the in-memory shard needs, R-MAT is generated and sharded
in passes (`graph/stream.py`), the same dataset bit for bit.

Usage: python benchmarks/bench_scale.py [--scale 22] [--edge-factor 16] [--nproc 4] [--algos 1d-sa,plexus,2d]
           [--hidden 64] [--layers 3] [--epochs 3] [--memory-budget SIZE] [--work DIR] [--keep]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

#: the vertex order each algorithm reads a sharded dataset in (row-partitioned algorithms need one order)
METHOD = {"1d": "single-perm", "1d-sa": "single-perm", "1.5d": "single-perm", "1.5d-sa": "single-perm",
          "2d": "single-perm", "3d": "single-perm", "plexus": "double-perm", "edge": "single-perm"}
GiB = 2 ** 30


def run(argv: list[str]) -> tuple[float, float, int]:
    """``(wall seconds, peak resident GiB of the process, exit status)`` of ``gridgnn ARGV``."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "gridgnn", *argv])
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return time.perf_counter() - t0, usage.ru_maxrss * 1024 / GiB, proc.returncode


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", type=int, default=22)
    ap.add_argument("--edge-factor", type=int, default=16)
    ap.add_argument("--features", type=int, default=64)
    ap.add_argument("--classes", type=int, default=8)
    ap.add_argument("--nproc", type=int, default=4)
    ap.add_argument("--algos", default="1d-sa,plexus,2d")
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--memory-budget", default=None, help="gridgnn shard's --memory-budget (default: its own)")
    ap.add_argument("--work", default=None, help="folder for the shards and runs (default: a temporary one)")
    ap.add_argument("--keep", action="store_true", help="keep the work folder")
    args = ap.parse_args()
    spec = (f"synthetic:rmat?scale={args.scale}&edge_factor={args.edge_factor}&features={args.features}"
            f"&classes={args.classes}")
    work = args.work or tempfile.mkdtemp(prefix="gridgnn-scale-")
    os.makedirs(work, exist_ok=True)
    rows = []
    try:
        for algo in [a.strip() for a in args.algos.split(",") if a.strip()]:
            shards, out = os.path.join(work, f"shards-{algo}"), os.path.join(work, f"run-{algo}")
            row = {"algo": algo}
            # a 1D run's row blocks are the dataset's own cuts: its distinct columns per block give the exact halo
            cut = ["--blocks", f"{args.nproc}x{args.nproc}"] if algo in ("1d", "1d-sa") else []
            if args.memory_budget:
                cut += ["--memory-budget", str(args.memory_budget)]
            row["shard_s"], row["shard_gib"], code = run(["shard", "--data", spec, "--out", shards, "--method",
                                                          METHOD.get(algo, "single-perm"), "--overwrite", *cut])
            if code:
                row["failed"] = f"shard exit {code}"
                rows.append(row)
                continue
            row["train_s"], row["launcher_gib"], code = run([
                "train", "--data", f"sharded:{shards}", "--algo", algo, "--nproc", str(args.nproc), "--hidden",
                str(args.hidden), "--layers", str(args.layers), "--epochs", str(args.epochs), "--out", out,
                "--overwrite", "--quiet"])
            if code:
                row["failed"] = f"train exit {code}"
                rows.append(row)
                continue
            summary = json.load(open(os.path.join(out, "summary.json")))
            records = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
            spent = sum(r["epoch_time_s"] + r["eval_time_s"] for r in records)
            row.update(n=summary["n"], nnz=summary["nnz"], startup_s=summary["startup_s"]["total"],
                       stages=summary["startup_s"], other_s=row["train_s"] - spent - summary["startup_s"]["total"],
                       first_epoch_s=records[0]["epoch_time_s"], first_compile_s=records[0].get("compile_time_s", 0.0),
                       median_epoch_s=summary["epoch_time_median_s"],
                       rank_peak_gib=[b / GiB for b in summary["peak_memory_bytes"]],
                       rank_estimate_gib=[None if b is None else b / GiB
                                          for b in summary["estimated_peak_memory_bytes"]])
            row["predict_s"], row["predict_gib"], code = run([
                "predict", "--run", out, "--data", f"sharded:{shards}", "--algo", algo, "--nproc", str(args.nproc),
                "--out", os.path.join(work, f"predict-{algo}.npy"), "--overwrite"])
            if code:
                row["failed"] = f"predict exit {code}"
            rows.append(row)
            shutil.rmtree(shards, ignore_errors=True)  # one algorithm's shards on disk at a time
    finally:
        if not args.keep and args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    print(f"\nR-MAT scale {args.scale}, edge factor {args.edge_factor}; GCN {args.layers} x {args.hidden}; "
          f"P = {args.nproc}; {args.epochs} epochs")
    print("| algo | shard s (GiB) | start-up s | first epoch s (compile) | median epoch s | predict s (GiB) | "
          "launcher GiB | rank peak GiB (estimate) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "failed" in r and "median_epoch_s" not in r:
            print(f"| {r['algo']} | {r.get('shard_s', 0):.1f} ({r.get('shard_gib', 0):.2f}) | {r['failed']} |")
            continue
        peaks = ", ".join(f"{p:.2f} ({e:.2f})" if e is not None else f"{p:.2f}"
                          for p, e in zip(r["rank_peak_gib"], r["rank_estimate_gib"]))
        predict = r["failed"] if "failed" in r else f"{r['predict_s']:.1f} ({r['predict_gib']:.2f})"
        print(f"| {r['algo']} | {r['shard_s']:.1f} ({r['shard_gib']:.2f}) | {r['startup_s']:.1f} | "
              f"{r['first_epoch_s']:.2f} ({r['first_compile_s']:.2f}) | {r['median_epoch_s']:.2f} | {predict} | "
              f"{r['launcher_gib']:.2f} | {peaks} |")
    for r in rows:  # where the start-up went (the summary's startup_s) and the command's time outside it
        if "stages" in r:
            parts = ", ".join(f"{k} {v:.1f}" for k, v in r["stages"].items() if k != "total")
            print(f"{r['algo']} start-up by stage (s): {parts}; the command's own start and outputs {r['other_s']:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
