"""What follows every epoch: --early-stop (the same epoch on every algorithm and P), per-epoch callbacks on rank 0,
the kernel compilation share of an epoch line, whole byte counts in the summary; a model's own defaults
(--model agnn trains at its declared depth)."""
import json

import pytest
import torch

import gridgnn
from gridgnn.distributed.launch import launch
from gridgnn.errors import GridGnnError
from gridgnn.train.trainer import compiling, stops_early

from ._runs import group_worker, run_main

SBM = "synthetic:sbm?n=400&classes=3&avg_degree=6&features=12"
EARLY = ["--data", SBM, "--epochs", 80, "--early-stop", 3, "--lr", 0.05, "--dtype", "float64", "--quiet"]


class Recorder:
    """A per-epoch callback (module-level: picklable for spawned ranks)."""

    def __init__(self):
        self.records = []

    def __call__(self, record):
        self.records.append(record)


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
    launch(group_worker, 4, [[*EARLY, *argv, "--nproc", 4, "--out", tmp_path / name] for name, argv in runs.items()],
           device="cpu", collect=True)
    for name in runs:
        s = json.loads((tmp_path / name / "summary.json").read_text())
        assert (s["epochs_trained"], s["best_epoch"]) == (ref["epochs_trained"], ref["best_epoch"]), name
        assert abs(s["final_loss"] - ref["final_loss"]) <= 1e-9 * ref["final_loss"], name
        # bytes per epoch are whole numbers (every epoch moves the same bytes)
        assert isinstance(s["comm_bytes_per_epoch"]["total"], int) and s["comm_bytes_per_epoch"]["total"] > 0
        assert all(isinstance(v, int) for v in s["comm_bytes_per_epoch"]["by_phase"].values())
    model = gridgnn.load(str(tmp_path / "2d"))
    trained = torch.load(tmp_path / "2d" / "model.pt", weights_only=True)["epoch"]  # the epochs its weights saw
    assert trained == ref["epochs_trained"]
    assert model.dims == [12, 16, 3]


def test_callbacks_see_every_epoch_on_rank_0(tmp_path):
    rec = Recorder()
    result = gridgnn.train(data=SBM, epochs=4, quiet=True, callbacks=[rec], out=str(tmp_path / "run"))
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert rec.records == lines and result["epochs_trained"] == 4
    with pytest.raises(GridGnnError, match="cannot be sent to the ranks"):
        gridgnn.train(data=SBM, epochs=2, callbacks=[lambda r: None])
    with pytest.raises(GridGnnError, match="callback failing failed after epoch 1: ValueError: enough"):
        gridgnn.train(data=SBM, epochs=4, quiet=True, callbacks=[failing])


def test_epoch_line_names_kernel_compilation():
    assert compiling({"compile_time_s": 0.8123}) == "; of it 812 ms compiling kernels"
    assert compiling({"compile_time_s": 0.0}) == "" and compiling({}) == ""
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
