"""Keyed randomness: the SplitMix64 finalizer in NumPy ``uint64`` arithmetic (well-defined wrap-around).

A draw that is a hash of its key — (seed, epoch, layer, minibatch, vertex ids …) — is the same on every rank,
for every number of processes, whichever rank computes it and in whatever order: the keyed dropout masks of
:mod:`gridgnn.nn.dropout` and the samplers of :mod:`gridgnn.sampling` rest on it.
"""
from __future__ import annotations

import numpy as np
import torch

M1 = np.uint64(0xBF58476D1CE4E5B9)
M2 = np.uint64(0x94D049BB133111EB)
G = np.uint64(0x9E3779B97F4A7C15)
#: elements of one chunk of a mask drawn on a device in torch ``int64`` (:func:`mix_tensor`, no Triton): the hash's
#: temporaries (three ``int64`` alive at once, 24 bytes an element) stay within 384 MiB however large the masked
#: matrix (what the memory model books, :func:`gridgnn.planner.memory.dropout_hash_workspace`)
DEVICE_MASK_CHUNK = 1 << 24


def mix(z) -> np.ndarray:
    """SplitMix64's finalizer of ``z + G`` (elementwise, ``uint64``)."""
    z = np.asarray(z, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = z + G
        z = (z ^ (z >> np.uint64(30))) * M1
        z = (z ^ (z >> np.uint64(27))) * M2
        return z ^ (z >> np.uint64(31))


def as_int64(u) -> int:
    """A ``uint64`` value's bits as a Python int in the ``int64`` range (two's complement)."""
    u = int(u) % 2**64
    return u - 2**64 if u >= 2**63 else u


def _shift_right(z: torch.Tensor, k: int) -> torch.Tensor:
    """Logical right shift of ``uint64`` bits held in ``int64`` (the arithmetic shift, its sign copies cleared)."""
    return (z >> k) & ((1 << (64 - k)) - 1)


def mix_tensor(z: torch.Tensor) -> torch.Tensor:
    """:func:`mix` on a torch ``int64`` tensor that holds ``uint64`` bits, on its device: the same bits, since
    ``int64`` addition, multiplication and xor wrap as ``uint64`` ones do and the shifts are made logical."""
    z = z + as_int64(G)
    z = (z ^ _shift_right(z, 30)) * as_int64(M1)
    z = (z ^ _shift_right(z, 27)) * as_int64(M2)
    return z ^ _shift_right(z, 31)


def below_tensor(h: torch.Tensor, threshold) -> torch.Tensor:
    """``h < threshold`` compared as ``uint64`` (``h``: ``int64`` bits): with the sign bits flipped, the signed
    order is the unsigned one."""
    return (h ^ as_int64(2**63)) < as_int64(int(threshold) ^ 2**63)


def chain(*parts) -> np.ndarray:
    """``mix(… mix(mix(p0) + p1) … + pk)``: one key from several (arrays broadcast, Python ints taken mod 2⁶⁴)."""
    h = mix(np.asarray(parts[0] % 2**64 if isinstance(parts[0], int) else parts[0], dtype=np.uint64))
    for p in parts[1:]:
        p = np.asarray(p % 2**64 if isinstance(p, int) else p, dtype=np.uint64)
        with np.errstate(over="ignore"):
            h = mix(h + p)
    return h


def open_uniform(h: np.ndarray) -> np.ndarray:
    """``float64`` uniforms in the open interval (0, 1) from the top 53 bits of each hash."""
    return ((np.asarray(h, dtype=np.uint64) >> np.uint64(11)).astype(np.float64) + 0.5) * 2.0**-53
