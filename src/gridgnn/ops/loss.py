r"""Masked cross-entropy whose value equals the serial loss: each rank sums over its own labelled rows and
divides by the *global* number of labelled rows, so summing over row blocks gives the serial mean."""
from __future__ import annotations

import torch
import torch.nn.functional as F


def masked_cross_entropy(logits: torch.Tensor, y: torch.Tensor, mask: torch.Tensor, global_count: int
                         ) -> torch.Tensor:
    if global_count <= 0:
        raise ValueError("no labelled training nodes")
    if not bool(mask.any()):
        return logits.sum() * 0.0
    return F.cross_entropy(logits[mask], y[mask], reduction="sum") / global_count
