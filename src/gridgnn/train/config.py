"""Training configuration: a kw-only dataclass that the CLI maps onto 1:1."""
from __future__ import annotations

import inspect

import operator
import os
from dataclasses import asdict, dataclass, field, fields, make_dataclass

import torch

from ..errors import GridGnnError
from ..graph.spec import sharded_dir
from ..ops.device_paths import host_takes_device_paths
from ..nn import MODELS as _MODEL_REGISTRY  # noqa: E402
from ..nn.base import TRAINER_OPTIONS, Option, declared_options, model_options, resolve_model  # noqa: E402
from ..nn.gat import MAX_HEADS  # noqa: E402
from ..parallel.registry import ALGORITHMS, one_process, overlap_algorithms  # noqa: E402
from ..partition import BUILTIN_PARTITIONS  # noqa: E402
from .outputs import CHECKPOINT, TensorBoardLog, check_out_dir, check_tensorboard, is_our_events

#: the built-in models (``--model`` also takes any registered name or ``package.module:Class``)
MODELS = BUILTIN_MODELS = tuple(_MODEL_REGISTRY)

#: How a trainer option is checked for a model that names it without declaring an :class:`~gridgnn.nn.Option`
#: (``OPTIONS = ("heads",)``, the older form)
UNDECLARED_OPTIONS = {"heads": Option(int, None, low=1, high=MAX_HEADS),
                      "attn_dropout": Option(float, None, low=0.0, high=1.0, high_open=True),
                      "aggr": Option(str, None),
                      "bases": Option(int, None, low=0, high=4096),
                      "layer_order": Option(str, None)}


def samplable_models() -> list[str]:
    """The registered models that train on sampled minibatches (``trains_on_samples``)."""
    return [name for name, cls in _MODEL_REGISTRY.items() if getattr(cls, "trains_on_samples", False)]


def flag(name: str) -> str:
    """The command-line flag of a config field (``weight_decay`` → ``--weight-decay``)."""
    return "--timeout" if name == "timeout_s" else "--" + name.replace("_", "-")


# Upper bounds of the integer flags: far above any sensible run, low enough that the values stay plain
# integers everywhere (NumPy, torch, dropout keys); whether a model of that size fits is the memory guard's call.
MAX_LAYERS = 1024
MAX_HIDDEN = 2**20
MAX_EPOCHS = 10**8
#: --seed must fit torch.Generator.manual_seed and the int64 seeds of NumPy and SciPy.
SEED_LIMIT = 2**63


def checked_seed(seed) -> int:
    """``--seed`` of a command outside ``train`` (``partition``, ``shard``), bounded as training's is."""
    try:
        value = None if isinstance(seed, bool) else operator.index(seed)
    except TypeError:
        value = None
    if value is None or not 0 <= value < SEED_LIMIT:
        raise GridGnnError(f"--seed must be in [0, {SEED_LIMIT - 1}], got {seed}")
    return value
#: --timeout above 30 days is a typo, and datetime.timedelta overflows near 1e14 s.
MAX_TIMEOUT_S = 30 * 86400.0
#: --lr and --weight-decay: Adam's step size lr / (1 - beta1) must stay a float32 (above 3.4e38 torch refuses
#: it mid-step); 1e6 is already far outside any useful range.
MAX_LR = 1e6
#: ``--bulk``: minibatches a rank samples in one go (MLSys'24 samples tens to hundreds; the schedule loops over them)
MAX_BULK = 4096
#: ``--fanout`` / ``--eval-fanout``: neighbours sampled per vertex (or per layer, LADIES); larger: use -1 (every one)
MAX_FANOUT = 1 << 20
MAX_WEIGHT_DECAY = 1e6
#: --nproc, --replication: a million processes (the grid factorizations loop over the divisors of P)
MAX_NPROC = 1 << 20
#: vertex counts (--batch-size, --eval-batch-size, --blocked-aggregation rows): int32 row indices
MAX_ROWS = (1 << 31) - 1
#: ``--negatives``: negative pairs per positive (OGB's ogbl-citation2 ranks each positive among 1000)
MAX_NEGATIVES = 1 << 16
#: the default ``--link-split`` (PyG's link_pred.py example: 5 % validation, 10 % test edges)
DEFAULT_LINK_SPLIT = (0.85, 0.05, 0.1)


#: The sections of a training config: the groups of ``gridgnn train --help`` and of ``docs/python-api.md``.
SECTIONS = {"data": "data and model", "task": "task: node classification or link prediction (--task)",
            "parallel": "processes and layout", "optimizer": "optimization",
            "sampling": "minibatch sampling (--sampler)", "run": "run, outputs and checkpoints"}


#: What a field is to the run, which every rule about inheriting a config reads (a resumed run from its checkpoint,
#: a rerun from a summary, inference from a model file): each field declares one (:func:`opt`).
ROLES = {
    "model": "shapes the model: a resumed run keeps it; inference takes it from the trained model",
    "trajectory": "changes what training computes: a resumed run keeps it",
    "link": "link prediction's trajectory, compared as the run uses it (its default resolved): a resumed link run "
            "keeps it",
    "sampling": "minibatch training's trajectory (what is sampled), compared as the run uses it (its default "
                "resolved): a resumed run keeps it",
    "layout": "lays the run out on its processes and says how they communicate: a resumed run takes it from the "
              "checkpoint unless --algo changes",
    "run": "the run's algorithm, length, sampling and outputs: a resumed run takes it from the checkpoint unless "
           "given",
    "display": "how a run shows its progress: a resumed run takes it from the checkpoint, a rerun from a summary "
               "does not",
    "invocation": "where and how one invocation runs: never taken from a checkpoint or a summary",
}


def opt(default, section: str, *, role: str, help, metavar: str | None = None, choices: tuple = (), low=None,
        high=None, low_open: bool = False, high_open: bool = False, unit: str = "", per_task: dict | None = None,
        task_default_with: str | None = None, infer: bool | None = None):
    """A config field with what the command line and the checks need: its section (:data:`SECTIONS`), its
    ``role`` (:data:`ROLES`), its help (text, or a function of the registry), for a number its range (checked by
    :meth:`TrainConfig.validate`, shown in ``--help``), and ``per_task``: its default for a ``--task`` other than
    ``node`` (:func:`task_defaults`), taken only where the field ``task_default_with`` takes its task default too
    (the two belong together). ``infer``: inference of a trained model takes the field from its config (default:
    the fields of role ``model``)."""
    if role not in ROLES:
        raise ValueError(f"a config field's role is one of {', '.join(ROLES)}, not {role!r}")
    return field(default=default, metadata={"section": section, "role": role, "help": help, "metavar": metavar,
                                            "choices": choices, "range": (low, high, low_open, high_open, unit),
                                            "per_task": dict(per_task or {}), "task_default_with": task_default_with,
                                            "infer": role == "model" if infer is None else infer})


def python_value(value):
    """``value``, or the Python values a NumPy array or scalar (or a tensor) holds (``np.array([5, 5])`` → ``[5,
    5]``): what a config field compares and checks."""
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        return value.tolist()
    return value


def fields_of_role(*roles: str) -> tuple[str, ...]:
    """The config fields of the roles ``roles``, in declaration order."""
    return tuple(f.name for f in fields(TrainConfig) if f.metadata["role"] in roles)


