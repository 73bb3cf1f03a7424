r"""The ``--out`` folder: which files a run owns, how they are written (crash-safe), and the checks that run
before anything is created.

* **Atomic writes.** Every file a command writes (train, predict, export, partition, shard, simulate, plan,
  calibrate) goes through :func:`~gridgnn.graph.files.atomic_write` (written once, below ``train/``, for every command
  and the sharded datasets): a temporary ``OUT/.<name>.<8 hex>.tmp``, unique per call and
  created exclusively (``O_CREAT | O_EXCL | O_NOFOLLOW``: never through a link planted at that name, never a
  file of someone else), then ``fsync`` and :func:`os.replace` onto ``OUT/<name>`` (atomic on POSIX within one
  folder): a reader, or a crash at any moment, sees either the previous complete file or the new complete one,
  never a half-written one.
* **A full disk** (``ENOSPC``, ``EDQUOT``, or ``EFBIG`` past a file size limit), also where ``torch.save`` wraps
  it in a ``RuntimeError``, is one :class:`GridGnnError` naming the file; the temporary file is removed.
* **metrics.jsonl** is appended one line per epoch (flushed) to ``OUT/.metrics.jsonl.<8 hex>.tmp`` and renamed when the
  training loop ends — a ``metrics.jsonl`` therefore always holds every epoch of a finished loop. Rewriting the
  whole file atomically every epoch would cost :math:`O(E^2)` bytes over ``E`` epochs; the checkpoint (not
  the metrics file) is what a crashed run resumes from, and it carries the per-epoch records itself.
* **tensorboard/** (``--log tensorboard``): TensorBoard's event files of the same records, written live into
  ``OUT/.tensorboard.<8 hex>.tmp/`` (``tensorboard --logdir OUT`` reads it while the run goes on) and renamed with
  ``metrics.jsonl``: kept and removed with it (:class:`TensorBoardLog`).
* **Order.** ``metrics.jsonl``, ``metrics.csv`` (the same records as a table), ``logits.npy``, ``model.pt``, ``breakdown.png``, ``curves.png``, then
  ``summary.json`` last: a ``summary.json`` marks a complete run (or, marked ``interrupted``, the end of an
  interrupted one: :func:`keep_interrupted`).
* **Nothing before set-up.** Validation only *probes* ``--out`` (a temporary file created and removed in the
  nearest existing folder: ``os.access`` is meaningless for root); rank 0 creates it once the data are loaded
  and the plan is built, so a failed validation or set-up leaves no folder behind. A failed training loop
  removes its temporary files and the folders it created if they are still empty; an interrupted one (Ctrl-C,
  SIGTERM) keeps the metrics of the epochs it finished and a ``summary.json`` marked interrupted
  (:func:`keep_interrupted`).
* **Previous outputs.** A folder that already holds one of :data:`OUTPUTS` is refused unless ``--overwrite``
  (or ``--resume`` of that same folder); then exactly those files, and stale ``.<name>.tmp`` files, are
  removed before the first new one is written — never anything else in the folder.
* **Incomplete outputs.** When an output cannot be written after the training loop (a full disk), the error
  names the file and, in the same line, the outputs the folder holds and those missing (:func:`incomplete`).
* **One run per folder.** Rank 0 holds :class:`~gridgnn.graph.files.OutLock` (``OUT/.gridgnn.lock``, an exclusive ``flock``) from the
  moment it creates the folder until its last output is written, and checks for previous outputs only once it
  holds it: a second run on the same ``--out`` is refused naming the holder, whatever the timing. The lock dies
  with its process; the file is removed on every exit Python sees, and one left by a killed run is taken over
  with a note.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile

from ..errors import GridGnnError
from ..graph.files import (OutLock, atomic_write, create_temp, os_error_in, os_reason, remove_empty_dirs,
                           temp_token, write_error, write_json)

#: The checkpoint a run writes into ``--out`` (``--checkpoint-every``) and ``--resume DIR`` reads.
CHECKPOINT = "checkpoint.pt"
#: The files a training run writes into ``--out`` (and the only ones ``--overwrite`` removes).
OUTPUTS = ("metrics.jsonl", "metrics.csv", "summary.json", "logits.npy", "node_ids.npy", "node_types.json", "model.pt",
           "breakdown.png", "curves.png", CHECKPOINT, "tensorboard")


def temp_path(path: str) -> str:
    """``DIR/.NAME.tmp`` for ``DIR/NAME``: the temporary name of earlier gridgnn versions (still removed as stale by
    :func:`clear_outputs`); new temporary files are unique per call (:func:`create_temp`)."""
    head, tail = os.path.split(path)
    return os.path.join(head, f".{tail}.tmp")


def _temp_pattern(name: str):
    """``.NAME.tmp`` (old) and ``.NAME.<8 hex>.tmp`` (:func:`create_temp`): gridgnn's temporary names of ``NAME``."""
    return re.compile(rf"\.{re.escape(name)}\.(?:[0-9a-f]{{8}}\.)?tmp")


