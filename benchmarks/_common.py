"""Helpers shared by the benchmark scripts: run the trainer in this process (serial) or spawned (P > 1)."""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from gridgnn.distributed.launch import launch  # noqa: E402
from gridgnn.train.config import TrainConfig  # noqa: E402
from gridgnn.train.trainer import train_worker  # noqa: E402


def run(**kw) -> dict:
    """Train with ``TrainConfig(**kw)`` (quiet) and return rank 0's summary."""
    cfg = TrainConfig(quiet=True, **kw)
    cfg.validate()
    if cfg.sampler is not None:
        from gridgnn.train.minibatch import minibatch_worker

        if cfg.nproc == 1:
            return minibatch_worker(None, cfg)
        return [s for s in launch(minibatch_worker, cfg.nproc, cfg, device=cfg.device, collect=True) if s][0]
    worker = train_worker
    if cfg.task == "link":
        from gridgnn.train.link import link_worker as worker
    if cfg.algo == "serial":
        return worker(None, cfg)
    return launch(worker, cfg.nproc, cfg, device=cfg.device, collect=True)[0]
