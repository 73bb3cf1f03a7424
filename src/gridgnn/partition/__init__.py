"""Vertex partitions, permutations and layouts."""
from .layout import Layout, RowPartition, even_bounds

__all__ = ["Layout", "RowPartition", "even_bounds"]