def write_metrics_csv(path: str, records: list[dict]) -> None:
    """``metrics.csv``: the epoch records of ``metrics.jsonl`` as a table for a spreadsheet — a header of every key
    in the order the records first name it, one row per epoch, an empty cell where a record has no value."""
    import csv

    columns: dict = {}
    for rec in records:
        columns.update(dict.fromkeys(rec))
    with atomic_write(path, "w") as fh:
        table = csv.DictWriter(fh, fieldnames=list(columns), lineterminator="\n")
        table.writeheader()
        table.writerows({k: _cell(v) for k, v in rec.items()} for rec in records)


def _cell(v):
    """A record's value in a CSV cell: empty for ``None``, JSON for a nested value (``--comm-dtype auto``'s
    ``wire``)."""
    if v is None:
        return ""
    return json.dumps(v, allow_nan=False) if isinstance(v, (dict, list)) else v


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


def incomplete(out: str, planned, exc: GridGnnError) -> GridGnnError:
    r"""``exc`` (an output that could not be written) with, in the same line, what ``out`` holds of the run's
    :data:`OUTPUTS` and which of ``planned`` are missing: a folder without ``summary.json`` is not a finished run."""
    have = previous_outputs(out)
    missing = [name for name in planned if name not in have]
    return GridGnnError(f"{exc}; the outputs in {out} are incomplete: written "
                        f"{', '.join(have) or 'none'}; missing {', '.join(missing) or 'none'}")


class MetricsLog:
    r"""``metrics.jsonl``: one strict-JSON line per epoch, appended (and flushed) to ``.metrics.jsonl.<8 hex>.tmp``
    (:func:`create_temp`),
    renamed onto ``metrics.jsonl`` by :meth:`commit`, removed by :meth:`discard`.

    Args:
        path: ``OUT/metrics.jsonl``.
        records: lines to start with (the epochs a resumed run inherits from its checkpoint).
    """

    def __init__(self, path: str, records=()):
        self.path = path
        fd, self.tmp = create_temp(path)
        self._fh = os.fdopen(fd, "w", encoding="utf-8")
        for rec in records:
            self.append(rec)

    def append(self, rec: dict) -> None:
        try:
            self._fh.write(json.dumps(rec, allow_nan=False) + "\n")
            self._fh.flush()
        except OSError as exc:
            raise write_error(self.path, exc) from None

    def commit(self) -> None:
        try:
            os.fsync(self._fh.fileno())
            self._fh.close()
            os.replace(self.tmp, self.path)
        except OSError as exc:
            raise write_error(self.path, exc) from None

    def close(self) -> None:
        """Close the temporary file as it is (an interrupted run's: :func:`keep_interrupted` reads it)."""
        with contextlib.suppress(OSError):
            self._fh.close()

    def discard(self) -> None:
        with contextlib.suppress(OSError):
            self._fh.close()
        with contextlib.suppress(OSError):
            os.unlink(self.tmp)


def out_dir_state(path: str | None) -> str | None:
    """Before a launch: the nearest existing folder at or above ``--out`` (what a failed run may remove up to)."""
    return None if not path else _nearest_existing(os.path.abspath(path))


