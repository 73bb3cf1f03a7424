"""Local pattern kernels against dense brute force, and the serial primitives' hand-written backward against
finite differences (torch.autograd.gradcheck, float64)."""
import numpy as np
import pytest
import scipy.sparse as sp
import torch

from gridgnn.ops import device_paths
from gridgnn.ops import pattern as P
from gridgnn.parallel.blockrow import BlockRowGraph
from gridgnn.partition import RowPartition
from gridgnn.testing import profiled_peak


def random_pattern(m, k, density, seed, empty_rows=2):
    r = np.random.default_rng(seed)
    a = sp.random(m, k, density=density, random_state=r, format="csr")
    a = sp.csr_matrix(a.multiply(np.arange(m)[:, None] < m - empty_rows))  # some rows without edges
    a.eliminate_zeros()
    a.data[:] = 1.0
    return a


@pytest.mark.parametrize("heads", [1, 3])
def test_kernels_equal_dense(heads, monkeypatch):
    monkeypatch.setattr(P, "SDDMM_CHUNK_ELEMENTS", 7)  # many chunks
    a = random_pattern(9, 6, 0.4, 0)
    pat = P.Pattern.from_scipy(a)
    r = np.random.default_rng(1)
    vals = torch.from_numpy(r.normal(size=(pat.nnz, heads)))
    width = 2
    x = torch.from_numpy(r.normal(size=(6, heads * width)))
    d = torch.from_numpy(r.normal(size=(9, heads * width)))
    rows, cols = pat.row.numpy(), pat.col.numpy()
    for h in range(heads):
        dense = np.zeros((9, 6))
        dense[rows, cols] = vals[:, h].numpy()
        sl = slice(h * width, (h + 1) * width)
        np.testing.assert_allclose(P.spmm(pat, vals, x)[:, sl].numpy(), dense @ x[:, sl].numpy(), atol=1e-12)
        np.testing.assert_allclose(P.spmm(pat, vals, d, transpose=True)[:, sl].numpy(), dense.T @ d[:, sl].numpy(),
                                   atol=1e-12)
        full = d[:, sl].numpy() @ x[:, sl].numpy().T
        np.testing.assert_allclose(P.sddmm_dot(pat, d, x, heads)[:, h].numpy(), full[rows, cols], atol=1e-12)
        np.testing.assert_allclose(P.row_reduce(pat, vals, "sum")[:, h].numpy(), dense.sum(1), atol=1e-12)
        np.testing.assert_allclose(P.col_sum(pat, vals)[:, h].numpy(), dense.sum(0), atol=1e-12)
        # the device's order (a segmented sum by column; a column of no edge: 0), run here on the host
        np.testing.assert_allclose(P.col_sum_in_order(pat, vals)[:, h].numpy(), dense.sum(0), atol=1e-12)
        np.testing.assert_allclose(P.segmented_sum(pat.crow, vals)[:, h].numpy(), dense.sum(1), atol=1e-12)
        mx = P.row_reduce(pat, vals, "max")[:, h].numpy()
        for i in range(9):
            on = rows == i
            assert mx[i] == (vals[on, h].max().item() if on.any() else -np.inf)
    empty_rows = P.segmented_sum(torch.tensor([0, 0, 2, 2]), torch.ones(2, 1, dtype=torch.float64))
    assert empty_rows.flatten().tolist() == [0.0, 2.0, 0.0]


def serial_graph(directed: bool):
    a = random_pattern(11, 11, 0.25, 3 if directed else 4, empty_rows=1)
    if not directed:
        a = sp.csr_matrix(((a + a.T) > 0).astype(np.float64))
    a = sp.csr_matrix(a + sp.eye(11) * (np.arange(11) < 10))  # self-loops except on the last (isolated) row
    return BlockRowGraph(None, a, RowPartition.identity(11, 1), 0)


