"""Semiring SpMM (SC'23 §4.3) against a brute-force loop over rows: values and gradients, with empty rows, an
unsorted duplicate-free input, isolated vertices, one huge row, ties (smallest source column wins) and masks."""
import numpy as np
import pytest
import scipy.sparse as sp
import torch

from gridgnn.ops import pattern as P
from gridgnn.ops import semiring as S


def graph(seed: int, m: int = 23, k: int = 19, huge: int = 15):
    r = np.random.default_rng(seed)
    rows, cols = r.integers(0, m - 3, 60), r.integers(0, k - 2, 60)  # last rows and columns isolated
    rows = np.concatenate([rows, np.full(huge, 4)])  # row 4: (almost) every column
    cols = np.concatenate([cols, r.permutation(k - 2)[:huge]])
    pairs = np.unique(np.stack([rows, cols], 1), axis=0)
    pairs = pairs[r.permutation(len(pairs))]  # unsorted input
    mat = sp.coo_matrix((np.ones(len(pairs)), (pairs[:, 0], pairs[:, 1])), shape=(m, k))
    return P.Pattern.from_scipy(mat)


def brute(pat, values, x, semiring, mask):
    """Y, the chosen edge per (row, column), ∂values and ∂X for the upstream gradient ``dy`` (loops)."""
    m, w = pat.shape[0], x.shape[1]
    crow, col = pat.crow.numpy(), pat.col.numpy()
    xv = x.numpy()
    a = None if values is None else values.numpy()
    y = np.zeros((m, w))
    chosen = -np.ones((m, w), dtype=np.int64)
    count = np.zeros(m)
    for u in range(m):
        edges = [e for e in range(crow[u], crow[u + 1]) if mask is None or mask[e]]
        count[u] = len(edges)
        for f in range(w):
            msgs = []
            for e in edges:
                alpha = (0.0 if S.is_plus(semiring) else 1.0) if a is None else a[e]
                msgs.append(alpha + xv[col[e], f] if S.is_plus(semiring) else alpha * xv[col[e], f])
            if not msgs:
                continue
            if semiring in ("sum", "mean"):
                y[u, f] = sum(msgs) / (len(msgs) if semiring == "mean" else 1)
            else:
                best = max(msgs) if S.is_max(semiring) else min(msgs)
                pick = min((col[e], e) for e, v in zip(edges, msgs) if v == best)[1]  # smallest column
                y[u, f], chosen[u, f] = best, pick
    return y, chosen, count


def brute_grad(pat, values, x, semiring, mask, dy, chosen, count):
    m, w = dy.shape
    crow, col = pat.crow.numpy(), pat.col.numpy()
    xv, g = x.numpy(), dy.numpy()
    a = None if values is None else values.numpy()
    dx = np.zeros_like(xv)
    da = np.zeros(pat.nnz)
    for u in range(m):
        for f in range(w):
            if semiring in ("sum", "mean"):
                for e in range(crow[u], crow[u + 1]):
                    if mask is not None and not mask[e]:
                        continue
                    s = g[u, f] / (count[u] if semiring == "mean" else 1)
                    dx[col[e], f] += s * (1.0 if a is None else a[e])
                    da[e] += s * xv[col[e], f]
            elif chosen[u, f] >= 0:
                e = chosen[u, f]
                plus = S.is_plus(semiring)
                dx[col[e], f] += g[u, f] if (plus or a is None) else g[u, f] * a[e]
                da[e] += g[u, f] if plus else g[u, f] * xv[col[e], f]
    return da, dx


@pytest.mark.parametrize("semiring", S.SEMIRINGS)
@pytest.mark.parametrize("with_values", [True, False])
@pytest.mark.parametrize("with_mask", [False, True])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_semiring_spmm_equals_brute_force(semiring, with_values, with_mask, dtype, monkeypatch):
    monkeypatch.setattr(S, "SDDMM_CHUNK_ELEMENTS", 40)  # several runs of rows, the huge row alone in one
    pat = graph(3)
    r = np.random.default_rng(4)
    x = torch.from_numpy(r.integers(-3, 4, (pat.shape[1], 5)).astype(np.float64)).to(dtype)  # many ties
    values = torch.from_numpy(r.choice([-1.0, 0.5, 1.0, 2.0], pat.nnz)).to(dtype) if with_values else None
    mask = torch.from_numpy(r.random(pat.nnz) < 0.7) if with_mask else None
    y, state = S.semiring_spmm(pat, values, x, semiring, mask)
    ref_y, chosen, count = brute(pat, values, x.double(), semiring, None if mask is None else mask.numpy())
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    np.testing.assert_allclose(y.double().numpy(), ref_y, rtol=tol, atol=tol)
    if semiring in S.SELECTING:
        np.testing.assert_array_equal(state.numpy(), chosen)
    dy = torch.from_numpy(r.normal(size=y.shape)).to(dtype)
    dvals, dx = S.semiring_backward(pat, values, x, semiring, dy, state, mask)
    da, ref_dx = brute_grad(pat, values, x.double(), semiring, None if mask is None else mask.numpy(), dy.double(),
                            chosen, count)
    np.testing.assert_allclose(dx.double().numpy(), ref_dx, rtol=tol, atol=tol)
    if with_values:
        np.testing.assert_allclose(dvals.double().numpy(), da, rtol=tol, atol=tol)
    else:
        assert dvals is None


def test_empty_rows_give_zero_and_route_nothing():
    pat = graph(5)
    x = torch.randn(pat.shape[1], 3, dtype=torch.float64)
    empty = (pat.crow[1:] == pat.crow[:-1]).numpy()
    assert empty.sum() >= 3
    for semiring in S.SEMIRINGS:
        y, state = S.semiring_spmm(pat, None, x, semiring)
        assert (y[torch.from_numpy(empty)] == 0).all()
        if semiring in S.SELECTING:
            assert (state[torch.from_numpy(empty)] == -1).all()


def test_unknown_semiring_is_refused():
    with pytest.raises(ValueError, match="unknown semiring"):
        S.semiring_spmm(graph(1), None, torch.zeros(19, 2), "median")
