r"""Checkpoint and resume: ``--checkpoint-every N`` writes ``OUT/checkpoint.pt``; ``--resume DIR`` continues
from ``DIR/checkpoint.pt`` with any algorithm and any number of processes (a minibatch run keeps its number of
processes: a step is one update on the union of the ranks' minibatches).

The file (written atomically by rank 0; read on every rank with ``torch.load(weights_only=True)``, so it holds
only plain containers, numbers, strings and tensors — loading it runs no code):

====================  ======================================================================================
``format``            ``"gridgnn-checkpoint"``, ``format_version`` :data:`FORMAT_VERSION`
``gridgnn_version``   the library that wrote it (and ``torch_version``)
``epoch``             epochs done, i.e. the next epoch to train
``config``            the run's :class:`~gridgnn.train.config.TrainConfig` as a dict
``dims``, ``graph``   layer widths ``[f_0, ..., f_L]``; ``n`` and ``nnz`` of the graph
``params``            ``{"weights": [W_0 ... W_{L-1}], "biases": [b_0 ...]}``: full, *unsharded* tensors
``optimizer``         ``{"name": "adam", "step": scalar, "exp_avg": {...}, "exp_avg_sq": {...}}``: the optimizer's
                      per-parameter state, unsharded (:data:`~gridgnn.train.optim.STATE_KEYS`: AdamW the same,
                      SGD ``momentum_buffer`` and no step, plain SGD nothing); files written before
                      ``--optimizer`` hold Adam's under ``adam``
``records``           every epoch's metric record so far (the ``metrics.jsonl`` lines), and ``best_epoch``
``best_params``       ``--keep best``: the parameters after ``best_epoch`` (as ``params``), what the run hands on
                      at its end unless a later epoch validates better
====================  ======================================================================================

**Unsharding is exact.** An algorithm may shard the parameters (Plexus: ``plan.param_slice``) or replicate them.
Every rank marks the elements it holds with its global rank in a buffer of the full size filled with ``P``;
an all-reduce MIN makes that the *owner map* (lowest holder of each element). Each rank then writes the bit
patterns of the elements it owns (the float tensor viewed as an integer tensor of the same width) into a zero
buffer, and a SUM over the integers onto rank 0 (a reduce: rank 0 alone writes, so no other rank holds a full
copy) assembles the full tensors: every element has exactly one non-zero contribution and integer addition of
zeros is exact, so the result is bit-for-bit the owner's value (a float sum would turn ``-0.0`` into ``+0.0``).
*Communication* per checkpoint (phase ``checkpoint``, outside the per-epoch counts): an all-reduce over all ranks
of ``4|θ|`` bytes (int32 owner map) and a reduce of ``3e|θ|`` bytes (Adam: parameters and both moments; ``|θ|`` =
number of parameters, ``e`` = bytes per element), ``4e|θ|`` with ``--keep best``'s copy of the best epoch's
parameters (the default); the trained model at the end of a run, the same for ``e|θ|``.

**Resume.** The trajectory depends only on the parameters, the optimizer's state and the epoch (the learning-rate
schedule is a function of the epoch: :mod:`gridgnn.train.optim`): initial weights come
from the seed, dropout masks are keyed by ``(seed, epoch, layer, global ids)``. A resumed run slices the full
tensors with its own plan's ``param_slice`` and continues at ``epoch``; with the same algorithm and ``P`` it
reproduces the uninterrupted run bit for bit on CPU, with another algorithm or ``P`` within float tolerance.

Configuration of a resumed run (:func:`resume_base`): the checkpoint's config is the base and the flags given on
the command line override it, except

* the flags of :data:`TRAJECTORY` (and, for a link run, :data:`LINK_TRAJECTORY`) must agree with the checkpoint
  (or be left out), else the run is refused naming the flag;
* :data:`PER_INVOCATION` flags are never inherited (``--out`` defaults to the folder of the checkpoint);
* a different ``--algo`` also drops the checkpoint's :data:`ALGO_LAYOUT` (``--nproc``, ``--replication``,
  ``--grid``, ``--partition``, ``--blocked-aggregation``, ``--comm-dtype`` and its guard's, ``--grad-dtype``,
  ``--overlap``: they belong to the old algorithm).
"""
from __future__ import annotations

import math
import os

import torch

from .._version import __version__
from ..errors import GridGnnError
from ..graph.safe_io import DataFileError, regular_file
from ..graph.saved import read_torch
from ..graph.safe_io import short
from ..graph.spec import absolute_spec, spec_key
from ..nn import MODELS
from ..nn.base import TRAINER_OPTIONS
from ..nn.decoders import MLPDecoder
from ..parallel import ALGORITHMS
from ..plugins import is_import_path
from .config import TrainConfig, fields_of_role, flag
from .optim import state_keys
from ..graph.files import atomic_write
from .outputs import CHECKPOINT, resume_folder
from .summary import best_epoch, stops_early

