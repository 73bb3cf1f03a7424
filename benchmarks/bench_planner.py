"""The planner's time model against measured epoch times (issue "Planner and simulator", Done when).

For each graph (``--data``, default the embedded SBM at 10⁵ vertices and an R-MAT graph at scale 16) and each
``--nproc`` (default 4 and 8), trains every candidate configuration of ``CANDIDATES`` for ``--epochs`` epochs with
``gridgnn train`` (one after the other: nothing else should run on the machine), reads the measured
``epoch_time_median_s`` from its ``summary.json``, and asks ``gridgnn plan`` for the predicted time of the same
configurations. Prints, per graph and P, the table (predicted, measured, their ranks, relative error), the median
relative error and how far the measured time of the plan's first pick is from the fastest measured one.

Runs already in ``--runs DIR`` (a ``summary.json`` per configuration) are reused, so the measurement and the
prediction can be redone separately. The time model's coefficients come from ``--profile`` (``gridgnn calibrate``).

Usage: python benchmarks/bench_planner.py [--data SPEC ...] [--nproc 4,8] [--epochs 6] [--runs DIR]
       [--profile PROFILE.json] [--measure-only]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

DEFAULT = ["synthetic:sbm?n=100000&avg_degree=10&features=64",
           "synthetic:rmat?scale=16&edge_factor=8&features=64"]
HIDDEN = 64

#: (algo, replication, grid, partition) per P: a spread over every family, grid shape and partition kind
CANDIDATES = {
    4: [("1d", 1, None, "random"), ("1d", 1, None, "metis"), ("1d-sa", 1, None, "random"),
        ("1d-sa", 1, None, "metis"), ("1.5d", 2, None, "random"), ("1.5d-sa", 2, None, "random"),
        ("1.5d-sa", 2, None, "metis"), ("2d", 1, "2,2", "random"), ("2d", 1, "4,1", "random"),
        ("2d", 1, "1,4", "random"), ("3d", 1, "2,1,2", "random"), ("3d", 1, "1,2,2", "random"),
        ("plexus", 1, "2,2,1", "random"), ("plexus", 1, "1,2,2", "random"), ("plexus", 1, "2,2,1", "double-perm"),
        ("plexus", 1, "4,1,1", "random")],
    8: [("1d", 1, None, "random"), ("1d", 1, None, "metis"), ("1d-sa", 1, None, "random"),
        ("1d-sa", 1, None, "metis"), ("1.5d", 2, None, "random"), ("1.5d-sa", 2, None, "random"),
        ("1.5d-sa", 4, None, "metis"), ("2d", 1, "4,2", "random"), ("2d", 1, "2,4", "random"),
        ("2d", 1, "8,1", "random"), ("3d", 1, "2,2,2", "random"), ("3d", 1, "4,1,2", "random"),
        ("plexus", 1, "2,2,2", "random"), ("plexus", 1, "4,2,1", "random"), ("plexus", 1, "2,2,2", "double-perm"),
        ("plexus", 1, "1,2,4", "random")],
}


def config_name(algo, c, grid, part) -> str:
    return "-".join([algo] + ([f"c{c}"] if algo.startswith("1.5d") else []) + ([grid.replace(",", "x")] if grid
                                                                                else []) + [part])


def config_flags(algo, c, grid, part) -> list[str]:
    flags = ["--algo", algo, "--partition", part]
    if algo.startswith("1.5d"):
        flags += ["--replication", str(c)]
    if grid:
        flags += ["--grid", grid]
    return flags


def graph_tag(spec: str) -> str:
    return spec.split(":")[1].split("?")[0] + "-" + "".join(ch for ch in spec.split("?")[1] if ch.isalnum())[:40]


def measure(spec: str, p: int, runs: str, epochs: int) -> dict:
    out = {}
    for cand in CANDIDATES[p]:
        name = config_name(*cand)
        d = os.path.join(runs, graph_tag(spec), f"P{p}", name)
        summ = os.path.join(d, "summary.json")
        if not os.path.exists(summ):
            cmd = [sys.executable, "-m", "gridgnn", "train", "--data", spec, "--nproc", str(p), "--hidden",
                   str(HIDDEN), "--epochs", str(epochs), "--quiet", "--out", d, "--overwrite", *config_flags(*cand)]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                print(f"  {name}: failed: {r.stderr.strip().splitlines()[-1:]}", flush=True)
                continue
        with open(summ) as f:
            out[cand] = json.load(f)["epoch_time_median_s"]
        print(f"  P={p} {name}: {out[cand] * 1e3:.1f} ms", flush=True)
    return out


def run_dir(runs: str, spec: str, p: int, cand) -> str:
    return os.path.join(runs, graph_tag(spec), f"P{p}", config_name(*cand))


def as_cand(config: dict) -> tuple:
    return (config["algo"], config["replication"], config["grid"], config["partition"])


def plan_rows(spec: str, p: int, profile) -> list[dict]:
    """``gridgnn plan``'s rows (every valid configuration) for this graph and P, in process."""
    from gridgnn.graph.spec import load_graph
    from gridgnn.train.invocation import config_from_flags
    from gridgnn.train.planning import plan_configs

    cfg = config_from_flags({"data": spec, "nproc": p, "algo": "1d", "hidden": HIDDEN})
    return plan_configs(cfg, load_graph(spec, seed=0), profile)


