r"""``--algo serial``: the reference. One process, no ``torch.distributed``: the block-row distributed graph
with one block and one stage (:mod:`gridgnn.parallel.blockrow`), so the serial primitives are the very code the
distributed ones run on each block. Checked against PyG ``GCNConv`` / ``GATConv`` in ``tests/nn``."""
from __future__ import annotations

import scipy.sparse as sp
import torch

from ..partition import RowPartition
from .base import RowBlockPlan
from .blockrow import BlockRowGraph


def build_serial(mat: sp.csr_matrix, *, dtype=torch.float64, device="cpu") -> RowBlockPlan:
    """The serial plan on the normalized matrix ``mat`` (rows = destinations)."""
    rows = RowPartition.identity(mat.shape[0], 1)
    return RowBlockPlan("serial", BlockRowGraph(None, mat, rows, 0, dtype=dtype, device=device), rows, 0, "p")
