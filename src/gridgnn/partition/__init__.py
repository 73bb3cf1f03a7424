"""Vertex partitions, permutations and layouts."""
from .layout import BUILTIN_PARTITIONS, RowPartition, block_range, even_bounds
from .permute import (balanced_permutation, block_nnz, double_permutation, make_permutations, nnz_max_over_mean,
                      nnz_max_over_mean_used, permute_matrix, single_permutation)
from .partitioners import (METHODS, load_partition_file, partition_graph, partition_vector, repair_empty_parts,
                           write_partition_file)
from .quality import edge_cut, quality_report, send_recv_volumes, volume_matrix
from .refine import refine_max_volume

__all__ = ["BUILTIN_PARTITIONS", "RowPartition", "block_range", "even_bounds",
           "single_permutation", "double_permutation", "balanced_permutation", "make_permutations",
           "permute_matrix", "block_nnz", "nnz_max_over_mean", "nnz_max_over_mean_used",
           "METHODS", "partition_graph", "partition_vector", "load_partition_file", "write_partition_file",
           "repair_empty_parts", "volume_matrix", "send_recv_volumes", "edge_cut", "quality_report",
           "refine_max_volume"]
