r"""Files written so that no reader and no crash ever sees half of one, and folders held by one process at a time:
the writer and the lock every command shares (``train``, ``predict``, ``export``, ``partition``, ``shard``,
``simulate``, ``plan``, ``calibrate``) and the sharded datasets' own files.

* :func:`atomic_write`: a new temporary ``DIR/.<name>.<8 hex>.tmp`` beside the target, created exclusively and never
  through a link (``O_CREAT | O_EXCL | O_NOFOLLOW``), flushed, ``fsync``-ed and :func:`os.replace`-d onto it (atomic
  on POSIX within one folder); on any exception it is removed and the target left as it was. A full disk
  (``ENOSPC``, ``EDQUOT``, ``EFBIG``), also where ``torch.save`` wraps it in a ``RuntimeError``, is one
  :class:`~gridgnn.errors.GridGnnError` naming the file.
* :class:`OutLock`: an exclusive ``flock`` on ``FOLDER/.gridgnn.lock`` naming its holder; a second holder is
  refused in one line, a lock left by a killed process is taken over with a note.
* :func:`make_out_dir` / :func:`remove_empty_dirs`: an output folder and its missing parents, and their removal
  while still empty.

What a training run's ``--out`` folder holds and when is :mod:`gridgnn.train.outputs`.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import io
import json
import os
import re
import secrets
import socket
import stat
import sys

from ..errors import GridGnnError


def temp_token() -> str:
    """8 hex digits of a temporary name."""
    return secrets.token_hex(4)


def create_temp(path: str) -> tuple[int, str]:
    """A new temporary file beside ``path`` (``DIR/.NAME.<8 hex>.tmp``), created exclusively and never through a
    link (``O_CREAT | O_EXCL | O_NOFOLLOW``; mode ``0666`` less the umask, as :func:`open` makes it); returns
    ``(fd, name)``. An ``OSError`` becomes a :class:`GridGnnError` naming ``path``."""
    head, tail = os.path.split(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    for _ in range(100):
        tmp = os.path.join(head, f".{tail}.{temp_token()}.tmp")
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue  # taken (by chance, or planted): another name
        except OSError as exc:
            raise write_error(path, exc) from None
    raise GridGnnError(f"cannot write {path}: no free temporary name in {head or '.'}")


#: what a full disk looks like (``EFBIG``: a file size limit such as ``ulimit -f``, the disk of one process)
DISK_FULL = tuple(getattr(errno, n) for n in ("ENOSPC", "EDQUOT", "EFBIG") if hasattr(errno, n))


def os_reason(exc: OSError) -> str:
    """What an ``OSError`` says, in words (a file size limit named as such)."""
    text = exc.strerror or type(exc).__name__
    if exc.errno == getattr(errno, "EFBIG", None):
        text += " (a file size limit was reached: the disk of this process is full)"
    return text


def write_error(path: str, exc: OSError) -> GridGnnError:
    """``cannot write PATH: <why>``, one line (the ``OSError`` kept as its ``os_error``, for a caller that names
    the file otherwise)."""
    err = GridGnnError(f"cannot write {path}: {os_reason(exc)}")
    err.os_error = exc
    return err


def os_error_in(exc: BaseException | None) -> OSError | None:
    """The ``OSError`` at the root of ``exc``, following ``__cause__`` / ``__context__`` (``torch.save`` into a file
    object reports a failed write as ``RuntimeError: ... unexpected pos``, with the ``OSError`` as its context)."""
    seen = 0
    while exc is not None and seen < 20:
        if isinstance(exc, OSError):
            return exc
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None


class _File(io.FileIO):
    """A raw file that remembers the ``OSError`` of its last failed write (what a writer that swallows it, such as
    torch's zip writer, reports only as a ``RuntimeError``)."""

    error: OSError | None = None

    def write(self, b):
        try:
            return super().write(b)
        except OSError as exc:
            self.error = exc
            raise


def _open_temp(path: str, mode: str):
    fd, tmp = create_temp(path)
    try:
        raw = _File(fd, "wb", closefd=True)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fh = io.BufferedWriter(raw)
    if "b" not in mode:
        fh = io.TextIOWrapper(fh, encoding="utf-8")
    return fh, raw, tmp


@contextlib.contextmanager
def atomic_write(path: str, mode: str = "wb"):
    r"""The one writer of every output: open a new temporary file beside ``path`` (:func:`create_temp`: exclusive,
    never through a link); on a clean exit flush, ``fsync`` and :func:`os.replace` it onto ``path``; on any
    exception remove it and leave ``path`` as it was. An ``OSError`` (disk full, permissions), also one that the
    writing code wrapped (``torch.save``'s ``RuntimeError``), becomes a :class:`GridGnnError` naming the file.

    Args:
        path: the final file name.
        mode: ``"wb"`` (default) or ``"w"`` (UTF-8 text).
    """
    fh, raw, tmp = _open_temp(path, mode)
    try:
        yield fh
        fh.flush()
        os.fsync(raw.fileno())
        fh.close()
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError, ValueError):
            fh.close()
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, GridGnnError) or not isinstance(exc, Exception):
            raise
        cause = raw.error or os_error_in(exc)
        if cause is not None:
            raise write_error(path, cause) from None
        raise


