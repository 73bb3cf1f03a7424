"""What one optimizer update dispatches: the trainer's Adam and AdamW (``gridgnn.train.optim.make_optimizer``) on
the host (torch's loop over the parameters), on a device's paths (torch's fused kernels; here the host takes those
paths, ``GRIDGNN_DEVICE_PATHS=host``) and torch's ``foreach`` form, the default on a GPU before — over the
parameters of the benchmark's models (``bench_local.py``: GCN 128 → 128 → 128 → 8, GraphSAGE 128 → 128 → 8).
Counted by a dispatch mode: the operations a GPU would launch (``_local_scalar_dense``, a step counter read on the
host, is counted apart: on a GPU the ``foreach`` form keeps the counters on the host).

Usage: python benchmarks/optimizer_ops.py
"""
from __future__ import annotations

import collections
import os
import sys

import torch
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

from gridgnn.ops import device_paths  # noqa: E402
from gridgnn.train.config import TrainConfig  # noqa: E402
from gridgnn.train.optim import make_optimizer  # noqa: E402

READS = ("_local_scalar_dense",)
NOT_LAUNCHED = ("profiler._record_function_enter_new", "profiler._record_function_exit", "lift_fresh", "detach")


class Dispatched(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[str(func.overloadpacket).removeprefix("aten.")] += 1
        return func(*args, **(kwargs or {}))


def shapes(dims: list[int], sage: bool) -> list[tuple[int, ...]]:
    out = []
    for a, b in zip(dims[:-1], dims[1:]):
        out += [(a, b), (b,)] + ([(a, b)] if sage else [])  # weight, bias (GraphSAGE: and its root weight)
    return out


def counted(optimizer: str, params_shapes, form: str) -> collections.Counter:
    os.environ[device_paths.ENV] = device_paths.HOST if form == "fused" else ""
    params = [torch.nn.Parameter(torch.randn(s)) for s in params_shapes]
    cfg = TrainConfig(optimizer=optimizer, lr=0.01, weight_decay=5e-4)
    if form == "foreach":
        kind = torch.optim.AdamW if optimizer == "adamw" else torch.optim.Adam
        opt = kind(params, lr=cfg.lr, weight_decay=cfg.weight_decay, foreach=True)
    else:
        opt = make_optimizer(cfg, params)
    for p in params:
        p.grad = torch.randn_like(p)
    opt.step()  # (the state made)
    with Dispatched() as d:
        opt.step()
    return d.ops


def main() -> None:
    models = {"gcn": shapes([128, 128, 128, 8], False), "sage": shapes([128, 128, 8], True)}
    print("| model | parameters | form | operations launched (Adam / AdamW) | step counters read on the host |")
    print("|---|---:|---|---:|---:|")
    for model, params_shapes in models.items():
        for form in ("host", "foreach", "fused"):
            launched, reads = [], []
            for optimizer in ("adam", "adamw"):
                ops = counted(optimizer, params_shapes, form)
                launched.append(sum(v for k, v in ops.items() if k not in READS + NOT_LAUNCHED))
                reads.append(sum(ops[k] for k in READS))
            print(f"| {model} | {len(params_shapes)} | {form} | {launched[0]} / {launched[1]} | "
                  f"{reads[0]} / {reads[1]} |")


if __name__ == "__main__":
    main()
