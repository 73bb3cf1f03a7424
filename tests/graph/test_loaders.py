"""Loaders: round trips through every file format, PyG, Planetoid Cora, defaults, and every bad input."""
import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp
import torch
from torch_geometric.data import Data

from gridgnn.errors import GridGnnError
from gridgnn.graph import Graph
from gridgnn.graph.graph import require_nonnegative_weights
from gridgnn.graph.loaders import (apply_defaults, default_split, degree_features, from_pyg, load_edgelist,
                                   load_mtx, load_npz, load_planetoid, normalize_features, save_npz)

from ._util import random_graph


def assert_same(a: Graph, b: Graph, *, node_data=True):
    np.testing.assert_array_equal(a.indptr, b.indptr)
    np.testing.assert_array_equal(a.indices, b.indices)
    assert (a.values is None) == (b.values is None)
    if a.values is not None:
        np.testing.assert_allclose(a.values, b.values, rtol=1e-15)
    assert a.n == b.n and a.directed == b.directed
    if node_data:
        for key in ("x", "y", "train_mask", "val_mask", "test_mask"):
            va, vb = getattr(a, key), getattr(b, key)
            assert (va is None) == (vb is None), key
            if va is not None:
                assert va.dtype == vb.dtype, key
                np.testing.assert_array_equal(va, vb, err_msg=key)


def write_edgelist(g: Graph, path, *, sep=" ", weights=False, header=None):
    src, dst = g.edge_index()
    lines = ["# written by the test", "% another comment", ""]
    if header:
        lines.append(header)
    for k in range(g.nnz):
        cols = [str(src[k]), str(dst[k])] + ([repr(float(g.values[k]))] if weights else [])
        lines.append(sep.join(cols))
    path.write_text("\n".join(lines) + "\n")
    return path


# ------------------------------------------------------------------------------------------ round trips
@pytest.mark.parametrize("directed", [True, False])
@pytest.mark.parametrize("weighted", [False, True])
def test_edgelist_round_trip(tmp_path, directed, weighted):
    g = random_graph(n=25, m=60, directed=directed, weighted=weighted, seed=1, isolated=0, node_data=False)
    path = write_edgelist(g, tmp_path / "g.txt", weights=weighted)
    h = load_edgelist(path)  # directedness detected
    expected = apply_defaults(g.with_(x=None))
    assert_same(h, expected)
    np.testing.assert_array_equal(h.x, degree_features(g.indptr, g.indices, g.n))
    assert h.y is None and h.train_mask is None


def test_edgelist_csv_header_and_symmetrize(tmp_path):
    p = tmp_path / "g.csv"
    p.write_text("src,dst\n0,1\n1, 2\n# comment\n3,2\n")
    h = load_edgelist(p)
    assert h.directed and h.nnz == 3
    u = load_edgelist(p, directed=False)
    assert not u.directed and u.nnz == 6
    np.testing.assert_array_equal(u.csr().toarray(), u.csr().toarray().T)
    big = load_edgelist(p, num_nodes=6)  # trailing isolated vertices
    assert big.n == 6 and np.diff(big.indptr)[4:].sum() == 0


@pytest.mark.parametrize("symmetric", [False, True])
@pytest.mark.parametrize("weighted", [False, True])
def test_mtx_round_trip(tmp_path, symmetric, weighted):
    g = random_graph(n=20, m=50, directed=not symmetric, weighted=weighted, seed=2, isolated=2,
                     node_data=False)
    # the file's (i, j) is the edge i -> j: the transpose of the Graph's matrix (rows = destinations)
    mat = sp.coo_matrix(g.csr().T)
    kw = dict(symmetry="symmetric") if symmetric else dict(symmetry="general")
    if not weighted:
        kw["field"] = "pattern"
    scipy.io.mmwrite(str(tmp_path / "g.mtx"), mat, **kw)
    h = load_mtx(tmp_path / "g.mtx")
    assert_same(h, apply_defaults(g.with_(x=None)))
    assert h.directed == (not symmetric)


