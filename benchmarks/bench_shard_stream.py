"""``gridgnn shard`` of a text edge list in passes under a memory budget against the in-memory path, measured in the
same run: wall time and peak resident memory (each path in its own process) and whether the two datasets hold the
same arrays.

    python benchmarks/bench_shard_stream.py [--scale 20] [--edge-factor 8] [--budget 1G] [--blocks 8x8] [--passes-only]

``--passes-only`` runs the passes alone (a file far larger than the budget, whose in-memory path would not fit this
machine) and prints the file's size over the budget.

The edge list is written first (an R-MAT graph of 2**scale vertices, ``synthetic:rmat``'s generator, each undirected
edge once, ``src dst`` per line) into --workdir, and read with ``?directed=0``.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import _common  # noqa: F401 - puts src/ on the path
import numpy as np

from gridgnn.commands.shard import parse_size
from gridgnn.graph.synthetic import rmat_graph

SRC = Path(__file__).resolve().parent.parent / "src"


def write_edge_list(path: Path, scale: int, edge_factor: int) -> tuple[int, int]:
    g = rmat_graph(scale, edge_factor=edge_factor, seed=0, features=1)
    src, dst = g.edge_index()
    keep = src < dst
    src, dst = src[keep], dst[keep]
    with open(path, "w") as fh:
        for lo in range(0, src.size, 1 << 20):
            fh.write("\n".join(f"{a} {b}" for a, b in zip(src[lo:lo + (1 << 20)].tolist(),
                                                           dst[lo:lo + (1 << 20)].tolist())) + "\n")
    return g.n, int(src.size)


def run_shard(spec: str, out: Path, blocks: str, budget: str | None) -> tuple[float, int, dict]:
    """One ``gridgnn shard`` in a fresh process under GNU time: (seconds, its peak RSS in bytes, meta). (A child's
    own ``ru_maxrss`` would count the launching process's pages, which it shares until it runs the command.)"""
    time_bin = shutil.which("time") or "/usr/bin/time"
    cmd = [time_bin, "-f", "PEAK_KB %M", sys.executable, "-m", "gridgnn", "shard", "--data", spec, "--blocks", blocks,
           "--out", str(out), "--overwrite"] + (["--memory-budget", budget] if budget else [])
    t0 = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(SRC)})
    if res.returncode:
        sys.exit(f"gridgnn shard exited {res.returncode}: {res.stderr.strip()}")
    seconds = time.perf_counter() - t0
    peak = int(res.stderr.rsplit("PEAK_KB", 1)[1].split()[0]) * 1024
    return seconds, peak, json.loads((out / "meta.json").read_text())


def same_arrays(a: Path, b: Path) -> bool:
    for f in sorted(a.rglob("*.np[yz]")):
        g = b / f.relative_to(a)
        if f.suffix == ".npz":
            with np.load(f) as x, np.load(g) as y:
                if x.files != y.files or not all(np.array_equal(x[k], y[k]) for k in x.files):
                    return False
        elif not np.array_equal(np.load(f), np.load(g)):
            return False
    return True


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=int, default=20)
    ap.add_argument("--edge-factor", type=int, default=8)
    ap.add_argument("--budget", default="1G")
    ap.add_argument("--blocks", default="8x8")
    ap.add_argument("--workdir", default="runs/bench-shard-stream")
    ap.add_argument("--passes-only", action="store_true", help="skip the in-memory path")
    ap.add_argument("--write-only", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    text = work / f"rmat-s{args.scale}.txt"
    if args.write_only:
        n, edges = write_edge_list(text, args.scale, args.edge_factor)
        print(f"R-MAT scale {args.scale}, edge factor {args.edge_factor}: n={n}, {edges} undirected edges, "
              f"{text.stat().st_size / 2**20:.0f} MiB of text")
        return
    # the file is written by a child process, so that this one stays small while the shards run
    subprocess.run([sys.executable, __file__, "--write-only", "--scale", str(args.scale), "--edge-factor",
                    str(args.edge_factor), "--workdir", str(work)], check=True)
    spec = f"edgelist:{text}?directed=0"
    s_sec, s_peak, s_meta = run_shard(spec, work / "streamed", args.blocks, args.budget)
    if args.passes_only:
        size = text.stat().st_size
        print(f"in passes: {s_sec:.1f} s, peak RSS {s_peak / 2**30:.2f} GiB (--memory-budget {args.budget}); "
              f"{size / 2**20:.0f} MiB of text = {size / parse_size(args.budget):.2f}x the budget; "
              f"nnz of M̂ {s_meta['matrix_nnz']}")
        shutil.rmtree(work / "streamed")
        text.unlink()
        return
    m_sec, m_peak, m_meta = run_shard(spec, work / "in-memory", args.blocks, None)
    same = same_arrays(work / "in-memory", work / "streamed")
    print(f"{'path':10s} {'seconds':>8s} {'peak RSS':>10s}")
    print(f"{'in memory':10s} {m_sec:8.1f} {m_peak / 2**30:8.2f} GiB")
    print(f"{'in passes':10s} {s_sec:8.1f} {s_peak / 2**30:8.2f} GiB   (--memory-budget {args.budget})")
    print(f"nnz of M̂ {s_meta['matrix_nnz']}; time ratio {s_sec / m_sec:.2f}, peak ratio {s_peak / m_peak:.3f}; "
          f"same arrays in every file: {same}")
    shutil.rmtree(work / "in-memory")
    shutil.rmtree(work / "streamed")
    text.unlink()


if __name__ == "__main__":
    main()
