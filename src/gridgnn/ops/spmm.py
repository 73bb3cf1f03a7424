r"""Local single-device kernels: sparse × dense products with a named semiring.

.. math:: Y_i = \bigoplus_{j : M_{ij} \neq 0} M_{ij} \otimes X_j

``"sum"`` is the ordinary SpMM (torch sparse CSR, cuSPARSE/MKL underneath); ``"mean"`` divides by the number
of stored entries of the row; ``"max"``/``"min"`` reduce ``M_ij · X_j`` elementwise (empty rows give 0).
Distributed algorithms call :func:`spmm` on their local blocks and never build an n×n dense tensor.
"""
from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp
import torch

warnings.filterwarnings("ignore", message=".*Sparse CSR tensor support is in beta.*")
warnings.filterwarnings("ignore", message=".*Sparse invariant checks are implicitly disabled.*")

SEMIRINGS = ("sum", "mean", "max", "min")


def to_torch_csr(mat: sp.spmatrix, *, dtype=torch.float64, device="cpu") -> torch.Tensor:
    """A SciPy matrix as a torch sparse CSR tensor (int64 indices)."""
    mat = sp.csr_matrix(mat)
    return torch.sparse_csr_tensor(
        torch.from_numpy(mat.indptr.astype(np.int64)),
        torch.from_numpy(mat.indices.astype(np.int64)),
        torch.from_numpy(mat.data.astype(np.float64)).to(dtype),
        size=mat.shape,
    ).to(device)


def spmm(mat: torch.Tensor, x: torch.Tensor, semiring: str = "sum") -> torch.Tensor:
    r"""``mat`` (sparse CSR, m × k) ⊗ ``x`` (dense, k × f) → dense m × f under ``semiring``."""
    if semiring == "sum":
        if mat._nnz() == 0:
            return x.new_zeros((mat.shape[0], x.shape[1]))
        return torch.sparse.mm(mat, x)
    if semiring not in SEMIRINGS:
        raise ValueError(f"unknown semiring {semiring!r}; choose one of {SEMIRINGS}")
    crow, col, val = mat.crow_indices(), mat.col_indices(), mat.values()
    counts = crow[1:] - crow[:-1]
    row = torch.repeat_interleave(torch.arange(mat.shape[0], device=x.device), counts)
    msg = val.unsqueeze(1) * x[col]
    out = x.new_zeros((mat.shape[0], x.shape[1]))
    if semiring == "mean":
        out.index_add_(0, row, msg)
        return out / counts.clamp(min=1).unsqueeze(1).to(x.dtype)
    red = "amax" if semiring == "max" else "amin"
    idx = row.unsqueeze(1).expand_as(msg)
    return out.scatter_reduce(0, idx, msg, reduce=red, include_self=False)
