r"""GAT (Veličković et al. 2018) with PyG ``GATConv`` semantics, composed of distributed primitives (SC'23 §4.1,
Fig. 2: the concatenation :math:`[Wh_i \Vert Wh_j] \cdot a` is split into two per-node scores added per edge).

One layer with ``K`` heads of width ``F`` on the pattern :math:`M + I` (self-loops added, rows = destinations):

.. math::
    X' = H W, \quad s^{src} = \textstyle\sum_f (X' \odot a^{src}), \quad s^{dst} = \sum_f (X' \odot a^{dst}),
    \quad e_{uv} = \mathrm{LeakyReLU}_{0.2}(s^{dst}_u + s^{src}_v), \quad
    \alpha = \mathrm{softmax}_v(e_{uv}), \quad Y_{u,h} = \textstyle\sum_v \alpha_{uv,h} X'_{v,h}

then the heads are concatenated (hidden layers) or averaged (the last layer), the bias is added, and ELU runs
between layers. As primitives: ``linear → head_scores → sddmm_add → LeakyReLU → edge_softmax → (dropout) →
spmm → [head_mean] → add_bias``; the middle part is :func:`~gridgnn.parallel.attention.attend`, fused into one
kernel forward and one backward on the layouts with whole rows (``head_scores``/``head_mean``/``add_bias`` reduce over feature columns, which
Plexus shards).
Dropout acts on every layer's input (keyed by global node id and feature) and on the attention coefficients
(keyed by seed, epoch, layer, destination, source and head), so every algorithm and P draw the same masks.

Shapes per rank: input ``n_local × f_in`` → ``n_local × K·F`` (concat) or ``n_local × F`` (mean); edge tensors
``nnz_local × K``. The model holds no block arithmetic and calls no collective: the plan's distributed graph does.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..parallel.attention import attend
from .base import Model, Option, parameter_group
from ..ops.device_paths import device_paths
from .dropout import edge_drawer, keyed

#: ``--heads``: at most this many heads per layer
MAX_HEADS = 1024

NEGATIVE_SLOPE = 0.2


class GAT(Model):
    r"""Args:
        dims: ``[f_0, F_1, ..., F_L]``: input width, then the per-head width of each layer (the last is the number
            of classes).
        heads: heads of every hidden layer (concatenated: the next layer's input is ``heads · F_l`` wide).
        out_heads: heads of the last layer (averaged).
        dropout: drop probability on each layer's input; ``attn_dropout``: on the attention coefficients
            (``None``: ``dropout``).
        bias: add a bias after concatenating / averaging the heads.
        seed: initial parameters come from a CPU generator seeded with ``seed`` (identical on every rank).
        plan: the plan the model will run on (its ``param_slice`` gives this rank's part of each parameter).
    Parameters per layer ``l``: ``weights`` (``f_in × K·F``), ``att_src``, ``att_dst`` (``K × F``), ``biases``
    (``K·F`` or ``F``), initialized like PyG (Glorot, bias zero).
    """

    OPTIONS = {"heads": Option(int, 8, low=1, high=MAX_HEADS,
                               help="attention heads of the hidden layers (--hidden is per head; the last layer has "
                                    "one)"),
               "attn_dropout": Option(float, None, low=0.0, high=1.0, high_open=True,
                                      help="dropout on the attention coefficients (default: --dropout)")}
    reads_destinations = True  # its sddmm reads per-node values of the destinations
    trains_on_samples = True

    weights = parameter_group()
    att_src = parameter_group()
    att_dst = parameter_group()
    biases = parameter_group()  # model.NAME[l]: the parameters of each layer

    def __init__(self, dims: list[int], *, heads: int = 8, out_heads: int = 1, dropout: float = 0.6,
                 attn_dropout: float | None = None, bias: bool = True, seed: int = 0, dtype=torch.float32,
                 plan=None):
        super().__init__(dims, dropout=dropout, seed=seed, dtype=dtype, plan=plan)
        self.heads, self.out_heads, self.bias = int(heads), int(out_heads), bool(bias)
        self.attn_dropout = self.dropout if attn_dropout is None else float(attn_dropout)
        L = len(dims) - 1
        for layer in range(L):
            k, fo = self.layer_heads(layer), dims[layer + 1]
            self.add_parameter("weights", layer, self.glorot(self.in_width(layer), k * fo), "w")
            self.add_parameter("att_src", layer, self.glorot(k, fo), "att")  # whole on every rank
            self.add_parameter("att_dst", layer, self.glorot(k, fo), "att")
            if bias:
                self.add_parameter("biases", layer, self.zeros(k * fo if layer < L - 1 else fo), "b")

    def to_pyg(self):
        """This model as PyG ``GATConv`` layers (hidden: ``heads`` concatenated; last: ``out_heads`` averaged) with
        ELU between them (:mod:`gridgnn.nn.pyg_export`), called ``m(x, edge_index)``."""
        from torch_geometric.nn import GATConv

        from .pyg_export import check_whole, sequential

        check_whole(self)
        layers, last = [], self.num_layers - 1
        for l in range(self.num_layers):
            k, fo = self.layer_heads(l), self.dims[l + 1]
            conv = GATConv(self.in_width(l), fo, heads=k, concat=l < last, bias=self.bias,
                           negative_slope=NEGATIVE_SLOPE).to(self.weights[l].dtype)
            with torch.no_grad():
                conv.lin.weight.copy_(self.weights[l].detach().T)
                conv.att_src.copy_(self.att_src[l].detach().reshape(1, k, fo))
                conv.att_dst.copy_(self.att_dst[l].detach().reshape(1, k, fo))
                if self.bias:
                    conv.bias.copy_(self.biases[l].detach())
            layers.append((conv, "x, edge_index -> x"))
            if l < last:
                layers.append(nn.ELU())
        return sequential("x, edge_index", layers)

    def layer_heads(self, layer: int) -> int:
        return self.heads if layer < len(self.dims) - 2 else self.out_heads

    def attention_keep(self, g, layer: int, heads: int, device) -> tuple:
        """``(mask, redraw)``: the keyed dropout mask of the attention coefficients of ``g``'s local edges
        (``nnz × heads``: the same entries on every algorithm and P) and, where the backward draws it again instead
        of keeping it, what draws it (:func:`~gridgnn.nn.dropout.keyed`); ``(None, None)`` when evaluating or
        without attention dropout."""
        if not (self.training and self.attn_dropout > 0):
            return None, None
        dst, src = g.edge_ids()
        if device_paths(device):  # drawn on the device from its copy of the ids (made once)
            cache = g.__dict__.setdefault("_edge_ids_on", {})
            key = str(device)
            if key not in cache:
                cache[key] = tuple(torch.as_tensor(np.asarray(a, dtype=np.int64)).to(device) for a in (dst, src))
            dst, src = cache[key]
        draw = edge_drawer(dst, src, heads, self.attn_dropout, seed=self.seed, epoch=self.epoch, layer=layer)
        return keyed(draw, device, "edge_mask")

    def in_width(self, layer: int) -> int:
        """Width of layer ``layer``'s input: ``f_0``, then ``heads · F_l`` of the concatenated hidden layer."""
        return self.dims[0] if layer == 0 else self.heads * self.dims[layer]

    def forward(self, x: torch.Tensor, plan) -> torch.Tensor:
        h = x
        last = self.num_layers - 1
        for layer in range(self.num_layers):
            k, fo = self.layer_heads(layer), self.dims[layer + 1]
            h = self.input_dropout(h, plan, layer, self.in_width(layer))
            g = plan.graph(layer)
            xw = plan.linear(layer, h, self.param("weights", layer))  # n × K·F
            del h  # (the dropped input is not kept alive through the attention)
            s_src = plan.head_scores(layer, xw, self.param("att_src", layer))  # n × K
            s_dst = plan.head_scores(layer, xw, self.param("att_dst", layer))
            keep, redraw = self.attention_keep(g, layer, k, xw.device)
            h = attend(g, s_dst, s_src, xw, score="add", heads=k, slope=NEGATIVE_SLOPE, keep=keep,
                       p=self.attn_dropout, redraw=redraw)  # n × K·F
            del keep, redraw  # (a mask drawn again is not held through the next layer)
            if layer == last:
                h = plan.head_mean(layer, h, k, k * fo)
            if self.bias:
                h = plan.add_bias(layer, h, self.param("biases", layer))
            if layer < last:
                h = F.elu(h)
        return h
