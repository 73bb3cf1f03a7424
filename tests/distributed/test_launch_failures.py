"""The local launcher under failure: loopback-only rendezvous, a killed rank, a stalled rank, SIGINT/SIGTERM.

Each test starts a real ``gridgnn train`` with spawned ranks, waits until it trains, acts on it, and checks
that every process is gone in time, the exit status, one ``gridgnn: error:`` line per cause, no traceback, and
no temporary folder left behind."""
import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import weakref
from pathlib import Path

import pytest

import gridgnn
from gridgnn.errors import GridGnnError

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc and Linux signals")

#: seconds a signalled run has to end
SIGNAL_EXIT_S = 10


def _as_in_a_terminal() -> None:
    """The run starts as from an interactive shell, whatever started the tests: a background job of a
    non-interactive shell (``make test &``) ignores SIGINT, and an ignored SIGINT is inherited (Python then
    keeps ignoring it), which would make a Ctrl-C test wait forever; SIGHUP likewise (under ``nohup``)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)

LONG_RUN = ["train", "--data", "synthetic:sbm?n=600&classes=4&features=8", "--epochs", "1000000", "--log-every", 1,
            "--hidden", 8]


def _children(pid: int) -> list[int]:
    r = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True)
    return [int(v) for v in r.stdout.split()]


def _ranks(launcher: int) -> list[int]:
    """The ranks of ``launcher`` in start order (rank 0 first): its spawned children, or the children of the fork
    server it started (without multiprocessing's resource tracker)."""
    out = []
    for c in sorted(_children(launcher)):
        try:
            with open(f"/proc/{c}/cmdline", "rb") as fh:
                cmd = fh.read()
        except OSError:
            continue
        if b"forkserver" in cmd:
            out += sorted(_children(c))
        elif b"spawn_main" in cmd and b"resource_tracker" not in cmd:
            out.append(c)
    return out


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ")[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


class Run:
    def __init__(self, tmp_path, *args):
        # a TMPDIR of its own, short enough for the fork server's socket path whatever pytest's folder depth (a deep
        # one makes the launcher spawn fresh interpreters instead: test_deep_tmpdir_spawns_fresh_interpreters)
        self.tmp = Path(tempfile.mkdtemp(prefix="gg-"))
        weakref.finalize(self, shutil.rmtree, str(self.tmp), True)
        env = dict(os.environ, TMPDIR=str(self.tmp), PYTHONUNBUFFERED="1")
        self.out = open(tmp_path / "stdout", "w+")
        self.err = open(tmp_path / "stderr", "w+")
        self.proc = subprocess.Popen([sys.executable, "-m", "gridgnn", *map(str, LONG_RUN), *map(str, args)],
                                     stdout=self.out, stderr=self.err, env=env, preexec_fn=_as_in_a_terminal)
        self.ranks: list[int] = []

    def wait_training(self, nproc: int, timeout: float = 120.0) -> None:
        """Until every rank is up and epoch 2 is printed."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            assert self.proc.poll() is None, self.stderr()
            self.ranks = _ranks(self.proc.pid)
            self.out.seek(0)
            if len(self.ranks) == nproc and "epoch    2" in self.out.read():
                return
            time.sleep(0.2)
        self.proc.kill()
        raise AssertionError("the run did not start training in time")

    def finish(self, within: float) -> int:
        t0 = time.monotonic()
        try:
            code = self.proc.wait(timeout=within)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            for r in self.ranks:
                if _alive(r):
                    os.kill(r, signal.SIGKILL)
            out = self.out
            out.seek(0)
            last = out.read().splitlines()[-2:]
            raise AssertionError(f"the launcher did not end within {within} s (last output {last}; stderr: "
                                 f"{self.stderr()[-600:]!r})") from None
        while any(_alive(r) for r in self.ranks) and time.monotonic() - t0 < within:
            time.sleep(0.1)
        assert not [r for r in self.ranks if _alive(r)], "ranks outlived the launcher"
        return code

    def stderr(self) -> str:
        self.err.seek(0)
        return self.err.read()

    def errors(self) -> list[str]:
        lines = self.stderr().splitlines()
        assert not any("Traceback" in line for line in lines), self.stderr()
        return [line for line in lines if line.startswith("gridgnn: error:")]

    def left_behind(self) -> list[str]:
        return sorted(n for n in os.listdir(self.tmp) if n.startswith("gridgnn"))


def _listening(pid: int) -> list[tuple[str, int]]:
    """(address, port) of every listening TCP socket that ``pid`` holds, from /proc (what ``ss -ltnp`` shows)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    out = []
    for table, v6 in (("/proc/net/tcp", False), ("/proc/net/tcp6", True)):
        try:
            rows = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            f = row.split()
            if f[3] != "0A" or f[9] not in inodes:  # 0A = LISTEN
                continue
            hexaddr, hexport = f[1].split(":")
            raw = bytes.fromhex(hexaddr)
            if v6:
                raw = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
                addr = str(ipaddress.IPv6Address(raw))
            else:
                addr = str(ipaddress.IPv4Address(raw[::-1]))
            out.append((addr, int(hexport, 16)))
    return out


def _external_addresses() -> list[str]:
    """This host's non-loopback IPv4 addresses (may be empty in a sandbox)."""
    r = subprocess.run(["hostname", "-I"], capture_output=True, text=True)
    addrs = [a for a in r.stdout.split() if ":" not in a and not a.startswith("127.")]
    try:
        addrs += [a for a in socket.gethostbyname_ex(socket.gethostname())[2] if not a.startswith("127.")]
    except OSError:
        pass
    return sorted(set(addrs))


def test_local_launch_listens_on_loopback_only_and_sigint_cleans_up(tmp_path):
    run = Run(tmp_path, "--nproc", 2, "--algo", "1d")
    run.wait_training(2)
    sockets = [s for pid in [run.proc.pid, *run.ranks] for s in _listening(pid)]
    assert sockets, "the ranks should hold their gloo listening sockets"
    for addr, port in sockets:
        assert ipaddress.ip_address(addr).is_loopback, f"listening on {addr}:{port}"
    for ext in _external_addresses():
        for _, port in sockets:
            with socket.socket() as s:
                s.settimeout(2)
                assert s.connect_ex((ext, port)) != 0, f"port {port} reachable on {ext}"
    os.kill(run.proc.pid, signal.SIGINT)
    assert run.finish(within=SIGNAL_EXIT_S) == 130
    assert run.errors() == []
    assert "gridgnn: interrupted (SIGINT)" in run.stderr()
    assert run.left_behind() == []


def _kept(out, signal_name: str) -> dict:
    """An interrupted run's --out: the metrics of its finished epochs and a summary saying so, no temporary file,
    no lock."""
    names = sorted(os.listdir(out))
    assert [n for n in names if n.startswith(".")] == [], names
    lines = (out / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert len(records) >= 2 and [r["epoch"] for r in records] == list(range(len(records)))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"] == signal_name and summary["epochs_trained"] == len(records)
    assert summary["config"]["out"] == str(out)
    return summary


def test_sigterm_to_launcher_ends_every_rank_with_143(tmp_path):
    """... and keeps the epochs it finished: rank 0, stopped by SIGTERM, cleans nothing itself; the launcher turns
    its temporary metrics file (``.metrics.jsonl.<hex>.tmp``) into ``metrics.jsonl`` with a ``summary.json`` marked
    interrupted, and removes the lock."""
    out = tmp_path / "new" / "out"
    run = Run(tmp_path, "--nproc", 2, "--algo", "1d-sa", "--out", out)
    run.wait_training(2)
    assert [n for n in os.listdir(out) if n.startswith(".metrics.jsonl.") and n.endswith(".tmp")]
    os.kill(run.proc.pid, signal.SIGTERM)
    assert run.finish(within=SIGNAL_EXIT_S) == 143
    assert "gridgnn: interrupted (SIGTERM)" in run.stderr() and "Traceback" not in run.stderr()
    assert run.left_behind() == []
    summary = _kept(out, "SIGTERM")
    assert sorted(os.listdir(out)) == ["metrics.csv", "metrics.jsonl", "summary.json"] and summary["checkpoint"] is None


def test_a_closed_terminal_ends_every_rank_with_129_and_keeps_the_epochs(tmp_path):
    """SIGHUP (the terminal closed: the shell signals the launcher and its ranks) killed the launcher at once, which
    left the ranks' temporary metrics file and lock in --out, and each rank by itself. Now the ranks block it and
    the launcher stops them as at SIGTERM."""
    out = tmp_path / "out"
    run = Run(tmp_path, "--nproc", 2, "--algo", "1d", "--out", out)
    run.wait_training(2)
    for pid in [*run.ranks, run.proc.pid]:
        os.kill(pid, signal.SIGHUP)
    assert run.finish(within=SIGNAL_EXIT_S) == 129
    assert run.errors() == [] and "gridgnn: interrupted (SIGHUP)" in run.stderr(), run.stderr()
    assert run.left_behind() == []
    _kept(out, "SIGHUP")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGHUP])
