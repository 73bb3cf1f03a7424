"""The models' loss (a local kernel, kept in :mod:`gridgnn.ops` so the algorithms can use it too)."""
from ..ops.loss import masked_cross_entropy

__all__ = ["masked_cross_entropy"]