def test_mtx_direction_convention(tmp_path):
    p = tmp_path / "d.mtx"
    p.write_text("%%MatrixMarket matrix coordinate pattern general\n3 3 1\n1 3\n")  # edge 0 -> 2
    h = load_mtx(p)
    np.testing.assert_array_equal(h.edge_index(), [[0], [2]])


@pytest.mark.parametrize("weighted", [False, True])
def test_npz_round_trip(tmp_path, weighted):
    g = random_graph(n=30, m=90, directed=True, weighted=weighted, seed=3)
    g.name = "rt"
    path = save_npz(g, tmp_path / "g")
    assert path.name == "g.npz"
    h = load_npz(path)
    assert_same(h, g)
    assert h.name == "rt"


def test_npz_from_scipy_save_npz_with_defaults(tmp_path):
    g = random_graph(n=15, m=40, directed=False, seed=4, node_data=False)
    sp.save_npz(tmp_path / "s.npz", g.csr(), compressed=True)
    h = load_npz(tmp_path / "s.npz")
    assert_same(h, apply_defaults(g.with_(x=None)))
    # labels without masks get the seeded 60/20/20 split
    y = np.arange(15) % 3
    np.savez(tmp_path / "y.npz", indptr=g.indptr, indices=g.indices, y=y)
    h = load_npz(tmp_path / "y.npz", seed=7)
    tr, va, te = default_split(15, y, 7)
    np.testing.assert_array_equal(h.train_mask, tr)
    np.testing.assert_array_equal(h.test_mask, te)


@pytest.mark.parametrize("directed", [True, False])
def test_from_pyg(directed):
    g = random_graph(n=30, m=70, directed=directed, seed=5)
    data = Data(x=torch.from_numpy(g.x), edge_index=torch.from_numpy(g.edge_index()),
                y=torch.from_numpy(g.y), train_mask=torch.from_numpy(g.train_mask),
                val_mask=torch.from_numpy(g.val_mask), test_mask=torch.from_numpy(g.test_mask))
    h = from_pyg(data)
    assert_same(h, g)


def test_from_pyg_edge_direction_and_defaults():
    data = Data(edge_index=torch.tensor([[0, 0], [1, 2]]), num_nodes=4, y=torch.tensor([0, 1, 0, 1]),
                edge_weight=torch.tensor([2.0, 3.0]))
    h = from_pyg(data, seed=3)
    # PyG edge_index[0] = source, [1] = destination; rows of the Graph are destinations
    dense = h.csr().toarray()
    assert dense[1, 0] == 2.0 and dense[2, 0] == 3.0 and dense[0].sum() == 0
    assert h.directed and h.x.shape == (4, 3)
    tr, va, te = default_split(4, h.y, 3)
    np.testing.assert_array_equal(h.train_mask, tr)


def test_planetoid_cora(cora_dir):
    g = load_planetoid(cora_dir)
    assert g.name == "cora"
    assert g.n == 2708 and g.x.shape == (2708, 1433) and g.x.dtype == np.float32
    assert g.num_classes == 7
    assert (g.train_mask.sum(), g.val_mask.sum(), g.test_mask.sum()) == (140, 500, 1000)
    assert not (g.train_mask & g.test_mask).any() and not (g.val_mask & g.test_mask).any()
    assert not g.directed and g.nnz == 10556
    m = g.csr()
    assert (m != m.T).nnz == 0 and m.diagonal().sum() == 0
    assert set(np.unique(g.x)) <= {0.0, 1.0} and g.meta["feature_norm"] == "row"  # raw; auto row-normalizes
    rows = normalize_features(g.x, "row").sum(axis=1)
    assert np.all(np.isclose(rows, 1.0, atol=1e-5) | (rows == 0))


