r"""``gridgnn partition``: partition a graph, print its quality report, write the partition and the report.

Paper: ICPP'24 §5, Table 2 (average and maximum data sent per process in one SpMM, and the load imbalance
max/mean − 1). The report has those columns and more (see :func:`gridgnn.partition.quality.quality_report`)::

    gridgnn partition --data synthetic:rmat?scale=16 --parts 64 --method balanced --out rmat16.part

writes ``rmat16.part`` (the part of every vertex in original order, one integer per line — the METIS /
Graph-VB format, reusable by ``gridgnn train --partition rmat16.part``) and ``rmat16.part.json`` (the report:
``edge_cut``, ``total_volume_rows``, ``max_send_rows``, ``mean_send_rows``, ``max_recv_rows``,
``mean_recv_rows``, ``send_imbalance``, ``nnz_imbalance``, ``messages``, ``seconds``, ``peak_rss_bytes``, ...;
volumes in rows of :math:`H`, bytes = rows × f × 4).

Run time (``seconds``) is the wall time of the partitioner alone (graph loading and the report excluded).
Memory: ``peak_rss_bytes`` is the process's resident-set high-water mark after partitioning
(``resource.getrusage(RUSAGE_SELF).ru_maxrss``; it includes the loaded graph and everything before, and
covers memory that METIS / Mt-KaHyPar allocate in C), and ``tracemalloc_peak_bytes`` is the peak of the
allocations Python and NumPy made *during* the partitioner call (``tracemalloc``; blind to C libraries).
"""
from __future__ import annotations

import argparse
import json
import resource
import sys
import time
import tracemalloc

import numpy as np

from ..train.config import checked_seed
from ..errors import GridGnnError
from ..partition.partitioners import METHODS, partition_text, partition_vector
from ..partition.quality import as_csr, quality_report, send_recv_volumes

__all__ = ["add_partition_arguments", "run_partition_command", "timed_partition", "format_report"]


#: the defaults of the flags that apply to one kind of method only (``gridgnn partition`` refuses a flag of the
#: other kind, so its parser defaults them to None)
DEFAULTS = {"blocks": "8x8", "feature_size": 128, "imbalance": 0.05}