FORMAT = "gridgnn-checkpoint"
FORMAT_VERSION = 2
#: the versions this gridgnn reads (1: Adam's state under ``adam``, before ``--optimizer``)
READS_VERSIONS = (1, 2)

#: The flags a resumed run keeps (the fields of roles ``model`` and ``trajectory``, :data:`~gridgnn.train.config.ROLES`).
TRAJECTORY = fields_of_role("model", "trajectory")
#: Link prediction's trajectory flags, compared as the run uses them (a left-out flag's default included).
LINK_TRAJECTORY = fields_of_role("link")
#: Minibatch training's trajectory flags (what is sampled), compared as the run uses them.
SAMPLED_TRAJECTORY = fields_of_role("sampling")
#: Flags that belong to one invocation and are never taken from the checkpoint.
PER_INVOCATION = fields_of_role("invocation")
#: Flags that belong to an algorithm's layout: not inherited when ``--algo`` changes.
ALGO_LAYOUT = fields_of_role("layout")

_DTYPES = {"float32": torch.float32, "float64": torch.float64}
_INT_OF_WIDTH = {2: torch.int16, 4: torch.int32, 8: torch.int64}


# ---------------------------------------------------------------------------------------------- reading
def checkpoint_file(resume: str) -> str:
    """``DIR/checkpoint.pt`` for a folder ``DIR``, or ``resume`` itself when it names a file — a regular file
    (a FIFO or a device would block the read or never end)."""

    if not resume:
        raise GridGnnError("--resume must name a folder holding checkpoint.pt")
    path = resume
    if os.path.isdir(resume):
        path = os.path.join(resume, CHECKPOINT)
        if not os.path.lexists(path):
            raise GridGnnError(f"--resume {resume} holds no {CHECKPOINT} (a run writes one with "
                               "--checkpoint-every N --out DIR)")
    elif not os.path.lexists(resume):
        raise GridGnnError(f"--resume {resume}: no such folder or file")
    try:
        regular_file(path, "a checkpoint")
    except DataFileError as exc:
        raise GridGnnError(f"--resume {exc}") from None
    return path


def read_checkpoint(resume: str) -> dict:
    r"""Load and check ``checkpoint_file(resume)`` (no collective). Anything that is not a complete checkpoint
    of this format — another file, a truncated or damaged one, one with code in it (refused by
    ``weights_only``), inconsistent shapes — is a :class:`GridGnnError` with one line."""
    path = checkpoint_file(resume)
    obj = load_plain(path, f"--resume {path} is not a readable gridgnn checkpoint")
    _check_structure(obj, path)
    obj["signature"] = _signature(path)
    return obj


def _signature(path: str) -> int:
    """A 32-bit digest of the file as read: the CRC-32 of its zip members' names, checksums and sizes (what
    :func:`~gridgnn.graph.saved.read_torch` checked), 0 for a file without them."""
    import zipfile
    import zlib

    try:
        with zipfile.ZipFile(path) as zf:
            listing = ";".join(f"{i.filename}:{i.CRC}:{i.file_size}" for i in zf.infolist())
    except (zipfile.BadZipFile, OSError, ValueError):
        return 0
    return zlib.crc32(listing.encode())


def check_same_checkpoint(comm, ckpt: dict, resume: str) -> None:
    """Collective (phase ``setup``): every rank read the same checkpoint. Each rank reads ``--resume`` itself; a file
    replaced meanwhile (a run still writing it, a requeued job, a shared file system's stale copy) would start
    ranks from different epochs or parameters — a mixed model, or collectives out of step. Refused on every rank
    alike."""
    if comm.grid.world_size == 1:
        return
    mine = [int(ckpt["epoch"]), int(ckpt.get("signature", 0))]
    both = torch.tensor(mine + [-v for v in mine], dtype=torch.int64, device=comm.wire_device())
    with comm.phase("setup"):
        comm.all_reduce(both, comm.grid.names, op="min")
    low, high = both[:2].tolist(), [-v for v in both[2:].tolist()]
    if low != high:
        raise GridGnnError(f"the ranks read different checkpoints from --resume {checkpoint_file(resume)} (epochs "
                           f"{low[0]}..{high[0]}): the file changed while they read it; resume again once it is "
                           "written")


def load_plain(path: str, what: str):
    """A ``torch.save`` file through the checked reader (:func:`gridgnn.graph.saved.read_torch`: loading runs no
    code; plain containers and values, dense finite CPU tensors, bounded depth); a file it refuses is a
    :class:`GridGnnError` ``"{what}: why"``."""

    try:
        return read_torch(path, "the file")
    except DataFileError as exc:
        reason = exc.reason[len("the file: "):] if exc.reason.startswith("the file: ") else exc.reason
        raise GridGnnError(f"{what}: {reason}") from None


