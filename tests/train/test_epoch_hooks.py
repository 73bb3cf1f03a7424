"""What follows every epoch: --early-stop (the same epoch on every algorithm and P), per-epoch callbacks on rank 0,
the kernel compilation share of an epoch line, whole byte counts in the summary; a model's own defaults
(--model agnn trains at its declared depth)."""
import json
import time

import numpy as np
import pytest
import torch

import gridgnn
from gridgnn.distributed.launch import launch
from gridgnn.errors import GridGnnError
from gridgnn.ops.kernels import _timed_first_calls, compile_seconds
from gridgnn.train.loop import compiling
from gridgnn.train.summary import stops_early
from gridgnn.train.full_graph import _step_line

from ._runs import group_worker, run_main

SBM = "synthetic:sbm?n=400&classes=3&avg_degree=6&features=12"
EARLY = ["--data", SBM, "--epochs", 80, "--early-stop", 3, "--lr", 0.05, "--dtype", "float64", "--quiet"]


class Recorder:
    """A per-epoch callback (module-level: picklable for spawned ranks)."""

    def __init__(self):
        self.records = []

    def __call__(self, record):
        self.records.append(record)


class FileRecorder:
    """A callback for a spawned job: what it records must leave rank 0's process."""

    def __init__(self, path):
        self.path = str(path)

    def __call__(self, record):
        with open(self.path, "a") as fh:
            fh.write(json.dumps(record["epoch"]) + "\n")


def failing(record):
    if record["epoch"] == 1:
        raise ValueError("enough")


def test_early_stop_rule():
    recs = [{"epoch": i, "val_acc": v} for i, v in enumerate([0.1, 0.5, 0.5, 0.4, 0.5])]
    assert not stops_early(recs[:4], 3) and stops_early(recs[:5], 3)  # best epoch 1 (the first 0.5): 3 without gain
    assert not stops_early(recs, 0)  # 0: never
    assert not stops_early([{"epoch": i, "val_acc": None} for i in range(9)], 2)  # nothing validated: never


def test_early_stop_is_the_same_epoch_on_every_algorithm(tmp_path):
    serial = tmp_path / "serial"
    assert run_main(["train", *EARLY, "--out", serial]) == 0
    ref = json.loads((serial / "summary.json").read_text())
    assert ref["epochs_trained"] < 80 and ref["epochs_trained"] == ref["best_epoch"] + 3 + 1
    assert len((serial / "metrics.jsonl").read_text().splitlines()) == ref["epochs_trained"]
    runs = {"2d": ["--algo", "2d", "--grid", "2,2"], "plexus": ["--algo", "plexus", "--grid", "1,2,2"]}
    launch(group_worker, 4, [[*EARLY, *argv, "--nproc", 4, "--save-logits", "--out", tmp_path / name]
                             for name, argv in runs.items()], device="cpu", collect=True)
    for name in runs:
        s = json.loads((tmp_path / name / "summary.json").read_text())
        assert (s["epochs_trained"], s["best_epoch"]) == (ref["epochs_trained"], ref["best_epoch"]), name
        assert abs(s["final_loss"] - ref["final_loss"]) <= 1e-9 * ref["final_loss"], name
        # bytes per epoch are whole numbers (every epoch moves the same bytes)
        assert isinstance(s["comm_bytes_per_epoch"]["total"], int) and s["comm_bytes_per_epoch"]["total"] > 0
        assert all(isinstance(v, int) for v in s["comm_bytes_per_epoch"]["by_phase"].values())
    model = gridgnn.load(str(tmp_path / "2d"))
    trained = torch.load(tmp_path / "2d" / "model.pt", weights_only=True)["epoch"]  # the epochs its weights saw
    assert trained == ref["best_epoch"] + 1 == model.epoch  # --keep best: up to the best epoch, not the last
    assert model.dims == [12, 16, 3]
    # model.pt of Plexus (weights sharded over the grid) holds the trained parameters: predicting serially with them
    # gives the run's own logits
    plexus = gridgnn.load(str(tmp_path / "plexus"))
    np.testing.assert_allclose(plexus.predict(SBM), np.load(tmp_path / "plexus" / "logits.npy"), rtol=1e-9,
                               atol=1e-12)


def test_callbacks_see_every_epoch_on_rank_0(tmp_path):
    rec = Recorder()
    result = gridgnn.train(data=SBM, epochs=4, quiet=True, callbacks=[rec], out=str(tmp_path / "run"))
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert rec.records == lines and result["epochs_trained"] == 4
    seen = []
    gridgnn.train(data=SBM, epochs=2, quiet=True, callbacks=[lambda r: seen.append(r["epoch"])])  # in this process
    assert seen == [0, 1]
    with pytest.raises(GridGnnError, match="cannot be sent to the spawned ranks"):  # before any rank starts
        gridgnn.train(data=SBM, epochs=2, algo="1d", nproc=2, callbacks=[lambda r: None])
    gridgnn.train(data=SBM, epochs=3, algo="1d", nproc=2, quiet=True, callbacks=[FileRecorder(tmp_path / "e.txt")])
    assert (tmp_path / "e.txt").read_text().split() == ["0", "1", "2"]  # rank 0 only, every epoch
    with pytest.raises(GridGnnError, match="callback failing failed after epoch 1: ValueError: enough"):
        gridgnn.train(data=SBM, epochs=4, quiet=True, callbacks=[failing])


class _FakeKernel:
    """A numba dispatcher's surface: calling it with a new argument type adds a signature (compiles)."""

    def __init__(self):
        self.signatures = []

    def __call__(self, x):
        if type(x) not in self.signatures:
            time.sleep(0.05)
            self.signatures.append(type(x))
        return x


def test_epoch_line_names_kernel_compilation():
    kernel = _timed_first_calls(_FakeKernel())
    before = compile_seconds()
    kernel(1)
    first = compile_seconds() - before
    kernel(2)  # the same signature: nothing compiled
    assert first >= 0.05 and compile_seconds() - before == first
    kernel(1.0)  # a new signature
    assert compile_seconds() - before >= first + 0.05
    assert compiling({"compile_time_s": 0.8123}) == "; of it 812 ms compiling kernels"
    assert compiling({"compile_time_s": 0.0}) == "" and compiling({}) == ""
    assert "812 ms compiling kernels) |" in _step_line({"epoch": 0, "loss": 1.0, "epoch_time_s": 0.9,
                                                       "compute_time_s": 0.9, "comm_time_s": 0.0, "bytes_sent": 0,
                                                       "compile_time_s": 0.8123})
    result = gridgnn.train(data=SBM, model="gat", heads=2, epochs=2, quiet=True, callbacks=[rec := Recorder()])
    assert result["epochs_trained"] == 2
    assert all(r["compile_time_s"] >= 0 for r in rec.records)
    assert rec.records[1]["compile_time_s"] <= rec.records[0]["compile_time_s"] + 1e-3  # compiled once, if at all


def test_a_model_trains_at_its_declared_defaults():
    result = gridgnn.train(data=SBM, model="agnn", epochs=2, quiet=True)  # --layers 2 would be refused
    assert result["layers"] == 4 and result.model.dims == [12, 16, 16, 16, 3]
    assert run_main(["train", "--data", SBM, "--model", "agnn", "--layers", 2, "--epochs", 1, "--quiet"]) == 2
    assert run_main(["train", "--data", SBM, "--model", "gat", "--heads", 0, "--epochs", 1, "--quiet"]) == 2
    assert gridgnn.train(data=SBM, model="sage", sampler="sage", fanout=[5, 5], batch_size=64, epochs=1,
                         quiet=True)["fanout"] == [5, 5]
