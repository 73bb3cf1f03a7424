r"""``--algo serial``: the reference. Plain torch on one process, no ``torch.distributed``:
:math:`Y = \hat M X` with ``torch.sparse.mm`` on CSR, backward :math:`\hat M^\mathsf{T} G` with a stored
transpose (torch's own COO backward transposes and coalesces every step, 5× slower here). The reference is
checked against PyG ``GCNConv`` in ``tests/nn/test_gcn_pyg.py``."""
from __future__ import annotations

import scipy.sparse as sp
import torch

from ..ops import to_torch_csr
from ..partition import RowPartition
from .base import RowBlockPlan


class _SpMM(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, mat, mat_t):
        ctx.mat_t = mat_t
        return torch.sparse.mm(mat, x)

    @staticmethod
    def backward(ctx, grad):
        return torch.sparse.mm(ctx.mat_t, grad), None, None


class SerialAggregation:
    def __init__(self, mat: sp.csr_matrix, *, dtype=torch.float64, device="cpu"):
        self.mat = to_torch_csr(mat, dtype=dtype, device=device)
        self.mat_t = to_torch_csr(sp.csr_matrix(mat.T), dtype=dtype, device=device)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return _SpMM.apply(x, self.mat, self.mat_t)


def build_serial(mat: sp.csr_matrix, *, dtype=torch.float64, device="cpu") -> RowBlockPlan:
    n = mat.shape[0]
    return RowBlockPlan("serial", SerialAggregation(mat, dtype=dtype, device=device),
                        RowPartition.identity(n, 1), 0, "p")
