r"""Checked readers for the saved files a user or a run hands back to gridgnn: documents (JSON and TOML: configs,
summaries, profiles), ``torch.save`` files (``model.pt``, ``checkpoint.pt``, OGB split files) and vertex-pair
lists (``.npy``).

Each reader ends in a :class:`~gridgnn.graph.safe_io.DataFileError` naming the file for anything it cannot use —
never another exception type, a hang or an allocation larger than the machine:

* **Regular files only** (:func:`~gridgnn.graph.safe_io.regular_file`): a FIFO or a device would block or never end.
* **Bounded size and depth**: documents are read up to a byte limit, and nested at most :data:`MAX_DEPTH` levels
  (deeper JSON or TOML is refused before Python's recursion limit is reached, and every later reader may recurse
  over the value safely).
* **Torch files** are loaded with ``torch.load(weights_only=True)`` (no code runs) and then walked: every value
  is a plain container, a number, a string, ``None`` or a *plain tensor* — dense (strided), on the CPU, not a meta
  tensor, finite where it is floating point. A ``Parameter`` is read as its data.
* **Pairs**: integer vertex ids (signed or unsigned, widened to ``int64``), never a boolean mask, shape
  ``[2, m]`` or ``[m, 2]``.
"""
from __future__ import annotations

import json
import math
import warnings

import numpy as np

from ..errors import GridGnnError
from .safe_io import DataFileError, check_alloc, read_npy, regular_file

__all__ = ["MAX_DEPTH", "MAX_DOCUMENT_BYTES", "depth_exceeds", "parse_document", "read_document", "read_torch",
           "plain_tensor", "as_pairs", "read_pairs"]

#: Deepest nesting of containers accepted in a document or a torch file (gridgnn writes at most 6).
MAX_DEPTH = 32

#: Largest JSON or TOML document read (a summary with many epochs' records is well under it).
MAX_DOCUMENT_BYTES = 1 << 24


def depth_exceeds(value, limit: int = MAX_DEPTH) -> bool:
    """Whether containers (dicts, lists, tuples) nest deeper than ``limit`` in ``value`` (iterative: safe on any
    depth)."""
    stack = [(value, 0)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict):
            children = v.values()
        elif isinstance(v, (list, tuple)):
            children = v
        else:
            continue
        if d >= limit:
            return True
        stack.extend((c, d + 1) for c in children)
    return False


def parse_document(raw: bytes, kind: str, where: str):
    r"""The value of a JSON (``kind="json"``) or TOML document, nested at most :data:`MAX_DEPTH` levels.

    Raises:
        GridGnnError: ``"{where} is not valid JSON: ..."``, or nested too deeply.
    """
    import tomllib

    name = "JSON" if kind == "json" else "TOML"
    try:
        text = raw.decode("utf-8")
        doc = json.loads(text) if kind == "json" else tomllib.loads(text)
    except RecursionError:
        raise GridGnnError(f"{where} nests more deeply than {MAX_DEPTH} levels; it is not a gridgnn file") from None
    except (UnicodeDecodeError, ValueError) as exc:  # TOMLDecodeError and JSONDecodeError are ValueErrors
        raise GridGnnError(f"{where} is not valid {name}: {str(exc).splitlines()[0] if str(exc) else ''}") from None
    if depth_exceeds(doc):
        raise GridGnnError(f"{where} nests more deeply than {MAX_DEPTH} levels; it is not a gridgnn file")
    return doc


def read_document(path, what: str, *, kind: str | None = None, max_bytes: int = MAX_DOCUMENT_BYTES):
    r"""Read and parse a JSON or TOML file (``kind``: ``"json"``, ``"toml"``, or from the suffix: ``.json`` is JSON,
    anything else TOML).

    Raises:
        DataFileError: missing, not a regular file, larger than ``max_bytes``, not valid, nested too deeply.
    """
    p, size = regular_file(path, what)
    if size > max_bytes:
        raise DataFileError(p, f"{what} is larger than {max_bytes} bytes")
    try:
        with open(p, "rb") as fh:
            raw = fh.read(max_bytes + 1)
    except OSError as exc:
        raise DataFileError(p, f"cannot read {what}: {exc.strerror or exc}") from None
    if len(raw) > max_bytes:
        raise DataFileError(p, f"{what} is larger than {max_bytes} bytes")
    kind = kind or ("json" if str(p).endswith(".json") else "toml")
    try:
        return parse_document(raw, kind, what)
    except GridGnnError as exc:
        raise DataFileError(p, str(exc)) from None


