r"""Pair decoders of link prediction (``--task link``, ``--decoder``): a pair ``(u, v)``'s logit of being an edge
from its endpoints' embeddings ``z_u``, ``z_v`` (rows of the encoder's output).

* ``dot``: :math:`\langle z_u, z_v \rangle` (PyG's ``link_pred.py``); no parameters.
* ``mlp``: OGB's ``LinkPredictor``: :math:`z_u \odot z_v` through ``Linear(d, d)`` → ReLU → ``Linear(d, 1)``
  (no dropout). Its parameters are replicated on every rank, initialized alike from the seed, and their gradients
  summed over every rank (each rank scores its own slice of the pairs).
"""
from __future__ import annotations

import math

import torch

DECODERS = ("dot", "mlp")


class DotDecoder(torch.nn.Module):
    """:math:`\\langle z_u, z_v \\rangle` per pair."""

    def forward(self, zu: torch.Tensor, zv: torch.Tensor) -> torch.Tensor:
        return (zu * zv).sum(dim=1)


class MLPDecoder(torch.nn.Module):
    """OGB's ``LinkPredictor`` on ``width``-wide embeddings: ``Linear(d, d)`` → ReLU → ``Linear(d, 1)`` of
    :math:`z_u \\odot z_v`; weights and biases uniform in :math:`\\pm 1/\\sqrt{\\text{fan-in}}` (``nn.Linear``'s
    default) from a generator of ``seed``, the same on every rank."""

    def __init__(self, width: int, *, seed: int = 0, dtype=torch.float32):
        super().__init__()
        gen = torch.Generator().manual_seed((int(seed) * 7919 + 0x5EED) % (1 << 64))  # (any --seed; torch's 64 bits)
        self.lins = torch.nn.ModuleList()
        for a, b in ((width, width), (width, 1)):
            lin = torch.nn.Linear(a, b, dtype=dtype)
            bound = 1.0 / math.sqrt(a)
            with torch.no_grad():
                lin.weight.copy_(torch.rand((b, a), generator=gen, dtype=torch.float64).mul_(2 * bound)
                                 .sub_(bound).to(dtype))
                lin.bias.copy_(torch.rand((b,), generator=gen, dtype=torch.float64).mul_(2 * bound)
                               .sub_(bound).to(dtype))
            self.lins.append(lin)

    def forward(self, zu: torch.Tensor, zv: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.lins[0](zu * zv))
        return self.lins[1](h).squeeze(-1)

    @staticmethod
    def shapes(width: int) -> list[tuple[int, ...]]:
        """The shapes of :meth:`parameters`, in order (``model.pt`` keeps them as ``params["decoder"]``)."""
        return [(width, width), (width,), (1, width), (1,)]


def make_decoder(name: str, width: int, *, seed: int = 0, dtype=torch.float32) -> torch.nn.Module:
    """The ``--decoder`` ``name`` for ``width``-wide embeddings."""
    return MLPDecoder(width, seed=seed, dtype=dtype) if name == "mlp" else DotDecoder()
