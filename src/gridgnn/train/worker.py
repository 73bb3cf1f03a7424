r"""The one training loop: a *batch source* — the full graph laid out on the ranks
(:class:`~gridgnn.train.full_graph.FullGraph`) or sampled minibatches
(:class:`~gridgnn.train.minibatch.Minibatches`) — runs its *task* (node classification or link prediction) on this
rank, and this worker gives every combination the same optimizer and checkpoint restore, the same console, the same
:class:`~gridgnn.train.loop.RunLoop` (early stop, checkpoints, the recorder, an interrupt), the same gathering of
every rank's record and the same outputs and summary schema (:mod:`gridgnn.train.summary`).

A batch source answers: ``task`` (its ``parameters`` and ``replicated``), ``comm``, ``model``, ``plan`` (how a
checkpoint shards the parameters), ``dims``, ``ckpt`` and ``checkpoint_info``, ``startup`` (the start-up clock),
``notes``, ``original_ids``, ``node_types`` and ``breakdown`` (its ranks' records plot the compute and
each collective per rank); ``progress()`` (the console's count), ``line(record)``,
``epoch(epoch, opt, console)`` (one epoch's record), ``rank_record()``, ``gather(mine, logits)`` (every rank's
record and, asked, every vertex's logits on rank 0), ``summary(history, everyone, wall, resumed_from)`` and
``final(summary)``.
"""
from __future__ import annotations

import time

from .checkpoint import restore
from .config import TrainConfig
from .console import Console
from .full_graph import FullGraph
from .loop import RunLoop
from .minibatch import Minibatches
from .optim import make_optimizer


def batch_source(cfg: TrainConfig):
    """The batch source class of ``cfg``: sampled minibatches with ``--sampler``, else the full graph."""
    return Minibatches if cfg.sampler is not None else FullGraph


def train_worker(ctx, cfg: TrainConfig, graph=None, keep_model: bool = False, callbacks=(), *,
                 return_state: bool = False):
    """Train ``cfg``'s task on its batch source on this rank (``ctx`` = ``None``: one process; ``graph``: a graph
    in memory instead of ``cfg.data``). Returns the summary on rank 0 (``keep_model``: a
    :class:`~gridgnn.train.model_file.TrainOutput`, the summary and the trained parameters; ``return_state``: on
    every rank ``{"summary", "state", "history"}``, this rank's trained parameters in ``state``, for tests);
    ``callbacks``: called on rank 0 with each epoch's record."""
    t_start = time.perf_counter()
    source = batch_source(cfg)(ctx, cfg, graph)
    task, comm, model = source.task, source.comm, source.model
    opt = make_optimizer(cfg, list(model.parameters()) + task.parameters)
    if source.ckpt is not None:  # the model's shards and the task's parameters held whole, with the optimizer's state
        restore(model, opt, source.plan, source.ckpt, source.dims, task.replicated)
    lead = comm.grid.global_rank == 0
    console = Console(show=lead and not cfg.quiet, epochs=cfg.epochs, log_every=cfg.log_every, **source.progress())
    loop = RunLoop(cfg, comm=comm, plan=source.plan, model=model, opt=opt, dims=source.dims,
                   info=source.checkpoint_info, ckpt=source.ckpt, console=console, line=source.line,
                   callbacks=callbacks, replicated=task.replicated)
    for note in source.notes:  # the loader's silent choices, one line each
        console.write(note)
    source.startup.lap("optimizer")
    loop.run(lambda epoch: source.epoch(epoch, opt, console))
    with loop.outputs():
        everyone, logits = source.gather(source.rank_record(), bool(cfg.save_logits and cfg.out))
        params = loop.parameters(keep_model)
        for name, ps in task.replicated.items():  # whole on every rank: rank 0's are everyone's
            if params is not None:
                params[name] = [p.detach().cpu().clone() for p in ps]
        state = {"state": {k: v.detach().cpu().clone() for k, v in model.state_dict().items()},
                 "history": loop.history} if return_state else None
        if ctx is not None:  # the last collective is behind every rank: rank 0's outputs take what they take
            ctx.settle()
        if not lead:
            return {"summary": None, **state} if return_state else None
        summary = source.summary(loop.history, everyone, time.perf_counter() - t_start,
                                 None if source.ckpt is None else loop.start)
        loop.write(summary, params, logits=logits, original_ids=source.original_ids, node_types=source.node_types,
                   everyone=everyone if source.breakdown else None)
    if not cfg.quiet:
        print(source.final(summary) + (f"; outputs in {cfg.out}" if cfg.out else ""), flush=True)
    if return_state:
        return {"summary": summary, **state}
    return loop.result(summary, params, keep_model)
