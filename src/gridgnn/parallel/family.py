r"""A *family* of layouts as one object: what the trainer, the CLI, the layout checker, the byte, time and memory
models and the planner ask of an ``--algo``, answered by the family file that lays it out.

Each family file (``blockrow.py``, ``summa.py``, ``plexus.py``, ``edge.py``) defines one :class:`Family` object and
the :class:`Algorithm` specs it lays out; :mod:`gridgnn.parallel.registry` collects them.
A caller never tests a family's or an algorithm's name: it calls a method of ``algorithm(name).family``, whose
first argument is the algorithm's spec (its grid kind, sparsity-aware fetch, reduce-scattered sums). The memory
model is the family's own (:meth:`Family.memory`, written into a :class:`~gridgnn.parallel.footprint.Ledger`;
:func:`gridgnn.planner.memory.estimate_rank_memory` adds what every family shares); the byte and time models of
the planner (a room above this one) price each family's programs (:func:`gridgnn.planner.primitives.volume_model`).
A family that lays data out like another (``edge``: the block-row one) subclasses it and gives its own numbers (the
stages and edges of each rank).

=====================  ==================================================================================
method                 what it answers
=====================  ==================================================================================
``build``              this rank's :class:`~gridgnn.parallel.base.Plan`
``plan_class``         the plan's class (its :attr:`~gridgnn.parallel.base.Plan.TRAITS`)
``rules``              the :class:`~gridgnn.parallel.checks.LayoutRules` a model's trace is checked against
``mesh_shape``         the process grid for ``P`` processes (``--replication``, ``--grid``)
``vertex_blocks``      the most blocks an axis cuts the vertices into; ``layout_blocks``: adjacency shards
``row_blocks``         block-row families: the row blocks of the partition (graph partitioners apply)
``grad_members``       ranks the trainer's gradient all-reduce spans (0: the primitives sum the gradients)
``memory``             each rank's bytes per component (the memory guard, ``plan``'s memory column)
``candidates``         the configurations ``gridgnn plan`` and ``--algo auto`` rank
=====================  ==================================================================================

A family written outside the package subclasses :class:`Family` and registers its algorithms with
:func:`~gridgnn.parallel.registry.register`: training, ``simulate`` and the memory guard then run it with no edit
elsewhere (``gridgnn plan`` ranks the package's own families, whose names every spawned rank knows).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Callable

from ..errors import GridGnnError
from .base import Plan


class Family(ABC):
    """The interface of a family of layouts (see the module docstring). ``name``: as the docs and reports say it;
    ``order``: where its algorithms are listed (help, plans)."""

    name: str = ""
    order: int = 100
    #: laid out by a block-row partition of the vertices (graph partitioners apply) rather than permutations
    row_partitioned: bool = False

    @abstractmethod
    def plan_class(self, spec):
        """The class of the plan :meth:`build` returns."""

    def traits(self, spec) -> dict:
        """The :attr:`~gridgnn.parallel.base.Plan.TRAITS` of the plan (what a model's trace must see)."""
        cls = self.plan_class(spec)
        return {name: getattr(cls, name) for name in Plan.TRAITS}

    @abstractmethod
    def build(self, spec, comm, source, dims, *, rows, dtype, device, block_rows, program):
        """This rank's :class:`~gridgnn.parallel.base.Plan` of ``spec``."""

    @abstractmethod
    def rules(self, spec, *, double: bool = False):
        """The :class:`~gridgnn.parallel.checks.LayoutRules` of ``spec`` (``double``: two vertex orders)."""

    # ------------------------------------------------------------------ the process grid
    def takes_replication(self, spec) -> bool:
        """Whether ``--replication`` applies."""
        return False

    def takes_grid_shape(self, spec) -> bool:
        """Whether ``--grid`` applies."""
        return False

    def mesh_shape(self, spec, world: int, *, replication: int = 1, grid=None) -> tuple[int, ...]:
        """The mesh of ``spec.grid`` for ``world`` processes (``grid``: the ``--grid`` tuple, or ``None``: the most
        square or cubic one where ``--grid`` applies)."""
        from ..distributed.grid import default_shape, grid_shape

        if grid is None and self.takes_grid_shape(spec):
            return default_shape(spec.grid, world)
        return grid_shape(spec.grid, world, replication=replication, shape=grid)

    # ------------------------------------------------------------------ blocks
    def row_blocks(self, spec, world: int, replication: int = 1) -> int:
        """Row blocks of the partition of a row-partitioned family."""
        raise GridGnnError(f"{spec.name} is not laid out by a row partition")

    @abstractmethod
    def vertex_blocks(self, spec, world: int, replication: int, shape) -> int:
        """The most blocks any axis of the layout splits the vertices into (a graph needs this many vertices)."""

    def layout_blocks(self, spec, shape) -> tuple[int, int]:
        """Row × column blocks of the adjacency shards of a permutation layout (balanced-perm, reports)."""
        raise GridGnnError(f"{spec.name} is not laid out by vertex permutations")

    @abstractmethod
    def grad_members(self, spec, world: int, replication: int, shape) -> int:
        """Ranks that hold distinct shares of each parameter's gradient (the trainer sums them over the plan's
        ``grad_axes``); 0: the primitives sum the gradients themselves."""

    # ------------------------------------------------------------------ the planner
    def memory(self, spec, ctx, shape, *, row_bounds, ranks) -> dict:
        """``{rank: (ledger, nonzeros read at set-up)}`` for the ``ranks`` asked: what each rank of ``spec`` on
        ``shape`` holds (adjacency, features, parameters, activations) and the largest buffers and temporaries of
        a step, written into a :class:`~gridgnn.parallel.footprint.Ledger` from the configuration ``ctx``
        (:class:`~gridgnn.parallel.footprint.MemoryContext`; ``row_bounds``: a row-partitioned family's block
        bounds). A family without one is refused by the memory guard, with this message."""
        raise GridGnnError(f"{spec.name}: the {self.name} family states no memory model (Family.memory), so the "
                           f"memory guard cannot check it; subclass a family whose layout it shares")

    def candidates(self, spec, world: int, *, row_partitions, summa_orders, plexus_orders,
                   reads_destinations: bool) -> list:
        """The :class:`~gridgnn.planner.plan.Candidate` configurations of ``spec`` for ``world`` processes."""
        return []

    def label(self, spec, replication: int, grid) -> list[str]:
        """The words after the algorithm's name in a configuration's name (``c2``, ``2x2``)."""
        out = [f"c{replication}"] if self.takes_replication(spec) else []
        return out + (["x".join(map(str, grid))] if grid else [])

    def __repr__(self) -> str:
        return f"<family {self.name}>"


#: the families by name (each family file adds its object on import; :func:`family_named` looks one up)
FAMILIES: dict[str, Family] = {}


def add_family(family: Family) -> Family:
    """Make ``family`` known by its name (an :class:`Algorithm` may then name it as a string)."""
    old = FAMILIES.get(family.name)
    if old is not None and old is not family:
        raise ValueError(f"a layout family named {family.name!r} exists already")
    FAMILIES[family.name] = family
    return family


def family_named(name: str) -> Family:
    if name not in FAMILIES:  # (the package's __init__ has loaded the built-in ones: parallel.registry)
        raise GridGnnError(f"no layout family {name!r}; the families are {', '.join(FAMILIES)}")
    return FAMILIES[name]


@dataclass(frozen=True)
class Algorithm:
    """One ``--algo``: its process grid kind (``spec.grid``: ``single``, ``1d``, ``1.5d``, ``2d``, ``3d``), its
    :class:`Family` of layouts (an object, or the name of a built-in one: ``block-row``, ``summa``, ``plexus``,
    ``edge``), the paper it follows. ``build``: the plan's builder on this rank,
    ``build(spec, comm, source, dims, *, rows, dtype, device, block_rows, program)`` (default: the family's own,
    :meth:`Family.build`); an algorithm of another file registers with :func:`~gridgnn.parallel.registry.register`.
    ``sparsity_aware`` (block-row): fetch only the rows a block needs; ``scatter`` (Plexus): node tensors are held
    split over the third axis and the partial sums of ``linear`` and ``spmm`` are reduce-scattered
    (:class:`~gridgnn.partition.layout.PlexusNodeLayout`); ``overlap``: ``--overlap`` starts its transfers early;
    ``blocked_aggregation``: ``--blocked-aggregation`` applies."""

    name: str
    grid: str
    family: Family | str
    sparsity_aware: bool = False
    scatter: bool = False
    paper: str = ""
    build: Callable | None = None
    overlap: bool = False
    blocked_aggregation: bool = False

    def __post_init__(self):
        if isinstance(self.family, str):
            object.__setattr__(self, "family", family_named(self.family))

    @property
    def one_process(self) -> bool:
        """It trains in the launching process with no process group (its grid is ``single``: the serial reference)
        rather than on ranks of a launch."""
        return self.grid == "single"

    @property
    def takes_replication(self) -> bool:
        return self.family.takes_replication(self)

    @property
    def takes_grid_shape(self) -> bool:
        return self.family.takes_grid_shape(self)

    @property
    def row_partitioned(self) -> bool:
        """Laid out by a block-row partition (graph partitioners apply) rather than vertex permutations."""
        return self.family.row_partitioned

    @property
    def traits(self) -> dict:
        """The :attr:`~gridgnn.parallel.base.Plan.TRAITS` of this family's plan (what a model asks of it)."""
        return self.family.traits(self)

    def row_blocks(self, world: int, replication: int = 1) -> int:
        return self.family.row_blocks(self, world, replication)

    def vertex_blocks(self, world: int, replication: int, shape) -> int:
        return self.family.vertex_blocks(self, world, replication, shape)

    def layout_blocks(self, shape) -> tuple[int, int]:
        return self.family.layout_blocks(self, shape)

    def mesh_shape(self, world: int, *, replication: int = 1, grid=None) -> tuple[int, ...]:
        return self.family.mesh_shape(self, world, replication=replication, grid=grid)