def _bad(where: str, what: str) -> GridGnnError:
    """``where``: the file as the message names it (``--resume PATH``, ``model file PATH``)."""
    return GridGnnError(f"{where} is damaged: {what}")


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check_tensors(group, shapes: dict, dims, path: str, name: str, dtype) -> None:
    """``group`` holds, per parameter name of the model, one tensor of the full shape per layer."""
    if not isinstance(group, dict):
        raise _bad(path, f"{name} is not a dict")
    if sorted(group) != sorted(shapes):
        raise _bad(path, f"{name} holds {', '.join(sorted(map(str, group))) or 'nothing'}; the model has "
                         f"{', '.join(sorted(shapes))}")
    for kind, wants in shapes.items():
        tensors = group[kind]
        if not isinstance(tensors, list) or len(tensors) != len(wants):
            raise _bad(path, f"{name} does not hold {len(wants)} {kind} tensors")
        for layer, (t, want) in enumerate(zip(tensors, wants)):
            want = tuple(want)
            if not isinstance(t, torch.Tensor):
                raise _bad(path, f"{name} {kind}[{layer}] is not a tensor")
            if tuple(t.shape) != want:
                raise _bad(path, f"{name} {kind}[{layer}] has shape {tuple(t.shape)}, its dims {dims} need {want}")
            if t.dtype != dtype:
                raise _bad(path, f"{name} {kind}[{layer}] is {t.dtype}, the checkpoint's --dtype needs {dtype}")


def _model_shapes(cfg: dict, dims, path: str) -> dict:
    """The full parameter shapes of the checkpoint's ``--model`` on ``dims`` (from the model registry)."""

    model = cfg.get("model", "gcn")
    if model not in MODELS:  # a plugin (package.module:Class) was resolved from the command line by now

        if is_import_path(model):
            raise GridGnnError(f"{path} holds the model {model}, a model of your own: give --model {model} on the "
                               "command line, or model= to gridgnn.load (gridgnn imports code only on your word)")
        raise _bad(path, f"its model {model!r} is not one this gridgnn has")
    options = {k: cfg.get(k) for k in (*TRAINER_OPTIONS, "edge_dim", "relations") if cfg.get(k) is not None}
    conf = TrainConfig(model=model, **options)
    try:
        conf.validate_model_options()
    except GridGnnError as exc:
        raise _bad(path, f"its model options: {exc}") from None
    shapes = MODELS[model].parameter_shapes(dims, **conf.model_kwargs())
    if cfg.get("task") == "link" and cfg.get("decoder") == "mlp":  # a link model's decoder (model.pt only)

        shapes = {**shapes, "decoder": MLPDecoder.shapes(int(dims[-1]))}
    return shapes


def _check_config(cfg, path: str) -> None:

    if not isinstance(cfg, dict):
        raise _bad(path, "no config")
    defaults = TrainConfig().to_dict()
    for key, value in cfg.items():
        if key not in defaults:
            continue  # a field of another version: ignored
        d = defaults[key]
        if d is None:  # optional: a path, or a number where a flag has no fixed default (--heads ...)
            ok = value is None or isinstance(value, str) or (isinstance(value, (int, float))
                                                             and not isinstance(value, bool))
        elif isinstance(d, bool):
            ok = isinstance(value, bool)
        elif isinstance(d, int):
            ok = _is_int(value)
        elif isinstance(d, float):
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        else:
            ok = isinstance(value, type(d))
        if not ok:
            raise _bad(path, f"config {key} = {value!r} is not a {type(d).__name__ if d is not None else 'str'}")
    if cfg.get("dtype", "float32") not in _DTYPES:
        raise _bad(path, f"config dtype {cfg.get('dtype')!r} is neither float32 nor float64")
    # the same choices and ranges as the flags of gridgnn train (a saved config is a config like any other)

    try:
        conf = TrainConfig(**{k: v for k, v in cfg.items() if k in defaults})
        conf.check_choices()
        conf.check_ranges()
    except GridGnnError as exc:
        raise _bad(path, f"its config: {exc}") from None
    algo = cfg.get("algo", "serial")
    if algo not in (*ALGORITHMS, "serial", "auto") and not is_import_path(algo):
        raise _bad(path, f"its config: --algo {algo!r} is not an algorithm")


