"""The Triton kernels (:mod:`gridgnn.ops.triton_kernels`) against their NumPy ``uint64`` and torch references: here
under Triton's interpreter (``TRITON_INTERPRET=1``: the kernels' arithmetic runs in NumPy on host tensors, so this
checks their logic and bits — the wrap-around, the logical shifts, the unsigned compare, the index arithmetic of
rows, columns and heads — but neither their compilation for a GPU nor their speed), on a GPU under the ``gpu``
marker. The interpreter must be chosen before Triton is first imported (Triton's own ``tl.sum`` is a kernel of its
own), so the interpreted checks run in a fresh Python process. Skipped where Triton is not installed."""
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from gridgnn.nn import dropout as D
from gridgnn.ops import attend as A
from gridgnn.ops import triton_kernels as TK
from gridgnn.ops.pattern import Pattern, head_columns, rows_of, sddmm_dot, sddmm_dot_reference

needs_triton = pytest.mark.skipif(not TK.HAVE_TRITON, reason="Triton is not installed")


def on_a_gpu(test):
    """A test of the compiled kernels: the ``gpu`` marker, CUDA and Triton present, the kernels strict."""
    for mark in (pytest.mark.usefixtures("strict"), needs_triton,
                 pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"), pytest.mark.gpu):
        test = mark(test)
    return test


@pytest.fixture
def strict(monkeypatch):
    """``GRIDGNN_KERNELS=triton``: a kernel that cannot run here is an error, not a quiet fallback."""
    monkeypatch.setenv("GRIDGNN_KERNELS", "triton")
    monkeypatch.setattr(TK, "off", {})

ROOT = Path(__file__).resolve().parents[2]


@needs_triton
def test_the_kernels_under_the_interpreter_equal_their_references():
    """Every ``check_*`` below, in one fresh process with ``TRITON_INTERPRET=1`` and the kernels strict
    (``GRIDGNN_KERNELS=triton``: an interpreter error is the failure, not a fallback)."""
    env = dict(os.environ, TRITON_INTERPRET="1", GRIDGNN_KERNELS="triton")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT)] + ([env["PYTHONPATH"]]
                                                                          if env.get("PYTHONPATH") else []))
    code = ("import tests.ops.test_triton_kernels as t\n"
            "for name in sorted(n for n in dir(t) if n.startswith('check_')):\n"
            "    getattr(t, name)()\n"
            "    print('passed', name)\n")
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr[-3000:]
    assert run.stdout.count("passed") == 5, run.stdout


def _ids(r):
    # ids past 2^32 and 2^40 (the uint64 products wrap), a repeated id, zero
    return np.concatenate([r.permutation(700), [2**40 + 7, 2**33 + 1, 0, 5, 5]]).astype(np.int64)


def check_node_masks_equal_the_reference_bit_for_bit():
    r = np.random.default_rng(3)
    ids = _ids(r)
    for p in (0.1, 0.5, 0.9):
        for features, cols in ((16, None), (16, (3, 11)), (1, None), (9, (8, 9))):
            c0, c1 = cols if cols is not None else (0, features)
            for seed, epoch, layer in ((3, 4, 1), (0, 0, 0), (2**40, 7, 2)):
                want = D.keep_mask_reference(ids, features, p, seed=seed, epoch=epoch, layer=layer, cols=cols)
                # the key given, and read from memory (an epoch held in a tensor, as a CUDA graph's step holds it)
                for key in (int(D._node_key(seed, epoch, layer)), D.device_key(seed, torch.tensor(epoch), layer)):
                    got = TK.node_keep_mask(torch.from_numpy(ids), features, c0, c1, key, int(D._threshold(p)))
                    assert got.dtype == torch.bool and got.shape == want.shape
                    assert np.array_equal(got.numpy(), want), (p, features, cols, seed, key)
    empty = TK.node_keep_mask(torch.zeros(0, dtype=torch.int64), 4, 0, 4, 1, 2**63)
    assert empty.shape == (0, 4)


