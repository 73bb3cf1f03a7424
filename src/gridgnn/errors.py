"""The exception types users see: a clear one-line message, never a traceback."""


class GridGnnError(Exception):
    """Bad input or configuration. The CLI prints ``gridgnn: error: <message>`` and exits with status 2."""


class CommFailure(GridGnnError):
    """A collective failed on this rank: it timed out (a stalled peer) or a peer went away. The message names
    the rank, the collective, the mesh axis and the phase. The launcher reports it only when no rank gave a
    more direct cause (an input error, a rank killed by a signal); exit status 1."""


class Terminated(BaseException):
    """SIGTERM, or SIGHUP (the terminal closed), in a process that runs the work itself (serial training, partition,
    shard): raised by the CLI's handler so that the work stops as at Ctrl-C (exit status 128 + ``signum``: 143,
    129)."""

    def __init__(self, signum: int = 15):
        super().__init__(signum)
        self.signum = int(signum)

    @property
    def name(self) -> str:
        return INTERRUPT_SIGNALS.get(128 + self.signum, f"signal {self.signum}")


#: the exit statuses of an interrupted run and the signal each stands for
INTERRUPT_SIGNALS = {129: "SIGHUP", 130: "SIGINT", 143: "SIGTERM"}


def interrupt_signal(exc: BaseException) -> str | None:
    """The signal that interrupted a run, when ``exc`` says it was interrupted — ``KeyboardInterrupt`` (SIGINT),
    :class:`Terminated` (SIGTERM, SIGHUP), or the launcher's exit with status 130 / 143 / 129 — else ``None``."""
    if isinstance(exc, KeyboardInterrupt):
        return "SIGINT"
    if isinstance(exc, Terminated):
        return exc.name
    if isinstance(exc, SystemExit) and exc.code in INTERRUPT_SIGNALS:
        return INTERRUPT_SIGNALS[exc.code]
    return None


_MEMORY_NOTE = [""]  # what this process's memory guard estimated, for an allocation failure it did not foresee


def note_memory(text: str) -> None:
    """Record the memory guard's estimate and the memory available (:func:`out_of_memory` adds it to its line)."""
    _MEMORY_NOTE[0] = text


def out_of_memory(exc: BaseException) -> str | None:
    r"""The one-line cause when ``exc`` is an allocation failure — Python's or numba's ``MemoryError``, torch's
    ``OutOfMemoryError`` (CUDA) or the CPU allocator's ``RuntimeError`` ("can't allocate memory: you tried to
    allocate N bytes") — else ``None``, with the memory guard's estimate and the memory available when the guard
    ran in this process (:func:`note_memory`). The caller names the rank."""
    import re

    note = f"; {_MEMORY_NOTE[0]}" if _MEMORY_NOTE[0] else ""
    if isinstance(exc, MemoryError):
        return f"out of memory: {str(exc) or 'an allocation failed'}{note}"
    text = str(exc)
    if type(exc).__name__ == "OutOfMemoryError" or (isinstance(exc, RuntimeError) and (
            "can't allocate memory" in text or "out of memory" in text.lower())):
        m = re.search(r"tried to allocate (\d+ bytes|[0-9.]+ ?[KMGT]?i?B)", text, re.IGNORECASE)
        what = f"an allocation of {m.group(1)} failed" if m else text.strip().splitlines()[0][:200]
        return f"out of memory: {what}{note} (lower --hidden or --batch-size, or use more processes)"
    return None
