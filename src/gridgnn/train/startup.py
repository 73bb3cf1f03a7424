r"""Where a run's time goes before its first epoch: wall-clock seconds per stage, the summary's ``startup_s``.

A local launch begins the clock in the launching process (:func:`~gridgnn.train.launching.launch_checked`): the
checks before any rank starts (``checks``), the graph of a SPEC loaded or generated once (``load``), its shards
written for the ranks (``shard``); the clock travels to the ranks (:attr:`LaunchContext.startup
<gridgnn.distributed.launch.LaunchContext>`), where ``spawn`` is the time from the launch to the rank's first line
of set-up (the processes' start, their imports). Each rank then records its own set-up
(:func:`~gridgnn.train.rank_setup.setup_rank`): its data read and checked (``read``), the process group joined and a
layout made on rank 0 (``join``), the memory guard (``memory``), the plan with its local blocks and set-up
exchanges (``build``), the model (``model``), the optimizer and a checkpoint restored (``optimizer``). One process
(``--algo serial``) and a rank of a torchrun/srun job begin the clock at their own set-up. ``total`` is the sum: the
time from the first stage to the first epoch, on rank 0.

Where they differ: ``--task link`` reads and splits the whole graph on every rank first (``split``), and its test
graph's plan, the embeddings' directory and the pairs add to ``build``; ``--algo auto`` begins the clock with its own
``load`` and ``plan`` (the ranks it spawns for the full graph continue it); sampled minibatches record ``read`` (the
graph and the task's minibatches), ``join``, ``model`` (the sampling pipeline with the model) and ``optimizer``.
"""
from __future__ import annotations

import time


class StartupClock:
    """Seconds per stage, in the order first seen (a stage lapped twice adds up)."""

    def __init__(self, stages: dict | None = None, last: float | None = None):
        self.stages: dict[str, float] = dict(stages or {})
        self._last = time.time() if last is None else float(last)

    def lap(self, stage: str) -> None:
        """Close ``stage``: the time since the previous lap (or the clock's start) is its."""
        now = time.time()
        self.stages[stage] = self.stages.get(stage, 0.0) + max(0.0, now - self._last)
        self._last = now

    def handoff(self) -> dict:
        """What the spawned ranks continue from (plain data: it is pickled to them)."""
        return {"stages": dict(self.stages), "at": self._last}

    @classmethod
    def on_rank(cls, ctx) -> "StartupClock":
        """This rank's clock: the launcher's, continued with ``spawn``, where a local launch handed one over; else
        a clock that starts now."""
        given = None if ctx is None else getattr(ctx, "startup", None)
        if not given:
            return cls()
        clock = cls(given["stages"], last=given["at"])
        clock.lap("spawn")
        return clock

    def summary(self) -> dict:
        """``{stage: seconds, ..., "total": seconds}``, rounded to milliseconds."""
        out = {k: round(v, 3) for k, v in self.stages.items()}
        out["total"] = round(sum(self.stages.values()), 3)
        return out
