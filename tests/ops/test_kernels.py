"""The numba kernels of gridgnn.ops.kernels against the torch / NumPy references they replace, on patterns with
empty rows, isolated vertices, one huge row, unsorted duplicate-free input and non-square shapes; float64 to
rounding, float32 to a stated tolerance; the dropout hashes bit for bit."""
import gc
import json
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from gridgnn.nn import dropout as D
from gridgnn.ops import hashing
from gridgnn.ops import kernels as K
from gridgnn.ops import pattern as P

pytestmark = pytest.mark.skipif(not K.HAVE_NUMBA, reason="numba is not installed: the torch references run")

#: float32: each output sums at most a few hundred products of O(1) numbers in another order than torch
TOL = {torch.float64: dict(rtol=1e-12, atol=1e-12), torch.float32: dict(rtol=2e-5, atol=2e-5)}


def awkward_pattern(m: int, k: int, seed: int) -> P.Pattern:
    """``m × k``: random edges given in shuffled order (no duplicates), rows ``≥ m − 3`` empty, columns
    ``≥ k − 4`` never used (isolated sources), row 1 connected to every used column (one huge row)."""
    r = np.random.default_rng(seed)
    rows = r.integers(0, m - 3, 6 * m)
    cols = r.integers(0, k - 4, 6 * m)
    rows = np.concatenate([rows, np.full(k - 4, 1)])
    cols = np.concatenate([cols, np.arange(k - 4)])
    pairs = np.unique(np.stack([rows, cols], 1), axis=0)
    pairs = pairs[r.permutation(len(pairs))]  # unsorted input
    a = sp.coo_matrix((np.ones(len(pairs)), (pairs[:, 0], pairs[:, 1])), shape=(m, k))
    return P.Pattern.from_scipy(a)


def reference(monkeypatch, fn, *args, **kw):
    monkeypatch.setenv("GRIDGNN_KERNELS", "torch")
    try:
        return fn(*args, **kw)
    finally:
        monkeypatch.delenv("GRIDGNN_KERNELS")


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("heads,col_heads", [(1, None), (3, None), (12, None), (2, [(0, 0, 3), (1, 3, 4)]),
                                             (2, [(0, 0, 1), (1, 1, 3), (0, 3, 4)])])  # (head 0 in two segments)
def test_spmm_and_sddmm_equal_the_torch_references(dtype, heads, col_heads, monkeypatch):
    m, k, width = 57, 43, 12 if col_heads is None else 4
    pat = awkward_pattern(m, k, seed=heads)
    assert (np.diff(pat.crow.numpy())[-3:] == 0).all() and np.diff(pat.crow.numpy()).max() == k - 4
    r = np.random.default_rng(5)
    vals = torch.from_numpy(r.normal(size=(pat.nnz, heads))).to(dtype)
    x = torch.from_numpy(r.normal(size=(k, width))).to(dtype)
    d = torch.from_numpy(r.normal(size=(m, width))).to(dtype)
    s_dst, s_src = (torch.from_numpy(r.normal(size=(n, heads))).to(dtype) for n in (m, k))
    assert K.fused(x, vals)
    cases = [
        (P.spmm, (pat, vals, x), dict(col_heads=col_heads)),
        (P.spmm, (pat, vals, d), dict(transpose=True, col_heads=col_heads)),
        (P.sddmm_dot, (pat, d, x, heads), dict(col_heads=col_heads)),
        (P.sddmm_add, (pat, s_dst, s_src), {}),
        (P.row_reduce, (pat, vals, "sum"), {}),
        (P.row_reduce, (pat, vals, "max"), {}),
    ]
    for fn, args, kw in cases:
        got, want = fn(*args, **kw), reference(monkeypatch, fn, *args, **kw)
        assert got.dtype == want.dtype == dtype and got.shape == want.shape
        torch.testing.assert_close(got, want, **TOL[dtype], msg=lambda s: f"{fn.__name__} {kw}: {s}")


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_softmax_row_pieces_and_column_sums_equal_the_torch_references(dtype, monkeypatch):
    """The edge softmax's local passes (shifted exponentials with their row sums, the division, the backward's row
    dot products and update) and the column sums, fused over the CSR, equal the scatter/gather compositions."""
    pat = awkward_pattern(61, 47, seed=4)
    r = np.random.default_rng(6)
    e, b = (torch.from_numpy(r.normal(size=(pat.nnz, 3))).to(dtype) for _ in range(2))
    m = P.row_reduce(pat, e, "max")
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    s = torch.from_numpy(r.uniform(1, 2, size=(61, 3))).to(dtype)
    row, crow = pat.row, pat.crow
    cases = [
        (lambda: P.exp_shifted(row, m, e, crow), lambda: P.exp_shifted(row, m, e)),
        (lambda: P.divide_rows(row, e, s, crow), lambda: P.divide_rows(row, e, s)),
        (lambda: P.dot_rows(row, 61, e, b, crow), lambda: P.dot_rows(row, 61, e, b)),
        (lambda: P.softmax_grad_rows(row, e, b, s, crow), lambda: P.softmax_grad_rows(row, e, b, s)),
        (lambda: P.col_sum(pat, e), lambda: P.col_sum(pat, e)),
    ]
    for k, (fused, ref) in enumerate(cases):
        got, want = fused(), reference(monkeypatch, ref)
        for g_, w_ in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
            assert g_.dtype == dtype
            torch.testing.assert_close(g_, w_, **TOL[dtype], msg=lambda t: f"case {k}: {t}")


