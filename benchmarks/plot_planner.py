"""Plots of the planner (PNG, matplotlib), from the runs of ``bench_planner.py`` and the simulator:

1. ``breakdown``: predicted vs measured time per configuration, split into compute and communication (as CAGNET
   Fig. 1), for one graph and P: the measured split is rank 0's median ``compute_time_s`` / ``comm_time_s`` of
   its ``metrics.jsonl``; the predicted one the time model's fitted terms.
2. ``heatmap``: the P×P matrix of bytes rank ``b`` receives from rank ``a`` in one training step of one
   configuration, from the simulator (:meth:`gridgnn.planner.simulate.StepVolume.pair_matrix`).
3. ``scaling``: predicted strong scaling of every algorithm (its best grid, replication and order at each P)
   to P = 2048 on one graph with a profile (default the ``perlmutter-a100`` preset), from the simulator alone.

Usage: python benchmarks/plot_planner.py breakdown --runs DIR --data SPEC --nproc P [--profile FILE] --out FILE.png
       python benchmarks/plot_planner.py heatmap --data SPEC --nproc P --algo A [--grid X,Y,Z] --out FILE.png
       python benchmarks/plot_planner.py scaling --data SPEC [--max-nproc 2048] [--profile PRESET] --out FILE.png
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
sys.path.insert(0, os.path.dirname(__file__))


def breakdown(args) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from bench_planner import CANDIDATES, as_cand, config_name, plan_rows, run_dir
    from gridgnn.planner.timing import load_profile

    prof = load_profile(args.profile)
    rows = {as_cand(r["config"]): r for r in plan_rows(args.data, args.nproc, prof)}
    names, pred, meas = [], [], []
    for cand in CANDIDATES[args.nproc]:
        d = run_dir(args.runs, args.data, args.nproc, cand)
        if not os.path.exists(os.path.join(d, "metrics.jsonl")):
            continue
        recs = [json.loads(ln) for ln in open(os.path.join(d, "metrics.jsonl")) if ln.strip()]
        recs = [r for r in recs if "compute_time_s" in r]
        r = rows[cand]
        f = prof.fit
        names.append(config_name(*cand))
        pred.append((f["comp"] * r["comp_s"] + f["const_s"], f["comm"] * r["comm_s"]))
        meas.append((statistics.median(x["compute_time_s"] for x in recs),
                     statistics.median(x["comm_time_s"] for x in recs)))
    fig, ax = plt.subplots(figsize=(max(8, 0.7 * len(names)), 4.5))
    xs = range(len(names))
    w = 0.38
    for k, (data, label, hatch) in enumerate(((pred, "predicted", "//"), (meas, "measured", ""))):
        x = [i + (k - 0.5) * w for i in xs]
        ax.bar(x, [c * 1e3 for c, _ in data], w, color="tab:blue", hatch=hatch, edgecolor="black", linewidth=0.4,
               label=f"{label}: compute")
        ax.bar(x, [m * 1e3 for _, m in data], w, bottom=[c * 1e3 for c, _ in data], color="tab:orange",
               hatch=hatch, edgecolor="black", linewidth=0.4, label=f"{label}: communication")
    ax.set_xticks(list(xs))
    ax.set_xticklabels(names, rotation=45, ha="right", fontsize=8)
    ax.set_ylabel("ms per training step")
    ax.set_title(f"{args.data.split('?')[0]} P={args.nproc}: predicted (hatched) vs measured (rank 0)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


def scaling(args) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from gridgnn.graph.spec import load_graph
    from gridgnn.planner.plan import candidates
    from gridgnn.planner.timing import load_profile
    from gridgnn.train.invocation import config_from_flags
    from gridgnn.train.planning import plan_configs

    prof = load_profile(args.profile)
    graph = load_graph(args.data, seed=0)
    series: dict = {}
    p = 2
    while p <= args.max_nproc:
        cfg = config_from_flags({"data": args.data, "nproc": p, "algo": "1d", "hidden": args.hidden})
        cands = [c for c in candidates(p, n=graph.n, row_partitions=("random",), plexus_orders=("random",))
                 if balanced(c, p)]
        t0 = time.perf_counter()
        rows = plan_configs(cfg, graph, prof, cands=cands)
        for r in rows:  # rows are ranked: the first of each algorithm is its best configuration at this P
            series.setdefault(r["config"]["algo"], {}).setdefault(p, r["predicted_step_s"])
        print(f"P={p}: {len(cands)} configurations in {time.perf_counter() - t0:.1f} s", flush=True)
        p *= 2
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for algo, pts in series.items():
        ps = sorted(pts)
        ax.plot(ps, [pts[q] * 1e3 for q in ps], marker="o", label=algo)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("processes P")
    ax.set_ylabel("predicted ms per training step")
    ax.set_title(f"{args.data.split(':')[1][:40]}, GCN hidden {args.hidden}; profile {args.profile}", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")
    for algo, pts in series.items():
        print(f"| {algo} | " + " | ".join(f"{pts[q] * 1e3:.2f}" for q in sorted(pts)) + " |")


def heatmap(args) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from gridgnn.graph.spec import load_graph
    from gridgnn.train.invocation import config_from_flags
    from gridgnn.train.planning import simulate_config

    flags = {"data": args.data, "nproc": args.nproc, "algo": args.algo, "hidden": args.hidden,
             "partition": args.partition}
    if args.grid:
        flags["grid"] = args.grid
    if args.replication:
        flags["replication"] = args.replication
    cfg = config_from_flags(flags)
    vol, shape, _, _ = simulate_config(cfg, load_graph(args.data, seed=0))
    m = vol.pair_matrix() / 1e6
    fig, ax = plt.subplots(figsize=(5.5, 4.6))
    im = ax.imshow(m, cmap="viridis")
    ax.set_xlabel("receiving rank")
    ax.set_ylabel("sending rank")
    ax.set_title(f"{args.algo} {'x'.join(map(str, shape))} {args.partition}: MB per training step", fontsize=9)
    fig.colorbar(im, ax=ax)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}: {m.sum():.2f} MB in all, busiest pair {m.max():.3f} MB")


def balanced(cand, p: int) -> bool:
    """The configurations the scaling plot considers at large P: grids whose factors are within 4x of each other
    (2D, 3D) or whose largest factor is at least a quarter of the cube root (Plexus), 1.5D with c² ≤ P."""
    if cand.algo.startswith("1.5d"):
        return cand.replication ** 2 <= p
    if cand.grid is None:
        return True
    if p <= 64:
        return True
    return max(cand.grid) <= 4 * min(cand.grid)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    b = sub.add_parser("breakdown")
    b.add_argument("--runs", required=True)
    b.add_argument("--data", required=True)
    b.add_argument("--nproc", type=int, required=True)
    b.add_argument("--profile", default=None)
    b.add_argument("--out", required=True)
    h = sub.add_parser("heatmap")
    h.add_argument("--data", required=True)
    h.add_argument("--nproc", type=int, required=True)
    h.add_argument("--algo", required=True)
    h.add_argument("--grid", default=None)
    h.add_argument("--replication", type=int, default=None)
    h.add_argument("--partition", default="random")
    h.add_argument("--hidden", type=int, default=64)
    h.add_argument("--out", required=True)
    s = sub.add_parser("scaling")
    s.add_argument("--data", required=True)
    s.add_argument("--hidden", type=int, default=128)
    s.add_argument("--max-nproc", type=int, default=2048)
    s.add_argument("--profile", default="perlmutter-a100")
    s.add_argument("--out", required=True)
    args = ap.parse_args()
    {"breakdown": breakdown, "heatmap": heatmap, "scaling": scaling}[args.what](args)


if __name__ == "__main__":
    main()
