"""Where a training step's memory peak lies: every rank's resident set sampled every 20 ms through a `gridgnn train`
run, beside the start and end of each engine primitive's forward and backward, of the backward and of the optimizer
step — to read the memory guard's estimate (`summary.json`'s `estimated_peak_memory_bytes`, its components from
`gridgnn.planner.memory`) against the moment the peak happens (issue 45: the guard's estimate against the measured
peak at R-MAT scale 22).

The run is the user's command line; a `sitecustomize` module put on its `PYTHONPATH` starts the sampler in every
process forked for a rank and wraps the `forward`/`backward` of the autograd functions of the engines
(`gridgnn.parallel.blockrow`, `summa`, `plexus`, `edge`, and the fused attention of `attention`). Prints rank 0's
events (rank 0 is the first rank forked) with the resident set when each starts and the most it reached until the
next, then every rank's peak and estimate.

Usage: python benchmarks/step_timeline.py [--rank-log N] -- train --data sharded:DIR --algo 1d-sa --nproc 4
           --hidden 64 --layers 3 --epochs 1 --out DIR --overwrite --quiet
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

GiB = 2 ** 30

SITECUSTOMIZE = r'''
import os, sys, threading, time

def _rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024

def _sample(path):
    with open(path, "w", buffering=1) as fh:
        while True:
            fh.write(f"{time.time():.3f} {_rss()}\n")
            time.sleep(0.02)

def _events(folder):
    import torch
    fh = open(os.path.join(folder, f"ev-{os.getpid()}.log"), "w", buffering=1)

    def wrap(owner, name, tag):
        f = getattr(owner, name)

        def w(*a, **k):
            fh.write(f"{time.time():.3f} {_rss()} {tag} start\n")
            out = f(*a, **k)
            fh.write(f"{time.time():.3f} {_rss()} {tag} end\n")
            return out
        return w
    for mod in ("blockrow", "summa", "plexus", "edge", "attention"):
        m = sys.modules.get(f"gridgnn.parallel.{mod}")
        if m is None:
            continue
        for name, cls in vars(m).items():
            if isinstance(cls, type) and issubclass(cls, torch.autograd.Function) and cls.__module__ == m.__name__:
                for step in ("forward", "backward"):
                    if step in vars(cls):
                        setattr(cls, step, staticmethod(wrap(cls, step, f"{mod}.{name}.{step}")))
    torch.Tensor.backward = wrap(torch.Tensor, "backward", "backward")
    torch.optim.Optimizer.step = wrap(torch.optim.Optimizer, "step", "optimizer.step")

def _child():
    folder = os.environ["GRIDGNN_TIMELINE_DIR"]
    threading.Thread(target=_sample, args=(os.path.join(folder, f"rss-{os.getpid()}.log"),), daemon=True).start()
    import gridgnn.parallel.attention, gridgnn.parallel.blockrow, gridgnn.parallel.plexus  # noqa: F401
    import gridgnn.parallel.summa  # noqa: F401
    _events(folder)

if os.environ.get("GRIDGNN_TIMELINE_DIR"):
    os.register_at_fork(after_in_child=_child)
'''


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rank-log", type=int, default=0, help="which forked process's events to print (0: the first)")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- then the gridgnn command (train ... --out DIR)")
    args = ap.parse_args()
    cmd = [c for c in args.command if c != "--"]
    if not cmd or "--out" not in cmd:
        ap.error("give the gridgnn train command after --, with --out")
    out = Path(cmd[cmd.index("--out") + 1])
    with tempfile.TemporaryDirectory(prefix="gridgnn-timeline-") as tmp:
        site, logs = Path(tmp, "site"), Path(tmp, "logs")
        site.mkdir()
        logs.mkdir()
        (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
        env = dict(os.environ, GRIDGNN_TIMELINE_DIR=str(logs),
                   PYTHONPATH=os.pathsep.join([str(site), *filter(None, [os.environ.get("PYTHONPATH")])]))
        code = subprocess.call([sys.executable, "-m", "gridgnn", *cmd], env=env)
        if code:
            return code
        pids = sorted(int(p.stem.split("-")[1]) for p in logs.glob("ev-*.log") if p.stat().st_size)
        if args.rank_log >= len(pids):
            print(f"--rank-log {args.rank_log}: only {len(pids)} forked rank(s) logged events; the timeline needs "
                  "ranks forked by a local launch (--nproc > 1, the default fork server)", file=sys.stderr)
            return 1
        pid = pids[args.rank_log]  # in the order the ranks were forked (process ids rise)
        events = [line.split() for line in open(logs / f"ev-{pid}.log")]
        samples = [tuple(map(float, line.split())) for line in open(logs / f"rss-{pid}.log") if len(line.split()) == 2]
        print(f"{'event':45s} {'seconds':>8s} {'at start GiB':>13s} {'most until next GiB':>20s}")
        for k, (t, rss, tag, what) in enumerate(events):
            t = float(t)
            until = float(events[k + 1][0]) if k + 1 < len(events) else float("inf")
            inside = [s[1] for s in samples if t <= s[0] <= until]
            if until - t < 0.05 and (not inside or max(inside) <= float(rss)):
                continue  # the traced step and other instants
            print(f"{tag + ' ' + what:45s} {min(until, samples[-1][0]) - t:8.2f} {float(rss) / GiB:13.3f} "
                  f"{max(inside, default=float(rss)) / GiB:20.3f}")
    summary = json.loads((out / "summary.json").read_text())
    for r, (peak, est) in enumerate(zip(summary["peak_memory_bytes"], summary["estimated_peak_memory_bytes"])):
        print(f"rank {r}: peak {peak / GiB:.3f} GiB, the guard's estimate {est / GiB:.3f} GiB "
              f"({(est / peak - 1) * 100:+.0f} %)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