def test_results_do_not_depend_on_the_thread_count(monkeypatch):
    """One thread runs each kernel's serial twin, two threads the parallel kernel (every size: SERIAL_BELOW 0 here,
    or the pattern would be too small to leave the twin): the same bits, attention included (the twins of the
    kernels that allow reassociation were compiled without it and differed in the last bits)."""
    from gridgnn.ops import attend as A

    monkeypatch.setattr(K, "SERIAL_BELOW", 0)
    pat = awkward_pattern(300, 200, seed=9)
    square = awkward_pattern(300, 300, seed=10)
    r = np.random.default_rng(0)
    vals = torch.from_numpy(r.normal(size=(pat.nnz, 2)))
    x = torch.from_numpy(r.normal(size=(200, 8)))
    d = torch.from_numpy(r.normal(size=(300, 8)))
    h = torch.from_numpy(r.normal(size=(300, 8)))
    dy = torch.from_numpy(r.normal(size=(300, 8)))
    scores = {dot: (torch.from_numpy(r.normal(size=(300, w))), torch.from_numpy(r.normal(size=(300, w))))
              for dot, w in ((True, 8), (False, 2))}  # a dot product of 2 heads of 4 columns; an additive score
    kw = dict(slope=0.2, keep=None, q=1.0)
    before = torch.get_num_threads()
    outs = []
    try:
        for t in (1, 2):
            torch.set_num_threads(t)
            got = [P.spmm(pat, vals, x), P.spmm(pat, vals, d, transpose=True), P.sddmm_dot(pat, d, x, 2)]
            for dot, (a_dst, a_src) in scores.items():
                alpha, y = A.forward(square, a_dst, a_src, h, dot=dot, heads=2, **kw)
                got += [alpha, y, *A.backward(square, a_dst, a_src, h, dy, alpha, dot=dot, **kw)]
            outs.append(got)
    finally:
        torch.set_num_threads(before)
    for k, (a, b) in enumerate(zip(*outs)):
        assert torch.equal(a, b), k


def test_edge_cases_without_edges_or_columns():
    empty = P.Pattern.from_scipy(sp.csr_matrix((5, 4)))
    x = torch.ones(4, 3)
    assert torch.equal(P.spmm(empty, torch.zeros(0), x), torch.zeros(5, 3))
    assert torch.equal(P.sddmm_dot(empty, torch.ones(5, 3), x), torch.zeros(0, 1))
    assert torch.equal(P.row_reduce(empty, torch.zeros(0, 2), "max"), torch.full((5, 2), float("-inf")))
    pat = awkward_pattern(10, 9, seed=1)
    assert P.spmm(pat, torch.ones(pat.nnz), torch.ones(9, 0)).shape == (10, 0)


def test_selection_follows_device_dtype_and_switch(monkeypatch):
    assert K.fused(torch.ones(2, dtype=torch.float32), torch.arange(3))
    assert not K.fused(torch.ones(2, dtype=torch.float16))
    monkeypatch.setenv("GRIDGNN_KERNELS", "torch")
    assert not K.fused(torch.ones(2)) and not K.enabled()


