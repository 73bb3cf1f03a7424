"""The exception types users see: a clear one-line message, never a traceback."""


class GridGnnError(Exception):
    """Bad input or configuration. The CLI prints ``gridgnn: error: <message>`` and exits with status 2."""


class CommFailure(GridGnnError):
    """A collective failed on this rank: it timed out (a stalled peer) or a peer went away. The message names
    the rank, the collective, the mesh axis and the phase. The launcher reports it only when no rank gave a
    more direct cause (an input error, a rank killed by a signal); exit status 1."""


def out_of_memory(exc: BaseException) -> str | None:
    r"""The one-line cause when ``exc`` is an allocation failure — Python's or numba's ``MemoryError``, torch's
    ``OutOfMemoryError`` (CUDA) or the CPU allocator's ``RuntimeError`` ("can't allocate memory: you tried to
    allocate N bytes") — else ``None``. The caller names the rank; the memory guard's estimate is in its own
    earlier line when it ran."""
    import re

    if isinstance(exc, MemoryError):
        return f"out of memory: {str(exc) or 'an allocation failed'}"
    text = str(exc)
    if type(exc).__name__ == "OutOfMemoryError" or (isinstance(exc, RuntimeError) and (
            "can't allocate memory" in text or "out of memory" in text.lower())):
        m = re.search(r"tried to allocate (\d+ bytes|[0-9.]+ ?[KMGT]?i?B)", text, re.IGNORECASE)
        what = f"an allocation of {m.group(1)} failed" if m else text.strip().splitlines()[0][:200]
        return f"out of memory: {what} (lower --hidden or --batch-size, or use more processes)"
    return None