def clean_after_ranks(path: str | None, existing: str | None) -> None:
    r"""After the ranks of a failed or interrupted run are gone (a rank stopped by SIGTERM or SIGKILL runs no
    clean-up of its own): unless another run holds ``--out`` (:class:`OutLock`), remove the temporary outputs
    (``.<name>.<8 hex>.tmp``, ``.<name>.tmp``) and the lock file, then the folders the run created if they are empty (up to ``existing``,
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


def check_tensorboard() -> None:
    """``--log tensorboard`` needs the ``tensorboard`` package (torch's writer imports it): one line when missing."""
    try:
        from torch.utils.tensorboard import SummaryWriter  # noqa: F401
    except ImportError:
        raise GridGnnError("--log tensorboard needs the tensorboard package: pip install tensorboard "
                           "(or gridgnn[log])") from None


def scalars(rec: dict):
    """``(tag, value)`` of every number of an epoch record (booleans and the epoch itself aside)."""
    for key, value in rec.items():
        if key != "epoch" and isinstance(value, (int, float)) and not isinstance(value, bool):
            yield key, float(value)


class TensorBoardLog:
    r"""``OUT/tensorboard``: one scalar per number of every epoch record (``loss``, the task's metrics, the times,
    ``bytes_sent`` of rank 0, ``lr``), at the record's ``epoch`` as step, written by torch's
    :class:`~torch.utils.tensorboard.SummaryWriter` into ``OUT/.tensorboard.<8 hex>.tmp/`` and flushed every epoch
    (TensorBoard finds the hidden folder under ``--logdir OUT``); :meth:`commit` renames it onto
    ``OUT/tensorboard`` (a previous one replaced), :meth:`discard` removes it.

    Args:
        out: ``--out``.
        records: the records to start with (a resumed run's inherited epochs).
    """

    NAME = "tensorboard"
    #: the file that marks the folder as gridgnn's (:func:`is_our_events`)
    MARKER = ".gridgnn-events"

    def __init__(self, out: str, records=()):
        check_tensorboard()
        from torch.utils.tensorboard import SummaryWriter

        self.path = os.path.join(out, self.NAME)
        if os.path.lexists(self.path) and not is_our_events(self.path):
            raise GridGnnError(f"--out {out} holds a {self.NAME} folder that no gridgnn run wrote; --log tensorboard "
                               "writes there: move it, or choose another --out")
        self.tmp = os.path.join(out, f".{self.NAME}.{temp_token()}.tmp")
        self.writer = None
        try:
            os.mkdir(self.tmp)
            with open(os.path.join(self.tmp, self.MARKER), "w", encoding="utf-8") as fh:
                fh.write("written by gridgnn train --log tensorboard; replaced by the next run into this folder\n")
            self.writer = SummaryWriter(log_dir=self.tmp)
            for rec in records:
                self.append(rec)
        except BaseException as exc:
            self.discard()  # nothing of it stays behind
            cause = os_error_in(exc) if isinstance(exc, Exception) and not isinstance(exc, GridGnnError) else None
            if cause is not None:
                raise write_error(self.path, cause) from None
            raise

    def append(self, rec: dict) -> None:
        step = int(rec.get("epoch", 0))
        try:
            for tag, value in scalars(rec):
                self.writer.add_scalar(tag, value, global_step=step)
            self.writer.flush()
        except OSError as exc:
            raise write_error(self.path, exc) from None

    def commit(self) -> None:
        """The events complete: ``OUT/.tensorboard.*.tmp`` becomes ``OUT/tensorboard``."""
        try:
            self.writer.close()
            if is_our_events(self.path):
                shutil.rmtree(self.path)
            os.replace(self.tmp, self.path)
        except OSError as exc:
            raise write_error(self.path, exc) from None

    def discard(self) -> None:
        if self.writer is not None:
            with contextlib.suppress(Exception):
                self.writer.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


def keep_tensorboard(path: str) -> None:
    """An interrupted run's events (:func:`keep_interrupted`): the one temporary ``.tensorboard.*.tmp`` folder of
    ``path`` becomes ``tensorboard`` (nothing when there is none)."""
    pattern = _temp_pattern(TensorBoardLog.NAME)
    temps = [f for f in os.listdir(path) if pattern.fullmatch(f) and os.path.isdir(os.path.join(path, f))]
    if len(temps) == 1:
        final = os.path.join(path, TensorBoardLog.NAME)
        if is_our_events(final):
            shutil.rmtree(final)
        if not os.path.lexists(final):
            os.replace(os.path.join(path, temps[0]), final)


def write_kept(path: str, records: list[dict], summary: dict) -> None:
    """An interrupted run's outputs (:func:`keep_interrupted`): ``metrics.jsonl`` and ``metrics.csv`` of the epochs
    it finished and its ``summary.json`` (marked interrupted), each written atomically — all three or, where one
    cannot be written, none (a folder holding some would refuse the next run as holding outputs)."""
    written = []
    try:
        with atomic_write(os.path.join(path, "metrics.jsonl"), "w") as fh:
            fh.write("".join(json.dumps(r, allow_nan=False) + "\n" for r in records))
        written.append("metrics.jsonl")
        write_metrics_csv(os.path.join(path, "metrics.csv"), records)
        written.append("metrics.csv")
        write_json(os.path.join(path, "summary.json"), summary)
    except BaseException:
        for name in written:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(path, name))
        raise


