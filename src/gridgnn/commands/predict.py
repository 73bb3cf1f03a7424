r"""``gridgnn predict`` and ``gridgnn export``: use the trained model of a run folder (its ``model.pt``).

``predict`` runs full-graph inference of every vertex of any graph whose features have the model's input width
(inductive: a new or larger graph), on one process or distributed on any algorithm, and writes the logits (or the
class ids) in the graph's vertex order as ``.npy``. ``export`` writes the model as a PyG module
(``--to pyg``: a :class:`~gridgnn.nn.pyg_export.PygExport`, the run's input pipeline before a
``torch_geometric.nn.Sequential`` of the model's PyG layers: ``GCNConv``, ``GATConv``, ``AGNNConv``, ``SAGEConv``,
``GINEConv``, ``GATv2Conv`` or ``RGCNConv``) or its plain ``state_dict`` (``--to state-dict``)."""
from __future__ import annotations

import os

from ..train.config import add_flags
from ..train.outputs import add_overwrite_flag

#: The config fields that lay an inference out (``--nproc`` apart: the launcher's by default).
PREDICT_LAYOUT = ("algo", "replication", "grid", "partition", "blocked_aggregation", "device", "timeout_s")


def _add_model_arguments(p) -> None:
    p.add_argument("--run", required=True, metavar="DIR",
                   help="a run folder (gridgnn train --out DIR) or its model.pt")
    p.add_argument("--model", metavar="package.module:Class",
                   help="a model of your own, by import path (gridgnn imports code only when you name it)")


def add_predict_arguments(p) -> None:
    _add_model_arguments(p)
    p.add_argument("--data", metavar="SPEC",
                   help="the graph to predict (any SPEC of gridgnn train; features of the model's input width; "
                        "labels not needed; default: the embedded synthetic SBM)")
    from ..parallel import ALGOS

    # the layout of the inference: the config fields of gridgnn train, generated from their declarations
    add_flags(p, ("nproc",), sections=False, helps={"nproc": "processes (default 1, or the launcher's)"})
    add_flags(p, PREDICT_LAYOUT, given_only=False, sections=False,
              helps={"algo": f"{', '.join(ALGOS)}: every one gives the same logits"})
    p.add_argument("--classes", action="store_true", help="write the predicted class ids (int64), not the logits")
    p.add_argument("--pairs", metavar="PAIRS.npy",
                   help="a link-prediction model (--task link): score these vertex pairs (int [2, m] or [m, 2]; 2 x 2 "
                        "is [2, m]; ids in the graph's order) and write one score per pair, the logit of its being an edge")
    p.add_argument("--out", required=True, metavar="FILE",
                   help="FILE.npy: one row per vertex of the graph, in its order (with ?relabel=1 also "
                        "FILE.node_ids.npy, the file's id of each row)")
    add_overwrite_flag(p)


def _npy(path: str) -> str:
    """The ``.npy`` file of ``--out FILE`` (a folder's name is refused: ``DIR/`` would write a hidden ``DIR/.npy``)."""
    from ..errors import GridGnnError

    if not os.path.basename(path) or os.path.basename(path) in (".", "..", ".npy"):
        raise GridGnnError(f"--out {path!r} names a folder; give a file name (FILE or FILE.npy)")
    return path if path.endswith(".npy") else path + ".npy"


def run_predict_command(args) -> int:
    import numpy as np

    from ..train.launching import TrainingFailed
    from ..graph.files import atomic_write, make_parent
    from ..train.outputs import check_new_files
    from ..train.trained import load

    from ..errors import GridGnnError

    out = _npy(args.out)
    ids_file = out[:-len(".npy")] + ".node_ids.npy"
    check_new_files([out, ids_file], overwrite=args.overwrite)  # before any work
    model = load(args.run, model=args.model)
    pairs = None
    if args.classes and model.config.get("task", "node") == "link":
        raise GridGnnError("--classes picks a class per vertex; a link-prediction model's outputs are embeddings "
                           "(score pairs with --pairs)")
    if args.pairs is not None:
        if args.classes:
            raise GridGnnError("--classes applies to node classification; --pairs writes one score per pair")
        if model.config.get("task", "node") != "link":
            raise GridGnnError(f"--pairs scores pairs with a link-prediction model; {args.run} classifies vertices")
        from ..graph.saved import read_pairs

        pairs = read_pairs(args.pairs)  # the checked reader, before any work
    try:
        result = model._predict(args.data, algo=args.algo, nproc=getattr(args, "nproc", None), grid=args.grid,
                                replication=args.replication, partition=args.partition,
                                blocked_aggregation=args.blocked_aggregation, device=args.device,
                                timeout_s=args.timeout_s)
    except TrainingFailed as exc:  # the ranks' lines are printed: the exit status of gridgnn train's (1, 2, 129, 130, 143)
        return exc.exit_status
    if result is None:  # another rank of a torchrun/srun job: rank 0 writes
        return 0
    logits, original_ids = result
    if os.path.lexists(ids_file):  # (--overwrite: the ids of a previous run's rows would pair with these, were the
        os.remove(ids_file)  # new ids not written after them: a full disk, a kill between the two writes)
    if pairs is not None:
        from ..train.trained import pair_scores

        scores = pair_scores(logits, pairs, model.decoder)
        make_parent(out)
        with atomic_write(out) as fh:
            np.save(fh, scores)
        print(f"scored {scores.shape[0]} pairs with {args.algo}: {out}", flush=True)
        return 0
    values = logits.argmax(axis=1).astype(np.int64) if args.classes else logits
    make_parent(out)
    with atomic_write(out) as fh:
        np.save(fh, values)
    if original_ids is not None:
        with atomic_write(ids_file) as fh:
            np.save(fh, np.asarray(original_ids, dtype=np.int64))
    what = "class ids" if args.classes else f"logits ({logits.shape[1]} classes, {logits.dtype})"
    print(f"predicted {logits.shape[0]} vertices with {args.algo}: {what} in {out}", flush=True)
    return 0


EXPORT_FORMATS = ("pyg", "state-dict")


def add_export_arguments(p) -> None:
    _add_model_arguments(p)
    p.add_argument("--to", required=True, choices=EXPORT_FORMATS,
                   help="pyg: the PyG layers with the trained weights behind the run's input pipeline (load with "
                        "torch.load(FILE, weights_only=False) where gridgnn is importable; its .net is a plain "
                        "torch_geometric.nn.Sequential); state-dict: the model's parameters "
                        "as {name: tensor} (torch.load(FILE, weights_only=True))")
    p.add_argument("--out", required=True, metavar="FILE", help="the file to write")
    add_overwrite_flag(p)


def run_export_command(args) -> int:
    import torch

    from ..graph.files import atomic_write, make_parent
    from ..train.outputs import check_new_files
    from ..train.trained import load

    check_new_files([args.out], overwrite=args.overwrite)
    model = load(args.run, model=args.model)
    obj = model.to_pyg() if args.to == "pyg" else {k: v.detach().clone() for k, v in model.state_dict().items()}
    make_parent(args.out)
    with atomic_write(args.out) as fh:
        torch.save(obj, fh)
    print(f"exported --model {model.config.get('model')} ({args.to}) to {args.out}", flush=True)
    return 0
