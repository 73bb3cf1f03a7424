"""Models composed of distributed primitives (no torch.distributed here), and the registry the trainer reads."""
from .dropout import hashed_dropout, hashed_edge_dropout, keep_mask
from .agnn import AGNN
from .gat import GAT
from .gcn import GCN
from .loss import masked_cross_entropy
from .sage import SAGE
from .va import VA

MODELS = {"gcn": GCN, "gat": GAT, "agnn": AGNN, "va": VA, "sage": SAGE}

__all__ = ["AGNN", "GAT", "SAGE", "VA", "GCN", "MODELS", "hashed_dropout", "hashed_edge_dropout", "keep_mask", "masked_cross_entropy"]
