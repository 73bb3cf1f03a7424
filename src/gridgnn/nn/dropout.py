r"""Dropout whose mask depends only on (seed, epoch, layer, global node id, feature): the same on every
rank, for every P and every algorithm, so distributed training reproduces serial training.

The keep decision is a SplitMix64 hash of the key and of ``node_id · f + feature`` (``f`` = full width of
the layer input, ``feature`` = global column id, so column-sharded layouts draw the same mask), compared with
``(1 − p) · 2⁶⁴``. On the host it is computed in ``uint64`` (well-defined wrap-around): in one parallel numba pass
(:func:`gridgnn.ops.kernels.keyed_mask`, 1 byte per element) when numba is present, else in NumPy
(:func:`keep_mask_reference`, the same bits, three ``uint64`` temporaries per element). On a GPU it is computed
there: by one Triton kernel where Triton is present (:mod:`gridgnn.ops.triton_kernels`), else in torch ``int64``
arithmetic holding the same bits (:func:`gridgnn.ops.hashing.mix_tensor`, in chunks of rows): only the ids cross
to the device, not the mask. There the epoch may be a device tensor (a 0-d integer, read by every draw:
:func:`device_key`), so that a CUDA graph of the step draws each replay's masks.
Autograd keeps no mask where a kernel draws it (numba, Triton): the backward draws it again from its key
(:func:`redraws`, :func:`keyed`); elsewhere it keeps the boolean mask (1 byte per element), not a mask in the
training dtype. What an operation saves of the dropped tensor is kept as the input and the mask (or its key) and
recomputed in the backward (:func:`gridgnn.ops.masked.dropped`).
"""
from __future__ import annotations

import weakref

import numpy as np
import torch

from ..ops import kernels, triton_kernels
from ..ops.device_paths import device_paths
from ..ops import hashing
from ..ops.hashing import G, as_int64, below_tensor, mix, mix_tensor
from ..ops.masked import dropped, redraws

def _threshold(p: float) -> np.uint64:
    return np.uint64(min(int((1.0 - p) * 2.0**64), 2**64 - 1))


#: what an edge key's input is xored with before it is mixed (the node keys take it as it is)
EDGE_TWEAK = 0xA5A5_5A5A_C3C3_3C3C


def _key_input(seed: int, layer: int, salt: int) -> int:
    """A key's input less its epoch's term (``epoch · 7919``), mod 2⁶⁴: salt 1 for nodes, 2 for edges."""
    return (seed * 1_000_003 + layer * 104_729 + salt) % 2**64


def _node_key(seed: int, epoch: int, layer: int) -> np.uint64:
    return mix(np.array([(_key_input(seed, layer, 1) + epoch * 7919) % 2**64], dtype=np.uint64))[0]


def _edge_key(seed: int, epoch: int, layer: int) -> np.uint64:
    return mix(np.array([(_key_input(seed, layer, 2) + epoch * 7919) % 2**64], dtype=np.uint64)
               ^ np.uint64(EDGE_TWEAK))[0]


def device_key(seed: int, epoch, layer: int, *, edge: bool = False):
    """The key of a mask drawn on a device, as its draws take it: :func:`_node_key`'s (``edge``:
    :func:`_edge_key`'s) bits as a Python int in the ``int64`` range, or, where ``epoch`` is a device tensor (a
    0-d integer: what a CUDA graph of the step reads at every replay, :class:`gridgnn.train.graphed.GraphedStep`),
    a 0-d ``int64`` tensor on its device holding the same bits, computed there (``int64`` wraps as ``uint64``)."""
    if not isinstance(epoch, torch.Tensor):
        return as_int64((_edge_key if edge else _node_key)(seed, epoch, layer))
    z = epoch.to(torch.int64) * 7919 + as_int64(_key_input(seed, layer, 2 if edge else 1))
    return mix_tensor(z ^ as_int64(EDGE_TWEAK) if edge else z)


def host_epoch(epoch) -> int:
    """An epoch as the host's draws take it: a device tensor's value read (the host paths draw on the host)."""
    return int(epoch) if isinstance(epoch, torch.Tensor) else epoch


def keep_mask(node_ids: np.ndarray, features: int, p: float, *, seed: int, epoch: int, layer: int,
              cols: tuple[int, int] | None = None) -> np.ndarray:
    """``bool[len(node_ids), c1 - c0]``: True where the entry is kept; ``cols = (c0, c1)`` selects global
    feature columns (default: all ``features``)."""
    if not kernels.enabled():
        return keep_mask_reference(node_ids, features, p, seed=seed, epoch=epoch, layer=layer, cols=cols)
    c0, c1 = cols if cols is not None else (0, features)
    return kernels.keyed_mask(np.asarray(node_ids).reshape(-1), features, c0, c1, _node_key(seed, epoch, layer),
                              _threshold(p))



