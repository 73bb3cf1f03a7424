r"""Aggregation over a semiring (SC'23 §4.3) on any distributed graph, as a composition of its primitives.

``aggregate(g, values, X, semiring, mask)`` computes :math:`Y_u = \bigoplus_{v} \alpha_{uv} \otimes X_v` over the
local edges of ``g`` that ``mask`` keeps (all when ``None``), with the semantics of
:mod:`gridgnn.ops.semiring` (PyG's message semantics: ⊕ over the messages :math:`\alpha_{uv} \cdot x_v`):

* ``sum`` / ``mean`` are linear: one ordinary ``spmm`` with the effective edge values
  :math:`\alpha_{uv} m_{uv}` (divided by the destination's number of kept edges for ``mean``, a per-row count
  that ``g.row_sum`` reduces over the ranks a row's edges are spread over) — on every algorithm;
* the selecting semirings (``max``, ``min``, ``max-plus``, ``min-plus``) need the sources of every edge and a
  ⊕-combination of the partial results: the graph's ``spmm_select`` (every family has one).
"""
from __future__ import annotations

import numpy as np
import torch

from ..ops.pattern import row_index
from ..ops.semiring import SELECTING, check_semiring


class SourceKeys:
    """For a distributed graph (a :class:`~gridgnn.parallel.graph.DistGraph`) that knows its local edges'
    original ids (``edge_ids()``): the original id of every local edge's source, the selecting semirings'
    tie-break key (ties resolve as in the serial run whatever the permutation), built once on first use and kept
    with the graph's edge constants (``int64`` on the values' device: what the memory model books,
    :func:`~gridgnn.parallel.footprint.source_key_bytes`)."""

    def source_keys(self) -> torch.Tensor:
        holder = self._edge_constants()
        if holder._source_keys is None:
            ids = np.ascontiguousarray(self.edge_ids()[1], dtype=np.int64)
            holder._source_keys = torch.from_numpy(ids).to(self.values_spec()[1])
        return holder._source_keys


def aggregate(g, values: torch.Tensor | None, x: torch.Tensor, semiring: str = "sum",
              mask: torch.Tensor | None = None) -> torch.Tensor:
    """See the module docstring. ``values``: ``nnz_local`` or ``None`` (α = 1, or 0 for the ``+`` semirings);
    ``mask``: bool per local edge or ``None``."""
    check_semiring(semiring)
    if semiring in SELECTING:
        return g.spmm_select(values, x, semiring, mask)
    kept = None if mask is None else mask.to(x.dtype)  # (converted once: the weights and a mean's counts read it)
    if kept is None and (values is None or semiring == "mean"):
        kept = torch.ones(g.nnz, dtype=x.dtype, device=x.device)
    eff = kept if values is None else values if mask is None else values * kept
    if semiring == "mean":
        count = g.row_sum(kept)  # kept edges per destination row, over every rank holding some
        row, _, crow = g.edge_rows()
        eff = eff / count.clamp(min=1)[row_index(row, crow)]
    return g.spmm(eff, x)
