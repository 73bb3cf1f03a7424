"""Planetoid files are read by a restricted unpickler: same arrays as PyG, and no code runs from a crafted file."""
import ast
import os
import pickle
import shutil
import struct
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from gridgnn.errors import GridGnnError
from gridgnn.graph import Graph
from gridgnn.graph.loaders import load_planetoid, normalize_features, row_normalize
from gridgnn.graph.planetoid import PARTS, load_pickle, read_planetoid_arrays

PLANETOID = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "planetoid"
GRAPH_SRC = Path(__file__).resolve().parents[2] / "src" / "gridgnn" / "graph"


def _dataset(name: str) -> Path:
    d = PLANETOID / name
    if not d.is_dir():
        pytest.skip(f"Planetoid {name} not found at ../shared/data/planetoid/{name} (relative to the repo)")
    return d


def _writable_copy(src: Path, dst: Path) -> Path:
    dst.mkdir()
    for f in src.iterdir():
        (dst / f.name).write_bytes(f.read_bytes())
    return dst


# ------------------------------------------------------------------------------------------ equal to PyG
@pytest.mark.parametrize("name", ["cora", "citeseer"])
def test_arrays_equal_pyg_read_planetoid_data(name):
    d = _dataset(name)
    from torch_geometric.io import read_planetoid_data  # the reference (pickle.load of the trusted shared files)

    ref = read_planetoid_data(str(d), name)
    got = read_planetoid_arrays(d, name)
    for key in ("x", "y", "edge_index", "train_mask", "val_mask", "test_mask"):
        want = getattr(ref, key).numpy()
        assert got[key].dtype == want.dtype, key
        np.testing.assert_array_equal(got[key], want, err_msg=key)
    if name == "citeseer":  # the isolated test nodes are padded with zero feature rows and label 0
        assert got["x"].shape == (3327, 3703) and int((got["x"].sum(axis=1) == 0).sum()) >= 15


@pytest.mark.parametrize("name", ["cora", "citeseer"])
def test_graph_equals_the_pyg_based_loader(name):
    d = _dataset(name)
    from torch_geometric.io import read_planetoid_data

    ref = read_planetoid_data(str(d), name)
    ei = ref.edge_index.numpy()
    want = Graph.from_edges(ei[0], ei[1], ref.num_nodes, directed=False, x=ref.x.numpy(),
                            y=ref.y.numpy(), train_mask=ref.train_mask.numpy(), val_mask=ref.val_mask.numpy(),
                            test_mask=ref.test_mask.numpy())
    g = load_planetoid(d)
    for key in ("indptr", "indices", "x", "y", "train_mask", "val_mask", "test_mask"):
        np.testing.assert_array_equal(getattr(g, key), getattr(want, key), err_msg=key)
    assert g.n == want.n and not g.directed and g.values is None and g.name == name
    assert g.meta["feature_norm"] == "row"  # raw as PyG's; --feature-norm auto row-normalizes (the model records it)
    assert np.array_equal(normalize_features(g.x, "row"), row_normalize(ref.x.numpy()))


def test_loader_does_not_use_pyg(cora_dir, monkeypatch):
    import torch_geometric.io

    def boom(*args, **kwargs):
        raise AssertionError("read_planetoid_data must not be called")

    monkeypatch.setattr(torch_geometric.io, "read_planetoid_data", boom)
    monkeypatch.setattr(pickle, "load", boom)
    monkeypatch.setattr(pickle, "loads", boom)
    g = load_planetoid(cora_dir)
    assert g.n == 2708 and g.nnz == 10556


def _dotted(node) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return "?"


