"""One run per ``--out`` folder: two runs started together on one folder — exactly one trains and the folder holds
that run's files alone (they once shared ``.metrics.jsonl.tmp``: one run's summary beside the other's metrics)."""
import json
import os
import subprocess
import sys

import pytest

from gridgnn.errors import GridGnnError
from gridgnn.train.outputs import OutLock

SBM = "synthetic:sbm?n=300&classes=3&avg_degree=6&features=8"


def test_a_held_folder_is_refused_naming_the_holder_and_freed_on_release(tmp_path, capsys):
    first = OutLock(str(tmp_path))
    with pytest.raises(GridGnnError, match=rf"--out {tmp_path} is in use by another run \(pid {os.getpid()} on "):
        OutLock(str(tmp_path))
    first.release()
    assert not os.path.exists(tmp_path / OutLock.NAME)
    OutLock(str(tmp_path)).release()
    assert capsys.readouterr().err == ""
    (tmp_path / OutLock.NAME).write_text("pid 4194999 on elsewhere")  # left by a killed run: nobody holds it
    taken = OutLock(str(tmp_path))
    assert "taking over the lock left by pid 4194999 on elsewhere" in capsys.readouterr().err
    taken.release()
    assert os.listdir(tmp_path) == []


def test_the_lock_file_is_never_written_through_a_link(tmp_path, capsys):
    """A ``.gridgnn.lock`` that is a symbolic link or a hard link is refused, its target untouched (it was
    truncated and rewritten, and its first bytes printed as the previous holder); a plain file of another content
    is taken over without echoing it."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious data")
    for kind in ("symlink", "hardlink", "dangling"):
        out = tmp_path / kind
        out.mkdir()
        lock = out / OutLock.NAME
        {"symlink": lambda: lock.symlink_to(victim), "hardlink": lambda: os.link(victim, lock),
         "dangling": lambda: lock.symlink_to(tmp_path / "made.txt")}[kind]()
        with pytest.raises(GridGnnError, match="link"):
            OutLock(str(out))
    assert victim.read_text() == "precious data" and not (tmp_path / "made.txt").exists()
    assert "precious" not in capsys.readouterr().err
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / OutLock.NAME).write_text("secret token")
    OutLock(str(tmp_path / "plain")).release()
    err = capsys.readouterr().err
    assert "taking over the lock left by an unknown holder" in err and "secret" not in err


def test_two_runs_on_one_folder_one_trains_and_the_folder_is_its_own(tmp_path):
    out = tmp_path / "run"
    runs = [subprocess.Popen([sys.executable, "-m", "gridgnn", "train", "--data", SBM, "--algo", "serial", "--epochs",
                              "300", "--hidden", "8", "--seed", str(seed), "--quiet", "--out", str(out)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for seed in (1, 2)]
    results = [(p.wait(timeout=300), p.stderr.read()) for p in runs]
    codes = sorted(code for code, _ in results)
    assert codes == [0, 2], results
    seed = next(s for s, (c, _) in zip((1, 2), results) if c == 0)
    err = next(e for c, e in results if c)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and ("is in use by another run" in lines[0] or "already holds" in lines[0]), err
    summary = json.loads((out / "summary.json").read_text())
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert summary["config"]["seed"] == seed and len(metrics) == 300
    assert summary["final_loss"] == metrics[-1]["loss"]  # the summary and the metrics of one run
    assert sorted(os.listdir(out)) == ["breakdown.png", "curves.png", "metrics.csv", "metrics.jsonl", "model.pt",
                                   "summary.json"]


def test_shard_refuses_an_existing_dataset_without_overwrite(tmp_path, capsys):
    """``gridgnn shard`` replaced a dataset silently (``meta.json`` deleted first); now it is refused without
    ``--overwrite``, replaced only once the new one is complete, and a folder of other files is never touched."""
    from tests.train._runs import run_main

    out = tmp_path / "ds"
    shard = ["shard", "--data", SBM, "--blocks", "2x2", "--method", "single-perm", "--out", out]
    assert run_main([*shard, "--seed", 1]) == 0
    assert run_main([*shard, "--seed", 2]) == 2
    assert "already holds a sharded dataset; add --overwrite" in capsys.readouterr().err
    assert json.loads((out / "meta.json").read_text())["seed"] == 1
    assert run_main([*shard, "--seed", 2, "--overwrite"]) == 0
    assert json.loads((out / "meta.json").read_text())["seed"] == 2
    assert sorted(os.listdir(tmp_path)) == ["ds"]  # no temporary or previous folder left beside it
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("keep")
    capsys.readouterr()
    assert run_main(["shard", "--data", SBM, "--blocks", "2x2", "--out", other, "--overwrite"]) == 2
    assert "holds files and no sharded dataset" in capsys.readouterr().err
    assert os.listdir(other) == ["notes.txt"]
    # a meta.json does not make a folder a dataset, nor a dataset's folder the user's other files: both refused
    (other / "meta.json").write_text("{}")
    (out / "src").mkdir()
    (out / "src" / "main.py").write_text("keep")
    for folder, what in ((other, "meta.json"), (out, "src/")):
        assert run_main(["shard", "--data", SBM, "--blocks", "2x2", "--out", folder, "--overwrite"]) == 2
        assert f"holds {what}, which is not part of a sharded dataset" in capsys.readouterr().err
    assert sorted(os.listdir(other)) == ["meta.json", "notes.txt"] and (out / "src" / "main.py").is_file()
    (out / "src" / "main.py").unlink()
    (out / "src").rmdir()
    (out / "rc" / "block_000_000.npz").rename(out / "rc" / "mine.npz")  # a file the meta does not list
    assert run_main(["shard", "--data", SBM, "--blocks", "2x2", "--out", out, "--overwrite"]) == 2
    assert "holds rc/mine.npz, which" in capsys.readouterr().err


def test_shard_cleans_what_a_killed_shard_left(tmp_path):
    """SIGKILL leaves `.NAME.tmp-PID` (half written) or, between the two renames, `.NAME.old-PID` without NAME: the
    next `gridgnn shard` removes the first and puts the second back; a running process's folders are left alone."""
    import subprocess

    from tests.train._runs import run_main

    import socket

    host = socket.gethostname()
    dead = subprocess.Popen(["true"])
    dead.wait()
    half = tmp_path / f".ds.tmp-{host}-{dead.pid}"
    (half / "blocks").mkdir(parents=True)
    running = tmp_path / f".ds.tmp-{host}-{os.getppid()}"
    running.mkdir()
    elsewhere = tmp_path / f".ds.tmp-another-host-{dead.pid}"  # a PID of another machine means nothing here
    elsewhere.mkdir()
    assert run_main(["shard", "--data", SBM, "--blocks", "2x2", "--method", "single-perm",
                     "--out", tmp_path / "ds"]) == 0
    assert not half.exists() and running.exists() and elsewhere.exists() and (tmp_path / "ds" / "meta.json").is_file()
    # a swap interrupted after the old dataset moved aside: it comes back first, and --overwrite applies to it
    os.rename(tmp_path / "ds", tmp_path / f".ds.old-{host}-{dead.pid}")
    shard = ["shard", "--data", SBM, "--blocks", "2x2", "--method", "single-perm", "--out", tmp_path / "ds"]
    assert run_main(shard) == 2  # refused: the dataset is back in place, and replacing it needs --overwrite
    assert (tmp_path / "ds" / "meta.json").is_file() and not (tmp_path / f".ds.old-{host}-{dead.pid}").exists()
    assert run_main([*shard, "--overwrite"]) == 0


