"""VA's test accuracy with the features as loaded and with unit-L2 rows (``--feature-norm none`` / ``l2``), next to
GCN, serial, 200 epochs, seeds 0..S-1: why VA declares ``FEATURE_NORM = "l2"`` (docs/benchmarks.md, "Vanilla attention
and feature scale"). Usage: python benchmarks/va_feature_scale.py [--seeds 5] [--graphs cora,citeseer,sbm]
"""
from __future__ import annotations

import argparse
import os
import statistics

from _common import run


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    planetoid = os.path.join(here, "..", "..", "shared", "data", "planetoid")
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--graphs", default="cora,citeseer,sbm", help="cora, citeseer (Planetoid), sbm (the default data)")
    args = ap.parse_args()
    print("| graph | VA, none | VA, l2 | GCN |")
    print("|---|---|---|---|")
    for name in args.graphs.split(","):
        data = None if name == "sbm" else f"planetoid:{os.path.join(planetoid, name)}"
        cells = []
        for model, norm in (("va", "none"), ("va", "l2"), ("gcn", "auto")):
            accs = [run(data=data, model=model, algo="serial", seed=s, feature_norm=norm)["test_acc"]
                    for s in range(args.seeds)]
            cells.append(f"{statistics.mean(accs):.3f} ± {statistics.pstdev(accs):.3f}")
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