def check_parameters(params, config: dict, dims: list[int], where: str) -> tuple[dict, torch.dtype]:
    """``params`` holds the full parameters of ``config``'s model on ``dims`` in its dtype (else a one-line error
    naming ``where``); returns the model's parameter shapes and the dtype."""
    _check_config(config, where)
    if not isinstance(dims, list) or len(dims) < 2 or not all(_is_int(d) and d >= 1 for d in dims):
        raise _bad(where, f"dims {dims!r} are not layer widths")
    dtype = _DTYPES[config.get("dtype", "float32")]
    shapes = _model_shapes(config, dims, where)  # the parameters the model builds (a missing group is named)
    _check_tensors(params, shapes, dims, where, "params", dtype)
    return shapes, dtype


def _check_structure(obj, path: str) -> None:
    where = f"--resume {path}"
    if not isinstance(obj, dict) or obj.get("format") != FORMAT:
        raise GridGnnError(f"--resume {path} is not a gridgnn checkpoint")
    version = obj.get("format_version")
    if not _is_int(version) or version not in READS_VERSIONS:
        raise GridGnnError(f"--resume {path} has checkpoint format version {version!r}; this gridgnn "
                           f"reads versions {' and '.join(map(str, READS_VERSIONS))}")
    _check_config(obj.get("config"), where)
    dims, epoch, records = obj.get("dims"), obj.get("epoch"), obj.get("records")  # dims: check_parameters
    if not _is_int(epoch) or epoch < 1:
        raise _bad(where, f"epoch {epoch!r} is not a positive integer")
    if not isinstance(records, list) or len(records) != epoch:
        raise _bad(where, f"it holds {len(records) if isinstance(records, list) else 'no'} epoch records "
                         f"for {epoch} epochs")
    for i, rec in enumerate(records):
        if not isinstance(rec, dict) or rec.get("epoch") != i or not _plain(rec):
            raise _bad(where, f"epoch record {i} is malformed")
        wrong = _record_fault(rec)
        if wrong:
            raise _bad(where, f"epoch record {i}: {wrong}")
    graph = obj.get("graph")
    if not isinstance(graph, dict) or not all(_is_int(graph.get(k)) for k in ("n", "nnz")):
        raise _bad(where, "no graph size")
    if graph.get("feature_norm", "none") not in ("none", "row", "l2"):
        raise _bad(where, "a malformed feature normalization")
    marks = graph.get("fingerprint")  # (absent from a checkpoint of a version before it, and of a sharded dataset)
    if marks is not None and not (isinstance(marks, dict) and all(isinstance(k, str) and isinstance(v, str)
                                                                  for k, v in marks.items())):
        raise _bad(where, "a malformed graph fingerprint")
    shapes, dtype = check_parameters(obj.get("params"), obj["config"], dims, where)
    state = optimizer_state(obj)
    if not isinstance(state, dict):
        raise _bad(where, "no optimizer state")
    cfg = obj["config"]
    name = cfg.get("optimizer", "adam")  # (a known one with a valid momentum: _check_config)
    if state.get("name") != name:
        raise _bad(where, f"its optimizer state is {state.get('name')!r}'s, its config says {name!r}")
    if name in ("adam", "adamw"):
        step = state.get("step")
        if not isinstance(step, torch.Tensor) or step.dim() != 0 or step.dtype not in (torch.float32, torch.float64) \
                or not math.isfinite(float(step)) or float(step) < 1 or not float(step).is_integer():
            raise _bad(where, f"the optimizer step {short(step)} is not a count of steps (a whole number >= 1, as "
                              "torch's Adam keeps it)")
    for key in state_keys_of(cfg):
        _check_tensors(state.get(key), shapes, dims, where, f"optimizer {key}", dtype)
        if key == "exp_avg_sq" and any(bool((t < 0).any()) for ts in state[key].values() for t in ts):
            raise _bad(where, "its optimizer exp_avg_sq holds a negative value (a mean of squares)")
    if "best_params" in obj:
        _check_tensors(obj["best_params"], shapes, dims, where, "best_params", dtype)


def _record_fault(rec: dict) -> str | None:
    """What is wrong with the fields of an epoch record that a resumed run reads (the loss, the metrics an epoch is
    chosen by and reported with, the timings and sizes), or ``None``."""
    def number(v):
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)

    if not number(rec.get("loss")):
        return f"its loss {short(rec.get('loss'))} is not a finite number"
    for key, v in rec.items():
        if key.startswith(("train_", "val_", "test_")) or key.endswith(("_s", "_bytes")) or key in ("lr", "bytes_sent"):
            if v is not None and not number(v):
                return f"{key} {short(v)} is not a number"
    select = rec.get("select")
    if select is not None and (not isinstance(select, str) or not select.startswith("val_")):
        return f"select {short(select)} names no validation metric"
    wire = rec.get("wire")  # the --comm-dtype auto guard's report (WirePolicy.resume reads it)
    if wire is not None and (not isinstance(wire, dict) or not all(
            isinstance(r, dict) and isinstance(r.get("wire"), str)
            and (r.get("error") == "inf" or (number(r.get("error")) and r["error"] >= 0)) for r in wire.values())):
        return f"wire {short(wire)} is no report of the wire guard"
    return None


