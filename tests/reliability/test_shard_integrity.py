"""A sharded dataset changed after ``gridgnn shard`` wrote it is refused with one line (issue 42, cases 4, 17, 20).

It once trained silently: a block whose values were scaled by 1000, or two swapped blocks, gave other logits and
exit status 0. Now ``meta.json`` records the SHA-256 and size of every file: sizes are compared when the dataset is
opened (by the launching process, before any rank starts), each file's hash when a rank reads it. Two
``gridgnn shard --overwrite`` runs on one folder both exited 0: the folder is now held with ``OutLock``. A bad
``row_bounds`` printed one line per rank: it is refused when ``meta.json`` is checked, before the launch.
"""
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys

import numpy as np
import pytest

import gridgnn
from gridgnn.errors import GridGnnError
from gridgnn.graph import Graph
from gridgnn.graph import sharded as sharded_mod
from gridgnn.graph.sharded import ShardedDataset, write_sharded
from gridgnn.train.outputs import OutLock

SBM = "synthetic:sbm?n=240&classes=3&avg_degree=6&features=8"
CHANGED = "the file was changed or swapped after gridgnn shard wrote it; write the dataset again with `gridgnn shard`"


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = tmp_path_factory.mktemp("shards") / "ds"
    gridgnn.shard(SBM, str(out), blocks="2x2", method="double-perm", seed=3)
    return out


@pytest.fixture
def ds(written, tmp_path):
    """A fresh copy of the written dataset, to change."""
    return shutil.copytree(written, tmp_path / "ds")


def _cli(*args, timeout=240):
    r = subprocess.run([sys.executable, "-m", "gridgnn", *map(str, args)], capture_output=True, text=True,
                       timeout=timeout)
    return r.returncode, r.stderr.strip().splitlines()


def _train(ds, nproc=4):
    return _cli("train", "--data", f"sharded:{ds}", "--algo", "2d", "--nproc", nproc, "--epochs", 2, "--hidden", 8,
                "--quiet")


def _rewrite_block(path, scale):
    z = dict(np.load(path))
    z["data"] = z["data"] * scale
    np.savez(path, **z)


def _rehash(path):
    """Record the current checksums in meta.json (a dataset whose hashes match its files)."""
    meta = json.loads((path / "meta.json").read_text())
    meta["checksums"] = sharded_mod._checksums(path, meta["files"])
    (path / "meta.json").write_text(json.dumps(meta))
    return path


# ------------------------------------------------------------------------------------------ (a) scaled block
def test_a_block_scaled_by_1000_ends_the_run_with_one_line(ds):
    blk = ds / "rc" / "block_000_000.npz"
    size = blk.stat().st_size
    _rewrite_block(blk, 1000.0)
    assert blk.stat().st_size == size  # same size: only the hash, on the rank that reads it, can tell
    code, err = _train(ds)
    assert code == 2
    assert err == [f"gridgnn: error: {blk}: its content does not match the SHA-256 hash in meta.json: {CHANGED}"]


# ------------------------------------------------------------------------------------------ (b) swapped blocks
def test_two_swapped_blocks_are_refused_before_any_rank_starts(ds):
    a, b = ds / "rc" / "block_000_001.npz", ds / "rc" / "block_001_000.npz"
    sa, sb = a.stat().st_size, b.stat().st_size
    assert sa != sb  # other entry counts: other sizes, seen by a stat of every file when the dataset is opened
    tmp = ds / "swap"
    a.rename(tmp)
    b.rename(a)
    tmp.rename(b)
    code, err = _train(ds)
    assert code == 2
    assert err == [f"gridgnn: error: {a}: its size ({sb} bytes) does not match meta.json ({sa} bytes): {CHANGED}"]


