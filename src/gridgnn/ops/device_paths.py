"""Which code paths a tensor's device takes: the one place that tells the host's paths from a device's.

A GPU runs other code than the host for the same product: no numba kernels (Triton's where present, else the torch
compositions), the rows of every edge kept with a pattern, sums over repeated indices as segmented sums or sorted
``index_put_`` (never atomics), masks drawn from device copies of the ids, what is derived from a pattern made once
and kept. Every such choice in the library asks :func:`device_paths`.

``GRIDGNN_DEVICE_PATHS=host`` makes the host take the device's paths too (a test mode, never the default; read at
every call, so a test sets it for its own process and for the ranks it launches): what a GPU run would compute,
hold and read back, run where there is no GPU — the equality with the host's serial reference, the read-back audit
and the memory model's device terms are checked on it here (Triton's kernels themselves are not: they need CUDA, or
Triton's interpreter, ``tests/ops/test_triton_kernels.py``)."""
from __future__ import annotations

import os

import torch

from ..errors import GridGnnError

#: the environment variable, and the value of it, that make the host take the device's code paths
ENV, HOST = "GRIDGNN_DEVICE_PATHS", "host"


def host_takes_device_paths() -> bool:
    """The test mode is on in this process (``GRIDGNN_DEVICE_PATHS=host``; unset or empty: off; any other value is
    an error, not a mode quietly off — raised by a training run's checks before any rank starts,
    :meth:`gridgnn.TrainConfig.validate`)."""
    value = os.environ.get(ENV, "")
    if value not in ("", HOST):
        raise GridGnnError(f"{ENV}={value!r}: the only value is {HOST!r} (the host takes a device's code paths, "
                           "a test mode), or leave it unset")
    return value == HOST


def device_paths(device) -> bool:
    """Whether tensors on ``device`` take a device's code paths: every device but the host, and the host as well
    under :func:`host_takes_device_paths`."""
    return torch.device(device).type != "cpu" or host_takes_device_paths()
