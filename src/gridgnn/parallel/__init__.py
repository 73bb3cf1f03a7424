"""Distributed algorithms (one module each) behind one interface: a :class:`Plan` on each rank."""
from .base import Plan, RowBlockPlan, is_symmetric
from .blockrow_1d import build_1d
from .blockrow_15d import build_15d
from .registry import ALGORITHMS, Algorithm, algorithm, register

ALGOS = tuple(ALGORITHMS)  # the built-in ones; registered algorithms are in ALGORITHMS


def build_plan(algo: str, comm, source, dims, *, rows=None, dtype, device, block_rows: int = 0, program=None):
    r"""The :class:`Plan` of ``algo`` on this rank: its registered builder, else its family's. Block-row algorithms
    take the partition ``rows`` (whose permutation is the source's); 2D/3D/Plexus lay out equal blocks of the
    source's permutations; Plexus lays out the node tensors after the model's ``program`` (its trace)."""
    spec = algorithm(algo)
    if spec.build is not None:
        return spec.build(spec, comm, source, dims, rows=rows, dtype=dtype, device=device, block_rows=block_rows,
                          program=program)
    if spec.family == "block-row":
        build = build_1d if spec.grid == "1d" else build_15d
        return build(comm, source, rows, sparsity_aware=spec.sparsity_aware, dtype=dtype, device=device)
    if spec.family == "summa":
        from .summa import SummaPlan

        return SummaPlan(algo, comm, source, dims, dtype=dtype, device=device)
    from .plexus import PlexusPlan

    return PlexusPlan(comm, source, dims, program=program, dtype=dtype, device=device, block_rows=block_rows,
                      scatter=spec.scatter)


__all__ = ["ALGORITHMS", "ALGOS", "Algorithm", "Plan", "algorithm", "register", "RowBlockPlan", "build_1d", "build_15d",
           "build_plan", "is_symmetric"]
