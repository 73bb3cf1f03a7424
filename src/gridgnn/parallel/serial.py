r"""``--algo serial``: the reference. Plain torch on one process, no ``torch.distributed``:
:math:`Y = \hat M X` with ``torch.sparse.mm`` on a COO matrix and torch's own autograd."""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch

from ..partition import RowPartition
from .base import RowBlockPlan


class SerialAggregation:
    def __init__(self, mat: sp.csr_matrix, *, dtype=torch.float64, device="cpu"):
        coo = sp.coo_matrix(mat)
        idx = torch.from_numpy(np.vstack([coo.row, coo.col]).astype(np.int64))
        self.mat = torch.sparse_coo_tensor(idx, torch.from_numpy(coo.data).to(dtype), coo.shape).coalesce().to(device)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sparse.mm(self.mat, x)


def build_serial(mat: sp.csr_matrix, *, dtype=torch.float64, device="cpu") -> RowBlockPlan:
    n = mat.shape[0]
    return RowBlockPlan("serial", SerialAggregation(mat, dtype=dtype, device=device),
                        RowPartition.identity(n, 1), 0, "p")
