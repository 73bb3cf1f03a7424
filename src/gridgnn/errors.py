"""The one exception type users see: a clear message, raised before any collective."""


class GridGnnError(Exception):
    """Bad input or configuration. The CLI prints ``gridgnn: error: <message>`` and exits with status 2."""
