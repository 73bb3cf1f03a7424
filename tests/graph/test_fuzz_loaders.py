"""Property-based fuzzing of every loader: random bytes, truncations and mutations of small valid files.

Every example must end in a :class:`~gridgnn.errors.GridGnnError` (or a valid result), never in another
exception type, within the hypothesis deadline (2 s), and without a huge allocation: each example runs under an
address-space limit of the current size + 2 GiB, so an attempt to allocate more fails the test with a
``MemoryError`` instead of going unnoticed. Derandomized (the same examples on every run), 80 examples per
loader, about 10 s in all; ``GRIDGNN_FUZZ_EXAMPLES=N`` runs ``N`` randomized examples per loader instead.
"""
import atexit
import contextlib
import functools
import io
import json
import os
import pickle
import shutil
import tempfile
import zipfile
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

hypothesis = pytest.importorskip("hypothesis", reason="hypothesis is needed for the fuzz tests (pip install "
                                                      "'hypothesis>=6.80')")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from gridgnn.errors import GridGnnError  # noqa: E402
from gridgnn.graph import Graph  # noqa: E402
from gridgnn.graph.loaders import load_edgelist, load_mtx, load_npz, load_planetoid, save_npz  # noqa: E402
from gridgnn.graph.planetoid import PARTS  # noqa: E402
from gridgnn.graph.sharded import ShardedDataset, write_sharded  # noqa: E402
from gridgnn.partition.layout import RowPartition  # noqa: E402
from gridgnn.partition.partitioners import load_partition_file  # noqa: E402
from gridgnn.partition.permute import double_permutation  # noqa: E402

from ._util import random_graph  # noqa: E402

# GRIDGNN_FUZZ_EXAMPLES=5000 runs a longer, randomized search (new examples on every run)
_DEEP = int(os.environ.get("GRIDGNN_FUZZ_EXAMPLES", "0"))
FUZZ = settings(max_examples=_DEEP or 80, deadline=2000, derandomize=not _DEEP, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# ------------------------------------------------------------------------------------------ helpers
@contextlib.contextmanager
def _address_space_cap(extra: int = 2 << 30):
    """Limit this process's address space to its current size + ``extra`` while the block runs."""
    try:
        import resource

        size = None
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmSize:"):
                    size = int(line.split()[1]) * 1024
        old = resource.getrlimit(resource.RLIMIT_AS)
    except (ImportError, OSError, ValueError):
        yield
        return
    if size is None:
        yield
        return
    cap = size + extra
    if old[1] != resource.RLIM_INFINITY:
        cap = min(cap, old[1])
    resource.setrlimit(resource.RLIMIT_AS, (cap, old[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, old)


def _expect_error_or(call, ok_type):
    """Run ``call``: a GridGnnError (one line) or a result of ``ok_type`` passes; anything else fails."""
    with _address_space_cap():
        try:
            out = call()
        except GridGnnError as e:
            assert "\n" not in str(e), str(e)
            return None
    assert isinstance(out, ok_type), type(out)
    if isinstance(out, Graph):
        out.validate()
    return out


def _mutated(valid: bytes, max_random: int = 600):
    """Random bytes, truncations, byte replacements, insertions and deletions of ``valid``."""
    n = len(valid)

    def replace(edits):
        b = bytearray(valid)
        for pos, val in edits:
            b[pos % n] = val
        return bytes(b)

    def splice(args):
        pos, length, insert = args
        pos %= n + 1
        return valid[:pos] + insert + valid[pos + length:]

    return st.one_of(
        st.binary(max_size=max_random),
        st.integers(0, n).map(lambda k: valid[:k]),
        st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, 255)), min_size=1, max_size=8).map(replace),
        st.tuples(st.integers(0, n), st.integers(0, 16), st.binary(max_size=16)).map(splice),
    )


def _rezipped(valid_npz: bytes):
    """A valid zip archive whose one ``.npy`` member is mutated (so the mutation gets past the zip CRC)."""
    with zipfile.ZipFile(io.BytesIO(valid_npz)) as zf:
        members = {i.filename: zf.read(i) for i in zf.infolist()}

    def build(args):
        name, payload = args
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as out:
            for k, v in members.items():
                out.writestr(k, payload if k == name else v)
        return buf.getvalue()

    return st.sampled_from(sorted(members)).flatmap(
        lambda name: st.tuples(st.just(name), _mutated(members[name], max_random=200))).map(build)


