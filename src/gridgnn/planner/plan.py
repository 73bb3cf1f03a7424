r"""The planner: every valid configuration of a graph, model and ``P``, ranked by predicted step time.

A *configuration* is an algorithm with its grid shape, replication and vertex order (:class:`Candidate`).
:func:`candidates` lists them all for ``P`` processes:

* ``P = 1``: ``serial``.
* ``1d``, ``1d-sa``: one per row partition (``row_partitions``, default ``random`` and ``metis``; ``metis`` where
  ``pymetis`` is installed).
* ``1.5d``, ``1.5d-sa``: every replication ``c ≥ 2`` dividing ``P`` (``c = 1`` is the 1D algorithm), per row
  partition. (``c > P/c`` leaves process columns without stages: valid, and ranked by what it costs.)
* ``2d``: every ordered factorization ``PR × PC = P``; ``3d``: every ordered ``X × Y × Z = P``; one per
  permutation of ``summa_orders`` (default ``random``).
* ``plexus``: every ordered ``X × Y × Z = P``, per vertex order of ``plexus_orders`` (default ``random`` and
  ``double-perm``).

Configurations a model cannot run are left out (a model that reads destination features on two vertex orders
outside Plexus, :attr:`~gridgnn.nn.base.Model.reads_destinations`), as are those with more vertex blocks than
the graph has vertices. Each is simulated (:mod:`gridgnn.planner.simulate`), priced with the time model
(:mod:`gridgnn.planner.timing`) and checked against memory (:func:`price`); :func:`rank_rows` sorts by predicted
time, those that fit in memory first; ties keep the listing order, so a plan is deterministic.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import GridGnnError

ROW_PARTITIONS = ("random", "metis")  # metis where pymetis is installed (default_row_partitions)
SUMMA_ORDERS = ("random",)
PLEXUS_ORDERS = ("random", "double-perm")


@dataclass(frozen=True)
class Candidate:
    """One configuration: ``--algo``, ``--grid`` (a tuple, ``None`` for block-row), ``--replication``,
    ``--partition``."""

    algo: str
    grid: tuple | None
    replication: int
    partition: str

    @property
    def name(self) -> str:
        from ..parallel.registry import algorithm

        spec = algorithm(self.algo)
        return " ".join([self.algo, *spec.family.label(spec, self.replication, self.grid), self.partition])

    @classmethod
    def from_options(cls, options: dict) -> "Candidate":
        """The inverse of :meth:`options`."""
        grid = options.get("grid")
        return cls(options["algo"], tuple(int(v) for v in grid.split(",")) if grid else None,
                   int(options.get("replication", 1)), options.get("partition", "random"))

    def options(self) -> dict:
        """The :class:`~gridgnn.train.config.TrainConfig` fields of this configuration."""
        return {"algo": self.algo, "grid": ",".join(map(str, self.grid)) if self.grid else None,
                "replication": self.replication, "partition": self.partition}

    def flags(self) -> list[str]:
        from ..parallel.registry import algorithm

        out = ["--algo", self.algo, "--partition", self.partition]
        if algorithm(self.algo).takes_replication:
            out += ["--replication", str(self.replication)]
        if self.grid:
            out += ["--grid", ",".join(map(str, self.grid))]
        return out


def default_row_partitions() -> tuple[str, ...]:
    """:data:`ROW_PARTITIONS` that can run here: ``metis`` only where ``pymetis`` is installed (the ``partition``
    extra)."""
    import importlib.util

    return tuple(p for p in ROW_PARTITIONS if p != "metis" or importlib.util.find_spec("pymetis") is not None)


def candidates(world: int, *, n: int | None = None, reads_destinations: bool = False,
               row_partitions=None, summa_orders=SUMMA_ORDERS, plexus_orders=PLEXUS_ORDERS,
               algos=None) -> list[Candidate]:
    """Every valid configuration for ``world`` processes (module docstring), in a fixed order. ``n``: the
    graph's vertices (configurations with more vertex blocks are left out); ``algos``: only these."""
    from ..parallel.registry import ALGORITHMS, BUILTIN, algorithm

    if world < 1:
        raise GridGnnError(f"need at least one process, got {world}")
    if row_partitions is None:
        row_partitions = default_row_partitions()
    out: list[Candidate] = []
    for spec in (ALGORITHMS[name] for name in BUILTIN):  # plexus-rs: GCN-like models (the others' traces refuse it)
        if algos is not None and spec.name not in algos:
            continue
        found = spec.family.candidates(spec, world, row_partitions=tuple(row_partitions),
                                       summa_orders=tuple(summa_orders), plexus_orders=tuple(plexus_orders),
                                       reads_destinations=reads_destinations)
        out += [Candidate(spec.name, grid, c, p) for grid, c, p in found]
    if n is not None:
        out = [c for c in out if algorithm(c.algo).vertex_blocks(world, c.replication, c.grid or (world,)) <= n]
    return out


