"""Outputs that cannot be hijacked or left half-done (issue 42, cases 10, 11, 14, 15, 16): the one atomic writer
never follows a link planted at a temporary name; ``--out`` below a regular file is refused before any work; a
full disk is one line naming the file (the ranks of a launch end quietly) and a run whose outputs could not all
be written names them; SIGTERM to a launch's process group leaves nothing in ``--out`` nor in ``TMPDIR``, and the
temporary folders of a launcher killed outright are swept by the next launch."""
import errno
import os
import resource
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from gridgnn.errors import GridGnnError
from gridgnn.graph import files
from gridgnn.train import outputs

from ..train._runs import run_main

SBM = "synthetic:sbm?n=200&classes=3&avg_degree=6&features=8"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("trained") / "run"
    assert run_main(["train", "--data", SBM, "--epochs", "2", "--out", out, "--quiet"]) == 0
    return out


def _error_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("gridgnn: error:")]


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


# --- 16: the temporary file is created exclusively, never through a link -------------------------------------------

@pytest.mark.parametrize("command", ["predict", "export", "partition"])
def test_a_link_planted_at_the_temporary_name_is_not_followed(command, run_dir, tmp_path, monkeypatch, capsys):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    out = tmp_path / "o" / {"predict": "st.npy", "export": "m.pt", "partition": "p.txt"}[command]
    out.parent.mkdir()
    # the old fixed name, and the name the next temporary file would take (the token made predictable here)
    tokens = iter(["deadbeef", "0123abcd", "4567cdef", "89ab0123"])
    monkeypatch.setattr(files, "temp_token", lambda: next(tokens))
    for name in (f".{out.name}.tmp", f".{out.name}.deadbeef.tmp"):
        os.symlink(victim, out.parent / name)
    argv = {"predict": ["predict", "--run", run_dir, "--data", SBM, "--out", out],
            "export": ["export", "--run", run_dir, "--to", "state-dict", "--out", out],
            "partition": ["partition", "--data", SBM, "--parts", "2", "--method", "random", "--out", out]}[command]
    assert run_main(argv) == 0, capsys.readouterr().err
    assert victim.read_text() == "precious"
    assert out.is_file() and not out.is_symlink()
    if command == "predict":
        assert np.load(out).shape == (200, 3)
    elif command == "export":
        assert torch.load(out, weights_only=True)
    else:
        assert len(out.read_text().split()) == 200
    leftovers = {p.name for p in out.parent.iterdir() if p.name.endswith(".tmp")}
    assert leftovers == {f".{out.name}.tmp", f".{out.name}.deadbeef.tmp"}
    assert all((out.parent / n).is_symlink() for n in leftovers)  # the planted links themselves, untouched


def test_stale_temporary_names_are_cleared_and_nothing_else(tmp_path):
    for name in (".metrics.jsonl.tmp", ".metrics.jsonl.0a1b2c3d.tmp", ".summary.json.ffffffff.tmp", "summary.json",
                 ".summary.json.backup.tmp", ".notes.txt.0a1b2c3d.tmp", ".metrics.jsonl.0A1B2C3D.tmp", "mine.txt"):
        (tmp_path / name).write_text("x")
    outputs.clean_after_ranks(str(tmp_path), str(tmp_path))
    assert sorted(os.listdir(tmp_path)) == [".metrics.jsonl.0A1B2C3D.tmp", ".notes.txt.0a1b2c3d.tmp",
                                            ".summary.json.backup.tmp", "mine.txt", "summary.json"]


# --- 10: --out below a regular file: one line, exit 2, before any work ---------------------------------------------

@pytest.mark.parametrize("command", ["predict", "export", "partition"])
def test_out_below_a_regular_file_is_refused_before_any_work(command, run_dir, tmp_path, monkeypatch, capsys):
    import gridgnn.graph.spec
    import gridgnn.train.trained

    def no_work(*a, **k):
        raise AssertionError("work started before --out was checked")

    monkeypatch.setattr(gridgnn.train.trained, "load", no_work)
    monkeypatch.setattr(gridgnn.graph.spec, "load_graph", no_work)
    (tmp_path / "somefile").write_text("x")
    out = tmp_path / "somefile" / "x.npy"
    argv = {"predict": ["predict", "--run", run_dir, "--data", SBM, "--out", out],
            "export": ["export", "--run", run_dir, "--to", "pyg", "--out", out],
            "partition": ["partition", "--data", SBM, "--parts", "2", "--method", "random", "--out", out]}[command]
    assert run_main(argv) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [f"gridgnn: error: cannot write --out {out}: {tmp_path / 'somefile'} is not "
                                        "a directory"]
    assert sorted(os.listdir(tmp_path)) == ["somefile"]