def add_flags(parser, names=None, *, given_only: bool = True, helps: dict | None = None, sections: bool = True):
    """One flag per config field of ``names`` (default: every field), generated from its declaration: the flag
    (``weight_decay`` → ``--weight-decay``), its help with its default, task defaults and range, its choices or
    metavar, its type; grouped by section (``sections``). ``given_only``: a flag left out is absent from the
    namespace (the command knows what was given; the defaults live in :class:`TrainConfig`), else it holds the
    field's default. ``helps``: ``{field: text}`` where a command reads a field its own way. Every command that
    takes config fields (``train``, ``simulate``, ``plan``, ``predict``) builds them here."""
    import argparse
    from dataclasses import MISSING

    wanted = None if names is None else set(names)
    chosen = [f for f in fields(TrainConfig) if wanted is None or f.name in wanted]
    if wanted is not None and len(chosen) != len(wanted):
        raise ValueError(f"no config fields {sorted(wanted - {f.name for f in chosen})}")
    groups = {}
    for f in chosen:
        meta = f.metadata
        own = (helps or {}).get(f.name)  # a command's own words: its default said there, the range added
        text = own or (meta["help"]() if callable(meta["help"]) else meta["help"])
        kw: dict = {"default": argparse.SUPPRESS if given_only else f.default}
        if f.type in ("bool", bool):  # --X and --no-X: a resumed run can turn off what its checkpoint turned on
            kw["action"] = argparse.BooleanOptionalAction
        else:
            kind = str(f.type)
            if "int" in kind:
                kw["type"] = int
            elif "float" in kind:
                kw["type"] = float
            if meta.get("choices"):
                kw["choices"] = meta["choices"]
            elif meta.get("metavar"):
                kw["metavar"] = meta["metavar"]
            notes = []
            if f.default is not MISSING and f.default is not None and not own:
                notes.append(f"default {f.default:g}" if isinstance(f.default, float) else f"default {f.default}")
            if task_default_note(f):
                notes.append(task_default_note(f))
            spec = field_range(f)
            if spec is not None:
                notes.append(spec.bound_text() + (f" {spec.unit}" if spec.unit else ""))
            if notes:
                text = f"{text} ({'; '.join(notes)})"
        where = parser
        if sections:
            if meta["section"] not in groups:
                groups[meta["section"]] = parser.add_argument_group(SECTIONS[meta["section"]])
            where = groups[meta["section"]]
        where.add_argument(flag(f.name), dest=f.name, help=text, **kw)


def given_flags(args, names) -> dict:
    """``{field: value}`` of the config flags of ``names`` given on a command line parsed with :func:`add_flags`."""
    return {k: getattr(args, k) for k in names if hasattr(args, k)}


def command_flags(options: dict) -> list[str]:
    """The command-line words of config fields ``{field: value}``: ``--flag value`` (a switch alone when on; a
    field of ``None`` or off is left out), in the dict's order."""
    words = []
    for key, value in options.items():
        if value is None or value is False:
            continue
        words += [flag(key)] if value is True else [flag(key), str(value)]
    return words


def inference_fields() -> tuple[str, ...]:
    """The config fields inference of a trained model takes from its config (what builds the model, and the seed
    that keys a random vertex order as in training)."""
    return tuple(f.name for f in fields(TrainConfig) if f.metadata["infer"])


def task_defaults(task: str, given=()) -> dict:
    """``{field: default}`` where ``--task task`` has a default of its own (``link``: PyG's ``link_pred.py`` setup —
    128 → 64, no dropout, no weight decay, 100 epochs), for the fields left out of ``given`` (a default that goes
    with another field's, ``task_default_with``, only where that one is left out too): what
    :func:`~gridgnn.train.invocation.config_from_flags` applies."""
    out = {}
    for f in fields(TrainConfig):
        with_ = f.metadata.get("task_default_with")
        if task in f.metadata.get("per_task", {}) and f.name not in given and (with_ is None or with_ not in given):
            out[f.name] = f.metadata["per_task"][task]
    return out


def task_default_note(f) -> str:
    """The ``--help`` words of a field's task defaults (``--task link: 0``)."""
    per = f.metadata.get("per_task", {})
    return "; ".join(f"--task {t}: {v:g}" if isinstance(v, float) else f"--task {t}: {v}" for t, v in per.items())


def _help_data() -> str:
    return ("synthetic:sbm?n=&classes=&avg_degree=&features= | synthetic:rmat?scale=&edge_factor= | planetoid:DIR | "
            "ogb:DIR | edgelist:FILE | mtx:FILE | npz:FILE | sharded:DIR (default: the embedded synthetic SBM)")


def _help_model() -> str:
    return f"{' | '.join(_MODEL_REGISTRY)}, a registered name, or a model of your own by import path, " \
           "package.module:Class"


def _help_layers() -> str:
    own = ", ".join(f"{m} {c.DEFAULT_LAYERS}" for m, c in _MODEL_REGISTRY.items()
                    if getattr(c, "DEFAULT_LAYERS", 2) != 2)
    return "layers of the model" + (f" (a model's own default when not given: {own})" if own else "")


def _help_algo() -> str:
    from ..parallel import ALGOS

    return (f"{', '.join(ALGOS)}, auto (the fastest configuration gridgnn plan predicts; it also picks --grid, "
            "--replication and --partition), or an algorithm of your own by import path, package.module:NAME "
            "(docs/algorithms.md)")


def _help_sampler() -> str:
    return (f"minibatch training with bulk matrix sampling (MLSys'24) on a P/c x c grid (--nproc, --replication) of "
            f"--model {', '.join(samplable_models())}; without it: full-graph training")


def _model_option_help(name: str) -> str:
    """A model option's help, from the :class:`~gridgnn.nn.Option` of each registered model that declares it."""
    parts = []
    for model, cls in _MODEL_REGISTRY.items():
        spec = declared_options(cls).get(name)
        if spec is not None:
            default = "" if spec.default is None else f"default {spec.default}; "
            parts.append(f"{model}: {spec.help} ({default}{spec.range_text()})")
    return "; ".join(parts) + " — and models of your own that take it"


def field_range(f) -> Option | None:
    """The :class:`~gridgnn.nn.Option` that checks a numeric config field's range (``None``: no range)."""
    low, high, low_open, high_open, unit = f.metadata.get("range", (None,) * 4 + ("",))
    if low is None and high is None:
        return None
    kind = float if "float" in str(f.type) else int
    return Option(kind, f.default, low=low, high=high, low_open=low_open, high_open=high_open, unit=unit)