@pytest.mark.parametrize("directed", [False, True])
def test_serial_primitives_pass_gradcheck(directed):
    g = serial_graph(directed)
    r = torch.Generator().manual_seed(0)
    K, F = 2, 3
    vals = torch.randn(g.nnz, K, generator=r, dtype=torch.float64, requires_grad=True)
    x = torch.randn(11, K * F, generator=r, dtype=torch.float64, requires_grad=True)
    y = torch.randn(11, K * F, generator=r, dtype=torch.float64, requires_grad=True)
    s = torch.randn(11, K, generator=r, dtype=torch.float64, requires_grad=True)
    t = torch.randn(11, K, generator=r, dtype=torch.float64, requires_grad=True)
    e = torch.randn(g.nnz, K, generator=r, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda v, a: g.spmm(v, a), (vals, x))
    assert torch.autograd.gradcheck(lambda a, b: g.sddmm_add(a, b), (s, t))
    assert torch.autograd.gradcheck(lambda a, b: g.sddmm_dot(a, b, K), (x, y))
    assert torch.autograd.gradcheck(lambda a: g.edge_softmax(a), (e,))
    v1 = torch.randn(g.nnz, generator=r, dtype=torch.float64, requires_grad=True)  # one head, 1-D values
    assert torch.autograd.gradcheck(lambda v, a: g.spmm(v, a), (v1, x))


def test_edge_softmax_rows_sum_to_one():
    g = serial_graph(True)
    e = torch.randn(g.nnz, 3, dtype=torch.float64) * 50  # large scores: the max shift keeps exp finite
    a = g.edge_softmax(e)
    sums = P.row_reduce(g.pattern, a, "sum")
    has = P.row_reduce(g.pattern, torch.ones_like(a), "sum") > 0
    assert torch.allclose(sums[has], torch.ones_like(sums[has]))
    assert torch.isfinite(a).all()


def test_indices_are_int32_below_2_31_and_int64_beyond_keeping_every_value():
    """A block's indices take 4 bytes while its rows, columns and entries fit int32 (SciPy's rule), 8 beyond: a
    block of two rows whose columns reach past 2³¹ keeps its column ids exact."""
    a = random_pattern(7, 5, 0.5, 3)
    pat = P.Pattern.from_scipy(a, transpose=True)
    assert pat.index_dtype == torch.int32 and P.index_bytes(7, 5, pat.nnz) == 4
    assert all(t.dtype == torch.int32 for t in pat.index_tensors())
    np.testing.assert_array_equal(pat.col.numpy(), a.indices)
    np.testing.assert_array_equal(pat.row.numpy(), np.repeat(np.arange(7), np.diff(a.indptr)))
    t_crow, t_col, t_perm = pat.transpose()
    at = a.T.tocsr()
    np.testing.assert_array_equal(t_crow.numpy(), at.indptr)
    np.testing.assert_array_equal(t_col.numpy(), at.indices)
    np.testing.assert_array_equal(pat.col[t_perm.long()].numpy(), np.repeat(np.arange(5), np.diff(at.indptr)))
    wide = P.INT32_MAX + 10
    cols = torch.tensor([5, wide - 1, 3], dtype=torch.int64)
    big = P.Pattern(torch.tensor([0, 2, 3]), cols, (2, wide))
    assert big.index_dtype == torch.int64 and P.index_bytes(2, wide, 3) == 8
    assert big.col.tolist() == [5, wide - 1, 3] and big.row.tolist() == [0, 0, 1]
    given64 = P.Pattern(torch.tensor([0, 2, 3]), torch.tensor([1, 4, 0]), (2, 5))  # int64 given, int32 kept
    assert given64.index_dtype == torch.int32 and given64.col.tolist() == [1, 4, 0]


