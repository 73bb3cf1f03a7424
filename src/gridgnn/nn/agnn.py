r"""AGNN (Thekumparampil et al. 2018) with PyG ``AGNNConv`` semantics, composed of distributed primitives (SC'23
§4.1: :math:`\Psi = \mathcal{A} \odot \beta\,(\mathbf{H}\mathbf{H}^\mathsf{T} \oslash \mathbf{n}\mathbf{n}^\mathsf{T})`
followed by the softmax of §4.2).

One propagation on the pattern :math:`M + I` (self-loops, rows = destinations):

.. math::
    \hat h_v = h_v / \max(\lVert h_v \rVert_2, 10^{-12}), \quad
    e_{uv} = \beta \langle \hat h_u, \hat h_v \rangle, \quad
    \alpha_{uv} = \mathrm{softmax}_{v}(e_{uv}), \quad h'_u = \textstyle\sum_v \alpha_{uv} h_v

As primitives: ``normalize_rows → scale(β) → sddmm_dot → edge_softmax → spmm`` (the last three are
:func:`~gridgnn.parallel.attention.attend`, one fused kernel each way on the layouts with whole rows). The cosine matrix
:math:`\hat H \hat H^\mathsf{T}` is *virtual* (SC'23 §6.1): only its values on the edges exist, as one scalar
per edge; :math:`\hat H` is computed once per propagation and read as both the destination and the source side
(the destination side scaled by β, a node tensor, so β's gradient is summed like a weight's on every layout).

The model is PyG's Cora example: ``Linear → ReLU → AGNN (β = 1 fixed) → AGNN (β trained) ... → Linear`` with
dropout on the input of both linear layers. A model on ``dims = [f_0, h, ..., h, c]`` has ``L = len(dims) − 1``
layers: layer 0 the input linear (``f_0 → h``, bias), layers ``1..L−2`` the propagations (``h → h``; the first
with β fixed at 1), layer ``L−1`` the output linear (``h → c``, bias); ``--layers 4`` is PyG's example. Every
layer calls ``linear`` or ``spmm`` once, so each lays its tensors out on Plexus like a GCN layer would.
"""
from __future__ import annotations

import torch
from torch import nn

from ..errors import GridGnnError
from ..parallel.attention import attend
from .dropout import hashed_dropout
from .gcn import glorot_
from .orders import require_destination_scores