@dataclass(kw_only=True)
class TrainConfig:
    r"""One training run. Every field is a ``gridgnn train`` flag (``--weight-decay`` → ``weight_decay``,
    ``--timeout`` → ``timeout_s``) and a key of a ``--config`` TOML file; pass it to :func:`gridgnn.train` or
    :class:`gridgnn.Trainer`. The fields are declared once, with their section, help and range (:func:`opt`): the
    command line's flags and ``--help``, the range checks of :meth:`validate` and the field list below are generated
    from that declaration.
    """

    # ---- data and model
    data: str | None = opt(None, "data", role="trajectory", metavar="SPEC", help=_help_data)
    model: str = opt("gcn", "data", role="model", metavar="NAME", help=_help_model)
    heads: int | None = opt(None, "data", role="model", metavar="K", help=lambda: _model_option_help("heads"))
    attn_dropout: float | None = opt(None, "data", role="model", metavar="P", help=lambda: _model_option_help("attn_dropout"))
    aggr: str | None = opt(None, "data", role="model", metavar="A", help=lambda: _model_option_help("aggr"))
    bases: int | None = opt(None, "data", role="model", metavar="B", help=lambda: _model_option_help("bases"))
    # (the same parameters in either order, the results equal up to rounding: a resumed run may change it;
    # inference takes it from the trained model, so that predict repeats the run's --save-logits bit for bit)
    layer_order: str | None = opt(None, "data", role="run", infer=True, metavar="ORDER",
                                  help=lambda: _model_option_help("layer_order"))
    edge_dim: int | None = opt(None, "data", role="model", metavar="D", low=0, high=MAX_HIDDEN,
                               help="width of the edge features a model that reads them (gine, gatv2) is built for "
                                    "(default: the data's; a graph whose features differ is refused)")
    relations: int | None = opt(None, "data", role="model", metavar="R", low=1, high=4096,
                                help="relation types a model that reads them (rgcn) is built for (default: the "
                                     "data's; a graph with another count is refused)")
    layers: int = opt(2, "data", role="model", metavar="L", low=1, high=MAX_LAYERS, help=_help_layers)
    hidden: int = opt(16, "data", role="model", metavar="H", low=1, high=MAX_HIDDEN, per_task={"link": 128},
                      help="width of the hidden layers")
    feature_norm: str = opt("auto", "data", role="model", choices=("auto", "none", "row", "l2"),
                            help="input features as loaded (none), each row divided by its sum (row) or scaled to unit "
                                 "L2 norm (l2); auto: the model's choice (va: l2), else the data's convention "
                                 "(planetoid: row), else none. The model records it; predict and export apply it")
    # ---- task
    task: str = opt("node", "task", role="trajectory", choices=("node", "link"),
                    help="node classification, or link prediction: the edges split into training, validation and "
                         "test positives (PyG RandomLinkSplit semantics), keyed negative pairs, the encoder's "
                         "vertex embeddings scored by their dot product, binary cross-entropy; AUC, Hits@K, MRR")
    link_split: str | None = opt(None, "task", role="link", metavar="TRAIN,VAL,TEST",
                                 help="--task link: the fractions of the edges (an undirected edge counted once) for "
                                      "training, validation and test; they add up to 1 (default 0.85,0.05,0.1)")
    negatives: int | None = opt(None, "task", role="link", metavar="K", low=1, high=MAX_NEGATIVES,
                                help="--task link: negative pairs per positive, drawn afresh each epoch for training "
                                     "and once for validation and test (default 1)")
    hits_k: int | None = opt(None, "task", role="link", metavar="K", low=1, high=MAX_ROWS,
                             help="--task link: the K of Hits@K (default 50, OGB's ogbl-collab; refused when given "
                                  "past a split's negatives, where it is 1.0 whatever the scores; the default's "
                                  "is then reported as none)")
    decoder: str | None = opt(None, "task", role="link", choices=("dot", "mlp"),
                              help="--task link: how a pair is scored from its endpoints' embeddings: dot (their dot "
                                   "product, default) or mlp (OGB's LinkPredictor: z_u * z_v through Linear, ReLU, "
                                   "Linear)")
    embedding_dim: int | None = opt(None, "task", role="link", metavar="D", low=1, high=MAX_HIDDEN, per_task={"link": 64},
                                    task_default_with="hidden",
                                    help="--task link: width of the vertex embeddings the decoder scores (the last "
                                         "layer's output; default --hidden when --hidden is given)")
    # ---- parallel
    algo: str = opt("serial", "parallel", role="run", metavar="NAME", help=_help_algo)
    profile: str | None = opt(None, "parallel", role="run", metavar="FILE|PRESET",
                              help="--algo auto: the machine profile it plans with (gridgnn calibrate --out FILE, or "
                                   "local-cpu, perlmutter-a100, frontier-mi250x; default local-cpu)")
    nproc: int = opt(1, "parallel", role="layout", metavar="P", low=1, high=MAX_NPROC,
                     help="processes to spawn (under torchrun/srun: the launcher's world size)")
    replication: int = opt(1, "parallel", role="layout", metavar="C", low=1, high=MAX_NPROC,
                           help="c of the 1.5D algorithms (divides P)")
    grid: str | None = opt(None, "parallel", role="layout", metavar="X,Y[,Z]",
                           help="process grid of 2d (PR,PC), 3d (X,Y,Z: rows, columns, fiber) and plexus (X,Y,Z); "
                                "default: the most square / cubic factorization of P")
    blocked_aggregation: int = opt(0, "parallel", role="layout", metavar="ROWS", low=0, high=MAX_ROWS,
                                   help="plexus: SpMM and its all-reduce in row blocks of ROWS rows (Plexus §5.2); "
                                        "0 = off")
    partition: str = opt("random", "parallel", role="layout", metavar="METHOD|FILE",
                         help="1d/1.5d: random, identity, metis, metis-vol, hypergraph, balanced, or a partition "
                              "FILE; 2d/3d/plexus: random (one permutation), identity, double-perm, balanced-perm")
    device: str = opt("auto", "parallel", role="invocation", choices=("auto", "cpu", "cuda"), help="where the ranks compute")
    comm_dtype: str | None = opt(None, "parallel", role="layout", choices=("float64", "float32", "bfloat16", "float16", "auto"),
                                 help="the type node rows and partial sums cross the wire in (sums still add in "
                                      "--dtype); auto: bfloat16, guarded (--comm-check-every, --comm-tolerance); "
                                      "weights and their gradients never narrowed (default: --dtype)")
    comm_check_every: int | None = opt(None, "parallel", role="layout", metavar="K", low=1, high=MAX_EPOCHS,
                                       help="--comm-dtype auto: compare the narrow and the exact wire every K steps "
                                            "(default 50)")
    comm_tolerance: float | None = opt(None, "parallel", role="layout", metavar="TOL", low=0.0, low_open=True, high=1.0,
                                       help="--comm-dtype auto: the largest relative error a collective may show "
                                            "and stay narrow (default 0.01)")
    grad_dtype: str | None = opt(None, "parallel", role="layout", choices=("float64", "float32", "bfloat16"),
                                 help="the type the weights' gradients cross the wire in, summed in --dtype (an "
                                      "all-to-all of pieces, a local sum, an all-gather); not guarded: the update "
                                      "then differs from serial training (default: --dtype)")
    overlap: bool = opt(False, "parallel", role="layout", help="1d/1.5d/2d/3d: start each stage's (panel's) broadcasts while the "
                                                "previous one computes, and finish its push during the next (two "
                                                "remote blocks held at a time); -sa: the halo travels while the "
                                                "block's own rows compute; the gradient buckets are summed during "
                                                "the backward (bit for bit the same result)")
    cuda_graph: bool = opt(False, "parallel", role="invocation",
                           help="--algo serial on a GPU, full-graph training: record the training step (forward, "
                                "loss, backward) and the evaluation once as CUDA graphs after two eager epochs and "
                                "replay them every epoch — their launches become one each; the dropout masks, the "
                                "link negatives, the optimizer and the results are those of the eager run")
    timeout_s: float = opt(600.0, "parallel", role="invocation", metavar="SECONDS", low=0.0, low_open=True, high=MAX_TIMEOUT_S,
                           unit="seconds", help="seconds a collective may wait before the job is ended")
    # ---- optimizer
    epochs: int = opt(200, "optimizer", role="run", metavar="N", low=1, high=MAX_EPOCHS, per_task={"link": 100},
                      help="epochs of training")
    lr: float = opt(0.01, "optimizer", role="trajectory", metavar="LR", low=0.0, low_open=True, high=MAX_LR,
                    help="learning rate (the largest of the schedule)")
    weight_decay: float = opt(5e-4, "optimizer", role="trajectory", metavar="WD", low=0.0, high=MAX_WEIGHT_DECAY, per_task={"link": 0.0},
                              help="weight decay (adam and sgd: an L2 term in the gradient; adamw: decoupled)")
    optimizer: str = opt("adam", "optimizer", role="trajectory", choices=("adam", "adamw", "sgd"),
                         help="the update of every parameter, elementwise (the same on every algorithm and P)")
    momentum: float | None = opt(None, "optimizer", role="trajectory", metavar="M", low=0.0, high=1.0, high_open=True,
                                 help="--optimizer sgd: momentum (default 0.9; 0: plain SGD)")
    lr_schedule: str = opt("none", "optimizer", role="trajectory", choices=("none", "cosine", "step"),
                           help="the learning rate per epoch after the warm-up: constant, a cosine over the epochs "
                                "left (from --lr towards 0), or times --lr-gamma every --lr-step epochs; cosine "
                                "and a step of default length span the run's --epochs, which a resumed run keeps")
    warmup: int = opt(0, "optimizer", role="trajectory", metavar="W", low=0, high=MAX_EPOCHS,
                      help="epochs of linear warm-up to --lr (epoch e < W trains at lr·(e+1)/W)")
    lr_step: int | None = opt(None, "optimizer", role="trajectory", metavar="N", low=1, high=MAX_EPOCHS,
                              help="--lr-schedule step: epochs per step (default a third of the epochs after the "
                                   "warm-up)")
    lr_gamma: float | None = opt(None, "optimizer", role="trajectory", metavar="G", low=0.0, low_open=True, high=1.0,
                                 help="--lr-schedule step: the factor of each step (default 0.1)")
    dropout: float = opt(0.5, "optimizer", role="trajectory", metavar="P", low=0.0, high=1.0, high_open=True, per_task={"link": 0.0},
                         help="dropout on every layer's input (keyed by node and feature: the same on every P)")
    seed: int = opt(0, "optimizer", role="trajectory", infer=True, metavar="S", low=0, high=SEED_LIMIT - 1, help="initial weights, dropout, splits")
    dtype: str = opt("float32", "optimizer", role="model", choices=("float32", "float64"), help="parameters and node tensors")
    early_stop: int = opt(0, "optimizer", role="run", metavar="PATIENCE", low=0, high=MAX_EPOCHS,
                          help="stop when the validation accuracy has not improved for PATIENCE epochs (the same "
                               "epoch on every algorithm and P; 0 = never)")
    # ---- minibatch sampling
    sampler: str | None = opt(None, "sampling", role="sampling", choices=("sage", "ladies"), help=_help_sampler)
    fanout: str | None = opt(None, "sampling", role="sampling", metavar="S1,S2,..",
                             help=f"per layer from the batch outwards: neighbours per vertex (sage, default 10) or "
                                  f"vertices per layer (ladies, default --batch-size up to the bound), each -1 (all) or in [1, "
                                  f"{MAX_FANOUT}]; a list from Python and TOML")
    batch_size: int | None = opt(None, "sampling", role="sampling", metavar="B", low=1, high=MAX_ROWS,
                                 help="training vertices per minibatch (--task link: training positives, each with its "
                                      "--negatives; default 1024)")
    bulk: int | None = opt(None, "sampling", role="run", metavar="K", low=1, high=MAX_BULK,
                           help="minibatches each rank samples at once (default 1)")
    sample_graph: str | None = opt(None, "sampling", role="run", choices=("replicated", "partitioned"),
                                   help="sampling with the graph on every rank, or 1.5D-partitioned (Algorithm 2); "
                                        "default replicated")
    eval_fanout: str | None = opt(None, "sampling", role="sampling", metavar="S1,S2,..",
                                  help="fanout of the evaluation minibatches (default -1: every neighbour, exact "
                                       "inference)")
    eval_batch_size: int | None = opt(None, "sampling", role="run", metavar="B", low=1, high=MAX_ROWS,
                                      help="vertices per evaluation minibatch (--task link: positives, with their "
                                           "negatives; default --batch-size)")
    # ---- run and outputs
    out: str | None = opt(None, "run", role="invocation", metavar="DIR",
                          help="write metrics.jsonl, model.pt (the trained model: gridgnn predict, export), "
                               "curves.png, breakdown.png and summary.json (each to a temporary name, then renamed); "
                               "a DIR holding a previous run's outputs needs --overwrite")
    overwrite: bool = opt(False, "run", role="invocation", help="remove the previous run's outputs in --out first (only gridgnn's own "
                                             "files)")
    save_logits: bool = opt(False, "run", role="run", help="also write logits.npy in original node order, in the run's --dtype "
                                               "(with ?relabel=1 also node_ids.npy: the file's id of each row)")
    keep: str = opt("best", "run", role="run", choices=("best", "last"),
                    help="the parameters the run hands on — model.pt (so predict and export), --save-logits and the "
                         "Python API's model: those of the best validation epoch, whose metrics summary.json reports "
                         "(best), or of the last epoch trained (last)")
    checkpoint_every: int = opt(0, "run", role="run", metavar="N", low=0, high=MAX_EPOCHS,
                                help="write DIR/checkpoint.pt (full parameters and optimizer state) every N epochs and at "
                                     "the end; 0 = never")
    resume: str | None = opt(None, "run", role="invocation", metavar="DIR",
                             help="continue from DIR/checkpoint.pt with any --algo/--nproc (a minibatch run keeps its "
                                  "--nproc); its config is the base, "
                                  "the flags given override it (--out defaults to DIR)")
    quiet: bool = opt(False, "run", role="invocation", help="no progress bar or per-epoch lines")
    log_every: int | None = opt(None, "run", role="display", metavar="N", low=0, high=MAX_EPOCHS,
                                help="an epoch line every N epochs (default: about 10 lines per run; 0: none)")
    log: str = opt("none", "run", role="display", choices=("none", "tensorboard"),
                   help="also log every epoch's record for TensorBoard into OUT/tensorboard (needs --out and the "
                        "tensorboard package: pip install gridgnn[log]); tensorboard --logdir OUT shows it live")

    def __post_init__(self) -> None:
        for f in fields(self):  # a NumPy array or scalar (or a tensor) as the Python values it holds
            setattr(self, f.name, python_value(getattr(self, f.name)))
        # the list flags take Python's natural type too: fanout=[15, 10, 5] is --fanout 15,10,5
        for name in LIST_FIELDS:
            value = getattr(self, name)
            if isinstance(value, int) and not isinstance(value, bool):  # fanout=5 is --fanout 5
                value = [value]
            if isinstance(value, (list, tuple)) and all(isinstance(v, int) and not isinstance(v, bool)
                                                        for v in value):
                setattr(self, name, ",".join(str(v) for v in value))
        for f in fields(self):  # a path (pathlib) where a string is taken: out=Path("runs/a") is --out runs/a
            if isinstance(getattr(self, f.name), os.PathLike) and "str" in str(f.type):
                setattr(self, f.name, os.fspath(getattr(self, f.name)))
        if isinstance(self.link_split, (list, tuple)) and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                              for v in self.link_split):
            self.link_split = ",".join(repr(float(v)) for v in self.link_split)  # link_split=[0.8, 0.1, 0.1]

    def validate(self) -> None:
        """Checks that need no data and no processes (run in the launching process). Creates nothing: ``--out``
        is only probed (see :func:`gridgnn.train.outputs.check_out_dir`)."""
        from ..parallel import algorithm

        self._check_types()
        self.check_choices()  # (a Python or TOML value too: argparse checks only the flags' own)
        host_takes_device_paths()  # (a GRIDGNN_DEVICE_PATHS other than "host" refused here, before any rank starts)
        self._validate_cuda_graph()
        if self.algo == "auto":
            self._validate_auto()
            return
        if self.profile is not None:
            raise GridGnnError("--profile applies to --algo auto (the profile it plans with)")
        model = resolve_model(self.model)
        options = model_options(model)
        algo = algorithm(self.algo)
        for option in TRAINER_OPTIONS:
            name, value = flag(option), getattr(self, option)
            if value is not None and option not in options:
                takers = [n for n, c in _MODEL_REGISTRY.items() if option in model_options(c)]
                raise GridGnnError(f"{name} applies to --model {' or '.join(takers)} (and models that take "
                                   f"{option!r}), not {self.model}")
        self.validate_model_options()
        if self.edge_dim is not None and "edge_dim" not in inspect.signature(model.__init__).parameters:
            takers = [n for n, c in _MODEL_REGISTRY.items() if "edge_dim" in inspect.signature(c.__init__).parameters]
            raise GridGnnError(f"--edge-dim applies to models that read edge features ({', '.join(takers)}), not "
                               f"{self.model}")
        if self.relations is not None and "num_relations" not in inspect.signature(model.__init__).parameters:
            takers = [n for n, c in _MODEL_REGISTRY.items()
                      if "num_relations" in inspect.signature(c.__init__).parameters]
            raise GridGnnError(f"--relations applies to models that read relation types ({', '.join(takers)}), "
                               f"not {self.model}")
        if getattr(model, "reads_destinations", False) and self.partition in ("double-perm", "balanced-perm") \
                and not algo.traits["scores_across_orders"]:
            raise GridGnnError(f"--model {self.model} on {self.algo} needs one vertex order per layer; --partition "
                               f"{self.partition} makes two (use random or identity, or --algo plexus)")
        self.check_ranges(skip=("sampling",))  # the sampling section is checked with --sampler
        if hasattr(model, "check_dims"):  # a model with a structure of its own (AGNN: linear, propagations, linear)
            model.check_dims([1] + [self.hidden] * (self.layers - 1) + [1])
        _check_builds(model, self)
        if self.dtype not in ("float32", "float64"):
            raise GridGnnError(f"--dtype must be float32 or float64, got {self.dtype!r}")
        from ..graph.loaders import FEATURE_NORMS

        if self.feature_norm not in FEATURE_NORMS:
            raise GridGnnError(f"--feature-norm must be one of {', '.join(FEATURE_NORMS)}, got {self.feature_norm!r}")
        self._check_schedule()
        if self.checkpoint_every and self.out is None:
            raise GridGnnError(f"--checkpoint-every {self.checkpoint_every} needs --out DIR (the checkpoint is "
                               "DIR/checkpoint.pt)")
        if self.overwrite and self.out is None:
            raise GridGnnError("--overwrite applies to the outputs in --out; give --out DIR")

        if self.log == "tensorboard":
            if self.out is None:
                raise GridGnnError("--log tensorboard writes OUT/tensorboard; give --out DIR")
            check_tensorboard()
            events = os.path.join(self.out, TensorBoardLog.NAME)
            if os.path.lexists(events) and not is_our_events(events):
                raise GridGnnError(f"--out {self.out} holds a {TensorBoardLog.NAME} folder that no gridgnn run wrote; "
                                   "--log tensorboard writes there: move it, or choose another --out")
        if self.out is not None:
            check_out_dir(self.out, overwrite=self.overwrite, resuming_here=self.resumes_into_out())
        from ..distributed.wire import check_comm_dtype

        check_comm_dtype(self.comm_dtype, self.dtype)
        if self.comm_dtype != "auto":
            for name, v in (("--comm-check-every", self.comm_check_every), ("--comm-tolerance", self.comm_tolerance)):
                if v is not None:
                    raise GridGnnError(f"{name} applies to --comm-dtype auto")
        if self.comm_dtype not in (None, self.dtype) and self.nproc == 1 and self.sampler is None:
            raise GridGnnError(f"--comm-dtype {self.comm_dtype} narrows what ranks send each other; one process "
                               "sends nothing (give --nproc P)")
        self._validate_grad_dtype(algo)
        self._validate_task()
        if self.sampler is not None:
            if self.comm_dtype not in (None, self.dtype):
                raise GridGnnError(f"--comm-dtype {self.comm_dtype} applies to full-graph training; minibatch runs "
                                   f"move their features in --dtype")
            if self.overlap:
                raise GridGnnError(f"--overlap applies to full-graph training (--algo {', '.join(overlap_algorithms())})")
            if self.partition != "random":
                raise GridGnnError(f"--partition {self.partition} applies to full-graph training; minibatch runs split "
                                   "the vertices in even blocks of their ids")
            self._validate_minibatch()
            return
        for name, v in (("--fanout", self.fanout), ("--batch-size", self.batch_size), ("--bulk", self.bulk),
                        ("--sample-graph", self.sample_graph), ("--eval-fanout", self.eval_fanout),
                        ("--eval-batch-size", self.eval_batch_size)):
            if v is not None:
                raise GridGnnError(f"{name} applies to minibatch training; add --sampler sage|ladies")
        if self.replication != 1 and not algo.takes_replication:
            raise GridGnnError(f"--replication applies to 1.5D algorithms; {self.algo} needs --replication 1")
        if self.grid is not None and not algo.takes_grid_shape:
            raise GridGnnError(f"--grid applies to 2d, 3d and plexus; {self.algo} takes --nproc/--replication")
        sharded = sharded_dir(self.data) is not None
        if sharded and self.partition != "random":
            raise GridGnnError("a sharded dataset fixes the vertex order it was written with; drop --partition "
                               "(choose it with gridgnn shard --method)")
        if algo.one_process:
            if self.nproc != 1:
                raise GridGnnError(f"--algo {self.algo} runs one process; got --nproc {self.nproc}")
            if self.partition != "random":
                raise GridGnnError(f"--partition {self.partition} orders the vertices of several processes' blocks; "
                                   f"--algo {self.algo} holds the graph whole in one process")
        else:
            self.mesh_shape(self.nproc)
            if algo.row_partitioned and self.partition not in BUILTIN_PARTITIONS \
                    and algo.row_blocks(self.nproc, self.replication) == 1:  # (its parts would be one: no order)
                reps = f" --replication {self.replication}" if self.replication != 1 else ""
                raise GridGnnError(f"--partition {self.partition} cuts the vertices into row blocks; --algo "
                                   f"{self.algo} on --nproc {self.nproc}{reps} has one (every rank's rows are all "
                                   "the vertices): leave --partition out")
        if self.overlap and not algo.overlap:
            raise GridGnnError(f"--overlap applies to --algo {', '.join(overlap_algorithms())}; {self.algo} overlaps "
                               "nothing yet")
        if self.blocked_aggregation and not algo.blocked_aggregation:
            takers = ", ".join(n for n, s in ALGORITHMS.items() if s.blocked_aggregation)
            raise GridGnnError(f"--blocked-aggregation applies to --algo {takers}")

    def _validate_cuda_graph(self) -> None:
        """``--cuda-graph``: one process (a collective's bookkeeping is Python, which a replay skips), full-graph
        training (node classification or link prediction), a device that runs it (a GPU; the host only in the test
        mode that has it take a GPU's code paths, :mod:`gridgnn.ops.device_paths`)."""
        if not self.cuda_graph:
            return
        if self.sampler is not None:
            raise GridGnnError("--cuda-graph applies to full-graph training; a minibatch's shapes change from step "
                               "to step")
        if self.nproc != 1 or not one_process(self.algo):
            raise GridGnnError(f"--cuda-graph records one process's step (--algo serial); got --algo {self.algo} "
                               f"--nproc {self.nproc} (a collective's bookkeeping runs in Python, which a replay "
                               "skips)")
        if host_takes_device_paths():
            return
        if self.device == "cpu":
            raise GridGnnError("--cuda-graph records the step on a CUDA device; --device cpu computes on the host")
        if not torch.cuda.is_available():
            raise GridGnnError("--cuda-graph records the step on a CUDA device; this machine has none")

    def _validate_grad_dtype(self, algo) -> None:
        """``--grad-dtype``: no wider than ``--dtype``, and only where the trainer all-reduces the gradients."""
        if self.grad_dtype in (None, self.dtype):
            return
        from ..distributed.wire import WIRE_TYPES

        if WIRE_TYPES[self.grad_dtype].itemsize > WIRE_TYPES[self.dtype].itemsize:
            raise GridGnnError(f"--grad-dtype {self.grad_dtype} is wider than --dtype {self.dtype}")
        if self.sampler is not None:
            raise GridGnnError("--grad-dtype applies to full-graph training; minibatch runs sum their gradients in "
                               "--dtype")
        if self.task != "node":
            raise GridGnnError("--grad-dtype applies to node classification; a link run sums its gradients in "
                               "--dtype")
        if self.nproc == 1:
            raise GridGnnError(f"--grad-dtype {self.grad_dtype} narrows the gradients ranks sum; one process sums "
                               "none (give --nproc P)")
        why = self.grad_sum_refusal(algo)
        if why:
            raise GridGnnError(f"--grad-dtype applies where the trainer all-reduces the gradients; {why}")

    def grad_sum_refusal(self, algo) -> str | None:
        """Why the trainer sums no gradients on this configuration's layout (``None``: it does, over more than one
        rank): Plexus sums each weight's gradient inside its primitives; a layout with one row block (one
        process row and fiber on SUMMA) holds every gradient whole on each rank."""
        shape = self.mesh_shape(self.nproc)
        members = algo.family.grad_members(algo, self.nproc, self.replication, shape)
        if members == 0:
            return f"{self.algo} sums each weight's gradient inside its primitives"
        if members == 1:
            return f"{self.algo} on grid {'x'.join(map(str, shape))} has one row block: no rank sums gradients"
        return None

    def _validate_task(self) -> None:
        """``--task``: the link-prediction flags only with ``--task link``, and what link prediction does not
        combine with yet refused before anything starts."""
        if self.task not in ("node", "link"):
            raise GridGnnError(f"--task must be node or link, got {self.task!r}")
        if self.task != "link":
            for name in ("link_split", "negatives", "hits_k", "embedding_dim", "decoder"):
                if getattr(self, name) is not None:
                    raise GridGnnError(f"{flag(name)} applies to --task link")
            return
        for name, bad in (("--save-logits (node classification's logits)", self.save_logits),
                          ("sharded: data (link prediction splits the edges of the graph itself)",
                           sharded_dir(self.data) is not None)):
            if bad:
                raise GridGnnError(f"--task link cannot be combined with {name} yet")
        if getattr(resolve_model(self.model), "requires_relations", False):
            raise GridGnnError(f"--task link cannot train --model {self.model} yet (link prediction on a graph with "
                               "relation types)")
        if self.early_stop and self.model_link_split[1] == 0:
            raise GridGnnError(f"--early-stop {self.early_stop} watches the validation edges; --link-split "
                               f"{self.link_split} holds none (give them a fraction, or leave --early-stop out)")
        self.model_link_split  # parsed and checked  # noqa: B018

    @property
    def model_link_split(self) -> tuple[float, float, float]:
        """``--link-split`` as ``(train, val, test)`` fractions adding up to 1."""
        if self.link_split is None:
            return DEFAULT_LINK_SPLIT
        text = self.link_split
        if isinstance(text, (list, tuple)):
            text = ",".join(str(v) for v in text)
        try:
            vals = tuple(float(v) for v in str(text).replace(" ", "").split(","))
        except ValueError:
            vals = ()
        if len(vals) != 3 or any(not 0 <= v < 1 for v in vals[1:]) or not 0 < vals[0] <= 1 \
                or abs(sum(vals) - 1.0) > 1e-6:
            raise GridGnnError(f"--link-split {text!r} must be three fractions TRAIN,VAL,TEST that add up to 1, "
                               "training above 0 (e.g. 0.85,0.05,0.1)")
        return vals

    @property
    def model_decoder(self) -> str:
        return "dot" if self.decoder is None else self.decoder

    @property
    def model_negatives(self) -> int:
        return 1 if self.negatives is None else self.negatives

    @property
    def model_hits_k(self) -> int:
        return 50 if self.hits_k is None else self.hits_k

    @property
    def model_embedding_dim(self) -> int:
        return self.hidden if self.embedding_dim is None else self.embedding_dim

    def check_ranges(self, *, skip: tuple = (), only: tuple = ()) -> None:
        """Every numeric field given (not ``None``) in the range its :func:`opt` declares (the ``--help`` text and
        this check read the same declaration), the fields of the sections ``skip`` left out, or only those of
        ``only``."""
        for f in fields(self):
            section = f.metadata.get("section")
            if section in skip or (only and section not in only):
                continue
            spec = field_range(f)
            value = getattr(self, f.name)
            if spec is not None and value is not None:
                spec.check(flag(f.name), value)

    def _check_schedule(self) -> None:
        """The optimizer's and the schedule's options apply where they are read."""
        if self.momentum is not None and self.optimizer != "sgd":
            raise GridGnnError(f"--momentum applies to --optimizer sgd, not {self.optimizer}")
        for name in ("lr_step", "lr_gamma"):
            if getattr(self, name) is not None and self.lr_schedule != "step":
                raise GridGnnError(f"{flag(name)} applies to --lr-schedule step, not {self.lr_schedule}")
        if self.warmup >= self.epochs:
            raise GridGnnError(f"--warmup {self.warmup} leaves no epoch after the warm-up of --epochs {self.epochs} "
                               "(give fewer warm-up epochs)")
        span = self.epochs - self.warmup  # the epochs the schedule sets (optim.rate)
        continued = self.lr_schedule == "step" and self.lr_step is not None and self.checkpoint_every  # (a run that
        # writes checkpoints may be continued to its steps, which --lr-step fixes whatever the epochs)
        if self.lr_schedule != "none" and span == 1 and not continued:
            raise GridGnnError(f"--lr-schedule {self.lr_schedule}: the one epoch after the warm-up of --epochs "
                               f"{self.epochs} trains at --lr, which the schedule never changes (give more epochs, "
                               "or leave --lr-schedule out)")
        if self.lr_schedule == "step" and self.lr_step is not None and self.lr_step >= span and not continued:
            raise GridGnnError(f"--lr-step {self.lr_step}: the first step would come at epoch "
                               f"{self.warmup + self.lr_step + 1}, after the last of --epochs {self.epochs} (give "
                               f"--lr-step {span - 1} or less)")

    def check_choices(self) -> None:
        """Every field given (not ``None``) that declares its choices (:func:`opt`) holds one of them."""
        for f in fields(self):
            choices, value = f.metadata.get("choices"), getattr(self, f.name)
            if choices and value is not None and value not in choices:
                raise GridGnnError(f"{flag(f.name)} must be one of {', '.join(choices)}, got {value!r}")

    def _validate_auto(self) -> None:
        """``--algo auto`` chooses the algorithm, grid, replication and partition itself: refuse them given, then
        check the rest as for any full-graph run of ``--nproc`` processes."""
        import dataclasses

        for name, bad in (("--grid", self.grid is not None), ("--replication", self.replication != 1),
                          ("--partition", self.partition != "random"),
                          ("--blocked-aggregation", self.blocked_aggregation != 0),
                          ("--sampler", self.sampler is not None), ("--resume", self.resume is not None),
                          ("--task link", self.task == "link"),
                          ("sharded: data", sharded_dir(self.data) is not None)):
            if bad:
                raise GridGnnError(f"--algo auto chooses the algorithm, grid, replication and partition itself; "
                                   f"{name} cannot be combined with it")
        if self.profile is not None:
            from ..planner.timing import PRESETS

            if self.profile not in PRESETS and not os.path.isfile(self.profile):
                raise GridGnnError(f"--profile {self.profile!r} is neither a file nor a preset "
                                   f"({', '.join(PRESETS)})")
        dataclasses.replace(self, algo="serial" if self.nproc == 1 else "1d", profile=None).validate()

    def _validate_minibatch(self) -> None:
        from ..sampling import SAMPLERS
        from ..sampling.distributed import MODES

        if self.sampler not in SAMPLERS:
            raise GridGnnError(f"--sampler must be one of {', '.join(SAMPLERS)}, got {self.sampler!r}")
        if not getattr(resolve_model(self.model), "trains_on_samples", False):
            able = samplable_models()
            raise GridGnnError(f"--sampler trains --model {', '.join(able[:-1])} or {able[-1]} on minibatches; "
                               f"got --model {self.model}")
        if not one_process(self.algo):
            raise GridGnnError(f"--sampler trains on minibatches over a P/c x c grid (--nproc P --replication c); "
                               f"--algo {self.algo} selects a full-graph algorithm: leave it out")
        for name, bad in (("--grid", self.grid is not None), ("--blocked-aggregation", self.blocked_aggregation),
                          ("sharded: data", sharded_dir(self.data) is not None)):
            if bad:
                raise GridGnnError(f"{name} is not available with --sampler (minibatch training) yet")
        if self.nproc % self.replication:
            raise GridGnnError(f"replication c={self.replication} must divide the number of processes "
                               f"P={self.nproc}")
        self.check_ranges(only=("sampling",))
        if self.model_sample_graph not in MODES:
            raise GridGnnError(f"--sample-graph must be one of {', '.join(MODES)}, got {self.model_sample_graph!r}")
        self.model_fanouts, self.model_eval_fanouts  # parsed and checked  # noqa: B018

    def _fanouts(self, flag: str, text: str | None, default: int) -> list[int]:
        if text is None:
            return [default] * self.layers
        try:  # an empty item is refused, not dropped ("10,,5" is no two-layer fanout)
            vals = [int(v) for v in str(text).replace(" ", "").split(",")]
        except ValueError:
            raise GridGnnError(f"{flag} {text!r} must be integers separated by commas, e.g. 15,10,5") from None
        if len(vals) == 1:
            vals = vals * self.layers
        if len(vals) != self.layers or any(v == 0 or v < -1 or v > MAX_FANOUT for v in vals):
            raise GridGnnError(f"{flag} {text!r} needs one size in [1, {MAX_FANOUT}] (or -1: every neighbour) per "
                               f"layer (--layers {self.layers})")
        return vals

    @property
    def model_fanouts(self) -> list[int]:
        """``--fanout`` per hop from the batch outwards (default: 10 per layer for sage, ``--batch-size`` for
        ladies, at most ``MAX_FANOUT``)."""
        return self._fanouts("--fanout", self.fanout,
                             min(self.model_batch_size, MAX_FANOUT) if self.sampler == "ladies" else 10)

    @property
    def model_eval_fanouts(self) -> list[int]:
        return self._fanouts("--eval-fanout", self.eval_fanout, -1)

    @property
    def model_batch_size(self) -> int:
        return 1024 if self.batch_size is None else self.batch_size

    @property
    def model_eval_batch_size(self) -> int:
        return self.model_batch_size if self.eval_batch_size is None else self.eval_batch_size

    @property
    def model_feature_norm(self) -> str:
        """``--feature-norm`` resolved without the data: ``auto`` is the model's
        :attr:`~gridgnn.nn.base.Model.FEATURE_NORM` (:meth:`feature_norm_for` adds the data's convention)."""
        if self.feature_norm != "auto":
            return self.feature_norm
        from ..nn.base import resolve_model

        return getattr(resolve_model(self.model), "FEATURE_NORM", "none")

    def feature_norm_for(self, meta) -> str:
        """``--feature-norm`` as a run on data with ``meta`` (a graph's, a sharded dataset's) uses it: ``auto`` is
        the model's choice, else the data's convention (``planetoid:``: ``row``), else ``none``
        (:func:`~gridgnn.graph.pipeline.resolve_feature_norm`)."""
        from ..graph.pipeline import resolve_feature_norm

        return resolve_feature_norm(self.feature_norm, self.model_feature_norm, meta)

    @property
    def model_bulk(self) -> int:
        return 1 if self.bulk is None else self.bulk

    @property
    def model_sample_graph(self) -> str:
        return "replicated" if self.sample_graph is None else self.sample_graph

    def validate_model_options(self) -> None:
        """The model's options given (``--heads``, ``--attn-dropout``, ``--aggr``) have the type and range its
        :class:`~gridgnn.nn.Option` declares."""
        cls = resolve_model(self.model)
        declared = declared_options(cls)
        for name in model_options(cls):
            value = getattr(self, name, None)
            if value is not None and name in TRAINER_OPTIONS:
                declared.get(name, UNDECLARED_OPTIONS[name]).check(flag(name), value)

    def model_option(self, name: str):
        """A trainer option (:data:`~gridgnn.nn.base.TRAINER_OPTIONS`) as the model receives it: the flag, else
        the default its :class:`~gridgnn.nn.Option` declares; ``None`` for a model that does not take it (or
        leaves its default to its constructor)."""
        cls = resolve_model(self.model)
        if name not in model_options(cls):
            return None
        value = getattr(self, name)
        return declared_options(cls).get(name, UNDECLARED_OPTIONS[name]).default if value is None else value

    def model_kwargs(self) -> dict:
        """The trainer options the model's ``from_options`` receives (:meth:`model_option` of each it takes)."""
        out = {name: self.model_option(name) for name in TRAINER_OPTIONS if self.model_option(name) is not None}
        if self.edge_dim is not None:  # a model's constructor that takes edge_dim receives it (from_options)
            out["edge_dim"] = self.edge_dim
        if self.relations is not None:  # ... and num_relations the relation count
            out["num_relations"] = self.relations
        return out

    @property
    def model_heads(self) -> int:
        """Heads of the hidden layers (the model's ``heads``; 1 for a model without heads)."""
        heads = self.model_option("heads")
        return 1 if heads is None else heads

    @property
    def model_aggr(self) -> str | None:
        """The neighbour aggregation of a model that takes ``--aggr`` (SAGE: default ``mean``), else ``None``."""
        return self.model_option("aggr")

    def resumes_into_out(self) -> bool:
        """``--resume`` names the folder that ``--out`` names, or its ``checkpoint.pt`` (a checkpoint of another name
        in that folder is not the folder's run: its outputs there are another's, refused without ``--overwrite``)."""
        if self.resume is None or self.out is None:
            return False
        here = os.path.join(self.out, CHECKPOINT)
        ckpt = os.path.join(self.resume, CHECKPOINT) if os.path.isdir(self.resume) else self.resume
        try:
            return os.path.samefile(ckpt, here)
        except OSError:
            return False

    def mesh_shape(self, world: int) -> tuple[int, ...]:
        """The process grid for ``world`` processes (``--grid``, or a near-square / near-cubic default)."""
        from ..parallel import algorithm

        shape = None
        if self.grid is not None:
            try:
                shape = tuple(int(v) for v in self.grid.replace("x", ",").split(","))
            except ValueError:
                raise GridGnnError(f"--grid {self.grid!r} must be integers separated by commas, e.g. 2,2,2") from None
        return algorithm(self.algo).mesh_shape(world, replication=self.replication, grid=shape)

    def to_dict(self) -> dict:
        return asdict(self)

    def _check_types(self) -> None:
        """Every field holds a value of its kind (what argparse would have produced): a ``TrainConfig`` built in
        Python or read from a config file gets one clear error instead of a failure deep inside."""
        for f in fields(self):
            value, kinds = getattr(self, f.name), str(f.type).replace(" ", "").split("|")
            if value is None and "None" in kinds:
                continue
            name = flag(f.name)
            if "bool" in kinds:
                ok, want = isinstance(value, bool), "true or false"
            elif "int" in kinds:
                ok, want = isinstance(value, int) and not isinstance(value, bool), "an integer"
            elif "float" in kinds:
                ok, want = isinstance(value, (int, float)) and not isinstance(value, bool), "a number"
            else:
                ok, want = isinstance(value, str), "a string"
            if not ok:
                raise GridGnnError(f"{name} must be {want}, got {value!r}")


