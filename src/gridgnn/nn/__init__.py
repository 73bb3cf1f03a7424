"""Models composed of distributed primitives (no torch.distributed here), and the registry the trainer reads."""
from .dropout import hashed_dropout, hashed_edge_dropout, keep_mask
from .gat import GAT
from .gcn import GCN
from .loss import masked_cross_entropy

MODELS = {"gcn": GCN, "gat": GAT}

__all__ = ["GAT", "GCN", "MODELS", "hashed_dropout", "hashed_edge_dropout", "keep_mask", "masked_cross_entropy"]
