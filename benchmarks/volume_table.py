"""Bytes per training epoch moved over all ranks (fwd + bwd traffic; per collective the larger of the bytes sent
and received over all ranks: the receivers' for a broadcast, the senders' for its adjoint, the reduce) of a GCN on 1d vs 1d-sa vs 1.5d vs
1.5d-sa from the exact volume model (no processes: the per-primitive model of ``gridgnn.planner.primitives``
summed over the model's traced primitives, which the test suite checks against the measured bytes of every rank).

Usage: python benchmarks/volume_table.py [--data SPEC ...] [--nprocs 4,16] [--hidden 16]
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from gridgnn.graph import gcn_normalize  # noqa: E402
from gridgnn.graph.spec import load_graph  # noqa: E402
import torch  # noqa: E402

from gridgnn.nn import GCN  # noqa: E402
from gridgnn.planner.primitives import BlockRowVolume, step_bytes, trace_model  # noqa: E402
from gridgnn.train.rank_layout import make_partition, num_blocks  # noqa: E402


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    cora = os.path.join(here, "..", "..", "shared", "data", "planetoid", "cora")
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", nargs="+", default=[f"planetoid:{cora}", "synthetic:sbm?n=20000&classes=8&avg_degree=16&features=64"])
    ap.add_argument("--nprocs", default="4,16")
    ap.add_argument("--hidden", type=int, default=16)
    ap.add_argument("--partitions", default="random,metis,balanced")
    args = ap.parse_args()
    print("| data | P | partition | 1d MB | 1d-sa MB | 1d-sa / 1d | 1.5d (c=2) MB | 1.5d-sa (c=2) MB | 1.5d-sa / 1.5d |")
    print("|---|---|---|---|---|---|---|---|---|")
    for spec in args.data:
        g = load_graph(spec)
        mat = gcn_normalize(g)
        dims = [g.num_features, args.hidden, g.num_classes]
        calls, nparams = trace_model(lambda plan: GCN(dims, dtype=torch.float64, plan=plan), dims[0])
        name = spec.split("/")[-1] if spec.startswith("planetoid:") else spec.split("?")[0] + "?" + spec.split("?")[1][:30]
        for p in map(int, args.nprocs.split(",")):
            for part in args.partitions.split(","):
                vals = {}
                for algo, c in (("1d", 1), ("1d-sa", 1), ("1.5d", 2), ("1.5d-sa", 2)):
                    rows = make_partition(g, num_blocks(algo, p, c), part, 0)
                    matp = rows.permute_matrix(mat)
                    vol = step_bytes(calls, BlockRowVolume(algo, matp, rows, p, c), nparams, 4)
                    vals[algo] = sum(max(s.sum(), r.sum()) for k, (s, r, _) in vol.items()
                                     if k.split(".")[0] in ("fwd", "bwd")) / 1e6
                print(f"| {name} | {p} | {part} | {vals['1d']:.3f} | {vals['1d-sa']:.3f} | {vals['1d-sa'] / vals['1d']:.2f} "
                      f"| {vals['1.5d']:.3f} | {vals['1.5d-sa']:.3f} | {vals['1.5d-sa'] / vals['1.5d']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
