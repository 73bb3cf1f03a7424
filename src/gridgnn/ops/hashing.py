"""Keyed randomness: the SplitMix64 finalizer in NumPy ``uint64`` arithmetic (well-defined wrap-around).

A draw that is a hash of its key — (seed, epoch, layer, minibatch, vertex ids …) — is the same on every rank,
for every number of processes, whichever rank computes it and in whatever order: the keyed dropout masks of
:mod:`gridgnn.nn.dropout` and the samplers of :mod:`gridgnn.sampling` rest on it.
"""
from __future__ import annotations

import numpy as np

M1 = np.uint64(0xBF58476D1CE4E5B9)
M2 = np.uint64(0x94D049BB133111EB)
G = np.uint64(0x9E3779B97F4A7C15)


def mix(z) -> np.ndarray:
    """SplitMix64's finalizer of ``z + G`` (elementwise, ``uint64``)."""
    z = np.asarray(z, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = z + G
        z = (z ^ (z >> np.uint64(30))) * M1
        z = (z ^ (z >> np.uint64(27))) * M2
        return z ^ (z >> np.uint64(31))


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
