"""The ogb:DIR data SPEC: a small dataset written in the exact OGB raw layout, its directions, and bad input."""
import gzip
import json
import shutil

import numpy as np
import pytest
import scipy.sparse as sp

from gridgnn.errors import GridGnnError
from gridgnn.graph.ogb import load_ogb
from gridgnn.graph.spec import SCHEMES, load_graph, parse_spec

from ..train._runs import run_main

N, F, CLASSES = 12, 5, 3
# 20 directed edges src,dst: a duplicate (0,1), a reciprocal pair (2,3)/(3,2), a self-loop (9,9); node 11 isolated
EDGES = np.array([(0, 1), (0, 1), (1, 2), (2, 3), (3, 2), (4, 0), (5, 4), (6, 5), (7, 6), (8, 7),
                  (1, 8), (9, 9), (10, 9), (3, 10), (2, 5), (6, 0), (7, 1), (8, 4), (10, 0), (5, 3)], dtype=np.int64)
UNLABELLED = 7
SPLIT = {"train": [0, 1, 2, 3, 4, 5], "valid": [6, 7, 8], "test": [9, 10, 11]}


def _features():
    return np.random.default_rng(0).normal(size=(N, F)).astype(np.float32)


def _labels():
    y = np.arange(N, dtype=np.int64) % CLASSES
    y[UNLABELLED] = -1
    return y


def write_gz(path, lines):
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as fh:
        fh.write("".join(f"{line}\n" for line in lines))
    return path


def write_ogb(root, *, counts=True, split_name="time", label_lines=None, feature_rows=None, edges=EDGES,
              split=None):
    """An OGB node-property-prediction folder (``raw/`` and ``split/<split_name>/``) under ``root``."""
    x = _features()
    raw = root / "raw"
    write_gz(raw / "edge.csv.gz", [f"{s},{d}" for s, d in edges])
    rows = [",".join(repr(float(v)) for v in row) for row in x]
    write_gz(raw / "node-feat.csv.gz", rows if feature_rows is None else rows[:feature_rows])
    labels = [("nan" if v < 0 else str(v)) for v in _labels()] if label_lines is None else label_lines
    write_gz(raw / "node-label.csv.gz", labels)
    if counts:
        write_gz(raw / "num-node-list.csv.gz", [str(N)])
        write_gz(raw / "num-edge-list.csv.gz", [str(len(edges))])
    write_gz(raw / "node_year.csv.gz", ["2020"] * N)  # present in ogbn-arxiv, not read
    for part, idx in (split or SPLIT).items():
        write_gz(root / "split" / split_name / f"{part}.csv.gz", [str(i) for i in idx])
    return root


@pytest.fixture
def ogb_dir(tmp_path):
    return write_ogb(tmp_path / "ogbn_toy")


def expected_adjacency(directed: bool) -> sp.csr_matrix:
    """Rows = destinations: the edge src,dst is the entry [dst, src]; duplicates count once."""
    a = sp.coo_matrix((np.ones(len(EDGES)), (EDGES[:, 1], EDGES[:, 0])), shape=(N, N)).tocsr()
    if not directed:
        a = a + a.T
    a = (a > 0).astype(np.float64).tocsr()
    a.sort_indices()
    return a


def assert_node_data(g, masks=SPLIT):
    assert g.x.dtype == np.float32 and g.y.dtype == np.int64
    np.testing.assert_array_equal(g.x, _features())
    np.testing.assert_array_equal(g.y, _labels())
    for key, part in (("train_mask", "train"), ("val_mask", "valid"), ("test_mask", "test")):
        m = getattr(g, key)
        assert m.dtype == bool
        np.testing.assert_array_equal(np.flatnonzero(m), masks[part], err_msg=key)


# ------------------------------------------------------------------------------------------ loading
def test_symmetrized_by_default(ogb_dir):
    g = load_graph("ogb:" + str(ogb_dir))
    exp = expected_adjacency(directed=False)
    assert g.n == N and not g.directed and g.values is None
    np.testing.assert_array_equal(g.indptr, exp.indptr)
    np.testing.assert_array_equal(g.indices, exp.indices)
    np.testing.assert_array_equal(g.csr().toarray(), exp.toarray())
    assert_node_data(g)
    assert g.name == "ogbn_toy" and g.num_classes == CLASSES
    assert g.meta["ogb_split"] == "time" and "time" in g.meta["split"]
    assert g.meta["source"] == str(ogb_dir) and g.meta["spec"] == "ogb:" + str(ogb_dir)
    json.dumps(g.meta)  # JSON-friendly
    assert load_graph(f"ogb:{ogb_dir}?directed=0&split=time").nnz == g.nnz


