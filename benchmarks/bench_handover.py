"""A graph passed from Python to spawned ranks: the ranks' peak memory and the run's wall time when it reaches them
as shards written once (gridgnn.train(graph=...), :mod:`gridgnn.train.handover`) against the reference of the same
run receiving the whole graph pickled into every rank (the launcher called directly), measured in the same run.

    python benchmarks/bench_handover.py [--data SPEC] [--nproc P] [--algos 1d,2d,plexus]
"""
from __future__ import annotations

import argparse
import time

import _common  # noqa: F401 - puts src/ on the path

import gridgnn
from gridgnn.graph.spec import load_graph
from gridgnn.train.launching import launch_ranks
from gridgnn.train.config import TrainConfig
from gridgnn.train.worker import train_worker


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="synthetic:sbm?n=100000&classes=8&avg_degree=20&features=256")
    ap.add_argument("--nproc", type=int, default=4)
    ap.add_argument("--algos", default="1d,2d,plexus")
    ap.add_argument("--epochs", type=int, default=2)
    args = ap.parse_args()
    graph = load_graph(args.data, seed=0)
    print(f"{graph.name}: n={graph.n}, nnz={graph.nnz}, features {graph.num_features} "
          f"({graph.x.nbytes / 2**20:.0f} MiB of features); P={args.nproc}, {args.epochs} epochs")
    print(f"{'algo':8s} {'whole graph per rank':>22s} {'shards':>12s} {'ratio':>7s} {'wall whole':>11s} "
          f"{'wall shards':>12s}")
    for algo in args.algos.split(","):
        opts = dict(algo=algo, nproc=args.nproc, epochs=args.epochs, quiet=True)
        t0 = time.perf_counter()
        shards = gridgnn.train(graph=graph, **opts)
        t1 = time.perf_counter()
        cfg = TrainConfig(**opts)
        cfg.validate()
        whole = launch_ranks(train_worker, cfg, graph, False, ())[0]  # the reference: every rank unpickles the graph
        t2 = time.perf_counter()
        assert shards["final_loss"] == whole["final_loss"], (shards["final_loss"], whole["final_loss"])
        a, b = max(whole["peak_memory_bytes"]), max(shards["peak_memory_bytes"])
        print(f"{algo:8s} {a / 2**20:18.0f} MiB {b / 2**20:8.0f} MiB {b / a:7.3f} {t2 - t1:9.1f} s "
              f"{t1 - t0:10.1f} s")


if __name__ == "__main__":
    main()