def _plain(v, depth: int = 0) -> bool:
    """A JSON value of an epoch record: ``None``, a string, a finite number, or (a few levels deep: the wire guard's
    per-site errors) a dict with string keys or a list of such values."""
    if v is None or isinstance(v, str) or (isinstance(v, (int, float)) and math.isfinite(v)):
        return True
    if depth >= 4:
        return False
    if isinstance(v, dict):
        return all(isinstance(k, str) and _plain(x, depth + 1) for k, x in v.items())
    return isinstance(v, list) and all(_plain(x, depth + 1) for x in v)


def check_for_run(ckpt: dict, resume: str, *, dims: list[int], info: dict, epochs: int, early_stop: int) -> None:
    """Does the checkpoint fit the model and the graph this run builds, and is there an epoch left to train?"""
    path = checkpoint_file(resume)
    if list(ckpt["dims"]) != list(dims):
        raise GridGnnError(f"--resume {path} holds a model with layer widths {ckpt['dims']}, but this run builds "
                           f"{list(dims)} (features {info['f']}, classes {info['classes']} of the data)")
    g = ckpt["graph"]
    if (g["n"], g["nnz"]) != (info["n"], info["nnz"]):
        raise GridGnnError(f"--resume {path} was trained on a graph with n={g['n']}, nnz={g['nnz']}; the data "
                           f"now have n={info['n']}, nnz={info['nnz']}")
    then, now = g.get("feature_norm"), (info.get("input_pipeline") or {}).get("feature_norm")
    if then is not None and now is not None and then != now:  # (--feature-norm auto resolved on the data)
        raise GridGnnError(f"--resume {path} was trained on features normalized {then!r}; this run normalizes them "
                           f"{now!r} (--feature-norm auto follows the model and the data's convention): give "
                           f"--feature-norm {then}, or leave it out to inherit the checkpoint's")
    then, now = g.get("fingerprint"), info.get("fingerprint")
    if then and now:  # (compared where both runs read the graph whole: not a sharded: dataset)
        differ = [part for part in then if part in now and then[part] != now[part]]
        if differ:
            raise GridGnnError(f"--resume {path} was trained on other data: the graph's {', '.join(differ)} differ "
                               f"from the checkpoint's (n={g['n']} and nnz={g['nnz']} alike); resume on the data it "
                               "was trained on, or train anew")
    check_epochs(ckpt, path, epochs, early_stop)


def check_keep(ckpt: dict, keep: str, path: str) -> None:
    """``--keep best`` needs the best epoch's parameters: a checkpoint written with ``--keep last`` (or before
    ``best_params`` existed) after a better epoch has only its last epoch's."""
    best, last = best_epoch(ckpt["records"]), ckpt["epoch"] - 1
    if keep == "best" and "best_params" not in ckpt and best != last:
        raise GridGnnError(f"--resume {path}: --keep best, but the checkpoint holds the parameters of its last epoch "
                           f"({last}) only, not those of its best validation epoch ({best}); resume with --keep "
                           "last, or retrain")


def check_epochs(ckpt: dict, path: str, epochs: int, early_stop: int) -> None:
    """Is an epoch left to train: below ``--epochs``, and the checkpoint's run not stopped by ``--early-stop``
    (resumed, it would train epochs the uninterrupted run did not)?"""
    if epochs <= ckpt["epoch"]:
        raise GridGnnError(f"--resume {path} is at epoch {ckpt['epoch']} and --epochs is {epochs}: nothing is "
                           f"left to train (give --epochs larger than {ckpt['epoch']})")
    records = ckpt["records"]
    stop = next((k for k in range(len(records)) if stops_early(records[:k + 1], early_stop)), None)
    if stop is not None:  # (at the last epoch, or earlier: a patience given now that the run did not have)
        at = (f"where --early-stop {early_stop} stops a run" if stop == len(records) - 1 else
              f"but --early-stop {early_stop} stopped the run at epoch {stop}")
        raise GridGnnError(f"--resume {path} is at epoch {ckpt['epoch']}, {at} "
                           f"(no better validation since epoch {best_epoch(records[:stop + 1])}): nothing is left to "
                           "train (give a larger --early-stop, or 0 to train on)")


