r"""The ``--out`` folder: which files a run owns, how they are written (crash-safe), and the checks that run
before anything is created.

* **Atomic writes.** Every output is written to ``OUT/.<name>.tmp`` and renamed onto ``OUT/<name>`` with
  :func:`os.replace` (atomic on POSIX within one folder), after an ``fsync``: a reader, or a crash at any moment,
  sees either the previous complete file or the new complete one, never a half-written one.
* **metrics.jsonl** is appended one line per epoch (flushed) to ``OUT/.metrics.jsonl.tmp`` and renamed when the
  training loop ends — a ``metrics.jsonl`` therefore always holds every epoch of a finished loop. Rewriting the
  whole file atomically every epoch would cost :math:`O(E^2)` bytes over ``E`` epochs; the checkpoint (not
  the metrics file) is what a crashed run resumes from, and it carries the per-epoch records itself.
* **Order.** ``metrics.jsonl``, ``logits.npy``, ``model.pt``, ``breakdown.png``, ``curves.png``, then
  ``summary.json`` last: a ``summary.json`` marks a complete run.
* **Nothing before set-up.** Validation only *probes* ``--out`` (a temporary file created and removed in the
  nearest existing folder: ``os.access`` is meaningless for root); rank 0 creates it once the data are loaded
  and the plan is built, so a failed validation or set-up leaves no folder behind. A failed training loop
  removes its temporary files and the folders it created if they are still empty.
* **Previous outputs.** A folder that already holds one of :data:`OUTPUTS` is refused unless ``--overwrite``
  (or ``--resume`` of that same folder); then exactly those files, and stale ``.<name>.tmp`` files, are
  removed before the first new one is written — never anything else in the folder.
* **One run per folder.** Rank 0 holds :class:`OutLock` (``OUT/.gridgnn.lock``, an exclusive ``flock``) from the
  moment it creates the folder until its last output is written, and checks for previous outputs only once it
  holds it: a second run on the same ``--out`` is refused naming the holder, whatever the timing. The lock dies
  with its process; the file is removed on every exit Python sees, and one left by a killed run is taken over
  with a note.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import sys
import tempfile

from ..errors import GridGnnError

#: The files a training run writes into ``--out`` (and the only ones ``--overwrite`` removes).
OUTPUTS = ("metrics.jsonl", "summary.json", "logits.npy", "node_ids.npy", "node_types.json", "model.pt", "breakdown.png", "curves.png",
           "checkpoint.pt")


def temp_path(path: str) -> str:
    """``DIR/.NAME.tmp`` for ``DIR/NAME``: same folder (so the rename is atomic), hidden, one per output."""
    head, tail = os.path.split(path)
    return os.path.join(head, f".{tail}.tmp")


def _why(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


@contextlib.contextmanager
def atomic_write(path: str, mode: str = "wb"):
    r"""Open ``temp_path(path)`` for writing; on a clean exit flush, ``fsync`` and :func:`os.replace` it onto
    ``path``; on any exception remove it and leave ``path`` as it was. An ``OSError`` (disk full, permissions)
    becomes a :class:`GridGnnError` naming the file.

    Args:
        path: the final file name.
        mode: ``"wb"`` (default) or ``"w"`` (UTF-8 text).
    """
    tmp = temp_path(path)
    try:
        with open(tmp, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise GridGnnError(f"cannot write {path}: {_why(exc)}") from None
        raise


def write_json(path: str, obj) -> None:
    """Strict JSON (``NaN``/``Infinity`` refused: they are not JSON), written atomically."""
    text = json.dumps(obj, indent=2, allow_nan=False)
    with atomic_write(path, "w") as fh:
        fh.write(text + "\n")


def write_logits(out_dir: str, logits, original_ids=None, node_types=None) -> None:
    """``logits.npy`` (row ``i`` = vertex ``i`` of the loaded graph); for a relabelled graph (``?relabel=1``),
    ``node_ids.npy``: the file's id of each row; for a graph with vertex types (a ``HeteroData``),
    ``node_types.json``: ``{"names": [...], "offsets": [...]}``, rows ``offsets[t] + i`` being vertex ``i`` of type
    ``names[t]`` in the type's own ids (``logits[offsets[t]:offsets[t + 1]]``: that type's logits)."""
    import numpy as np

    with atomic_write(os.path.join(out_dir, "logits.npy")) as fh:
        np.save(fh, logits)
    if original_ids is not None:
        with atomic_write(os.path.join(out_dir, "node_ids.npy")) as fh:
            np.save(fh, original_ids)
    if node_types is not None:
        write_json(os.path.join(out_dir, "node_types.json"), node_types)


def write_report(path: str, obj) -> None:
    """:func:`write_json` of a command's ``--out FILE`` (``simulate``, ``plan``, ``calibrate``), creating its
    folder first as ``train --out`` does."""
    folder = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as exc:
        raise GridGnnError(f"cannot write {path}: {_why(exc)}") from None
    write_json(path, obj)


class MetricsLog:
    r"""``metrics.jsonl``: one strict-JSON line per epoch, appended (and flushed) to ``.metrics.jsonl.tmp``,
    renamed onto ``metrics.jsonl`` by :meth:`commit`, removed by :meth:`discard`.

    Args:
        path: ``OUT/metrics.jsonl``.
        records: lines to start with (the epochs a resumed run inherits from its checkpoint).
    """

    def __init__(self, path: str, records=()):
        self.path, self.tmp = path, temp_path(path)
        try:
            self._fh = open(self.tmp, "w", encoding="utf-8")
        except OSError as exc:
            raise GridGnnError(f"cannot write {self.tmp}: {_why(exc)}") from None
        for rec in records:
            self.append(rec)

    def append(self, rec: dict) -> None:
        try:
            self._fh.write(json.dumps(rec, allow_nan=False) + "\n")
            self._fh.flush()
        except OSError as exc:
            raise GridGnnError(f"cannot write {self.tmp}: {_why(exc)}") from None

    def commit(self) -> None:
        try:
            os.fsync(self._fh.fileno())
            self._fh.close()
            os.replace(self.tmp, self.path)
        except OSError as exc:
            raise GridGnnError(f"cannot write {self.path}: {_why(exc)}") from None

    def discard(self) -> None:
        with contextlib.suppress(OSError):
            self._fh.close()
        with contextlib.suppress(OSError):
            os.unlink(self.tmp)


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
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as exc:
                raise GridGnnError(f"cannot lock --out {folder}: {_why(exc)}") from None
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
                raise GridGnnError(f"cannot lock --out {folder}: {_why(exc)}") from None
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


def out_dir_state(path: str | None) -> str | None:
    """Before a launch: the nearest existing folder at or above ``--out`` (what a failed run may remove up to)."""
    return None if not path else _nearest_existing(os.path.abspath(path))


def clean_after_ranks(path: str | None, existing: str | None) -> None:
    r"""After the ranks of a failed or interrupted run are gone (a rank stopped by SIGTERM or SIGKILL runs no
    clean-up of its own): unless another run holds ``--out`` (:class:`OutLock`), remove the temporary outputs
    (``.<name>.tmp``) and the lock file, then the folders the run created if they are empty (up to ``existing``,
    :func:`out_dir_state` before the launch)."""
    if not path or not os.path.isdir(path):
        return
    try:
        lock = OutLock(path, quiet=True)
    except GridGnnError:
        return  # held: another run is writing there
    try:
        clear_outputs(path, keep=OUTPUTS)  # the temporary names only
    except GridGnnError:
        pass
    finally:
        lock.release()
    created, p = [], os.path.abspath(path)
    while existing and p != existing and p.startswith(existing.rstrip(os.sep) + os.sep):
        created.insert(0, p)
        p = os.path.dirname(p)
    remove_empty_dirs(created)


def _read_small(fd: int) -> str:
    """The holder a lock file names (at most 200 bytes of it, printable)."""
    try:
        text = os.pread(fd, 200, 0).decode("utf-8", "replace")
    except OSError:
        return ""
    return "".join(c for c in text if c.isprintable()).strip()


def _nearest_existing(path: str) -> str:
    p = path
    while not os.path.lexists(p):
        parent = os.path.dirname(p)
        if parent == p:
            break
        p = parent
    return p


def _probe(folder: str, what: str) -> None:
    """Create and remove a temporary file in ``folder`` (the only test of writability that holds for root,
    read-only mounts and ACLs alike)."""
    try:
        fd, name = tempfile.mkstemp(prefix=".gridgnn-probe-", dir=folder)
        os.close(fd)
        os.unlink(name)
    except OSError as exc:
        raise GridGnnError(f"cannot write {what}: {folder} refuses new files ({_why(exc)})") from None


def check_new_files(paths, *, overwrite: bool) -> None:
    """A command's ``--out`` files (``gridgnn partition``): refused when one exists and ``--overwrite`` was not
    given, or when one is not a regular file (a folder, a FIFO) — before any work is done."""
    for path in paths:
        if not os.path.lexists(path):
            continue
        if not os.path.isfile(path) or os.path.islink(path):
            raise GridGnnError(f"--out: {path} exists and is not a regular file")
        if not overwrite:
            raise GridGnnError(f"--out: {path} already exists; add --overwrite to replace it, or choose another "
                               "--out")


def previous_outputs(path: str) -> list[str]:
    """The :data:`OUTPUTS` already present in folder ``path`` (none when it does not exist)."""
    return [name for name in OUTPUTS if os.path.lexists(os.path.join(path, name))]


def check_out_dir(path: str, *, overwrite: bool = False, resuming_here: bool = False) -> None:
    r"""Can a run write ``--out path``? Creates nothing that outlives the call.

    Refused: an empty path; an existing non-directory; a missing path whose nearest existing ancestor is not a
    directory or refuses new files; an existing folder that refuses new files, or that holds a previous run's
    outputs unless ``overwrite`` or ``resuming_here`` (``--resume`` of this same folder).
    """
    if not path:
        raise GridGnnError("--out must not be empty")
    full = os.path.abspath(path)
    if os.path.lexists(full):
        if not os.path.isdir(full):
            raise GridGnnError(f"--out {path} exists and is not a directory")
        _probe(full, f"--out {path}")
        old = previous_outputs(full)
        if old and not (overwrite or resuming_here):
            raise GridGnnError(f"--out {path} already holds a previous run's outputs ({', '.join(old)}); "
                               "add --overwrite to replace them, or choose another --out")
        return
    anc = _nearest_existing(full)
    if not os.path.isdir(anc):
        raise GridGnnError(f"cannot create --out {path}: {anc} is not a directory")
    _probe(anc, f"--out {path}")


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
            raise GridGnnError(f"cannot create --out {path}: {_why(exc)}") from None
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


def clear_outputs(path: str, *, keep: tuple[str, ...] = ()) -> list[str]:
    """Remove the :data:`OUTPUTS` in ``path`` (except ``keep``) and stale temporary outputs; returns the names
    removed. Nothing else in the folder is touched."""
    removed = []
    for name in OUTPUTS:
        for target in (os.path.join(path, name), temp_path(os.path.join(path, name))):
            if os.path.basename(target) in keep or not os.path.lexists(target):
                continue
            try:
                os.unlink(target)
            except IsADirectoryError:
                raise GridGnnError(f"cannot replace {target}: it is a directory") from None
            except OSError as exc:
                raise GridGnnError(f"cannot remove the previous {target}: {_why(exc)}") from None
            removed.append(os.path.basename(target))
    return removed
