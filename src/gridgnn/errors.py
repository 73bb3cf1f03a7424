"""The exception types users see: a clear one-line message, never a traceback."""


class GridGnnError(Exception):
    """Bad input or configuration. The CLI prints ``gridgnn: error: <message>`` and exits with status 2."""


class CommFailure(GridGnnError):
    """A collective failed on this rank: it timed out (a stalled peer) or a peer went away. The message names
    the rank, the collective, the mesh axis and the phase. The launcher reports it only when no rank gave a
    more direct cause (an input error, a rank killed by a signal); exit status 1."""
