r"""Code of your own named by import path: ``--model package.module:Class`` and ``--algo package.module:NAME``.

gridgnn imports such code only on the user's word — a command-line flag or a Python argument — never on a file's
(a ``--config`` file, a checkpoint): the callers check where a name came from before they resolve it. The module is
imported with the working directory on ``sys.path``, as ``python -m`` has it (console scripts do not).
"""
from __future__ import annotations

import importlib
import os
import sys

from .errors import GridGnnError


def is_import_path(name) -> bool:
    """Whether a flag's value names an object by import path (``package.module:Name``)."""
    return isinstance(name, str) and ":" in name


def import_object(flag: str, name: str):
    """The object ``package.module:Name`` (dotted attributes allowed) names; one-line errors for a malformed
    path, a module that cannot be imported or fails while importing, and a missing attribute."""
    mod_name, _, attr = name.partition(":")
    if not mod_name or not attr or not all(p.isidentifier() for p in mod_name.split(".") + attr.split(".")):
        raise GridGnnError(f"{flag} {name!r}: an import path is package.module:Name")
    try:
        module = _import(mod_name)
    except ImportError as exc:
        raise GridGnnError(f"{flag} {name}: cannot import {mod_name} ({exc})") from None
    except Exception as exc:  # noqa: BLE001 - the user's module failed while importing: one line, no traceback
        raise GridGnnError(f"{flag} {name}: importing {mod_name} failed: {type(exc).__name__}: {exc}") from None
    obj = module
    for part in attr.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise GridGnnError(f"{flag} {name}: {mod_name} has no {attr}")
    return obj


def _import(mod_name: str):
    try:
        return importlib.import_module(mod_name)
    except ModuleNotFoundError as exc:
        cwd = os.getcwd()
        if exc.name is None or not mod_name.startswith(exc.name) or cwd in sys.path or "" in sys.path:
            raise
        sys.path.insert(0, cwd)  # console scripts do not put the working directory on sys.path; `-m` does
        return importlib.import_module(mod_name)
