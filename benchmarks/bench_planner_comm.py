"""The time model against measured epoch times for the cheaper-communication dimensions (issue "Communication that
costs less", item 4): ``--comm-dtype bfloat16``, ``--overlap`` and ``--algo plexus-rs`` next to the plain
configurations they change, on one graph and P. Trains each (one after the other: nothing else should run on the
machine), predicts each with ``--profile`` (default the built-in ``local-cpu``, θ fitted to other runs) and with θ
re-fitted to these runs, and prints per configuration the predicted and measured times, the error, and the
predicted and measured effect of the variant (its time over the plain configuration's).

Usage: python benchmarks/bench_planner_comm.py [--data SPEC] [--nproc 4] [--epochs 6] [--runs DIR]
[--profile PROFILE.json]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from bench_planner import config_flags, config_name, fitted, graph_tag  # noqa: E402

HIDDEN = 64
VARIANTS = {"plain": [], "bfloat16": ["--comm-dtype", "bfloat16"], "overlap": ["--overlap"]}
#: (algo, replication, grid, partition) and the variants measured for it; plexus-rs is compared with plexus plain
CONFIGS = {4: [(("1d", 1, None, "random"), ("plain", "bfloat16", "overlap")),
               (("1d-sa", 1, None, "random"), ("plain", "bfloat16")),
               (("1.5d", 2, None, "random"), ("plain", "bfloat16", "overlap")),
               (("2d", 1, "2,2", "random"), ("plain", "bfloat16", "overlap")),
               (("3d", 1, "2,1,2", "random"), ("plain", "overlap")),
               (("plexus", 1, "2,2,1", "random"), ("plain", "bfloat16")),
               (("plexus-rs", 1, "2,2,1", "random"), ("plain", "bfloat16"))]}


def run_dir(runs, spec, p, cand, variant) -> str:
    return os.path.join(runs, graph_tag(spec), f"P{p}", f"{config_name(*cand)}-{variant}")


def measure(spec, p, runs, epochs) -> dict:
    out = {}
    for cand, variants in CONFIGS[p]:
        for v in variants:
            d = run_dir(runs, spec, p, cand, v)
            summ = os.path.join(d, "summary.json")
            if not os.path.exists(summ):
                cmd = [sys.executable, "-m", "gridgnn", "train", "--data", spec, "--nproc", str(p), "--hidden",
                       str(HIDDEN), "--epochs", str(epochs), "--quiet", "--out", d, "--overwrite",
                       *config_flags(*cand), *VARIANTS[v]]
                r = subprocess.run(cmd, capture_output=True, text=True)
                if r.returncode != 0:
                    print(f"  {config_name(*cand)} {v}: failed: {r.stderr.strip().splitlines()[-1:]}", flush=True)
                    continue
            with open(summ) as f:
                out[(cand, v)] = (json.load(f)["epoch_time_median_s"], d)
            print(f"  {config_name(*cand)} {v}: {out[(cand, v)][0] * 1e3:.1f} ms", flush=True)
    return out


def predict(spec, p, profile, measured) -> dict:
    """Each measured run's predicted step time: its own configuration simulated and priced
    (:func:`gridgnn.commands.calibrate.fit_rows`, which reads the run's flags)."""
    from gridgnn.commands.calibrate import fit_rows

    rows = fit_rows(profile, [d for _, d in measured.values()])
    by_dir = {r["run"]: r["predicted_step_s"] for r in rows}
    return {k: by_dir[d] for k, (_, d) in measured.items()}


def table(title, measured, pred) -> float:
    print(f"\n{title}\n")
    print("| configuration | variant | predicted ms | measured ms | error | predicted effect | measured effect |")
    print("|---|---|---:|---:|---:|---:|---:|")
    errs = []
    for (cand, v), (meas, _) in measured.items():
        base = ((("plexus",) + cand[1:]) if cand[0] == "plexus-rs" else cand, "plain")
        err = abs(pred[(cand, v)] - meas) / meas
        errs.append(err)
        effect = ""
        if base != (cand, v) and base in measured:
            effect = (f"{pred[(cand, v)] / pred[base]:.3f} | {meas / measured[base][0]:.3f}")
        else:
            effect = "– | –"
        print(f"| {config_name(*cand)} | {v} | {pred[(cand, v)] * 1e3:.1f} | {meas * 1e3:.1f} | {err:.1%} | "
              f"{effect} |")
    med = statistics.median(errs)
    print(f"\nmedian relative error {med:.1%}, largest {max(errs):.1%} over {len(errs)} runs", flush=True)
    return med


def main():
    from gridgnn.planner.timing import load_profile

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default="synthetic:sbm?n=100000&avg_degree=10&features=64")
    ap.add_argument("--nproc", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--runs", default="planner-comm-runs")
    ap.add_argument("--profile", default=None, help="profile (gridgnn calibrate); default the built-in local-cpu")
    args = ap.parse_args()
    print(f"{args.data} P={args.nproc}", flush=True)
    measured = measure(args.data, args.nproc, args.runs, args.epochs)
    base = load_profile(args.profile)
    table(f"θ of the profile ({base.name}: comp {base.fit.get('comp', 1):.3f}, comm {base.fit.get('comm', 1):.3f}, "
          f"const {base.fit.get('const_s', 0) * 1e3:.2f} ms)", measured, predict(args.data, args.nproc, base, measured))
    prof = fitted(base, [d for _, d in measured.values()])
    table(f"θ re-fitted to these {len(measured)} runs (comp {prof.fit['comp']:.3f}, comm {prof.fit['comm']:.3f}, "
          f"const {prof.fit['const_s'] * 1e3:.2f} ms)", measured, predict(args.data, args.nproc, prof, measured))


if __name__ == "__main__":
    main()
