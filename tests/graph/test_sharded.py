"""Sharded datasets on disk (Plexus §5.4): round trips, partial reads, validation, peak memory, CLI."""
import argparse
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gridgnn.errors import GridGnnError
from gridgnn.graph import gcn_normalize
from gridgnn.graph.sharded import FORMAT_VERSION, ShardedDataset, write_sharded
from gridgnn.graph.synthetic import sbm_graph
from gridgnn.partition.layout import even_bounds
from gridgnn.partition.permute import (balanced_permutation, double_permutation, nnz_max_over_mean_used,
                                       permute_matrix, single_permutation)
from gridgnn.commands.shard import add_shard_arguments, run_shard_command

from ._util import random_graph

SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.fixture
def graph():
    return random_graph(n=37, m=140, directed=True, weighted=True, seed=5)


def write(graph, path, method="double", blocks=(3, 4), **kw):
    n = graph.n
    if method == "double":
        pr, pc = double_permutation(n, 7)
    elif method == "balanced":
        pr, pc = balanced_permutation(gcn_normalize(graph), *blocks, seed=1)
    else:
        pr = pc = single_permutation(n, 7)
    meta = write_sharded(graph, path, perm_r=pr, perm_c=pc, blocks=blocks, partition_name=method, seed=7, **kw)
    return pr, pc, meta


def _rehash(path):
    """Record the current checksum of every file in ``meta.json`` (a dataset whose hashes match its files), so
    that the checks behind the hash are reached."""
    from gridgnn.graph.sharded import _checksums

    meta = json.loads((path / "meta.json").read_text())
    meta["checksums"] = _checksums(path, meta["files"])
    (path / "meta.json").write_text(json.dumps(meta))
    return path


def ranges(bounds):
    return [(int(bounds[a]), int(bounds[a + 1])) for a in range(len(bounds) - 1)]


@pytest.mark.parametrize("method", ["double", "single", "balanced"])
def test_round_trip_every_block_and_random_ranges(graph, tmp_path, method):
    pr, pc, meta = write(graph, tmp_path / "ds", method)
    ds = ShardedDataset(tmp_path / "ds")
    mhat = gcn_normalize(graph)
    n = graph.n
    assert np.array_equal(ds.perm_r, pr) and np.array_equal(ds.perm_c, pc)
    assert ds.versions == (("rc",) if method == "single" else ("rc", "cr"))
    assert (tmp_path / "ds" / "cr").is_dir() == (method != "single")
    full = {"rc": permute_matrix(mhat, pr, pc).toarray(), "cr": permute_matrix(mhat, pc, pr).toarray()}
    rng = np.random.default_rng(0)
    for version in ("rc", "cr"):
        ref = full[version]
        for r in ranges(ds.row_bounds):
            for c in ranges(ds.col_bounds):
                sub = ds.submatrix(version, r, c)
                assert sub.shape == (r[1] - r[0], c[1] - c[0])
                assert np.array_equal(sub.toarray(), ref[r[0]:r[1], c[0]:c[1]])
        for _ in range(40):
            r0, r1 = np.sort(rng.integers(0, n + 1, 2))
            c0, c1 = np.sort(rng.integers(0, n + 1, 2))
            sub = ds.submatrix(version, (r0, r1), (c0, c1))
            assert sub.has_sorted_indices
            assert np.array_equal(sub.toarray(), ref[r0:r1, c0:c1])
        assert np.array_equal(ds.submatrix(version, (0, n), (0, n)).toarray(), ref)
    assert meta["nnz_max_over_mean"] == pytest.approx(nnz_max_over_mean_used(mhat, pr, pc, 3, 4))
    assert meta["matrix_nnz"] == mhat.nnz and meta["nnz"] == graph.nnz