# ---------------------------------------------------------------------------------------------- config
def _resolved(key: str, value, model: str):
    """A trajectory flag's value as the run uses it: ``--feature-norm auto`` is a built-in model's choice (``l2``
    and ``auto`` agree for VA); a model of the user's own is not imported for this (compared as written); a data
    SPEC is compared as parsed."""
    if key == "feature_norm" and value == "auto":

        if model in MODELS:
            return getattr(MODELS[model], "FEATURE_NORM", "none")
    if value is None and key in ("momentum", "lr_gamma"):  # the defaults they stand for
        return 0.9 if key == "momentum" else 0.1
    if key == "data":  # a SPEC as parsed: its parameters in any order, any spacing
        return spec_key(value)
    return value


def _as_used(cfg: TrainConfig, key: str):
    """A field's value as the run uses it: its ``model_`` property (``fanout``: ``model_fanouts``, one size per
    layer) where it has one, its default resolved; else the value."""
    for name in (f"model_{key}", f"model_{key}s"):
        if isinstance(getattr(type(cfg), name, None), property):
            return getattr(cfg, name)
    return getattr(cfg, key)


def resume_base(ckpt: dict, given: dict, resume: str) -> dict:
    r"""The config fields a resumed run takes from the checkpoint (see the module docstring), after checking
    that the flags ``given`` on the command line agree on the trajectory. The caller overlays ``given``."""

    saved = dict(ckpt["config"])
    saved.setdefault("feature_norm", "none")  # written before --feature-norm: its features were used as loaded
    defaults = TrainConfig().to_dict()
    path = checkpoint_file(resume)
    model = given.get("model", saved.get("model", defaults["model"]))
    for key in TRAJECTORY:
        if key == "feature_norm" and "feature_norm" in ckpt.get("graph", {}):
            continue  # the checkpoint records the norm as resolved on its data: check_for_run compares it there
        if key in given and _resolved(key, given[key], model) != _resolved(key, saved.get(key, defaults[key]), model):
            raise GridGnnError(f"{flag(key)} {given[key]!r} differs from the checkpoint's "
                               f"{saved.get(key, defaults[key])!r} ({path}); a resumed run keeps "
                               f"{', '.join(flag(k) for k in TRAJECTORY)} (leave them out to inherit them)")
    schedule = given.get("lr_schedule", saved.get("lr_schedule", "none"))
    spans = schedule == "cosine" or (schedule == "step" and given.get("lr_step", saved.get("lr_step")) is None)
    if spans and "epochs" in given and given["epochs"] != saved.get("epochs", defaults["epochs"]):
        raise GridGnnError(f"--epochs {given['epochs']} differs from the checkpoint's {saved.get('epochs')} ({path}): "
                           f"--lr-schedule {schedule} spreads its rates over the run's epochs, so a resumed run keeps "
                           "them (leave --epochs out; a step schedule with --lr-step N does not depend on them)")
    # compared as the run uses them: link prediction's decoder, negatives, split and embedding width; the sampler,
    # its minibatch sizes and fanouts
    for keys, what in ((LINK_TRAJECTORY if saved.get("task", "node") == "link" else (), "resumed link run"),
                       (SAMPLED_TRAJECTORY, "resumed run")):
        if not any(k in given for k in keys):
            continue
        was = TrainConfig(**{k: v for k, v in saved.items() if k in defaults})
        now = TrainConfig(**{k: v for k, v in {**saved, **given}.items() if k in defaults})
        for key in keys:
            old, new = (_as_used(c, key) for c in (was, now))  # its default resolved
            if key in given and old != new:
                raise GridGnnError(f"{flag(key)} {given[key]!r} differs from the checkpoint's {old!r} ({path}); a "
                                   f"{what} keeps {', '.join(flag(k) for k in keys)} (leave them out to inherit "
                                   "them)")
    base = {k: v for k, v in saved.items() if k in defaults and k not in PER_INVOCATION}

    if is_import_path(saved.get("algo")) and "algo" not in given:  # no code is imported on a file's word
        raise GridGnnError(f"--resume {path} was trained with {saved['algo']}, an algorithm of your own: give --algo "
                           f"{saved['algo']} (or another --algo) on the command line (gridgnn imports code only on "
                           "the command line's word)")
    if "algo" in given and given["algo"] != saved.get("algo"):
        for key in ALGO_LAYOUT:
            base.pop(key, None)
    base["out"] = resume_folder(resume)
    return base


# ---------------------------------------------------------------------------------------------- tensors
class _WholeParameters:
    """The parameters' layout where every rank holds every parameter whole (minibatch training, a serial module):
    the ``param_slice`` of :func:`unshard` and :func:`load_parameters`."""

    @staticmethod
    def param_slice(layer: int, kind: str, shape) -> tuple:
        return tuple(slice(None) for _ in shape)


WHOLE = _WholeParameters()


