"""The --out folder: created only after a successful set-up, never half-written, previous outputs replaced only
with --overwrite, strict JSON, a diverged run is an error naming the epoch."""
import csv
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from gridgnn.graph.loaders import save_npz
from gridgnn.graph.spec import load_graph
from gridgnn.train.outputs import MetricsLog, atomic_write

from ._runs import cli_batch, run_main

SBM = "synthetic:sbm?n=200&classes=4&avg_degree=6&features=8"


def _strict(text):
    return json.loads(text, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))


def _one_error(capsys, code, needle):
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("gridgnn: error: ") and needle in lines[0], err


def test_out_below_a_file_is_refused_and_nothing_is_created(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    code = run_main(["train", "--data", SBM, "--epochs", 2, "--quiet", "--out", tmp_path / "file" / "a" / "b"])
    _one_error(capsys, code, f"{tmp_path / 'file'} is not a directory")
    code = run_main(["train", "--data", SBM, "--epochs", 2, "--quiet", "--out", tmp_path / "file"])
    _one_error(capsys, code, "exists and is not a directory")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_failed_setup_leaves_no_out_folder(tmp_path, capsys):
    code = run_main(["train", "--data", f"npz:{tmp_path / 'missing.npz'}", "--epochs", 2, "--quiet",
                     "--out", tmp_path / "a" / "b"])
    _one_error(capsys, code, "missing.npz")
    assert list(tmp_path.iterdir()) == []


def test_previous_outputs_need_overwrite_which_removes_only_gridgnn_files(tmp_path, capsys):
    out = tmp_path / "run"
    assert run_main(["train", "--data", SBM, "--epochs", 2, "--checkpoint-every", 2, "--quiet", "--save-logits",
                     "--out", out]) == 0
    (out / "notes.txt").write_text("mine")
    (out / ".summary.json.tmp").write_text("{")  # left by a crashed writer
    before = (out / "summary.json").read_text()
    code = run_main(["train", "--data", SBM, "--epochs", 3, "--quiet", "--out", out])
    _one_error(capsys, code, "already holds a previous run's outputs (metrics.jsonl, metrics.csv, summary.json, "
                             "logits.npy, model.pt, breakdown.png, curves.png, checkpoint.pt); add --overwrite")
    assert (out / "summary.json").read_text() == before
    assert run_main(["train", "--data", SBM, "--epochs", 3, "--quiet", "--out", out, "--overwrite"]) == 0
    names = sorted(p.name for p in out.iterdir())
    assert names == ["breakdown.png", "curves.png", "metrics.csv", "metrics.jsonl", "model.pt", "notes.txt",
                     "summary.json"]  # no stale logits/checkpoint
    assert (out / "notes.txt").read_text() == "mine"
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(records) == 3
    with open(out / "metrics.csv", newline="") as fh:  # the same records as a table, every key a column
        table = list(csv.DictReader(fh))
    assert [int(r["epoch"]) for r in table] == [0, 1, 2] and list(table[0]) == list(records[0])
    assert [float(r["loss"]) for r in table] == [r["loss"] for r in records]  # (repr round-trips a float)
    assert _strict((out / "summary.json").read_text())["epochs"] == 3


def test_summary_is_strict_json_and_an_empty_split_is_null(tmp_path):
    g = load_graph(SBM)
    path = save_npz(g.with_(val_mask=None), tmp_path / "noval.npz")
    out = tmp_path / "run"
    assert run_main(["train", "--data", f"npz:{path}", "--epochs", 3, "--quiet", "--out", out]) == 0
    s = _strict((out / "summary.json").read_text())
    assert s["val_acc"] is None and s["best_epoch"] == 2 and 0.0 <= s["test_acc"] <= 1.0
    recs = [_strict(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["val_acc"] for r in recs] == [None] * 3 and all(r["test_acc"] is not None for r in recs)


def _huge_features(tmp_path, value):
    g = load_graph(SBM)
    return save_npz(g.with_(x=np.full_like(g.x, value)), tmp_path / f"huge{value:g}.npz")


def test_diverged_loss_is_an_error_naming_the_epoch(tmp_path, capsys):
    """float32 overflow in the first forward: no summary with NaN, and the new --out folder is gone again."""
    path = _huge_features(tmp_path, 3e38)
    code = run_main(["train", "--data", f"npz:{path}", "--epochs", 3, "--quiet", "--out", tmp_path / "run"])
    _one_error(capsys, code, "training diverged at epoch 0: the loss is nan")
    assert not (tmp_path / "run").exists()


def test_diverged_outputs_end_every_rank_with_one_line(tmp_path):
    """After the first update the outputs overflow: both ranks see it in the all-reduced metrics and stop alike;
    the checkpoint-less --out folder they started is removed."""
    path = _huge_features(tmp_path, 1e35)
    r, codes = cli_batch([["train", "--data", f"npz:{path}", "--epochs", 3, "--quiet", "--lr", 100, "--algo", "1d",
                           "--nproc", 2, "--out", tmp_path / "run"]])
    assert codes == [2], r.stderr[-2000:]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "training diverged at epoch 0: the model's outputs are not finite" in lines[0], r.stderr
    assert not (tmp_path / "run").exists()


def test_atomic_write_keeps_the_old_file_on_failure(tmp_path):
    path = tmp_path / "summary.json"
    path.write_text("old")
    with pytest.raises(ZeroDivisionError):
        with atomic_write(str(path), "w") as fh:
            fh.write("half")
            1 / 0
    assert path.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]
    with atomic_write(str(path), "w") as fh:
        fh.write("new")
    assert path.read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]