def test_directed_keeps_the_files_edges(ogb_dir):
    g = load_graph(f"ogb:{ogb_dir}?directed=1")
    exp = expected_adjacency(directed=True)
    assert g.directed and g.nnz == len({tuple(e) for e in EDGES.tolist()})
    np.testing.assert_array_equal(g.indptr, exp.indptr)
    np.testing.assert_array_equal(g.indices, exp.indices)
    m = g.csr().toarray()
    assert m[1, 0] == 1 and m[0, 1] == 0  # edge 0,1: source 0, destination 1, stored in row 1
    assert m[0, 4] == 1 and m[4, 0] == 0  # edge 4,0
    edge_index = g.edge_index()  # PyG order: row 0 = sources
    assert {tuple(e) for e in edge_index.T.tolist()} == {tuple(e) for e in EDGES.tolist()}
    assert_node_data(g)


def test_without_count_files_and_with_empty_label_lines(tmp_path):
    labels = [("" if v < 0 else str(v)) for v in _labels()]  # empty line = unlabelled
    labels[UNLABELLED - 1] = f"{labels[UNLABELLED - 1]}.0"  # "0.0"-style labels are integers too
    d = write_ogb(tmp_path / "ogbn_toy", counts=False, label_lines=labels)
    g = load_ogb(d)
    np.testing.assert_array_equal(g.indices, expected_adjacency(directed=False).indices)
    assert_node_data(g)
    # an unlabelled last node, written as an empty last line
    last = [str(v) for v in _labels()[:-1]] + [""]
    (d / "raw" / "node-label.csv.gz").unlink()
    write_gz(d / "raw" / "node-label.csv.gz", last)
    g = load_ogb(d)
    assert g.y[-1] == -1 and g.y.size == N


def test_split_choice(tmp_path):
    d = write_ogb(tmp_path / "ogbn_toy")
    other = {"train": [11, 10], "valid": [], "test": [0]}
    write_ogb(tmp_path / "ogbn_toy", split_name="random", split=other)
    with pytest.raises(GridGnnError, match=r"several splits \('random', 'time'\); pick one with \?split=NAME"):
        load_graph(f"ogb:{d}")
    g = load_graph(f"ogb:{d}?split=random")
    assert g.meta["ogb_split"] == "random"
    np.testing.assert_array_equal(np.flatnonzero(g.train_mask), [10, 11])
    assert not g.val_mask.any() and np.flatnonzero(g.test_mask).tolist() == [0]
    assert_node_data(load_graph(f"ogb:{d}?split=time"))
    with pytest.raises(GridGnnError, match=r"no split 'species'; available: 'random', 'time'"):
        load_graph(f"ogb:{d}?split=species")


def test_parse_spec_and_scheme_list():
    assert "ogb" in SCHEMES
    assert parse_spec("ogb:data/ogbn_arxiv?split=time&directed=1") == \
        ("ogb", "data/ogbn_arxiv", {"split": "time", "directed": True})
    assert parse_spec("ogb:ogbn_arxiv") == ("ogb", "ogbn_arxiv", {})
    with pytest.raises(GridGnnError, match="valid parameters: split, directed"):
        parse_spec("ogb:d?num_nodes=3")
    with pytest.raises(GridGnnError, match="must be 0 or 1"):
        parse_spec("ogb:d?directed=maybe")
    with pytest.raises(GridGnnError, match="names no path"):
        parse_spec("ogb:")


# ------------------------------------------------------------------------------------------ bad input
def _remove_feat(d):
    (d / "raw" / "node-feat.csv.gz").unlink()


def _short_features(d):
    write_ogb(d, feature_rows=N - 1)


def _long_features(d):
    rows = [",".join(["0.5"] * F)] * (N + 3)
    write_gz(d / "raw" / "node-feat.csv.gz", rows)


def _ragged_features(d):
    rows = [",".join(["0.5"] * F)] * N
    rows[4] = ",".join(["0.5"] * (F - 1))
    write_gz(d / "raw" / "node-feat.csv.gz", rows)


def _bad_feature(d):
    rows = [",".join(["0.5"] * F)] * N
    rows[2] = "0.5,abc,0.5,0.5,0.5"
    write_gz(d / "raw" / "node-feat.csv.gz", rows)


def _edge_out_of_range(d):
    write_ogb(d, edges=np.concatenate([EDGES, [[3, N]]]))