def plain_tensor(t, what: str):
    r"""``t`` (a ``torch.Tensor``, ``Parameter`` included) as a plain tensor — dense, strided, on the CPU, not a
    meta or quantized tensor, finite where floating point — detached from autograd.

    Raises:
        GridGnnError: ``"{what} is a sparse tensor ..."`` and the like, one line.
    """
    import torch

    if not isinstance(t, torch.Tensor):
        raise GridGnnError(f"{what} is a {type(t).__name__}, not a tensor")
    if t.layout != torch.strided:
        raise GridGnnError(f"{what} is a {str(t.layout).replace('torch.', '')} tensor; only dense tensors are read")
    if t.is_meta or t.device.type != "cpu":
        raise GridGnnError(f"{what} is a tensor on device {t.device.type}, which holds no values here")
    if t.is_quantized or t.is_complex() or t.dtype not in _plain_dtypes():
        raise GridGnnError(f"{what} is a {t.dtype} tensor; only real numbers and booleans are read")
    t = t.detach()
    if type(t) is not torch.Tensor:  # a Parameter or another subclass: its data
        t = t.as_subclass(torch.Tensor)
    if t.is_floating_point() and t.numel() and not bool(torch.isfinite(t).all()):
        bad = int((~torch.isfinite(t)).sum())
        raise GridGnnError(f"{what} holds {bad} value(s) that are NaN or infinite")
    return t


def _plain_dtypes():
    import torch

    return (torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8, torch.uint8, torch.int16,
            torch.int32, torch.int64, torch.bool)