def check_edge_masks_equal_the_reference_bit_for_bit():
    r = np.random.default_rng(4)
    dst = np.concatenate([r.integers(0, 10**6, 600), [2**41 + 3, 0]]).astype(np.int64)
    src = np.concatenate([r.integers(0, 10**6, 600), [0, 2**35]]).astype(np.int64)
    for heads in (1, 3, 8):
        for p in (0.3, 0.6):
            want = D.edge_keep_mask_reference(dst, src, heads, p, seed=1, epoch=2, layer=0)
            for key in (int(D._edge_key(1, 2, 0)), D.device_key(1, torch.tensor(2), 0, edge=True)):
                got = TK.edge_keep_mask(torch.from_numpy(dst), torch.from_numpy(src), heads, key, int(D._threshold(p)))
                assert got.shape == want.shape and np.array_equal(got.numpy(), want), (heads, p, key)
    assert TK.edge_keep_mask(torch.zeros(0, dtype=torch.int64), torch.zeros(0, dtype=torch.int64), 2, 5,
                             2**62).shape == (0, 2)


def test_the_kernels_serve_cuda_tensors_only_and_yield_to_the_references_when_asked(monkeypatch):
    monkeypatch.delenv("GRIDGNN_KERNELS", raising=False)
    monkeypatch.setattr(TK, "off", {})
    assert not TK.usable(torch.device("cpu"))
    assert TK.usable(torch.device("cuda", 0)) == TK.HAVE_TRITON
    monkeypatch.setenv("GRIDGNN_KERNELS", "torch")
    assert not TK.usable(torch.device("cuda", 0))


def test_a_kernel_that_cannot_run_here_turns_itself_off_with_one_warning(monkeypatch):
    """Triton that cannot build or launch a kernel here (too old for the GPU, no compiler): one warning, the wrapper
    answers ``None`` so that its callers run the reference, and that kernel stays off in the process (the others
    are tried on their own)."""
    class Broken:
        def __getitem__(self, grid):
            def launch(*args, **meta):
                raise RuntimeError("no compiler for the launcher\nsecond line")
            return launch

    class Module:
        node_mask = edge_mask = sddmm_dot = Broken()

    monkeypatch.delenv("GRIDGNN_KERNELS", raising=False)
    monkeypatch.setattr(TK, "off", {})
    monkeypatch.setattr(TK, "_kernels", lambda: Module())
    with pytest.warns(RuntimeWarning, match="Triton kernel node_mask is off in this process .RuntimeError: no comp"):
        assert TK.node_keep_mask(torch.arange(4), 3, 0, 3, 5, 2**63) is None
    assert TK.off == {"node_mask": "RuntimeError: no compiler for the launcher"}
    assert not TK.on("node_mask") and TK.on("edge_mask")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once off, not tried again: no second warning
        assert TK.node_keep_mask(torch.arange(4), 3, 0, 3, 5, 2**63) is None
    with pytest.warns(RuntimeWarning, match="Triton kernel edge_mask is off"):  # another kernel: tried on its own
        assert TK.edge_keep_mask(torch.arange(3), torch.arange(3), 2, 5, 2**62) is None
    monkeypatch.setattr(TK, "off", {})
    monkeypatch.setenv("GRIDGNN_KERNELS", "triton")  # strict: the failure itself, no fallback
    with pytest.raises(RuntimeError, match="no compiler for the launcher"):
        TK.sddmm_dot(torch.zeros(2, dtype=torch.int32), torch.zeros(2, dtype=torch.int32), torch.ones(1, 4),
                     torch.ones(1, 4), 1, [(0, 0, 4)])
    assert TK.off == {}


@on_a_gpu
def test_on_a_gpu_the_dropout_masks_come_from_the_kernels_with_the_host_bits():
    r = np.random.default_rng(5)
    ids = _ids(r)
    calls = []
    real = TK.node_keep_mask
    TK.node_keep_mask = lambda *a, **k: (calls.append(1), real(*a, **k))[1]
    want = D.keep_mask_reference(ids, 16, 0.4, seed=3, epoch=4, layer=1, cols=(2, 13))
    try:
        for epoch in (4, torch.tensor(4, device="cuda")):  # (a tensor: the key read from the device's memory)
            got = D.keep_mask_tensor(torch.from_numpy(ids).cuda(), 16, 0.4, seed=3, epoch=epoch, layer=1, cols=(2, 13))
            assert np.array_equal(got.cpu().numpy(), want)
    finally:
        TK.node_keep_mask = real
    assert len(calls) == 2
    dst, src = r.integers(0, 10**6, 5000), r.integers(0, 10**6, 5000)
    real = TK.edge_keep_mask
    TK.edge_keep_mask = lambda *a, **k: (calls.append(2), real(*a, **k))[1]
    try:
        got = D.edge_keep_mask_tensor(torch.from_numpy(dst).cuda(), torch.from_numpy(src).cuda(), 8, 0.3, seed=1,
                                      epoch=2, layer=0)
    finally:
        TK.edge_keep_mask = real
    assert 2 in calls and np.array_equal(got.cpu().numpy(), D.edge_keep_mask_reference(dst, src, 8, 0.3, seed=1, epoch=2, layer=0))