def test_ctrl_c_to_a_serial_run_keeps_its_epochs_and_checkpoint(tmp_path, sig):
    """In one process (no launcher) the loop keeps its metrics itself; with --checkpoint-every the summary names
    the checkpoint to resume from, and loading the run's model says why there is none."""
    out = tmp_path / "out"
    run = Run(tmp_path, "--algo", "serial", "--out", out, "--checkpoint-every", 1)
    run.wait_training(0)
    os.kill(run.proc.pid, sig)
    assert run.finish(within=SIGNAL_EXIT_S) == 128 + sig
    assert run.errors() == [] and f"gridgnn: interrupted ({sig.name})" in run.stderr()
    summary = _kept(out, sig.name)
    assert sorted(os.listdir(out)) == ["checkpoint.pt", "metrics.csv", "metrics.jsonl", "summary.json"]
    assert summary["checkpoint"] == "checkpoint.pt"
    run.out.seek(0)
    assert f"--resume {out / 'checkpoint.pt'} --out {out} goes on" in run.out.read()
    with pytest.raises(GridGnnError, match=f"its run was interrupted by {sig.name} after {summary['epochs_trained']} "):
        gridgnn.load(str(out))


def test_launcher_killed_outright_leaves_no_rank(tmp_path):
    """SIGKILL to the launcher (no handler runs): its ranks, forked by its fork server, end with it (the server ends
    when its launcher does, each rank when its parent does)."""
    run = Run(tmp_path, "--nproc", 2, "--algo", "1d")
    run.wait_training(2)
    server = [c for c in _children(run.proc.pid) if b"forkserver" in open(f"/proc/{c}/cmdline", "rb").read()]
    os.kill(run.proc.pid, signal.SIGKILL)
    assert run.finish(within=SIGNAL_EXIT_S) == -signal.SIGKILL
    t0 = time.monotonic()
    while any(_alive(p) for p in server) and time.monotonic() - t0 < SIGNAL_EXIT_S:
        time.sleep(0.1)
    assert not [p for p in server if _alive(p)], "the fork server outlived its launcher"


