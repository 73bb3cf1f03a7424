"""A tampered sharded dataset is refused with one message: every meta.json field is checked against the files."""
import json
import os
import shutil
import threading

import numpy as np
import pytest

from gridgnn.errors import GridGnnError
from gridgnn.graph.sharded import ShardedDataset, _checksums, write_sharded
from gridgnn.partition.permute import double_permutation, single_permutation

from ._util import random_graph


@pytest.fixture
def graph():
    return random_graph(n=37, m=140, directed=True, weighted=True, seed=5, f=5, classes=3)


def _write(graph, path, double=True, blocks=(3, 4)):
    if double:
        pr, pc = double_permutation(graph.n, 7)
    else:
        pr = pc = single_permutation(graph.n, 7)
    write_sharded(graph, path, perm_r=pr, perm_c=pc, blocks=blocks, partition_name="t", seed=7)
    return path


def _meta(path) -> dict:
    return json.loads((path / "meta.json").read_text())


def _save_meta(path, meta) -> None:
    (path / "meta.json").write_text(json.dumps(meta))


def _rehash(path):
    """Record the current checksum of every file in ``meta.json``: the changed file then passes the hash check
    (a dataset crafted with matching hashes), and the checks behind it are reached."""
    meta = _meta(path)
    meta["checksums"] = _checksums(path, meta["files"])
    _save_meta(path, meta)
    return path


def _refused(path, *words):
    with pytest.raises(GridGnnError) as e:
        ShardedDataset(path)
    msg = str(e.value)
    assert "\n" not in msg
    for w in words:
        assert w in msg, (w, msg)
    return msg


def _tamper(path, **changes):
    meta = _meta(path)
    meta.update(changes)
    _save_meta(path, meta)


def test_untampered_dataset_opens(graph, tmp_path):
    ds = ShardedDataset(_write(graph, tmp_path / "ds"))
    assert ds.num_features == 5 and ds.num_classes == 3 and ds.double
    assert ds.graph_meta()["n_train"] == int((graph.train_mask & (graph.y >= 0)).sum())


# ------------------------------------------------------------------------------------------ features / labels
def test_num_features_smaller_than_stored_x(graph, tmp_path):
    p = _write(graph, tmp_path / "ds")
    _tamper(p, num_features=3)
    _refused(p, "num_features=3", "5 columns")


def test_num_features_and_node_arrays_shrunk_together(graph, tmp_path):
    p = _write(graph, tmp_path / "ds")
    meta = _meta(p)
    meta["num_features"] = 3
    meta["node_arrays"]["x"]["shape"] = [3]
    _save_meta(p, meta)
    _refused(p, "x_0000.npy is corrupt", "(37, 5)", "(37, 3)")


def test_stored_x_wider_than_meta(graph, tmp_path):
    p = _write(graph, tmp_path / "ds")
    chunk = p / _meta(p)["files"]["nodes"]["x"][0]
    rows = np.load(chunk).shape[0]
    np.save(chunk, np.zeros((rows, 6), dtype=np.float32))
    _refused(p, "x_0000.npy: its size", "does not match meta.json", "changed or swapped")
    _refused(_rehash(p), "x_0000.npy is corrupt", "shape")


def test_num_classes_contradicts_labels(graph, tmp_path):
    p = _write(graph, tmp_path / "ds")
    _tamper(p, num_classes=2)
    _refused(p, "num_classes=2", "3")
    _tamper(p, num_classes=10 ** 9)
    _refused(p, "num_classes")


def test_label_chunk_tampered(graph, tmp_path):
    p = _write(graph, tmp_path / "ds")
    chunk = p / _meta(p)["files"]["nodes"]["y"][0]
    y = np.load(chunk)
    y[0] = 10 ** 12
    np.save(chunk, y)
    _refused(p, "y_0000.npy: its content does not match the SHA-256 hash in meta.json")
    _refused(_rehash(p), "label")
    y[0] = -7
    np.save(chunk, y)
    _refused(_rehash(p), "y_0000.npy is corrupt", "-7")


@pytest.mark.parametrize("value", [10 ** 9, 0, -1, "5", 3.0, True, None])
def test_n_train_wrong(graph, tmp_path, value):
    p = _write(graph, tmp_path / "ds")
    _tamper(p, n_train=value)
    _refused(p, "n_train")


