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

Dropout acts on every layer's input (keyed by global node id and feature), as in GCN.
"""
from __future__ import annotations

import torch

from .gcn import GCN


def va_layer(plan, layer: int, h: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    r""":math:`(\hat M \odot H H^\mathsf{T}) H W + b` for the local block ``h`` of layer ``layer``'s input."""
    g = plan.graph(layer)
    psi = g.gcn_values * g.sddmm_dot(h, h, 1).reshape(-1)  # nnz: A ⊙ (H Hᵀ) on the edges only
    z = plan.linear(layer, g.spmm(psi, h), w)
    return z if b is None else plan.add_bias(layer, z, b)


class VA(GCN):
    r"""Args:
        dims: ``[f_0, f_1, ..., f_L]`` feature widths (L layers).
        dropout: drop probability on each layer's input.
        bias: add a bias after the linear transform.
        seed: initial parameters from a CPU generator seeded with ``seed`` (Glorot weights, zero biases).
        plan: the plan the model will run on (its ``param_slice`` gives this rank's part of each parameter).
    Parameters per layer: ``weights[l]`` (``f_l × f_{l+1}``), ``biases[l]`` — GCN's, so VA shares its
    construction, parameter listing and loop (ReLU between layers) and changes only :meth:`layer`.
    """

    OPTIONS = {}  # (its layer has one order: GCN's --layer-order is not VA's)
    reads_destinations = True  # its sddmm reads the destinations' rows of H
    #: Ψ is quadratic in H: with Planetoid's rows summing to one (entries ~1e-3) the logits start near 5e-7 and
    #: Adam's weight decay drives every weight to zero before the data can (Cora: test accuracy 0.29, the
    #: majority class); rows of unit L2 norm give scores of order one (measured in docs/benchmarks.md)
    FEATURE_NORM = "l2"

    def layer(self, plan, layer: int, h: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
        return va_layer(plan, layer, h, w, b)