def test_a_swap_of_two_files_of_equal_size_is_refused_by_the_hash(tmp_path):
    # in the identity order, blocks (0, 1) and (1, 0) hold two entries each (0-4 and 0-5, one in each direction):
    # files of one size and other bytes
    n = 8
    g = Graph.from_edges(np.array([0, 0, 1, 6]), np.array([4, 5, 2, 7]), n, directed=False,
                         x=np.eye(n, dtype=np.float32), y=np.arange(n) % 2, train_mask=np.ones(n, bool))
    ident = np.arange(n)
    write_sharded(g, tmp_path / "ds", perm_r=ident, perm_c=ident, blocks=(2, 2), node_chunks=2)
    a, b = tmp_path / "ds" / "rc" / "block_000_001.npz", tmp_path / "ds" / "rc" / "block_001_000.npz"
    assert a.stat().st_size == b.stat().st_size
    data_a, data_b = a.read_bytes(), b.read_bytes()
    assert data_a != data_b
    a.write_bytes(data_b)
    b.write_bytes(data_a)
    ds = ShardedDataset(tmp_path / "ds")  # the sizes agree
    with pytest.raises(GridGnnError) as e:
        ds.submatrix("rc", (0, 4), (4, 8))
    assert str(e.value) == f"{a}: its content does not match the SHA-256 hash in meta.json: {CHANGED}"
    # two node chunks of equal size swapped
    x0, x1 = tmp_path / "ds" / "nodes" / "x_0000.npy", tmp_path / "ds" / "nodes" / "x_0001.npy"
    d0, d1 = x0.read_bytes(), x1.read_bytes()
    x0.write_bytes(d1)
    x1.write_bytes(d0)
    with pytest.raises(GridGnnError, match="x_0001.npy: its content does not match the SHA-256 hash"):
        ds.node_rows("x", [5])


# ------------------------------------------------------------------------------------------ (c) node file
def test_changed_features_end_the_run_with_one_line(ds):
    chunk = ds / json.loads((ds / "meta.json").read_text())["files"]["nodes"]["x"][0]
    x = np.load(chunk)
    np.save(chunk, x * 2)  # same shape and size
    code, err = _train(ds, nproc=2)
    assert code == 2  # every rank reads this chunk and says the same: one line
    assert err == [f"gridgnn: error: {chunk}: its content does not match the SHA-256 hash in meta.json: {CHANGED}"]


def test_changed_labels_are_refused_when_the_dataset_is_opened(ds):
    chunk = ds / "nodes" / "y_0000.npy"
    y = np.load(chunk)
    np.save(chunk, (y + 1) % 3)  # still valid labels, other ones
    with pytest.raises(GridGnnError) as e:
        ShardedDataset(ds)
    assert str(e.value) == f"{chunk}: its content does not match the SHA-256 hash in meta.json: {CHANGED}"


# ------------------------------------------------------------------------------------------ (d) values above 1
def test_normalized_values_above_one_are_refused(ds):
    blk = ds / "rc" / "block_000_000.npz"
    _rewrite_block(blk, 1000.0)
    top = float(np.load(blk)["data"].max())
    assert top > 1
    d = ShardedDataset(_rehash(ds))  # hashes that match: the value check behind them refuses the block
    with pytest.raises(GridGnnError) as e:
        d.submatrix("rc", (0, 1), (0, 1))
    assert str(e.value) == (f"block file {blk} is corrupt: value {top:.6g} above 1 (the normalized adjacency of an "
                            "undirected or unweighted graph has none)")


def test_values_above_one_of_a_weighted_directed_graph_are_kept(tmp_path):
    # M̂ = D^-1/2 (M+I) D^-1/2, D the in-degree: an edge of weight 100 into 1 from 0 (whose in-degree is 1)
    # gives 100 / sqrt(101 * 1) ≈ 9.95; the bound holds only for undirected or unweighted graphs
    g = Graph.from_edges(np.array([0, 1]), np.array([1, 2]), 3, weights=np.array([100.0, 1.0]), directed=True,
                         x=np.ones((3, 2), np.float32), y=np.array([0, 1, 0]), train_mask=np.ones(3, bool))
    ident = np.arange(3)
    write_sharded(g, tmp_path / "ds", perm_r=ident, perm_c=ident, blocks=(1, 1))
    sub = ShardedDataset(tmp_path / "ds").submatrix("rc", (0, 3), (0, 3))
    assert sub[1, 0] == pytest.approx(100 / np.sqrt(101))


