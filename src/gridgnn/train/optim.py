r"""The optimizer and the learning-rate schedule of every run (full graph, minibatches, link prediction).

``--optimizer adam | adamw | sgd`` (torch's, ``--momentum`` for SGD) updates each parameter elementwise, so a rank
updating its shard of a parameter computes exactly what one process updating the whole would: training stays
equal to serial on every algorithm and ``P``. ``--lr-schedule none | cosine | step`` with ``--warmup W`` sets the
learning rate of epoch ``e`` (from 0) as a function of ``e`` and ``--epochs``, before the epoch trains:

* warm-up, ``e < W``: ``lr · (e + 1) / W``;
* then, with ``t = e − W`` of ``T = epochs − W``: ``none`` keeps ``lr``; ``cosine`` is
  ``lr · (1 + cos(π t / T)) / 2``; ``step`` is ``lr · gamma^⌊t / step⌋`` (``--lr-step``, default ``T / 3`` rounded
  up; ``--lr-gamma``).

A resumed run keeps ``--epochs`` where the schedule spans them (cosine, a step of default length: refused
otherwise, :func:`~gridgnn.train.checkpoint.resume_base`), so it sets the same rates as the uninterrupted run, and
a checkpoint holds no schedule state: only the optimizer's per-parameter state (:data:`STATE_KEYS`), sharded like
the parameters (PyTorch's ``CosineAnnealingLR`` with ``T_max = epochs − W`` gives the same cosine).
"""
from __future__ import annotations

import math

import torch

from ..ops.device_paths import device_paths

#: the optimizer's per-parameter state tensors (shaped like the parameter) that a checkpoint holds
STATE_KEYS = {"adam": ("exp_avg", "exp_avg_sq"), "adamw": ("exp_avg", "exp_avg_sq"), "sgd": ("momentum_buffer",)}


def state_keys(optimizer: str, momentum: float | None) -> tuple[str, ...]:
    """The per-parameter state of ``--optimizer`` with ``--momentum`` (plain SGD keeps none)."""
    if optimizer == "sgd" and not sgd_momentum(momentum):
        return ()
    return STATE_KEYS[optimizer]


def sgd_momentum(momentum: float | None) -> float:
    """SGD's momentum: ``--momentum``, default 0.9."""
    return 0.9 if momentum is None else float(momentum)


def memory_state(cfg) -> tuple[int, bool]:
    """What the memory guard counts of ``cfg``'s optimizer: its state tensors per parameter, and whether it keeps
    step counters (Adam's bias correction)."""
    return len(state_keys(cfg.optimizer, cfg.momentum)), cfg.optimizer in ("adam", "adamw")


def make_optimizer(cfg, params) -> torch.optim.Optimizer:
    """``cfg``'s optimizer over ``params`` at ``--lr`` (the schedule sets each epoch's rate: :func:`set_rate`).
    Adam and AdamW on a device (:func:`~gridgnn.ops.device_paths.device_paths`) are torch's fused kernels: the
    update of every parameter (of one dtype) is one launch, and the step counters, kept on the device, one more —
    where the ``foreach`` form launches one per operation of the update and reads each step counter on the host."""
    params = list(params)
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(params, lr=cfg.lr, momentum=sgd_momentum(cfg.momentum), weight_decay=cfg.weight_decay)
    kind = torch.optim.AdamW if cfg.optimizer == "adamw" else torch.optim.Adam
    return kind(params, lr=cfg.lr, weight_decay=cfg.weight_decay, fused=bool(params) and device_paths(params[0].device))


def rate(cfg, epoch: int) -> float:
    """The learning rate of epoch ``epoch`` (module docstring)."""
    lr, warm = cfg.lr, cfg.warmup
    if epoch < warm:
        return lr * (epoch + 1) / warm
    t, span = epoch - warm, max(1, cfg.epochs - warm)
    if cfg.lr_schedule == "cosine":
        return lr * 0.5 * (1.0 + math.cos(math.pi * min(t, span) / span))
    if cfg.lr_schedule == "step":
        every = cfg.lr_step or max(1, math.ceil(span / 3))
        return lr * (0.1 if cfg.lr_gamma is None else cfg.lr_gamma) ** (t // every)
    return lr


def set_rate(opt: torch.optim.Optimizer, cfg, epoch: int) -> float:
    """Set epoch ``epoch``'s learning rate on every parameter group; returns it."""
    lr = rate(cfg, epoch)
    for group in opt.param_groups:
        group["lr"] = lr
    return lr