class AGNN(nn.Module):
    r"""Args:
        dims: ``[f_0, h, ..., h, c]`` (at least 4 entries: two linear layers and one propagation).
        dropout: drop probability on the input of the two linear layers.
        train_first_beta: train the first propagation's β too (PyG's example keeps it at 1).
        seed: initial parameters from a CPU generator seeded with ``seed`` (Glorot weights, zero biases, β = 1).
        plan: the plan the model will run on (its ``param_slice`` gives this rank's part of each parameter).
    Parameters: ``weights`` / ``biases`` of the two linear layers, ``betas`` of the trained propagations.
    """

    reads_destinations = True  # its sddmm reads per-node values of the destinations

    def __init__(self, dims: list[int], *, dropout: float = 0.5, bias: bool = True, train_first_beta: bool = False,
                 seed: int = 0, dtype=torch.float32, plan=None):
        super().__init__()
        self.check_dims(dims)
        require_destination_scores(plan, "agnn")
        self.dims, self.dropout, self.seed = list(dims), dropout, seed
        self.train_first_beta = bool(train_first_beta)
        gen = torch.Generator().manual_seed(seed)
        L = len(dims) - 1
        self.linear_layers = (0, L - 1)
        self.weights, self.biases, self.betas = nn.ParameterList(), nn.ParameterList(), nn.ParameterList()
        for layer in self.linear_layers:
            w = glorot_(torch.empty(dims[layer], dims[layer + 1], dtype=torch.float64), gen)
            b = torch.zeros(dims[layer + 1], dtype=torch.float64)
            if plan is not None:  # this rank's part of a sharded parameter (Plexus)
                w, b = w[plan.param_slice(layer, "w", w.shape)], b[plan.param_slice(layer, "b", b.shape)]
            self.weights.append(nn.Parameter(w.contiguous().to(dtype)))
            if bias:
                self.biases.append(nn.Parameter(b.contiguous().to(dtype)))
        self.register_buffer("fixed_beta", torch.ones(1, dtype=dtype))
        for _ in self.trained_beta_layers(L, self.train_first_beta):
            self.betas.append(nn.Parameter(torch.ones(1, dtype=dtype)))
        self.epoch = 0

    @staticmethod
    def check_dims(dims) -> None:
        if len(dims) < 4:
            raise GridGnnError(f"--model agnn needs --layers >= 3: an input linear layer, at least one propagation "
                               f"and an output linear layer (got {len(dims) - 1} layers)")
        if len(set(dims[1:-1])) != 1:
            raise GridGnnError(f"--model agnn propagates at one width; got hidden widths {dims[1:-1]}")

    @staticmethod
    def trained_beta_layers(L: int, train_first_beta: bool = False) -> list[int]:
        return list(range(1 if train_first_beta else 2, L - 1))

    @classmethod
    def from_options(cls, dims: list[int], *, plan=None, dtype=torch.float32, seed: int = 0, dropout: float = 0.5,
                     train_first_beta: bool = False, **_unused) -> "AGNN":
        """The registry's constructor from the trainer's options."""
        return cls(dims, dropout=dropout, seed=seed, dtype=dtype, plan=plan, train_first_beta=train_first_beta)

    @property
    def num_layers(self) -> int:
        return len(self.dims) - 1

    @staticmethod
    def parameter_shapes(dims: list[int], *, bias: bool = True, train_first_beta: bool = False, **_unused) -> dict:
        """``{name: [full shape of each such parameter, in layer order]}``."""
        L = len(dims) - 1
        out = {"weights": [(dims[0], dims[1]), (dims[L - 1], dims[L])]}
        if bias:
            out["biases"] = [(dims[1],), (dims[L],)]
        betas = AGNN.trained_beta_layers(L, train_first_beta)
        if betas:
            out["betas"] = [(1,)] * len(betas)
        return out

    def parameter_entries(self) -> list[tuple]:
        """``(name, layer, parameter, full shape, kind)`` of every parameter (``kind`` for ``plan.param_slice``)."""
        shapes = self.parameter_shapes(self.dims, bias=len(self.biases) > 0, train_first_beta=self.train_first_beta)
        out = []
        for i, layer in enumerate(self.linear_layers):
            out.append(("weights", layer, self.weights[i], shapes["weights"][i], "w"))
            if len(self.biases):
                out.append(("biases", layer, self.biases[i], shapes["biases"][i], "b"))
        for i, layer in enumerate(self.trained_beta_layers(self.num_layers, self.train_first_beta)):
            out.append(("betas", layer, self.betas[i], (1,), "beta"))
        return sorted(out, key=lambda e: e[1])

    def to_pyg(self):
        """This model as PyG's AGNN (``Linear → ReLU → AGNNConv … → Linear``, :mod:`gridgnn.nn.pyg_export`), called
        ``m(x, edge_index)``."""
        from torch_geometric.nn import AGNNConv

        from .pyg_export import check_whole, sequential, set_linear

        check_whole(self)
        dtype = self.weights[0].dtype
        lins = []
        for i, layer in enumerate(self.linear_layers):
            lin = nn.Linear(self.dims[layer], self.dims[layer + 1], bias=len(self.biases) > 0).to(dtype)
            set_linear(lin, self.weights[i], self.biases[i] if len(self.biases) else None)
            lins.append(lin)
        trained = self.trained_beta_layers(self.num_layers, self.train_first_beta)
        layers = [(lins[0], "x -> x"), nn.ReLU()]
        for layer in range(1, self.num_layers - 1):
            conv = AGNNConv(requires_grad=layer in trained).to(dtype)
            with torch.no_grad():
                conv.beta.fill_(float(self.beta(layer)))
            layers.append((conv, "x, edge_index -> x"))
        layers.append((lins[1], "x -> x"))
        return sequential("x, edge_index", layers)

    def beta(self, layer: int) -> torch.Tensor:
        trained = self.trained_beta_layers(self.num_layers, self.train_first_beta)
        return self.betas[trained.index(layer)] if layer in trained else self.fixed_beta

    def forward(self, x: torch.Tensor, plan) -> torch.Tensor:
        h = x
        last = self.num_layers - 1
        for layer in range(self.num_layers):
            if layer in self.linear_layers:
                i = self.linear_layers.index(layer)
                f_in = self.dims[layer]
                h = hashed_dropout(h, self.dropout, plan.in_rows(layer), seed=self.seed, epoch=self.epoch,
                                   layer=layer, training=self.training, features=f_in, cols=plan.in_cols(layer, f_in))
                h = plan.linear(layer, h, self.weights[i])
                if len(self.biases):
                    h = plan.add_bias(layer, h, self.biases[i])
                if layer < last:
                    h = torch.relu(h)
            else:
                h = agnn_propagate(plan, layer, h, self.beta(layer))
        return h


def agnn_propagate(plan, layer: int, h: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    r"""One AGNN propagation of ``h`` (``n_local × f``) over ``plan.graph(layer)``: cosine attention scaled by ``beta``
    (a ``(1,)`` tensor), softmax per destination, weighted sum of the sources' ``h``."""
    g = plan.graph(layer)
    hn = plan.normalize_rows(layer, h)
    return attend(g, plan.scale(layer, hn, beta), hn, h, score="dot", heads=1)