def write_json(path: str, obj) -> None:
    """Strict JSON (``NaN``/``Infinity`` refused: they are not JSON), written atomically."""
    text = json.dumps(obj, indent=2, allow_nan=False)
    with atomic_write(path, "w") as fh:
        fh.write(text + "\n")


def write_report(path: str, obj) -> None:
    """:func:`write_json` of a command's ``--out FILE`` (``simulate``, ``plan``, ``calibrate``), creating its
    folder first as ``train --out`` does."""
    make_parent(path)
    write_json(path, obj)


def make_parent(path: str) -> list[str]:
    """Create the folder of an ``--out FILE`` and its missing parents (one line on failure); returns the folders
    created, outermost first (:func:`remove_empty_dirs` undoes it)."""
    try:
        return make_out_dir(os.path.dirname(os.path.abspath(path)))
    except GridGnnError as exc:
        raise GridGnnError(f"cannot write {path}: {exc}") from None


class OutLock:
    r"""An exclusive hold of ``--out`` by this process: ``flock`` on ``folder/.gridgnn.lock``, which names the
    holder (``pid N on HOST``). A second holder, in this process or another, is refused with one line naming the
    first; :meth:`release` removes the file. A file whose lock nobody holds (its run was killed) is taken over
    with a note on stderr (``quiet``: silently). The kernel drops the lock with the process, so a crash never
    blocks the folder. On a file system without ``flock`` (some Lustre and NFS mounts) the run goes on unlocked,
    with a note."""

    NAME = ".gridgnn.lock"
    UNSUPPORTED = (errno.ENOSYS, errno.ENOLCK, errno.EOPNOTSUPP)

    def __init__(self, folder: str, *, quiet: bool = False):
        self.path = os.path.join(folder, self.NAME)
        while True:
            try:  # never through a link: the file is truncated and rewritten
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NOCTTY, 0o644)
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise GridGnnError(f"--out {folder}: {self.NAME} is a symbolic link, which gridgnn does not "
                                       "follow; remove it") from None
                raise GridGnnError(f"cannot lock --out {folder}: {os_reason(exc)}") from None
            st = os.fstat(fd)
            if st.st_nlink == 0:  # its holder released it (unlinked) between our open and this: open again
                os.close(fd)
                continue
            if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
                os.close(fd)
                raise GridGnnError(f"--out {folder}: {self.NAME} is not a plain file of its own (a hard link, a "
                                   "device or a pipe), which gridgnn does not write to; remove it")
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno in self.UNSUPPORTED:
                    if not quiet:
                        print(f"gridgnn: note: --out {folder}: this file system cannot lock files; a second run "
                              "on the same folder would not be refused", file=sys.stderr)
                    break
                holder = _read_small(fd) or "another run"
                os.close(fd)
                if isinstance(exc, BlockingIOError):
                    raise GridGnnError(f"--out {folder} is in use by another run ({holder}); wait for it to end "
                                       "or choose another --out") from None
                raise GridGnnError(f"cannot lock --out {folder}: {os_reason(exc)}") from None
            try:  # the previous holder may have removed the file between our open and our lock: start again
                if os.fstat(fd).st_ino == os.stat(self.path).st_ino:
                    break
            except FileNotFoundError:
                pass
            os.close(fd)
        left = _read_small(fd)
        if left and not quiet:
            print(f"gridgnn: note: --out {folder}: taking over the lock left by {left} (that run ended without "
                  "releasing it)", file=sys.stderr)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}".encode(), 0)
        self.fd = fd

    def release(self) -> None:
        """Remove the file and drop the lock (idempotent)."""
        if self.fd is None:
            return
        with contextlib.suppress(OSError):
            os.unlink(self.path)
        with contextlib.suppress(OSError):
            os.close(self.fd)
        self.fd = None


def _read_small(fd: int) -> str:
    """The holder a lock file names (``pid N on HOST``; anything else in the file is not echoed)."""
    try:
        text = os.pread(fd, 200, 0).decode("utf-8", "replace")
    except OSError:
        return ""
    return text if re.fullmatch(r"pid \d+ on [\w.\-]+", text) else ("an unknown holder" if text else "")


def make_out_dir(path: str) -> list[str]:
    """Create ``path`` and its missing parents; returns the folders created (outermost first)."""
    missing = []
    p = os.path.abspath(path)
    while not os.path.lexists(p):
        missing.append(p)
        parent = os.path.dirname(p)
        if parent == p:
            break
        p = parent
    created = []
    for d in reversed(missing):
        try:
            os.mkdir(d)
        except FileExistsError:
            continue  # made concurrently by someone else: fine if it is a directory (checked below)
        except OSError as exc:
            remove_empty_dirs(created)
            raise GridGnnError(f"cannot create --out {path}: {os_reason(exc)}") from None
        created.append(d)
    if not os.path.isdir(path):
        remove_empty_dirs(created)
        raise GridGnnError(f"--out {path} exists and is not a directory")
    return created


def remove_empty_dirs(created: list[str]) -> None:
    """Remove the folders of :func:`make_out_dir` that are still empty (innermost first; never a non-empty one)."""
    for d in reversed(created):
        with contextlib.suppress(OSError):
            os.rmdir(d)
