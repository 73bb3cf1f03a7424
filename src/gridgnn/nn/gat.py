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

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..parallel.attention import attend
from .dropout import edge_keep_mask, hashed_dropout
from .gcn import glorot_
from .orders import require_destination_scores

NEGATIVE_SLOPE = 0.2


class GAT(nn.Module):
    r"""Args:
        dims: ``[f_0, F_1, ..., F_L]``: input width, then the per-head width of each layer (the last is the number
            of classes).
        heads: heads of every hidden layer (concatenated: the next layer's input is ``heads · F_l`` wide).
        out_heads: heads of the last layer (averaged).
        dropout: drop probability on each layer's input; ``attn_dropout``: on the attention coefficients.
        bias: add a bias after concatenating / averaging the heads.
        seed: initial parameters come from a CPU generator seeded with ``seed`` (identical on every rank).
        plan: the plan the model will run on (its ``param_slice`` gives this rank's part of each parameter).
    Parameters per layer ``l``: ``weights[l]`` (``f_in × K·F``), ``att_src[l]``, ``att_dst[l]`` (``K × F``),
    ``biases[l]`` (``K·F`` or ``F``), initialized like PyG (Glorot, bias zero).
    """

    OPTIONS = ("heads", "attn_dropout")  # the trainer options it takes (gridgnn.nn.base.TRAINER_OPTIONS)

    reads_destinations = True  # its sddmm reads per-node values of the destinations

    def __init__(self, dims: list[int], *, heads: int = 8, out_heads: int = 1, dropout: float = 0.6,
                 attn_dropout: float = 0.6, bias: bool = True, seed: int = 0, dtype=torch.float32, plan=None):
        super().__init__()
        require_destination_scores(plan, "gat")
        self.dims, self.heads, self.out_heads = list(dims), int(heads), int(out_heads)
        self.dropout, self.attn_dropout, self.seed = dropout, attn_dropout, seed
        gen = torch.Generator().manual_seed(seed)
        self.weights, self.att_src, self.att_dst = nn.ParameterList(), nn.ParameterList(), nn.ParameterList()
        self.biases = nn.ParameterList()
        L = len(dims) - 1
        for layer in range(L):
            k = self.layer_heads(layer)
            fi = self.in_width(layer)
            fo = dims[layer + 1]
            w = glorot_(torch.empty(fi, k * fo, dtype=torch.float64), gen)
            a = math.sqrt(6.0 / (k + fo))
            att = [torch.rand((k, fo), generator=gen, dtype=torch.float64) * 2 * a - a for _ in range(2)]
            b = torch.zeros(k * fo if layer < L - 1 else fo, dtype=torch.float64)
            if plan is not None:  # this rank's part of a sharded parameter (Plexus); the attention vectors whole
                w, b = w[plan.param_slice(layer, "w", w.shape)], b[plan.param_slice(layer, "b", b.shape)]
            self.weights.append(nn.Parameter(w.contiguous().to(dtype)))
            self.att_src.append(nn.Parameter(att[0].to(dtype)))
            self.att_dst.append(nn.Parameter(att[1].to(dtype)))
            if bias:
                self.biases.append(nn.Parameter(b.contiguous().to(dtype)))
        self.epoch = 0

    @classmethod
    def from_options(cls, dims: list[int], *, plan=None, dtype=torch.float32, seed: int = 0, dropout: float = 0.6,
                     heads: int = 8, attn_dropout: float | None = None, **_unused) -> "GAT":
        """The registry's constructor from the trainer's options (one output head, as PyG's Cora GAT)."""
        return cls(dims, heads=heads, out_heads=1, dropout=dropout,
                   attn_dropout=dropout if attn_dropout is None else attn_dropout, seed=seed, dtype=dtype, plan=plan)

    @property
    def num_layers(self) -> int:
        return len(self.weights)

    @staticmethod
    def parameter_shapes(dims: list[int], *, heads: int = 8, out_heads: int = 1, bias: bool = True,
                         **_unused) -> dict:
        """``{name: [full shape per layer]}`` of the parameters of a GAT on ``dims``."""
        L = len(dims) - 1
        ks = [heads if l < L - 1 else out_heads for l in range(L)]
        fin = [dims[0]] + [heads * d for d in dims[1:-1]]
        out = {"weights": [(fin[l], ks[l] * dims[l + 1]) for l in range(L)],
               "att_src": [(ks[l], dims[l + 1]) for l in range(L)],
               "att_dst": [(ks[l], dims[l + 1]) for l in range(L)]}
        if bias:
            out["biases"] = [(ks[l] * dims[l + 1] if l < L - 1 else dims[-1],) for l in range(L)]
        return out

    def parameter_entries(self) -> list[tuple]:
        """``(name, layer, parameter, full shape, kind)`` of every parameter (``kind`` for ``plan.param_slice``:
        ``"w"``, ``"b"``, or ``"att"`` — the attention vectors, never sharded)."""
        shapes = self.parameter_shapes(self.dims, heads=self.heads, out_heads=self.out_heads,
                                       bias=len(self.biases) > 0)
        kinds = {"weights": "w", "att_src": "att", "att_dst": "att", "biases": "b"}
        params = {"weights": self.weights, "att_src": self.att_src, "att_dst": self.att_dst, "biases": self.biases}
        return [(name, l, params[name][l], shapes[name][l], kinds[name])
                for l in range(self.num_layers) for name in shapes]

    def to_pyg(self):
        """This model as PyG ``GATConv`` layers (hidden: ``heads`` concatenated; last: ``out_heads`` averaged) with
        ELU between them (:mod:`gridgnn.nn.pyg_export`), called ``m(x, edge_index)``."""
        from torch_geometric.nn import GATConv

        from .pyg_export import check_whole, sequential

        check_whole(self)
        layers, last = [], self.num_layers - 1
        for l in range(self.num_layers):
            k, fo = self.layer_heads(l), self.dims[l + 1]
            conv = GATConv(self.in_width(l), fo, heads=k, concat=l < last, bias=len(self.biases) > 0,
                           negative_slope=NEGATIVE_SLOPE).to(self.weights[l].dtype)
            with torch.no_grad():
                conv.lin.weight.copy_(self.weights[l].detach().T)
                conv.att_src.copy_(self.att_src[l].detach().reshape(1, k, fo))
                conv.att_dst.copy_(self.att_dst[l].detach().reshape(1, k, fo))
                if len(self.biases):
                    conv.bias.copy_(self.biases[l].detach())
            layers.append((conv, "x, edge_index -> x"))
            if l < last:
                layers.append(nn.ELU())
        return sequential("x, edge_index", layers)

    def layer_heads(self, layer: int) -> int:
        return self.heads if layer < len(self.dims) - 2 else self.out_heads

    def in_width(self, layer: int) -> int:
        """Width of layer ``layer``'s input: ``f_0``, then ``heads · F_l`` of the concatenated hidden layer."""
        return self.dims[0] if layer == 0 else self.heads * self.dims[layer]

    def forward(self, x: torch.Tensor, plan) -> torch.Tensor:
        h = x
        last = self.num_layers - 1
        for layer in range(self.num_layers):
            k, fo = self.layer_heads(layer), self.dims[layer + 1]
            f_in = self.in_width(layer)
            h = hashed_dropout(h, self.dropout, plan.in_rows(layer), seed=self.seed, epoch=self.epoch, layer=layer,
                               training=self.training, features=f_in, cols=plan.in_cols(layer, f_in))
            g = plan.graph(layer)
            xw = plan.linear(layer, h, self.weights[layer])  # n × K·F
            s_src = plan.head_scores(layer, xw, self.att_src[layer])  # n × K
            s_dst = plan.head_scores(layer, xw, self.att_dst[layer])
            keep = None
            if self.training and self.attn_dropout > 0:
                dst, src = g.edge_ids()
                keep = torch.from_numpy(edge_keep_mask(dst, src, k, self.attn_dropout, seed=self.seed,
                                                       epoch=self.epoch, layer=layer)).to(xw.device)
            h = attend(g, s_dst, s_src, xw, score="add", heads=k, slope=NEGATIVE_SLOPE, keep=keep,
                       p=self.attn_dropout)  # n × K·F
            if layer == last:
                h = plan.head_mean(layer, h, k, k * fo)
            if len(self.biases):
                h = plan.add_bias(layer, h, self.biases[layer])
            if layer < last:
                h = F.elu(h)
        return h