# --- 11 & 15: a full disk ------------------------------------------------------------------------------------------

def _file_size_limit(limit: int):
    """A process whose files cannot grow past ``limit`` bytes (``ulimit -f``): its disk is full, as far as it can
    tell (``EFBIG``, which gridgnn treats as ``ENOSPC``)."""
    def pre():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    return pre


@pytest.mark.parametrize("nproc", [2])  # the serial writer is the same code (rank 0 writes); 2: the peer stays quiet
def test_train_on_a_full_disk_names_the_file_and_the_missing_outputs(nproc, tmp_path):
    out = tmp_path / "run"
    argv = ["train", "--data", SBM, "--epochs", "2", "--out", str(out), "--quiet"]
    if nproc > 1:
        argv += ["--algo", "1d", "--nproc", str(nproc)]
    r = subprocess.run([sys.executable, "-m", "gridgnn", *argv], capture_output=True, text=True, timeout=180,
                       preexec_fn=_file_size_limit(12_000), env=dict(os.environ, TMPDIR=str(tmp_path)))
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and "Connection closed" not in r.stderr, r.stderr
    lines = _error_lines(r.stderr)
    assert len(lines) == 1 and r.stderr.strip() == lines[0], r.stderr
    assert f"cannot write {out}{os.sep}breakdown.png: File too large" in lines[0], lines[0]
    assert lines[0].endswith(f"the outputs in {out} are incomplete: written metrics.jsonl, metrics.csv, model.pt; missing "
                             "breakdown.png, curves.png, summary.json"), lines[0]
    assert sorted(os.listdir(out)) == ["metrics.csv", "metrics.jsonl", "model.pt"]  # complete files, no temporary one, no lock


def test_export_on_a_full_disk_is_one_line_naming_the_file(run_dir, tmp_path, monkeypatch, capsys):
    """``torch.save`` into a file object reports a failed write as ``RuntimeError: ... unexpected pos``."""
    def full(self, b):
        self.error = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        raise self.error

    monkeypatch.setattr(files._File, "write", full)
    out = tmp_path / "m.pt"
    assert run_main(["export", "--run", run_dir, "--to", "pyg", "--out", out]) == 2
    assert capsys.readouterr().err.strip() == f"gridgnn: error: cannot write {out}: No space left on device"
    assert os.listdir(tmp_path) == []
    with pytest.raises(GridGnnError, match="No space left on device"):
        with files.atomic_write(str(out)) as fh:
            torch.save({"w": torch.zeros(50_000)}, fh)  # past the writer's buffer: torch's own RuntimeError


def test_shard_on_a_full_disk_is_one_line_naming_the_dataset(tmp_path, capsys):
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    old = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (3000, hard))
    try:
        code = run_main(["shard", "--data", SBM, "--blocks", "2x2", "--out", tmp_path / "ds"])
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, old)
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err.startswith(f"gridgnn: error: cannot write the sharded dataset {tmp_path / 'ds'}") and \
        "File too large" in err and "\n" not in err, err
    assert os.listdir(tmp_path) == []


# --- 14: SIGTERM to the process group; temporary folders of dead launchers ------------------------------------------

