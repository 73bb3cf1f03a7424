"""The fused attention kernels (GAT's LeakyReLU-of-sums score, AGNN's dot score; dropout on the coefficients or
not; one and several heads) against the composition of primitives they replace, on the serial graph of a
pattern with empty rows, isolated vertices and one huge row: output and the gradients of the three inputs,
float64 to rounding and float32 to a stated tolerance. Their distributed use (1d-sa) is checked with the
models in test_gat.py / test_attention.py (equal to serial, bytes equal to the composition's model)."""
import numpy as np
import pytest
import scipy.sparse as sp
import torch

from gridgnn.ops import kernels as K
from gridgnn.parallel.attention import attend, attend_composed
from gridgnn.parallel.blockrow import build_serial

pytestmark = pytest.mark.skipif(not K.HAVE_NUMBA, reason="numba is not installed: only the composition runs")

TOL = {torch.float64: dict(rtol=1e-11, atol=1e-12), torch.float32: dict(rtol=1e-4, atol=1e-5)}


def awkward_matrix(n: int, seed: int) -> sp.csr_matrix:
    """``n × n``: random edges and self-loops, the last 3 rows empty, the last 4 columns unused, row 1 reading
    every used column."""
    r = np.random.default_rng(seed)
    rows = np.concatenate([r.integers(0, n - 3, 5 * n), np.full(n - 4, 1), np.arange(n - 4)])
    cols = np.concatenate([r.integers(0, n - 4, 5 * n), np.arange(n - 4), np.arange(n - 4)])
    a = sp.coo_matrix((np.ones(len(rows)), (rows, cols)), shape=(n, n)).tocsr()
    a.data[:] = 1.0
    return a


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("score,heads,dropout", [("add", 1, False), ("add", 4, True), ("dot", 1, False),
                                                 ("dot", 2, True)])
def test_fused_attention_equals_the_composition(dtype, score, heads, dropout):
    n, f = 61, 3
    g = build_serial(awkward_matrix(n, seed=heads), dtype=dtype).graph(0)
    r = np.random.default_rng(7)

    def leaf(*shape):
        return torch.from_numpy(r.normal(size=shape)).to(dtype).requires_grad_()

    width = heads if score == "add" else heads * 5
    a_dst, a_src, x = leaf(n, width), leaf(n, width), leaf(n, heads * f)
    if score == "add":  # scores of both signs around 0, so both sides of the LeakyReLU are taken
        with torch.no_grad():
            a_dst.mul_(3)
    keep = torch.from_numpy(r.random((g.nnz, heads)) > 0.4) if dropout else None
    dy = torch.from_numpy(r.normal(size=(n, heads * f))).to(dtype)
    kw = dict(score=score, heads=heads, slope=0.2, keep=keep, p=0.4 if dropout else 0.0)
    outs = []
    for fn in (attend, attend_composed):
        y = fn(g, a_dst, a_src, x, **kw)
        grads = torch.autograd.grad(y, (a_dst, a_src, x), dy)
        outs.append((y.detach(), *grads))
    # the fused path ran where the numba kernels serve these tensors (not on a device's code paths:
    # GRIDGNN_DEVICE_PATHS=host, where the composition ran twice)
    assert (g.fused_attention(a_dst, a_src, x, **kw) is not None) == K.fused(a_dst, a_src, x)
    assert outs[0][0].abs().sum() > 0 and (outs[0][0][-3:] == 0).all()  # empty rows aggregate nothing
    for got, want in zip(*outs):
        torch.testing.assert_close(got, want, **TOL[dtype])


def test_fused_attention_is_declined_where_rows_are_not_whole(monkeypatch):
    """The torch references (``GRIDGNN_KERNELS=torch``) and CUDA-like cases compose; so does a graph whose rows
    are split (checked through the 1.5D and oblivious 1D runs of the model tests)."""
    g = build_serial(awkward_matrix(20, seed=0), dtype=torch.float64).graph(0)
    t = torch.zeros((20, 2), dtype=torch.float64)
    monkeypatch.setenv("GRIDGNN_KERNELS", "torch")
    assert g.fused_attention(t, t, t, score="add", heads=2, slope=0.2, keep=None, p=0.0) is None
