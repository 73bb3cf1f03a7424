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
from ..ops.lean_backward import relu
from ..parallel.attention import attend
from .base import Model, parameter_group


class AGNN(Model):
    r"""Args:
        dims: ``[f_0, h, ..., h, c]`` (at least 4 entries: two linear layers and one propagation).
        dropout: drop probability on the input of the two linear layers.
        train_first_beta: train the first propagation's β too (PyG's example keeps it at 1).
        seed: initial parameters from a CPU generator seeded with ``seed`` (Glorot weights, zero biases, β = 1).
        plan: the plan the model will run on (its ``param_slice`` gives this rank's part of each parameter).
    Parameters: ``weights`` / ``biases`` of the two linear layers, ``betas`` of the trained propagations.
    """

    DEFAULT_LAYERS = 4  # PyG's Cora example: linear, two propagations, linear
    reads_destinations = True  # its sddmm reads per-node values of the destinations

    weights = parameter_group()
    biases = parameter_group()
    betas = parameter_group()  # model.NAME[l]: the parameters of each layer

    def __init__(self, dims: list[int], *, dropout: float = 0.5, bias: bool = True, train_first_beta: bool = False,
                 seed: int = 0, dtype=torch.float32, plan=None):
        self.check_dims(dims)
        super().__init__(dims, dropout=dropout, seed=seed, dtype=dtype, plan=plan)
        self.train_first_beta, self.bias = bool(train_first_beta), bool(bias)
        L = len(dims) - 1
        self.linear_layers = (0, L - 1)
        trained = self.trained_beta_layers(L, self.train_first_beta)
        weights = [self.glorot(dims[layer], dims[layer + 1]) for layer in self.linear_layers]  # drawn first
        for layer in range(L):  # registered in layer order
            if layer in self.linear_layers:
                self.add_parameter("weights", layer, weights[self.linear_layers.index(layer)], "w")
                if bias:
                    self.add_parameter("biases", layer, self.zeros(dims[layer + 1]), "b")
            elif layer in trained:
                self.add_parameter("betas", layer, self.ones(1), "beta")
        self.register_buffer("fixed_beta", torch.ones(1, dtype=dtype))

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

    def to_pyg(self):
        """This model as PyG's AGNN (``Linear → ReLU → AGNNConv … → Linear``, :mod:`gridgnn.nn.pyg_export`), called
        ``m(x, edge_index)``."""
        from torch_geometric.nn import AGNNConv

        from .pyg_export import check_whole, sequential, set_linear

        check_whole(self)
        dtype = self.weights[0].dtype
        lins = []
        for i, layer in enumerate(self.linear_layers):
            lin = nn.Linear(self.dims[layer], self.dims[layer + 1], bias=self.bias).to(dtype)
            set_linear(lin, self.weights[i], self.biases[i] if self.bias else None)
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
        return self.param("betas", layer) if layer in trained else self.fixed_beta

    def forward(self, x: torch.Tensor, plan) -> torch.Tensor:
        h = x
        last = self.num_layers - 1
        for layer in range(self.num_layers):
            if layer in self.linear_layers:
                h = self.input_dropout(h, plan, layer, self.dims[layer])
                h = plan.linear(layer, h, self.param("weights", layer))
                if self.bias:
                    h = plan.add_bias(layer, h, self.param("biases", layer))
                if layer < last:
                    h = relu(h)
            else:
                h = agnn_propagate(plan, layer, h, self.beta(layer))
        return h


def agnn_propagate(plan, layer: int, h: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    r"""One AGNN propagation of ``h`` (``n_local × f``) over ``plan.graph(layer)``: cosine attention scaled by ``beta``
    (a ``(1,)`` tensor), softmax per destination, weighted sum of the sources' ``h``."""
    g = plan.graph(layer)
    hn = plan.normalize_rows(layer, h)
    return attend(g, plan.scale(layer, hn, beta), hn, h, score="dot", heads=1)