def test_ctrl_c_to_the_whole_group_gives_one_line(tmp_path):
    """A terminal's Ctrl-C signals every process of the foreground group: the ranks must stay quiet."""
    run = Run(tmp_path, "--nproc", 2, "--algo", "1d")
    run.wait_training(2)
    for pid in [run.proc.pid, *run.ranks]:
        os.kill(pid, signal.SIGINT)
    assert run.finish(within=SIGNAL_EXIT_S) == 130
    assert run.stderr().count("gridgnn:") == 1 and "Traceback" not in run.stderr()
    assert run.left_behind() == []


def test_killed_rank_is_named(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("mine")
    run = Run(tmp_path, "--nproc", 4, "--algo", "1d", "--out", tmp_path / "out")
    run.wait_training(4)
    os.kill(run.ranks[2], signal.SIGKILL)
    code = run.finish(within=30)
    assert code not in (0, None)
    assert run.errors() == ["gridgnn: error: rank 2 was killed by signal 9 (SIGKILL)"]
    assert run.left_behind() == []
    assert os.listdir(tmp_path / "out") == ["notes.txt"]  # the run's temporary files and lock are gone, not more


def test_an_aborted_rank_is_named_with_what_an_abort_most_likely_is(tmp_path):
    """A rank ended by SIGABRT (on GPUs: NCCL's watchdog, where a collective outlived --timeout; NCCL raises nothing
    at the collective itself) is named with that cause; another signal keeps its name alone."""
    from types import SimpleNamespace

    from gridgnn.distributed.launch import _failure_messages

    procs = [SimpleNamespace(exitcode=0), SimpleNamespace(exitcode=-signal.SIGABRT),
             SimpleNamespace(exitcode=-signal.SIGKILL)]
    lines, code = _failure_messages(procs, set(), str(tmp_path))
    assert code == 1 and len(lines) == 2
    assert lines[0].startswith("rank 1 was killed by signal 6 (SIGABRT: ") and "NCCL's watchdog" in lines[0]
    assert "--timeout" in lines[0] and lines[1] == "rank 2 was killed by signal 9 (SIGKILL)"


def test_stalled_rank_times_out_naming_the_collective(tmp_path):
    run = Run(tmp_path, "--nproc", 2, "--algo", "1d", "--timeout", 3)
    run.wait_training(2)
    os.kill(run.ranks[1], signal.SIGSTOP)
    code = run.finish(within=30)
    assert code == 1
    errors = run.errors()
    assert len(errors) == 2, errors
    assert errors[0].startswith("gridgnn: error: rank 0: collective ") and "timed out after 3 s" in errors[0]
    assert "in phase '" in errors[0] and "axis 'p'" in errors[0]
    assert "rank 1 did not fail" in errors[1]
    assert run.left_behind() == []


@pytest.mark.parametrize("algo", [["2d"], ["plexus"]], ids=lambda a: a[0])
def test_stalled_rank_on_a_sub_axis_times_out(tmp_path, algo):
    """The process groups of the mesh's axes (2D's process rows and columns, Plexus' three axes: none of them the
    whole world at P = 4) honour --timeout as the world group does; with torch's default they waited 30 minutes.
    (1.5D's axes come from the same ProcessGrid.build: checked by hand, 'ranks 0, 2: collective allreduce on axis
    'rep' ... timed out after 3 s'; not repeated here.)"""
    run = Run(tmp_path, "--nproc", 4, "--algo", *algo, "--timeout", 3)
    run.wait_training(4)
    os.kill(run.ranks[1], signal.SIGSTOP)
    code = run.finish(within=30)
    assert code == 1
    errors = run.errors()
    assert errors[0].startswith("gridgnn: error: rank") and "timed out after 3 s" in errors[0], errors
    assert run.left_behind() == []


def test_serial_run_sigint_is_one_line(tmp_path):
    run = Run(tmp_path, "--algo", "serial")
    run.wait_training(0)
    os.kill(run.proc.pid, signal.SIGINT)
    assert run.finish(within=SIGNAL_EXIT_S) == 130
    assert run.stderr().count("gridgnn:") == 1 and "gridgnn: interrupted (SIGINT)" in run.stderr()
    assert "Traceback" not in run.stderr()


_GROUP_TIMEOUTS = """
import datetime, sys, tempfile, torch, torch.distributed as dist
from unittest import mock
dist.init_process_group("gloo", init_method="file://" + tempfile.mktemp(), rank=0, world_size=1,
                        timeout=datetime.timedelta(seconds=15))
from gridgnn.distributed.grid import ProcessGrid
with mock.patch("torch.cuda.is_available", return_value=sys.argv[1] == "cuda-visible"):
    grids = [ProcessGrid.build(kind, "cpu", timeout_s=15, shape=shape)
             for kind, shape in (("1d", None), ("1.5d", None), ("2d", (1, 1)), ("3d", (1, 1, 1)))]
for g in grids:
    for name in g.names:
        print(g.kind, name, g.mesh.get_group(name)._get_backend(torch.device("cpu")).options._timeout.total_seconds())
"""


@pytest.mark.parametrize("cuda", ["cuda-visible", "cpu-only"])
def test_every_axis_group_has_the_run_timeout(cuda):
    """Every process group of every mesh honours --timeout, the world-wide axes included: with CUDA visible and
    gloo, DeviceMesh makes a new world group rather than reusing the default one, and it used to get torch's
    30-minute default (a stalled rank then held its peers that long). One rank, so every axis spans the world."""
    r = subprocess.run([sys.executable, "-c", _GROUP_TIMEOUTS, cuda], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stdout.split("\n")[:-1]
    assert len(lines) == 1 + 2 + 2 + 3 and all(line.endswith(" 15.0") for line in lines), r.stdout


def test_deep_tmpdir_spawns_fresh_interpreters(tmp_path, monkeypatch):
    """A TMPDIR too deep for the fork server's Unix socket path: the ranks start as fresh interpreters (it used to be
    the fork server's OSError traceback), and asking for the fork server there is one clear error."""
    from gridgnn.distributed import launch
    from gridgnn.errors import GridGnnError

    import multiprocessing.process

    deep = tmp_path / ("d" * 60) / ("e" * 40)
    deep.mkdir(parents=True)
    config = multiprocessing.process.current_process()._config
    monkeypatch.delitem(config, "tempdir", raising=False)  # as in a process that has not launched yet
    monkeypatch.setattr(tempfile, "tempdir", str(deep))
    monkeypatch.delenv("GRIDGNN_START_METHOD", raising=False)
    assert launch._start_context().get_start_method() == "spawn"
    monkeypatch.setenv("GRIDGNN_START_METHOD", "forkserver")
    with pytest.raises(GridGnnError, match="shorter path"):
        launch._start_context()
    monkeypatch.setitem(config, "tempdir", "/tmp/pymp-abcdefgh")  # multiprocessing made its folder: it decides
    assert launch._start_context().get_start_method() == "forkserver"
    monkeypatch.setitem(config, "tempdir", str(deep / "pymp-abcdefgh"))
    monkeypatch.delenv("GRIDGNN_START_METHOD")
    assert launch._start_context().get_start_method() == "spawn"



def _parent_blocked_signals(_rank):
    """A rank's parent's blocked signals (``SigBlk``): with the default start method, the fork server's."""
    with open(f"/proc/{os.getppid()}/status") as fh:
        return next(int(line.split()[1], 16) for line in fh if line.startswith("SigBlk:"))


def test_the_fork_server_starts_with_the_launchers_signals_blocked():
    """A Ctrl-C while the ranks start reaches the launcher alone: the fork server is started with SIGINT and
    SIGTERM blocked, as the ranks are. Python's resource tracker, started by the first rank's ``start()``, unblocked
    them on its way out, so the fork server preloaded torch with SIGINT live and a group Ctrl-C in those seconds
    printed its ``KeyboardInterrupt`` traceback. Run in a fresh interpreter: a fork server lives as long as the
    process that started it."""
    code = ("from gridgnn.distributed.launch import launch\n"
            "from tests.distributed.test_launch_failures import _parent_blocked_signals\n"
            "if __name__ == '__main__':\n"
            "    print(launch(_parent_blocked_signals, 1, collect=True)[0])\n")
    env = {**os.environ, "GRIDGNN_START_METHOD": "forkserver"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env,
                       cwd=Path(__file__).resolve().parents[2])
    assert r.returncode == 0, r.stderr[-2000:]
    blocked = int(r.stdout.split()[-1])
    for s in (signal.SIGINT, signal.SIGTERM):
        assert blocked >> (s - 1) & 1, (s, hex(blocked))


def _settle_then_write_slowly(ctx):
    """A rank's work whose last collective is followed by a long write on rank 0 (its outputs)."""
    import torch.distributed as dist

    ctx.init()
    dist.barrier()
    ctx.settle()
    if ctx.rank == 0:
        time.sleep(3 * ctx.timeout_s)
    return ctx.rank


def test_rank_0_may_write_its_outputs_for_longer_than_the_timeout():
    """``--timeout`` bounds the collectives. Rank 0 writing a run's outputs (a model, plots, logits) longer than it
    failed a finished run: the other ranks timed out in the job's final barrier, and the run exited 1 with "a peer
    ended before the job's final barrier" beside a complete summary.json. Past ``settle`` no rank waits for
    another."""
    from gridgnn.distributed.launch import launch

    t0 = time.perf_counter()
    assert launch(_settle_then_write_slowly, 2, timeout_s=1.0, collect=True) == [0, 1]
    assert time.perf_counter() - t0 >= 3.0
