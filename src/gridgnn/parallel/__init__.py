"""Distributed algorithms (one module each) behind one interface: a :class:`Plan` on each rank."""
from .base import Plan, is_symmetric
from .blockrow import RowBlockPlan, build_1d, build_15d
from .family import Family
from .registry import ALGORITHMS, Algorithm, algorithm, one_process, register

ALGOS = tuple(ALGORITHMS)  # the built-in ones; registered algorithms are in ALGORITHMS


def build_plan(algo: str, comm, source, dims, *, rows=None, dtype, device, block_rows: int = 0, program=None):
    r"""The :class:`Plan` of ``algo`` on this rank: its registered builder, else its family's. Block-row algorithms
    take the partition ``rows`` (whose permutation is the source's); 2D/3D/Plexus lay out equal blocks of the
    source's permutations; Plexus lays out the node tensors after the model's ``program`` (its trace)."""
    spec = algorithm(algo)
    build = spec.build or spec.family.build
    return build(spec, comm, source, dims, rows=rows, dtype=dtype, device=device, block_rows=block_rows,
                 program=program)


__all__ = ["ALGORITHMS", "ALGOS", "Algorithm", "Family", "Plan", "algorithm", "one_process", "register", "RowBlockPlan", "build_1d", "build_15d",
           "build_plan", "is_symmetric"]
