r"""Reading untrusted data files without surprises: bounded allocations and plain ``.npy``/``.npz`` parsing.

Every reader of :mod:`gridgnn.graph` goes through these helpers, so that a truncated, bit-flipped or crafted
file ends in a :class:`~gridgnn.errors.GridGnnError` naming the file, never in another exception type, a hang
or an attempt to allocate more memory than the machine has.

**Vertex counts.** A loader that infers the vertex count ``n`` from the largest id (edge lists) or from a
header (Matrix Market) or from the length of a stored row pointer (``.npz``) applies two checks before it
allocates anything of size ``n``:

* *Plausibility* (:func:`check_plausible_vertex_count`). ``nnz`` entries touch at most ``2 * nnz`` distinct
  vertices, so ``n - 2 * nnz`` vertices are certainly isolated. Up to :data:`ISOLATED_SLACK` (1,000,000) of them
  are accepted silently: they cost at most ~64 MB (:data:`BYTES_PER_VERTEX` each) and cover trailing isolated
  vertices, 1-based ids and gaps in small graphs. Beyond that, ``n > 2 * nnz + 1_000_000``, the file is far more
  likely to hold a typo or a hashed id (``999999999999``) than a graph that is mostly isolated vertices, so the
  loader refuses unless the user confirms the count with ``?num_nodes=N`` or asks for ``?relabel=1`` (ids
  compacted to ``0..k-1``, see :attr:`Graph.original_ids <gridgnn.graph.graph.Graph.original_ids>`).
* *Ceiling* (:func:`check_vertex_count`). Even a confirmed ``n`` is refused when
  ``n * BYTES_PER_VERTEX`` exceeds the memory available now (:func:`available_memory`), and ids must fit
  ``int64``.

**Arrays.** :func:`read_npy` and :func:`read_npz` parse the ``.npy`` header themselves (at most 10,000
characters, a plain dtype of an allowed kind, no pickled objects), check that the file or archive member holds
exactly the bytes the header declares before allocating the array, refuse encrypted members, compression other
than stored/deflate and members that declare more than deflate can expand (1032:1), and read only the keys the
caller asks for.
"""
from __future__ import annotations

import ast
import os
import reprlib
import stat
import struct
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..distributed.machine import available_memory
from ..errors import GridGnnError

__all__ = [
    "BYTES_PER_VERTEX", "ISOLATED_SLACK", "MAX_ID", "DataFileError", "NpyHeader",
    "available_memory", "check_vertex_count", "check_plausible_vertex_count", "check_alloc", "human_bytes",
    "regular_file", "read_npy", "npy_header", "memmap_npy", "read_npz", "short",
]

#: Bytes of memory per vertex assumed by the ceiling check: the container's per-vertex arrays (``indptr`` 8 B,
#: default degree features 3 × 4 B, labels 8 B, three masks 3 B) plus the transient copies made while building it
#: (CSR conversion, symmetrization, float64 degree columns), rounded up.
BYTES_PER_VERTEX = 64

#: Isolated vertices accepted without ``?num_nodes=`` (see the module docstring).
ISOLATED_SLACK = 1_000_000

#: Largest vertex id: ``n = id + 1`` must fit ``int64``.
MAX_ID = np.iinfo(np.int64).max - 1

# errors a parser of untrusted bytes may raise; each becomes a GridGnnError naming the file
PARSE_ERRORS = (OSError, EOFError, ValueError, TypeError, KeyError, IndexError, OverflowError, zipfile.BadZipFile,
                zlib.error, NotImplementedError, RuntimeError, SyntaxError, struct.error)

_MAX_HEADER_CHARS = 10_000
_DEFLATE_MAX_RATIO = 1032  # the most deflate can expand: 258 bytes per 2 bits, plus a margin
_READ_CHUNK = 1 << 24


class _Bad(ValueError):
    """A malformed file detected by this module (its message needs no exception-type prefix)."""


class DataFileError(GridGnnError):
    r"""A data file that cannot be used; ``path`` names it, ``reason`` says why (no path prefix), and
    ``missing`` is ``True`` when the file does not exist."""

    def __init__(self, path, reason: str, *, missing: bool = False) -> None:
        self.path = Path(path)
        self.reason = reason
        self.missing = missing
        super().__init__(f"{path}: {reason}")


_REPR = reprlib.Repr()
_REPR.maxlevel = 3
_REPR.maxstring = _REPR.maxother = _REPR.maxlong = 60


def short(value, limit: int = 40) -> str:
    r"""A ``repr`` of ``value`` cut to ``limit`` characters, for one-line messages that quote file contents.

    Safe on anything a file can produce: deep nesting, huge containers and integers of thousands of digits
    (whose ``repr`` raises ``ValueError``) are abbreviated, never raised.
    """
    try:
        text = _REPR.repr(value)
    except Exception:  # formatting only: a value that cannot be shown is named by its type
        text = f"<{type(value).__name__}>"
    text = text.replace("\n", " ")
    return text if len(text) <= limit else text[:limit - 3] + "..."


