"""The data SPEC grammar: every scheme, the default and the error messages."""

import numpy as np
import pytest

from gridgnn.errors import GridGnnError
from gridgnn.graph import save_npz
from gridgnn.graph.spec import DEFAULT_SPEC, SCHEMES, load_graph, parse_spec

from ._util import random_graph


def test_default_spec():
    g = load_graph(None)
    assert g.meta["spec"] == DEFAULT_SPEC
    assert 3000 <= g.n <= 5000 and 6 <= g.num_classes <= 8 and 32 <= g.num_features <= 64
    assert abs(np.diff(g.indptr).mean() - 10) < 1
    assert load_graph("").meta["spec"] == DEFAULT_SPEC
    np.testing.assert_array_equal(load_graph(None, seed=0).indices, g.indices)
    assert not np.array_equal(load_graph(None, seed=1).y, g.y)


def test_synthetic_schemes():
    g = load_graph("synthetic:sbm?n=300&classes=3&avg_degree=6&features=5&p_in_ratio=0.9&noise=1", seed=2)
    assert g.n == 300 and g.num_classes == 3 and g.num_features == 5
    assert g.meta["seed"] == 2 and g.meta["p_in_ratio"] == 0.9
    g = load_graph("synthetic:rmat?scale=6&edge_factor=4")
    assert g.n == 64 and g.meta["edge_factor"] == 4
    assert load_graph("synthetic:sbm?n=200").n == 200  # others default


def test_file_schemes(tmp_path, monkeypatch):
    g = random_graph(n=12, m=30, directed=True, seed=0)
    save_npz(g, tmp_path / "g.npz")
    src, dst = g.edge_index()
    (tmp_path / "g.txt").write_text("".join(f"{s} {d}\n" for s, d in zip(src, dst)))
    (tmp_path / "g.mtx").write_text("%%MatrixMarket matrix coordinate pattern general\n12 12 2\n1 2\n2 3\n")
    monkeypatch.chdir(tmp_path)  # relative paths are relative to the current directory
    h = load_graph("npz:g.npz")
    np.testing.assert_array_equal(h.indices, g.indices)
    assert load_graph("edgelist:g.txt").directed
    e = load_graph("edgelist:g.txt?directed=0&num_nodes=15")
    assert not e.directed and e.n == 15
    assert load_graph(f"mtx:{tmp_path / 'g.mtx'}").nnz == 2
    with pytest.raises(GridGnnError, match="not found"):
        load_graph("npz:missing.npz")


def test_a_spec_made_absolute_names_the_file_the_loaders_read(tmp_path, monkeypatch):
    """What a checkpoint records and a resume compares: the path absolute, ``~`` expanded as the loaders expand it,
    the parameters kept; a synthetic SPEC or one that does not parse as it is."""
    from gridgnn.graph.spec import absolute_spec, spec_key

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    assert absolute_spec("npz:~/g.npz") == f"npz:{tmp_path}/home/g.npz"
    assert absolute_spec("edgelist:d/e.txt?directed=1") == f"edgelist:{tmp_path}/d/e.txt?directed=1"
    assert absolute_spec("sharded:ds") == f"sharded:{tmp_path}/ds"
    for same in ("synthetic:sbm?n=30", "bogus", None):
        assert absolute_spec(same) == same
    assert spec_key("npz:./home/g.npz") == spec_key("npz:~/g.npz") == spec_key(f"npz:{tmp_path}/home/g.npz")


def test_planetoid_scheme(cora_dir):
    g = load_graph(f"planetoid:{cora_dir}")
    assert g.n == 2708 and g.name == "cora"


def test_parse_spec():
    assert parse_spec("synthetic:rmat?scale=5") == ("synthetic:rmat", None, {"scale": 5})
    assert parse_spec("edgelist:a/b.txt?directed=1") == ("edgelist", "a/b.txt", {"directed": True})
    assert parse_spec("npz:x.npz") == ("npz", "x.npz", {})
    assert parse_spec("planetoid:C:/data/cora") == ("planetoid", "C:/data/cora", {})


@pytest.mark.parametrize("spec,words", [
    ("ogbn:foo", ["unknown data scheme", *SCHEMES]),
    ("cora", ["no scheme", "planetoid"]),
    ("synthetic:er?n=3", ["unknown synthetic generator", "sbm", "rmat"]),
    ("synthetic:sbm?nodes=10", ["unknown parameter 'nodes'", "n, classes, avg_degree, features"]),
    ("synthetic:sbm?n=ten", ["n='ten'", "integer"]),
    ("synthetic:sbm?avg_degree=x", ["avg_degree", "number"]),
    ("synthetic:sbm?n", ["'n'", "no value"]),
    ("synthetic:sbm?n=10&n=20", ["twice"]),
    ("synthetic:rmat?edge_factor=4", ["scale"]),
    ("synthetic:rmat?scale=1.5", ["scale", "integer"]),
    ("edgelist:g.txt?directed=maybe", ["directed", "0 or 1"]),
    ("edgelist:g.txt?weighted=1", ["unknown parameter", "directed, num_nodes, relabel"]),
    ("mtx:g.mtx?directed=1", ["unknown parameter", "num_nodes, relabel"]),
    ("npz:g.npz?num_nodes=3", ["unknown parameter", "none"]),
    ("edgelist:g.txt?relabel=maybe", ["relabel", "0 or 1"]),
    ("npz:", ["no path"]),
    ("synthetic:sbm?n=5&classes=9", ["classes"]),
    ("synthetic:sbm?n=50&train_per_class=0", ["train_per_class must be at least 1 (got 0)"]),
    ("sharded:runs/sh", ["is a sharded dataset, which training and inference ranks read block by block"]),
    ("synthetic:typed-sbm?n=60&train_per_class=-1", ["train_per_class must be at least 1 (got -1)"]),
])
def test_spec_errors(spec, words):
    with pytest.raises(GridGnnError) as e:
        load_graph(spec)
    for w in words:
        assert w in str(e.value), (w, str(e.value))