def _field_docs() -> str:
    """The field list of :class:`TrainConfig`'s docstring, by section, from the fields' declarations."""
    from dataclasses import MISSING

    lines = []
    for key, title in SECTIONS.items():
        lines += ["", f"    {title.capitalize()}:"]
        for f in fields(TrainConfig):
            if f.metadata.get("section") != key:
                continue
            text = f.metadata["help"]() if callable(f.metadata["help"]) else f.metadata["help"]
            spec = field_range(f)
            notes = [f"default ``{f.default!r}``"] if f.default not in (MISSING, None) else []
            if task_default_note(f):
                notes.append(task_default_note(f))
            if spec is not None:
                notes.append(spec.bound_text())
            lines.append(f"        {f.name} ({f.type}): {text} ({'; '.join(notes)})")
    return "\n".join(lines) + "\n"


if TrainConfig.__doc__:  # None under python -OO
    TrainConfig.__doc__ += _field_docs()


#: The class of each section's options (``gridgnn.OptimizerOptions`` ...), for :meth:`TrainConfig.from_sections`
SECTION_CLASS_NAMES = {"data": "DataOptions", "task": "TaskOptions", "parallel": "ParallelOptions",
                       "optimizer": "OptimizerOptions", "sampling": "SamplingOptions", "run": "RunOptions"}