def _negative_edge(d):
    write_ogb(d, edges=np.concatenate([EDGES, [[-1, 2]]]))


def _edge_count_mismatch(d):
    write_gz(d / "raw" / "num-edge-list.csv.gz", [str(len(EDGES) + 1)])


def _three_column_edges(d):
    write_gz(d / "raw" / "edge.csv.gz", ["0,1,2", "1,2,3"])


def _overlap(d):
    write_ogb(d, split={"train": [0, 1, 2], "valid": [3, 4], "test": [5, 2]})


def _split_out_of_range(d):
    write_ogb(d, split={"train": [0, 1, 40], "valid": [3], "test": [5]})


def _split_not_integer(d):
    write_gz(d / "split" / "time" / "valid.csv.gz", ["3", "1.5"])


def _missing_split_file(d):
    (d / "split" / "time" / "test.csv.gz").unlink()


def _no_split(d):
    shutil.rmtree(d / "split")


def _multi_label(d):
    write_ogb(d, label_lines=[",".join(["0", "1", "1"])] * N)


def _label_count(d):
    write_ogb(d, label_lines=["1"] * (N - 2))


def _trailing_blank_label(d):
    write_ogb(d, label_lines=["1"] * N + [""])


def _label_not_integer(d):
    write_ogb(d, label_lines=["1"] * 5 + ["1.5"] + ["0"] * (N - 6))


def _label_not_number(d):
    write_ogb(d, label_lines=["1"] * 5 + ["cat"] + ["0"] * (N - 6))


def _not_gzip(d):
    (d / "raw" / "edge.csv.gz").write_text("0,1\n1,2\n")


def _truncated_gzip(d):
    p = d / "raw" / "node-feat.csv.gz"
    p.write_bytes(p.read_bytes()[:-12])


def _two_graphs(d):
    write_gz(d / "raw" / "num-node-list.csv.gz", [str(N), "5"])


def _heterogeneous(d):
    (d / "raw" / "relations").mkdir()


BAD = [
    (_remove_feat, "raw/node-feat.csv.gz: file not found"),
    (_short_features, r"node-feat.csv.gz: features have 11 rows for 12 nodes"),
    (_long_features, r"node-feat.csv.gz: features have more than 12 rows for 12 nodes"),
    (_ragged_features, r"node-feat.csv.gz: line 5: expected 5 comma-separated columns, found 4"),
    (_bad_feature, r"node-feat.csv.gz: line 3: feature 'abc' is not a number"),
    (_edge_out_of_range, r"edge.csv.gz: edge 21 \(3,12\): vertex id 12 out of range for 12 nodes"),
    (_negative_edge, r"edge.csv.gz: edge 21 \(-1,2\): vertex id -1 out of range"),
    (_edge_count_mismatch, r"edge.csv.gz: 20 edges, but num-edge-list.csv.gz declares 21"),
    (_three_column_edges, r"edge.csv.gz: .*expected 2 columns"),
    (_overlap, r"split/time: node 2 is in both train.csv.gz and test.csv.gz \(the splits must be disjoint\)"),
    (_split_out_of_range, r"train.csv.gz: node index 40 out of range for 12 nodes"),
    (_split_not_integer, r"valid.csv.gz: line 2: node index '1.5' is not an integer"),
    (_missing_split_file, r"split/time/test.csv.gz: file not found"),
    (_no_split, r"no split/ folder"),
    (_multi_label, r"node-label.csv.gz: labels have 3 columns per node: multi-label targets .* not single-class"),
    (_label_count, r"node-label.csv.gz: 10 labels for 12 nodes \(num-node-list.csv.gz; one line per node, nan or "
                   r"empty = unlabelled\)$"),
    (_trailing_blank_label, r"13 labels for 12 nodes .* its last line, empty or nan, is one node too many"),
    (_label_not_integer, r"node-label.csv.gz: line 6: label 1.5 is not an integer class id"),
    (_label_not_number, r"node-label.csv.gz: line 6: label 'cat' is not a number"),
    (_not_gzip, r"edge.csv.gz: not a readable gzip file"),
    (_truncated_gzip, r"node-feat.csv.gz: not a readable gzip file"),
    (_two_graphs, r"num-node-list.csv.gz: expected one integer .* found 2 lines"),
    (_heterogeneous, r"heterogeneous OGB dataset"),
]


