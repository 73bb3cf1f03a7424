"""The planner's predicted effect of a bfloat16 wire (``--comm-dtype bfloat16``) and of ``--overlap`` at scale: for a
few configurations at each P, the simulated step (no processes started) priced by a profile with float32 and with
bfloat16 node data on the wire, the bytes moved and the predicted step time, their ratios, and the float32 step
priced with overlap where the algorithm has it (the time model of gridgnn.planner.timing, not a measurement).

Usage: python benchmarks/plan_wire.py [--data SPEC] [--hidden 256] [--profile perlmutter-a100]
[--configs "64:1.5d:c=8,64:plexus:4x4x4,..."]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from gridgnn.graph.spec import load_graph  # noqa: E402
from gridgnn.parallel.registry import overlap_algorithms  # noqa: E402
from gridgnn.planner.timing import load_profile, predict_step  # noqa: E402
from gridgnn.train.invocation import config_from_flags  # noqa: E402
from gridgnn.train.planning import simulate_config  # noqa: E402

DEFAULT = ("64:1.5d:c=8,64:1.5d-sa:c=8,64:3d:4x4x4,64:plexus:4x4x4,256:1.5d:c=16,256:1.5d-sa:c=16,256:plexus:8x8x4,"
           "1024:1.5d:c=32,1024:plexus:16x8x8")


def flags_of(spec: str) -> dict:
    nproc, algo, shape = spec.split(":")
    out = {"nproc": int(nproc), "algo": algo}
    if shape.startswith("c="):
        out["replication"] = int(shape[2:])
    else:
        out["grid"] = shape.replace("x", ",")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="synthetic:rmat?scale=16&edge_factor=16")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--model", default="gcn")
    ap.add_argument("--profile", default="perlmutter-a100")
    ap.add_argument("--configs", default=DEFAULT)
    args = ap.parse_args()
    profile = load_profile(args.profile)
    graph = load_graph(args.data, seed=0)
    print(f"{args.data} {args.model} hidden {args.hidden}; profile {profile.name}")
    print(f"{'P':>5s} {'configuration':18s} {'MB fp32':>9s} {'MB bf16':>9s} {'bytes':>6s} {'ms fp32':>8s} "
          f"{'ms bf16':>8s} {'time':>6s} {'overlap':>8s}  (simulated in s)")
    layouts: dict = {}
    for spec in args.configs.split(","):
        flags = flags_of(spec)
        row = []
        t0 = time.perf_counter()
        for wire in (None, "bfloat16"):
            cfg = config_from_flags({"data": args.data, "model": args.model, "hidden": args.hidden,
                                     "comm_dtype": wire, **flags})
            vol, *_ = simulate_config(cfg, graph, layouts)
            threads = max(1, profile.cores // max(1, cfg.nproc)) if profile.cores else 1
            pred = predict_step(profile, vol.detail, vol.axes, vol.work, vol.world, threads)
            row.append((sum(vol.moved_by_phase().values()) / 1e6, pred["time_s"] * 1e3))
            if wire is None:
                early = predict_step(profile, vol.detail, vol.axes, vol.work, vol.world, threads, overlap=True,
                                     **vol.overlap_facts())
                over = early["time_s"] / pred["time_s"] if flags["algo"] in overlap_algorithms() else None
        (b0, t0_), (b1, t1) = row
        print(f"{flags['nproc']:5d} {spec.split(':', 1)[1]:18s} {b0:9.1f} {b1:9.1f} {b1 / b0:6.3f} {t0_:8.3f} "
              f"{t1:8.3f} {t1 / t0_:6.3f} {'-' if over is None else f'{over:.3f}':>8s}  "
              f"({time.perf_counter() - t0:.0f})", flush=True)


if __name__ == "__main__":
    main()
