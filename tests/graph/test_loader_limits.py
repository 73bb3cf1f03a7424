"""Implausible sizes, relabeling, the memory ceiling and corrupt files: one GridGnnError, nothing huge allocated."""
import os
import tracemalloc
import zipfile

import numpy as np
import pytest

from gridgnn.errors import GridGnnError
from gridgnn.graph import Graph, load_graph
from gridgnn.graph import safe_io
from gridgnn.graph.loaders import load_edgelist, load_mtx, load_npz, save_npz
from gridgnn.graph.safe_io import ISOLATED_SLACK, read_npy

MB = 1 << 20


def _fails(fn, *args, words=(), name=None, peak_mb=64, **kwargs) -> str:
    """Call ``fn``; it must raise one GridGnnError naming ``name`` and containing ``words``, within ``peak_mb``."""
    tracemalloc.start()
    try:
        with pytest.raises(GridGnnError) as e:
            fn(*args, **kwargs)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    msg = str(e.value)
    assert type(e.value) is GridGnnError or isinstance(e.value, GridGnnError)
    assert "\n" not in msg, msg
    if name is not None:
        assert name in msg, msg
    for w in words:
        assert w in msg, (w, msg)
    assert peak < peak_mb * MB, f"{peak / MB:.0f} MiB allocated before the error: {msg}"
    return msg


# ------------------------------------------------------------------------------------------ implausible sizes
@pytest.mark.parametrize("big", [999_999_999_999, 10 ** 8, 2 + 2 * 2 + ISOLATED_SLACK])
def test_edgelist_huge_id_needs_confirmation(tmp_path, big):
    p = tmp_path / "g.txt"
    p.write_text(f"0 1\n1 {big}\n")
    msg = _fails(load_edgelist, p, name="g.txt", words=(str(big + 1), "2 entries", "num_nodes", "relabel"))
    assert "vertices" in msg


def test_edgelist_at_the_plausibility_limit_loads(tmp_path):
    p = tmp_path / "g.txt"
    p.write_text(f"0 1\n1 {2 * 2 + ISOLATED_SLACK - 1}\n")  # n = 2*entries + slack exactly
    g = load_edgelist(p)
    assert g.n == 2 * 2 + ISOLATED_SLACK and g.nnz == 2


def test_edgelist_relabel_keeps_the_original_ids(tmp_path):
    p = tmp_path / "g.txt"
    p.write_text("999999999999 5\n5 7\n7 999999999999\n")
    g = load_edgelist(p, relabel=True)
    assert g.n == 3 and g.nnz == 3
    np.testing.assert_array_equal(g.original_ids, [5, 7, 999_999_999_999])
    assert g.original_ids.dtype == np.int64
    src, dst = g.edge_index()
    edges = {(int(g.original_ids[s]), int(g.original_ids[d])) for s, d in zip(src, dst)}
    assert edges == {(999_999_999_999, 5), (5, 7), (7, 999_999_999_999)}
    assert "original_ids" in g.meta["relabeled"]
    # the mapping survives save_npz / load_npz
    back = load_npz(save_npz(g, tmp_path / "r.npz"))
    np.testing.assert_array_equal(back.original_ids, g.original_ids)
    # and the spec route
    h = load_graph(f"edgelist:{p}?relabel=1")
    np.testing.assert_array_equal(h.original_ids, g.original_ids)
    assert load_edgelist(tmp_path / "g.txt", relabel=True, directed=False).original_ids is not None


def test_edgelist_explicit_num_nodes(tmp_path):
    p = tmp_path / "g.txt"
    p.write_text(f"0 1\n1 {2 * ISOLATED_SLACK}\n")
    g = load_graph(f"edgelist:{p}?num_nodes={2 * ISOLATED_SLACK + 1}")
    assert g.n == 2 * ISOLATED_SLACK + 1 and g.original_ids is None
    _fails(load_edgelist, p, num_nodes=10 ** 12, name="g.txt", words=("num_nodes=1000000000000", "available"))
    _fails(load_edgelist, p, num_nodes=5, words=("out of range", "line 2"))
    _fails(load_edgelist, p, num_nodes=3, relabel=True, words=("either",))
    _fails(load_edgelist, p, num_nodes=0, words=("positive",))


