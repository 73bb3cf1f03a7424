"""The console: plain epoch lines (about ten per run, or every --log-every) and no control characters when
stdout is not a terminal; on a terminal one bar with the live loss and validation accuracy in its postfix; no
library warnings at exit (the resource_tracker "leaked semaphore" warning of spawned runs included)."""
import os
import re
import subprocess
import sys

import pytest

from gridgnn.train.console import log_interval

SBM = "synthetic:sbm?n=200&classes=3&avg_degree=6&features=8"
#: ``epoch E/N | loss ... | rank 0 sent X kB | about T s left`` (``done`` on the last epoch)
EPOCH_LINE = re.compile(r"^epoch +(\d+)/(\d+) \| loss .* \| rank 0 sent [\d.]+ kB \| (about ([\d.]+) s left|done)$")


def _cli(*args):
    return [sys.executable, "-m", "gridgnn", "train", "--data", SBM, *map(str, args)]


@pytest.mark.parametrize("epochs, every, expected", [(100, None, 10), (20, None, 2), (7, None, 1), (5, 0, 0),
                                                     (5, 3, 3)])
def test_log_interval(epochs, every, expected):
    assert log_interval(every, epochs) == expected


def test_not_a_terminal_plain_lines_and_nothing_else():
    r = subprocess.run(_cli("--epochs", 20, "--nproc", 2, "--algo", "1d-sa"), capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""  # no bar, no warnings (resource_tracker, deprecations) at exit
    assert "\r" not in r.stdout and "\x1b" not in r.stdout
    lines = r.stdout.strip().splitlines()
    found = [EPOCH_LINE.match(ln) for ln in lines[:-1]]
    assert all(found), lines
    epochs = [int(m.group(1)) for m in found]
    assert epochs == [0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 19]  # every ceil(20/10) = 2 epochs, and the last
    assert {int(m.group(2)) for m in found} == {20}  # of 20 epochs
    assert [m.group(3) == "done" for m in found] == [False] * 10 + [True]  # the time left, until the last
    assert lines[-1].startswith("final: test_acc=")
    r = subprocess.run(_cli("--epochs", 3, "--log-every", 0), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip().splitlines()[0].startswith("final:") and r.stderr == ""


def test_terminal_bar_with_loss_in_its_postfix():
    import fcntl
    import pty
    import struct
    import termios

    pid, fd = pty.fork()
    if pid == 0:  # the child runs the CLI on the pseudo-terminal
        try:
            os.execv(sys.executable, _cli("--epochs", 40, "--nproc", 2, "--algo", "1d"))
        finally:
            os._exit(127)
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
    out = b""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    _, status = os.waitpid(pid, 0)
    text = out.decode("utf-8", "replace")
    assert os.waitstatus_to_exitcode(status) == 0, text[-2000:]
    assert re.search(r"1d P=2: +\d+%.*loss \d\.\d{4}, val \d\.\d{3}", text), text[-2000:]
    assert "resource_tracker" not in text and "Warning" not in text
    assert "final: test_acc=" in text