def _section_class(key: str) -> type:
    """A kw-only dataclass of the fields of section ``key``, made from their declarations in :class:`TrainConfig`
    (defaults, types, section, role, help and range: one source, nothing restated)."""

    own = [(f.name, f.type, field(default=f.default, metadata=f.metadata)) for f in fields(TrainConfig)
           if f.metadata["section"] == key]
    cls = make_dataclass(SECTION_CLASS_NAMES[key], own, kw_only=True)
    cls.__module__ = __name__  # picklable (spawned ranks), and shown as gridgnn.train.config.X
    cls.__doc__ = (f"The {SECTIONS[key]} options of a training config (the ``[{key}]`` table of a config file): "
                   f"{', '.join(name for name, _, _ in own)}. Combine sections with "
                   f":meth:`TrainConfig.from_sections`; each field is documented in :class:`TrainConfig`.")
    return cls


SECTION_CLASSES = {key: _section_class(key) for key in SECTIONS}
DataOptions, TaskOptions, ParallelOptions = (SECTION_CLASSES[k] for k in ("data", "task", "parallel"))
OptimizerOptions, SamplingOptions, RunOptions = (SECTION_CLASSES[k] for k in ("optimizer", "sampling", "run"))


def _from_sections(cls, *sections, **options) -> "TrainConfig":
    r"""A config from section objects (:data:`SECTION_CLASSES`, each section at most once) and further keyword
    options. As with :class:`~gridgnn.train.api.Trainer`, a field left at its default counts as not given (a task's
    own default still applies to it, an option may set it); a field set both in a section and as an option is
    refused (one place per value)."""
    kw, seen, set_in = {}, {}, {}
    section_of = {c: key for key, c in SECTION_CLASSES.items()}
    for sec in sections:
        key = section_of.get(type(sec))
        if key is None:
            raise GridGnnError(f"TrainConfig.from_sections takes section options ({', '.join(SECTION_CLASS_NAMES.values())}), "
                               f"got {type(sec).__name__}")
        if key in seen:
            raise GridGnnError(f"the {SECTION_CLASS_NAMES[key]} section is given twice")
        seen[key] = sec
        for f in fields(sec):
            kw[f.name] = python_value(getattr(sec, f.name))
            if kw[f.name] != f.default:
                set_in[f.name] = SECTION_CLASS_NAMES[key]
    unknown = sorted(set(options) - set(_SECTION_OF))
    if unknown:
        raise GridGnnError(f"unknown training option(s): {', '.join(unknown)}")
    twice = sorted(set(set_in) & set(options))
    if twice:
        raise GridGnnError(f"{twice[0]} is given twice: in {set_in[twice[0]]} and as an option")
    kw.update(options)
    return cls(**kw)


