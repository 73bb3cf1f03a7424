r"""The config one invocation runs: the flags given (a ``--config`` file's options under them) over a ``--resume``
checkpoint's config, the task's own defaults where left out, validated — above :mod:`.config` (the fields and
their checks) and :mod:`.checkpoint` (what a checkpoint holds and the resume rules)."""
from __future__ import annotations

import re
from dataclasses import fields

from ..errors import GridGnnError
from ..nn.base import resolve_model
from .checkpoint import check_epochs, check_keep, checkpoint_file, read_checkpoint, resume_base
from .config import TrainConfig, flag, task_defaults


def check_given_apply(given: dict, cfg: TrainConfig) -> None:
    """Refuse a flag given for this run that would shape nothing in it — only a given one that asks for something
    (a value inherited from a checkpoint, or recorded in a summary: its default, is no request): ``--hidden`` or
    ``--heads`` with ``--layers 1`` (the summary recorded them), ``--save-logits`` without ``--out`` (nothing was
    written), ``--overlap`` on one process."""
    default_hidden = task_defaults(cfg.task).get("hidden", TrainConfig.hidden)
    idle = {"hidden": (cfg.layers == 1 and given.get("hidden") not in (None, default_hidden),
                       "sets the hidden layers' width; --layers 1 has none"),
            "heads": (cfg.layers == 1, "sets the hidden layers' heads; --layers 1 has none (its one layer, the "
                                       "output, has one head)"),
            "save_logits": (cfg.out is None, "writes OUT/logits.npy; give --out DIR"),
            "overlap": (cfg.nproc == 1, "hides the transfers between processes behind the work; --nproc 1 has "
                                        "none")}
    for name, (refused, why) in idle.items():
        if given.get(name) not in (None, False) and refused:
            value = "" if given[name] is True else f" {given[name]}"
            raise GridGnnError(f"{flag(name)}{value} {why}")


def config_from_flags(given: dict, *, env_world: int | None = None) -> TrainConfig:
    r"""The run's :class:`TrainConfig` from the flags ``given`` on the command line (a flag left out is absent
    from the dict), validated.

    Without ``--resume`` a flag left out takes its default. With ``--resume DIR`` the checkpoint's config is the
    base and only the flags given override it (rules: :func:`gridgnn.train.checkpoint.resume_base`); the
    checkpoint is read and checked here, before anything is spawned. ``--nproc`` left out: the launcher's world
    size under torchrun/srun (``env_world``), else the base's, else 1.
    """
    known = {f.name for f in fields(TrainConfig)}
    unknown = set(given) - known
    if unknown:
        raise GridGnnError(f"unknown training option(s): {', '.join(sorted(unknown))}")
    base: dict = {}
    ckpt = None
    if given.get("model") is not None:  # a model of the user's own is imported now, on the user's word
        resolve_model(given["model"])
    if given.get("resume") is not None:
        ckpt = read_checkpoint(given["resume"])
        base = resume_base(ckpt, given, given["resume"])
    kw = {**base, **given}
    task = kw.get("task", "node")
    if isinstance(task, str):  # (another type is refused by the checks below)
        kw.update(task_defaults(task, given=set(kw)))  # the task's own defaults, where left out
    if given.get("nproc") is None:
        kw["nproc"] = env_world if env_world is not None else base.get("nproc", 1)
    if "layers" not in given and "layers" not in base:  # the model's own depth (AGNN: 4, PyG's Cora example)
        kw["layers"] = getattr(resolve_model(kw.get("model", "gcn")), "DEFAULT_LAYERS", 2)
    cfg = TrainConfig(**kw)
    try:
        cfg.validate()
    except GridGnnError as exc:  # a refusal of a value the checkpoint gave says so
        taken = [k for k in base if k not in given and k != "out" and getattr(cfg, k, None) == base[k]
                 and re.search(re.escape(flag(k)) + r"(?![\w-])", str(exc))]
        if not taken:
            raise
        raise GridGnnError(f"{exc} ({', '.join(f'{flag(k)} {base[k]!r}' for k in taken)} came from the checkpoint "
                           f"of --resume {given['resume']})") from None
    check_given_apply(given, cfg)
    if ckpt is not None:
        saved = ckpt.get("config", {}).get("nproc")
        if cfg.sampler is not None and saved is not None and saved != cfg.nproc:
            whence = "" if "nproc" in given else " (the launcher's world size)"
            raise GridGnnError(f"--nproc {cfg.nproc}{whence} differs from the checkpoint's {saved} "
                               f"({checkpoint_file(cfg.resume)}): a minibatch step is one update on the union of "
                               "the ranks' minibatches, so a resumed minibatch run keeps its process count")
        check_epochs(ckpt, checkpoint_file(cfg.resume), cfg.epochs, cfg.early_stop)
        check_keep(ckpt, cfg.keep, checkpoint_file(cfg.resume))
    return cfg