def test_default_split_properties():
    y = np.array([0, 1, 2, -1] * 25)
    tr, va, te = default_split(100, y, seed=0)
    assert tr.sum() == 45 and va.sum() == 15 and te.sum() == 15  # of the 75 labelled
    assert not (tr & va).any() and not (tr & te).any() and not (va & te).any()
    assert not ((tr | va | te) & (y < 0)).any()
    tr2, _, _ = default_split(100, y, seed=0)
    tr3, _, _ = default_split(100, y, seed=1)
    np.testing.assert_array_equal(tr, tr2)
    assert not np.array_equal(tr, tr3)


# ------------------------------------------------------------------------------------------ bad input
EDGELIST_BAD = [
    ("empty", "# only a comment\n\n", "empty"),
    ("four_cols", "0 1 1.0 7\n", "columns"),
    ("one_col", "0\n1\n", "columns"),
    ("ragged", "0 1\n1 2 3.0\n", "columns"),
    ("float_id", "0 1\n1.5 2\n", "integer"),
    ("word_id", "0 1\nx 2\n", "integer"),
    ("negative", "0 1\n-1 2\n", "negative"),
    ("nan_weight", "0 1 1.0\n1 2 nan\n", "NaN"),
    ("inf_weight", "0 1 inf\n", "NaN"),
    ("word_weight", "0 1 1.0\n1 2 heavy\n", "number"),
    # what Python's int() and float() read but a file's numbers are not: 1_0 is 10 to Python, ٣ is 3
    ("underscore_id", "0 1\n1_0 2\n", "line 2: vertex id '1_0' is not an integer"),
    ("underscore_first_line", "1_0 2_0\n3 4\n", "line 1: vertex id '1_0' is not an integer"),  # no header
    ("other_digits", "0 1\n\u0663 2\n", "line 2: vertex id .* is not an integer"),
    ("underscore_weight", "0 1 1_5\n1 2 1\n", "line 1: weight '1_5' is not a number"),
    ("fullwidth_weight", "0 1 1\n1 2 \uff11\n", "line 2: weight .* is not a number"),
    ("separator_in_line", "0 1\x1c1 2\n", "line 1: expected 2 or 3 columns"),  # \x1c ends no line
]


@pytest.mark.parametrize("name,text,word", EDGELIST_BAD, ids=[c[0] for c in EDGELIST_BAD])
def test_edgelist_bad_input(tmp_path, name, text, word):
    p = tmp_path / f"{name}.txt"
    p.write_text(text, encoding="utf-8")
    with pytest.raises(GridGnnError, match=word) as e:
        load_edgelist(p)
    assert p.name in str(e.value) and "\n" not in str(e.value)


def test_an_edge_feature_written_as_python_reads_it_is_refused(tmp_path):
    p = tmp_path / "f.txt"
    p.write_text("0 1 0.5\n1 2 1_0\n")
    with pytest.raises(GridGnnError, match="line 2: an edge feature is not a number"):
        load_edgelist(p, edge_features=True)


def test_a_byte_order_mark_and_crlf_read_as_the_plain_file(tmp_path):
    plain, marked = tmp_path / "plain.txt", tmp_path / "marked.txt"
    plain.write_text("0 1\n1 2\n2 0 \n")
    marked.write_bytes(b"\xef\xbb\xbf0 1\r\n1 2\r\n2 0 \r\n")
    assert_same(load_edgelist(marked), load_edgelist(plain))


def _as_dict(mat) -> dict:
    c = sp.coo_matrix(mat)
    return {(int(i), int(j)): float(v) for i, j, v in zip(c.row, c.col, c.data)}