@pytest.fixture
def short_tmpdir():
    """A ``TMPDIR`` short enough for the fork server's socket path."""
    import shutil
    import tempfile
    from pathlib import Path

    d = Path(tempfile.mkdtemp(prefix="gg42-", dir="/tmp" if os.path.isdir("/tmp") else None))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_sigterm_to_the_process_group_leaves_nothing_and_stale_folders_are_swept(tmp_path, short_tmpdir):
    tmpdir = short_tmpdir
    dead = _dead_pid()
    host = __import__("socket").gethostname()
    stale = tmpdir / f"gridgnn-{dead}-abcdefgh"  # a launcher killed outright (kill -9)
    stale.mkdir()
    (stale / "gridgnn-launcher").write_text(f"pid {dead} on {host}")
    (stale / "rank0.pkl").write_bytes(b"parameters")
    live = tmpdir / f"gridgnn-{os.getpid()}-ijklmnop"  # a launcher still running
    live.mkdir()
    (live / "gridgnn-launcher").write_text(f"pid {os.getpid()} on {host}")
    foreign = tmpdir / f"gridgnn-{dead}-qrstuvwx"  # no marker: not ours to remove
    foreign.mkdir()
    out = tmp_path / "run"
    p = subprocess.Popen([sys.executable, "-m", "gridgnn", "train", "--data", SBM, "--epochs", "100000", "--algo",
                          "1d", "--nproc", "2", "--out", str(out), "--quiet"], start_new_session=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, TMPDIR=str(tmpdir)))
    try:
        deadline = time.monotonic() + 120
        while not any(n.startswith(".metrics.jsonl.") for n in (os.listdir(out) if out.is_dir() else [])):
            assert p.poll() is None and time.monotonic() < deadline, p.communicate()
            time.sleep(0.05)
        time.sleep(0.3)
        os.killpg(p.pid, signal.SIGTERM)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    assert p.returncode == 143, err
    assert "Traceback" not in err and err.strip().splitlines()[-1].startswith("gridgnn: interrupted (SIGTERM)"), err
    left = os.listdir(out) if out.exists() else []
    assert not [n for n in left if n == ".gridgnn.lock" or n.endswith(".tmp")], left
    names = sorted(os.listdir(tmpdir))
    assert not [n for n in names if n.startswith(f"gridgnn-{p.pid}-")], names  # the launcher's own, removed
    assert stale.name not in names and live.name in names and foreign.name in names, names


def test_the_sweep_removes_only_marked_folders_of_dead_launchers_of_this_user(tmp_path):
    from gridgnn.distributed.launch import MARKER, private_tempdir, sweep_stale_dirs

    dead, host = _dead_pid(), __import__("socket").gethostname()
    made = []
    for name, marker in [(f"gridgnn-{dead}-aaaaaaaa", f"pid {dead} on {host}"),  # swept
                         (f"gridgnn-{dead}-bbbb_bbb", f"pid {dead} on {host}"),  # swept
                         (f"gridgnn-{dead}-cccccccc", f"pid {dead} on another-host"),  # another machine's
                         (f"gridgnn-{dead}-dddddddd", f"pid {os.getpid()} on {host}"),  # marker of another pid
                         (f"gridgnn-graph-{dead}eeeeee", f"pid {dead} on {host}"),  # not a launcher's name
                         (f"gridgnn-{dead}-ffffffff", None)]:  # no marker
        (tmp_path / name).mkdir()
        if marker is not None:
            (tmp_path / name / MARKER).write_text(marker)
        made.append(name)
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / MARKER).write_text(f"pid {dead} on {host}")
    os.symlink(target, tmp_path / f"gridgnn-{dead}-gggggggg")  # a link: never followed
    removed = sweep_stale_dirs(str(tmp_path))
    assert sorted(os.path.basename(p) for p in removed) == sorted(made[:2])
    assert sorted(os.listdir(tmp_path)) == sorted(made[2:] + ["elsewhere", f"gridgnn-{dead}-gggggggg"])
    mine = private_tempdir()
    try:
        assert os.path.basename(mine).startswith(f"gridgnn-{os.getpid()}-") and oct(os.stat(mine).st_mode)[-3:] == "700"
        assert os.path.isdir(mine) and open(os.path.join(mine, MARKER)).read() == f"pid {os.getpid()} on {host}"
    finally:
        __import__("shutil").rmtree(mine)


@pytest.mark.parametrize("argv", [["simulate", "--data", SBM], ["plan", "--data", SBM, "--nproc", "2"],
                                  ["calibrate", "--profile", "local-cpu"]], ids=lambda a: a[0])
def test_report_commands_replace_a_file_only_with_overwrite(tmp_path, capsys, argv):
    """simulate, plan and calibrate --out replaced an existing file silently; like partition, predict and export
    they now refuse it (before any work) unless --overwrite."""
    out = tmp_path / "report.json"
    out.write_text("mine")
    assert run_main([*argv, "--out", out]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "already exists; add --overwrite" in err[0], err
    assert out.read_text() == "mine"
    assert run_main([*argv, "--out", out, "--overwrite"]) == 0
    assert out.read_text().startswith("{")