def _sections(self) -> dict:
    """This config's values as section objects, ``{section: DataOptions(...), ...}`` (:data:`SECTIONS` order)."""
    return {key: c(**{f.name: getattr(self, f.name) for f in fields(c)}) for key, c in SECTION_CLASSES.items()}


_SECTION_OF = {f.name: f.metadata["section"] for f in fields(TrainConfig)}
TrainConfig.from_sections = classmethod(_from_sections)
TrainConfig.sections = _sections


def _check_builds(model, cfg: "TrainConfig") -> None:
    """The model builds on small widths with these options and has parameters (one error line otherwise: a model
    of the user's own may fail in any way)."""
    try:
        shapes = model.parameter_shapes([2] * (cfg.layers + 1), **cfg.model_kwargs())
    except GridGnnError:
        raise
    except Exception as exc:  # noqa: BLE001 - the user's code: its failure is one line, not a traceback
        raise GridGnnError(f"--model {cfg.model} cannot be built with --layers {cfg.layers}: "
                           f"{type(exc).__name__}: {exc}") from None
    if not any(shapes.values()):
        raise GridGnnError(f"--model {cfg.model} has no parameters to train")




#: Fields a config file may give as a list of integers (the comma-separated flag)
LIST_FIELDS = ("grid", "fanout", "eval_fanout")
#: Largest config file read (a config is a few hundred bytes; a summary.json a few kB per rank).
MAX_CONFIG_BYTES = 16 * 2**20
#: Fields of a previous run's config that a rerun from its ``summary.json`` does not take (roles ``invocation`` and
#: ``display``): where it wrote, what it resumed, how it was shown, the device and the timeout (give them again).
RERUN_DROPS = fields_of_role("invocation", "display")