def test_n_train_off_by_one(graph, tmp_path):
    p = _write(graph, tmp_path / "ds")
    true = _meta(p)["n_train"]
    _tamper(p, n_train=true + 1)
    _refused(p, f"n_train={true + 1}", f"hold {true} labelled training nodes")


def test_train_mask_chunk_tampered(graph, tmp_path):
    p = _write(graph, tmp_path / "ds")
    chunk = p / _meta(p)["files"]["nodes"]["train_mask"][0]
    m = np.load(chunk)
    np.save(chunk, ~m)
    _refused(p, "train_mask_0000.npy: its content does not match")
    _refused(_rehash(p), "n_train")


@pytest.mark.parametrize("dtype", ["|O", "<U5", "<c16", "V8", "not a dtype", "<f8"])
def test_node_array_dtype(graph, tmp_path, dtype):
    p = _write(graph, tmp_path / "ds")
    meta = _meta(p)
    meta["node_arrays"]["y"]["dtype"] = dtype
    _save_meta(p, meta)
    _refused(p, "y")


# ------------------------------------------------------------------------------------------ versions / perms
def test_cr_version_while_perms_equal(graph, tmp_path):
    p = _write(graph, tmp_path / "ds", double=False)
    meta = _meta(p)
    assert meta["versions"] == ["rc"]
    meta["versions"] = ["rc", "cr"]
    meta["files"]["cr"] = meta["files"]["rc"]
    meta["block_nnz"]["cr"] = meta["block_nnz"]["rc"]
    meta["checksums"]["cr"] = meta["checksums"]["rc"]
    _save_meta(p, meta)
    _refused(p, "'cr'", "perm_r == perm_c")


def test_only_rc_while_perms_differ(graph, tmp_path):
    p = _write(graph, tmp_path / "ds")
    _tamper(p, versions=["rc"])
    _refused(p, "perm_r != perm_c", "only 'rc'")


def test_permutation_files_swapped_or_broken(graph, tmp_path):
    p = _write(graph, tmp_path / "ds")
    shutil.copy(p / "perm_c.npy", p / "perm_r.npy")  # now equal, but two versions stored
    _refused(p, "perm_r.npy: its content does not match the SHA-256 hash")
    _refused(_rehash(p), "perm_r == perm_c")
    np.save(p / "perm_r.npy", np.arange(37, dtype=np.float64))
    _refused(_rehash(p), "perm_r")
    np.save(p / "perm_r.npy", np.arange(36))
    _refused(p, "perm_r.npy: its size")
    _refused(_rehash(p), "perm_r", "length n=37")
    (p / "perm_r.npy").write_bytes(b"\x93NUMPY\x01\x00" + b"\x10\x00" + b"{'descr': '<i8', 'fortran_order': False, "
                                   b"'shape': (1000000000000,), }    \n")
    _refused(_rehash(p), "perm_r")


@pytest.mark.parametrize("versions", [["cr"], ["rc", "rc"], ["cr", "rc"], "rc", ["rc", "cr", "xx"], None])
def test_versions_malformed(graph, tmp_path, versions):
    p = _write(graph, tmp_path / "ds")
    _tamper(p, versions=versions)
    _refused(p, "versions")


# ------------------------------------------------------------------------------------------ paths
@pytest.mark.parametrize("rel", ["../../x", "../outside.npy", "/etc/passwd", "nodes/../../x.npy", "", ".", 7,
                                 "nodes/\x00x.npy"])
def test_files_entry_outside_the_folder(graph, tmp_path, rel):
    p = _write(graph, tmp_path / "ds")
    (tmp_path / "outside.npy").write_bytes(b"secret")
    meta = _meta(p)
    meta["files"]["nodes"]["x"][0] = rel
    _save_meta(p, meta)
    _refused(p, "files entry")


