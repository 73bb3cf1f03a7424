"""Local single-device kernels."""
from .spmm import SEMIRINGS, spmm, to_torch_csr

__all__ = ["SEMIRINGS", "spmm", "to_torch_csr"]