def _field_name(key) -> str:
    """The :class:`TrainConfig` field a config file's key names (``weight-decay`` → ``weight_decay``, ``timeout`` →
    ``timeout_s``)."""
    return "timeout_s" if key == "timeout" else str(key).replace("-", "_")


def _toml_options(doc: dict, path: str) -> dict:
    """A TOML config's options from its top level, a ``[train]`` table (any option) and the tables of the sections
    (:data:`SECTIONS`: ``[data]``, ``[task]``, ``[parallel]``, ``[optimizer]``, ``[sampling]``, ``[run]``, each
    holding its own options only); an option given twice (``weight-decay`` and ``weight_decay`` too) or in another
    section's table is refused, naming where."""
    section_of = {f.name: f.metadata["section"] for f in fields(TrainConfig)}
    out, where = {}, {}
    for key, value in doc.items():
        if isinstance(value, dict) and (key == "train" or key in SECTIONS):
            items, place = value.items(), f"in [{key}]"
        else:
            items, place = ((key, value),), "at the top level"
        for k, v in items:
            name = _field_name(k)
            if key in SECTIONS and isinstance(value, dict) and section_of.get(name, key) != key:
                raise GridGnnError(f"--config {path}: {k} is an option of [{section_of[name]}], not of [{key}]")
            if name in where:
                raise GridGnnError(f"--config {path}: {name} given both {where[name]} and {place}")
            where[name] = place
            out[k] = v
    return out