def finished_records(tmp: str) -> list[dict]:
    """The complete lines of a temporary ``metrics.jsonl`` (appended and flushed epoch by epoch): a line cut short
    by a signal ends them."""
    records = []
    with open(tmp, encoding="utf-8") as fh:
        for line in fh:
            try:
                rec = json.loads(line) if line.endswith("\n") else None
            except ValueError:
                rec = None
            if not isinstance(rec, dict):
                break
            records.append(rec)
    return records


def keep_interrupted(path: str | None, summary_of) -> int:
    r"""After the ranks of an interrupted local launch are gone (rank 0, stopped by SIGTERM, could not do it
    itself): keep what the run finished. The complete lines of rank 0's temporary ``metrics.jsonl``
    (:func:`finished_records`) become its outputs with ``summary_of(records)`` as the summary (:func:`write_kept`),
    and the temporary file goes — unless another run holds ``--out`` (:class:`OutLock`). Returns the epochs kept
    (0: none was finished, or nothing was left to keep: the caller's clean-up removes the rest). An ``OSError`` or
    a full disk is the caller's to report."""
    if not path or not os.path.isdir(path):
        return 0
    try:
        lock = OutLock(path, quiet=True)
    except GridGnnError:
        return 0  # held: another run is writing there
    try:
        pattern = _temp_pattern("metrics.jsonl")
        temps = [f for f in os.listdir(path) if pattern.fullmatch(f)]
        if len(temps) != 1:
            return 0
        tmp = os.path.join(path, temps[0])
        records = finished_records(tmp)
        if not records:
            return 0
        write_kept(path, records, summary_of(records))
        os.unlink(tmp)
        keep_tensorboard(path)
        return len(records)
    finally:
        lock.release()


def kept_note(out: str, epochs: int, checkpoint: str | None, every: int = 0) -> str:
    """The line that says what an interrupted run kept, and how to go on (from the checkpoint's epoch, written
    every ``every`` epochs: the epochs after it are trained again)."""
    since = f" from its last checkpoint (written every {every} epochs)" if checkpoint and every > 1 else ""
    again = (f"; gridgnn train --resume {os.path.join(out, checkpoint)} --out {out} goes on{since}" if checkpoint
             else " (no checkpoint: --checkpoint-every N writes one)")
    return f"kept the {epochs} finished epoch(s) in {out}: metrics.jsonl, metrics.csv, summary.json (interrupted){again}"


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
        raise GridGnnError(f"cannot write {what}: {folder} refuses new files ({os_reason(exc)})") from None


def add_overwrite_flag(parser) -> None:
    """``--overwrite`` of a command that writes ``--out`` files (:func:`check_new_files` reads it)."""
    parser.add_argument("--overwrite", action="store_true", help="replace the files of a previous --out FILE")


