"""What every distributed algorithm hands to the models and the trainer: a *plan* on this rank."""
from __future__ import annotations


import numpy as np
import scipy.sparse as sp
import torch

from ..ops.loss import masked_cross_entropy
from ..partition.layout import layer_orders, vertex_order
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
    ``in_rows(l)``/``in_cols(l, f)`` (global rows / column range of layer ``l``'s input block; the rows an array
    never written once built: the dropout keeps a device copy of it while it lives, ``nn.dropout.device_ids``),
    ``out_rows()``/``out_cols(c)`` (of the logits block), and the distributed primitives a model is composed of:
    ``graph(l)`` — the distributed graph layer ``l`` aggregates over, with ``spmm``/``sddmm_add``/``sddmm_dot``/
    ``edge_softmax`` — ``linear(l, h, w)`` (``linears(l, h, ws)``: one input by several weights), and the column
    reductions ``add_bias``, ``head_scores``,
    ``head_mean``, ``normalize_rows``, ``scale``. What ``linear`` and a sum's or a mean's ``spmm`` return is a
    tensor of their own, which no backward saves: a model may write into it (GraphSAGE adds its root term there).
    """

    class_axis = None
    #: the class attributes below change which primitives a model calls: a trace (byte models, Plexus layouts)
    #: must see the values of the plan it models (:attr:`~gridgnn.parallel.registry.Algorithm.traits`)
    TRAITS = ("root_in_aggregate_layout", "scores_across_orders", "aggregation_keeps_rows", "stacks_weights")
    #: whether a layer's input and its aggregation (``spmm``'s output) share one layout (a root term can be added)
    root_in_aggregate_layout = True
    #: whether a layer's aggregation has as many rows as its input (full graph; a sampled minibatch's input has about
    #: fanout times its output's): a product costs the same before or after it
    aggregation_keeps_rows = True
    #: whether ``sddmm`` may read per-node values of the destinations when a layer's input and output vertex
    #: orders differ (a double permutation); only Plexus gathers the destination rows across the two orders
    scores_across_orders = False
    #: whether ``linear`` computes each output column on this rank from the input block and that column of ``w``
    #: alone (``h @ w``): the products of one input by several weights then run as one, by the weights side by side
    #: (:meth:`linears`), whose backward gives the input one gradient instead of one per weight
    stacks_weights = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "linear" in vars(cls) and "stacks_weights" not in vars(cls):  # a linear of its own stacks only if it says so
            cls.stacks_weights = False

    #: ``{(parameter name, layer): mesh axes}``: parameters that enter raw torch operations on tensors split over
    #: more axes than ``grad_axes``, whose gradients are summed there too (the model's trace finds them,
    #: :attr:`gridgnn.parallel.trace.Trace.raw_grad_axes`)
    raw_grad_axes: dict = {}

    def shard_nnz(self) -> list[int]:
        """nnz of each adjacency shard this rank holds (for the load-balance report)."""
        return []

    def param_view(self, name: str, layer: int, p: torch.Tensor) -> torch.Tensor:
        """What :meth:`gridgnn.nn.Model.param` hands the model: ``p``, or — for a parameter of
        :attr:`raw_grad_axes` — ``p`` whose gradient is summed over those axes in the backward."""
        axes = self.raw_grad_axes.get((name, layer))
        return _SumGrad.apply(p, self.comm, tuple(axes)) if axes else p

    def _order(self, layer: int, side: str) -> np.ndarray:
        """Vertex order of layer ``layer``'s input (``side="in"``) or output: the source's column permutation
        feeds even layers and its row permutation receives them, the other way round for odd layers (Plexus
        §5.1; one order for a single permutation)."""
        o_in, o_out = layer_orders(layer, double=True)  # a single permutation: perm_r is perm_c
        return vertex_order(self.source, o_in if side == "in" else o_out)

    def param_slice(self, layer: int, kind: str, shape=None) -> tuple[slice, ...]:
        """The part of layer ``layer``'s weight (``"w"``), bias (``"b"``) or other parameter (full shape ``shape``)
        this rank holds: all of it, unless the algorithm shards parameters (Plexus)."""
        return (slice(None),) * (len(shape) if shape is not None else 2 if kind == "w" else 1)

    def linears(self, layer: int, h: torch.Tensor, ws) -> tuple[torch.Tensor, ...]:
        """``linear(layer, h, w)`` for each ``w`` of ``ws``: :func:`stacked_linears`."""
        return stacked_linears(self, layer, h, ws)

    # Column reductions a model needs beyond linear/spmm/sddmm/edge_softmax. Here node tensors hold every
    # feature column, so they are local; a plan that splits columns (Plexus) overrides them.
    def add_bias(self, layer: int, h: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """``H + b`` (``b``: this rank's :meth:`param_slice` of the layer's bias)."""
        return h + b

    def head_scores(self, layer: int, x: torch.Tensor, att: torch.Tensor) -> torch.Tensor:
        r"""GAT's per-node score of each head, :math:`s_{v,h} = \sum_f X_{v,h,f}\, a_{h,f}` (``att``: ``K × F``,
        ``x``: the layer's ``linear`` output, ``K·F`` wide) → ``n_local × K``."""
        return (x.reshape(x.shape[0], att.shape[0], att.shape[1]) * att).sum(dim=-1)

    def head_mean(self, layer: int, h: torch.Tensor, heads: int, width: int) -> torch.Tensor:
        """The mean of the ``heads`` heads of the layer's ``width``-wide output → ``width / heads`` columns."""
        return h.reshape(h.shape[0], heads, width // heads).mean(dim=1)

    def normalize_rows(self, layer: int, h: torch.Tensor) -> torch.Tensor:
        r"""Each row divided by its L2 norm, :math:`\hat h_v = h_v / \max(\lVert h_v \rVert_2, 10^{-12})` (PyG
        ``F.normalize``), for the tensor layer ``layer``'s graph primitives read."""
        return torch.nn.functional.normalize(h, p=2.0, dim=1)

    def scale(self, layer: int, h: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        """``s · H`` for a replicated scalar parameter ``s`` (shape ``(1,)``), on the tensor layer ``layer``'s
        graph primitives read; its gradient is this rank's share, like a weight's."""
        return h * s

    def loss(self, logits, y, rows, n_train: int) -> torch.Tensor:
        """The cross-entropy of the labelled ``rows`` (positions, or a bool mask) over ``n_train``."""
        if self.class_axis is None:
            return masked_cross_entropy(logits, y, rows, n_train)
        c0, _ = self.out_cols(None)
        return sharded_cross_entropy(logits, y, rows, c0=c0, comm=self.comm, axis=self.class_axis, n_train=n_train)

    def predict(self, logits) -> torch.Tensor:
        if self.class_axis is None:
            return logits.argmax(dim=1)
        c0, _ = self.out_cols(None)
        return sharded_argmax(logits, c0=c0, comm=self.comm, axis=self.class_axis)


def stacked_linears(plan, layer: int, h: torch.Tensor, ws) -> tuple[torch.Tensor, ...]:
    """``plan.linear(layer, h, w)`` for each ``w`` of ``ws`` — where ``plan.stacks_weights``, one ``linear`` by the
    weights side by side, its output split back into theirs (column views): one product forward, and one gradient
    of ``h`` backward where each product would give its own (the sum of those, which autograd would hold two of at
    once). Where autograd records and ``h`` needs no gradient (a first layer's input) there is none to share, and
    the split's backward would concatenate the views' gradients into one tensor of every weight's columns before
    the weights' gradients are made: separate products make each weight's gradient from its own view's. (Without a
    gradient recorded — an evaluation, an inference — the one product stays.)"""
    ws = tuple(ws)
    if not plan.stacks_weights or len(ws) < 2 or (torch.is_grad_enabled() and not h.requires_grad):
        return tuple(plan.linear(layer, h, w) for w in ws)
    return plan.linear(layer, h, torch.cat(ws, dim=1)).split([w.shape[1] for w in ws], dim=1)


class _SumGrad(torch.autograd.Function):
    """The identity forward; backward, the gradient summed over ``axes`` (one ring all-reduce per axis)."""

    @staticmethod
    def forward(ctx, p, comm, axes):
        ctx.comm, ctx.axes = comm, axes
        return p.view_as(p)

    @staticmethod
    def backward(ctx, dp):
        dp = dp.contiguous().clone()
        for axis in ctx.axes:
            ctx.comm.all_reduce(dp, axis)
        return dp, None, None


def is_symmetric(mat: sp.csr_matrix) -> bool:
    d = (mat - mat.T).tocsr()
    return d.nnz == 0 or bool(np.abs(d.data).max() == 0)