def _text_mutated(valid: str):
    """Mutations that keep the text readable, so the parser (not the UTF-8 decoder) sees them."""
    tokens = st.sampled_from(["0", "1", "-1", "99999999999999999999", "9223372036854775807", "1e999", "nan",
                              "1.5", "x", "%", "#", ",", " ", "\n", "\t", "%%MatrixMarket", "matrix",
                              "coordinate", "pattern", "real", "symmetric", "1000000000000"])
    lines = valid.split("\n")

    def edit(args):
        idx, new = args
        out = list(lines)
        out[idx % len(out)] = new
        return "\n".join(out).encode()

    return st.one_of(
        st.tuples(st.integers(0, len(lines) - 1), st.lists(tokens, max_size=6).map(" ".join)).map(edit),
        st.text(max_size=300).map(lambda t: t.encode("utf-8", "surrogatepass")),
    )


# ------------------------------------------------------------------------------------------ valid samples
def _edgelist_text() -> str:
    return "# src dst weight\n0 1 1.5\n1 2 2\n2 0 1\n3 1 0.5\n4 4 1\n"


def _mtx_text() -> str:
    return "%%MatrixMarket matrix coordinate real general\n% comment\n5 5 5\n1 2 1.5\n2 3 2\n3 1 1\n4 2 0.5\n5 5 1\n"


@functools.lru_cache(maxsize=None)
def _npz_bytes(compressed: bool) -> bytes:
    g = random_graph(n=8, m=14, directed=True, weighted=True, seed=3, f=2, classes=2, isolated=1)
    buf = io.BytesIO()
    arrs = dict(indptr=g.indptr, indices=g.indices, data=g.values, shape=np.array([g.n, g.n]), format=np.array("csr"),
                x=g.x, y=g.y, train_mask=g.train_mask, name=np.array("fuzz"))
    (np.savez_compressed if compressed else np.savez)(buf, **arrs)
    return buf.getvalue()


@functools.lru_cache(maxsize=None)
def _planetoid_files() -> dict:
    """A tiny Planetoid dataset 'toy' (8 vertices, 2 classes, 2 features), pickled like the real ones."""
    r = np.random.default_rng(0)
    n_all, n_test, f, c = 5, 3, 2, 2
    feats = (r.random((n_all + n_test, f)) < 0.6).astype(np.float32)
    labels = np.eye(c, dtype=np.int32)[r.integers(0, c, n_all + n_test)]
    graph = defaultdict(list, {i: [int(j) for j in r.choice(8, 2, replace=False)] for i in range(8)})
    objs = dict(x=sp.csr_matrix(feats[:2]), tx=sp.csr_matrix(feats[n_all:]), allx=sp.csr_matrix(feats[:n_all]),
                y=labels[:2], ty=labels[n_all:], ally=labels[:n_all], graph=graph)
    files = {part: pickle.dumps(obj, protocol=2) for part, obj in objs.items()}
    files["test.index"] = "".join(f"{i}\n" for i in (6, 5, 7)).encode()
    return files


@functools.lru_cache(maxsize=None)
def _sharded_dir() -> Path:
    root = Path(tempfile.mkdtemp(prefix="gridgnn-fuzz-"))
    atexit.register(shutil.rmtree, root, True)
    g = random_graph(n=12, m=30, directed=True, weighted=True, seed=4, f=3, classes=3, isolated=1)
    pr, pc = double_permutation(g.n, 1)
    write_sharded(g, root / "ds", perm_r=pr, perm_c=pc, blocks=(2, 2), partition_name="fuzz", seed=1,
                  node_chunks=2)
    return root / "ds"


def _read_everything(path: Path):
    ds = ShardedDataset(path)
    for v in ("rc", "cr"):
        ds.submatrix(v, (0, ds.n), (0, ds.n))
    for name in ds.node_array_names():
        ds.node_array(name)
    return ds


# ------------------------------------------------------------------------------------------ the properties
@FUZZ
@given(data=st.one_of(_mutated(_edgelist_text().encode()), _text_mutated(_edgelist_text())),
       relabel=st.booleans())
def test_fuzz_edgelist(data, relabel):
    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / "g.txt"
        p.write_bytes(data)
        _expect_error_or(lambda: load_edgelist(p, relabel=relabel), Graph)


@FUZZ
@given(data=st.one_of(_mutated(_mtx_text().encode()), _text_mutated(_mtx_text())), relabel=st.booleans())
def test_fuzz_mtx(data, relabel):
    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / "g.mtx"
        p.write_bytes(data)
        _expect_error_or(lambda: load_mtx(p, relabel=relabel), Graph)


