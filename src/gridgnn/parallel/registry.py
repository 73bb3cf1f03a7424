r"""The algorithms, as data: every family file (:data:`FAMILY_MODULES`) defines its
:class:`~gridgnn.parallel.family.Family` object and its :class:`~gridgnn.parallel.family.Algorithm` specs, collected
here; what the trainer, the CLI, the byte and memory models and the planner ask of an ``--algo`` is a method of its
family (:mod:`gridgnn.parallel.family`), never a test of its name.

==========  ======  =========  ==========================================================================
``--algo``  grid    family     vertex blocks (``P`` processes, replication ``c``, mesh ``shape``)
==========  ======  =========  ==========================================================================
serial      single  block-row  1
1d, 1d-sa   1d      block-row  ``P`` row blocks (a row partition: graph partitioners apply)
1.5d(-sa)   1.5d    block-row  ``P/c`` row blocks, each replicated ``c`` times
2d          2d      summa      ``PR`` row blocks; adjacency shards ``PR × PC``
3d          3d      summa      ``X·Z`` blocks ``B(i, k)``; shards ``X·Z × Y``
plexus      3d      plexus     every axis cuts the vertices (``max(shape)``); shards ``V^c × V^a``
plexus-rs   3d      plexus     as plexus, node tensors held split over all three axes, sums reduce-scattered
edge        1.5d    edge       one row block on ``1 × P``, every node tensor replicated, the edges split by count
==========  ======  =========  ==========================================================================
"""
from __future__ import annotations

from importlib import import_module

from ..errors import GridGnnError
from ..plugins import import_object, is_import_path
from .checks import LayoutRules
from .family import FAMILIES, Algorithm, Family, add_family, family_named  # noqa: F401  (the registry's names)

#: the family files of the package, each defining a :class:`~gridgnn.parallel.family.Family` and its ``ALGORITHMS``
FAMILY_MODULES = ("blockrow", "summa", "plexus", "edge")

ALGORITHMS: dict[str, Algorithm] = {}
for _module in FAMILY_MODULES:
    for _spec in import_module(f"{__package__}.{_module}").ALGORITHMS:
        ALGORITHMS[_spec.name] = _spec
#: the algorithms of the package's family files, in their families' order (what ``gridgnn plan`` ranks: every rank
#: of a run resolves these names, where an algorithm registered in one process may be unknown to spawned ranks)
BUILTIN = tuple(ALGORITHMS)


def overlap_algorithms() -> tuple[str, ...]:
    """The algorithms whose transfers ``--overlap`` starts early (their spec says ``overlap``): the stage (panel)
    loops of 1d, 1.5d, 2d and 3d, and the sparsity-aware all-to-allv (the local block computes while the halo
    travels)."""
    return tuple(name for name, spec in ALGORITHMS.items() if spec.overlap)


def register(spec: Algorithm) -> Algorithm:
    """Make ``spec`` an ``--algo`` (its family's layouts, byte model and planner rules apply): an algorithm is one
    file that registers itself. Re-registering the same spec is allowed; another spec under a taken name is not, nor
    a builder or family of its own on the ``single`` grid (:attr:`Algorithm.one_process`: that grid trains the
    serial plan in the launching process)."""
    old = ALGORITHMS.get(spec.name)
    if old is not None and old != spec:
        raise ValueError(f"--algo {spec.name} is already registered")
    serial = ALGORITHMS.get("serial")
    if spec.one_process and serial is not None and (spec.build is not None or spec.family is not serial.family):
        raise GridGnnError(f"--algo {spec.name} is on the single grid, which trains the serial plan in the launching "
                           "process; a builder or family of its own takes a process grid (1d, 1.5d, 2d or 3d)")
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


def one_process(algo: str) -> bool:
    """:attr:`Algorithm.one_process` of the algorithm ``algo`` names; ``auto`` is a plan, not yet an algorithm:
    ``False``."""
    return algo != "auto" and algorithm(algo).one_process


def layout_rules(algo: str, *, double: bool = False) -> LayoutRules:
    """The rules of ``algo`` (``double``: its source has two vertex orders)."""
    spec = algorithm(algo)
    return spec.family.rules(spec, double=double)