@pytest.mark.parametrize("m,k,nnz,seed", [(1, 1, 0, 0), (30, 20, 100, 1), (500, 2000, 9000, 2), (40, 3, 400, 3)])
def test_the_transposed_order_is_the_stable_sort_by_column(m, k, nnz, seed):
    """The CPU's counting transpose (SciPy's, of the edge positions) equals the stable sort by column that the
    device path runs: the same pointer, rows and positions, in the pattern's index dtype."""
    r = np.random.default_rng(seed)
    mat = sp.csr_matrix((np.ones(nnz), (r.integers(0, m, nnz), r.integers(0, k, nnz))), shape=(m, k))
    pat = P.Pattern.from_scipy(mat)
    t_crow, t_col, t_perm = pat.transpose()
    want_perm = torch.sort(pat.col, stable=True).indices.to(pat.index_dtype)
    want_crow = torch.zeros(k + 1, dtype=pat.index_dtype)
    want_crow[1:] = torch.cumsum(torch.bincount(pat.col, minlength=k), 0)
    assert t_perm.dtype == t_crow.dtype == t_col.dtype == pat.index_dtype
    assert torch.equal(t_perm, want_perm) and torch.equal(t_crow, want_crow) and torch.equal(t_col, pat.row[want_perm])


def test_the_transposed_order_in_64_bit_indices_and_of_a_column_view(monkeypatch):
    """The same with 64-bit indices (a block past the int32 bound, made so by lowering it) and with the columns
    a strided view of a wider array (a SUMMA panel's pattern reads its broadcast array in place)."""
    r = np.random.default_rng(7)
    mat = sp.csr_matrix((np.ones(300), (r.integers(0, 20, 300), r.integers(0, 30, 300))), shape=(20, 30))
    mat.sum_duplicates()
    monkeypatch.setattr(P, "INT32_MAX", 10)
    wide = P.Pattern.from_scipy(mat)
    assert wide.index_dtype == torch.int64
    monkeypatch.undo()
    both = torch.from_numpy(np.stack([mat.indices, mat.indices]).T.copy().astype(np.int32))  # a column view
    view = P.Pattern(torch.from_numpy(mat.indptr.astype(np.int32)), both[:, 0], mat.shape)
    assert not view.col.is_contiguous() or view.col.data_ptr() != both.data_ptr()
    for pat in (wide, view):
        t_crow, t_col, t_perm = pat.transpose()
        want = torch.sort(pat.col, stable=True).indices.to(pat.index_dtype)
        assert t_perm.dtype == pat.index_dtype and torch.equal(t_perm, want) and torch.equal(t_col, pat.row[want])
        assert t_crow[-1] == pat.nnz


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_the_devices_transpose_equals_the_hosts(dtype):
    """A device's transpose (a stable sort by column, the pointer searched in the sorted columns: nothing read back
    to the host) equals the host's SciPy transpose, empty columns and rows included, in either index type; and the
    rows of a pointer with their count given equal those without."""
    a = random_pattern(12, 9, 0.3, 5, empty_rows=2).tocoo()
    a = sp.csr_matrix((a.data * (a.col != 4), (a.row, a.col)), shape=a.shape)  # column 4 empty
    a.eliminate_zeros()
    assert a[:, 4].nnz == 0 and a.nnz > 10
    pat = P.Pattern.from_scipy(a)
    col, crow = pat.col.to(dtype), pat.crow.to(dtype)
    got = P.transpose_by_sort(col, P.rows_of(crow, pat.nnz), 9)
    for g, want in zip(got, pat.transpose()):
        assert g.dtype == dtype and torch.equal(g.long(), want.long())
    assert torch.equal(P.rows_of(crow, pat.nnz), P.rows_of(crow))


