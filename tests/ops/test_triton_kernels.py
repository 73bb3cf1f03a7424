"""The Triton kernels (:mod:`gridgnn.ops.triton_kernels`) against their NumPy ``uint64`` references, bit for bit:
here under Triton's interpreter (``TRITON_INTERPRET=1``: the kernels' arithmetic runs in NumPy on host tensors, so
this checks their logic and bits — the wrap-around, the logical shifts, the unsigned compare, the index
arithmetic of rows, columns and heads — but neither their compilation for a GPU nor their speed), on a GPU under
the ``gpu`` marker. Skipped where Triton is not installed."""
import importlib
import sys

import numpy as np
import pytest
import torch

from gridgnn.nn import dropout as D
from gridgnn.ops import triton_kernels as TK

pytestmark = pytest.mark.skipif(not TK.HAVE_TRITON, reason="Triton is not installed")


@pytest.fixture
def interpreted(monkeypatch):
    """The kernels decorated under Triton's interpreter (and decorated afresh for whoever imports them next)."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    sys.modules.pop("gridgnn.ops._triton_kernels", None)
    yield importlib.import_module("gridgnn.ops._triton_kernels")
    sys.modules.pop("gridgnn.ops._triton_kernels", None)


def _ids(r):
    # ids past 2^32 and 2^40 (the uint64 products wrap), a repeated id, zero
    return np.concatenate([r.permutation(700), [2**40 + 7, 2**33 + 1, 0, 5, 5]]).astype(np.int64)


def test_node_masks_equal_the_reference_bit_for_bit(interpreted):
    r = np.random.default_rng(3)
    ids = _ids(r)
    for p in (0.1, 0.5, 0.9):
        for features, cols in ((16, None), (16, (3, 11)), (1, None), (9, (8, 9))):
            c0, c1 = cols if cols is not None else (0, features)
            for seed, epoch, layer in ((3, 4, 1), (0, 0, 0), (2**40, 7, 2)):
                want = D.keep_mask_reference(ids, features, p, seed=seed, epoch=epoch, layer=layer, cols=cols)
                got = TK.node_keep_mask(torch.from_numpy(ids), features, c0, c1, int(D._node_key(seed, epoch, layer)),
                                        int(D._threshold(p)))
                assert got.dtype == torch.bool and got.shape == want.shape
                assert np.array_equal(got.numpy(), want), (p, features, cols, seed)
    empty = TK.node_keep_mask(torch.zeros(0, dtype=torch.int64), 4, 0, 4, 1, 2**63)
    assert empty.shape == (0, 4)


def test_edge_masks_equal_the_reference_bit_for_bit(interpreted):
    r = np.random.default_rng(4)
    dst = np.concatenate([r.integers(0, 10**6, 600), [2**41 + 3, 0]]).astype(np.int64)
    src = np.concatenate([r.integers(0, 10**6, 600), [0, 2**35]]).astype(np.int64)
    for heads in (1, 3, 8):
        for p in (0.3, 0.6):
            want = D.edge_keep_mask_reference(dst, src, heads, p, seed=1, epoch=2, layer=0)
            got = TK.edge_keep_mask(torch.from_numpy(dst), torch.from_numpy(src), heads, int(D._edge_key(1, 2, 0)),
                                    int(D._threshold(p)))
            assert got.shape == want.shape and np.array_equal(got.numpy(), want), (heads, p)
    assert TK.edge_keep_mask(torch.zeros(0, dtype=torch.int64), torch.zeros(0, dtype=torch.int64), 2, 5,
                             2**62).shape == (0, 2)


def test_the_kernels_serve_cuda_tensors_only_and_yield_to_the_references_when_asked(monkeypatch):
    assert not TK.usable(torch.device("cpu"))
    assert TK.usable(torch.device("cuda", 0))
    monkeypatch.setenv("GRIDGNN_KERNELS", "torch")
    assert not TK.usable(torch.device("cuda", 0))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_a_gpu_the_dropout_masks_come_from_the_kernels_with_the_host_bits():
    r = np.random.default_rng(5)
    ids = _ids(r)
    calls = []
    real = TK.node_keep_mask
    TK.node_keep_mask = lambda *a, **k: (calls.append(1), real(*a, **k))[1]
    try:
        got = D.keep_mask_tensor(torch.from_numpy(ids).cuda(), 16, 0.4, seed=3, epoch=4, layer=1, cols=(2, 13))
    finally:
        TK.node_keep_mask = real
    assert calls and np.array_equal(got.cpu().numpy(),
                                    D.keep_mask_reference(ids, 16, 0.4, seed=3, epoch=4, layer=1, cols=(2, 13)))
    dst, src = r.integers(0, 10**6, 5000), r.integers(0, 10**6, 5000)
    got = D.edge_keep_mask_tensor(torch.from_numpy(dst).cuda(), torch.from_numpy(src).cuda(), 8, 0.3, seed=1,
                                  epoch=2, layer=0)
    assert np.array_equal(got.cpu().numpy(), D.edge_keep_mask_reference(dst, src, 8, 0.3, seed=1, epoch=2, layer=0))