def test_symmetrizing_keeps_every_edge_with_its_own_weight(tmp_path):
    """An edge given in one direction gets its reverse with its own weight — a zero or negative one too (SciPy's
    maximum against the implicit zero dropped those edges, and the refusal of negative weights never saw them); an
    edge given in both keeps the larger weight. Against a brute-force symmetrization."""
    r = np.random.default_rng(0)
    src, dst = r.integers(0, 12, 60), r.integers(0, 12, 60)
    w = r.integers(-2, 4, 60).astype(float)
    key = dst * 12 + src
    _, first = np.unique(key, return_index=True)  # one weight per directed pair (no merging to model)
    src, dst, w = src[first], dst[first], w[first]
    want = {}
    for s_, d_, v in zip(src, dst, w):
        for pair in ((int(d_), int(s_)), (int(s_), int(d_))):
            want[pair] = max(want.get(pair, -np.inf), v)
    assert min(want.values()) < 0 and 0 in want.values()  # the cases SciPy's maximum lost
    g = Graph.from_edges(src, dst, 12, weights=w, directed=False)
    assert _as_dict(g.csr()) == want and not g.directed
    d = Graph.from_edges(src, dst, 12, weights=w, directed=True)
    assert _as_dict(d.symmetrized().csr()) == want  # what inference gives a model trained symmetrized
    p = tmp_path / "neg.txt"
    p.write_text("0 1 -5\n1 2 1\n2 0 1\n")
    with pytest.raises(GridGnnError, match="edge 1 -> 0 has weight -5"):  # refused, not silently dropped
        require_nonnegative_weights(load_edgelist(p, directed=False))


def test_edgelist_out_of_range(tmp_path):
    p = tmp_path / "g.txt"
    p.write_text("0 1\n1 5\n")
    with pytest.raises(GridGnnError, match="out of range"):
        load_edgelist(p, num_nodes=4)


@pytest.mark.parametrize("loader", [load_edgelist, load_mtx, load_npz, load_planetoid])
def test_missing_file(tmp_path, loader):
    with pytest.raises(GridGnnError, match="not found") as e:
        loader(tmp_path / "nope.dat")
    assert "nope.dat" in str(e.value)


@pytest.mark.parametrize("loader", [load_edgelist, load_mtx, load_npz])
def test_directory_is_not_a_file(tmp_path, loader):
    with pytest.raises(GridGnnError, match="not a regular file"):
        loader(tmp_path)


MTX_BAD = [
    ("nonsquare", "%%MatrixMarket matrix coordinate real general\n3 4 1\n1 2 1.0\n", "square"),
    ("nan", "%%MatrixMarket matrix coordinate real general\n3 3 2\n1 2 1.0\n2 3 nan\n", "NaN"),
    ("dense", "%%MatrixMarket matrix array real general\n2 2\n1.0\n0.0\n0.0\n1.0\n", "coordinate"),
    ("garbage", "hello world\n", "Matrix Market"),
    ("no_entries", "%%MatrixMarket matrix coordinate real general\n3 3 0\n", "empty"),
    ("complex", "%%MatrixMarket matrix coordinate complex general\n2 2 1\n1 2 1.0 0.5\n", "complex"),
    ("integer_fraction", "%%MatrixMarket matrix coordinate integer general\n3 3 2\n1 2 3\n2 3 1.5\n",
     "line 4: value '1.5' is not an integer"),
]


@pytest.mark.parametrize("name,text,word", MTX_BAD, ids=[c[0] for c in MTX_BAD])
def test_mtx_bad_input(tmp_path, name, text, word):
    p = tmp_path / f"{name}.mtx"
    p.write_text(text)
    with pytest.raises(GridGnnError, match=word) as e:
        load_mtx(p)
    assert p.name in str(e.value)


def _good_npz():
    # 0 <- 1, 1 <- 0, 1 <- 2, 2 <- 1 (rows = destinations)
    return dict(indptr=np.array([0, 1, 3, 4]), indices=np.array([1, 0, 2, 1]), x=np.ones((3, 2)),
                y=np.array([0, 1, 0]), train_mask=np.array([1, 0, 0], dtype=bool))