def _pattern(r, m, k, nnz):
    """A CSR pattern with empty rows, an isolated column and repeated columns in a row."""
    rows = np.sort(r.integers(0, m - 2, nnz))  # the last two rows empty
    cols = r.integers(0, k - 1, nnz)  # the last column never read
    mat = sp.csr_matrix((np.ones(nnz), (rows, cols)), shape=(m, k))
    return Pattern.from_scipy(mat)


#: column segments of which the first and the last are one head's: the kernel adds the second sum to the first's
REPEATED_HEAD = [(0, 0, 20), (1, 20, 50), (0, 50, 70)]


def check_sddmm_dot_equals_the_gathered_reference():
    for dtype in (torch.float64, torch.float32):
        _sddmm_case(dtype)


def _sddmm_case(dtype):
    r = np.random.default_rng(6)
    pat = _pattern(r, 40, 30, 300)
    for heads, width, col_heads in ((1, 7, None), (2, 6, None), (8, 64, None), (3, 5, [(0, 0, 2), (2, 2, 5)]),
                                    (4, 37, None), (1, 150, None), (2, 70, REPEATED_HEAD)):
        # uneven heads; a head over several steps; a head in two segments apart (the second adds to the first's sum)
        ch = col_heads if col_heads is not None else head_columns(heads, width)
        d = torch.from_numpy(r.normal(size=(40, width))).to(dtype)
        x = torch.from_numpy(r.normal(size=(30, width))).to(dtype)
        want = sddmm_dot_reference(pat, d, x, heads, col_heads=ch)
        got = TK.sddmm_dot(rows_of(pat.crow), pat.col, d, x, heads, ch)
        assert got.dtype == dtype and got.shape == want.shape
        tol = 1e-12 if dtype == torch.float64 else 1e-5
        assert torch.allclose(got, want, rtol=tol, atol=tol), (heads, width, (got - want).abs().max())
    empty = TK.sddmm_dot(torch.zeros(0, dtype=torch.int32), torch.zeros(0, dtype=torch.int32),
                         torch.ones(3, 4), torch.ones(2, 4), 2, head_columns(2, 4))
    assert empty.shape == (0, 2)


@on_a_gpu
def test_on_a_gpu_the_dot_sddmm_comes_from_the_kernel_and_equals_the_reference():
    r = np.random.default_rng(7)
    pat = _pattern(r, 300, 200, 5000)
    gpu = Pattern(pat.crow.cuda(), pat.col.cuda(), pat.shape)
    for heads, width, col_heads in ((1, 16, None), (8, 64, None), (3, 40, None), (2, 70, REPEATED_HEAD)):
        d, x = torch.from_numpy(r.normal(size=(300, width))), torch.from_numpy(r.normal(size=(200, width)))
        col_heads = col_heads or head_columns(heads, width)
        calls = []
        real = TK.sddmm_dot
        TK.sddmm_dot = lambda *a, **k: (calls.append(1), real(*a, **k))[1]
        try:
            got = sddmm_dot(gpu, d.cuda(), x.cuda(), heads, col_heads=col_heads)
        finally:
            TK.sddmm_dot = real
        want = sddmm_dot_reference(pat, d, x, heads, col_heads=col_heads)
        assert calls and torch.allclose(got.cpu(), want, rtol=1e-12, atol=1e-12), heads


# ---------------------------------------------------------------------------------------------- the fused attention
#: (score, heads, x width, score width): GAT's shape (one score per head), a single wide head (several column steps
#: of 64), two heads of uneven score and value widths, three wide heads of "add" scores
ATTENTION_CASES = (("add", 8, 64, 8), ("dot", 1, 150, 150), ("dot", 2, 12, 10), ("add", 3, 210, 3))


def _attention_pattern(r):
    """Row 0 with 70 edges (three blocks of 32), short rows, two empty rows, a column no row reads."""
    m, k = 10, 80
    rows = [np.zeros(70, dtype=np.int64)] + [np.full(n, i) for i, n in enumerate(r.integers(0, 7, m - 3), start=1)]
    cols = [r.choice(k - 1, 70, replace=False)] + [r.choice(k - 1, len(t), replace=False) for t in rows[1:]]
    rows, cols = np.concatenate(rows), np.concatenate(cols)
    return Pattern.from_scipy(sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(m, k)))


