r"""Starting the ranks of a run or an inference here (spawned on this machine) or joining a torchrun/srun job:
what is refused before any rank starts (their memory, a graph smaller than the layout, callbacks that cannot
reach them), the graph handed over as shards written once (:mod:`~gridgnn.train.handover`), and what a failed or
interrupted launch leaves (:class:`TrainingFailed`; the finished epochs of an interrupted run kept)."""
from __future__ import annotations

import os
import pickle
import sys

from ..distributed.launch import env_context, launch
from ..distributed.machine import PYG_IMPORT_BYTES, RUNTIME_PRIVATE_BYTES, available_memory_bytes, check_spawn
from ..errors import GridGnnError, interrupt_signal
from ..graph import load_graph
from ..graph.safe_io import check_alloc
from ..graph.sharded import ShardedDataset
from ..graph.spec import DEFAULT_SPEC, sharded_dir, spec_sizes
from ..parallel.registry import one_process
from .checkpoint import CHECKPOINT
from .config import TrainConfig
from .handover import handed_over
from .outputs import clean_after_ranks, keep_interrupted, kept_note, out_dir_state
from .rank_layout import check_vertex_count
from .startup import StartupClock
from .summary import interrupted_summary


class TrainingFailed(GridGnnError):
    """A spawned training job ended with an error on some rank (``exit_status``: what ``gridgnn train`` exits with)."""

    def __init__(self, message: str, exit_status: int):
        super().__init__(message)
        self.exit_status = exit_status


def spawnable(callbacks) -> tuple:
    """Callbacks a spawned rank 0 can receive: picklable — a module-level function or an instance of a module-level
    class, not a lambda or a closure (checked before any rank starts)."""
    for cb in callbacks:
        try:
            pickle.dumps(cb)
        except Exception as exc:  # noqa: BLE001 - any pickling failure means the same thing here
            raise GridGnnError(f"the callback {cb!r} cannot be sent to the spawned ranks ({type(exc).__name__}): "
                               "use a module-level function or an instance of a module-level class") from None
    return callbacks


def api_failure(exc: "TrainingFailed") -> BaseException:
    """What the Python API raises for a spawned job that failed with ``exc``: a ``KeyboardInterrupt`` for a job
    interrupted by Ctrl-C (exit status 130), as in one process (a caller's ``except GridGnnError`` must not swallow
    the user's Ctrl-C); else ``exc``. (The CLI takes the exit status of ``exc`` itself: the launcher's line said
    it was interrupted.)"""
    return KeyboardInterrupt() if exc.exit_status == 128 + 2 else exc


def failed_launch(exc: SystemExit, what: str) -> "TrainingFailed":
    """The :class:`TrainingFailed` of a spawned job that ended with ``exc`` (the launcher has printed every rank's
    message)."""
    code = exc.code if isinstance(exc.code, int) else 1
    lines = getattr(exc, "lines", None)  # a LaunchFailed: what the launcher printed
    if lines:
        more = f" (and {len(lines) - 1} more line(s) above)" if len(lines) > 1 else ""
        return TrainingFailed(f"{what} failed (exit status {code}): {lines[0]}{more}", code)
    return TrainingFailed(f"{what} failed (exit status {code}); the ranks' messages are above", code)


def require_one_process(env) -> None:
    """``--algo serial`` runs in this process: refused as one rank of a launcher's larger job."""
    if env is not None and env.world_size > 1:
        raise GridGnnError("--algo serial runs one process, but the launcher started several")


def ranks_get_shards(cfg: TrainConfig) -> bool:
    """Whether the ranks of ``cfg``'s run receive its graph as shards the launching process writes
    (:func:`launch_checked`): full-graph node classification on ranks spawned here. One process, the ranks of a
    torchrun/srun job, link prediction's ranks and minibatch ranks hold the graph they load."""
    return (cfg.sampler is None and getattr(cfg, "task", "node") == "node" and not one_process(cfg.algo)
            and env_context(cfg.device) is None)


