"""Start-up of a local launch: ranks forked from a fork server (the default) next to fresh interpreters
(``GRIDGNN_START_METHOD=spawn``), measured in one run.

Each mode runs in its own fresh Python process, which launches ``--repeat`` times in a row a worker that builds a
torch optimizer and returns (what every training rank does before its first epoch), and prints the wall time of
each launch; the first launch with a fork server includes starting the server (it imports torch and gridgnn once).
Then one real ``gridgnn train`` (``--epochs 2``, the default SBM graph) per mode, end to end. Usage:
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
from gridgnn.distributed.launch import launch

def ready(ctx):
    import torch
    torch.optim.Adam([torch.nn.Parameter(torch.zeros(3))])
    return ctx.rank

if __name__ == "__main__":
    times = []
    for _ in range(int(sys.argv[2])):
        t = time.perf_counter()
        launch(ready, int(sys.argv[1]), device="cpu", collect=True)
        times.append(time.perf_counter() - t)
    print(json.dumps(times))
"""


def run_mode(method: str, nproc: int, repeat: int) -> tuple[list[float], float]:
    env = {**os.environ, "GRIDGNN_START_METHOD": method}
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "launches.py")
        with open(script, "w") as fh:
            fh.write(_LAUNCHES)
        r = subprocess.run([sys.executable, script, str(nproc), str(repeat)], capture_output=True, text=True,
                           env=env, check=True)
        launches = json.loads(r.stdout.strip().splitlines()[-1])
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
    print(f"{args.nproc} ranks, {os.cpu_count()} cores; seconds per launch (worker: build a torch optimizer)")
    res = {m: run_mode(m, args.nproc, args.repeat) for m in ("spawn", "forkserver")}
    for m, (launches, train) in res.items():
        print(f"{m:11s} launches {' '.join(f'{t:6.2f}' for t in launches)}   gridgnn train (2 epochs) {train:6.2f}")
    (sp, sp_train), (fs, fs_train) = res["spawn"], res["forkserver"]
    warm = sum(sp[1:]) / max(1, len(sp) - 1) / max(1e-9, sum(fs[1:]) / max(1, len(fs) - 1))
    print(f"fork server vs spawn: first launch {sp[0] / fs[0]:.1f}x faster, later launches {warm:.0f}x, "
          f"gridgnn train end to end {sp_train / fs_train:.2f}x")


if __name__ == "__main__":
    main()
