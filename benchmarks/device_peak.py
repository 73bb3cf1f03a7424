"""What one serial training step allocates at its peak on a GPU, read off the host where no GPU is lent — and which
tensors are alive at that moment, each named by the operation that made it.

The host takes a GPU's code paths (``GRIDGNN_DEVICE_PATHS=host``: torch's sparse products, the row of every edge
kept, the transposed order sorted, the masks hashed from device copies of the ids), with two stand-ins for what a
GPU does in one kernel and the host's torch does not:

* the keyed dropout masks drawn as Triton draws them, one pass writing a byte an element (numba's host kernel in
  the Triton kernel's place; without it the torch ``int64`` hash's temporaries would stand for a GPU without Triton);
* the dropout's scaling by its boolean mask in one pass (a GPU's ``mul_`` casts the mask inside its kernel; the
  host's converts it to a float tensor first, an ``n × f`` temporary no GPU makes).

The step's own peak is torch's profiler's memory timeline (:func:`gridgnn.testing.profiled_peak`'s reading): the
most bytes the step had allocated and not freed at once, after two warm-up steps, also in node tensors (``n × f``
float32 elements, ``f`` the features). Held between steps: the storages of the tensors alive before it, each once
(``bench_local.resident_bytes``: features, labels, the graph's arrays on the device paths, parameters, their
gradients and Adam's state). The own peak plus what is held stands for ``torch.cuda.max_memory_allocated``, which
``--pyg-mib`` divides (a GPU's PyG peak measured beside gridgnn, ``bench_local.py --device cuda``). The package
measured is the one beside this file (``../src``): copies of this file and of ``bench_local.py`` in an older
checkout measure that one.

Usage: python benchmarks/device_peak.py [--data SPEC] [--models gcn,sage] [--orders auto,lean] [--alive 6]
       [--pyg-mib gcn=665,sage=538]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT = "synthetic:sbm?n=100000&classes=8&avg_degree=20&features=128"


def standins() -> None:
    """Install the two stand-ins of the module docstring: in the dropout's modules alone, Triton's node mask kernel
    (the attention's kernels and every other Triton use stay the host's torch references)."""
    import numpy as np
    import torch

    import gridgnn.nn.dropout as dropout
    import gridgnn.ops.masked as masked
    from gridgnn.ops import kernels, triton_kernels

    class TritonMasks:  # what the dropout's modules ask of Triton: usable, on, node_keep_mask
        def __getattr__(self, name):
            return getattr(triton_kernels, name)

        @staticmethod
        def usable(device) -> bool:
            return True

        @staticmethod
        def on(*names) -> bool:
            return True

        @staticmethod
        def node_keep_mask(ids, features, c0, c1, key, threshold):  # Triton's one pass, on the host
            out = kernels.keyed_mask(ids.numpy(), features, c0, c1, np.uint64(int(key) & (2 ** 64 - 1)),
                                     np.uint64(threshold))
            return torch.from_numpy(out).clone()  # (in torch storage, which the profiler counts)

    dropout.triton_kernels = masked.triton_kernels = TritonMasks()
    masked.scale_masked = lambda x, mask, q, *, in_place=False: kernels.masked_scale(x, mask, q,
                                                                                     out=x if in_place else None)


def worker(spec: str, model: str, order: str, alive: int) -> dict:
    os.environ["GRIDGNN_DEVICE_PATHS"] = "host"
    sys.path.insert(0, os.path.join(HERE, "..", "src"))
    import numpy as np
    import torch
    from torch.profiler import ProfilerActivity, profile
    from torch.profiler._memory_profiler import Action, MemoryProfileTimeline

    standins()
    from gridgnn.graph.spec import load_graph
    from gridgnn.nn import MODELS
    from gridgnn.parallel.blockrow import serial_plan

    torch.manual_seed(0)
    g = load_graph(spec)
    x, y = torch.from_numpy(np.asarray(g.x, dtype=np.float32)), torch.from_numpy(g.y)
    train = torch.from_numpy(np.flatnonzero(g.train_mask & (g.y >= 0)))
    f = g.num_features
    dims = {"gcn": [f, 128, 128, g.num_classes], "sage": [f, 128, g.num_classes]}[model]
    plan = serial_plan(g, dtype=torch.float32)
    opts = dict(dropout=0.5, layer_order=order) | ({"aggr": "mean"} if model == "sage" else {})
    net = MODELS[model].from_options(dims, plan=None, dtype=torch.float32, seed=0, **opts)
    net.train()
    sys.path.insert(0, HERE)
    from bench_local import resident_bytes, serial_step

    step = serial_step(net, torch.optim.Adam(net.parameters(), lr=0.005), x, plan, y, train)
    step(), step()

    held = resident_bytes()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True, with_stack=True) as prof:
        step()
    now = top = 0
    live, at_top, when = {}, {}, 0
    for t, action, (key, _), nbytes in MemoryProfileTimeline(prof._memory_profile()).timeline:
        if key.device.type != "cpu":
            continue
        if action == Action.CREATE:
            now += nbytes
            live[key] = (nbytes, t)
        elif action == Action.DESTROY:
            now -= nbytes
            live.pop(key, None)
        if now > top:
            top, at_top, when = now, dict(live), t
    start = prof.profiler.kineto_results.trace_start_ns()
    events = [e for e in prof.events() if e.device_type.name == "CPU"]

    def made_by(t_ns: int) -> str:  # the innermost operations running when the allocation was made
        t = (t_ns - start) / 1000
        spans = sorted((e for e in events if e.time_range.start <= t <= e.time_range.end),
                       key=lambda e: e.time_range.end - e.time_range.start)
        names = [e.name for e in spans if e.name.startswith("aten::") or ".py(" in e.name]
        return " < ".join(n.split("/src/")[-1] for n in names[:3]) or "?"

    unit = g.n * f * 4
    biggest = sorted(at_top.values(), key=lambda v: -v[0])[:alive]
    return {"peak_bytes": top, "node_tensors": top / unit, "at": made_by(when), "held_bytes": held,
            "alive": [(nb / unit, made_by(t)) for nb, t in biggest]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=DEFAULT)
    ap.add_argument("--models", default="gcn,sage")
    ap.add_argument("--orders", default="auto,lean")
    ap.add_argument("--alive", type=int, default=6, help="the largest tensors alive at the peak to name")
    ap.add_argument("--pyg-mib", default="", help="MODEL=MiB,...: PyG's peak on a GPU, for the last column")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:  # (each run in its own process: the stand-ins and the profiler's state are its own)
        model, order = args.worker.split(":")
        print(json.dumps(worker(args.data, model, order, args.alive)))
        return
    print(f"data: {args.data}; one serial step, float32, dropout 0.5, the host on a GPU's paths")
    pyg = {k: float(v) for k, v in (kv.split("=") for kv in args.pyg_mib.split(",") if kv)}
    print("\n| model | order | step's own peak (MiB) | node tensors | held between steps (MiB) | sum (MiB) | × PyG "
          "| alive at the peak (node tensors, made by) |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    for model in args.models.split(","):
        for order in args.orders.split(","):
            cmd = [sys.executable, __file__, "--data", args.data, "--worker", f"{model}:{order}",
                   "--alive", str(args.alive)]
            r = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.splitlines()[-1])
            alive = "; ".join(f"{u:.2f} {by}" for u, by in r["alive"] if u >= 0.05)
            total = (r["peak_bytes"] + r["held_bytes"]) / 2 ** 20
            ratio = f"{total / pyg[model]:.2f}" if model in pyg else "–"
            print(f"| {model} | {order} | {r['peak_bytes'] / 2 ** 20:.1f} | {r['node_tensors']:.2f} | "
                  f"{r['held_bytes'] / 2 ** 20:.1f} | {total:.1f} | {ratio} | {alive} |")


if __name__ == "__main__":
    main()
