"""Bytes per training epoch of each model on every algorithm at P = 4 and 8, from the exact per-primitive byte
models (no processes: ``gridgnn.planner.primitives`` summed over the traced step, which the test suite checks
against the bytes measured on every rank). Per collective the larger of the bytes sent and received over all
ranks (the receivers' for a broadcast, the senders' for a reduce), float32, training step only (forward,
backward, gradient all-reduce). Models: ``gat`` (8 heads × 8, one output head), ``gcn`` (hidden 16), ``agnn``
(PyG's Cora example: hidden 16, two propagations), ``va`` (hidden 16), ``sage`` (mean, hidden 16).
Usage: python benchmarks/model_bytes.py [--data SPEC] [--nprocs 4,8] [--models gat,gcn]
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

import torch  # noqa: E402

from gridgnn.distributed.grid import default_shape, grid_shape  # noqa: E402
from gridgnn.graph import gcn_normalize  # noqa: E402
from gridgnn.graph.spec import load_graph  # noqa: E402
from gridgnn.nn import AGNN, GAT, GCN, SAGE, VA  # noqa: E402
from gridgnn.parallel.registry import algorithm  # noqa: E402
from gridgnn.parallel.trace import trace  # noqa: E402
from gridgnn.planner.primitives import BlockRowVolume, PlexusVolume, SummaVolume, step_bytes  # noqa: E402
from gridgnn.train.rank_layout import make_source  # noqa: E402


def moved(vol: dict) -> float:
    return sum(max(s.sum(), r.sum()) for s, r, _ in vol.values())


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    cora = os.path.join(here, "..", "..", "shared", "data", "planetoid", "cora")
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=f"planetoid:{cora}")
    ap.add_argument("--nprocs", default="4,8")
    ap.add_argument("--partition", default="random")
    ap.add_argument("--models", default="gat,gcn", help="comma-separated: gat, gcn, agnn, va, sage")
    args = ap.parse_args()
    g = load_graph(args.data)
    f, c = g.num_features, g.num_classes
    builders = {
        "gat": ("GAT 8×8, 1 head", lambda plan: GAT([f, 8, c], heads=8, dropout=0.6, attn_dropout=0.6,
                                                    dtype=torch.float64, plan=plan)),
        "gcn": ("GCN 16", lambda plan: GCN([f, 16, c], dtype=torch.float64, plan=plan)),
        "agnn": ("AGNN 16", lambda plan: AGNN([f, 16, 16, 16, c], dtype=torch.float64, plan=plan)),
        "va": ("VA 16", lambda plan: VA([f, 16, c], dtype=torch.float64, plan=plan)),
        "sage": ("SAGE-mean 16", lambda plan: SAGE([f, 16, c], dtype=torch.float64, plan=plan)),
    }
    models = dict(builders[m] for m in args.models.split(","))
    families = {a: algorithm(a) for a in ("1d", "2d", "plexus")}  # a trace per family: their plans' traits differ
    traces = {fam.family: {name: trace(build, f, fam.traits) for name, build in models.items()}
              for fam in families.values()}
    mat = gcn_normalize(g)
    print(f"data: {args.data.split('/')[-1]} (n={g.n}, {g.nnz} edges), partition {args.partition}, float32")
    print("| algo | P | grid | " + " | ".join(f"{m} MB/epoch" for m in models) + " |")
    print("|---|---|---|" + "---|" * len(models))
    for p in map(int, args.nprocs.split(",")):
        for algo, c_rep in (("1d", 1), ("1d-sa", 1), ("1.5d", 2), ("1.5d-sa", 2), ("2d", 1), ("3d", 1), ("plexus", 1)):
            kind = {"2d": "2d", "3d": "3d", "plexus": "3d"}.get(algo, "1.5d" if algo.startswith("1.5d") else "1d")
            shape = default_shape(kind, p) if kind in ("2d", "3d") else grid_shape(kind, p, replication=c_rep)
            source, rows = make_source(g, algo, p, replication=c_rep, shape=shape, method=args.partition, seed=0)
            labelled = g.train_mask & (g.y >= 0)
            mb = []
            for name, traced in traces[algorithm(algo).family].items():
                calls = traced.calls
                if rows is not None:
                    vol = BlockRowVolume(algo, rows.permute_matrix(mat), rows, p, c_rep)
                elif algo == "plexus":  # the layouts follow each model's trace
                    vol = PlexusVolume(source, shape, calls, labelled=labelled)
                else:
                    vol = SummaVolume(source, shape)
                mb.append(moved(step_bytes(calls, vol, traced.param_sizes, 4)) / 1e6)
            print(f"| {algo} | {p} | {'x'.join(map(str, shape))} | " + " | ".join(f"{v:.3f}" for v in mb) + " |",
                  flush=True)


if __name__ == "__main__":
    main()