@pytest.mark.parametrize("damage,message", BAD, ids=[f.__name__.strip("_") for f, _ in BAD])
def test_bad_input_is_one_clear_line(ogb_dir, damage, message):
    damage(ogb_dir)
    with pytest.raises(GridGnnError, match=message) as e:
        load_graph(f"ogb:{ogb_dir}")
    assert "\n" not in str(e.value)
    assert str(e.value).startswith(str(ogb_dir)), str(e.value)


def test_decompressed_size_is_capped(tmp_path, monkeypatch):
    """Without num-edge-list the edge text may take a quarter of the memory available, checked while streaming."""
    import gridgnn.graph.ogb as ogb

    many = np.tile(EDGES, (10, 1))  # 200 lines, about 900 bytes of text
    d = write_ogb(tmp_path / "ogbn_toy", counts=False, edges=many)
    assert load_ogb(d).nnz == expected_adjacency(directed=False).nnz
    monkeypatch.setattr(ogb, "available_memory", lambda: 1200)
    with pytest.raises(GridGnnError, match=r"edge.csv.gz: decompresses to more than 300 B \(a quarter of the "
                                           r"memory available; add raw/num-edge-list.csv.gz\)"):
        load_ogb(d)
    write_gz(d / "raw" / "num-edge-list.csv.gz", [str(len(many))])  # a declared count bounds the rows instead
    assert load_ogb(d).nnz == expected_adjacency(directed=False).nnz


def test_missing_or_wrong_directory(tmp_path):
    with pytest.raises(GridGnnError, match="OGB dataset directory not found"):
        load_graph(f"ogb:{tmp_path / 'nope'}")
    (tmp_path / "f.txt").write_text("x")
    with pytest.raises(GridGnnError, match="not a directory"):
        load_graph(f"ogb:{tmp_path / 'f.txt'}")
    with pytest.raises(GridGnnError, match="no raw/ folder"):
        load_graph(f"ogb:{tmp_path}")


# ------------------------------------------------------------------------------------------ end to end
def test_cli_trains_on_ogb_dir(ogb_dir, tmp_path, capsys):
    out = tmp_path / "run"
    code = run_main(["train", "--data", f"ogb:{ogb_dir}", "--epochs", 2, "--nproc", 1, "--algo", "serial",
                     "--out", out, "--quiet"])
    assert code == 0, capsys.readouterr().err
    s = json.loads((out / "summary.json").read_text())
    assert 0.0 <= s["test_acc"] <= 1.0


@pytest.mark.parametrize("directed", [False, True])
def test_edge_features_follow_their_edge_lines(tmp_path, directed):
    """``raw/edge-feat.csv.gz``: row k belongs to edge line k; symmetrized, a one-way edge's reverse copies them and
    a reciprocal pair keeps each line's own; a duplicate edge line merges as without them and drops them, saying
    why in ``meta``."""
    edges = EDGES[1:]  # without the duplicate (0, 1)
    root = write_ogb(tmp_path / "ogbn_feat", edges=edges)
    attr = np.random.default_rng(3).normal(size=(len(edges), 2)).astype(np.float32)
    write_gz(root / "raw" / "edge-feat.csv.gz", [",".join(repr(float(v)) for v in row) for row in attr])
    g = load_ogb(root, directed=directed)
    assert g.edge_dim == 2
    feats, given = g.edge_rows(edges[:, 1], edges[:, 0])
    np.testing.assert_array_equal(feats, attr)
    assert given.all()
    if not directed:
        one_way = [k for k, (s, d) in enumerate(edges) if not ((edges[:, 0] == d) & (edges[:, 1] == s)).any()]
        back, given = g.edge_rows(edges[one_way, 0], edges[one_way, 1])
        np.testing.assert_array_equal(back, attr[one_way])
        assert given.all()
    dup = write_ogb(tmp_path / "ogbn_dup")  # a duplicate edge line: merged as without features, which are dropped
    write_gz(dup / "raw" / "edge-feat.csv.gz", ["1.0"] * len(EDGES))
    merged = load_ogb(dup, directed=directed)
    assert merged.edge_attr is None and "given more than once" in merged.meta["edge_features_dropped"]
    short = write_ogb(tmp_path / "ogbn_short", edges=edges)
    write_gz(short / "raw" / "edge-feat.csv.gz", ["1.0"] * 3)
    with pytest.raises(GridGnnError, match="rows for 19 edges"):
        load_ogb(short)