def test_memory_ceiling_applies_to_confirmed_counts(tmp_path, monkeypatch):
    monkeypatch.setattr(safe_io, "available_memory", lambda: 10 * MB)
    p = tmp_path / "g.txt"
    p.write_text("0 1\n1 2\n")
    n = 10 * MB // safe_io.BYTES_PER_VERTEX + 1
    msg = _fails(load_edgelist, p, num_nodes=n, name="g.txt", words=(str(n), "10.0 MiB"))
    assert "64 bytes per vertex" in msg
    assert load_edgelist(p, num_nodes=1000).n == 1000
    # the same guard protects Graph.from_edges for any caller
    with pytest.raises(GridGnnError, match="available"):
        Graph.from_edges([0], [1], n)


@pytest.mark.parametrize("text,words", [
    ("0 1\n1 99999999999999999999\n", ("line 2", "does not fit a 64-bit id")),
    ("0 1\n1 9223372036854775807\n", ("9223372036854775807", "relabel")),
    ("0 1\n-1 5\n", ("line 2", "negative")),
    ("0 1\n1 -99999999999999999999\n", ("line 2", "does not fit")),
    ("0 1\n1 " + "9" * 5000 + "\n", ("line 2", "not an integer")),
    ("0 1\n1 1e3\n", ("line 2", "not an integer")),
    ("0 1\n1 0x10\n", ("line 2", "not an integer")),
])
def test_edgelist_bad_ids(tmp_path, text, words):
    p = tmp_path / "g.txt"
    p.write_text(text)
    msg = _fails(load_edgelist, p, name="g.txt", words=words)
    assert len(msg) < 400


def test_edgelist_binary_and_non_utf8(tmp_path):
    p = tmp_path / "bin.txt"
    p.write_bytes(bytes(range(256)) * 4)
    _fails(load_edgelist, p, name="bin.txt", words=("UTF-8",))
    p.write_bytes(b"0 1\n\xff\xfe 2\n")
    _fails(load_edgelist, p, name="bin.txt", words=("UTF-8", "byte 4"))
    p.write_bytes(b"0 1\n1\x002\n")
    _fails(load_edgelist, p, name="bin.txt")


def test_loaders_refuse_fifos_instead_of_blocking(tmp_path):
    fifo = tmp_path / "pipe.txt"
    os.mkfifo(fifo)
    for loader in (load_edgelist, load_mtx, load_npz):
        _fails(loader, fifo, words=("not a regular file",))


# ------------------------------------------------------------------------------------------ Matrix Market
def test_mtx_huge_header(tmp_path):
    p = tmp_path / "h.mtx"
    p.write_text("%%MatrixMarket matrix coordinate pattern general\n1000000000000 1000000000000 2\n1 2\n3 4\n")
    _fails(load_mtx, p, name="h.mtx", words=("1000000000000 vertices", "?num_nodes=1000000000000", "relabel"))
    _fails(load_mtx, p, num_nodes=10 ** 12, name="h.mtx", words=("available",))
    _fails(load_mtx, p, num_nodes=7, name="h.mtx", words=("differs",))
    g = load_graph(f"mtx:{p}?relabel=1")
    assert g.n == 4 and g.original_ids.tolist() == [0, 1, 2, 3]
    q = tmp_path / "far.mtx"
    q.write_text("%%MatrixMarket matrix coordinate pattern general\n1000000000000 1000000000000 1\n"
                 "1 1000000000000\n")
    g = load_mtx(q, relabel=True)
    assert g.original_ids.tolist() == [0, 999_999_999_999]
    np.testing.assert_array_equal(g.edge_index(), [[0], [1]])


