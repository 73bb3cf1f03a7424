"""Models and layers (no torch.distributed here)."""
from .dropout import hashed_dropout, keep_mask
from .gcn import GCN
from .loss import masked_cross_entropy

__all__ = ["GCN", "hashed_dropout", "keep_mask", "masked_cross_entropy"]
