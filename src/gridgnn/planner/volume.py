r"""Exact communication volume of Plexus' fused GCN layer, computed from the grid shape, the widths and the
blocks alone (no processes needed). Same accounting convention as ``gridgnn.distributed.comm``; the tests compare it
with the measured bytes of every rank. The block-row family and SUMMA (2D/3D) run on distributed primitives:
their bytes are the sum of the primitives' bytes, :mod:`gridgnn.planner.primitives`.
"""
from __future__ import annotations

import numpy as np

from ..distributed.grid import coords_of


# ---------------------------------------------------------------------------------------------------------
# 2D / 3D (CAGNET SUMMA, Split-3D) and Plexus: per-rank bytes from the grid shape, the widths and the blocks.

def _ring(g: int, m: float) -> float:
    """Ring all-reduce bytes each way for an ``m``-byte buffer over ``g`` members."""
    return 0.0 if g == 1 else 2.0 * (g - 1) / g * m


def _add(total: dict, key: str, world: int, r: int, sent: float, recv: float) -> None:
    if key not in total:
        total[key] = (np.zeros(world), np.zeros(world))
    total[key][0][r] += sent
    total[key][1][r] += recv


def _ce_bytes(total, world, r, g, m_rows, elem_bytes):
    """Sharded cross-entropy over a ``g``-member class axis: all-reduce(max) of ``m`` and (sum) of ``2m``."""
    for rows in (m_rows, 2 * m_rows):
        v = _ring(g, rows * elem_bytes)
        if g > 1:
            _add(total, "fwd.allreduce", world, r, v, v)


def plexus_step_bytes(n: int, shape: tuple[int, int, int], dims: list[int], elem_bytes: int, train_rows,
                      block_rows: int = 0) -> dict:
    r"""Per-rank bytes of one GCN training step of Plexus (Alg. 1 with the §3.2 rotation), grid
    ``(Gx, Gy, Gz)``; layer roles ``(a, b, c)`` rotate ``(x,y,z) → (z,x,y) → (y,z,x)``.

    Forward per layer: all-reduce of ``n_c·|C^b(f_in)|·w`` over ``G_a`` (``H``) and of ``n_c·|C^a(f_out)|·w``
    over ``G_b`` (``Q``); all-gather over ``G_c`` of the weight block (rows split in ``G_c`` parts, padded to the
    largest: ``(G_c−1)·max_part·|C^a|·w`` each way), layer 0 also of the input block. Backward:
    reduce-scatter of the weight block over ``G_c`` (actual part sizes), all-reduce of the bias block
    (``|C^a|·w``) over ``G_c``, and for ``l > 0`` all-reduce of ``n_c·|C^b(f_in)|·w`` over ``G_a`` (``∂H``) and of
    ``|V^a|·|C^b(f_in)|·w`` over ``G_c`` (``∂F``). Ring all-reduce volume ``2(g−1)/g`` each way. Blocked
    aggregation splits the ``H`` all-reduce into row blocks of the same total size. No trainer gradient
    all-reduce: the layers reduce their own parameter shards.
    """
    from ..partition.layout import plexus_roles as roles
    from ..partition import even_bounds

    names = ("x", "y", "z")
    g = dict(zip(names, shape))
    world = shape[0] * shape[1] * shape[2]
    vb = {ax: even_bounds(n, g[ax]) for ax in names}
    total: dict = {}
    for r in range(world):
        me = dict(zip(names, coords_of(r, shape)))
        for layer, (fi, fo) in enumerate(zip(dims[:-1], dims[1:])):
            a, b, c = roles(layer)
            n_c = int(vb[c][me[c] + 1] - vb[c][me[c]])
            n_a = int(vb[a][me[a] + 1] - vb[a][me[a]])
            cb = even_bounds(fi, g[b])
            w_in = int(cb[me[b] + 1] - cb[me[b]])
            ca = even_bounds(fo, g[a])
            w_out = int(ca[me[a] + 1] - ca[me[a]])
            for key, grp, m in (("fwd", g[a], n_c * w_in), ("fwd", g[b], n_c * w_out)):
                v = _ring(grp, m * elem_bytes)
                if grp > 1:
                    _add(total, f"{key}.allreduce", world, r, v, v)
            wparts = np.diff(even_bounds(w_in, g[c]))
            if g[c] > 1:
                v = (g[c] - 1) * int(wparts.max()) * w_out * elem_bytes
                _add(total, "fwd.allgather", world, r, v, v)
                mine = int(wparts[me[c]])
                _add(total, "bwd.reducescatter", world, r, (w_in - mine) * w_out * elem_bytes,
                     (g[c] - 1) * mine * w_out * elem_bytes)
                v = _ring(g[c], w_out * elem_bytes)
                _add(total, "bwd.allreduce", world, r, v, v)
                if layer == 0:
                    fparts = np.diff(even_bounds(n_a, g[c]))
                    v = (g[c] - 1) * int(fparts.max()) * w_in * elem_bytes
                    _add(total, "fwd.allgather", world, r, v, v)
            if layer > 0:
                for grp, m in ((g[a], n_c * w_in), (g[c], n_a * w_in)):
                    v = _ring(grp, m * elem_bytes)
                    if grp > 1:
                        _add(total, "bwd.allreduce", world, r, v, v)
        _ce_bytes(total, world, r, g[roles(len(dims) - 2)[0]], train_rows(r), elem_bytes)
    return total


def _grad_bytes(total: dict, world: int, dims: list[int], elem_bytes: int) -> None:
    """World all-reduce of every (full-size) weight and bias gradient, one flat buffer."""
    nparams = sum(fi * fo + fo for fi, fo in zip(dims[:-1], dims[1:]))
    v = _ring(world, nparams * elem_bytes)
    if world > 1:
        total["grad.allreduce"] = (np.full(world, v), np.full(world, v))