def test_meta_contents(graph, tmp_path):
    pr, pc, meta = write(graph, tmp_path / "ds", blocks=(2, 5))
    on_disk = json.loads((tmp_path / "ds" / "meta.json").read_text())
    assert on_disk["format_version"] == FORMAT_VERSION == 2
    for key in ("n", "num_features", "num_classes", "nnz", "directed", "weighted", "blocks", "row_bounds",
                "col_bounds", "method", "seed", "files", "checksums", "nnz_max_over_mean", "node_chunk_bounds"):
        assert key in on_disk, key
    # checksums: the SHA-256 and size of every file, at the same place as its name in files
    files, sums = on_disk["files"], on_disk["checksums"]
    pairs = [(files["perm_r"], sums["perm_r"])] + list(zip(sum(files["rc"], []), sum(sums["rc"], [])))
    pairs += [(f, c) for name in files["nodes"] for f, c in zip(files["nodes"][name], sums["nodes"][name])]
    for rel, c in pairs:
        data = (tmp_path / "ds" / rel).read_bytes()
        assert c == {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}, rel
    assert on_disk["blocks"] == [2, 5] and on_disk["row_bounds"] == even_bounds(37, 2).tolist()
    assert on_disk["col_bounds"] == even_bounds(37, 5).tolist() and on_disk["method"] == "double"
    ds = ShardedDataset(tmp_path / "ds")
    gm = ds.graph_meta()
    assert gm["n"] == 37 and gm["num_features"] == 5 and gm["directed"] and "files" not in gm
    assert ds.num_classes == graph.num_classes and ds.double
    for rel in [on_disk["files"]["perm_r"]] + sum(on_disk["files"]["cr"], []):
        assert (tmp_path / "ds" / rel).is_file()


def test_node_rows(graph, tmp_path):
    write(graph, tmp_path / "ds", node_chunks=4)
    ds = ShardedDataset(tmp_path / "ds")
    rng = np.random.default_rng(2)
    ids = rng.integers(0, graph.n, 25)  # unsorted, with repeats
    for name in ("x", "y", "train_mask", "val_mask", "test_mask"):
        got = ds.node_rows(name, ids)
        ref = getattr(graph, name)[ids]
        assert got.dtype == ref.dtype and np.array_equal(got, ref), name
        assert np.array_equal(ds.node_array(name), getattr(graph, name))
    assert ds.node_rows("x", np.array([], dtype=np.int64)).shape == (0, 5)
    assert np.array_equal(ds.node_rows("x", ds.perm_c[5:9]), graph.x[ds.perm_c[5:9]])


def test_only_intersecting_blocks_are_read(graph, tmp_path, monkeypatch):
    write(graph, tmp_path / "ds", blocks=(3, 4))
    ds = ShardedDataset(tmp_path / "ds")
    seen = []
    orig = ShardedDataset._load_block

    def spy(self, version, a, b):
        seen.append((version, a, b))
        return orig(self, version, a, b)

    monkeypatch.setattr(ShardedDataset, "_load_block", spy)
    rb, cb = ds.row_bounds, ds.col_bounds
    ds.submatrix("cr", (rb[1], rb[2]), (cb[2], cb[3]))
    assert seen == [("cr", 1, 2)]
    seen.clear()
    ds.submatrix("rc", (rb[1] - 1, rb[1] + 1), (cb[3] - 2, cb[3]))   # straddles row blocks 0|1, inside col 2
    assert sorted(seen) == [("rc", 0, 2), ("rc", 1, 2)]
    seen.clear()
    ds.submatrix("rc", (3, 3), (0, ds.n))
    assert seen == []


def test_graph_without_labels(tmp_path):
    g = random_graph(n=20, m=40, seed=1, node_data=False)
    write(g, tmp_path / "ds", blocks=(2, 2))
    ds = ShardedDataset(tmp_path / "ds")
    assert ds.node_rows("y", [1, 2]) is None and ds.node_array_names() == ()
    with pytest.raises(GridGnnError, match="'feat' is not stored"):
        ds.node_rows("feat", [1])