def _attention_inputs(r, pat, score, heads, width, swidth, dtype, keep_p):
    m, k = pat.shape
    t = [torch.from_numpy(r.normal(size=s)).to(dtype) for s in ((m, swidth), (k, swidth), (k, width), (m, width))]
    keep = torch.from_numpy(r.random((pat.nnz, heads)) >= keep_p) if keep_p else None
    return (*t, keep)


def _dense_attention(pat, a_dst, a_src, x, dy, keep, *, score, heads, slope, q):
    """The attention and its gradients by autograd on dense ``m × k × K`` tensors (−inf off the edges): α per edge,
    Y, the score gradient per edge (the LeakyReLU's input for "add") and ``a_dst``'s gradient."""
    m, k = pat.shape
    row, col = rows_of(pat.crow).long(), pat.col.long()
    a_dst = a_dst.clone().requires_grad_()
    if score == "add":
        pre = a_dst[:, None, :] + a_src[None, :, :]
        e = torch.where(pre > 0, pre, pre * slope)
    else:
        per = a_dst.shape[1] // heads
        pre = torch.einsum("uhf,vhf->uvh", a_dst.reshape(m, heads, per), a_src.reshape(k, heads, per))
        e = pre
    pre.retain_grad()
    on = torch.zeros(m, k, dtype=torch.bool)
    on[row, col] = True
    alpha = torch.softmax(e.masked_fill(~on[:, :, None], float("-inf")), dim=1).nan_to_num(0.0)  # (empty rows: 0)
    w = alpha  # (no mask: no scaling)
    if keep is not None:
        kd = torch.zeros(m, k, heads, dtype=torch.bool)
        kd[row, col] = keep
        w = alpha / q * kd
    y = torch.einsum("uvh,vhf->uhf", w, x.reshape(k, heads, -1)).reshape(m, -1)
    (y * dy).sum().backward()
    return alpha[row, col].detach(), y.detach(), pre.grad[row, col], a_dst.grad


def _attention_cases(r, pat, runs):
    """``runs``: ``(case of ATTENTION_CASES, dtype, drop probability or 0: no mask)``."""
    for case, dtype, keep_p in runs:
        score, heads, width, swidth = ATTENTION_CASES[case]
        yield (score, heads, dtype), _attention_inputs(r, pat, score, heads, width, swidth, dtype, keep_p)


def test_the_torch_reference_of_the_fused_attention_equals_autograd_and_the_numba_kernels():
    """The reference the Triton kernels are held to (and that runs where they cannot) against autograd on dense
    tensors, and against the CPU's numba kernels, forward and backward."""
    from gridgnn.ops import kernels as K

    r = np.random.default_rng(8)
    pat = _attention_pattern(r)
    runs = [(case, torch.float64, p) for case in range(len(ATTENTION_CASES)) for p in (0.0, 0.4)]
    for (score, heads, dtype), (a_dst, a_src, x, dy, keep) in _attention_cases(r, pat, runs):
        kw = dict(dot=score == "dot", slope=0.2, keep=keep, q=0.6)
        alpha, y = A.forward_reference(pat, a_dst, a_src, x, heads=heads, **kw)
        g_edge, g_dst = A.backward_reference(pat, a_dst, a_src, x, dy, alpha, **kw)
        want = _dense_attention(pat, a_dst, a_src, x, dy, keep, score=score, heads=heads, slope=0.2, q=0.6)
        for got, ref in zip((alpha, y, g_edge, g_dst), want):
            assert torch.allclose(got, ref, rtol=1e-10, atol=1e-12), (score, heads, (got - ref).abs().max())
        if K.enabled():
            for got, ref in zip(K.attend_forward(pat.crow, pat.col, a_dst, a_src, x, heads=heads, **kw)
                                + K.attend_backward(pat.crow, pat.col, a_dst, a_src, x, dy, alpha, **kw),
                                (alpha, y, g_edge, g_dst)):
                assert torch.allclose(got, ref, rtol=1e-10, atol=1e-12), (score, heads)
    # heads that do not divide the widths: no kernel (the reference serves them, as the numba kernels do)
    assert TK.attend_forward(pat.crow, pat.col, torch.ones(10, 3), torch.ones(80, 3), torch.ones(80, 7), dot=False,
                             heads=3, slope=0.2, keep=None, q=1.0) is None


