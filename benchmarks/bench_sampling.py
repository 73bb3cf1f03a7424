"""Minibatch sampling and training (MLSys'24), measured in one invocation on one graph per ``--data``.

For each graph (default: the SBM at 10⁵ vertices, average degree 20, 128 features, with enough training vertices
for many minibatches):

1. **Sampling throughput, one process**: ``--minibatches`` minibatches of ``--batch-size`` training vertices,
   GraphSAGE fanout ``--fanout`` (15,10,5): sampled one at a time (``k = 1``) and all at once (bulk ``k``), as
   minibatches per second (best of two) and their ratio; PyG's ``NeighborLoader`` on the same minibatches when its sampling
   backend (``pyg-lib`` or ``torch-sparse``) is installed (else the row says so). LADIES (one layer, ``s`` =
   batch size) likewise.
2. **Sampling bytes per epoch at P = 4**, graph partitioned (Algorithm 2) with ``c = 1, 2``, from the byte model
   the test suite checks against measured bytes (graph replicated: none).
3. **Training, time split** sampling / feature fetch / compute per epoch and minibatches per second, with
   ``gridgnn train --sampler sage`` (one epoch after a warm-up epoch; evaluation with the training fanout) at
   P = 1, 2, 4 (2 and 4 in both sampling modes, ``--bulk`` = all of a rank's minibatches), read from
   ``summary.json``.

Usage: python benchmarks/bench_sampling.py [--data SPEC ...] [--minibatches 16] [--skip sampling,bytes,train]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

DEFAULT = ["synthetic:sbm?n=100000&classes=8&avg_degree=20&features=128&train_per_class=2048"]


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def pyg_loader_rate(graph, batches, fanouts) -> tuple[float | None, str]:
    import torch

    from torch_geometric.typing import WITH_PYG_LIB, WITH_TORCH_SPARSE

    if not (WITH_PYG_LIB or WITH_TORCH_SPARSE):
        return None, "not installed (needs pyg-lib or torch-sparse)"
    from torch_geometric.data import Data
    from torch_geometric.loader import NeighborLoader

    data = Data(edge_index=torch.from_numpy(graph.edge_index()), num_nodes=graph.n)
    seeds = torch.from_numpy(__import__("numpy").concatenate(batches))
    loader = NeighborLoader(data, num_neighbors=fanouts, input_nodes=seeds, batch_size=len(batches[0]))
    t = min(timed(lambda: [None for _ in loader]) for _ in range(2))  # best of two, as gridgnn's rows
    backend = "pyg-lib" if WITH_PYG_LIB else "torch-sparse"
    return len(batches) / t, f"{len(batches) / t:.2f} ({backend})"


def sampling_section(spec: str, batch_size: int, fanouts: list[int], m: int) -> None:
    import numpy as np

    from gridgnn.graph.spec import load_graph
    from gridgnn.sampling import minibatches, sample_bulk
    from gridgnn.train.minibatch import neighbours

    g = load_graph(spec)
    a = neighbours(g)
    batches = minibatches(np.flatnonzero(g.train_mask), batch_size, seed=0)[:m]
    m = len(batches)
    print(f"\n{spec}: n = {g.n}, stored edges {g.nnz}, {m} minibatches of {batch_size}")
    print("\n| sampler | fanout | k = 1 (minibatches/s) | bulk k = all (minibatches/s) | bulk / k = 1 | PyG NeighborLoader "
          "(minibatches/s) | bulk / PyG |")
    print("|---|---|---|---|---|---|---|")
    for sampler, fo in (("sage", fanouts), ("ladies", [batch_size])):
        sample_bulk(a, batches[:1], fo, sampler=sampler)  # load the serial and the parallel kernels
        sample_bulk(a, batches[:2], fo, sampler=sampler)
        one = min(timed(lambda: [sample_bulk(a, [b], fo, sampler=sampler, batch_ids=[i])
                                 for i, b in enumerate(batches)]) for _ in range(2))
        bulk = min(timed(lambda: sample_bulk(a, batches, fo, sampler=sampler)) for _ in range(2))
        rate, pyg = pyg_loader_rate(g, batches, fo) if sampler == "sage" else (None, "–")
        vs = f"{m / bulk / rate:.2f}" if rate else "–"
        print(f"| {sampler} | {','.join(map(str, fo))} | {m / one:.2f} | {m / bulk:.2f} | {one / bulk:.2f} | {pyg} | "
              f"{vs} |", flush=True)


def bytes_section(spec: str, batch_size: int, fanouts: list[int]) -> None:
    import numpy as np

    from gridgnn.graph.spec import load_graph
    from gridgnn.sampling import minibatches
    from gridgnn.sampling.distributed import sampling_bytes
    from gridgnn.train.minibatch import neighbours

    g = load_graph(spec)
    a = neighbours(g)
    batches = minibatches(np.flatnonzero(g.train_mask), batch_size, seed=0)
    P = 4
    print(f"\nbytes per epoch at P = {P} ({len(batches)} minibatches, graph partitioned, k = all of a rank's):\n")
    print("| sampler | c | sampling MB (all ranks) | max rank sent MB |")
    print("|---|---|---|---|")
    for sampler, fo in (("sage", fanouts), ("ladies", [batch_size])):
        for c in (1, 2):
            k = -(-len(batches) // P)
            model = sampling_bytes(a, batches, fo, world=P, c=c, k=k, sampler=sampler, seed=0, epoch=0)
            sent = sum(v[0] for v in model.values())
            print(f"| {sampler} | {c} | {sent.sum() / 1e6:.1f} | {sent.max() / 1e6:.1f} |", flush=True)


def train_section(spec: str, batch_size: int, fanouts: list[int]) -> None:
    runs = [(1, 1, "replicated"), (2, 1, "replicated"), (2, 1, "partitioned"), (4, 1, "replicated"),
            (4, 2, "partitioned")]
    print("\ntraining, one epoch after a warm-up (3-layer SAGE-mean, hidden 128, float32; medians of the timed "
          "epochs):\n")
    print("| P | c | sampling | minibatches/s | sampling (s) | fetch (s) | compute (s) | epoch (s) | sampling MB | "
          "fetch MB |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    fo = ",".join(map(str, fanouts))
    for P, c, mode in runs:
        with tempfile.TemporaryDirectory() as out:
            cmd = [sys.executable, "-m", "gridgnn", "train", "--data", spec, "--model", "sage", "--sampler", "sage",
                   "--fanout", fo, "--eval-fanout", fo, "--batch-size", str(batch_size), "--layers",
                   str(len(fanouts)), "--hidden", "128", "--epochs", "2", "--nproc", str(P), "--replication",
                   str(c), "--sample-graph", mode, "--bulk", "1000000", "--quiet", "--out",
                   os.path.join(out, "run")]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode:
                print(f"| {P} | {c} | {mode} | failed: {r.stderr.strip().splitlines()[-1:]} |")
                continue
            recs = [json.loads(ln) for ln in open(os.path.join(out, "run", "metrics.jsonl"))][1:]
            rec = recs[-1]
            print(f"| {P} | {c} | {mode} | {rec['minibatches_per_s']:.2f} | {rec['sampling_s']:.2f} | "
                  f"{rec['fetch_s']:.2f} | {rec['compute_s']:.2f} | {rec['epoch_time_s']:.2f} | "
                  f"{rec['sampling_bytes'] / 1e6:.1f} | {rec['fetch_bytes'] / 1e6:.1f} |", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", action="append")
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--fanout", default="15,10,5")
    ap.add_argument("--minibatches", type=int, default=16)
    ap.add_argument("--skip", default="")
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    fanouts = [int(v) for v in args.fanout.split(",")]
    import torch

    print(f"threads: torch {torch.get_num_threads()}")
    for spec in args.data or DEFAULT:
        if "sampling" not in skip:
            sampling_section(spec, args.batch_size, fanouts, args.minibatches)
        if "bytes" not in skip:
            bytes_section(spec, args.batch_size, fanouts)
        if "train" not in skip:
            train_section(spec, args.batch_size, fanouts)


if __name__ == "__main__":
    main()