def human_bytes(nbytes: float) -> str:
    r"""``1536`` → ``"1.5 KiB"`` (binary units, one decimal)."""
    nbytes = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if abs(nbytes) < 1024 or unit == "EiB":
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1024
    return f"{nbytes:.1f} EiB"  # pragma: no cover


# ---------------------------------------------------------------------------------------------- memory
def check_alloc(nbytes: int, what: str) -> None:
    r"""Refuse to allocate ``nbytes`` for ``what`` when more than :func:`available_memory` is asked for.

    Raises:
        GridGnnError: ``"<what> needs 7.3 TiB, only 21.0 GiB of memory is available"``.
    """
    avail = available_memory()
    if nbytes > avail:
        raise GridGnnError(f"{what} needs {human_bytes(nbytes)} ({nbytes} bytes), only {human_bytes(avail)} of "
                           f"memory is available")


def check_vertex_count(n: int, what: str) -> None:
    r"""The ceiling: ``1 <= n``, ``n - 1`` fits ``int64`` and ``n * BYTES_PER_VERTEX`` fits the memory available.

    Args:
        n: the vertex count.
        what: how ``n`` was obtained, for the message (e.g. ``"g.txt: num_nodes=1000000000000"``).

    Raises:
        GridGnnError: one line with ``n``, the bytes needed and the bytes available.
    """
    if n < 1:
        raise GridGnnError(f"{what}: a graph needs at least one vertex, got n={n}")
    if n - 1 > MAX_ID:
        raise GridGnnError(f"{what}: n={n} vertices do not fit 64-bit ids (the largest id is {MAX_ID})")
    need = n * BYTES_PER_VERTEX
    avail = available_memory()
    if need > avail:
        raise GridGnnError(f"{what}: n={n} vertices need about {human_bytes(need)} ({BYTES_PER_VERTEX} bytes per "
                           f"vertex) but only {human_bytes(avail)} of memory is available")


def check_plausible_vertex_count(n: int, nnz: int, what: str, *, confirm: str) -> None:
    r"""The plausibility rule of the module docstring: refuse ``n > 2 * nnz + ISOLATED_SLACK``.

    Args:
        n: the vertex count inferred from the file.
        nnz: the number of entries (edges) that define it.
        what: the file, for the message.
        confirm: how the user can confirm ``n`` (e.g. ``"?num_nodes=N or ?relabel=1"``).

    Raises:
        GridGnnError: one line with ``n``, ``nnz`` and the way to confirm.
    """
    if n > 2 * nnz + ISOLATED_SLACK:
        raise GridGnnError(
            f"{what}: {n} vertices for {nnz} entries: at least {n - 2 * nnz} vertices would have no edge (more "
            f"than 2*entries + {ISOLATED_SLACK}); if that is intended pass {confirm}")