def _entries(model, plan, dims) -> list[tuple]:
    """``(name, layer, local parameter, full shape, this rank's slices)`` of every parameter of the model
    (its ``parameter_entries()``, sliced by the plan)."""
    return [(name, layer, p, tuple(shape), plan.param_slice(layer, kind, shape))
            for name, layer, p, shape, kind in model.parameter_entries()]


def unshard(comm, entries: list[tuple], groups: list[list[torch.Tensor]], *,
            root: int | None = None) -> list[list[torch.Tensor]] | None:
    r"""Full tensors, bit-exact, from every rank's shards: ``groups[g][i]`` is this rank's part
    ``entries[i][4]`` of tensor ``i`` (full shape ``entries[i][3]``) of group ``g`` (parameters, moments...).
    Collective over all ranks (phase ``checkpoint``); every rank gets the result, or with ``root`` only that rank
    (a reduce instead of an all-reduce: the others return ``None`` and hold no full copy). See the module
    docstring."""
    dev = comm.wire_device()
    world, rank, axes = comm.grid.world_size, comm.grid.global_rank, comm.grid.names
    sizes = [math.prod(e[3]) for e in entries]
    offs = [sum(sizes[:i]) for i in range(len(sizes))]
    total = sum(sizes)
    dtype = groups[0][0].dtype
    itype = _INT_OF_WIDTH[groups[0][0].element_size()]
    owner = torch.full((total,), world, dtype=torch.int32, device=dev)
    for e, off, size in zip(entries, offs, sizes):
        owner[off:off + size].view(e[3])[e[4]] = rank
    bits = torch.zeros((len(groups), total), dtype=itype, device=dev)
    with comm.phase("checkpoint"):
        comm.all_reduce(owner, axes, op="min")
        if bool((owner == world).any()):
            raise RuntimeError("a parameter element is held by no rank (param_slice does not cover it)")
        for g, tensors in enumerate(groups):
            for e, off, size, t in zip(entries, offs, sizes, tensors):
                if t.dtype != dtype:
                    raise RuntimeError(f"checkpoint tensors of mixed dtypes ({t.dtype} and {dtype})")
                mine = owner[off:off + size].view(e[3])[e[4]] == rank
                local = t.detach().to(dev).contiguous().view(itype)
                bits[g, off:off + size].view(e[3])[e[4]] = torch.where(mine, local, torch.zeros_like(local))
        if root is None:
            comm.all_reduce(bits, axes, op="sum")
        else:
            comm.reduce(bits, root, axes)
    if root is not None and rank != root:
        return None
    return [[bits[g, off:off + size].view(e[3]).view(dtype).cpu().clone()
             for e, off, size in zip(entries, offs, sizes)] for g in range(len(groups))]


def optimizer_state(ckpt: dict):
    """The checkpoint's optimizer state, ``{"name": ..., ["step": ...,] key: {...}}`` (one written before
    ``--optimizer``: its ``adam``)."""
    if "optimizer" in ckpt:
        return ckpt["optimizer"]
    old = ckpt.get("adam")
    return {"name": "adam", **old} if isinstance(old, dict) else old


def state_keys_of(config: dict) -> tuple[str, ...]:
    """The optimizer state a checkpoint of a run of ``config`` (a dict) holds per parameter."""
    return state_keys(config.get("optimizer", "adam"), config.get("momentum"))


def save_checkpoint(comm, plan, model, opt, *, path: str, config: dict, dims: list[int], info: dict,
                    epoch: int, records: list[dict], best_epoch: int, replicated: dict | None = None,
                    kept: dict | None = None) -> None:
    r"""Collective: assemble the full parameters and optimizer state (:func:`unshard`); rank 0 writes ``path``
    atomically. ``epoch`` = epochs done. ``replicated``: ``{name: [parameters]}`` every rank holds whole (rank 0's
    are written, with their optimizer state, under ``name``). ``kept``: ``--keep best``'s copy of the best epoch's
    parameters, ``{parameter: its value then}`` (this rank's shard), written as ``best_params``."""
    entries = _entries(model, plan, dims)
    keys = state_keys_of(config)
    states = [opt.state.get(e[2]) or {} for e in entries]
    if any(k not in s for s in states for k in keys):
        raise RuntimeError("a parameter has no optimizer state (checkpoints are written after an update)")
    groups = [[e[2] for e in entries]] + [[s[k] for s in states] for k in keys]
    if kept is not None:
        groups.append([kept[e[2]] for e in entries])
    full = unshard(comm, entries, groups, root=0)
    if full is None:  # rank 0 writes
        return
    params, moments = full[0], dict(zip(keys, full[1:1 + len(keys)]))

    def grouped(tensors, value):
        out = {}
        for e, t in zip(entries, tensors):
            out.setdefault(e[0], []).append(t)
        for name, ps in (replicated or {}).items():
            out[name] = [value(p).detach().cpu().clone() for p in ps]
        return out

    obj = {
        "format": FORMAT, "format_version": FORMAT_VERSION,
        "gridgnn_version": __version__, "torch_version": str(torch.__version__),
        "epoch": int(epoch), "dims": [int(d) for d in dims],
        "config": {**config, "data": absolute_spec(config.get("data"))},  # a resume elsewhere reads this file
        "graph": {"n": int(info["n"]), "nnz": int(info["nnz"]),
                  **({"fingerprint": dict(info["fingerprint"])} if info.get("fingerprint") else {}),
                  **({"feature_norm": info["input_pipeline"]["feature_norm"]} if info.get("input_pipeline") else {})},
        "params": grouped(params, lambda p: p),
        "optimizer": {"name": config.get("optimizer", "adam"),
                      **({"step": states[0]["step"].detach().cpu().clone()} if "step" in states[0] else {}),
                      **{k: grouped(t, lambda p, k=k: opt.state[p][k]) for k, t in moments.items()}},
        "records": [dict(r) for r in records], "best_epoch": int(best_epoch),
    }
    if kept is not None:
        obj["best_params"] = grouped(full[-1], lambda p: kept[p])
    with atomic_write(path) as fh:
        torch.save(obj, fh)