def test_no_unrestricted_deserialization_in_graph_package():
    """No call in gridgnn/graph unpickles without a restricted unpickler (docstrings may mention them): Planetoid's
    own, or torch.load(weights_only=True)."""
    banned = ("pickle.load", "pickle.loads", "pickle.Unpickler", "torch.load", "np.load", "numpy.load", "mmread",
              "read_planetoid_data", "scipy.io.mmread")
    for f in sorted(GRAPH_SRC.glob("*.py")):
        tree = ast.parse(f.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                name = _dotted(node.func)
                restricted = name.endswith("torch.load") and any(  # torch's allow-list unpickler (ogbl splits)
                    kw.arg == "weights_only" and getattr(kw.value, "value", None) is True for kw in node.keywords)
                assert restricted or not any(name == b or name.endswith("." + b) for b in banned), \
                    f"{f.name} calls {name}"
                for kw in node.keywords:
                    assert not (kw.arg == "allow_pickle" and getattr(kw.value, "value", False) is True), f.name
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                mod = getattr(node, "module", None) or ""
                names = [a.name for a in node.names]
                assert not mod.startswith("torch_geometric.io") and "torch_geometric.io" not in names, f.name
    # the one unpickler subclasses pickle.Unpickler and overrides find_class
    from gridgnn.graph.planetoid import PlanetoidUnpickler

    assert issubclass(PlanetoidUnpickler, pickle.Unpickler)
    assert PlanetoidUnpickler.find_class is not pickle.Unpickler.find_class


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_python3_pickles_of_every_protocol_read_the_same(cora_dir, tmp_path, protocol):
    ref = read_planetoid_arrays(cora_dir, "cora")
    d = tmp_path / "cora"
    d.mkdir()
    for part in PARTS[:-1]:
        obj = load_pickle(cora_dir / f"ind.cora.{part}")
        if part == "graph":
            out = defaultdict(list)
            out.update(obj)
        else:
            from gridgnn.graph.planetoid import _matrix

            m = _matrix(obj, part)
            out = sp.csr_matrix(m.astype(np.float32)) if part in ("x", "tx", "allx") else \
                np.asarray(m).astype(np.int32)
        (d / f"ind.cora.{part}").write_bytes(pickle.dumps(out, protocol=protocol))
    shutil.copy(cora_dir / "ind.cora.test.index", d)
    got = read_planetoid_arrays(d, "cora")
    for key in ref:
        np.testing.assert_array_equal(got[key], ref[key], err_msg=key)


def test_other_sparse_formats_read_the_same(cora_dir, tmp_path):
    ref = read_planetoid_arrays(cora_dir, "cora")
    from gridgnn.graph.planetoid import _matrix

    for fmt in ("csc", "coo", "lil"):
        d = _writable_copy(cora_dir, tmp_path / fmt)
        for part in ("x", "tx", "allx"):
            m = _matrix(load_pickle(cora_dir / f"ind.cora.{part}"), part).astype(np.float32).asformat(fmt)
            (d / f"ind.cora.{part}").write_bytes(pickle.dumps(m, protocol=2))
        got = read_planetoid_arrays(d, "cora")
        np.testing.assert_array_equal(got["x"], ref["x"], err_msg=fmt)


# ------------------------------------------------------------------------------------------ crafted pickles
class _System:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


class _Exec:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return exec, (f"open({str(self.marker)!r}, 'w').write('pwned')",)


class _Subprocess:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return subprocess.call, (["touch", str(self.marker)],)


class _Eval:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return eval, (f"__import__('pathlib').Path({str(self.marker)!r}).touch()",)


def _payloads(marker: Path) -> dict:
    m = str(marker).encode()
    return {
        "os.system": pickle.dumps(_System(marker), protocol=2),
        "builtins.exec": pickle.dumps(_Exec(marker), protocol=2),
        "subprocess.call": pickle.dumps(_Subprocess(marker), protocol=0),
        "builtins.eval": pickle.dumps(_Eval(marker), protocol=4),
        # inside the adjacency dict, after legitimate-looking entries
        "nested in defaultdict": pickle.dumps(defaultdict(list, {0: [1], 1: [0], 2: [_System(marker)]}),
                                              protocol=2),
        # a defaultdict whose factory is os.system
        "defaultdict factory": b"\x80\x02ccollections\ndefaultdict\ncposix\nsystem\n\x85R.",
        # hand-written protocol-0 pickle with the classic GLOBAL/REDUCE payload
        "protocol 0 posix.system": b"cposix\nsystem\n(S'touch " + m + b"'\ntR.",
        # numpy's admitted _reconstruct called with os.system as the class
        "reconstruct with os.system": b"\x80\x02cnumpy.core.multiarray\n_reconstruct\ncposix\nsystem\n"
                                      b"(K\x00tU\x01b\x87R.",
        # STACK_GLOBAL (protocol 4) naming builtins.getattr
        "stack_global getattr": b"\x80\x04\x8c\x08builtins\x8c\x07getattr\x93.",
        # copyreg._reconstructor with a non-admitted class
        "reconstructor": b"\x80\x02ccopy_reg\n_reconstructor\ncposix\nsystem\nc__builtin__\nobject\nN\x87R.",
    }


@pytest.mark.parametrize("part", ["graph", "allx", "ty"])
@pytest.mark.parametrize("payload", list(_payloads(Path("/x"))))
def test_crafted_pickle_is_refused_and_does_not_run(cora_dir, tmp_path, part, payload):
    marker = tmp_path / "PWNED"
    d = _writable_copy(cora_dir, tmp_path / "cora")
    (d / f"ind.cora.{part}").write_bytes(_payloads(marker)[payload])
    with pytest.raises(GridGnnError) as e:
        load_planetoid(d)
    msg = str(e.value)
    assert f"ind.cora.{part}" in msg and "\n" not in msg
    assert "refused" in msg or "not" in msg
    assert not marker.exists(), f"the payload {payload!r} ran"


def test_refusal_message_names_the_global(cora_dir, tmp_path):
    marker = tmp_path / "PWNED"
    d = _writable_copy(cora_dir, tmp_path / "cora")
    (d / "ind.cora.graph").write_bytes(pickle.dumps(_System(marker), protocol=2))
    with pytest.raises(GridGnnError, match=r"ind\.cora\.graph: refused to load: .*posix\.system.*no code"):
        load_planetoid(d)
    assert not marker.exists()


def test_payload_in_a_subprocess_leaves_no_marker(cora_dir, tmp_path):
    """The same check end to end through the command-line loader path, in a fresh interpreter."""
    marker = tmp_path / "PWNED"
    d = _writable_copy(cora_dir, tmp_path / "cora")
    (d / "ind.cora.graph").write_bytes(pickle.dumps(_System(marker), protocol=2))
    code = ("import sys\nfrom gridgnn.graph import load_graph\nfrom gridgnn.errors import GridGnnError\n"
            "try:\n    load_graph(sys.argv[1])\nexcept GridGnnError as e:\n    print('ERR', e)\n")
    r = subprocess.run([sys.executable, "-c", code, f"planetoid:{d}"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.startswith("ERR ") and "refused" in r.stdout, r.stderr
    assert not marker.exists()


ABUSE = {
    # memo index 2**32-1: the C unpickler would allocate a 32 GiB memo table
    "memo index": b"\x80\x02Nr" + struct.pack("<I", 2 ** 32 - 1) + b".",
    # a BINBYTES8 of 2**60 bytes
    "bytes8 length": b"\x80\x04\x8e" + struct.pack("<Q", 2 ** 60) + b"abc.",
    # numpy's _reconstruct asked for a 2**28-element array
    "reconstruct shape": b"\x80\x02cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\nJ\x00\x00\x00\x10\x85"
                         b"U\x01b\x87R.",
    # an array state whose shape needs far more bytes than given
    "array state": b"\x80\x02cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\nK\x00\x85U\x01b\x87R"
                   b"(K\x01J\x00\x00\x00\x40\x85cnumpy\ndtype\nU\x02f8K\x00K\x01\x87R(K\x03U\x01<NNNJ\xff\xff\xff\xff"
                   b"J\xff\xff\xff\xffK\x00tb\x89U\x08\x00\x00\x00\x00\x00\x00\x00\x00tb.",
    # BUILD on the admitted numpy.ndarray global (would set class attributes)
    "build on class": b"\x80\x02cnumpy\nndarray\n}U\x03fooK\x01sb.",
    "build slots on class": b"\x80\x02cnumpy\nndarray\nN}U\x03fooK\x01s\x86b.",
    "build on function": b"\x80\x02cnumpy\ndtype\n}U\x03fooK\x01sb.",
    # _codecs.encode with a decompressing codec
    "codec": b"\x80\x02c_codecs\nencode\nX\x01\x00\x00\x00aX\x04\x00\x00\x00zlib\x86R.",
    # object dtype where numbers are expected
    "object array": pickle.dumps(np.array([[1], [2]], dtype=object), protocol=2),
    "object array in csr": pickle.dumps(sp.csr_matrix(np.eye(2)), protocol=2).replace(b"X\x02\x00\x00\x00f8",
                                                                                      b"X\x02\x00\x00\x00O8"),
    # sparse matrices whose shapes are huge but hold one entry (nothing may be allocated per row or column)
    "huge csc shape": pickle.dumps(sp.csc_matrix((np.ones(1, np.float32), np.array([3]), np.arange(1434) * 0 +
                                                  np.r_[0, np.ones(1433, int)]), shape=(10 ** 12, 1433)), protocol=2),
    "huge coo shape": pickle.dumps(sp.coo_matrix((np.ones(1, np.float32), (np.array([3]), np.array([1]))),
                                                 shape=(1708, 10 ** 12)), protocol=2),
    "persistent id": b"\x80\x02U\x01aQ.",
    "extension code": b"\x80\x02\x82\x01.",
    "deep marks": b"\x80\x02" + b"(" * 100_000 + b".",
    "empty": b"",
    "not a pickle": b"hello world\n",
}


@pytest.mark.parametrize("name", list(ABUSE))
def test_abuse_of_admitted_names_is_refused(cora_dir, tmp_path, name):
    import tracemalloc

    d = _writable_copy(cora_dir, tmp_path / "cora")
    (d / "ind.cora.allx").write_bytes(ABUSE[name])
    tracemalloc.start()
    try:
        with pytest.raises(GridGnnError) as e:
            load_planetoid(d)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    msg = str(e.value)
    assert ("ind.cora.allx" in msg or "allx has 1000000000000" in msg) and "\n" not in msg, msg
    assert peak < 200e6, f"{peak / 1e6:.0f} MB allocated for a {len(ABUSE[name])}-byte file"
    # the admitted placeholders were not modified: a clean load still works
    assert load_planetoid(cora_dir).n == 2708


def test_inconsistent_sizes(cora_dir, tmp_path):
    d = _writable_copy(cora_dir, tmp_path / "cora")
    (d / "ind.cora.test.index").write_text("1708\n999999999999\n")
    with pytest.raises(GridGnnError, match="test.index"):
        load_planetoid(d)
    (d / "ind.cora.test.index").write_text("1708\n1708\n")
    with pytest.raises(GridGnnError, match="twice"):
        load_planetoid(d)
    (d / "ind.cora.test.index").write_text("1708\nabc\n")
    with pytest.raises(GridGnnError, match="not a vertex id"):
        load_planetoid(d)
    for first in (0, 1707):  # test ids that do not start where allx's rows end: tx would land on other vertices
        (d / "ind.cora.test.index").write_text("\n".join(map(str, range(first, first + 1000))) + "\n")
        with pytest.raises(GridGnnError, match=f"smallest id is {first}.*1708 rows of allx"):
            load_planetoid(d)
    _writable_copy(cora_dir, tmp_path / "c2")
    (tmp_path / "c2" / "ind.cora.graph").write_bytes(pickle.dumps({0: [1], 1: [10 ** 30]}, protocol=2))
    with pytest.raises(GridGnnError, match="64 bits"):
        load_planetoid(tmp_path / "c2")
    (tmp_path / "c2" / "ind.cora.graph").write_bytes(pickle.dumps({0: [1], 1: [5000]}, protocol=2))
    with pytest.raises(GridGnnError, match="ind.cora"):
        load_planetoid(tmp_path / "c2")
    (tmp_path / "c2" / "ind.cora.graph").write_bytes(pickle.dumps([1, 2], protocol=2))
    with pytest.raises(GridGnnError, match="adjacency dict"):
        load_planetoid(tmp_path / "c2")