def check_fused_attention_equals_its_torch_reference():
    """Forward (α, Y) and backward (the score gradient, ``a_dst``'s) of the Triton kernels: a row of three edge
    blocks, empty rows, several column steps, both scores, with and without the dropout mask (five runs: the
    interpreter takes about a second each)."""
    r = np.random.default_rng(9)
    pat = _attention_pattern(r)
    f64, f32 = torch.float64, torch.float32
    runs = [(0, f64, 0.4), (0, f32, 0.0), (1, f64, 0.4), (2, f32, 0.4), (3, f64, 0.0)]
    for (score, heads, dtype), (a_dst, a_src, x, dy, keep) in _attention_cases(r, pat, runs):
        kw = dict(dot=score == "dot", slope=0.2, keep=keep, q=0.6)
        tol = 1e-12 if dtype == torch.float64 else 1e-5
        want = A.forward_reference(pat, a_dst, a_src, x, heads=heads, **kw)
        got = TK.attend_forward(pat.crow, pat.col, a_dst, a_src, x, heads=heads, **kw)
        want += A.backward_reference(pat, a_dst, a_src, x, dy, want[0], **kw)
        got += TK.attend_backward(pat.crow, pat.col, a_dst, a_src, x, dy, want[0], **kw)
        for g, w in zip(got, want):
            assert g.dtype == dtype and g.shape == w.shape
            assert torch.allclose(g, w, rtol=tol, atol=tol), (score, heads, dtype, (g - w).abs().max())
        assert not got[1][-2:].any() and not got[3][-2:].any()  # the empty rows


@on_a_gpu
def test_on_a_gpu_the_masks_drawn_again_give_the_kept_masks_gradients_and_none_is_kept():
    """GAT (fused attention) and GraphSAGE on a GPU: the Triton kernels draw the node and attention masks, autograd
    keeps none of them (each is drawn again in the backward from its key), and the step's logits and gradients equal
    those of the step that keeps them, bit for bit."""
    from gridgnn.graph import gcn_normalize
    from gridgnn.graph.spec import load_graph
    from gridgnn.nn import resolve_model
    from gridgnn.ops import masked
    from gridgnn.parallel.blockrow import build_serial

    g = load_graph("synthetic:sbm?n=400&classes=4&avg_degree=12&features=8")
    plan = build_serial(gcn_normalize(g), dtype=torch.float64, device="cuda")
    x = torch.from_numpy(g.x).double().cuda()
    for name, kw in (("gat", {"heads": 2, "attn_dropout": 0.3}), ("sage", {})):
        results = []
        for again in (False, True):
            real = D.redraws
            D.redraws = lambda *a, again=again: again and real(*a)
            try:
                model = resolve_model(name)([8, 8, 8, 4], dropout=0.4, seed=2, dtype=torch.float64, **kw).cuda()
                model.train()
                kept = []
                observers = masked._LOCAL.__dict__.setdefault("observers", [])
                observers.append(kept.append)
                try:
                    out = model(x, plan)
                finally:
                    observers.remove(kept.append)
            finally:
                D.redraws = real
            out.square().sum().backward()
            masks = [k for k in kept if isinstance(k, torch.Tensor) and k.dtype == torch.bool]
            masks += [k.mask for k in kept if isinstance(k, masked.Recomputed) and not k.redrawn]
            assert bool(masks) == (not again), (name, again, len(masks))
            results.append([out.detach()] + [p.grad for p in model.parameters()])
        for mine, ref in zip(*results):
            assert torch.equal(mine, ref), name