# ---------------------------------------------------------------------------------------------- files
def regular_file(path, what: str = "file") -> tuple[Path, int]:
    r"""``(path, size)`` of an existing regular file (not a FIFO, device or directory, which could block or
    never end).

    Raises:
        DataFileError: missing (``missing=True``), not a regular file, or not readable.
    """
    p = Path(path)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise DataFileError(p, f"{what} not found", missing=True) from None
    except OSError as exc:
        raise DataFileError(p, f"cannot read {what}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        raise DataFileError(p, f"not a regular file (cannot read {what})")
    if not os.access(p, os.R_OK):
        raise DataFileError(p, f"cannot read {what} (permission denied)")
    return p, int(st.st_size)


@dataclass(frozen=True)
class NpyHeader:
    r"""What a ``.npy`` header declares: ``shape``, ``fortran_order``, ``dtype`` and the byte ``offset`` of the data."""

    shape: tuple
    fortran_order: bool
    dtype: np.dtype
    offset: int

    @property
    def count(self) -> int:
        c = 1
        for s in self.shape:
            c *= s
        return c

    @property
    def nbytes(self) -> int:
        return self.count * self.dtype.itemsize


def _read_exact(fh, size: int, what: str) -> bytes:
    data = fh.read(size)
    if len(data) != size:
        raise _Bad(f"truncated {what}: expected {size} bytes, got {len(data)}")
    return data


def _parse_header(fh, kinds: str, max_itemsize: int) -> NpyHeader:
    magic = _read_exact(fh, 8, "magic string")
    if magic[:6] != b"\x93NUMPY":
        raise _Bad(f"not a .npy array (magic {short(magic[:6])})")
    major, minor = magic[6], magic[7]
    if (major, minor) not in ((1, 0), (2, 0), (3, 0)):
        raise _Bad(f"unsupported .npy version {major}.{minor}")
    fmt = "<H" if major == 1 else "<I"
    hlen = struct.unpack(fmt, _read_exact(fh, struct.calcsize(fmt), "header length"))[0]
    if hlen > _MAX_HEADER_CHARS * 4:
        raise _Bad(f"the .npy header claims {hlen} bytes (at most {_MAX_HEADER_CHARS} expected)")
    raw = _read_exact(fh, hlen, "header")
    text = raw.decode("utf8" if major == 3 else "latin1")
    if len(text) > _MAX_HEADER_CHARS:
        raise _Bad(f"the .npy header has {len(text)} characters (at most {_MAX_HEADER_CHARS})")
    try:
        d = ast.literal_eval(text)
    except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError):
        raise _Bad(f"unparsable .npy header {short(text)}") from None
    if not isinstance(d, dict) or set(d) != {"descr", "fortran_order", "shape"}:
        raise _Bad(f"the .npy header is not a dict with descr, fortran_order, shape: {short(text)}")
    shape, fortran, descr = d["shape"], d["fortran_order"], d["descr"]
    if (not isinstance(shape, tuple) or len(shape) > 32
            or not all(type(s) is int and s >= 0 for s in shape)):
        raise _Bad(f"invalid shape {short(shape)} in the .npy header")
    if type(fortran) is not bool:
        raise _Bad(f"invalid fortran_order {short(fortran)} in the .npy header")
    if not isinstance(descr, str) or len(descr) > 16:
        raise _Bad(f"dtype {short(descr)} is not a plain array dtype (structured and object arrays are "
                         f"refused)")
    dtype = np.dtype(descr)
    if dtype.kind not in kinds or dtype.hasobject or dtype.fields is not None or dtype.subdtype is not None:
        raise _Bad(f"dtype {dtype} is not allowed here (expected kind {'/'.join(kinds)})")
    if not 0 < dtype.itemsize <= max_itemsize:
        raise _Bad(f"dtype {dtype} has an item size of {dtype.itemsize} bytes (at most {max_itemsize})")
    return NpyHeader(shape=shape, fortran_order=fortran, dtype=dtype, offset=8 + struct.calcsize(fmt) + hlen)


def _fill(fh, arr: np.ndarray) -> None:
    mv = memoryview(arr.reshape(-1).view(np.uint8))
    pos, total = 0, mv.nbytes
    while pos < total:
        k = fh.readinto(mv[pos:min(total, pos + _READ_CHUNK)])
        if not k:
            raise _Bad(f"truncated array data: {pos} of {total} bytes")
        pos += k


def _finish(flat: np.ndarray, hdr: NpyHeader) -> np.ndarray:
    arr = flat.reshape(hdr.shape, order="F" if hdr.fortran_order else "C")
    if not arr.dtype.isnative:
        arr = arr.astype(arr.dtype.newbyteorder("="))
    return np.ascontiguousarray(arr)


def _header_of(fh, size: int, kinds: str, max_itemsize: int, what: str) -> NpyHeader:
    hdr = _parse_header(fh, kinds, max_itemsize)
    if hdr.offset + hdr.nbytes != size:
        raise _Bad(f"the header declares shape {hdr.shape} of {hdr.dtype} ({hdr.nbytes} bytes of data) "
                         f"but {what} holds {size - hdr.offset} bytes of data")
    return hdr


def npy_header(path, *, kinds: str = "biuf", max_itemsize: int = 16) -> NpyHeader:
    r"""The header of a ``.npy`` file, checked against the file size, without reading the data.

    Raises:
        DataFileError: missing, unreadable, not a ``.npy``, a refused dtype, or a size that differs from what
            the header declares.
    """
    p, size = regular_file(path, "array file")
    try:
        with open(p, "rb") as fh:
            return _header_of(fh, size, kinds, max_itemsize, "the file")
    except PARSE_ERRORS as exc:
        raise DataFileError(p, _reason(exc)) from None


def read_npy(path, *, kinds: str = "biuf", max_itemsize: int = 16) -> np.ndarray:
    r"""Read a ``.npy`` file like ``numpy.load(allow_pickle=False)`` but with the checks of the module docstring.

    Args:
        path: the file.
        kinds: allowed ``dtype.kind`` letters (``"biuf"``: bool, signed, unsigned, float).
        max_itemsize: largest item size in bytes.

    Returns:
        The array in native byte order, C-contiguous.

    Raises:
        DataFileError: as :func:`npy_header`, a truncated file, or more bytes than the memory available.
    """
    p, size = regular_file(path, "array file")
    try:
        with open(p, "rb") as fh:
            hdr = _header_of(fh, size, kinds, max_itemsize, "the file")
            check_alloc(hdr.nbytes, "the array")
            flat = np.empty(hdr.count, dtype=hdr.dtype)
            _fill(fh, flat)
            return _finish(flat, hdr)
    except GridGnnError as exc:
        raise DataFileError(p, str(exc)) from None
    except PARSE_ERRORS as exc:
        raise DataFileError(p, _reason(exc)) from None