MTX_BAD = [
    ("banner", "%%MatrixMarket tensor coordinate real general\n2 2 1\n1 2 1\n", "Matrix Market"),
    ("field", "%%MatrixMarket matrix coordinate quaternion general\n2 2 1\n1 2 1\n", "field"),
    ("no_size", "%%MatrixMarket matrix coordinate real general\n% only comments\n", "size line"),
    ("size_words", "%%MatrixMarket matrix coordinate real general\n2 two 1\n1 2 1\n", "size line"),
    ("size_negative", "%%MatrixMarket matrix coordinate real general\n-2 -2 1\n1 2 1\n", "size line"),
    ("size_overflow", "%%MatrixMarket matrix coordinate real general\n99999999999999999999 99999999999999999999 1\n"
                      "1 2 1\n", "size line"),
    ("too_few", "%%MatrixMarket matrix coordinate real general\n3 3 3\n1 2 1\n", "declares 3 entries"),
    ("too_many", "%%MatrixMarket matrix coordinate real general\n3 3 1\n1 2 1\n2 3 1\n", "declares 1 entries"),
    ("columns", "%%MatrixMarket matrix coordinate real general\n3 3 2\n1 2 1\n2 3\n", "columns"),
    ("index_zero", "%%MatrixMarket matrix coordinate pattern general\n3 3 1\n0 2\n", "out of range 1..3"),
    ("index_big", "%%MatrixMarket matrix coordinate pattern general\n3 3 1\n1 4\n", "out of range 1..3"),
    ("index_float", "%%MatrixMarket matrix coordinate pattern general\n3 3 1\n1 2.5\n", "not an integer"),
    ("index_overflow", "%%MatrixMarket matrix coordinate pattern general\n3 3 1\n1 99999999999999999999\n",
     "line 3: index '99999999999999999999' out of range 1..3"),
    ("huge_count", "%%MatrixMarket matrix coordinate pattern general\n3 3 1000000000000\n1 2\n",
     "declares 1000000000000 entries"),
    ("comment_lines", "%%MatrixMarket matrix coordinate real general\n% a\n\n3 3 2\n% b\n1 2 1\n% c\n2 x 1\n",
     "line 8: index 'x' is not an integer"),
    ("value_word", "%%MatrixMarket matrix coordinate real general\n3 3 1\n1 2 heavy\n", "not a number"),
    ("value_inf", "%%MatrixMarket matrix coordinate real general\n3 3 1\n1 2 1e999\n", "NaN or inf"),
    ("hermitian", "%%MatrixMarket matrix coordinate real hermitian\n3 3 1\n1 2 1\n", "complex"),
]


@pytest.mark.parametrize("name,text,word", MTX_BAD, ids=[c[0] for c in MTX_BAD])
def test_mtx_bad_header_and_entries(tmp_path, name, text, word):
    p = tmp_path / f"{name}.mtx"
    p.write_text(text)
    _fails(load_mtx, p, name=p.name, words=(word,))


def test_mtx_non_ascii_and_binary(tmp_path):
    p = tmp_path / "b.mtx"
    p.write_bytes(b"%%MatrixMarket matrix coordinate real general\n2 2 1\n1 2 \xff\n")
    _fails(load_mtx, p, name="b.mtx", words=("ASCII",))
    p.write_bytes(os.urandom(2000))
    _fails(load_mtx, p, name="b.mtx")


def test_mtx_skew_symmetric_and_integer(tmp_path):
    p = tmp_path / "s.mtx"
    p.write_text("%%MatrixMarket matrix coordinate integer skew-symmetric\n3 3 1\n2 1 5\n")
    g = load_mtx(p)
    dense = g.csr().toarray()  # rows = destinations: file (2,1) is the edge 1 -> 0, mirrored 0 -> 1 with -5
    assert dense[0, 1] == 5 and dense[1, 0] == -5 and g.directed


# ------------------------------------------------------------------------------------------ labels
def test_label_beyond_vertex_count(tmp_path):
    p = tmp_path / "lab.npz"
    np.savez(p, indptr=np.array([0, 1, 2]), indices=np.array([1, 0]), y=np.array([0, 10 ** 12]))
    _fails(load_npz, p, name="lab.npz", words=("label 1000000000000", "2 vertices"))
    np.savez(p, indptr=np.array([0, 1, 2]), indices=np.array([1, 0]), y=np.array([0.0, 1e300]))
    _fails(load_npz, p, name="lab.npz", words=("label",))
    with pytest.raises(GridGnnError, match="label 5"):
        Graph.from_edges([0], [1], 2, y=np.array([0, 5]))