def add_partition_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the ``gridgnn partition`` options to ``parser`` (returns it)."""
    parser.add_argument("--data", required=True, metavar="SPEC",
                        help="graph spec, e.g. synthetic:rmat?scale=16, synthetic:sbm?n=100000&avg_degree=20, "
                             "npz:FILE, mtx:FILE, edgelist:FILE")
    parser.add_argument("--parts", required=True, type=int, metavar="K",
                        help="number of parts (P for --algo 1d-sa, P/c for 1.5d-sa)")
    parser.add_argument("--method", required=True, metavar="M",
                        help=f"one of {', '.join(METHODS)} (or balanced:<start> with start = metis, metis-vol, "
                             "hypergraph, random, best)")
    parser.add_argument("--out", default=None, metavar="FILE",
                        help="write the part of every vertex (original order, one per line) to FILE and the "
                             "report to FILE.json")
    parser.add_argument("--seed", type=int, default=0, help="seed of the graph generator and the partitioner")
    parser.add_argument("--feature-size", type=int, default=DEFAULTS["feature_size"], metavar="F",
                        help=f"feature width f for the byte columns (bytes = rows × f × 4), default "
                             f"{DEFAULTS['feature_size']}")
    parser.add_argument("--imbalance", type=float, default=DEFAULTS["imbalance"],
                        help=f"allowed nnz imbalance ε (every part ≤ (1+ε) × mean), default {DEFAULTS['imbalance']}")
    return parser


def timed_partition(mat, parts: int, method: str, *, seed: int = 0, imbalance: float = DEFAULTS["imbalance"]):
    """Run :func:`partition_vector` and measure it: ``(part, seconds, peak_rss_bytes, tracemalloc_peak_bytes)``."""
    tracemalloc.start()
    try:
        t0 = time.perf_counter()
        part = partition_vector(mat, parts, method, seed=seed, imbalance=imbalance)
        seconds = time.perf_counter() - t0
        _, traced_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    rss_bytes = int(rss) * (1 if sys.platform == "darwin" else 1024)
    return part, seconds, rss_bytes, int(traced_peak)


def _mb(rows: float, f: int) -> float:
    return rows * f * 4 / 1e6


def format_report(rep: dict) -> str:
    """A human-readable table of a report (volumes in rows and in MB at the report's ``f``)."""
    f = rep["f"]
    lines = [
        f"partition: method={rep.get('method', '?')} parts={rep['parts']} vertices={rep.get('n', '?')} "
        f"nnz={rep.get('nnz', '?')} data={rep.get('data', '?')}",
        f"{'metric':28s} {'rows':>14s} {'MB (f=' + str(f) + ')':>14s}",
        f"{'total volume':28s} {rep['total_volume_rows']:>14d} {_mb(rep['total_volume_rows'], f):>14.2f}",
        f"{'max send per part':28s} {rep['max_send_rows']:>14d} {_mb(rep['max_send_rows'], f):>14.2f}",
        f"{'mean send per part':28s} {rep['mean_send_rows']:>14.1f} {_mb(rep['mean_send_rows'], f):>14.2f}",
        f"{'max recv per part':28s} {rep['max_recv_rows']:>14d} {_mb(rep['max_recv_rows'], f):>14.2f}",
        f"{'mean recv per part':28s} {rep['mean_recv_rows']:>14.1f} {_mb(rep['mean_recv_rows'], f):>14.2f}",
        f"{'send imbalance (max/mean-1)':28s} {100 * rep['send_imbalance']:>13.1f}%",
        f"{'recv imbalance':28s} {100 * rep['recv_imbalance']:>13.1f}%",
        f"{'nnz imbalance':28s} {100 * rep['nnz_imbalance']:>13.1f}%",
        f"{'vertex imbalance':28s} {100 * rep['vertex_imbalance']:>13.1f}%",
        f"{'edge cut (undirected)':28s} {rep['edge_cut']:>14d}",
        f"{'messages (q->p pairs)':28s} {rep['messages']:>14d}",
    ]
    if "seconds" in rep:
        lines.append(f"{'partitioner time':28s} {rep['seconds']:>13.2f}s")
    if "peak_rss_bytes" in rep:
        lines.append(f"{'peak RSS (process)':28s} {rep['peak_rss_bytes'] / 2**20:>11.1f}MiB")
    if "backward" in rep:
        b = rep["backward"]
        lines.append(f"{'backward (M^T) total / max send / max recv':44s} {b['total_volume_rows']} / "
                     f"{b['max_send_rows']} / {b['max_recv_rows']}")
    return "\n".join(lines)


def run_partition_command(args: argparse.Namespace) -> int:
    """``gridgnn partition``: load ``--data``, partition, print the report, write ``--out`` and ``--out``.json."""
    from ..graph.spec import load_graph

    if args.parts is None or int(args.parts) < 1:
        raise GridGnnError(f"--parts must be a positive integer, got {args.parts}")
    if int(args.feature_size) < 1:
        raise GridGnnError(f"--feature-size must be positive, got {args.feature_size}")
    seed = checked_seed(args.seed)
    graph = load_graph(args.data, seed=seed)
    mat = as_csr(graph)
    part, seconds, rss, traced = timed_partition(mat, int(args.parts), args.method, seed=seed,
                                                 imbalance=float(args.imbalance))
    rep = quality_report(mat, part, int(args.parts), f=int(args.feature_size))
    rep.update(method=args.method, data=args.data, n=int(mat.shape[0]), nnz=int(mat.nnz), seed=seed,
               imbalance=float(args.imbalance), seconds=seconds, peak_rss_bytes=rss,
               tracemalloc_peak_bytes=traced)
    if getattr(graph, "directed", False):
        send_b, recv_b = send_recv_volumes(mat.T.tocsr(), part, int(args.parts))
        rep["backward"] = dict(total_volume_rows=int(send_b.sum()), max_send_rows=int(send_b.max()),
                               max_recv_rows=int(recv_b.max()))
    print(format_report(rep))
    if args.out:
        from ..graph.files import atomic_write, make_parent

        make_parent(args.out)
        with atomic_write(args.out, "w") as fh:  # each file complete or absent, whatever stops the command
            fh.write(partition_text(part))
        with atomic_write(f"{args.out}.json", "w") as fh:
            json.dump(rep, fh, indent=1, default=_json_default)
            fh.write("\n")
        print(f"wrote {args.out} and {args.out}.json")
    return 0


def _json_default(obj):
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    raise TypeError(f"not JSON serializable: {type(obj).__name__}")