@on_a_gpu
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_on_a_gpu_the_fused_attention_comes_from_the_kernels_and_equals_the_reference(dtype):
    """GAT's and AGNN's attention through :class:`FusedAttention` on a GPU pattern: the Triton kernels run (not the
    reference), forward and every input's gradient equal the composition of primitives on the CPU in float64 — and
    in float32, which a GPU computes with its approximate ``exp`` and division and fused multiply-adds, to float32's
    rounding of the float64 composition."""
    from gridgnn.graph import gcn_normalize
    from gridgnn.graph.spec import load_graph
    from gridgnn.parallel.attention import attend, attend_composed
    from gridgnn.parallel.blockrow import build_serial

    g = gcn_normalize(load_graph("synthetic:sbm?n=400&classes=4&avg_degree=12&features=8"))
    r = np.random.default_rng(10)
    for score, heads, width, swidth in ATTENTION_CASES:
        inputs = [torch.from_numpy(r.normal(size=(g.shape[0], w))) for w in (swidth, swidth, width, width)]
        keep = torch.from_numpy(r.random((g.nnz, heads)) >= 0.4)
        results = []
        for device in ("cpu", "cuda"):
            run = torch.float64 if device == "cpu" else dtype
            plan = build_serial(g, dtype=run, device=device)
            a_dst, a_src, x, dy = (t.detach().to(device, run).requires_grad_(i < 3) for i, t in enumerate(inputs))
            fn = attend if device == "cuda" else attend_composed
            calls = []
            real = TK.attend_forward
            TK.attend_forward = lambda *a, **k: (calls.append(1), real(*a, **k))[1]
            try:
                y = fn(plan.graph(0), a_dst, a_src, x, score=score, heads=heads, keep=keep.to(device), p=0.4)
            finally:
                TK.attend_forward = real
            assert bool(calls) == (device == "cuda")
            (y * dy).sum().backward()
            results.append([t.detach().cpu() for t in (y, a_dst.grad, a_src.grad, x.grad)])
        for got, want in zip(results[1], results[0]):
            if dtype == torch.float64:
                assert torch.allclose(got, want, rtol=1e-10, atol=1e-12), (score, heads, (got - want).abs().max())
            else:  # (normwise: the host's float32 composition is 1.3e-6 of the largest value off, at most)
                err = (got.double() - want).abs().max() / want.abs().max()
                assert err <= 1e-5, (score, heads, err)


@on_a_gpu
def test_on_a_gpu_the_fused_attention_on_rows_of_a_thousand_to_a_hundred_thousand_edges_is_exact_and_repeatable():
    """Rows far longer than the SBM's (a destination with 10⁵ sources, 10⁴, 10³, then short rows): the kernels'
    passes over thousands of edge blocks and their row sums equal the CPU composition, and two runs on the device give the
    same bits — the Triton row programs and cuSPARSE on the transposed pattern, and the sources' score gradient
    summed per column in a fixed order (``ops.pattern.col_sum_in_order``, not ``index_add_``'s atomics); so does the
    composition on the device (the layouts whose rows are split), its row sums segmented in order too
    (``ops.pattern.segmented_sum``)."""
    from gridgnn.graph import Graph, gcn_normalize
    from gridgnn.parallel.attention import attend, attend_composed
    from gridgnn.parallel.blockrow import build_serial

    r = np.random.default_rng(12)
    n = 110_000
    hubs = [(0, 100_000), (1, 10_000), (2, 1_000)]
    src = np.concatenate([r.choice(np.arange(3, n), size, replace=False) for _, size in hubs]
                         + [r.integers(3, n, 3 * n)])
    dst = np.concatenate([np.full(size, v) for v, size in hubs] + [r.integers(3, n, 3 * n)])
    g = gcn_normalize(Graph.from_edges(src, dst, n, directed=True, x=np.zeros((n, 1)), y=np.zeros(n, dtype=np.int64)))
    assert np.diff(g.indptr)[:3].tolist() == [100_001, 10_001, 1_001]  # (each with its self-loop)
    plans = {device: build_serial(g, dtype=torch.float64, device=device) for device in ("cpu", "cuda")}
    real, calls = TK.attend_forward, []
    for score, heads, width, swidth in (ATTENTION_CASES[0], ATTENTION_CASES[2]):
        inputs = [torch.from_numpy(r.normal(size=(n, w))) for w in (swidth, swidth, width, width)]
        keep = torch.from_numpy(r.random((g.nnz, heads)) >= 0.4)
        results = []
        for run in ("cpu", "cuda", "cuda", "composed", "composed"):
            device = "cpu" if run == "cpu" else "cuda"
            # (leaves of their own: the host run's .to would give the inputs themselves, and a later .to('cuda') of
            # a tensor that requires a gradient gives no leaf, whose .grad stays None)
            a_dst, a_src, x, dy = (t.detach().to(device).requires_grad_(i < 3) for i, t in enumerate(inputs))
            fn = attend if run == "cuda" else attend_composed
            TK.attend_forward = lambda *a, **k: (calls.append(device), real(*a, **k))[1]
            try:
                y = fn(plans[device].graph(0), a_dst, a_src, x, score=score, heads=heads, keep=keep.to(device), p=0.4)
            finally:
                TK.attend_forward = real
            (y * dy).sum().backward()
            results.append([t.detach().cpu() for t in (y, a_dst.grad, a_src.grad, x.grad)])
        for first, second in ((1, 2), (3, 4)):  # (fused twice, composed twice)
            for got, again, want in zip(results[first], results[second], results[0]):
                assert torch.equal(got, again), (score, heads, first)  # repeatable on the device
                assert torch.allclose(got, want, rtol=1e-9, atol=1e-11), (score, heads, (got - want).abs().max())
    assert calls == ["cuda"] * 4  # the Triton kernels served every fused device run, and only those