def launch_checked(worker, cfg: TrainConfig, graph, *args, dims: list[int] | None = None,
                    one_load: bool = True, loaded=None, clock=None) -> list:
    """:func:`launch_ranks` after refusing, before any rank starts, what cannot work when the ranks are spawned here
    (their memory, a graph smaller than the layout). A graph reaches ranks spawned here as shards written once
    (:mod:`~gridgnn.train.handover`; ``dims``: a model's widths, for inference): a graph in memory, and — with
    ``one_load`` — the graph of a ``--data`` SPEC, loaded (or generated) once here rather than by every rank, so
    that each rank holds only its blocks (a ``sharded:`` dataset is read by the ranks themselves); ``loaded``: a list
    holding that graph, loaded already (taken out of it). The start-up clock (:mod:`~gridgnn.train.startup`) begins
    here (``clock``: continues one a caller began) and travels to the ranks."""
    if env_context(cfg.device) is not None:  # this rank of a torchrun/srun job: its process holds the graph
        return launch_ranks(worker, cfg, graph, *args)
    clock = StartupClock() if clock is None else clock
    host_memory = available_memory_bytes("cpu")
    one_load = one_load and graph is None and sharded_dir(cfg.data) is None
    # the ranks import PyG only where they load a planetoid: SPEC themselves
    planetoid = graph is None and not one_load and (cfg.data or "").strip().lower().startswith("planetoid:")
    check_spawn(cfg.nproc, host_memory, per_process=RUNTIME_PRIVATE_BYTES + (PYG_IMPORT_BYTES if planetoid else 0))
    name = None
    if graph is None:
        _check_data_before_spawn(cfg, loaders=1 if one_load else cfg.nproc)
        clock.lap("checks")
        if one_load:
            graph = loaded.pop() if loaded else load_graph(cfg.data, seed=cfg.seed)  # once, for every rank
            name = cfg.data or "default"
            clock.lap("load")
    else:
        clock.lap("checks")
    with handed_over(cfg, graph, dims=dims, name=name) as given:
        graph = None  # the shards hold it now: not kept here while the ranks run
        if given is not None:  # the shards may lie in memory (a tmpfs TMPDIR): what is left for the ranks
            host_memory = available_memory_bytes("cpu")
            clock.lap("shard")
        return launch_ranks(worker, cfg, given, *args, host_memory=host_memory, startup=clock.handoff())


def launch_ranks(worker, cfg: TrainConfig, graph, *args, **kw) -> list:
    """:func:`~gridgnn.distributed.launch.launch` of ``worker(ctx, cfg, graph, *args)`` on ``cfg.nproc`` ranks;
    when it fails or is interrupted, the ranks' leftovers in ``--out`` are removed once they are gone
    (:func:`~gridgnn.train.outputs.clean_after_ranks`)."""

    existing = out_dir_state(cfg.out)
    launcher = env_context(cfg.device) is None  # (a torchrun/srun rank 0 keeps its epochs in its loop)
    if launcher and "startup" not in kw:  # the ranks' start-up clock begins at their launch
        kw["startup"] = StartupClock().handoff()
    try:
        return launch(worker, cfg.nproc, cfg, graph, *args, device=cfg.device, timeout_s=cfg.timeout_s,
                      collect=True, **kw)
    except BaseException as exc:
        if launcher:
            keep_if_interrupted(cfg, exc)
        clean_after_ranks(cfg.out, existing)
        raise


def keep_if_interrupted(cfg: TrainConfig, exc: BaseException) -> int:
    r"""After the ranks of a local launch that a signal interrupted (``exc``:
    :func:`~gridgnn.errors.interrupt_signal`) are gone: ``--out`` keeps the metrics of the epochs the run finished
    and a ``summary.json`` marked ``interrupted`` (:func:`~gridgnn.train.outputs.keep_interrupted`; its checkpoint,
    where ``--checkpoint-every`` wrote one, stays), with a line on stdout. One process (serial, or a rank of a
    torchrun/srun job) keeps its own in its training loop. Never raises: the interrupt stays what ends the run.
    Returns the epochs kept."""
    why = interrupt_signal(exc)
    if why is None or not cfg.out:
        return 0
    ckpt = CHECKPOINT if os.path.isfile(os.path.join(cfg.out, CHECKPOINT)) else None
    try:
        kept = keep_interrupted(cfg.out, lambda records: interrupted_summary(cfg, records, why, ckpt))
    except Exception as exc:  # noqa: BLE001 - a full disk, or anything else: the interrupt stays the run's end
        print(f"gridgnn: the finished epochs of the interrupted run could not be kept in {cfg.out}: {exc}",
              file=sys.stderr, flush=True)
        return 0
    if kept and not cfg.quiet:
        print(kept_note(cfg.out, kept, ckpt, cfg.checkpoint_every), flush=True)
    return kept


def _check_data_before_spawn(cfg: TrainConfig, loaders: int) -> None:
    """What the data spec tells without loading the graph (synthetic generators; a sharded dataset's checked
    ``meta.json``): a graph with fewer vertices than the layout has blocks, and ``loaders`` processes (this one,
    or every rank) each generating the whole synthetic graph on this machine beyond its memory."""
    data = (cfg.data or "").strip()
    if sharded_dir(data) is not None:
        n = ShardedDataset(sharded_dir(data)).n
    else:
        sizes = spec_sizes(cfg.data)
        if sizes is None:
            return
        n, gen_bytes = sizes
        who = f"{loaders} ranks each" if loaders > 1 else "this process"
        check_alloc(loaders * gen_bytes, f"{who} generating {cfg.data or DEFAULT_SPEC}")
    check_vertex_count(n, cfg.algo, cfg.nproc, cfg.replication, cfg.mesh_shape(cfg.nproc))