def test_partition_refuses_to_replace_its_files_without_overwrite(tmp_path, capsys):
    from tests.train._runs import run_main

    out = tmp_path / "g.part"
    cmd = ["partition", "--data", SBM, "--parts", 2, "--method", "random", "--out", out]
    assert run_main(cmd) == 0
    before = out.read_text()
    assert run_main([*cmd, "--seed", 3]) == 2
    assert f"--out: {out} already exists; add --overwrite" in capsys.readouterr().err
    assert out.read_text() == before
    assert run_main([*cmd, "--seed", 3, "--overwrite"]) == 0 and out.read_text() != before
    assert sorted(os.listdir(tmp_path)) == ["g.part", "g.part.json"]  # no temporary file left


def test_the_launchers_clean_up_spares_a_folder_another_run_holds(tmp_path):
    """After a failed launch the launcher removes the run's temporary outputs, lock and the folders it created —
    unless another run holds the folder (the refused run must not delete the running one's files)."""
    from gridgnn.train.outputs import clean_after_ranks, out_dir_state

    out = tmp_path / "a" / "b"
    existing = out_dir_state(str(out))
    out.mkdir(parents=True)
    (out / ".metrics.jsonl.tmp").write_text("{}\n")
    (out / "summary.json").write_text("{}\n")
    holder = OutLock(str(out))
    clean_after_ranks(str(out), existing)
    assert sorted(os.listdir(out)) == [".gridgnn.lock", ".metrics.jsonl.tmp", "summary.json"]
    holder.release()
    clean_after_ranks(str(out), existing)
    assert os.listdir(out) == ["summary.json"]  # a finished output stays, and so does its folder
    (out / "summary.json").unlink()
    (out / ".summary.json.tmp").write_text("{")
    clean_after_ranks(str(out), existing)
    assert os.listdir(tmp_path) == []  # the folders the run created, now empty, are gone