# ---------------------------------------------------------------------------- ogbl-*: a link split of its own
def write_ogbl(root, *, citation=False, numpy_arrays=True):
    """A tiny ogbl dataset: 40 vertices on a ring with chords; the ring's edges train, chords validate and test;
    collab-style global negatives, or citation2-style 3 per positive."""
    import torch

    n = 40
    ring = np.stack([np.arange(n), (np.arange(n) + 1) % n], axis=1)
    val = np.array([[0, 10], [5, 25], [7, 30]])
    test = np.array([[2, 20], [3, 33], [11, 29], [12, 18]])
    raw, sdir = root / "raw", root / "split" / ("source" if citation else "collab")
    raw.mkdir(parents=True)
    sdir.mkdir(parents=True)
    write_gz(raw / "edge.csv.gz", [f"{a},{b}" for a, b in ring])
    write_gz(raw / "num-node-list.csv.gz", [str(n)])
    write_gz(raw / "node-feat.csv.gz", [",".join(f"{v:.3f}" for v in np.sin(np.arange(4) + i)) for i in range(n)])
    arr = (lambda a: a) if numpy_arrays else torch.from_numpy
    rng = np.random.default_rng(0)
    for name, pos in (("train", ring), ("valid", val), ("test", test)):
        if citation:
            d = {"source_node": arr(pos[:, 0]), "target_node": arr(pos[:, 1])}
            if name != "train":
                d["target_node_neg"] = arr(rng.integers(0, n, (len(pos), 3)))
        else:
            d = {"edge": arr(pos), "weight": arr(np.ones(len(pos)))}
            if name != "train":
                d["edge_neg"] = arr(rng.integers(0, n, (5, 2)))
        torch.save(d, sdir / f"{name}.pt")
    return ring, val, test


@pytest.mark.parametrize("citation,numpy_arrays", [(False, True), (True, False)])
def test_an_ogbl_dataset_keeps_its_own_link_split(tmp_path, citation, numpy_arrays):
    ring, val, test = write_ogbl(tmp_path, citation=citation, numpy_arrays=numpy_arrays)
    g = load_graph(f"ogb:{tmp_path}")
    s = g.meta["link_split"]
    assert g.n == 40 and g.nnz == 80 and g.y is None and g.num_features == 4  # the ring, both directions
    np.testing.assert_array_equal(s.train, ring.T)
    np.testing.assert_array_equal(s.val, val.T)
    np.testing.assert_array_equal(s.test, test.T)
    if citation:  # 3 negatives per positive, positive-major, each from its positive's source
        assert s.neg_per_positive == 3 and s.val_neg.shape == (2, 9)
        np.testing.assert_array_equal(s.val_neg[0], np.repeat(val[:, 0], 3))
    else:
        assert s.neg_per_positive is None and s.val_neg.shape == (2, 5) and s.test_neg.shape == (2, 5)
    from gridgnn.graph.links import given_split

    sp_ = given_split(g, s)  # OGB's protocol: the training edges pass the messages of every split
    assert sp_.train_graph is g and sp_.test_graph is g


def test_an_ogbl_split_pickled_by_numpy_1_loads(tmp_path):
    """OGB's split files hold NumPy arrays pickled by NumPy 1 (numpy.core.multiarray._reconstruct): read without
    running code all the same."""
    import torch

    _, val, _ = write_ogbl(tmp_path)
    path = tmp_path / "split" / "collab" / "valid.pt"
    torch.save({"edge": val, "edge_neg": val[::-1].copy()}, path, _use_new_zipfile_serialization=False)
    data = path.read_bytes()
    assert b"numpy._core.multiarray" in data or b"numpy.core.multiarray" in data
    path.write_bytes(data.replace(b"numpy._core.multiarray", b"numpy.core.multiarray"))
    g = load_graph(f"ogb:{tmp_path}")
    np.testing.assert_array_equal(g.meta["link_split"].val, val.T)


def test_a_broken_ogbl_split_file_is_one_line(tmp_path):
    write_ogbl(tmp_path)
    (tmp_path / "split" / "collab" / "valid.pt").write_bytes(b"not a torch file")
    with pytest.raises(GridGnnError, match="valid.pt: an OGB split file: it"):
        load_graph(f"ogb:{tmp_path}")


def test_an_ogbl_split_without_training_edges_is_one_line(tmp_path):
    """An empty train.pt loaded, and a link run then stopped with "training diverged" (the loss of no edges)."""
    import torch

    write_ogbl(tmp_path)
    torch.save({"edge": torch.zeros((0, 2), dtype=torch.long), "weight": torch.ones(0)},
               tmp_path / "split" / "collab" / "train.pt")
    with pytest.raises(GridGnnError, match="train.pt holds no positive edges to train on"):
        load_graph(f"ogb:{tmp_path}")