def _plain_tree(obj, where: str):
    """``obj`` with every tensor checked by :func:`plain_tensor` and every other value a plain one."""
    import torch

    def check(v, path):
        if isinstance(v, torch.Tensor):
            return plain_tensor(v, f"{where}: {path or 'the file'}")
        if isinstance(v, np.ndarray):
            if v.dtype.hasobject or v.dtype.kind not in "biuf":
                raise GridGnnError(f"{where}: {path or 'the file'} is an array of {v.dtype}")
            if v.dtype.kind == "f" and v.size and not np.isfinite(v).all():
                raise GridGnnError(f"{where}: {path or 'the file'} holds values that are NaN or infinite")
            return v
        if isinstance(v, float) and not math.isfinite(v):
            raise GridGnnError(f"{where}: {path} is {v}")
        if v is None or isinstance(v, (bool, int, float, str, bytes, torch.dtype, torch.device, np.dtype)):
            return v
        raise GridGnnError(f"{where}: {path or 'the file'} is a {type(v).__name__}, which no gridgnn file holds")

    def walk(v, path):
        if isinstance(v, dict):
            for k in v:
                if not isinstance(k, (str, int)):
                    raise GridGnnError(f"{where}: {path or 'the file'} has a key of type {type(k).__name__}")
            return {k: walk(x, f"{path}.{k}" if path else str(k)) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return type(v)(walk(x, f"{path}[{i}]") for i, x in enumerate(v))
        return check(v, path)

    if depth_exceeds(obj):  # so that the walk below recurses at most MAX_DEPTH levels
        raise GridGnnError(f"{where}: nests more deeply than {MAX_DEPTH} levels; it is not a gridgnn file")
    return walk(obj, "")


def read_torch(path, what: str, *, safe_globals=()):
    r"""A ``torch.save`` file read without running code (``weights_only=True``; ``safe_globals``: the extra
    classes allowed, as :func:`torch.serialization.safe_globals`) and checked as the module docstring says:
    plain containers and values, plain finite tensors, nested at most :data:`MAX_DEPTH` levels.

    Raises:
        DataFileError: ``"{path}: {what}: why"``, one line.
    """
    import torch

    p, size = regular_file(path, what)
    try:
        check_alloc(size, f"reading {what}")
        _check_crcs(p, what)
        with warnings.catch_warnings():  # torch warns about foreign pickle protocols: the error below says it all
            warnings.simplefilter("ignore")
            with torch.serialization.safe_globals(list(safe_globals)):
                obj = torch.load(p, map_location="cpu", weights_only=True)
    except GridGnnError as exc:
        raise DataFileError(p, str(exc)) from None
    except Exception as exc:  # noqa: BLE001 - a foreign file can fail in any way; it is the file's fault
        raise DataFileError(p, f"{what}: {_load_failure(exc, p)}") from None
    try:
        return _plain_tree(obj, what)
    except GridGnnError as exc:
        raise DataFileError(p, str(exc)) from None


def _check_crcs(path, what: str) -> None:
    """A ``torch.save`` file is a zip archive whose members carry CRC-32 checksums, which ``torch.load`` does not
    verify: a flipped bit in a tensor's bytes would load as another number. Every member is read once and checked
    here (a file in torch's legacy, non-zip format has no checksums to check)."""
    import zipfile
    import zlib

    with open(path, "rb") as fh:
        if fh.read(4) != b"PK\x03\x04":
            return
    try:
        with zipfile.ZipFile(path) as zf:
            bad = zf.testzip()
    except (zipfile.BadZipFile, zlib.error, OSError, EOFError, ValueError, NotImplementedError, RuntimeError) as exc:
        raise GridGnnError(f"{what}: the file is truncated or damaged (its zip archive: {exc})") from None
    if bad is not None:
        raise GridGnnError(f"{what}: the file is damaged: its member {bad} fails its CRC-32 check (changed after "
                           "it was written)")


def _load_failure(exc: BaseException, path) -> str:
    """Why ``torch.load(weights_only=True)`` refused ``path``, in a few words."""
    import re

    text = str(exc)
    try:
        with open(path, "rb") as fh:
            head = fh.read(4)
    except OSError:
        head = b""
    zipped = head == b"PK\x03\x04"
    if head and not zipped and head[:1] != b"\x80":  # neither torch's zip archive nor its legacy pickle
        return "it was not written by torch.save"
    m = re.search(r"GLOBAL ([\w.]+)", text)
    if m:
        return f"it refers to {m.group(1)}, which no gridgnn file holds (not loaded: loading it could run code)"
    if "Weights only load failed" in text:
        return "it holds objects other than tensors and plain data (not loaded: loading it could run code)"
    if isinstance(exc, RecursionError):
        return f"it nests more deeply than {MAX_DEPTH} levels"
    if isinstance(exc, (IsADirectoryError, FileNotFoundError, PermissionError)):
        return exc.strerror or type(exc).__name__
    if zipped:
        first = text.strip().splitlines()[0][:160] if text.strip() else type(exc).__name__
        return f"the file is truncated or damaged ({first})"
    return "it was not written by torch.save"


# ---------------------------------------------------------------------------------------------- pairs
def as_pairs(pairs, what: str = "pairs") -> np.ndarray:
    r"""Vertex pairs as ``int64[2, m]``: ``pairs`` is ``[2, m]`` (sources, then destinations: PyG's
    ``edge_label_index``) or ``[m, 2]``, of integer ids — a NumPy array, a tensor or nested lists; a ``2 × 2`` one
    is read as ``[2, m]``, PyG's layout (``[[0, 1], [5, 6]]``: the pairs (0, 5) and (1, 6)). Unsigned and
    narrow integers are widened (a ``uint8`` array is ids, never a mask); booleans and floats are refused.

    Raises:
        GridGnnError: one line with the dtype and shape found.
    """
    import torch

    if isinstance(pairs, torch.Tensor):
        pairs = plain_tensor(pairs, what).numpy()
    elif not isinstance(pairs, np.ndarray):
        try:
            pairs = np.asarray(pairs)
        except (ValueError, TypeError, OverflowError) as exc:
            raise GridGnnError(f"{what} must be integer vertex ids of shape [2, m] or [m, 2] ({exc})") from None
    kind = pairs.dtype.kind
    if kind not in "iu" or pairs.ndim != 2 or 2 not in pairs.shape:
        hint = " (a boolean mask is not a list of pairs)" if kind == "b" else ""
        raise GridGnnError(f"{what} must be integer vertex ids of shape [2, m] or [m, 2], got {pairs.dtype} "
                           f"{tuple(pairs.shape)}{hint}")
    if kind == "u" and pairs.dtype.itemsize == 8 and pairs.size and int(pairs.max()) > np.iinfo(np.int64).max:
        raise GridGnnError(f"{what} holds vertex id {int(pairs.max())}, beyond 64-bit ids")
    pairs = pairs.astype(np.int64)
    return np.ascontiguousarray(pairs if pairs.shape[0] == 2 else pairs.T)


def read_pairs(path) -> np.ndarray:
    r"""A ``.npy`` file of vertex pairs (:func:`as_pairs`), read by the checked reader
    (:func:`~gridgnn.graph.safe_io.read_npy`: a regular file, its header bounded and checked against its size).

    Raises:
        DataFileError: ``"{path}: why"``.
    """
    arr = read_npy(path, kinds="iubf", max_itemsize=8)
    try:
        return as_pairs(arr, "the pairs")
    except GridGnnError as exc:
        raise DataFileError(path, str(exc)) from None

