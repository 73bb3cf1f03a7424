"""Start-up of a local launch: ranks forked from a fork server (the default) next to fresh interpreters
(``GRIDGNN_START_METHOD=spawn``), measured in one run.

Each mode runs in its own fresh Python process, which launches ``--repeat`` times in a row a worker that builds a
torch optimizer and draws a dropout mask with the numba kernels (what every training rank does before its first
epoch), and prints the wall time of each launch; the first launch with a fork server includes starting the server
(it imports torch and gridgnn once and sets the kernels up). A third mode forks from a server that leaves the
kernels to each rank (without ``gridgnn.train.fork_preload``). Then one real ``gridgnn train`` (``--epochs 2``, the
default SBM graph) per mode, end to end. Usage:
    python benchmarks/bench_launch.py [--nproc 4] [--repeat 3]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

_LAUNCHES = """
import json, sys, time
import numpy as np
from gridgnn.distributed import launch as launching
from gridgnn.distributed.launch import launch

def ready(ctx):
    import torch
    from gridgnn.nn.dropout import keep_mask
    torch.optim.Adam([torch.nn.Parameter(torch.zeros(3))])
    keep_mask(np.arange(100), 16, 0.5, seed=0, epoch=0, layer=0)
    return ctx.rank

if __name__ == "__main__":
    if sys.argv[3] == "cold-kernels":
        launching.FORKSERVER_PRELOAD = tuple(m for m in launching.FORKSERVER_PRELOAD if m != "gridgnn.train.fork_preload")
    times = []
    for _ in range(int(sys.argv[2])):
        t = time.perf_counter()
        launch(ready, int(sys.argv[1]), device="cpu", collect=True)
        times.append(time.perf_counter() - t)
    print(json.dumps(times))
"""


def run_mode(mode: str, nproc: int, repeat: int) -> tuple[list[float], float | None]:
    """``mode``: spawn, forkserver, or cold-kernels (a fork server that leaves the kernels to each rank; no
    ``gridgnn train`` row: the command line has no such mode)."""
    env = {**os.environ, "GRIDGNN_START_METHOD": "forkserver" if mode == "cold-kernels" else mode}
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "launches.py")
        with open(script, "w") as fh:
            fh.write(_LAUNCHES)
        r = subprocess.run([sys.executable, script, str(nproc), str(repeat), mode], capture_output=True, text=True,
                           env=env, check=True)
        launches = json.loads(r.stdout.strip().splitlines()[-1])
        if mode == "cold-kernels":
            return launches, None
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "gridgnn", "train", "--algo", "1d", "--nproc", str(nproc), "--epochs",
                        "2", "--quiet", "--out", os.path.join(tmp, "run")], env=env, check=True,
                       capture_output=True)
        return launches, time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nproc", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    print(f"{args.nproc} ranks, {os.cpu_count()} cores; seconds per launch (worker: build a torch optimizer, draw a "
          f"dropout mask)")
    res = {m: run_mode(m, args.nproc, args.repeat) for m in ("spawn", "forkserver", "cold-kernels")}
    for m, (launches, train) in res.items():
        tail = f"   gridgnn train (2 epochs) {train:6.2f}" if train is not None else ""
        print(f"{m:12s} launches {' '.join(f'{t:6.2f}' for t in launches)}{tail}")
    (sp, sp_train), (fs, fs_train), (cold, _) = res["spawn"], res["forkserver"], res["cold-kernels"]

    def later(t):
        return sum(t[1:]) / max(1, len(t) - 1)

    print(f"fork server vs spawn: first launch {sp[0] / fs[0]:.1f}x faster, later launches "
          f"{later(sp) / max(1e-9, later(fs)):.0f}x, gridgnn train end to end {sp_train / fs_train:.2f}x; kernels set "
          f"up in the server vs in each rank: later launches {later(cold) / max(1e-9, later(fs)):.1f}x")


if __name__ == "__main__":
    main()
