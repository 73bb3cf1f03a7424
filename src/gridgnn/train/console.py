r"""What rank 0 shows while it trains.

* On a terminal: one progress bar (on stderr) whose postfix carries the live loss and validation accuracy, and a
  full epoch line (on stdout, above the bar) every ``--log-every`` epochs: ``epoch E/N`` (``E`` from 0, as the
  records count), the loop's figures (loss, accuracies or AUC, time split, the bytes rank 0 sent) and the time
  left, estimated from the run's epochs so far.
* Not on a terminal (a pipe, a file, a batch job's log): no bar and no control characters — the epoch lines
  alone, plain text, flushed as they come.
* ``--log-every`` left out: about ten epoch lines per run (every ``ceil(epochs / 10)``-th epoch and the last);
  ``0``: none; ``--quiet``: nothing at all.
* A run whose training loss has not moved (relative change below :data:`STALLED`) over its first tenth (at least
  :data:`STALL_EPOCHS` epochs) gets one
  ``gridgnn: warning:`` line on stderr: it is training nothing (features of the wrong scale, a learning rate or
  weight decay that cannot work), and a run to its end would only look finished.

The bar's lock is a thread lock: tqdm's default one is a ``multiprocessing`` semaphore, which a rank that leaves
with ``os._exit`` (as spawned ranks do) never unregisters — the cause of the ``resource_tracker`` "leaked
semaphore" warning that runs used to end with.
"""
from __future__ import annotations

import math
import sys
import threading
import time

#: lines per run when --log-every is left out
DEFAULT_LINES = 10
#: relative change of the training loss over a run's first tenth (at least STALL_EPOCHS epochs: the first few of a
#: healthy run can move less) below which it is said to train nothing
STALLED = 1e-4
STALL_EPOCHS = 10


def log_interval(log_every: int | None, epochs: int) -> int:
    """Epochs between two epoch lines (0: none)."""
    if log_every is None:
        return max(1, math.ceil(epochs / DEFAULT_LINES))
    return int(log_every)


def _is_terminal(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


class Console:
    r"""Rank 0's console of one run (a no-op on other ranks and with ``quiet``).

    Args:
        show (bool): this rank prints (rank 0, not ``--quiet``).
        epochs (int): the run's last epoch + 1; ``log_every``: ``--log-every`` (``None``: about 10 lines).
        total, initial (int): bar length and start in ``unit`` (epochs, or minibatches).
        desc (str): the bar's label, e.g. ``"1d-sa P=4"``.
    """

    def __init__(self, *, show: bool, epochs: int, log_every: int | None, total: int, initial: int = 0,
                 desc: str = "", unit: str = "epoch"):
        self.show, self.epochs = show, epochs
        self.every = log_interval(log_every, epochs)
        self._first = None  # (epoch, loss) of this run's first epoch
        self._started, self._first_epoch = None, 0  # when this run's first epoch began, and its number
        self.bar = None
        if show and _is_terminal(sys.stderr):
            from tqdm import tqdm

            tqdm.set_lock(threading.RLock())  # not a multiprocessing semaphore (see the module docstring)
            self.bar = tqdm(total=total, initial=initial, desc=desc, unit=unit, leave=False, dynamic_ncols=True)

    def advance(self, n: int = 1) -> None:
        if self.bar is not None:
            self.bar.update(n)

    def epoch_done(self, epoch: int, record: dict, line: str) -> None:
        """After epoch ``epoch``: the bar's postfix shows its loss and accuracies; when due, the epoch line is
        printed: ``epoch E/N`` (``E`` counted from 0, as the records and the summary count, of ``N`` epochs),
        ``line`` (the loop's figures) and the time left, estimated from this run's epochs so far."""
        now = time.perf_counter()
        if self._started is None:  # this run's first epoch: its wall time is what the loop measured
            self._started, self._first_epoch = now - float(record.get("epoch_time_s") or 0.0), epoch
        if self.bar is not None:
            val = record.get("val_acc") if record.get("val_acc") is not None else record.get("val_auc")
            self.bar.set_postfix_str(f"loss {record['loss']:.4f}" + ("" if val is None else f", val {val:.3f}"),
                                     refresh=True)
        if self.show and self.every and (epoch % self.every == 0 or epoch == self.epochs - 1):
            done = epoch - self._first_epoch + 1
            left = (now - self._started) / done * (self.epochs - 1 - epoch)
            self.write(f"epoch {epoch:4d}/{self.epochs} | {line} | " +
                       ("done" if epoch == self.epochs - 1 else f"about {left:.{1 if left < 10 else 0}f} s left"))
        self._watch_loss(epoch, float(record["loss"]))

    def _watch_loss(self, epoch: int, loss: float) -> None:
        """One warning when the loss at the end of the run's first tenth equals its first (see the module docs)."""
        if self._first is None:
            self._first = (epoch, loss)
            return
        e0, l0 = self._first
        mark = e0 + max(STALL_EPOCHS, (self.epochs - e0) // 10)
        if self.show and epoch == mark and abs(loss - l0) < STALLED * abs(l0):
            msg = (f"gridgnn: warning: the training loss has not moved over epochs {e0}-{epoch} ({l0:.6g} -> "
                   f"{loss:.6g}): the model trains nothing; check the features' scale (--feature-norm l2), the "
                   f"learning rate and the weight decay")
            if self.bar is not None:
                self.bar.write(msg, file=sys.stderr)
            else:
                print(msg, file=sys.stderr, flush=True)

    def write(self, line: str) -> None:
        if not self.show:
            return
        if self.bar is not None:
            self.bar.write(line)
        else:
            print(line, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


class Progress:
    r"""Progress of a long count of steps that is not training (``gridgnn plan``'s configurations): on a terminal a
    bar on stderr (tqdm: done of total, rate, time left); elsewhere (a log) one plain line on stderr every
    :data:`PROGRESS_EVERY_S` seconds, ``"<what>: K of N <unit>, T s, about S s left"``. ``show``: print at all."""

    def __init__(self, total: int, *, what: str, unit: str, show: bool = True):
        self.total, self.what, self.unit, self.show = int(total), what, unit, show
        self._clock = time.perf_counter
        self._t0 = self._last = self._clock()
        self.bar = None
        if show and _is_terminal(sys.stderr):
            from tqdm import tqdm

            tqdm.set_lock(threading.RLock())
            self.bar = tqdm(total=self.total, desc=what, unit=unit, leave=False, dynamic_ncols=True)

    def __call__(self, done: int, total: int | None = None) -> None:
        """``done`` steps of ``total`` (default: the total given) are finished."""
        if total is not None:
            self.total = int(total)
        if self.bar is not None:
            self.bar.total = self.total
            self.bar.update(done - self.bar.n)
            return
        now = self._clock()
        if not self.show or done <= 0 or done >= self.total or now - self._last < PROGRESS_EVERY_S:
            return
        self._last = now
        spent = now - self._t0
        left = spent / done * (self.total - done)
        print(f"{self.what}: {done} of {self.total} {self.unit}, {spent:.0f} s, about {left:.0f} s left",
              file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


#: seconds between two progress lines in a log
PROGRESS_EVERY_S = 10.0
