r"""``model.pt``: the trained model of a run, written by rank 0 into ``--out`` after the last epoch (full-graph and
minibatch runs alike), read by :func:`gridgnn.load`, ``gridgnn predict`` and ``gridgnn export``.

The file holds plain containers, numbers, strings and tensors only (read with ``torch.load(weights_only=True)``:
loading it runs no code):

====================  ======================================================================================
``format``            ``"gridgnn-model"``, ``format_version`` :data:`FORMAT_VERSION`
``gridgnn_version``   the library that wrote it (and ``torch_version``)
``config``            the run's :class:`~gridgnn.train.config.TrainConfig` as a dict (model, its options, dtype...)
                      and ``config["input_pipeline"]``: what training did to the data before the first layer
                      (:mod:`gridgnn.graph.pipeline`; ``predict`` and the export apply it). Optional: a file
                      written before it existed has none and keeps the old behaviour (its ``feature_norm``)
``dims``              layer widths ``[f_0, ..., f_L]`` (input features, hidden widths, classes)
``epoch``             1 + the epoch whose parameters ``params`` holds: the best validation epoch's under
                      ``--keep best`` (the default), the last one's under ``--keep last``
``params``            ``{name: [full tensor of each layer using it]}``: unsharded, bit for bit the ranks' values
====================  ======================================================================================

Unlike ``checkpoint.pt`` (``--checkpoint-every``) it holds no optimizer state and no epoch records: it is what
inference needs, written for every run with ``--out``.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from .._version import __version__
from ..errors import GridGnnError
from ..graph.safe_io import DataFileError
from ..graph.saved import read_document
from ..graph.files import atomic_write

MODEL_FILE = "model.pt"
FORMAT = "gridgnn-model"
FORMAT_VERSION = 1


@dataclass
class TrainOutput:
    """What a training worker returns on rank 0 when asked to keep the model: the summary and the trained
    parameters (full, on the CPU)."""

    summary: dict
    dims: list
    params: dict


def write_model_file(path: str, config: dict, dims: list[int], params: dict, epoch: int, *,
                     input_pipeline: dict | None = None) -> None:
    """Write ``model.pt`` atomically (rank 0; ``params`` as :func:`~gridgnn.train.checkpoint.full_parameters`;
    ``input_pipeline``: the run's record, kept as ``config["input_pipeline"]``)."""
    config = dict(config)
    if input_pipeline is not None:
        config["input_pipeline"] = dict(input_pipeline)
    obj = {"format": FORMAT, "format_version": FORMAT_VERSION, "gridgnn_version": __version__,
           "torch_version": str(torch.__version__), "config": config, "dims": [int(d) for d in dims],
           "epoch": int(epoch), "params": {k: [t.detach().cpu() for t in v] for k, v in params.items()}}
    with atomic_write(path) as fh:
        torch.save(obj, fh)


def model_file(run: str) -> str:
    """``RUN/model.pt`` for a run folder, or ``run`` itself when it names a file (a regular file)."""
    from ..graph.safe_io import DataFileError, regular_file

    if not isinstance(run, (str, os.PathLike)) or not str(run):
        raise GridGnnError(f"a trained model is a run folder (--out of gridgnn train) or its {MODEL_FILE}, "
                           f"got {run!r}")
    run = os.fspath(run)
    path = os.path.join(run, MODEL_FILE) if os.path.isdir(run) else run
    if not os.path.lexists(path):
        if os.path.isdir(run):
            stopped = _interrupted(run)
            if stopped:
                raise GridGnnError(f"{run} holds no {MODEL_FILE}: its run was {stopped} (summary.json); resume it "
                                   "from its checkpoint.pt with gridgnn train --resume, or train it again")
            raise GridGnnError(f"{run} holds no {MODEL_FILE}: a run writes it after its last epoch when it has "
                               "--out (older runs did not; a checkpoint.pt there is not a model file)")
        raise GridGnnError(f"{run}: no such run folder or model file")
    try:
        regular_file(path, "a model file")
    except DataFileError as exc:
        raise GridGnnError(str(exc)) from None
    return path


def _interrupted(folder: str) -> str:
    """``"interrupted by SIGINT after 3 epochs"`` where ``folder``'s ``summary.json`` marks an interrupted run
    (:func:`~gridgnn.train.summary.interrupted_summary`), else ``""`` (also where it is missing or unreadable)."""
    path = os.path.join(folder, "summary.json")
    try:
        summary = read_document(path, "a run summary", kind="json") if os.path.lexists(path) else None
    except DataFileError:
        return ""
    if not isinstance(summary, dict) or not isinstance(summary.get("interrupted"), str):
        return ""
    return f"interrupted by {summary['interrupted']} after {summary.get('epochs_trained')} epochs"


def read_model_file(run: str) -> dict:
    """Load and check :func:`model_file` ``(run)``: a :class:`GridGnnError` with one line for anything that is
    not a complete model file of this format (another file, a damaged one, inconsistent shapes)."""
    from .checkpoint import check_parameters, load_plain

    path = model_file(run)
    obj = load_plain(path, f"{path} is not a readable gridgnn model file")
    if not isinstance(obj, dict) or obj.get("format") != FORMAT:
        raise GridGnnError(f"{path} is not a gridgnn model file")
    if obj.get("format_version") != FORMAT_VERSION:
        raise GridGnnError(f"{path} has model format version {obj.get('format_version')!r}; this gridgnn reads "
                           f"version {FORMAT_VERSION}")
    where = f"model file {path}"
    if not isinstance(obj.get("config"), dict):
        raise GridGnnError(f"{where} is damaged: no config")
    epoch = obj.get("epoch")
    if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
        raise GridGnnError(f"{where} is damaged: epoch {epoch!r} is not a count")
    check_parameters(obj.get("params"), obj["config"], obj.get("dims"), where)
    if "input_pipeline" in obj["config"]:  # absent in files written before the record: the old behaviour
        from ..graph.pipeline import check_record

        check_record(obj["config"]["input_pipeline"], where)
    return obj
