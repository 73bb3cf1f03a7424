"""A graph handed over from Python to spawned ranks — or loaded once from a SPEC by the launching process — reaches
them as shards written once (gridgnn.train.handover), not as a whole copy per rank: the runs equal the runs whose
ranks load the spec themselves bit for bit,
the file's vertex ids survive, and the temporary shards are gone afterwards, whatever the outcome."""
import os

import numpy as np
import pytest

import gridgnn
from gridgnn.errors import GridGnnError
from gridgnn.train import launching
from gridgnn.train.handover import GraphShards

SMALL = "synthetic:sbm?n=240&classes=3&avg_degree=6&features=8"


@pytest.fixture
def handed(monkeypatch):
    """Records what each launch hands its ranks (type, and whether its shards exist at that moment)."""
    seen = []
    real = launching.launch_ranks

    def recording(worker, cfg, graph, *args, **kw):
        seen.append((graph, graph is not None and os.path.isfile(os.path.join(graph.path, "meta.json"))))
        return real(worker, cfg, graph, *args, **kw)

    monkeypatch.setattr(launching, "launch_ranks", recording)
    return seen


def test_ranks_read_shards_and_train_as_from_the_spec(tmp_path, handed):
    """VA (features read with unit-L2 rows from the shards' chunks) on Plexus with two vertex orders, at P = 4:
    the same logits bit for bit as the run whose ranks load the spec; node_ids.npy keeps the graph's own ids."""
    graph = gridgnn.load_graph(SMALL, seed=5)
    ids = np.arange(graph.n, dtype=np.int64) * 3 + 7
    common = dict(model="va", algo="plexus", partition="double-perm", nproc=4, grid=[2, 1, 2], epochs=3,
                  dtype="float64", save_logits=True, quiet=True, seed=5)
    mem = gridgnn.train(graph=graph.with_(original_ids=ids), out=str(tmp_path / "mem"), **common)
    spec = gridgnn.train(data=SMALL, out=str(tmp_path / "spec"), **common)  # loaded once here, handed over too
    from gridgnn.train.worker import train_worker

    cfg = gridgnn.TrainConfig(data=SMALL, out=str(tmp_path / "ranks"), **common)
    cfg.validate()
    ranks = launching.launch_ranks(train_worker, cfg, None, False, ())[0]  # the ranks load the spec themselves
    (given, existed), (from_spec, _), (none, _) = handed
    assert isinstance(given, GraphShards) and existed and given.bounds is None and none is None
    assert isinstance(from_spec, GraphShards) and from_spec.name == SMALL == spec["data"] == ranks["data"]
    assert not os.path.exists(given.path) and not os.path.exists(from_spec.path)  # removed once the ranks are done
    assert mem["data"] == f"in-memory:{graph.name}" and mem["partition"] == "double-perm"
    for other in ("spec", "ranks"):
        assert np.array_equal(np.load(tmp_path / "mem" / "logits.npy"), np.load(tmp_path / other / "logits.npy"))
    assert np.array_equal(np.load(tmp_path / "mem" / "node_ids.npy"), ids)
    assert mem["final_loss"] == spec["final_loss"] == ranks["final_loss"]


def test_uneven_row_blocks_predict_like_serial(tmp_path, handed):
    """A graph partitioner's row blocks (uneven) travel with the shards: 1D inference with METIS at P = 2 equals
    the serial inference of the same model."""
    pytest.importorskip("pymetis")
    graph = gridgnn.load_graph(SMALL, seed=1)
    model = gridgnn.train(graph=graph, epochs=2, dtype="float64", quiet=True).model
    ref = model.predict(graph)
    got = model.predict(graph, algo="1d", partition="metis", nproc=2)
    given = handed[-1][0]
    assert isinstance(given, GraphShards) and given.bounds is not None
    assert len(set(np.diff(given.bounds))) > 1, "METIS gave equal blocks: the test no longer covers uneven bounds"
    assert np.abs(got - ref).max() <= 1e-9 * np.abs(ref).max()
    assert not os.path.exists(given.path)


def test_shards_are_removed_when_the_launch_fails(monkeypatch):
    """Whatever ends the launch, the temporary shards go; bad input is refused before any are written."""
    seen = []

    def failing(worker, cfg, graph, *args, **kw):
        seen.append(graph.path)
        raise SystemExit(1)

    monkeypatch.setattr(launching, "launch_ranks", failing)
    graph = gridgnn.load_graph(SMALL)
    with pytest.raises(gridgnn.TrainingFailed):
        gridgnn.train(graph=graph, algo="1d", nproc=2, epochs=1, quiet=True)
    assert seen and not os.path.exists(seen[0])
    with pytest.raises(GridGnnError, match="no labelled training nodes"):
        gridgnn.train(graph=graph.with_(train_mask=np.zeros(graph.n, bool)), algo="1d", nproc=2, epochs=1,
                      quiet=True)
    assert len(seen) == 1


def test_python_shard_writes_a_dataset_the_ranks_read(tmp_path):
    """gridgnn.shard from Python (a graph in memory) is the command's dataset; training on it equals the
    in-memory run, and an existing dataset is replaced only with overwrite."""
    graph = gridgnn.load_graph(SMALL, seed=2)
    meta = gridgnn.shard(graph, str(tmp_path / "ds"), blocks=(2, 2), method="single-perm", seed=2)
    assert meta["blocks"] == [2, 2] and meta["n"] == graph.n and meta["method"] == "single-perm"
    with pytest.raises(GridGnnError, match="add --overwrite"):
        gridgnn.shard(graph, str(tmp_path / "ds"), blocks=(2, 2))
    common = dict(algo="1d-sa", nproc=2, epochs=2, dtype="float64", quiet=True, seed=2)
    a = gridgnn.train(data=f"sharded:{tmp_path / 'ds'}", **common)
    b = gridgnn.train(graph=graph, partition="single-perm", **common)
    assert a["final_loss"] == b["final_loss"] and a["partition"] == b["partition"] == "single-perm"


_SIGTERM_WHILE_WRITING = """
import os, signal, sys
import gridgnn
import gridgnn.graph.sharded as sharded

def write_then_terminated(graph, folder, **kw):
    open(os.path.join(folder, "half-written"), "w").close()
    os.kill(os.getpid(), getattr(signal, sys.argv[2]))

sharded.write_sharded = write_then_terminated
try:
    gridgnn.train(graph=gridgnn.load_graph(sys.argv[1]), algo="1d", nproc=2, epochs=1, quiet=True)
except gridgnn.TrainingFailed as exc:
    sys.exit(exc.exit_status)
"""


@pytest.mark.parametrize("signame, status", [("SIGTERM", 143), ("SIGHUP", 129)])
def test_sigterm_while_writing_the_shards_leaves_nothing(tmp_path, signame, status):
    """SIGTERM, or SIGHUP (the terminal closed), while the shards are written (the long part for a big graph) ends
    the run with 128 + the signal and one line, and the half-written folder is removed (the default handler would
    end the process without its clean-up; SIGHUP's did, leaving the folder)."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-c", _SIGTERM_WHILE_WRITING, SMALL, signame], capture_output=True,
                       text=True, timeout=120, env=dict(os.environ, TMPDIR=str(tmp_path)))
    assert r.returncode == status, r.stderr[-2000:]
    assert r.stderr.strip().splitlines() == [f"gridgnn: interrupted ({signame}) while writing the graph's shards for "
                                             "the ranks; none started"], r.stderr[-2000:]
    assert not [p for p in os.listdir(tmp_path) if p.startswith("gridgnn-")]