@pytest.mark.parametrize("cols", [None, (3, 11), (0, 1)])
def test_dropout_masks_equal_the_numpy_hash_bit_for_bit(cols):
    r = np.random.default_rng(2)
    ids = np.concatenate([r.permutation(5000), [2**40 + 7, 0]])  # large ids wrap in uint64 the same way
    for p in (0.1, 0.5, 0.9):
        got = D.keep_mask(ids, 16, p, seed=3, epoch=4, layer=1, cols=cols)
        want = D.keep_mask_reference(ids, 16, p, seed=3, epoch=4, layer=1, cols=cols)
        assert got.dtype == np.bool_ and np.array_equal(got, want)
        assert abs(got.mean() - (1 - p)) < 0.02
    dst, src = r.integers(0, 10**6, 4000), r.integers(0, 10**6, 4000)
    for heads in (1, 8):
        got = D.edge_keep_mask(dst, src, heads, 0.3, seed=1, epoch=2, layer=0)
        assert np.array_equal(got, D.edge_keep_mask_reference(dst, src, heads, 0.3, seed=1, epoch=2, layer=0))


@pytest.mark.parametrize("chunk", [1 << 24, 37], ids=["one-chunk", "chunks-of-37"])
def test_the_device_masks_in_torch_int64_are_the_host_masks_bit_for_bit(chunk, monkeypatch):
    """What a GPU draws (torch ``int64`` holding ``uint64`` bits, logical shifts, unsigned compare; in chunks of
    rows) is the host's mask: run here on the CPU's torch, against the NumPy ``uint64`` reference."""
    from gridgnn.ops.hashing import below_tensor, mix, mix_tensor

    monkeypatch.setattr(hashing, "DEVICE_MASK_CHUNK", chunk)

    r = np.random.default_rng(5)
    z = r.integers(0, 2**64, 20000, dtype=np.uint64)  # the whole range: sign bits set in half of them
    got = mix_tensor(torch.from_numpy(z.view(np.int64))).numpy().view(np.uint64)
    assert np.array_equal(got, mix(z))
    t = np.uint64(r.integers(0, 2**64, dtype=np.uint64))
    assert np.array_equal(below_tensor(torch.from_numpy(z.view(np.int64)), t).numpy(), z < t)
    ids = np.concatenate([r.permutation(3000), [2**40 + 7, 0]])
    for epoch in (4, torch.tensor(4)):  # (a tensor: the epoch a CUDA graph's step reads, device_key)
        for p, cols in ((0.1, None), (0.5, (3, 11)), (0.9, (0, 16))):
            got = D.keep_mask_tensor(torch.from_numpy(ids), 16, p, seed=3, epoch=epoch, layer=1, cols=cols).numpy()
            assert np.array_equal(got, D.keep_mask_reference(ids, 16, p, seed=3, epoch=4, layer=1, cols=cols))
        dst, src = r.integers(0, 10**6, 4000), r.integers(0, 10**6, 4000)
        for heads in (1, 8):
            got = D.edge_keep_mask_tensor(torch.from_numpy(dst), torch.from_numpy(src), heads, 0.3, seed=1,
                                          epoch=epoch, layer=0).numpy()
            assert np.array_equal(got, D.edge_keep_mask_reference(dst, src, heads, 0.3, seed=1, epoch=4, layer=0))


def test_a_key_from_an_epoch_held_in_a_tensor_has_the_host_keys_bits():
    """``device_key`` of an epoch held in a 0-d tensor (computed in torch ``int64``, where a CUDA graph of the step
    reads it at each replay) is the host's key, node and edge, wherever the products wrap: seeds up to 2⁶³, epochs
    whose ``7919 · epoch`` passes 2⁶⁴. A host draw reads such an epoch's value."""
    for seed, epoch, layer in ((0, 0, 0), (3, 4, 1), (2**63 - 1, 2**61 + 5, 1023), (12345, 10**8, 7)):
        for edge, host in ((False, D._node_key), (True, D._edge_key)):
            got = D.device_key(seed, torch.tensor(epoch), layer, edge=edge)
            assert got.dtype == torch.int64 and got.dim() == 0
            want = int(host(seed, epoch, layer))
            assert int(got) % 2**64 == want == D.device_key(seed, epoch, layer, edge=edge) % 2**64
    x = torch.ones(40, 6, dtype=torch.float64)
    ids = np.arange(40)
    held = D.hashed_dropout(x, 0.5, ids, seed=2, epoch=torch.tensor(9), layer=1, training=True)
    assert torch.equal(held, D.hashed_dropout(x, 0.5, ids, seed=2, epoch=9, layer=1, training=True))
    assert not torch.equal(held, D.hashed_dropout(x, 0.5, ids, seed=2, epoch=8, layer=1, training=True))