def _by_row_chunks(rows: int, width: int, device, draw) -> torch.Tensor:
    """``bool[rows, width]`` drawn ``draw(r0, r1)`` rows at a time (:data:`~gridgnn.ops.hashing.DEVICE_MASK_CHUNK`
    elements)."""
    out = torch.empty((rows, width), dtype=torch.bool, device=device)
    step = max(1, hashing.DEVICE_MASK_CHUNK // max(1, width))
    for r0 in range(0, rows, step):
        r1 = min(rows, r0 + step)
        out[r0:r1] = draw(r0, r1)
    return out


def keep_mask_tensor(node_ids: torch.Tensor, features: int, p: float, *, seed: int, epoch: int | torch.Tensor,
                     layer: int, cols: tuple[int, int] | None = None) -> torch.Tensor:
    """:func:`keep_mask` on ``node_ids``' device (an ``int64`` tensor): the same bits, in torch ``int64``, drawn in
    chunks of rows."""
    c0, c1 = cols if cols is not None else (0, features)
    key = device_key(seed, epoch, layer)
    if triton_kernels.usable(node_ids.device):  # one fused pass, no temporaries
        mask = triton_kernels.node_keep_mask(node_ids, features, c0, c1, key, int(_threshold(p)))
        if mask is not None:
            return mask
    node_ids = node_ids.reshape(-1, 1)
    col = torch.arange(c0, c1, dtype=torch.int64, device=node_ids.device)
    threshold = _threshold(p)
    return _by_row_chunks(node_ids.shape[0], c1 - c0, node_ids.device,
                          lambda r0, r1: below_tensor(mix_tensor((node_ids[r0:r1] * features + col) ^ key), threshold))


def keep_mask_reference(node_ids: np.ndarray, features: int, p: float, *, seed: int, epoch: int, layer: int,
                        cols: tuple[int, int] | None = None) -> np.ndarray:
    """:func:`keep_mask` in NumPy ``uint64`` arithmetic."""
    c0, c1 = cols if cols is not None else (0, features)
    key = _node_key(seed, epoch, layer)
    ids = np.asarray(node_ids, dtype=np.uint64).reshape(-1, 1) * np.uint64(features) \
        + np.arange(c0, c1, dtype=np.uint64).reshape(1, -1)
    with np.errstate(over="ignore"):
        h = mix(ids ^ key)
    return h < _threshold(p)


#: host id arrays' device copies: (address, length, stride, device) → (a weak reference to the array that owns the
#: memory, the copy); an entry is dropped when that array is freed, so an address reused by another array never
#: finds a stale copy
_DEVICE_IDS: dict = {}


def device_ids(node_ids, device) -> torch.Tensor:
    """``node_ids`` (a host array of integer ids) on ``device`` as ``int64``, copied once while the host array lives:
    a plan hands the same rows to every layer's dropout every epoch (its id arrays are never written once built),
    and a copy from pageable host memory each time would wait for the device each time. (Kept by the array given,
    not by its ``int64`` conversion, which a narrower array would make anew at every call.)"""
    ids = np.asarray(node_ids)
    owner = ids
    while isinstance(owner.base, np.ndarray):
        owner = owner.base
    if ids.ndim != 1 or owner.base is not None:  # memory not owned by an ndarray (a buffer, a mapped file): copy
        return torch.from_numpy(np.ascontiguousarray(ids, dtype=np.int64)).to(device)
    key = (ids.__array_interface__["data"][0], ids.size, ids.strides, ids.dtype.str, str(device))
    hit = _DEVICE_IDS.get(key)
    if hit is not None and hit[0]() is owner:
        return hit[1]
    # (never a view that keeps ids alive)
    copy = torch.from_numpy(np.ascontiguousarray(ids, dtype=np.int64)).to(device, copy=True)
    _DEVICE_IDS[key] = (weakref.ref(owner, lambda _, key=key: _DEVICE_IDS.pop(key, None)), copy)
    return copy


def hashed_dropout(x: torch.Tensor, p: float, node_ids: np.ndarray, *, seed: int, epoch: int | torch.Tensor, layer: int,
                   training: bool, features: int | None = None, cols: tuple[int, int] | None = None) -> torch.Tensor:
    r"""Inverted dropout: kept entries scaled by :math:`1/(1-p)`.

    Args:
        x: ``n_local × (c1 − c0)`` block: rows of the nodes ``node_ids`` (global, original ids), global columns
            ``cols = (c0, c1)`` of a ``features``-wide matrix (defaults: all columns of ``x``).
        p: drop probability in ``[0, 1)``.
    """
    if not training or p <= 0.0:
        return x
    features = x.shape[1] if features is None else features
    if device_paths(x.device):  # drawn on the device: the ids cross (once per array), not the mask
        ids = device_ids(node_ids, x.device)

        def draw():
            return keep_mask_tensor(ids, features, p, seed=seed, epoch=epoch, layer=layer, cols=cols)
    else:
        epoch = host_epoch(epoch)

        def draw():
            return torch.from_numpy(keep_mask(node_ids, features, p, seed=seed, epoch=epoch, layer=layer, cols=cols))
    mask, redraw = keyed(draw, x.device, "node_mask")
    return dropped(x, mask, 1.0 - p, redraw)


def keyed(draw, device, kernel: str = "node_mask") -> tuple:
    """``(mask, redraw)``: the mask ``draw()`` gives, and ``draw`` itself where the backward draws the mask again
    (:func:`redraws`; else ``None``: the mask is kept) — what :func:`gridgnn.ops.masked.dropped` and the fused
    attention take. ``draw`` gives the same bits at every call (it holds the key it was made with)."""
    mask = draw()
    return mask, (draw if redraws(device, kernel) else None)


def edge_keep_mask(dst_ids: np.ndarray, src_ids: np.ndarray, heads: int, p: float, *, seed: int, epoch: int,
                   layer: int) -> np.ndarray:
    """``bool[len(dst_ids), heads]``: True where the attention coefficient of edge ``src → dst`` (global,
    original ids) and head ``h`` is kept; independent of the node-feature masks (another key)."""
    if kernels.enabled():
        return kernels.edge_mask(np.asarray(dst_ids).reshape(-1), np.asarray(src_ids).reshape(-1), heads,
                                 _edge_key(seed, epoch, layer), _threshold(p))
    return edge_keep_mask_reference(dst_ids, src_ids, heads, p, seed=seed, epoch=epoch, layer=layer)


def edge_keep_mask_tensor(dst_ids: torch.Tensor, src_ids: torch.Tensor, heads: int, p: float, *, seed: int,
                          epoch: int | torch.Tensor, layer: int) -> torch.Tensor:
    """:func:`edge_keep_mask` on the ids' device (``int64`` tensors): the same bits, in torch ``int64``, drawn in
    chunks of edges."""
    key = device_key(seed, epoch, layer, edge=True)
    if triton_kernels.usable(dst_ids.device):
        mask = triton_kernels.edge_keep_mask(dst_ids, src_ids, heads, key, int(_threshold(p)))
        if mask is not None:
            return mask
    dst, src = dst_ids.reshape(-1, 1), src_ids.reshape(-1, 1)
    threshold = _threshold(p)
    head = torch.arange(1, heads + 1, dtype=torch.int64, device=dst.device) * as_int64(G)

    def draw(r0, r1):
        edge = mix_tensor(mix_tensor(dst[r0:r1] ^ key) + src[r0:r1])
        return below_tensor(mix_tensor(edge ^ head), threshold)

    return _by_row_chunks(dst.shape[0], heads, dst.device, draw)


def edge_keep_mask_reference(dst_ids: np.ndarray, src_ids: np.ndarray, heads: int, p: float, *, seed: int,
                             epoch: int, layer: int) -> np.ndarray:
    """:func:`edge_keep_mask` in NumPy ``uint64`` arithmetic."""
    key = _edge_key(seed, epoch, layer)
    dst = np.asarray(dst_ids, dtype=np.uint64).reshape(-1, 1)
    src = np.asarray(src_ids, dtype=np.uint64).reshape(-1, 1)
    with np.errstate(over="ignore"):
        edge = mix(mix(dst ^ key) + src)
        h = mix(edge ^ (np.arange(1, heads + 1, dtype=np.uint64).reshape(1, -1) * G))
    return h < _threshold(p)


def hashed_edge_dropout(alpha: torch.Tensor, p: float, dst_ids: np.ndarray, src_ids: np.ndarray, *, seed: int,
                        epoch: int | torch.Tensor, layer: int, training: bool) -> torch.Tensor:
    r"""Inverted dropout on an edge tensor ``alpha`` (``nnz × K``, edges ``src_ids[e] → dst_ids[e]``)."""
    if not training or p <= 0.0:
        return alpha
    if device_paths(alpha.device):  # (the ids' device copies made once while the host arrays live: device_ids)
        dst_ids, src_ids = device_ids(dst_ids, alpha.device), device_ids(src_ids, alpha.device)
    draw = edge_drawer(dst_ids, src_ids, alpha.shape[1], p, seed=seed, epoch=epoch, layer=layer)
    mask, redraw = keyed(draw, alpha.device, "edge_mask")
    return dropped(alpha, mask, 1.0 - p, redraw)


def edge_drawer(dst_ids, src_ids, heads: int, p: float, *, seed: int, epoch: int | torch.Tensor, layer: int):
    """What draws the attention-dropout mask ``bool[len(dst_ids), heads]`` of the edges ``src → dst``, the same bits
    at every call (for :func:`keyed`): on the ids' device where they are device tensors (:func:`edge_keep_mask_tensor`),
    else on the host (:func:`edge_keep_mask`)."""
    if isinstance(dst_ids, torch.Tensor) and device_paths(dst_ids.device):
        return lambda: edge_keep_mask_tensor(dst_ids, src_ids, heads, p, seed=seed, epoch=epoch, layer=layer)
    epoch = host_epoch(epoch)
    return lambda: torch.from_numpy(edge_keep_mask(dst_ids, src_ids, heads, p, seed=seed, epoch=epoch, layer=layer))