def test_reader_errors(graph, tmp_path):
    with pytest.raises(GridGnnError, match="does not exist") as e:
        ShardedDataset(tmp_path / "nope")
    assert str(tmp_path / "nope") in str(e.value)
    (tmp_path / "empty").mkdir()
    with pytest.raises(GridGnnError, match="meta.json not found"):
        ShardedDataset(tmp_path / "empty")
    write(graph, tmp_path / "ds")
    ds = ShardedDataset(tmp_path / "ds")
    for bad in [((0, 40), (0, 5)), ((5, 2), (0, 5)), ((-1, 2), (0, 5)), ((0, 2), (0, 38))]:
        with pytest.raises(GridGnnError, match="range"):
            ds.submatrix("rc", *bad)
    with pytest.raises(GridGnnError, match="unknown matrix version"):
        ds.submatrix("rr", (0, 1), (0, 1))
    with pytest.raises(GridGnnError, match="out of range"):
        ds.node_rows("x", [0, 37])

    # corrupt block file: garbage bytes, then a valid npz with the wrong shape
    blk = tmp_path / "ds" / "rc" / "block_001_002.npz"
    blk.write_bytes(b"not a zip file at all")
    rb, cb = ds.row_bounds, ds.col_bounds
    with pytest.raises(GridGnnError, match="block_001_002.npz"):
        ds.submatrix("rc", (rb[1], rb[2]), (cb[2], cb[3]))
    ds.submatrix("rc", (rb[0], rb[1]), (0, ds.n))  # other blocks still read
    np.savez(blk, indptr=np.zeros(3, dtype=np.int64), indices=np.zeros(0, dtype=np.int32),
             data=np.zeros(0), shape=np.array([2, 9]))
    with pytest.raises(GridGnnError, match="block_001_002.npz: its size .* does not match meta.json"):
        ds.submatrix("rc", (rb[1], rb[2]), (cb[2], cb[3]))
    # the same file with its checksum recorded (a dataset whose hashes match): the block's own checks refuse it
    ds = ShardedDataset(_rehash(tmp_path / "ds"))
    with pytest.raises(GridGnnError, match="block_001_002.npz is corrupt"):
        ds.submatrix("rc", (rb[1], rb[2]), (cb[2], cb[3]))
    blk.unlink()
    with pytest.raises(GridGnnError, match="block_001_002.npz is missing"):
        ds.submatrix("rc", (rb[1], rb[2]), (cb[2], cb[3]))
    with pytest.raises(GridGnnError, match="block_001_002.npz is missing"):
        ShardedDataset(tmp_path / "ds")  # opening checks that every file is there
    write(graph, tmp_path / "ds")
    ds = ShardedDataset(tmp_path / "ds")
    chunk = tmp_path / "ds" / ds.meta["files"]["nodes"]["x"][0]
    np.save(chunk, np.zeros((2, 2), dtype=np.float32))
    with pytest.raises(GridGnnError, match="x_0000.npy: its size"):
        ds.node_rows("x", [0])
    with pytest.raises(GridGnnError, match="x_0000.npy is corrupt"):
        ShardedDataset(_rehash(tmp_path / "ds"))

    # wrong format version, broken JSON, broken permutation
    write(graph, tmp_path / "ds")
    meta_path = tmp_path / "ds" / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps(dict(meta, format_version=3)))
    with pytest.raises(GridGnnError, match="format_version 3"):
        ShardedDataset(tmp_path / "ds")
    meta_path.write_text("{ not json")
    with pytest.raises(GridGnnError, match="cannot read .*meta.json"):
        ShardedDataset(tmp_path / "ds")
    meta_path.write_text(json.dumps(dict(meta, blocks=[5, 4])))
    with pytest.raises(GridGnnError, match="inconsistent"):
        ShardedDataset(tmp_path / "ds")
    meta_path.write_text(json.dumps(meta))
    np.save(tmp_path / "ds" / "perm_c.npy", np.zeros(37, dtype=np.int64))
    with pytest.raises(GridGnnError, match="perm_c.npy: its content does not match the SHA-256 hash"):
        ShardedDataset(tmp_path / "ds")
    with pytest.raises(GridGnnError, match="perm_c.*not a permutation"):
        ShardedDataset(_rehash(tmp_path / "ds"))


