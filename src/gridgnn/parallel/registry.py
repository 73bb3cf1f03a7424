r"""The algorithms, as data: what the trainer, the CLI, the byte and memory models ask of an ``--algo`` (its grid,
its family of layouts, how many vertex blocks it cuts) is written
here once, instead of as name checks spread over the callers.

==========  ======  =========  ==========================================================================
``--algo``  grid    family     vertex blocks (``P`` processes, replication ``c``, mesh ``shape``)
==========  ======  =========  ==========================================================================
serial      single  block-row  1
1d, 1d-sa   1d      block-row  ``P`` row blocks (a row partition: graph partitioners apply)
1.5d(-sa)   1.5d    block-row  ``P/c`` row blocks, each replicated ``c`` times
2d          2d      SUMMA      ``PR`` row blocks; adjacency shards ``PR × PC``
3d          3d      SUMMA      ``X·Z`` blocks ``B(i, k)``; shards ``X·Z × Y``
plexus      3d      Plexus     every axis cuts the vertices (``max(shape)``); shards ``V^c × V^a``
==========  ======  =========  ==========================================================================
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Algorithm:
    """One ``--algo``: its process grid, its family of layouts (``block-row``, ``summa``, ``plexus``: one file of
    distributed primitives each under ``parallel/``), the paper it follows."""

    name: str
    grid: str
    family: str
    sparsity_aware: bool = False
    paper: str = ""

    @property
    def takes_replication(self) -> bool:
        return self.grid == "1.5d"

    @property
    def takes_grid_shape(self) -> bool:
        return self.grid in ("2d", "3d")

    @property
    def row_partitioned(self) -> bool:
        """Laid out by a block-row partition (graph partitioners apply) rather than vertex permutations."""
        return self.family == "block-row"

    @property
    def traits(self) -> dict:
        """The :attr:`~gridgnn.parallel.base.Plan.TRAITS` of this family's plan (what a model asks of it)."""
        from .base import Plan, RowBlockPlan
        from .plexus import PlexusPlan
        from .summa import SummaPlan

        cls = {"block-row": RowBlockPlan, "summa": SummaPlan, "plexus": PlexusPlan}[self.family]
        return {name: getattr(cls, name) for name in Plan.TRAITS}

    def row_blocks(self, world: int, replication: int = 1) -> int:
        """Row blocks of a block-row algorithm: 1 (serial), ``P`` (1D), ``P/c`` (1.5D)."""
        if self.grid == "single":
            return 1
        return world if self.grid == "1d" else world // replication

    def vertex_blocks(self, world: int, replication: int, shape) -> int:
        """The most blocks any axis of the layout splits the vertices into (a graph needs this many vertices)."""
        if self.family == "block-row":
            return self.row_blocks(world, replication)
        if self.name == "2d":
            return shape[0]
        if self.name == "3d":
            return shape[0] * shape[2]
        return max(shape)

    def layout_blocks(self, shape) -> tuple[int, int]:
        """Row × column blocks of the adjacency shards of a permutation layout (balanced-perm, reports)."""
        if self.name == "2d":
            return shape[0], shape[1]
        if self.name == "3d":
            return shape[0] * shape[2], shape[1]
        return max(shape), max(shape)


ALGORITHMS = {a.name: a for a in (
    Algorithm("serial", "single", "block-row", paper="reference"),
    Algorithm("1d", "1d", "block-row", paper="CAGNET Alg. 1"),
    Algorithm("1d-sa", "1d", "block-row", sparsity_aware=True, paper="ICPP'24 Alg. 1"),
    Algorithm("1.5d", "1.5d", "block-row", paper="CAGNET Alg. 2"),
    Algorithm("1.5d-sa", "1.5d", "block-row", sparsity_aware=True, paper="ICPP'24 Alg. 2"),
    Algorithm("2d", "2d", "summa", paper="CAGNET Alg. 3"),
    Algorithm("3d", "3d", "summa", paper="CAGNET Split-3D"),
    Algorithm("plexus", "3d", "plexus", paper="Plexus Alg. 1"),
)}


def algorithm(name: str) -> Algorithm:
    """The registered algorithm ``name`` (a clear error for an unknown one)."""
    from ..errors import GridGnnError

    if name not in ALGORITHMS:
        raise GridGnnError(f"--algo {name!r} is not available; choose one of {', '.join(ALGORITHMS)}")
    return ALGORITHMS[name]
