"""The planner's predicted effect of reduce-scattered sums (``--algo plexus-rs``) against Plexus' all-reduces
(``--algo plexus``) at scale: for each grid, the simulated step (no processes started) of both, the bytes moved (all
ranks, and the busiest rank), the predicted step time with a profile, and the ratios — next to Plexus' own report of
25–33 % fewer bytes for the change (the time model of gridgnn.planner.timing, not a measurement).

Usage: python benchmarks/plan_scatter.py [--data SPEC] [--hidden 256] [--layers 2] [--profile perlmutter-a100]
[--grids "64:4x4x4,256:8x8x4,1024:16x8x8,..."]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from gridgnn.graph.spec import load_graph  # noqa: E402
from gridgnn.planner.timing import load_profile, predict_step  # noqa: E402
from gridgnn.train.invocation import config_from_flags  # noqa: E402
from gridgnn.train.planning import simulate_config  # noqa: E402

DEFAULT = "64:4x4x4,64:2x8x4,256:8x8x4,256:4x16x4,1024:16x8x8,1024:8x16x8"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="synthetic:rmat?scale=16&edge_factor=16")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--profile", default="perlmutter-a100")
    ap.add_argument("--grids", default=DEFAULT)
    args = ap.parse_args()
    profile = load_profile(args.profile)
    graph = load_graph(args.data, seed=0)
    print(f"{args.data} gcn {args.layers} layers hidden {args.hidden}; profile {profile.name}")
    print(f"{'P':>5s} {'grid':9s} {'MB plexus':>10s} {'MB rs':>9s} {'bytes':>6s} {'max MB':>7s} {'max rs':>7s} "
          f"{'ms plexus':>9s} {'ms rs':>8s} {'time':>6s}  (simulated in s)")
    layouts: dict = {}
    for spec in args.grids.split(","):
        nproc, grid = spec.split(":")
        row = []
        t0 = time.perf_counter()
        for algo in ("plexus", "plexus-rs"):
            cfg = config_from_flags({"data": args.data, "model": "gcn", "hidden": args.hidden, "layers": args.layers,
                                     "nproc": int(nproc), "algo": algo, "grid": grid.replace("x", ",")})
            vol, *_ = simulate_config(cfg, graph, layouts)
            threads = max(1, profile.cores // max(1, cfg.nproc)) if profile.cores else 1
            pred = predict_step(profile, vol.detail, vol.axes, vol.work, vol.world, threads)
            sent = sum(s for s, _, _ in vol.bytes.values())
            row.append((sum(vol.moved_by_phase().values()) / 1e6, sent.max() / 1e6, pred["time_s"] * 1e3))
        (b0, m0, t0_), (b1, m1, t1) = row
        print(f"{int(nproc):5d} {grid:9s} {b0:10.1f} {b1:9.1f} {b1 / b0:6.3f} {m0:7.2f} {m1:7.2f} {t0_:9.3f} "
              f"{t1:8.3f} {t1 / t0_:6.3f}  ({time.perf_counter() - t0:.0f})", flush=True)


if __name__ == "__main__":
    main()