@FUZZ
@given(data=st.one_of(_mutated(_npz_bytes(False)), _mutated(_npz_bytes(True)), _rezipped(_npz_bytes(False))))
def test_fuzz_npz(data):
    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / "g.npz"
        p.write_bytes(data)
        g = _expect_error_or(lambda: load_npz(p), Graph)
        if g is not None:  # whatever loaded can be written and read back
            assert load_npz(save_npz(g, Path(tmp) / "back.npz")).n == g.n


def test_planetoid_sample_is_valid():
    with tempfile.TemporaryDirectory() as tmp:
        for part, data in _planetoid_files().items():
            (Path(tmp) / f"ind.toy.{part}").write_bytes(data)
        g = load_planetoid(tmp)
        assert g.n == 8 and g.num_classes == 2 and g.test_mask.sum() == 3


@FUZZ
@given(part=st.sampled_from(PARTS), data=st.data())
def test_fuzz_planetoid(part, data):
    files = dict(_planetoid_files())
    files[part] = data.draw(_mutated(files[part]), label=f"ind.toy.{part}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, raw in files.items():
            (Path(tmp) / f"ind.toy.{name}").write_bytes(raw)
        _expect_error_or(lambda: load_planetoid(tmp), Graph)


def _json_values():
    return st.recursive(st.none() | st.booleans() | st.integers(-2 ** 70, 2 ** 70) | st.floats()
                        | st.text(max_size=12) | st.sampled_from(["../../x", "/etc/passwd", "rc", "cr", "<f8", "|O"]),
                        lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6),
                                                                                          children, max_size=3),
                        max_leaves=8)


def test_sharded_sample_is_valid():
    ds = _read_everything(_sharded_dir())
    assert ds.n == 12 and ds.double


@FUZZ
@given(data=st.data())
def test_fuzz_sharded_meta(data):
    src = _sharded_dir()
    meta = json.loads((src / "meta.json").read_text())
    how = data.draw(st.sampled_from(["bytes", "field", "nested"]), label="how")
    if how == "bytes":
        raw = data.draw(_mutated((src / "meta.json").read_bytes(), max_random=200), label="meta.json")
    else:
        key = data.draw(st.sampled_from(sorted(meta)), label="key")
        if how == "field" or not isinstance(meta[key], (dict, list)) or not meta[key]:
            meta[key] = data.draw(_json_values(), label="value")
        elif isinstance(meta[key], dict):
            sub = data.draw(st.sampled_from(sorted(meta[key])), label="subkey")
            meta[key][sub] = data.draw(_json_values(), label="value")
        else:
            idx = data.draw(st.integers(0, len(meta[key]) - 1), label="index")
            meta[key][idx] = data.draw(_json_values(), label="value")
        raw = json.dumps(meta).encode()
    with tempfile.TemporaryDirectory() as tmp:
        dst = Path(tmp) / "ds"
        shutil.copytree(src, dst)
        (dst / "meta.json").write_bytes(raw)
        _expect_error_or(lambda: _read_everything(dst), ShardedDataset)


@functools.lru_cache(maxsize=None)
def _sharded_files() -> tuple:
    src = _sharded_dir()
    return tuple(sorted(str(p.relative_to(src)) for p in src.rglob("*") if p.is_file() and p.name != "meta.json"))


@FUZZ
@given(data=st.data())
def test_fuzz_sharded_block_and_node_files(data):
    src = _sharded_dir()
    rel = data.draw(st.sampled_from(_sharded_files()), label="file")
    valid = (src / rel).read_bytes()
    strategy = st.one_of(_mutated(valid, max_random=300), _rezipped(valid)) if rel.endswith(".npz") else \
        _mutated(valid, max_random=300)
    raw = data.draw(strategy, label="content")
    with tempfile.TemporaryDirectory() as tmp:
        dst = Path(tmp) / "ds"
        shutil.copytree(src, dst)
        (dst / rel).write_bytes(raw)
        _expect_error_or(lambda: _read_everything(dst), ShardedDataset)


_PARTITION = "".join(f"{k % 3}\n" for k in range(10)).encode()


@FUZZ
@given(data=st.one_of(_mutated(_PARTITION, max_random=100),
                      st.lists(st.sampled_from(["0", "1", "2", "3", "-1", "1.0", "10" * 12, " ", "", "x", "+2"]),
                               min_size=8, max_size=12).map(lambda t: "\n".join(t).encode())))
def test_fuzz_partition_file(data):
    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / "g.part"
        p.write_bytes(data)
        rp = _expect_error_or(lambda: load_partition_file(p, 10, 3), RowPartition)
        if rp is not None:
            assert rp.n == 10 and rp.parts == 3