def price(cand: Candidate, vol, profile, *, nproc: int, memory: list | None = None,
          available_bytes: int | None = None, overlap: bool = False) -> dict:
    r"""One row of a plan: the candidate's simulated step (``vol``, a
    :class:`~gridgnn.planner.simulate.StepVolume`) priced by ``profile``, and its per-rank peak memory estimate
    (``memory``, ``None`` where it is not known) against ``available_bytes`` (all the
    ranks of a CPU node share it; a device per rank: per rank). Keys: ``name``, ``config`` (the options),
    ``predicted_step_s``, ``comp_s``, ``comm_s`` (the unfitted terms), ``comm_by_phase_s``, ``step_bytes_moved``,
    ``max_rank_messages``, ``peak_memory_bytes``, ``fits``. ``overlap``: priced with ``--overlap`` where the
    candidate's algorithm has it (its spec's ``overlap``; its ``config`` then says ``overlap``)."""
    import numpy as np

    from .timing import predict_step

    threads = max(1, profile.cores // profile.node_ranks(max(1, nproc))) if profile.cores else 1
    from ..parallel.registry import algorithm

    overlap = bool(overlap) and algorithm(cand.algo).overlap
    with np.errstate(over="ignore", invalid="ignore"):  # (a profile's numbers too large: refused just below)
        pred = predict_step(profile, vol.detail, vol.axes, vol.work, vol.world, threads, overlap=overlap,
                            **vol.overlap_facts())
    if not math.isfinite(pred["time_s"]):
        raise GridGnnError(f"profile {profile.name!r} prices {cand.name} at {pred['time_s']} s: its numbers are too "
                           "large for a step time")
    fits = True
    if memory is not None and available_bytes is not None:
        fits = node_need(profile, memory) <= available_bytes
    msgs = np.zeros(vol.world)
    for v in vol.bytes.values():
        msgs += v[2]
    config = dict(cand.options(), **({"overlap": True} if overlap else {}))
    return {"name": cand.name + (" overlap" if overlap else ""), "config": config,
            "predicted_step_s": pred["time_s"],
            "comp_s": pred["comp_s"], "comm_s": pred["comm_s"], "comm_by_phase_s": pred["comm_by_phase_s"],
            "step_bytes_moved": float(sum(vol.moved_by_phase().values())),
            "max_rank_messages": int(msgs.max()) if vol.world else 0,
            "peak_memory_bytes": None if memory is None else int(max(memory)), "fits": bool(fits)}


def node_need(profile, memory) -> float:
    r"""The memory one node needs for ranks of these estimated peaks (bytes, each with the runtime): on a CPU node
    (``profile.cores``) its :math:`N` ranks share the node's memory and the runtime's shared pages :math:`S` once,
    :math:`N(\max - S) + S`, the trainer's guard (:func:`~gridgnn.planner.memory.check_fits`), so that a pick that
    fits passes it; a GPU's memory is its rank's own."""
    from ..distributed.machine import RUNTIME_SHARED_BYTES

    peak = max(memory)
    if not profile.cores:
        return peak
    ranks = profile.node_ranks(len(memory))
    shared = RUNTIME_SHARED_BYTES if peak >= RUNTIME_SHARED_BYTES else 0
    return ranks * (peak - shared) + shared


def rank_rows(rows: list[dict]) -> list[dict]:
    """Sort priced rows: those that fit in memory first, then by predicted time, then by the model's unfitted
    compute and communication (a tie of the fitted times); the rest keep the listing order. Adds ``rank`` (1 = the
    pick)."""
    order = sorted(range(len(rows)), key=lambda i: (not rows[i]["fits"], rows[i]["predicted_step_s"],
                                                    rows[i]["comp_s"] + rows[i]["comm_s"], i))
    out = [dict(rows[i], rank=k + 1) for k, i in enumerate(order)]
    return out