def full_parameters(comm, plan, model, dims: list[int]) -> dict | None:
    r"""Collective: the model's full, unsharded parameters ``{name: [tensor of each layer using it]}`` on rank 0,
    bit-exact (:func:`unshard`, phase ``checkpoint``), on the CPU; ``None`` on the other ranks."""
    entries = _entries(model, plan, dims)
    full = unshard(comm, entries, [[e[2] for e in entries]], root=0)
    if full is None:
        return None
    (params,) = full
    out: dict = {}
    for e, t in zip(entries, params):
        out.setdefault(e[0], []).append(t)
    return out


def _numbered(model, plan, dims: list[int]):
    """``(name, i, parameter, slices)``: the ``i``-th parameter called ``name``, as a checkpoint lists them."""
    seen: dict = {}
    for name, _, p, _, slc in _entries(model, plan, dims):
        seen[name] = seen.get(name, -1) + 1
        yield name, seen[name], p, slc


def _held(model, plan, params: dict, dims: list[int], replicated: dict | None = None):
    """``(parameter, the part of params it holds)`` of every parameter of this rank: the model's, sliced for its
    plan, and ``replicated``'s (``{name: [parameters]}`` held whole, from ``params``' group ``name``)."""
    for name, i, p, slc in _numbered(model, plan, dims):
        yield p, params[name][i][slc]
    for name, ps in (replicated or {}).items():
        for i, p in enumerate(ps):
            yield p, params[name][i]


def load_parameters(model, plan, params: dict, dims: list[int], replicated: dict | None = None) -> None:
    """Copy full parameters ``{name: [tensors]}`` (a checkpoint's or :func:`full_parameters`') into the model,
    sliced for this rank's plan (no collective)."""
    with torch.no_grad():
        for p, part in _held(model, plan, params, dims, replicated):
            p.copy_(part)


def sliced_parameters(model, plan, params: dict, dims: list[int], replicated: dict | None = None) -> dict:
    """Full parameters ``{name: [tensors]}`` (a checkpoint's) as this rank holds them, ``{parameter: tensor}``,
    without touching the model (no collective)."""
    return {p: part.to(p.device).contiguous().clone() for p, part in _held(model, plan, params, dims, replicated)}


def restore(model, opt, plan, ckpt: dict, dims: list[int], replicated: dict | None = None) -> None:
    """Load the checkpoint's full parameters and optimizer state, sliced for this rank's plan (no collective);
    ``replicated``: ``{name: [parameters]}`` held whole, loaded from the checkpoint's group ``name``."""
    load_parameters(model, plan, ckpt["params"], dims, replicated)
    state = optimizer_state(ckpt)
    keys = state_keys_of(ckpt["config"])
    step = {"step": state["step"]} if "step" in state else {}
    fused = bool(opt.defaults.get("fused"))  # (a fused update reads its step counters on the parameters' device)

    def held(p, name, i, slc=()):
        return {**{k: v.to(p.device, torch.float32, copy=True) if fused else v.clone() for k, v in step.items()},
                **{k: state[k][name][i][slc].to(p.device).contiguous().clone() for k in keys}}

    with torch.no_grad():
        for name, ps in (replicated or {}).items():
            for i, p in enumerate(ps):
                opt.state[p] = held(p, name, i)
        for kind, i, p, slc in _numbered(model, plan, dims):
            opt.state[p] = held(p, kind, i, slc)