# ------------------------------------------------------------------------------------------ (e) shard lock
def test_a_second_shard_on_a_held_folder_is_refused(ds):
    before = (ds / "meta.json").read_bytes()
    lock = OutLock(str(ds))
    try:
        code, err = _cli("shard", "--data", SBM, "--blocks", "2x2", "--seed", 4, "--out", ds, "--overwrite")
    finally:
        lock.release()
    assert code == 2
    assert err == [f"gridgnn: error: --out {ds} is in use by another run (pid {os.getpid()} on "
                   f"{socket.gethostname()}); wait for it to end or choose another --out"]
    assert (ds / "meta.json").read_bytes() == before
    assert sorted(p.name for p in ds.parent.iterdir()) == ["ds"]  # nothing written beside it


def test_shard_releases_its_lock_at_the_end_and_on_error(ds, tmp_path):
    meta = gridgnn.shard(SBM, str(ds), blocks="2x2", seed=5, overwrite=True)
    assert meta["seed"] == 5 and not (ds / OutLock.NAME).exists()
    OutLock(str(ds)).release()  # free again
    with pytest.raises(GridGnnError):
        gridgnn.shard("synthetic:nope", str(ds), blocks="2x2", overwrite=True)
    assert not (ds / OutLock.NAME).exists() and json.loads((ds / "meta.json").read_text())["seed"] == 5
    new = tmp_path / "new" / "sub"
    with pytest.raises(GridGnnError):
        gridgnn.shard("synthetic:nope", str(new), blocks="2x2")
    assert not (tmp_path / "new").exists()  # the folders it created for the lock are gone
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds"]


# ------------------------------------------------------------------------------------------ (f) bad meta: one line
def test_bad_row_bounds_are_refused_once_before_the_launch(ds):
    meta = json.loads((ds / "meta.json").read_text())
    meta["row_bounds"] = [0, 100, 240]  # rising from 0 to n, but not the split the blocks were cut by
    (ds / "meta.json").write_text(json.dumps(meta))
    code, err = _train(ds)
    assert code == 2
    assert err == [f"gridgnn: error: {ds / 'meta.json'} is inconsistent: row_bounds must be the even split of n=240 "
                   "into 2 blocks, [0, 120, 240] (what gridgnn shard writes), got [0, 100, 240]"]


# ------------------------------------------------------------------------------------------ format, cost
def test_a_dataset_without_hashes_is_refused(ds):
    meta = json.loads((ds / "meta.json").read_text())
    (ds / "meta.json").write_text(json.dumps(dict(meta, format_version=1)))
    with pytest.raises(GridGnnError) as e:
        ShardedDataset(ds)
    assert str(e.value) == (f"{ds / 'meta.json'} has format_version 1 (written by an older gridgnn, without the "
                            "content hashes that format_version 2 checks); write the dataset again with "
                            "`gridgnn shard`")
    del meta["checksums"]["rc"]
    (ds / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(GridGnnError, match=r"meta.json is inconsistent: checksums\['rc'\] is not 2×2"):
        ShardedDataset(ds)


def test_a_reader_hashes_only_the_files_it_reads_and_each_once(written, monkeypatch):
    seen = []
    orig = sharded_mod.file_checksum

    def spy(path):
        seen.append(os.path.relpath(path, written))
        return orig(path)

    monkeypatch.setattr(sharded_mod, "file_checksum", spy)
    d = ShardedDataset(written)
    assert sorted(seen) == ["nodes/test_mask_0000.npy", "nodes/train_mask_0000.npy", "nodes/val_mask_0000.npy",
                            "nodes/y_0000.npy", "perm_c.npy", "perm_r.npy"]
    seen.clear()
    rb, cb = d.row_bounds, d.col_bounds
    for _ in range(2):
        d.submatrix("cr", (rb[1], rb[2]), (cb[0], cb[1]))
        d.node_rows("x", d.perm_c[:5])
        d.node_rows("y", d.perm_c[:5])
    assert seen == ["cr/block_001_000.npz", "nodes/x_0000.npy"]
    # and what it hashed is what the writer recorded
    meta = json.loads((written / "meta.json").read_text())
    blk = (written / "cr" / "block_001_000.npz").read_bytes()
    assert meta["checksums"]["cr"][1][0] == {"sha256": hashlib.sha256(blk).hexdigest(), "bytes": len(blk)}