@pytest.mark.parametrize("where", ["perm_r", "block", "meta"])
def test_other_paths_outside(graph, tmp_path, where):
    p = _write(graph, tmp_path / "ds")
    meta = _meta(p)
    if where == "perm_r":
        meta["files"]["perm_r"] = "../../../../../../etc/hostname"
    elif where == "block":
        meta["files"]["rc"][1][2] = str(tmp_path / "elsewhere.npz")
    else:
        meta["files"]["cr"][0][0] = "rc/../../ds2/block.npz"
    _save_meta(p, meta)
    _refused(p, "outside" if where != "block" else "absolute")


def test_symlink_leading_out_is_refused_inside_is_fine(graph, tmp_path):
    p = _write(graph, tmp_path / "ds")
    meta = _meta(p)
    target = p / meta["files"]["nodes"]["x"][0]
    outside = tmp_path / "elsewhere.npy"
    shutil.copy(target, outside)
    target.unlink()
    os.symlink(outside, target)
    _refused(p, "outside the dataset folder")
    target.unlink()
    inside = p / "nodes" / "moved.npy"
    shutil.copy(outside, inside)
    os.symlink(inside, target)
    ds = ShardedDataset(p)
    assert ds.node_rows("x", [0]).shape == (1, 5)
    # a symlinked meta.json leading out
    (p / "meta.json").rename(tmp_path / "meta.json")
    os.symlink(tmp_path / "meta.json", p / "meta.json")
    _refused(p, "outside")


def test_block_file_fifo_does_not_block(graph, tmp_path):
    p = _write(graph, tmp_path / "ds")
    ds = ShardedDataset(p)
    blk = p / "rc" / "block_000_000.npz"
    blk.unlink()
    os.mkfifo(blk)
    result = {}

    def read():
        try:
            ds.submatrix("rc", (0, 1), (0, 1))
        except GridGnnError as e:
            result["error"] = str(e)

    t = threading.Thread(target=read, daemon=True)
    t.start()
    t.join(20)
    assert not t.is_alive(), "reading a FIFO block file blocked"
    assert "block_000_000.npz" in result["error"] and "regular file" in result["error"]


# ------------------------------------------------------------------------------------------ matrix fields
def test_block_nnz_contradicts_block_file(graph, tmp_path):
    p = _write(graph, tmp_path / "ds")
    meta = _meta(p)
    a = meta["block_nnz"]["rc"]
    # move one entry between two blocks: the sum still matches matrix_nnz
    a[0][0] += 1
    a[0][1] -= 1
    assert a[0][1] >= 0
    _save_meta(p, meta)
    ds = ShardedDataset(p)
    with pytest.raises(GridGnnError, match="block_000_000.npz is corrupt: .* entries but meta.json block_nnz"):
        ds.submatrix("rc", (0, 1), (0, 1))


def test_block_nnz_sum_and_matrix_nnz(graph, tmp_path):
    p = _write(graph, tmp_path / "ds")
    meta = _meta(p)
    meta["block_nnz"]["cr"][2][3] += 5
    _save_meta(p, meta)
    _refused(p, "block_nnz['cr'] sums to")
    p2 = _write(graph, tmp_path / "ds2")
    _tamper(p2, matrix_nnz=_meta(p2)["matrix_nnz"] + 1)
    _refused(p2, "block_nnz")
    _tamper(p2, matrix_nnz=10 ** 12)
    _refused(p2, "matrix_nnz")


def test_block_replaced_by_a_block_of_the_other_version(graph, tmp_path):
    p = _write(graph, tmp_path / "ds")
    meta = _meta(p)
    rc, cr = np.array(meta["block_nnz"]["rc"]), np.array(meta["block_nnz"]["cr"])
    a, b = (int(v[0]) for v in np.nonzero(rc != cr))  # a block whose entry count differs between versions
    name = f"block_{a:03d}_{b:03d}.npz"
    shutil.copy(p / "cr" / name, p / "rc" / name)
    _refused(p, f"rc/{name}: its size")  # another entry count: another size, refused when opening
    ds = ShardedDataset(_rehash(p))
    rb, cb = ds.row_bounds, ds.col_bounds
    with pytest.raises(GridGnnError, match=f"{name} is corrupt: {cr[a, b]} entries but meta.json block_nnz says "
                                           f"{rc[a, b]}"):
        ds.submatrix("rc", (rb[a], rb[a + 1]), (cb[b], cb[b + 1]))


