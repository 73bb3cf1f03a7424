"""Local single-device kernels: products on one sparsity pattern (edge values as tensors) and semiring SpMM."""
from .semiring import SEMIRINGS, semiring_backward, semiring_spmm

__all__ = ["SEMIRINGS", "semiring_backward", "semiring_spmm"]