def _attention_through_the_layer(monkeypatch_like, cases, n: int):
    """GAT's and AGNN's attention (``cases`` of ATTENTION_CASES) on a serial plan of host tensors (an SBM of ``n``
    vertices), the Triton path taken as on a GPU (the numba kernels off, Triton usable), against the composition of
    primitives: the output and every input's gradient. Returns, per Triton forward call, whether it gave a result."""
    from gridgnn.graph import gcn_normalize
    from gridgnn.graph.spec import load_graph
    from gridgnn.ops import kernels as K
    from gridgnn.parallel.attention import attend, attend_composed
    from gridgnn.parallel.blockrow import build_serial

    plan = build_serial(gcn_normalize(load_graph(f"synthetic:sbm?n={n}&classes=2&avg_degree=6&features=4")),
                        dtype=torch.float64)
    g, n = plan.graph(0), plan.graph(0).n_local
    r = np.random.default_rng(11)
    served = []
    real = TK.attend_forward
    monkeypatch_like(K, "fused", lambda *t: False)
    monkeypatch_like(TK, "usable", lambda device: True)
    monkeypatch_like(TK, "attend_forward", lambda *a, **k: (lambda out: (served.append(out is not None), out)[1])(
        real(*a, **k)))
    for score, heads, width, swidth in (ATTENTION_CASES[c] for c in cases):
        inputs = [torch.from_numpy(r.normal(size=(n, w))) for w in (swidth, swidth, width, width)]
        keep = torch.from_numpy(r.random((g.nnz, heads)) >= 0.4)
        results = []
        for fn in (attend, attend_composed):
            a_dst, a_src, x, dy = (t.clone().requires_grad_(i < 3) for i, t in enumerate(inputs))
            y = fn(g, a_dst, a_src, x, score=score, heads=heads, keep=keep, p=0.4)
            (y * dy).sum().backward()
            results.append([t.detach() for t in (y, a_dst.grad, a_src.grad, x.grad)])
        for got, want in zip(*results):
            assert torch.allclose(got, want, rtol=1e-10, atol=1e-12), (score, heads, (got - want).abs().max())
    return served


def check_fused_attention_through_the_layer_equals_the_composition():
    undo = []

    def patch(obj, name, value):
        undo.append((obj, name, getattr(obj, name)))
        setattr(obj, name, value)
    try:
        # one case: the dot score with two heads runs every pass (the dot's a_dst gradient too); the additive score's
        # passes are the kernel check's (five runs); each case through the layer costs ~1.5 s interpreted
        served = _attention_through_the_layer(patch, (2,), 20)
    finally:
        for obj, name, value in reversed(undo):
            setattr(obj, name, value)
    assert served == [True]  # the Triton kernels ran


def test_the_fused_attention_falls_back_to_its_reference_when_the_kernels_cannot_run(monkeypatch):
    """A Triton that cannot launch (one warning, the kernel off): the same attention, from the torch reference and
    then from the composition."""
    class Module:
        def __getattr__(self, name):
            raise RuntimeError("no compiler for the launcher")

    monkeypatch.delenv("GRIDGNN_KERNELS", raising=False)
    monkeypatch.setattr(TK, "off", {})
    monkeypatch.setattr(TK, "_kernels", lambda: Module())
    with pytest.warns(RuntimeWarning, match=r"Triton kernel \w+ is off"):  # (and the SDDMM's, for the composition)
        served = _attention_through_the_layer(monkeypatch.setattr, (0, 1, 2), 40)
    assert {"attend_fwd", "attend_bwd"} <= set(TK.off)
    # the first call ran the reference (the kernel failed inside FusedAttention); then the fused path is no longer
    # chosen and the composition serves
    assert served == [False]
