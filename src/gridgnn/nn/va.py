r"""Vanilla attention (VA) as SC'23 defines it (§4.1, backward §5.3), composed of distributed primitives:

.. math:: \Psi = \mathcal{A} \odot (\mathbf{H}\mathbf{H}^\mathsf{T}), \qquad \mathbf{Z} = \Psi \mathbf{H} \mathbf{W} + b,
    \qquad \mathbf{H}' = \sigma(\mathbf{Z})

with :math:`\mathcal{A}` the GCN-normalized adjacency with self-loops (:math:`\hat M`, rows = destinations; SC'23
lets :math:`\mathcal{A}` be any normalization) and σ = ReLU between layers. As primitives: ``sddmm_dot(H, H)``
(:math:`H H^\mathsf{T}` is *virtual*: only its values on the edges exist) → multiply by :math:`\hat M`'s values
→ ``spmm`` → ``linear`` → ``add_bias``. The backward of SC'23 Eqs. 11–13 is the composition of the primitives'
hand-written adjoints: :math:`\mathbf{M} = \mathbf{G}\mathbf{W}^\mathsf{T}` (``linear``), :math:`\mathbf{N} =
\mathcal{A} \odot (\mathbf{M}\mathbf{H}^\mathsf{T})` (``spmm``'s edge gradient, an SDDMM), :math:`\Psi^\mathsf{T}
\mathbf{M}` (``spmm``'s input gradient) and :math:`\mathbf{N}_* \mathbf{H}` (``sddmm_dot``'s two input gradients);
:math:`\mathbf{Y} = \mathbf{H}^\mathsf{T} \Psi \mathbf{G}` is ``linear``'s weight gradient. Nothing here builds
an ``n × n`` or ``edges × features`` tensor. Tested against a dense autograd reference in ``tests/nn``.

Dropout acts on every layer's input (keyed by global node id and feature).
"""
from __future__ import annotations

import torch
from torch import nn

from .dropout import hashed_dropout
from .gcn import glorot_
from .orders import require_destination_scores


def va_layer(plan, layer: int, h: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    r""":math:`(\hat M \odot H H^\mathsf{T}) H W + b` for the local block ``h`` of layer ``layer``'s input."""
    g = plan.graph(layer)
    psi = g.gcn_values * g.sddmm_dot(h, h, 1).reshape(-1)  # nnz: A ⊙ (H Hᵀ) on the edges only
    z = plan.linear(layer, g.spmm(psi, h), w)
    return z if b is None else plan.add_bias(layer, z, b)


class VA(nn.Module):
    r"""Args:
        dims: ``[f_0, f_1, ..., f_L]`` feature widths (L layers).
        dropout: drop probability on each layer's input.
        bias: add a bias after the linear transform.
        seed: initial parameters from a CPU generator seeded with ``seed`` (Glorot weights, zero biases).
        plan: the plan the model will run on (its ``param_slice`` gives this rank's part of each parameter).
    Parameters per layer: ``weights[l]`` (``f_l × f_{l+1}``), ``biases[l]``.
    """

    reads_destinations = True  # its sddmm reads the destinations' rows of H

    def __init__(self, dims: list[int], *, dropout: float = 0.5, bias: bool = True, seed: int = 0,
                 dtype=torch.float32, plan=None):
        super().__init__()
        require_destination_scores(plan, "va")
        self.dims, self.dropout, self.seed = list(dims), dropout, seed
        gen = torch.Generator().manual_seed(seed)
        self.weights, self.biases = nn.ParameterList(), nn.ParameterList()
        for layer, (fi, fo) in enumerate(zip(dims[:-1], dims[1:])):
            w = glorot_(torch.empty(fi, fo, dtype=torch.float64), gen)
            b = torch.zeros(fo, dtype=torch.float64)
            if plan is not None:
                w, b = w[plan.param_slice(layer, "w", w.shape)], b[plan.param_slice(layer, "b", b.shape)]
            self.weights.append(nn.Parameter(w.contiguous().to(dtype)))
            if bias:
                self.biases.append(nn.Parameter(b.contiguous().to(dtype)))
        self.epoch = 0

    @classmethod
    def from_options(cls, dims: list[int], *, plan=None, dtype=torch.float32, seed: int = 0, dropout: float = 0.5,
                     **_unused) -> "VA":
        """The registry's constructor from the trainer's options."""
        return cls(dims, dropout=dropout, seed=seed, dtype=dtype, plan=plan)

    @property
    def num_layers(self) -> int:
        return len(self.weights)

    @staticmethod
    def parameter_shapes(dims: list[int], *, bias: bool = True, **_unused) -> dict:
        """``{name: [full shape per layer]}``."""
        out = {"weights": [(fi, fo) for fi, fo in zip(dims[:-1], dims[1:])]}
        if bias:
            out["biases"] = [(fo,) for fo in dims[1:]]
        return out

    def parameter_entries(self) -> list[tuple]:
        """``(name, layer, parameter, full shape, kind)`` of every parameter (``kind`` for ``plan.param_slice``)."""
        shapes = self.parameter_shapes(self.dims, bias=len(self.biases) > 0)
        out = []
        for l in range(self.num_layers):
            out.append(("weights", l, self.weights[l], shapes["weights"][l], "w"))
            if len(self.biases):
                out.append(("biases", l, self.biases[l], shapes["biases"][l], "b"))
        return out

    def forward(self, x: torch.Tensor, plan) -> torch.Tensor:
        h = x
        for layer, w in enumerate(self.weights):
            f_in = self.dims[layer]
            h = hashed_dropout(h, self.dropout, plan.in_rows(layer), seed=self.seed, epoch=self.epoch, layer=layer,
                               training=self.training, features=f_in, cols=plan.in_cols(layer, f_in))
            h = va_layer(plan, layer, h, w, self.biases[layer] if len(self.biases) else None)
            if layer < self.num_layers - 1:
                h = torch.relu(h)
        return h
