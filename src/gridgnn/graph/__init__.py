"""Graph container, loaders, normalization and synthetic generators."""
from .graph import Graph, gcn_normalize

__all__ = ["Graph", "gcn_normalize"]
