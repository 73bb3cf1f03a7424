r"""Models composed of distributed primitives (no torch.distributed here), the :class:`Model` base class a user's
own layer derives from, and the registry ``--model`` reads (:func:`register_model`, :func:`resolve_model`)."""
from .base import MODELS, Model, Option, parameter_group, register_model, resolve_model
from .dropout import hashed_dropout, hashed_edge_dropout, keep_mask
from .agnn import AGNN
from .gat import GAT
from .gatv2 import GATv2
from .gcn import GCN
from .gine import GINE
from .loss import masked_cross_entropy
from .rgcn import RGCN
from .sage import SAGE
from .va import VA

for _name, _cls in {"gcn": GCN, "gat": GAT, "agnn": AGNN, "va": VA, "sage": SAGE, "gine": GINE, "gatv2": GATv2,
              "rgcn": RGCN}.items():
    register_model(_name)(_cls)

__all__ = ["AGNN", "GAT", "GATv2", "GINE", "RGCN", "SAGE", "VA", "GCN", "MODELS", "Model", "Option", "parameter_group", "register_model", "resolve_model",
           "hashed_dropout", "hashed_edge_dropout", "keep_mask", "masked_cross_entropy"]
