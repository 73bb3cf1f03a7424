"""``--log tensorboard`` (issue 44): every epoch record's numbers as TensorBoard scalars in ``OUT/tensorboard``, read
back with TensorBoard's own reader; written live into a hidden folder that goes with ``metrics.jsonl`` — committed,
kept on an interrupt, removed with a failed loop — and refused in one line without ``--out`` or the package."""
import json
import sys

import pytest

from gridgnn.errors import GridGnnError
from gridgnn.train.config import TrainConfig

tensorboard = pytest.importorskip("tensorboard", reason="--log tensorboard needs the tensorboard package "
                                                        "(pip install gridgnn[log])")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402


def scalars(folder) -> dict:
    acc = EventAccumulator(str(folder))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_every_epochs_numbers_are_scalars_equal_to_metrics_jsonl(tmp_path):
    import gridgnn

    out = tmp_path / "run"
    gridgnn.train(data="synthetic:sbm?n=200&classes=3&avg_degree=6&features=8", epochs=4, quiet=True, out=str(out),
                  log="tensorboard", lr_schedule="cosine")
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    got = scalars(out / "tensorboard")
    assert {"loss", "train_acc", "val_acc", "test_acc", "epoch_time_s", "bytes_sent", "lr"} <= set(got)
    for tag in ("loss", "val_acc", "lr"):
        assert [s for s, _ in got[tag]] == [r["epoch"] for r in records] == [0, 1, 2, 3]
        assert [v for _, v in got[tag]] == pytest.approx([r[tag] for r in records], rel=1e-6)  # (float32 events)
    assert len({v for _, v in got["lr"]}) == 4  # the cosine schedule's rates, one per epoch
    assert not [p.name for p in out.iterdir() if p.name.startswith(".tensorboard")]


def test_the_events_go_with_the_metrics(tmp_path):
    """A loop that fails removes the hidden folder with the temporary metrics; an interrupted one keeps both."""
    from gridgnn.train.loop import _RunFiles

    out = tmp_path / "run"
    files = _RunFiles(TrainConfig(out=str(out), log="tensorboard"), [])
    files.append({"epoch": 0, "loss": 1.0})
    hidden = [p for p in out.iterdir() if p.name.startswith(".tensorboard.")]
    assert len(hidden) == 1 and scalars(hidden[0])["loss"] == [(0, 1.0)]  # readable while the run goes on
    files.abandon()
    assert not out.exists()
    files = _RunFiles(TrainConfig(out=str(out), log="tensorboard"), [{"epoch": 0, "loss": 1.0}])  # a resumed run's
    files.append({"epoch": 1, "loss": 0.5})
    assert files.keep([{"epoch": 0, "loss": 1.0}, {"epoch": 1, "loss": 0.5}], lambda: {"interrupted": "SIGINT"})
    assert sorted(p.name for p in out.iterdir()) == ["metrics.csv", "metrics.jsonl", "summary.json", "tensorboard"]
    assert scalars(out / "tensorboard")["loss"] == [(0, 1.0), (1, 0.5)]


def test_refused_in_one_line_without_out_or_the_package(tmp_path, monkeypatch):
    with pytest.raises(GridGnnError, match="--log tensorboard writes OUT/tensorboard; give --out DIR"):
        TrainConfig(log="tensorboard").validate()
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # an import of it fails
    with pytest.raises(GridGnnError, match="needs the tensorboard package: pip install tensorboard"):
        TrainConfig(log="tensorboard", out=str(tmp_path / "x")).validate()
    with pytest.raises(GridGnnError, match="--log"):
        TrainConfig(log="wandb").validate()


def test_a_launch_interrupted_by_sigterm_keeps_the_events(tmp_path):
    """The launcher's keep (rank 0 was stopped before it could keep its epochs itself) renames the events too."""
    from gridgnn.train.outputs import MetricsLog, TensorBoardLog, keep_interrupted

    log, events = MetricsLog(str(tmp_path / "metrics.jsonl")), TensorBoardLog(str(tmp_path))
    for e in range(2):
        log.append({"epoch": e, "loss": 1.0 / (e + 1)})
        events.append({"epoch": e, "loss": 1.0 / (e + 1)})
    log.close()
    events.writer.close()
    assert keep_interrupted(str(tmp_path), lambda recs: {"n": len(recs)}) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.csv", "metrics.jsonl", "summary.json", "tensorboard"]
    assert scalars(tmp_path / "tensorboard")["loss"] == [(0, 1.0), (1, 0.5)]


def test_a_tensorboard_folder_of_the_users_own_is_never_an_output(tmp_path):
    """Only a folder gridgnn wrote (its marker inside) counts as a previous output and is replaced; one of the
    user's is left alone by a run and by --overwrite, and --log tensorboard into it is refused in one line."""
    from gridgnn.train.outputs import clear_outputs, previous_outputs

    out = tmp_path / "run"
    (out / "tensorboard").mkdir(parents=True)
    (out / "tensorboard" / "mine.txt").write_text("my own events")
    assert previous_outputs(str(out)) == [] and clear_outputs(str(out)) == []
    assert (out / "tensorboard" / "mine.txt").exists()
    TrainConfig(out=str(out)).validate()  # a run without --log tensorboard writes there freely
    with pytest.raises(GridGnnError, match="holds a tensorboard folder that no gridgnn run wrote"):
        TrainConfig(out=str(out), log="tensorboard").validate()
    ours = tmp_path / "ours"
    import gridgnn

    for _ in range(2):  # the second run replaces the first one's events (--overwrite)
        gridgnn.train(data="synthetic:sbm?n=100&classes=2&avg_degree=4&features=4", epochs=2, quiet=True,
                      out=str(ours), log="tensorboard", overwrite=True)
        assert "tensorboard" in previous_outputs(str(ours))
        assert [s for s, _ in scalars(ours / "tensorboard")["loss"]] == [0, 1]
