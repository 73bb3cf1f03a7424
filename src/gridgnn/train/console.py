r"""What rank 0 shows while it trains.

* On a terminal: one progress bar (on stderr) whose postfix carries the live loss and validation accuracy, and a
  full epoch line (on stdout, above the bar) every ``--log-every`` epochs.
* Not on a terminal (a pipe, a file, a batch job's log): no bar and no control characters — the epoch lines
  alone, plain text, flushed as they come.
* ``--log-every`` left out: about ten epoch lines per run (every ``ceil(epochs / 10)``-th epoch and the last);
  ``0``: none; ``--quiet``: nothing at all.

The bar's lock is a thread lock: tqdm's default one is a ``multiprocessing`` semaphore, which a rank that leaves
with ``os._exit`` (as spawned ranks do) never unregisters — the cause of the ``resource_tracker`` "leaked
semaphore" warning that runs used to end with.
"""
from __future__ import annotations

import math
import sys
import threading

#: lines per run when --log-every is left out
DEFAULT_LINES = 10


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
        self.bar = None
        if show and _is_terminal(sys.stderr):
            from tqdm import tqdm

            tqdm.set_lock(threading.RLock())  # not a multiprocessing semaphore (see the module docstring)
            self.bar = tqdm(total=total, initial=initial, desc=desc, unit=unit, leave=False, dynamic_ncols=True)

    def advance(self, n: int = 1) -> None:
        if self.bar is not None:
            self.bar.update(n)

    def epoch_done(self, epoch: int, record: dict, line: str) -> None:
        """After epoch ``epoch``: the bar's postfix shows its loss and accuracies; ``line`` is printed when due."""
        if self.bar is not None:
            val = record.get("val_acc")
            self.bar.set_postfix_str(f"loss {record['loss']:.4f}" + ("" if val is None else f", val {val:.3f}"),
                                     refresh=True)
        if self.show and self.every and (epoch % self.every == 0 or epoch == self.epochs - 1):
            self.write(line)

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