NPZ_BAD = [
    ("missing_indptr", dict(indptr=None), "missing"),
    ("indptr_len", dict(shape=np.array([4, 4])), "indptr"),
    ("indptr_end", dict(indptr=np.array([0, 1, 3, 5])), "indptr"),
    ("nonsquare", dict(shape=np.array([3, 4])), "square"),
    ("id_range", dict(indices=np.array([1, 0, 3, 1])), "out of range"),
    ("id_negative", dict(indices=np.array([1, 0, -2, 1])), "negative"),
    ("data_len", dict(data=np.ones(3)), "data"),
    ("data_nan", dict(data=np.array([1.0, np.nan, 1.0, 1.0])), "NaN"),
    ("x_rows", dict(x=np.ones((4, 2))), "features"),
    ("x_nan", dict(x=np.array([[1.0, np.inf], [0, 0], [0, 0]])), "NaN"),
    ("y_len", dict(y=np.array([0, 1])), "labels"),
    ("y_float", dict(y=np.array([0.0, 1.5, 0.0])), "integer"),
    ("y_negative", dict(y=np.array([0, -3, 0])), "labels"),
    ("mask_len", dict(train_mask=np.ones(5, dtype=bool)), "train_mask"),
    ("mask_values", dict(val_mask=np.array([0, 2, 1])), "val_mask"),
    ("format", dict(format=np.array("csc")), "format"),
    ("no_edges", dict(indptr=np.array([0, 0, 0, 0]), indices=np.array([], dtype=np.int64)), "empty"),
    ("no_vertices", dict(indptr=np.array([0]), indices=np.array([], dtype=np.int64), x=None, y=None,
                         train_mask=None), "empty"),
]


@pytest.mark.parametrize("name,change,word", NPZ_BAD, ids=[c[0] for c in NPZ_BAD])
def test_npz_bad_input(tmp_path, name, change, word):
    arrs = _good_npz()
    load_npz_ok = tmp_path / "ok.npz"
    np.savez(load_npz_ok, **arrs)
    load_npz(load_npz_ok)  # the unchanged file is fine
    arrs.update(change)
    p = tmp_path / f"{name}.npz"
    np.savez(p, **{k: v for k, v in arrs.items() if v is not None})
    with pytest.raises(GridGnnError, match=word) as e:
        load_npz(p)
    assert p.name in str(e.value)


def test_npz_duplicate_entries_are_merged_and_counted(tmp_path):
    p = tmp_path / "dup.npz"
    np.savez(p, indptr=[0, 2, 2, 3, 4], indices=[1, 1, 3, 2], data=[1.0, 1.0, 1.0, 1.0])
    g = load_npz(p)
    assert g.nnz == 3 and g.meta["duplicate_edges_merged"] == 1
    assert _as_dict(g.csr())[(0, 1)] == 2.0


def test_npz_not_an_archive(tmp_path):
    p = tmp_path / "bad.npz"
    p.write_text("not a zip")
    with pytest.raises(GridGnnError, match="cannot read"):
        load_npz(p)


def test_planetoid_bad_directory(tmp_path):
    with pytest.raises(GridGnnError, match="Planetoid"):
        load_planetoid(tmp_path)
    for part in ("x", "tx", "allx", "y", "ty", "ally", "graph"):  # test.index missing
        (tmp_path / f"ind.toy.{part}").write_bytes(b"")
    with pytest.raises(GridGnnError, match="not found") as e:
        load_planetoid(tmp_path)
    assert "ind.toy.test.index" in str(e.value)
    (tmp_path / "ind.toy.test.index").write_text("0\n")
    with pytest.raises(GridGnnError, match="cannot read"):
        load_planetoid(tmp_path)


@pytest.mark.parametrize("change,word", [
    (dict(x=torch.ones(5, 2)), "features"),
    (dict(y=torch.tensor([0, 1])), "labels"),
    (dict(train_mask=torch.ones(2, dtype=torch.bool)), "train_mask"),
    (dict(x=torch.tensor([[float("nan")]] * 4)), "NaN"),
    (dict(edge_index=torch.tensor([0, 1])), "edge_index"),
    (dict(edge_index=torch.tensor([[0], [7]])), "out of range"),
    (dict(edge_index=torch.zeros(2, 0, dtype=torch.long)), "empty"),
])
def test_from_pyg_bad_input(change, word):
    kw = dict(edge_index=torch.tensor([[0, 1], [1, 2]]), num_nodes=4)
    kw.update(change)
    with pytest.raises(GridGnnError, match=word):
        from_pyg(Data(**kw))
