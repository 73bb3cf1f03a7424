"""The memory model of every built-in model on every algorithm against one real training step, in one run.

For each model and algorithm at P = 4 (one spawned group runs them all), every rank builds its plan, runs one
forward/backward with an autograd saved-tensor hook and one Adam step, and counts what it holds; the estimate
(:func:`gridgnn.planner.memory.estimate_rank_memory`, every model from its trace) is
computed beside it. Prints, per model and algorithm, the estimated / measured ratio of the activations (min and
max over the ranks) and of the parameters with Adam's state, and the estimated peak of the largest rank. Usage:
    python benchmarks/memory_models.py [--n 1200] [--degree 12] [--features 24] [--hidden 16]
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from gridgnn.distributed.launch import launch  # noqa: E402
from gridgnn.graph.synthetic import sbm_graph  # noqa: E402
from gridgnn.parallel import algorithm  # noqa: E402
from gridgnn.partition.counts import pattern_of  # noqa: E402
from gridgnn.planner.memory import estimate_rank_memory  # noqa: E402
from gridgnn.train.rank_layout import make_source, model_trace  # noqa: E402
from tests.planner._measure import distributed_measure, model_builder  # noqa: E402

SHAPES = {"1d": (4,), "1d-sa": (4,), "1.5d": (2, 2), "1.5d-sa": (2, 2), "2d": (2, 2), "3d": (1, 2, 2),
          "plexus": (2, 1, 2)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1200)
    ap.add_argument("--degree", type=float, default=12)
    ap.add_argument("--features", type=int, default=24)
    ap.add_argument("--hidden", type=int, default=16)
    args = ap.parse_args()
    graph = sbm_graph(n=args.n, classes=4, avg_degree=args.degree, features=args.features, seed=1)
    f, h = args.features, args.hidden
    models = {"gcn": [f, h, 4], "gat": [f, h, 4], "agnn": [f, h, h, 4], "va": [f, h, 4], "sage": [f, h, 4]}
    cases = [(graph, a, s, "random", models[m], 0.5, m) for m in models for a, s in SHAPES.items()]
    res = launch(distributed_measure, 4, cases, device="cpu", collect=True)
    print(f"SBM n={graph.n} nnz={graph.nnz} f={f} hidden={h}, P = 4, float32, dropout 0.5")
    print(f"{'model':6s} {'algorithm':9s} {'activations est/meas':>22s} {'parameters est/meas':>21s} "
          f"{'peak rank (MiB)':>16s}")
    for k, (_, a, s, p, dims, q, m) in enumerate(cases):
        c = s[1] if algorithm(a).grid == "1.5d" else 1
        source, rows = make_source(graph, a, 4, replication=c, shape=s, method=p, seed=1)
        tr = model_trace(dims, model_builder(m, dims, q, torch.float64), a, double=bool(getattr(source, "double", False)))
        meas = [res[r][k] for r in range(4)]
        est = estimate_rank_memory(a, s, graph.n, graph.nnz, dims, elem_bytes=4, directed=graph.directed,
                                   row_bounds=None if rows is None else rows.bounds,
                                   pattern=pattern_of(source, layers=len(dims) - 1), dropout=q,
                                   train_rows=[x["train_rows"] for x in meas], trace=tr)
        act = [est.ranks[r].saved_activations / meas[r]["activations"] for r in range(4)]
        par = [est.ranks[r].per_component["parameters"] / meas[r]["parameters"] for r in range(4)]
        print(f"{m:6s} {a:9s} {min(act):10.2f} .. {max(act):5.2f}      {min(par):8.2f} .. {max(par):5.2f}   "
              f"{est.total / 2 ** 20:13.1f}")


if __name__ == "__main__":
    main()
