"""Distributed algorithms (one module each) behind one interface: a :class:`Plan` on each rank."""
from .base import Plan, RowBlockPlan, is_symmetric
from .blockrow_1d import build_1d
from .blockrow_15d import build_15d
from .registry import ALGORITHMS, Algorithm, algorithm

ALGOS = tuple(ALGORITHMS)
GRID_OF = {a.name: a.grid for a in ALGORITHMS.values() if a.grid != "single"}
ROW_BLOCK_ALGOS = tuple(a.name for a in ALGORITHMS.values() if a.row_partitioned and a.grid != "single")


def build_plan(algo: str, comm, source, dims, *, rows=None, dtype, device, block_rows: int = 0, program=None):
    r"""The :class:`Plan` of ``algo`` on this rank. Block-row algorithms take the partition ``rows`` (whose
    permutation is the source's); 2D/3D/Plexus lay out equal blocks of the source's permutations; Plexus lays
    out the node tensors after the model's ``program`` (its trace)."""
    if algo in ROW_BLOCK_ALGOS:
        sa = algo.endswith("-sa")
        build = build_1d if GRID_OF[algo] == "1d" else build_15d
        return build(comm, source, rows, sparsity_aware=sa, dtype=dtype, device=device)
    if algo in ("2d", "3d"):
        from .summa import SummaPlan

        return SummaPlan(algo, comm, source, dims, dtype=dtype, device=device)
    if algo == "plexus":
        from .plexus import PlexusPlan

        return PlexusPlan(comm, source, dims, program=program, dtype=dtype, device=device, block_rows=block_rows)
    raise ValueError(f"unknown algorithm {algo!r}")


__all__ = ["ALGORITHMS", "ALGOS", "Algorithm", "GRID_OF", "ROW_BLOCK_ALGOS", "Plan", "algorithm", "RowBlockPlan", "build_1d", "build_15d", "build_plan",
           "is_symmetric"]