def check_new_files(paths, *, overwrite: bool) -> None:
    """A command's ``--out`` files (``partition``, ``predict``, ``export``, ``simulate``, ``plan``, ``calibrate``):
    refused when one exists and
    ``--overwrite`` was not given, when one is not a regular file (a folder, a FIFO, a link), or when its folder
    cannot be made or refuses new files (``--out somefile/x.npy``) — before any work is done. ``paths``: a command
    whose ``--out`` is optional names none where it was not given; then ``--overwrite`` replaces nothing, refused."""
    paths = [p for p in paths if p]
    if overwrite and not paths:
        raise GridGnnError("--overwrite replaces the files of a previous --out FILE; give --out (or leave "
                           "--overwrite out)")
    for path in paths:
        check_out_file(path)
        if not os.path.lexists(path):
            continue
        if not os.path.isfile(path) or os.path.islink(path):
            raise GridGnnError(f"--out: {path} exists and is not a regular file")
        if not overwrite:
            raise GridGnnError(f"--out: {path} already exists; add --overwrite to replace it, or choose another "
                               "--out")


def check_out_file(path: str) -> None:
    """The folder of ``--out FILE`` exists and takes new files, or can be created (its nearest existing ancestor is
    a folder that takes new files); creates nothing that outlives the call."""
    if not path:
        raise GridGnnError("--out must not be empty")
    folder = os.path.dirname(os.path.abspath(path))
    anc = _nearest_existing(folder)
    if not os.path.isdir(anc):
        raise GridGnnError(f"cannot write --out {path}: {anc} is not a directory")
    _probe(anc, f"--out {path}")


def previous_outputs(path: str) -> list[str]:
    """The :data:`OUTPUTS` already present in folder ``path`` (none when it does not exist; a ``tensorboard``
    folder only when gridgnn wrote it: :func:`is_our_events`)."""
    return [name for name in OUTPUTS if os.path.lexists(os.path.join(path, name))
            and (name != TensorBoardLog.NAME or is_our_events(os.path.join(path, name)))]


def is_our_events(folder: str) -> bool:
    """Whether ``folder`` is a ``tensorboard`` folder a gridgnn run wrote (its marker file is inside): only such a
    folder counts as a previous output, is replaced by ``--overwrite`` or a resumed run — never one of the user's."""
    return os.path.isdir(folder) and not os.path.islink(folder) and \
        os.path.isfile(os.path.join(folder, TensorBoardLog.MARKER))


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


def clear_outputs(path: str, *, keep: tuple[str, ...] = ()) -> list[str]:
    """Remove the :data:`OUTPUTS` in ``path`` (except ``keep``) and the stale temporary names of them
    (``.NAME.tmp``, ``.NAME.<8 hex>.tmp``); returns the names removed. Nothing else in the folder is touched."""
    removed = []
    try:
        listing = os.listdir(path)
    except OSError as exc:
        raise GridGnnError(f"cannot read --out {path}: {os_reason(exc)}") from None
    for name in OUTPUTS:
        pattern = _temp_pattern(name)
        temps = sorted(f for f in listing if pattern.fullmatch(f))
        for target in [os.path.join(path, name)] + [os.path.join(path, f) for f in temps]:
            if os.path.basename(target) in keep or not os.path.lexists(target):
                continue
            if name == TensorBoardLog.NAME and os.path.basename(target) == name and not is_our_events(target):
                continue  # a tensorboard folder of the user's own: not a previous output
            try:
                if name == TensorBoardLog.NAME and os.path.isdir(target) and not os.path.islink(target):
                    shutil.rmtree(target)  # the one output that is a folder (of event files)
                else:
                    os.unlink(target)
            except IsADirectoryError:
                raise GridGnnError(f"cannot replace {target}: it is a directory") from None
            except OSError as exc:
                raise GridGnnError(f"cannot remove the previous {target}: {os_reason(exc)}") from None
            removed.append(os.path.basename(target))
    return removed


def resume_folder(resume: str) -> str:
    """The folder a resumed run writes into by default: ``DIR``, or the folder of a checkpoint file."""
    return resume if os.path.isdir(resume) else (os.path.dirname(resume) or ".")