def test_metrics_log_appears_only_when_committed(tmp_path):
    path = tmp_path / "metrics.jsonl"
    log = MetricsLog(str(path), [{"epoch": 0, "loss": 1.0}])
    log.append({"epoch": 1, "loss": 0.5, "val_acc": None})
    assert not path.exists() and [p.name for p in tmp_path.iterdir()] == [os.path.basename(log.tmp)]
    assert re.fullmatch(r"\.metrics\.jsonl\.[0-9a-f]{8}\.tmp", os.path.basename(log.tmp))
    log.commit()
    assert [_strict(x)["epoch"] for x in path.read_text().splitlines()] == [0, 1]
    log = MetricsLog(str(tmp_path / "other.jsonl"))
    log.append({"epoch": 0})
    log.discard()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.jsonl"]


def test_an_interrupted_runs_finished_epochs_are_kept(tmp_path):
    """keep_interrupted: the complete lines of the temporary metrics (a line cut short by the signal ends them)
    become metrics.jsonl and metrics.csv, the summary is the caller's, the temporary file and lock go; nothing is
    kept without a finished epoch, or while another run holds the folder."""
    from gridgnn.train.outputs import OutLock, keep_interrupted

    log = MetricsLog(str(tmp_path / "metrics.jsonl"))
    for e in range(3):
        log.append({"epoch": e, "loss": 1.0 / (e + 1), "val_acc": None if e == 0 else 0.5})
    log._fh.write('{"epoch": 3, "lo')  # cut short
    log.close()
    held = OutLock(str(tmp_path), quiet=True)
    assert keep_interrupted(str(tmp_path), lambda recs: {"n": len(recs)}) == 0  # another run writes there
    held.release()
    assert keep_interrupted(str(tmp_path), lambda recs: {"n": len(recs), "last": recs[-1]["epoch"]}) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.csv", "metrics.jsonl", "summary.json"]
    assert [json.loads(line)["epoch"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [0, 1, 2]
    assert json.loads((tmp_path / "summary.json").read_text()) == {"n": 3, "last": 2}
    assert (tmp_path / "metrics.csv").read_text().splitlines()[:2] == ["epoch,loss,val_acc", "0,1.0,"]
    assert keep_interrupted(str(tmp_path), lambda recs: {}) == 0  # no temporary metrics left: nothing to keep
    empty = tmp_path / "empty"
    empty.mkdir()
    MetricsLog(str(empty / "metrics.jsonl")).close()
    assert keep_interrupted(str(empty), lambda recs: {}) == 0 and len(list(empty.iterdir())) == 1


def test_a_run_interrupted_before_its_first_epoch_leaves_nothing(tmp_path):
    """The loop's keep with no finished epoch: no summary is built, the temporary metrics, the lock and the folder
    the run created are gone; a keep that fails (here: its summary) leaves none of the three outputs."""
    from gridgnn.train.config import TrainConfig
    from gridgnn.train.loop import _RunFiles

    out = tmp_path / "new" / "run"
    files = _RunFiles(TrainConfig(out=str(out)), [])
    assert files.keep([], lambda: 1 / 0) is False and not (tmp_path / "new").exists()
    files = _RunFiles(TrainConfig(out=str(out)), [{"epoch": 0, "loss": 1.0}])
    assert files.keep([{"epoch": 0, "loss": 1.0}], lambda: {"bad": float("nan")}) is False  # strict JSON refuses
    assert not (tmp_path / "new").exists()
    files = _RunFiles(TrainConfig(out=str(out)), [])
    files.metrics.append({"epoch": 0, "loss": 1.0})
    assert files.keep([{"epoch": 0, "loss": 1.0}], lambda: {"interrupted": "SIGINT"}) is True
    assert sorted(p.name for p in out.iterdir()) == ["metrics.csv", "metrics.jsonl", "summary.json"]


@pytest.mark.parametrize("finished", [True, False])
def test_an_interrupt_that_cut_a_write_short_leaves_no_temporary_file(tmp_path, finished):
    """A signal raised as a temporary file's ``open`` returns (before ``atomic_write`` can remove it) leaves that
    file; the loop's keep (epochs finished) or abandon (none) removes it with the run's own, while it still holds
    the folder — the checkpoint it had stays."""
    from gridgnn.graph.files import create_temp
    from gridgnn.train.config import TrainConfig
    from gridgnn.train.loop import _RunFiles

    out = tmp_path / "run"
    files = _RunFiles(TrainConfig(out=str(out)), [])
    (out / "checkpoint.pt").write_bytes(b"an earlier epoch's")
    os.close(create_temp(str(out / "checkpoint.pt"))[0])  # what the cut-short write left
    records = [{"epoch": 0, "loss": 1.0}] if finished else []
    for r in records:
        files.metrics.append(r)
    assert files.keep(records, lambda: {"interrupted": "SIGINT"}) is finished
    assert sorted(p.name for p in out.iterdir()) == \
        (["checkpoint.pt", "metrics.csv", "metrics.jsonl", "summary.json"] if finished else ["checkpoint.pt"])


_IN_A_USERS_SESSION = """
import sys
import matplotlib
matplotlib.use("svg")
import matplotlib.pyplot as plt
import gridgnn

plt.figure()  # the user's own figure, open
gridgnn.train(data=sys.argv[1], epochs=2, out=sys.argv[2])
print(matplotlib.get_backend(), plt.get_fignums())
"""


def test_a_run_in_a_users_session_leaves_its_plotting_alone(tmp_path):
    """The plots of a run trained in the user's own process (serial, from Python) are drawn without pyplot: the
    session's backend and open figures are as they were (it used to switch the backend to Agg), and both PNGs are
    written."""
    out = tmp_path / "run"
    r = subprocess.run([sys.executable, "-c", _IN_A_USERS_SESSION, SBM, str(out)], capture_output=True, text=True,
                       timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip().splitlines()[-1] == "svg [1]", r.stdout
    assert (out / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_kept_note_says_a_resume_goes_on_from_the_checkpoint():
    """An interrupted run with --checkpoint-every 20 kept 33 epochs of metrics; its checkpoint holds 20, and the
    note said the resume "goes on" as if from 33."""
    import os

    from gridgnn.train.outputs import kept_note

    note = kept_note("runs/a", 33, "checkpoint.pt", 20)
    assert note.startswith("kept the 33 finished epoch(s) in runs/a")
    assert note.endswith(f"--resume {os.path.join('runs/a', 'checkpoint.pt')} --out runs/a goes on from its last "
                         "checkpoint (written every 20 epochs)")
    assert kept_note("runs/a", 3, "checkpoint.pt", 1).endswith("goes on")  # every epoch: nothing trained again
    assert kept_note("runs/a", 3, None, 0).endswith("(no checkpoint: --checkpoint-every N writes one)")
