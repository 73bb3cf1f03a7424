"""Helpers shared by the benchmark scripts: run the trainer in this process (serial) or spawned (P > 1)."""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from gridgnn.distributed.launch import launch  # noqa: E402
from gridgnn.train.config import TrainConfig  # noqa: E402
from gridgnn.train.worker import train_worker  # noqa: E402


def every_algorithm(nproc: int, algos: str | None = None) -> list[tuple[str, int, dict]]:
    """``(algo, P, options)`` of serial and of every algorithm at ``nproc`` (1.5D with c = 2 where P is even, Plexus
    on its double permutation), or of serial and the comma-separated subset ``algos``: the rows of the accuracy
    tables."""
    c2 = dict(replication=2 if nproc % 2 == 0 else 1)
    configs = [("serial", 1, {}), ("1d", nproc, {}), ("1d-sa", nproc, {}), ("1.5d", nproc, c2), ("1.5d-sa", nproc, c2),
               ("2d", nproc, {}), ("3d", nproc, {}), ("plexus", nproc, dict(partition="double-perm"))]
    if algos:
        keep = {"serial", *algos.split(",")}
        configs = [c for c in configs if c[0] in keep]
    return configs


def run(**kw) -> dict:
    """Train with ``TrainConfig(**kw)`` (quiet) and return rank 0's summary."""
    cfg = TrainConfig(quiet=True, **kw)
    cfg.validate()
    if cfg.algo == "serial" or (cfg.sampler is not None and cfg.nproc == 1):
        return train_worker(None, cfg)
    return launch(train_worker, cfg.nproc, cfg, device=cfg.device, collect=True)[0]


def against_pyg(model, plan, x, pyg_inputs: tuple, repeats: int) -> tuple[float, float, float]:
    """``(gridgnn seconds, PyG seconds, max |difference|)``: one forward+backward of ``model`` on ``plan`` and of its
    ``to_pyg()`` stack (the same weights) called on ``pyg_inputs``, each the median of ``repeats`` runs after a
    warm-up, in this process."""
    import statistics
    import time

    import torch

    pyg = model.to_pyg()
    for p in pyg.parameters():
        p.requires_grad_(True)

    def ours():
        model.zero_grad()
        model(x, plan).sum().backward()

    def theirs():
        pyg.zero_grad()
        pyg(*pyg_inputs).sum().backward()

    def median(fn) -> float:
        fn()
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return statistics.median(times)

    with torch.no_grad():
        diff = float((model(x, plan) - pyg(*pyg_inputs)).abs().max())
    return median(ours), median(theirs), diff
