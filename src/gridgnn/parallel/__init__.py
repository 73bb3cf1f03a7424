"""Distributed algorithms (one module each): autograd Functions over explicit layouts."""
from .base import RowBlockPlan, is_symmetric
from .p1d import build_1d
from .p15d import build_15d

ALGOS = ("serial", "1d", "1d-sa", "1.5d", "1.5d-sa")
GRID_OF = {"1d": "1d", "1d-sa": "1d", "1.5d": "1.5d", "1.5d-sa": "1.5d"}


def build_plan(algo: str, comm, mat, rows, *, symmetric: bool, dtype, device, semiring: str = "sum"):
    """The :class:`RowBlockPlan` of ``algo`` on this rank (``mat`` permuted to ``rows``' labels)."""
    sa = algo.endswith("-sa")
    build = build_1d if GRID_OF[algo] == "1d" else build_15d
    return build(comm, mat, rows, sparsity_aware=sa, symmetric=symmetric, dtype=dtype, device=device,
                 semiring=semiring)


__all__ = ["ALGOS", "GRID_OF", "RowBlockPlan", "build_1d", "build_15d", "build_plan", "is_symmetric"]