@pytest.mark.parametrize("kernel", ["auto", "torch"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_dropout_forward_and_backward_equal_the_float_mask_product(dtype, kernel, monkeypatch):
    """The kept boolean mask gives the very bits of ``x * mask / (1 - p)`` and of its gradient (the one-pass
    kernel and the torch path alike)."""
    monkeypatch.setenv("GRIDGNN_KERNELS", kernel)
    ids = np.arange(300)[::-1].copy()
    x = torch.randn(300, 7, dtype=dtype, requires_grad=True)
    y = D.hashed_dropout(x, 0.4, ids, seed=1, epoch=0, layer=2, training=True)
    m = torch.from_numpy(D.keep_mask_reference(ids, 7, 0.4, seed=1, epoch=0, layer=2)).to(dtype)
    y_ref = x * m / 0.6
    g = torch.randn_like(y)
    assert torch.equal(y, y_ref)
    assert torch.equal(torch.autograd.grad(y, x, g)[0], torch.autograd.grad(y_ref, x, g)[0])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_tensors_run_the_torch_references_and_agree_with_the_cpu_kernels():
    pat = awkward_pattern(57, 43, seed=1)
    gpu = P.Pattern(pat.crow.cuda(), pat.col.cuda(), pat.shape)
    r = np.random.default_rng(3)
    vals = torch.from_numpy(r.normal(size=(pat.nnz, 2)))
    x = torch.from_numpy(r.normal(size=(43, 6)))
    d = torch.from_numpy(r.normal(size=(57, 6)))
    assert not K.fused(x.cuda())
    for fn, cpu_args, gpu_args, kw in [
        (P.spmm, (pat, vals, x), (gpu, vals.cuda(), x.cuda()), {}),
        (P.spmm, (pat, vals, d), (gpu, vals.cuda(), d.cuda()), dict(transpose=True)),
        (P.sddmm_dot, (pat, d, x, 2), (gpu, d.cuda(), x.cuda(), 2), {}),
        (P.row_reduce, (pat, vals, "max"), (gpu, vals.cuda(), "max"), {}),
    ]:
        torch.testing.assert_close(fn(*gpu_args, **kw).cpu(), fn(*cpu_args, **kw), **TOL[torch.float64])
    ids = np.arange(57)
    y = D.hashed_dropout(d.cuda(), 0.3, ids, seed=1, epoch=0, layer=1, training=True).cpu()
    ref = D.hashed_dropout(d, 0.3, ids, seed=1, epoch=0, layer=1, training=True)
    assert torch.equal(y == 0, ref == 0)  # the same keyed mask on both devices
    # kept entries x / (1 - p): CUDA's division by a scalar multiplies by its reciprocal, one rounding apart
    torch.testing.assert_close(y, ref, rtol=1e-15, atol=0)


def test_one_head_per_column_on_a_column_block_equals_the_reference(monkeypatch):
    """Per-edge vectors on a rank holding a block of the columns (SUMMA): heads of other blocks stay zero, the
    block's equal the reference (the one-head-per-column kernels only where every head is a local column)."""
    pat = awkward_pattern(31, 23, seed=7)
    r = np.random.default_rng(8)
    heads, local = 10, [(h, h, h + 1) for h in range(4)]  # this rank: columns 0..3 of 10 heads
    d, x = (torch.from_numpy(r.normal(size=(n, 4))) for n in (31, 23))
    vals = torch.from_numpy(r.normal(size=(pat.nnz, heads)))
    for fn, args in ((P.sddmm_dot, (pat, d, x, heads)), (P.spmm, (pat, vals, x))):
        got, want = fn(*args, col_heads=local), reference(monkeypatch, fn, *args, col_heads=local)
        torch.testing.assert_close(got, want, **TOL[torch.float64])


def test_device_ids_are_copied_once_per_host_array_and_forgotten_with_it():
    """The dropout's ids cross to the device once per host array (a plan's rows, every layer and epoch); a view of
    the same memory finds the same copy, another array its own, and a freed array's entry goes with it (an address
    reused by a new array never finds a stale copy)."""
    a = np.arange(10, 30, dtype=np.int64)
    first = D.device_ids(a, "cpu")
    assert D.device_ids(a, "cpu") is first and D.device_ids(a[:], "cpu") is first
    assert np.array_equal(first.numpy(), a)
    part = D.device_ids(a[5:9], "cpu")
    assert part is not first and np.array_equal(part.numpy(), a[5:9])
    assert np.array_equal(D.device_ids(a[::2], "cpu").numpy(), a[::2])
    keys = [k for k in D._DEVICE_IDS if k[0] == a.__array_interface__["data"][0]]
    assert keys
    del a
    gc.collect()
    assert not any(k in D._DEVICE_IDS for k in keys)
    for _ in range(20):  # new arrays (some at a freed address): each finds its own ids
        b = np.arange(7, 27, dtype=np.int64) * 3
        assert np.array_equal(D.device_ids(b, "cpu").numpy(), b)
        del b
    assert np.array_equal(D.device_ids([4, 5, 6], "cpu").numpy(), [4, 5, 6])
    # a narrower array: kept by itself, not by its int64 conversion (made anew at every call: a copy every time)
    a32 = np.arange(5, 15, dtype=np.int32)
    first = D.device_ids(a32, "cpu")
    assert first.dtype == torch.int64 and np.array_equal(first.numpy(), a32)
    assert D.device_ids(a32, "cpu") is first
    same_bits = a32.view(np.uint32)  # (the same memory read as another type: its own copy)
    assert D.device_ids(same_bits, "cpu") is not first


_FORKED_RANKS = r"""
import json
import os

import numpy as np


def worker(ctx):
    import numba
    import torch
    from numba.core.registry import cpu_target

    from gridgnn.nn import dropout
    from gridgnn.ops import kernels

    inherited = ["_toplevel_target_context" in vars(cpu_target), bool(kernels._JIT)]  # before any kernel call
    torch.set_num_threads(2)  # the parallel kernel, its pool started in this rank
    ids = np.arange(ctx.rank, 60000, 3)  # 20000 × 5 columns: above the serial twin's size
    kw = dict(seed=5, epoch=2, layer=1, cols=(1, 6))
    same = bool((dropout.keep_mask(ids, 7, 0.4, **kw) == dropout.keep_mask_reference(ids, 7, 0.4, **kw)).all())
    return inherited, numba.threading_layer(), same


if __name__ == "__main__":
    from gridgnn.distributed.launch import launch

    first = launch(worker, 2, device="cpu", collect=True)
    os.environ["NUMBA_THREADING_LAYER"] = "omp"  # a later launch of this process, under other numba settings
    print(json.dumps([first, launch(worker, 2, device="cpu", collect=True)]))
"""


def test_forked_ranks_inherit_the_kernels_set_up_and_read_their_own_numba_settings(tmp_path, monkeypatch):
    """The launcher's fork server sets the kernels and numba's compiler up once (``gridgnn.train.fork_preload``): a
    rank it forks finds them ready before its first kernel call, its parallel kernel's masks equal the NumPy
    reference, and it runs on the threading layer of its own environment (a second launch under
    ``NUMBA_THREADING_LAYER=omp`` gets that layer, the first the kernels' ``workqueue``). Under an ``MPLBACKEND``
    that matplotlib refuses at import: the server's preload survives it (only rank 0's plots would need it)."""
    for name in ("GRIDGNN_START_METHOD", "GRIDGNN_KERNELS", "NUMBA_THREADING_LAYER"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MPLBACKEND", "no-such-backend")
    script = tmp_path / "forked.py"
    script.write_text(_FORKED_RANKS)
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    first, second = json.loads(r.stdout.strip().splitlines()[-1])
    assert first == [[[True, True], "workqueue", True]] * 2, first
    assert second == [[[True, True], "omp", True]] * 2, second
