r"""Partitioner quality table in the style of ICPP'24 Table 2 (average and maximum data sent per process in one
sparsity-aware SpMM, load imbalance = max/mean − 1), plus total volume, maximum receive, nnz balance and the
partitioner's run time, for random, metis, metis-vol, hypergraph and balanced.

Each (graph, P, method) runs in a forked child process with a time limit (``--timeout``); a method that runs
out of time is reported as such. Volumes are in MB at ``--feature-size`` f (bytes = rows × f × 4).

Example (the command recorded in docs/benchmarks.md)::

    python benchmarks/bench_partition.py --graphs "synthetic:rmat?scale=17" \
        "synthetic:sbm?n=100000&classes=16&avg_degree=20" --parts 16,32,64 --timeout 300
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import resource
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from gridgnn.graph.spec import load_graph  # noqa: E402
from gridgnn.partition.partitioners import partition_vector  # noqa: E402
from gridgnn.partition.quality import quality_report  # noqa: E402

METHODS = ("random", "metis", "metis-vol", "hypergraph", "balanced")


def _child(conn, mat, parts, method, seed, imbalance):
    try:
        t0 = time.perf_counter()
        part = partition_vector(mat, parts, method, seed=seed, imbalance=imbalance)
        seconds = time.perf_counter() - t0
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        conn.send(("ok", part, seconds, rss))
    except Exception as exc:  # reported in the table
        conn.send(("error", f"{type(exc).__name__}: {exc}", 0.0, 0))
    finally:
        conn.close()


def run_one(mat, parts, method, *, seed, imbalance, timeout):
    """Partition in a forked child (so a slow partitioner can be stopped): ``(status, part|msg, s, rss)``."""
    ctx = mp.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(send, mat, parts, method, seed, imbalance))
    t0 = time.perf_counter()
    proc.start()
    send.close()
    result = None
    if recv.poll(timeout):
        try:
            result = recv.recv()
        except EOFError:
            result = ("error", "child exited without a result", time.perf_counter() - t0, 0)
    proc.join(5 if result else 0)
    if proc.is_alive():
        proc.terminate()
        proc.join()
    if result is None:
        result = ("timeout", f"> {timeout:.0f} s", time.perf_counter() - t0, 0)
    return result


def _warm_up():
    """Load the numba kernels of the refinement once, before forking, so no child pays for it."""
    import numpy as np
    import scipy.sparse as sp

    from gridgnn.partition.refine import refine_max_volume

    mat = sp.random(64, 64, density=0.1, random_state=0, format="csr")
    refine_max_volume(mat + mat.T, np.arange(64) % 4, 4)


def _mb(rows, f):
    return rows * f * 4 / 1e6


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--graphs", nargs="+", default=["synthetic:rmat?scale=17",
                                                    "synthetic:sbm?n=100000&classes=16&avg_degree=20"])
    ap.add_argument("--parts", default="16,32,64", help="comma-separated part counts")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--feature-size", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--imbalance", type=float, default=0.05)
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per (graph, P, method)")
    ap.add_argument("--json", default=None, help="also write all rows to this JSON file")
    args = ap.parse_args(argv)
    f = args.feature_size
    rows = []
    _warm_up()
    header = ("| graph | P | method | avg send (MB) | max send (MB) | imbalance % | total (MB) | max recv (MB) "
              "| nnz imb. % | time (s) |")
    print(header)
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|", flush=True)
    for spec in args.graphs:
        graph = load_graph(spec, seed=args.seed)
        mat = graph.csr()
        edges = int((mat.nnz - mat.diagonal().astype(bool).sum()) // (1 if graph.directed else 2))
        label = f"{graph.name} (n={graph.n}, m={edges})"
        for parts in [int(p) for p in args.parts.split(",")]:
            for method in args.methods.split(","):
                status, payload, seconds, rss = run_one(mat, parts, method, seed=args.seed,
                                                        imbalance=args.imbalance, timeout=args.timeout)
                row = dict(graph=spec, name=graph.name, n=int(graph.n), edges=edges, parts=parts, method=method,
                           status=status, seconds=seconds, peak_rss_bytes=int(rss))
                if status == "ok":
                    rep = quality_report(mat, payload, parts, f=f)
                    row.update({k: rep[k] for k in ("total_volume_rows", "max_send_rows", "mean_send_rows",
                                                    "max_recv_rows", "send_imbalance", "recv_imbalance",
                                                    "nnz_imbalance", "vertex_imbalance", "edge_cut", "messages")})
                    print(f"| {label} | {parts} | {method} | {_mb(rep['mean_send_rows'], f):.2f} | "
                          f"{_mb(rep['max_send_rows'], f):.2f} | {100 * rep['send_imbalance']:.1f} | "
                          f"{_mb(rep['total_volume_rows'], f):.1f} | {_mb(rep['max_recv_rows'], f):.2f} | "
                          f"{100 * rep['nnz_imbalance']:.1f} | {seconds:.1f} |", flush=True)
                else:
                    row["message"] = payload
                    print(f"| {label} | {parts} | {method} | {status}: {payload} | | | | | | {seconds:.1f} |",
                          flush=True)
                rows.append(row)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(rows, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
