r"""Masked cross-entropy whose value equals the serial loss: each rank sums over its own labelled rows and
divides by the *global* number of labelled rows, so summing over row blocks gives the serial mean."""
from __future__ import annotations

import torch
import torch.nn.functional as F


def labelled_rows(rows: torch.Tensor) -> torch.Tensor:
    """The positions of the labelled rows: ``rows`` itself (int64 positions) or the ``True`` entries of a bool mask
    (which reads the mask back from a device: a caller that steps many times keeps the positions instead)."""
    return rows.nonzero().reshape(-1) if rows.dtype == torch.bool else rows


def masked_cross_entropy(logits: torch.Tensor, y: torch.Tensor, rows: torch.Tensor, global_count: int
                         ) -> torch.Tensor:
    """The cross-entropy summed over the labelled ``rows`` (positions, or a bool mask) divided by
    ``global_count``, the labelled rows of every rank: nothing is read back from a device given positions."""
    if global_count <= 0:
        raise ValueError("no labelled training nodes")
    rows = labelled_rows(rows)
    return F.cross_entropy(logits.index_select(0, rows), y.index_select(0, rows), reduction="sum") / global_count