def test_writer_errors(graph, tmp_path):
    pr, pc = double_permutation(graph.n, 0)
    with pytest.raises(GridGnnError, match="blocks"):
        write_sharded(graph, tmp_path / "a", perm_r=pr, perm_c=pc, blocks=(38, 1))
    with pytest.raises(GridGnnError, match="perm_c"):
        write_sharded(graph, tmp_path / "a", perm_r=pr, perm_c=pc[:-1], blocks=(2, 2))
    with pytest.raises(GridGnnError, match="not a permutation"):
        write_sharded(graph, tmp_path / "a", perm_r=np.zeros(graph.n, dtype=int), perm_c=pc, blocks=(2, 2))
    (tmp_path / "file").write_text("x")
    with pytest.raises(GridGnnError, match="not a directory"):
        write_sharded(graph, tmp_path / "file", perm_r=pr, perm_c=pc, blocks=(2, 2))


def test_unnormalized_store(graph, tmp_path):
    pr, pc, _ = write(graph, tmp_path / "ds", normalize=False)
    ds = ShardedDataset(tmp_path / "ds")
    n = graph.n
    assert np.array_equal(ds.submatrix("rc", (0, n), (0, n)).toarray(), graph.csr().toarray()[pr][:, pc])


def test_shard_command(tmp_path, capsys):
    p = argparse.ArgumentParser()
    add_shard_arguments(p)
    args = p.parse_args(["--data", "synthetic:sbm?n=500&classes=4&avg_degree=6&features=8", "--blocks", "4x2",
                         "--method", "balanced-perm", "--seed", "3", "--out", str(tmp_path / "out")])
    assert run_shard_command(args) == 0
    printed = capsys.readouterr().out
    assert "nnz max/mean" in printed and "4x2" in printed
    ds = ShardedDataset(tmp_path / "out")
    assert ds.blocks == (4, 2) and ds.meta["method"] == "balanced-perm" and ds.meta["seed"] == 3
    from gridgnn.graph import load_graph
    g = load_graph(args.data, seed=3)
    mhat = gcn_normalize(g)
    pr, pc = balanced_permutation(mhat, 4, 2, seed=3)
    assert np.array_equal(ds.perm_r, pr) and np.array_equal(ds.perm_c, pc)
    ref = permute_matrix(mhat, pc, pr).toarray()
    assert np.allclose(ds.submatrix("cr", (100, 300), (0, 500)).toarray(), ref[100:300])
    with pytest.raises(GridGnnError, match=r"--seed must be in \[0, "):  # not NumPy's traceback
        run_shard_command(p.parse_args(["--data", args.data, "--blocks", "2x2", "--seed", "-1",
                                        "--out", str(tmp_path / "neg")]))
    with pytest.raises(GridGnnError, match="blocks"):
        run_shard_command(argparse.Namespace(data=args.data, blocks="4y2", method="double-perm", seed=0,
                                             out=str(tmp_path / "o2")))
    # --memory-budget bounds what is read in passes; a SPEC read whole (here a generated SBM) refuses it
    with pytest.raises(GridGnnError, match="this data is read whole in memory: leave --memory-budget out"):
        run_shard_command(p.parse_args(["--data", args.data, "--blocks", "2x2", "--memory-budget", "1M",
                                        "--out", str(tmp_path / "budget")]))


