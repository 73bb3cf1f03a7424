r"""Training from Python: :class:`Trainer` and :func:`train`, the same runs as ``gridgnn train``.

.. code-block:: python

    import gridgnn

    result = gridgnn.train(gridgnn.TrainConfig(model="gat", heads=8, hidden=8, algo="1d-sa", nproc=4))
    print(result["test_acc"], result["comm_bytes_per_epoch"]["total"])
    logits = result.predict("synthetic:sbm?n=4000&features=16", algo="2d", nproc=4)  # any graph, any algorithm

Where the ranks come from:

* ``nproc=1`` (and ``algo="serial"``, the default): the run happens in this process (a notebook works);
* ``nproc=P`` in a plain script: ``P`` processes are spawned on this machine (loopback only, as the CLI does);
  the script must guard its entry point with ``if __name__ == "__main__":``, as every ``multiprocessing`` program;
* under ``torchrun`` or ``srun`` (``RANK``/``WORLD_SIZE`` or ``SLURM_PROCID``/``SLURM_NTASKS`` set): this process
  is one rank of the launcher's job; ``nproc`` defaults to the launcher's world size.

The result (:class:`~gridgnn.train.trained.TrainResult`: the summary, i.e. the dict written as ``summary.json``,
with the trained model as ``result.model``) is returned on rank 0 and ``None`` on the other ranks of a
torchrun/srun job. Bad input raises :class:`~gridgnn.errors.GridGnnError` before anything starts; a spawned job
whose ranks fail raises :class:`TrainingFailed` (their messages are printed, one ``gridgnn: error:`` line each).
"""
from __future__ import annotations

import dataclasses
import os

from ..distributed.launch import env_context
from ..errors import GridGnnError
from ..planner.timing import load_profile
from ..parallel import one_process
from .config import TrainConfig
from .data_checks import planned_graph
from .console import Progress
from .invocation import config_from_flags
from .launching import api_failure, failed_launch, launch_checked, launch_ranks, require_one_process, spawnable
from ..graph.files import OutLock, write_json
from .planning import resolve_auto
from .startup import StartupClock
from .trained import TrainedModel, TrainResult
from .worker import train_worker


