"""Vertex partitions, permutations and layouts."""
from .layout import Layout, RowPartition, even_bounds
from .permute import (balanced_permutation, block_nnz, double_permutation, make_permutations, nnz_max_over_mean,
                      nnz_max_over_mean_used, permute_matrix, single_permutation)

__all__ = ["Layout", "RowPartition", "even_bounds",
           "single_permutation", "double_permutation", "balanced_permutation", "make_permutations",
           "permute_matrix", "block_nnz", "nnz_max_over_mean", "nnz_max_over_mean_used"]