def memmap_npy(path, *, kinds: str = "biuf", max_itemsize: int = 16) -> np.ndarray:
    r"""A read-only memory map of a checked ``.npy`` file (an empty in-memory array when it holds no data).

    Raises:
        DataFileError: as :func:`npy_header`.
    """
    p = Path(path)
    hdr = npy_header(p, kinds=kinds, max_itemsize=max_itemsize)
    if hdr.count == 0:
        return np.empty(hdr.shape, dtype=hdr.dtype)
    try:
        return np.memmap(p, dtype=hdr.dtype, mode="r", offset=hdr.offset, shape=hdr.shape,
                         order="F" if hdr.fortran_order else "C")
    except PARSE_ERRORS as exc:
        raise DataFileError(p, _reason(exc)) from None


def _reason(exc: BaseException) -> str:
    text = str(exc).replace("\n", " ").strip()
    if len(text) > 200:
        text = text[:197] + "..."
    if isinstance(exc, _Bad):
        return text
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def read_npz(path, keys: dict[str, tuple[str, int]]) -> dict[str, np.ndarray]:
    r"""Read the requested members of an ``.npz`` archive with the checks of the module docstring.

    Args:
        path: the archive.
        keys: ``{name: (kinds, max_itemsize)}`` of the arrays to read; members of other names are not read.

    Returns:
        ``{name: array}`` for the requested names present in the archive.

    Raises:
        DataFileError: missing file, not a zip archive (a ``.npy`` renamed ``.npz`` is named as such), a
            corrupt, truncated, encrypted or oddly compressed member, a refused dtype, duplicate members, or
            more data than the memory available.
    """
    p, size = regular_file(path, "file")
    out: dict[str, np.ndarray] = {}
    try:
        with open(p, "rb") as fh:
            if fh.read(6) == b"\x93NUMPY":
                raise DataFileError(p, "is a single .npy array, not an .npz archive (rename it or save it with "
                                       "numpy.savez)")
            fh.seek(0)
            with zipfile.ZipFile(fh) as zf:
                infos = zf.infolist()
                names = [i.filename for i in infos]
                if len(set(names)) != len(names):
                    dup = next(n for n in names if names.count(n) > 1)
                    raise _Bad(f"the archive holds member {short(dup)} twice")
                members = {i.filename[:-4]: i for i in infos if i.filename.endswith(".npy")}
                for key, (kinds, max_itemsize) in keys.items():
                    info = members.get(key)
                    if info is None:
                        continue
                    out[key] = _read_member(zf, info, size, kinds, max_itemsize)
    except DataFileError:
        raise
    except GridGnnError as exc:
        raise DataFileError(p, str(exc)) from None
    except PARSE_ERRORS as exc:
        raise DataFileError(p, f"cannot read .npz archive: {_reason(exc)}") from None
    return out


def _read_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, archive_size: int, kinds: str,
                 max_itemsize: int) -> np.ndarray:
    name = info.filename
    if info.flag_bits & 0x1:
        raise _Bad(f"member {short(name)} is encrypted")
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise _Bad(f"member {short(name)} uses compression method {info.compress_type} (only stored and "
                         f"deflate are read)")
    if info.compress_size > archive_size:
        raise _Bad(f"member {short(name)} claims {info.compress_size} compressed bytes in a "
                         f"{archive_size}-byte archive")
    limit = info.compress_size if info.compress_type == zipfile.ZIP_STORED else \
        _DEFLATE_MAX_RATIO * info.compress_size + 1024
    if info.file_size > limit:
        raise _Bad(f"member {short(name)} claims {info.file_size} bytes from {info.compress_size} "
                         f"compressed bytes, more than the compression can produce")
    try:
        with zf.open(info) as fh:
            hdr = _header_of(fh, info.file_size, kinds, max_itemsize, "the member")
            check_alloc(hdr.nbytes, "the array")
            flat = np.empty(hdr.count, dtype=hdr.dtype)
            _fill(fh, flat)
            if fh.read(1):  # also makes zipfile check the CRC at the end of the member
                raise _Bad("the member holds more bytes than it declares")
    except GridGnnError as exc:
        raise _Bad(f"member {short(name)}: {exc}") from None
    except PARSE_ERRORS as exc:
        raise _Bad(f"member {short(name)}: {_reason(exc)}") from None
    return _finish(flat, hdr)
