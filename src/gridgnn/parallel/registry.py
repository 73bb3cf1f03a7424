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
plexus-rs   3d      Plexus     as plexus, node tensors held split over all three axes, sums reduce-scattered
==========  ======  =========  ==========================================================================
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Algorithm:
    """One ``--algo``: its process grid, its family of layouts (``block-row``, ``summa``, ``plexus``: one file of
    distributed primitives each under ``parallel/``), the paper it follows. ``build``: the plan's builder on this
    rank, ``build(spec, comm, source, dims, *, rows, dtype, device, block_rows, program)`` (default: the family's
    own, :func:`gridgnn.parallel.build_plan`); an algorithm of another file registers with :func:`register`.
    ``scatter`` (Plexus): node tensors are held split over the third axis and the partial sums of ``linear`` and
    ``spmm`` are reduce-scattered, not all-reduced (:class:`~gridgnn.partition.layout.PlexusNodeLayout`)."""

    name: str
    grid: str
    family: str
    sparsity_aware: bool = False
    scatter: bool = False
    paper: str = ""
    build: Callable | None = None

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

    @property
    def builtin_like(self) -> str:
        """The built-in algorithm with this one's grid, family and fetch (what the GCN memory model reads)."""
        if self.family == "block-row":
            return {"single": "serial", "1d": "1d", "1.5d": "1.5d"}[self.grid] + ("-sa" if self.sparsity_aware
                                                                                 and self.grid != "single" else "")
        if self.family == "plexus":
            return "plexus-rs" if self.scatter else "plexus"
        return self.grid

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
    Algorithm("plexus-rs", "3d", "plexus", scatter=True, paper="Plexus Alg. 1, reduce-scatter aggregation"),
)}


#: the algorithms whose transfers ``--overlap`` starts early: the stage (panel) loops of 1d, 1.5d, 2d and 3d, and the
#: sparsity-aware all-to-allv (the local block computes while the halo travels)
OVERLAP_ALGORITHMS = ("1d", "1d-sa", "1.5d", "1.5d-sa", "2d", "3d")


def register(spec: Algorithm) -> Algorithm:
    """Make ``spec`` an ``--algo`` (its family's layouts, byte model and planner rules apply): an algorithm is one
    file that registers itself. Re-registering the same spec is allowed; another spec under a taken name is not."""
    old = ALGORITHMS.get(spec.name)
    if old is not None and old != spec:
        raise ValueError(f"--algo {spec.name} is already registered")
    ALGORITHMS[spec.name] = spec
    return spec


#: algorithms resolved by import path (``--algo package.module:NAME``), keyed by that path
BY_IMPORT_PATH: dict = {}


def algorithm(name: str) -> Algorithm:
    """The algorithm ``name`` means: a registered name, or ``package.module:NAME`` — an :class:`Algorithm` in a
    module of your own, imported (and registered) on first use, on every rank alike. Only names the user gave are
    resolved: a ``--config`` file or a checkpoint naming an import path is refused unless the command line names it
    too (no code runs from data). Raises :class:`~gridgnn.errors.GridGnnError` with one line for an unknown name or
    a path that does not lead to an :class:`Algorithm`."""
    from ..errors import GridGnnError
    from ..plugins import import_object, is_import_path

    if name in ALGORITHMS:
        return ALGORITHMS[name]
    if name in BY_IMPORT_PATH:
        return BY_IMPORT_PATH[name]
    if not is_import_path(name):
        raise GridGnnError(f"--algo {name!r} is not available; choose one of {', '.join(ALGORITHMS)} (or an "
                           f"algorithm of your own by import path, package.module:NAME)")
    spec = import_object("--algo", name)
    if not isinstance(spec, Algorithm):
        raise GridGnnError(f"--algo {name}: {name.partition(':')[2]} is not a gridgnn.parallel.Algorithm")
    try:
        register(spec)  # its module may have registered it already
    except ValueError as exc:
        raise GridGnnError(f"--algo {name}: {exc} (by another algorithm)") from None
    BY_IMPORT_PATH[name] = spec
    return spec