class Trainer:
    r"""One training run.

    Args:
        config (TrainConfig, optional): the run (every field is a ``gridgnn train`` flag). (default: the defaults)
        graph (str | torch_geometric.data.Data | Graph, optional): a graph in memory instead of ``config.data``
            (see :func:`gridgnn.load_graph`); ranks spawned here read it as shards written once to a temporary
            folder (:mod:`~gridgnn.train.handover`), not as whole copies. (default: ``None``)
        callbacks (sequence of callables, optional): each is called on rank 0 after every epoch with the epoch's
            record (the ``metrics.jsonl`` line as a dict): the place for TensorBoard, W&B or a check of your own
            (an exception ends the run with one error line). In a spawned job they run in rank 0's process, which
            receives them pickled (module-level functions or instances of module-level classes): what they
            record stays there, so write it to a file or a logger. (default: none)
        **options: fields of :class:`TrainConfig` that override ``config``.

    Like the command line, ``config.resume`` continues from a checkpoint whose config is the base, overridden by
    the keyword ``options`` and by the fields of ``config`` that differ from their defaults (a field of ``config``
    left at its default counts as not given: pass it as a keyword option to insist on it).
    """

    def __init__(self, config: TrainConfig | None = None, *, graph=None, callbacks=(), **options):
        config = TrainConfig() if config is None else config
        if not isinstance(config, TrainConfig):
            raise TypeError(f"config must be a TrainConfig, got {type(config).__name__}")
        known = {f.name for f in dataclasses.fields(TrainConfig)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise GridGnnError(f"unknown training option(s): {', '.join(unknown)}")
        self.config = dataclasses.replace(config, **options)  # a copy: the run settles derived fields on its own
        self.options = set(options)  # given explicitly, whatever their values
        self.graph = graph
        self.callbacks = _checked_callbacks(callbacks)

    def resolved_config(self) -> TrainConfig:
        """The validated config the run will use (a checkpoint's config as the base with ``resume``; ``nproc`` of
        the launcher under torchrun/srun)."""

        defaults = TrainConfig().to_dict()
        given = {k: v for k, v in self.config.to_dict().items() if v != defaults[k] or k in self.options}
        env = env_context(self.config.device)
        return config_from_flags(given, env_world=env.world_size if env is not None else None)

    def fit(self):
        """Train; returns a :class:`~gridgnn.train.trained.TrainResult` on rank 0 — the summary (a dict, as
        ``summary.json``) with the trained model (``result.model``, ``result.predict(...)``) — and ``None`` on
        the other ranks of a torchrun/srun job."""
        if self.graph is not None and self.config.data is not None:
            raise GridGnnError(f"give either a graph in memory or data={self.config.data!r}, not both")
        cfg = self.resolved_config()
        try:
            out = run(cfg, self.graph, keep_model=True, callbacks=self.callbacks)
        except SystemExit as exc:  # the launcher has printed every rank's message
            raise api_failure(failed_launch(exc, "training")) from None
        if out is None:
            return None
        return TrainResult(out.summary, TrainedModel(out.summary["config"], out.dims, out.params,
                                                     summary=out.summary))


def _checked_callbacks(callbacks) -> tuple:
    """The per-epoch callbacks: callables (each receives each epoch's record); one callable is a list of one."""
    if callable(callbacks):
        callbacks = (callbacks,)
    elif callbacks is None or isinstance(callbacks, (list, tuple)):
        callbacks = tuple(callbacks or ())
    else:
        raise GridGnnError(f"callbacks must be a list of callables (each receives each epoch's record), got "
                           f"{type(callbacks).__name__} {callbacks!r:.60}")
    for cb in callbacks:
        if not callable(cb):
            raise GridGnnError(f"a callback must be callable (it receives each epoch's record), got {cb!r}")
    return callbacks


def train(config: TrainConfig | None = None, *, graph=None, callbacks=(), **options):
    """``Trainer(config, graph=graph, callbacks=callbacks, **options).fit()``: the summary and the trained model
    (:class:`~gridgnn.train.trained.TrainResult`) on rank 0."""
    return Trainer(config, graph=graph, callbacks=callbacks, **options).fit()


def run(cfg: TrainConfig, graph=None, *, keep_model: bool = False, callbacks=(), loaded=None, clock=None):
    """Run a validated config: in this process (one rank), spawned here, or as this rank of a torchrun/srun job;
    the summary on rank 0 (``keep_model``: a :class:`~gridgnn.train.model_file.TrainOutput`, the summary and the
    trained parameters). ``graph``: a graph in memory instead of ``cfg.data``; ``loaded``: a list holding the graph
    of ``cfg.data`` already loaded here (``--algo auto`` planned on it), taken out of it and handed to ranks spawned
    here instead of loading it again (so that nothing else holds it while they train); ``clock``: the start-up clock
    ``--algo auto`` began (its load and planning), which ranks spawned here for the full graph continue."""

    if cfg.algo == "auto":
        return _run_auto(cfg, graph, keep_model=keep_model, callbacks=callbacks)
    env = env_context(cfg.device)
    if cfg.sampler is not None:
        if cfg.nproc == 1 and env is None:
            return train_worker(None, cfg, graph, keep_model, callbacks)
        return launch_ranks(train_worker, cfg, graph, keep_model, callbacks if env else spawnable(callbacks))[0]
    if cfg.task == "link" and not one_process(cfg.algo):
        if graph is not None and env is None:
            raise GridGnnError("--task link with spawned full-graph ranks reads its graph from --data SPEC; a graph in "
                               "memory trains with --algo serial or --sampler (or save it: gridgnn.graph.save_npz, "
                               "then data='npz:FILE')")
        return launch_checked(train_worker, cfg, graph, keep_model, callbacks if env else spawnable(callbacks),
                               one_load=False)[0]
    if one_process(cfg.algo):
        require_one_process(env)
        return train_worker(None, cfg, graph, keep_model, callbacks)
    return launch_checked(train_worker, cfg, graph, keep_model, callbacks if env else spawnable(callbacks),
                           loaded=loaded, clock=clock)[0]


def _run_auto(cfg: TrainConfig, graph=None, *, keep_model: bool = False, callbacks=()):
    r"""``--algo auto``: plan the run (:func:`~gridgnn.train.planning.resolve_auto`), train the pick, and record the
    prediction next to the measurement in ``summary.json`` (``plan``: the pick, its predicted step time, the
    number of candidates, the profile). Every rank of a torchrun/srun job plans alike (deterministic: the memory
    check that depends on each node's free memory is left to the trainer's guard there)."""

    profile = load_profile(cfg.profile)
    env = env_context(cfg.device)
    # under torchrun/srun every rank plans alike: the same graph, profile and arithmetic, and no memory measured
    # on its own node (the trainer's memory guard still refuses a pick that cannot fit)
    progress = Progress(0, what="--algo auto: planning", unit="configurations",
                        show=not cfg.quiet and (env is None or env.rank == 0))
    clock = StartupClock()
    try:
        planned = [planned_graph(cfg, graph)]
        clock.lap("load")
        picked, row, count = resolve_auto(cfg, planned[0], profile=profile, check_memory=env is None,
                                          progress=progress)
        clock.lap("plan")
    finally:
        progress.close()
    if not cfg.quiet and (env is None or env.rank == 0):
        dropped = f"; --overlap: {picked.algo} has none" if cfg.overlap and not picked.overlap else ""
        print(f"--algo auto: {row['name']} on {cfg.nproc} processes (predicted {row['predicted_step_s'] * 1e3:.1f} ms "
              f"per step, the fastest of {count} configurations; profile {profile.name}{dropped})", flush=True)
    if graph is not None or env is not None or one_process(picked.algo):
        planned.clear()  # this process (or each rank of a job) trains on its own graph: not kept meanwhile
    out = run(picked, graph, keep_model=keep_model, callbacks=callbacks, loaded=planned, clock=clock)  # (spawned ranks: shards of
    # the graph planned on, which launch_checked takes out of the list: one load, not held while they train)
    if out is None:
        return None
    summary = out.summary if keep_model else out
    summary["plan"] = {"algo": "auto", "picked": row["config"], "name": row["name"],
                       "predicted_step_s": row["predicted_step_s"], "measured_step_s": summary["epoch_time_median_s"],
                       "candidates": count, "profile": profile.name, "fit": profile.fit}
    # the config as asked (every field the pick set, and the profile): gridgnn train --config plans it again
    summary["config"] = dict(summary.get("config", {}), **{k: getattr(cfg, k) for k in (*row["config"], "overlap")},
                             profile=cfg.profile)
    if cfg.out is not None:  # the folder again under its lock (the run released it after its last output)
        lock = OutLock(cfg.out, quiet=True)
        try:
            write_json(os.path.join(cfg.out, "summary.json"), summary)
        finally:
            lock.release()
    return out