# ------------------------------------------------------------------------------------------ npz
def _good(tmp_path):
    p = tmp_path / "good.npz"
    np.savez(p, indptr=np.array([0, 1, 3, 4]), indices=np.array([1, 0, 2, 1]), x=np.ones((3, 2)),
             y=np.array([0, 1, 0]), train_mask=np.array([1, 0, 0], dtype=bool))
    load_npz(p)
    return p


def test_npz_truncated_at_every_length(tmp_path):
    data = _good(tmp_path).read_bytes()
    p = tmp_path / "t.npz"
    for cut in range(0, len(data), max(1, len(data) // 97)):
        p.write_bytes(data[:cut])
        _fails(load_npz, p, name="t.npz")


def test_npz_bit_flips(tmp_path):
    data = bytearray(_good(tmp_path).read_bytes())
    p = tmp_path / "f.npz"
    r = np.random.default_rng(0)
    outcomes = set()
    for pos in r.choice(len(data), size=150, replace=False):
        flipped = bytearray(data)
        flipped[pos] ^= 1 << int(r.integers(8))
        p.write_bytes(bytes(flipped))
        try:
            load_npz(p)
            outcomes.add("loaded")
        except GridGnnError as e:
            assert "f.npz" in str(e) and "\n" not in str(e)
            outcomes.add("error")
    assert "error" in outcomes


def test_npz_compressed_and_deflate_corruption(tmp_path):
    p = tmp_path / "c.npz"
    np.savez_compressed(p, indptr=np.array([0, 1, 2]), indices=np.array([1, 0]))
    assert load_npz(p).nnz == 2
    data = bytearray(p.read_bytes())
    with zipfile.ZipFile(p) as zf:
        info = zf.getinfo("indices.npy")
    off = info.header_offset  # local header: name and extra lengths at bytes 26..29
    start = off + 30 + int.from_bytes(data[off + 26:off + 28], "little") + int.from_bytes(data[off + 28:off + 30],
                                                                                          "little")
    data[start + 5] ^= 0xFF  # inside the deflate stream
    p.write_bytes(bytes(data))
    _fails(load_npz, p, name="c.npz")


def test_npy_renamed_npz(tmp_path):
    p = tmp_path / "a.npz"
    with open(p, "wb") as fh:
        np.save(fh, np.arange(5))
    _fails(load_npz, p, name="a.npz", words=(".npy",))


@pytest.mark.parametrize("change,word", [
    (dict(indices=np.array([1, 0, 2, 1], dtype=object)), "dtype object"),
    (dict(indices=np.array(["1", "0", "2", "1"])), "dtype <U1"),
    (dict(indices=np.array([1.0, 0.0, 2.0, 1.0])), "dtype float64"),
    (dict(indptr=np.array([0, 1, 3, 4], dtype=np.complex64)), "complex"),
    (dict(data=np.array([1j, 1, 1, 1])), "complex"),
    (dict(x=np.array([["a", "b"]] * 3)), "dtype <U1"),
    (dict(indptr=np.array([[0, 1, 3, 4]])), "1-D"),
    (dict(indices=np.array([1, 0, 2])), "indptr"),
    (dict(indptr=np.array([0, 3, 1, 4])), "invalid CSR"),
    (dict(indices=np.array([1, 0, 2, 1], dtype=np.uint64) + np.uint64(2 ** 63)), "64-bit"),
    (dict(shape=np.array([3.0, 3.0])), "shape"),
    (dict(shape=np.array([3, 3, 3])), "square"),
    (dict(shape=np.array([10 ** 15, 10 ** 15])), "indptr has 4 entries"),
    (dict(data=np.ones((2, 2))), "data"),
    (dict(x=np.ones((3, 2, 2))), "2-D"),
    (dict(y=np.ones((3, 2), dtype=int)), "1-D"),
    (dict(format=np.array([], dtype="<U3")), "one value"),
    (dict(name=np.array(["a", "b"])), "one value"),
    (dict(train_mask=np.array([0.5, 0, 0])), "train_mask"),
    (dict(original_ids=np.array([5, 3, 9])), "increasing"),
    (dict(original_ids=np.array([1, 2])), "original_ids"),
])
def test_npz_wrong_dtypes_and_shapes(tmp_path, change, word):
    arrs = dict(indptr=np.array([0, 1, 3, 4]), indices=np.array([1, 0, 2, 1]), x=np.ones((3, 2)),
                y=np.array([0, 1, 0]), train_mask=np.array([1, 0, 0], dtype=bool))
    arrs.update(change)
    p = tmp_path / "bad.npz"
    np.savez(p, **arrs)
    _fails(load_npz, p, name="bad.npz", words=(word,))


def _zip_with(path, name: str, payload: bytes, *, compress=zipfile.ZIP_STORED, tweak=None):
    with zipfile.ZipFile(path, "w", compression=compress) as zf:
        zf.writestr(name, payload)
    if tweak:
        data = bytearray(path.read_bytes())
        tweak(data)
        path.write_bytes(bytes(data))


def _npy_bytes(arr, *, shape=None, descr=None) -> bytes:
    import io

    buf = io.BytesIO()
    np.save(buf, arr)
    raw = buf.getvalue()
    if shape is not None or descr is not None:
        hlen = int.from_bytes(raw[8:10], "little")
        header = raw[10:10 + hlen].decode("latin1")
        if shape is not None:
            header = header.replace(repr(arr.shape), repr(shape))
        if descr is not None:
            header = header.replace(repr(arr.dtype.str), repr(descr))
        header = header.rstrip()
        header = header + " " * (hlen - 1 - len(header)) + "\n"
        raw = raw[:10] + header.encode("latin1")[:hlen] + raw[10 + hlen:]
    return raw


def test_npz_header_declaring_a_huge_array_is_refused_before_allocating(tmp_path):
    p = tmp_path / "huge.npz"
    _zip_with(p, "indptr.npy", _npy_bytes(np.arange(4, dtype=np.int64), shape=(10 ** 12,)))
    _fails(load_npz, p, name="huge.npz", words=("indptr", "8000000000000 bytes"))
    q = tmp_path / "huge.npy"
    q.write_bytes(_npy_bytes(np.arange(4, dtype=np.int64), shape=(10 ** 12,)))
    _fails(read_npy, q, name="huge.npy", words=("8000000000000 bytes",))


def test_npz_zip_bombs_and_odd_members(tmp_path):
    good = _npy_bytes(np.arange(4, dtype=np.int64))
    p = tmp_path / "z.npz"

    def claim_size(data):  # central-directory and local file_size say 2**31
        for sig, off in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):
            i = data.find(sig)
            data[i + off:i + off + 4] = (2 ** 31).to_bytes(4, "little")

    _zip_with(p, "indptr.npy", good, compress=zipfile.ZIP_DEFLATED, tweak=claim_size)
    _fails(load_npz, p, name="z.npz", words=("more than the compression can produce",))
    _zip_with(p, "indptr.npy", good, compress=zipfile.ZIP_BZIP2)
    _fails(load_npz, p, name="z.npz", words=("compression method",))

    def encrypt_flag(data):
        for sig, off in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
            i = data.find(sig)
            data[i + off] |= 1

    _zip_with(p, "indptr.npy", good, tweak=encrypt_flag)
    _fails(load_npz, p, name="z.npz", words=("encrypted",))
    _zip_with(p, "indptr.npy", _npy_bytes(np.arange(4), descr="|O"))
    _fails(load_npz, p, name="z.npz", words=("object",))
    _zip_with(p, "indptr.npy", b"\x93NUMPY\x01\x00" + b"\xff\xff" + b"{" * 70000)
    _fails(load_npz, p, name="z.npz")
    _zip_with(p, "indptr.npy", b"\x93NUMPY\x03\x00" + (2 ** 31).to_bytes(4, "little") + b"{")
    _fails(load_npz, p, name="z.npz", words=("header",))
    with zipfile.ZipFile(p, "w") as zf, pytest.warns(UserWarning, match="Duplicate name"):
        zf.writestr("indptr.npy", good)
        zf.writestr("indices.npy", good)
        zf.writestr("indices.npy", good)
    _fails(load_npz, p, name="z.npz", words=("twice",))