def config_file_path(path) -> str:
    """The file ``--config PATH`` reads: ``PATH``, or the ``summary.json`` of a run folder."""
    p = os.path.expanduser(os.fspath(path))
    return os.path.join(p, "summary.json") if os.path.isdir(p) else p


def is_run_summary(path) -> bool:
    """Whether ``--config PATH`` reruns a run from its ``summary.json`` (else ``PATH`` is a TOML file)."""
    return config_file_path(path).endswith(".json")


def read_config_file(path) -> dict:
    r"""The training options of a config file, as ``{field: value}`` (the flags ``--config`` stands for).

    * ``*.toml``: top-level keys, those of a ``[train]`` table and those of the sections' tables (``[data]``,
      ``[optimizer]``, ...: each its own options; :func:`_toml_options`); a key is a field name or its flag
      without the dashes (``weight-decay`` or ``weight_decay``, ``timeout``); lists become
      comma-separated strings (``grid = [2, 2]``, ``fanout = [15, 10, 5]``).
    * ``summary.json`` of a previous run, or the folder holding it: its ``config`` (the resolved config of that
      run) without :data:`RERUN_DROPS` (the fields of roles ``invocation`` and ``display``).

    Values are checked by :meth:`TrainConfig.validate` like flags; unknown keys are refused, naming them."""
    p = config_file_path(path)
    try:
        if not os.path.isfile(p):
            raise GridGnnError(f"--config {p} is not a regular file")
        with open(p, "rb") as fh:
            raw = fh.read(MAX_CONFIG_BYTES + 1)
        if len(raw) > MAX_CONFIG_BYTES:
            raise GridGnnError(f"--config {p} is larger than {MAX_CONFIG_BYTES} bytes; it is not a config file")
    except OSError as exc:
        raise GridGnnError(f"--config {p}: cannot read it ({exc.strerror or exc})") from None
    is_json = is_run_summary(p)
    from ..graph.saved import parse_document

    doc = parse_document(raw, "json" if is_json else "toml", f"--config {p}")  # bounded depth, one line
    if not isinstance(doc, dict):
        raise GridGnnError(f"--config {p} must hold a table of options")
    if is_json:
        summary_data = doc.get("data")
        doc = doc.get("config")
        if not isinstance(doc, dict):
            raise GridGnnError(f"--config {p} holds no 'config' (a summary.json of gridgnn 0.2 or later has it)")
        doc = {k: v for k, v in doc.items() if k not in RERUN_DROPS}
        if doc.get("data") is None and str(summary_data).startswith("in-memory:"):
            raise GridGnnError(f"--config {p}: that run trained on a graph handed over from Python "
                               f"({summary_data}); give --data to rerun it on a file")
    else:
        doc = _toml_options(doc, p)
    known = {f.name for f in fields(TrainConfig)}
    out, unknown = {}, []
    for key, value in doc.items():
        name = _field_name(key)
        if name not in known or name == "config":
            unknown.append(str(key))
            continue
        if isinstance(value, dict):  # [train.optimizer], [run.keep] ...: a table inside a table is no option
            raise GridGnnError(f"--config {p}: {key} is given a table, but it is an option that takes one value; "
                               "give options at the top level, in [train] or in their section's table")
        if name in LIST_FIELDS and isinstance(value, list) \
                and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            value = ",".join(str(v) for v in value)
        out[name] = value
    if unknown:
        raise GridGnnError(f"--config {p}: unknown option(s) {', '.join(sorted(unknown))} (the options are the "
                           "flags of gridgnn train)")
    return out