def fitted(profile, dirs: list[str]):
    """A copy of ``profile`` with θ fitted (least squares) to the runs in ``dirs``."""
    import copy

    from gridgnn.commands.calibrate import fit_rows
    from gridgnn.planner.timing import fit_profile

    prof = copy.deepcopy(profile)
    prof.fit = {"comp": 1.0, "comm": 1.0, "const_s": 0.0}
    rows = fit_rows(prof, dirs)
    fit_profile(prof, [(r["comp_s"], r["comm_s"], r["measured_step_s"]) for r in rows])
    return prof


def compare(spec: str, p: int, profile, runs: str, epochs: int) -> dict:
    """The Done-when table of one graph and P: predicted vs measured for every measured candidate, and the
    measured time of the plan's pick (measured too if it is not a candidate) against the fastest."""
    rows = plan_rows(spec, p, profile)
    pick = as_cand(rows[0]["config"])
    if pick not in CANDIDATES[p]:
        CANDIDATES[p].append(pick)
    measured = measure(spec, p, runs, epochs)
    by_cand = {as_cand(r["config"]): r for r in rows}
    table = sorted(((c, by_cand[c]["predicted_step_s"], t) for c, t in measured.items()), key=lambda x: x[2])
    pred_rank = {c: i + 1 for i, (c, _, _) in enumerate(sorted(table, key=lambda x: x[1]))}
    print("| configuration | predicted ms | measured ms | error | predicted rank | measured rank |")
    print("|---|---:|---:|---:|---:|---:|")
    errs = []
    for i, (c, pred, meas) in enumerate(table):
        err = abs(pred - meas) / meas
        errs.append(err)
        mark = " (plan's pick)" if c == pick else ""
        print(f"| {config_name(*c)}{mark} | {pred * 1e3:.1f} | {meas * 1e3:.1f} | {err:.1%} | {pred_rank[c]} | "
              f"{i + 1} |")
    fastest = table[0][2]
    out = {"median_rel_err": statistics.median(errs), "pick": config_name(*pick),
           "pick_over_fastest": measured[pick] / fastest, "configs": len(table), "planned": len(rows)}
    print(f"median relative error {out['median_rel_err']:.1%} over {len(table)} configurations; the plan's pick "
          f"({out['pick']}, first of {len(rows)}) measures {out['pick_over_fastest']:.3f}x the fastest", flush=True)
    return out


def main() -> None:
    from gridgnn.planner.timing import load_profile

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", nargs="*", default=DEFAULT)
    ap.add_argument("--nproc", default="4,8")
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--runs", default="planner-runs")
    ap.add_argument("--profile", default=None, help="profile (gridgnn calibrate); default the built-in local-cpu")
    ap.add_argument("--fit", choices=("none", "other-graphs", "same"), default="other-graphs",
                    help="θ of the time model: the profile's own (none), fitted to the runs of the other graphs "
                         "(default: the prediction never saw the graph it predicts), or to these runs (same)")
    ap.add_argument("--measure-only", action="store_true")
    args = ap.parse_args()
    nprocs = [int(v) for v in args.nproc.split(",")]
    for spec in args.data:
        for p in nprocs:
            print(f"{spec} P={p}", flush=True)
            measure(spec, p, args.runs, args.epochs)
    if args.measure_only:
        return
    base = load_profile(args.profile)
    results = {}
    for spec in args.data:
        if args.fit == "none":
            prof = base
        else:
            others = [s for s in args.data if (s != spec) == (args.fit == "other-graphs")]
            dirs = [run_dir(args.runs, s, p, c) for s in others for p in nprocs for c in CANDIDATES[p]
                    if os.path.exists(os.path.join(run_dir(args.runs, s, p, c), "summary.json"))]
            prof = fitted(base, dirs)
            print(f"\n{spec}: θ fitted to {len(dirs)} runs ({args.fit}): comp {prof.fit['comp']:.3f}, "
                  f"comm {prof.fit['comm']:.3f}, const {prof.fit['const_s'] * 1e3:.2f} ms "
                  f"(fit's median error {prof.fit['median_rel_err']:.1%})")
        for p in nprocs:
            print(f"\n### {spec}, P = {p}\n", flush=True)
            results[(spec, p)] = compare(spec, p, prof, args.runs, args.epochs)
    print("\n| graph | P | configurations | median error | plan's pick | pick / fastest measured |")
    print("|---|---:|---:|---:|---|---:|")
    for (spec, p), r in results.items():
        print(f"| {graph_tag(spec)} | {p} | {r['configs']} | {r['median_rel_err']:.1%} | {r['pick']} | "
              f"{r['pick_over_fastest']:.3f} |")


if __name__ == "__main__":
    main()