@pytest.mark.parametrize("paths", ["host", "device"])
def test_a_symmetric_patterns_transpose_holds_its_own_order_alone(paths, monkeypatch):
    """Told the pattern is symmetric (an undirected graph's whole matrix), the transpose's row pointer and columns are
    the pattern's own tensors, on the host's paths and a device's, and a transposed product gives the bits of the
    unshared one; told so of a pattern that is not, the check keeps the transpose's own."""
    if paths == "device":
        monkeypatch.setenv(device_paths.ENV, device_paths.HOST)
    a = random_pattern(15, 15, 0.25, 6, empty_rows=2)
    sym = sp.csr_matrix(a + a.T)
    for mat, shares in ((sym, True), (a, False)):
        told, plain = (P.Pattern.from_scipy(mat, transpose=True, symmetric=s) for s in (True, False))
        t_crow, t_col, t_perm = told.transpose()
        assert (t_crow is told.crow and t_col is told.col) == shares
        assert all(torch.equal(u, v) for u, v in zip(told.transpose(), plain.transpose()))
        assert len(told.index_tensors()) == len(plain.index_tensors()) - 2 * shares
        vals, x = torch.randn(mat.nnz, dtype=torch.float64), torch.randn(15, 3, dtype=torch.float64)
        assert torch.equal(P.spmm(told, vals, x, transpose=True), P.spmm(plain, vals, x, transpose=True))


def test_sums_at_repeated_indices_are_the_same_bits_every_run():
    """``add_at`` on the host: a million float32 values into a thousand bins, several threads, ten runs — the same
    bits each time, and those of adding in index order (``np.add.at``); the host's ``index_put_`` with
    ``accumulate`` adds with atomics from 32768 elements on several threads, in an order that changes per run."""
    r = np.random.default_rng(4)
    index = torch.from_numpy(r.integers(0, 1000, 10**6))
    values = torch.from_numpy(r.normal(size=10**6).astype(np.float32))
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        runs = [P.add_at(torch.zeros(1000), index, values) for _ in range(10)]
    finally:
        torch.set_num_threads(threads)
    want = np.zeros(1000, np.float32)
    np.add.at(want, index.numpy(), values.numpy())
    assert all(torch.equal(run, runs[0]) for run in runs)
    assert np.array_equal(runs[0].numpy(), want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_sparse_product_gives_torchs_bits_and_makes_its_output_alone(dtype):
    """``sparse_times`` against ``torch.sparse.mm``: the same bits; torch's composite fills an output-sized tensor
    with zeros beside the output, this one makes the output alone (64-bit indices: the host's sparse product
    converts 32-bit ones to 64 bits, a temporary of its own)."""
    g = torch.Generator().manual_seed(1)
    dense = torch.rand(500, 400, generator=g, dtype=dtype) * (torch.rand(500, 400, generator=g) < 0.02)
    a = dense.to_sparse_csr()
    x = torch.randn(400, 96, generator=g, dtype=dtype)
    out_bytes = 500 * 96 * x.element_size()
    ours, theirs = P.sparse_times(a, x), torch.sparse.mm(a, x)
    assert torch.equal(ours, theirs)
    assert profiled_peak(lambda: P.sparse_times(a, x)) < 1.1 * out_bytes
    assert profiled_peak(lambda: torch.sparse.mm(a, x)) >= 2 * out_bytes


@pytest.mark.parametrize("m,k,n,density", [(0, 5, 3, 0.5), (4, 0, 3, 0.5), (4, 5, 0, 0.5), (6, 5, 3, 0.0)],
                         ids=["no-rows", "no-columns", "no-features", "no-nonzeros"])
def test_the_sparse_product_of_empty_operands_gives_torchs_bits(m, k, n, density):
    """Empty operands and a matrix without nonzeros (features of NaN, which a product with no nonzeros must not
    reach) give ``torch.sparse.mm``'s result."""
    g = torch.Generator().manual_seed(2)
    kept = torch.rand(m, k, generator=g) < density
    a = (torch.rand(m, k, generator=g, dtype=torch.float64) * kept).to_sparse_csr()
    x = torch.randn(k, n, dtype=torch.float64) if density else torch.full((k, n), float("nan"), dtype=torch.float64)
    ours, theirs = P.sparse_times(a, x), torch.sparse.mm(a, x)
    assert ours.shape == theirs.shape == (m, n)
    assert torch.equal(ours, theirs)
