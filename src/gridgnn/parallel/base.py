"""What every distributed algorithm hands to the models and the trainer."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ..partition import RowPartition
from .rowblock import BlockRowSpMM, DistAggregation


@dataclass
class RowBlockPlan:
    r"""A block-row algorithm instantiated on this rank.

    Attributes:
        name: the ``--algo`` name.
        aggregate: ``x_local ↦ (M x)_local`` with autograd.
        rows: the block-row partition (new labels).
        my_block: the block of rows this rank holds (``x_local`` = rows ``rows.block(my_block)``).
        block_axis: the axis along which blocks differ; weight gradients and metrics are summed along it
            (replicas along other axes hold identical values and identical gradients).
    """

    name: str
    aggregate: DistAggregation
    rows: RowPartition
    my_block: int
    block_axis: str

    @property
    def local_slice(self) -> slice:
        return self.rows.block(self.my_block)


def make_aggregation(comm, mat: sp.csr_matrix, rows: RowPartition, *, symmetric: bool, **kw) -> DistAggregation:
    r"""Forward engine on :math:`M`, backward engine on :math:`M^\mathsf{T}` (shared when symmetric)."""
    fwd = BlockRowSpMM(comm, mat, rows, **kw)
    bwd = fwd if symmetric else BlockRowSpMM(comm, sp.csr_matrix(mat.T), rows, **kw)
    return DistAggregation(fwd, bwd)


def is_symmetric(mat: sp.csr_matrix) -> bool:
    d = (mat - mat.T).tocsr()
    return d.nnz == 0 or bool(np.abs(d.data).max() == 0)