# ---------------------------------------------------------------------------------------------- peak memory
_READER = r"""
import json, sys, tracemalloc
import numpy as np
from gridgnn.graph.sharded import ShardedDataset
from gridgnn.distributed.machine import measured_peak_bytes as peak  # VmHWM: this process's own peak

before = peak()
tracemalloc.start()
ds = ShardedDataset(sys.argv[1])
keep = []
if sys.argv[2] == "whole":
    for v in ("rc", "cr"):
        keep.append(ds.submatrix(v, (0, ds.n), (0, ds.n)))
    for name in ds.node_array_names():
        keep.append(ds.node_array(name))
else:  # rank (2, 5) of an 8x8 grid: one row band x one column band of layer 0, and its input rows
    rb, cb = ds.row_bounds, ds.col_bounds
    keep.append(ds.submatrix("rc", (rb[2], rb[3]), (cb[5], cb[6])))
    for name in ds.node_array_names():
        keep.append(ds.node_rows(name, ds.perm_c[cb[5]:cb[6]]))
print(json.dumps(dict(rss=peak() - before, traced=tracemalloc.get_traced_memory()[1])))
"""


def _measure(path, mode):
    env = dict(os.environ, PYTHONPATH=str(SRC) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-c", _READER, str(path), mode], capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_one_rank_reads_a_small_fraction_of_the_memory(tmp_path):
    g = sbm_graph(n=200_000, classes=8, avg_degree=20, features=64, seed=0)
    pr, pc = double_permutation(g.n, 0)
    write_sharded(g, tmp_path / "ds", perm_r=pr, perm_c=pc, blocks=(8, 8), partition_name="double-perm")
    del g
    part = _measure(tmp_path / "ds", "part")
    whole = _measure(tmp_path / "ds", "whole")
    # whole: 2 versions x ~4.2M entries x 12 B + 51 MB of features, about 150 MB of data
    assert whole["traced"] > 100e6
    assert part["traced"] < 0.35 * whole["traced"]
    assert part["rss"] < 0.35 * whole["rss"]
    print(f"peak RSS delta: one rank {part['rss'] / 2**20:.1f} MiB, whole {whole['rss'] / 2**20:.1f} MiB "
          f"(ratio {part['rss'] / whole['rss']:.3f}); traced {part['traced'] / whole['traced']:.3f}")


def test_a_model_that_reads_edge_features_is_refused_a_dataset_that_dropped_them(tmp_path):
    """GATv2 reads edge features where the graph has them: on a sharded dataset of a graph that had some (not
    written), it trained without them and gave other logits than on the SPEC, without a word."""
    import gridgnn

    spec = "synthetic:sbm?n=200&classes=3&features=8&edge_features=4"
    gridgnn.shard(spec, str(tmp_path / "sh"), blocks="2x2", method="single-perm")
    with pytest.raises(GridGnnError, match="source had 4-wide ones, which it does not hold"):
        gridgnn.train(data=f"sharded:{tmp_path / 'sh'}", model="gatv2", algo="1d", nproc=2, epochs=1, quiet=True)
    s = gridgnn.train(data=f"sharded:{tmp_path / 'sh'}", model="gatv2", algo="1d", nproc=2, epochs=1, quiet=True,
                      edge_dim=0)
    assert s["config"]["edge_dim"] == 0


def test_overlapping_masks_and_early_stop_without_validation_are_refused_on_a_sharded_dataset(tmp_path, monkeypatch):
    """A sharded dataset's masks are checked as a graph in memory's are (the reader gathers them chunk by chunk):
    a vertex in two splits, or ``--early-stop`` with no labelled validation vertex, was trained on without a word
    from ``sharded:``, where the same graph in memory is refused."""
    import gridgnn
    from gridgnn.graph.graph import SplitFacts
    from gridgnn.graph.spec import load_graph

    g = load_graph("synthetic:sbm?n=60&classes=3&avg_degree=4&features=4")
    test = g.test_mask.copy()
    both = np.flatnonzero(g.train_mask[30:])[:2] + 30  # in the second of three node chunks
    test[both] = True
    pr = pc = single_permutation(g.n, 3)
    write_sharded(g.with_(test_mask=test), tmp_path / "overlap", perm_r=pr, perm_c=pc, blocks=(2, 2),
                  partition_name="single-perm", seed=3, node_chunks=3)
    facts = ShardedDataset(tmp_path / "overlap").split_facts
    whole = SplitFacts.of(g.with_(test_mask=test))
    assert facts == whole and facts.overlaps == {("train", "test"): (2, int(both[0]))}
    assert facts.labelled_val == int((g.val_mask & (g.y >= 0)).sum()) > 0
    monkeypatch.setenv("HOME", str(tmp_path))  # (the scheme in any case and ~ expanded, as every SPEC's)
    with pytest.raises(GridGnnError, match=f"train and test masks share 2 vertices \\(e.g. vertex {both[0]}\\)"):
        gridgnn.train(data=" Sharded:~/overlap", algo="1d", nproc=2, epochs=1, quiet=True)
    write_sharded(g.with_(val_mask=np.zeros(g.n, bool)), tmp_path / "noval", perm_r=pr, perm_c=pc, blocks=(2, 2),
                  partition_name="single-perm", seed=3)
    assert ShardedDataset(tmp_path / "noval").split_facts == SplitFacts()
    with pytest.raises(GridGnnError, match="--early-stop 2 watches the validation accuracy; the graph has no "
                                           "labelled validation vertices"):
        gridgnn.train(data=f"sharded:{tmp_path / 'noval'}", algo="1d", nproc=2, epochs=1, quiet=True, early_stop=2)


def test_a_sharded_spec_is_read_as_every_spec_is(tmp_path, monkeypatch):
    """``sharded:`` in any case, with spaces around the SPEC and ``~`` in its folder, as ``parse_spec`` reads the
    other schemes: ``Sharded:DIR`` was told it is a sharded dataset that cannot be loaded, ``sharded:~/DIR`` that the
    folder does not exist, and the config's refusals (``--partition``, link prediction, minibatches) missed it."""
    from gridgnn.graph.spec import sharded_dir, spec_key
    from gridgnn.train.config import TrainConfig

    monkeypatch.setenv("HOME", str(tmp_path))
    assert sharded_dir(" SHARDED:~/ds ") == str(tmp_path / "ds") and sharded_dir("sharded:ds") == "ds"
    assert sharded_dir("npz:ds") is None and sharded_dir(None) is None and sharded_dir("shardedds") is None
    assert spec_key(" Sharded:~/ds") == spec_key(f"sharded:{tmp_path / 'ds'}")
    for kw, refused in ((dict(partition="metis"), "a sharded dataset fixes the vertex order"),
                        (dict(task="link"), "--task link cannot be combined with sharded: data"),
                        (dict(sampler="sage", model="sage", algo="serial"), "sharded: data is not available with --sampler")):
        with pytest.raises(GridGnnError, match=refused):
            TrainConfig(data="Sharded:~/ds", **{"algo": "1d", "nproc": 2, **kw}).validate()


def test_shard_refuses_the_working_directory_and_loose_python_arguments(tmp_path, monkeypatch):
    """``--out .`` was written aside and swapped in, leaving the shell in a deleted folder (and the summary saying
    0.0 MiB); ``blocks=(2.9, True)`` sharded 2x1 and ``normalize="no"`` stored the normalized matrix."""
    import gridgnn

    spec = "synthetic:sbm?n=60&classes=2&avg_degree=4&features=4"
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    for out in (".", str(tmp_path)):
        with pytest.raises(GridGnnError, match="is the working directory or holds it"):
            gridgnn.shard(spec, out, blocks="2x2")
    assert not any((tmp_path / "here").iterdir())
    for kw in (dict(blocks=(2.9, 1)), dict(blocks=(True, 2))):
        with pytest.raises(GridGnnError, match="--blocks must look like RxC"):
            gridgnn.shard(spec, "ds", **kw)
    for name in ("normalize", "overwrite"):
        with pytest.raises(GridGnnError, match=f"{name} must be True or False, got 'no'"):
            gridgnn.shard(spec, "ds", blocks="2x2", **{name: "no"})
    assert gridgnn.shard(spec, "ds", blocks=(np.int64(2), 1))["blocks"] == [2, 1]  # inside it: written
