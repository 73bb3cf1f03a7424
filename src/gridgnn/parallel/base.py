"""What every distributed algorithm hands to the models and the trainer: a *plan* on this rank."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import torch

from ..nn import masked_cross_entropy
from ..partition import RowPartition
from .rowblock import BlockRowSpMM, DistAggregation
from .sharded_loss import sharded_argmax, sharded_cross_entropy


class Plan:
    r"""The interface of an algorithm on one rank.

    Attributes:
        name: the ``--algo`` name.
        comm: the communication layer.
        class_axis: mesh axis along which the logits' class columns are sharded (``None``: not sharded).
        copies: how many ranks hold each logits row (metrics summed over the world are divided by it).
        grad_axes: axes over which parameter gradients are summed (each rank holds a unique share).
    Methods every plan provides: ``input(x)`` (layer-0 input block from the full or sharded features),
    ``in_rows(l)``/``in_cols(l, f)`` (global rows / column range of layer ``l``'s input block),
    ``out_rows()``/``out_cols(c)`` (of the logits block), and ``layer(l, h, w, b)``.
    """

    class_axis = None

    def shard_nnz(self) -> list[int]:
        """nnz of each adjacency shard this rank holds (for the load-balance report)."""
        return []

    def _order(self, layer: int, side: str) -> np.ndarray:
        """Vertex order of layer ``layer``'s input (``side="in"``) or output: the source's column permutation
        feeds even layers and its row permutation receives them, the other way round for odd layers (Plexus
        §5.1; one order for a single permutation)."""
        even = layer % 2 == 0
        if side == "in":
            return self.source.perm_c if even else self.source.perm_r
        return self.source.perm_r if even else self.source.perm_c

    def param_slice(self, layer: int, kind: str) -> tuple[slice, ...]:
        """The part of layer ``layer``'s weight (``"w"``) or bias (``"b"``) this rank holds: all of it, unless
        the algorithm shards parameters (Plexus)."""
        return (slice(None),) * (2 if kind == "w" else 1)

    def loss(self, logits, y, mask, n_train: int) -> torch.Tensor:
        if self.class_axis is None:
            return masked_cross_entropy(logits, y, mask, n_train)
        c0, _ = self.out_cols(None)
        return sharded_cross_entropy(logits, y, mask, c0=c0, comm=self.comm, axis=self.class_axis, n_train=n_train)

    def predict(self, logits) -> torch.Tensor:
        if self.class_axis is None:
            return logits.argmax(dim=1)
        c0, _ = self.out_cols(None)
        return sharded_argmax(logits, c0=c0, comm=self.comm, axis=self.class_axis)


@dataclass
class RowBlockPlan(Plan):
    r"""A block-row algorithm (serial, 1D, 1.5D) on this rank: rows of every matrix split by ``rows``,
    all feature columns local, weights replicated.

    Attributes:
        aggregate: ``x_local ↦ (M x)_local`` with autograd.
        rows: the block-row partition (new labels); ``my_block``: the block this rank holds.
        block_axis: the axis along which blocks differ; weight gradients are summed along it (replicas
            along other axes hold identical values and identical gradients).
        copies: replication ``c`` (1.5D), else 1.
    """

    name: str
    aggregate: object
    rows: RowPartition
    my_block: int
    block_axis: str
    comm: object = None
    copies: int = 1
    source: object = None

    @property
    def local_slice(self) -> slice:
        return self.rows.block(self.my_block)

    @property
    def grad_axes(self):
        return self.block_axis

    def input(self, x: np.ndarray | None = None) -> np.ndarray:
        if self.source is not None:
            return self.source.node_rows("x", self.out_rows())
        return x[self.out_rows()]

    def out_rows(self) -> np.ndarray:
        return self.rows.perm[self.local_slice]

    def in_rows(self, layer: int) -> np.ndarray:
        return self.out_rows()

    def in_cols(self, layer: int, f: int) -> tuple[int, int]:
        return (0, f)

    def out_cols(self, c) -> tuple[int, int]:
        return (0, c)

    def shard_nnz(self) -> list[int]:
        fwd = getattr(self.aggregate, "fwd", None)
        return [fwd.local_nnz] if fwd is not None else []

    def layer(self, layer: int, h, w, b):
        r""":math:`\hat M H W + b`, aggregating the narrower of :math:`H` and :math:`HW` (``min(f_in, f_out)``
        columns: the wide input layer moves ``f_out``-wide rows); both orders give the same result."""
        h = self.aggregate(h @ w) if w.shape[1] < w.shape[0] else self.aggregate(h) @ w
        return h if b is None else h + b


def make_aggregation(comm, source, rows: RowPartition, my_block: int, **kw) -> DistAggregation:
    r"""Forward engine on block row ``my_block`` of :math:`M`, backward engine on the same block row of
    :math:`M^\mathsf{T}` (read as a block column of :math:`M`, transposed locally; shared when undirected)."""
    n = rows.n
    r = (int(rows.bounds[my_block]), int(rows.bounds[my_block + 1]))
    fwd = BlockRowSpMM(comm, source.submatrix("rc", r, (0, n)), rows, **kw)
    if not source.directed:
        return DistAggregation(fwd, fwd)
    bwd = BlockRowSpMM(comm, source.submatrix("rc", (0, n), r).T.tocsr(), rows, **kw)
    return DistAggregation(fwd, bwd)


def is_symmetric(mat: sp.csr_matrix) -> bool:
    d = (mat - mat.T).tocsr()
    return d.nnz == 0 or bool(np.abs(d.data).max() == 0)