@pytest.mark.parametrize("field,value", [
    ("n", 37.0), ("n", "37"), ("n", 10 ** 30), ("n", 0), ("n", True), ("blocks", [3]), ("blocks", ["3", "4"]),
    ("blocks", [0, 4]), ("row_bounds", [0, 12.5, 25, 37]), ("row_bounds", [0, 25, 12, 37]),
    ("row_bounds", [0, 12, 25, 10 ** 30]), ("col_bounds", [0, 37]), ("node_chunk_bounds", [0, True, 37]),
    ("directed", "yes"), ("normalized", 1), ("nnz", -1), ("files", []), ("node_arrays", {"feat": {}}),
    ("block_nnz", None), ("num_features", -1),
])
def test_field_types_and_ranges(graph, tmp_path, field, value):
    p = _write(graph, tmp_path / "ds")
    _tamper(p, **{field: value})
    _refused(p, "meta.json is inconsistent", field)


def test_meta_json_garbage(graph, tmp_path):
    p = _write(graph, tmp_path / "ds")
    (p / "meta.json").write_text("[" * 100_000 + "]" * 100_000)
    _refused(p, "meta.json")
    (p / "meta.json").write_bytes(b"\xff\xfe{}")
    _refused(p, "cannot read")
    (p / "meta.json").write_text('{"format_version": 2, "n": 1e999}')
    _refused(p, "n must be an integer")


def test_huge_n_is_refused_before_reading_permutations(graph, tmp_path):
    p = _write(graph, tmp_path / "ds")
    _tamper(p, n=10 ** 15)
    _refused(p, "meta.json", "n=1000000000000000", "available")


def test_block_distinct_columns_are_exact_and_a_tampered_count_is_refused(graph, tmp_path):
    """``block_nnz_cols`` holds the distinct columns of every block (what a sparsity-aware fetch moves); one above
    its block's entries or width is refused naming the cell, an old dataset without it still opens."""
    p = _write(graph, tmp_path / "ds")
    ds = ShardedDataset(p)
    for v in ds.versions:
        for a in range(3):
            for b in range(4):
                blk = ds.submatrix(v, (int(ds.row_bounds[a]), int(ds.row_bounds[a + 1])),
                                   (int(ds.col_bounds[b]), int(ds.col_bounds[b + 1])))
                assert ds.block_cols[v][a][b] == np.unique(blk.indices).size, (v, a, b)
    meta = _meta(p)
    meta["block_nnz_cols"]["rc"][1][2] = int(np.diff(ds.col_bounds)[2]) + 1
    _save_meta(p, meta)
    _refused(p, "block_nnz_cols['rc'][1][2] must be an integer in ")
    del meta["block_nnz_cols"]
    _save_meta(p, meta)
    assert ShardedDataset(p).block_cols is None


def test_distinct_columns_below_what_the_block_needs_are_refused_at_opening_and_reading(graph, tmp_path):
    """A count too low would shrink the memory guard's halo: below ``ceil(entries / rows)`` it is refused when
    the dataset opens, and any other disagreement with the block when the block is read."""
    p = _write(graph, tmp_path / "ds", double=False)
    meta = _meta(p)
    a, b = next((a, b) for a in range(3) for b in range(4) if meta["block_nnz"]["rc"][a][b] > 1)
    good = meta["block_nnz_cols"]["rc"][a][b]
    meta["block_nnz_cols"]["rc"][a][b] = 0
    _save_meta(p, meta)
    _refused(p, f"block_nnz_cols['rc'][{a}][{b}] must be an integer in ")
    # a count the opening checks cannot tell from the truth: the block itself, once read, can
    meta["block_nnz_cols"]["rc"][a][b] = good + 1 if good < min(meta["block_nnz"]["rc"][a][b], 9) else good - 1
    _save_meta(p, meta)
    ds = ShardedDataset(p)
    with pytest.raises(GridGnnError, match="distinct columns but meta.json block_nnz_cols says"):
        ds.submatrix("rc", (int(ds.row_bounds[a]), int(ds.row_bounds[a + 1])),
                     (int(ds.col_bounds[b]), int(ds.col_bounds[b + 1])))
