r"""Local kernels on one sparsity pattern whose edge values are ordinary dense tensors (SC'23 §4, §6.2).

A :class:`Pattern` is the structure of an ``m × k`` sparse matrix (rows = destinations, columns = sources) with
its edges in CSR order; edge values are separate tensors of shape ``nnz`` or ``nnz × K`` (``K`` heads) in that
order. Every kernel here works from the structure and a values tensor, so autograd never runs through the
values of a torch sparse tensor (its backward would densify) and nothing of size ``m × k`` or
``nnz × features`` is built: products go through ``torch.sparse.mm`` one head at a time, and the dot-product
SDDMM runs over bounded chunks of edges.

Kernels (``X``: ``k × K·F`` sources, ``D``: ``m × K·F`` destinations, head ``h`` = columns ``h·F:(h+1)·F``):

.. math::
    \mathrm{spmm}(e, X)_{u,h} = \sum_{v} e_{uv,h} X_{v,h}, \qquad
    \mathrm{spmm\_t}(e, D)_{v,h} = \sum_{u} e_{uv,h} D_{u,h}, \qquad
    \mathrm{sddmm\_dot}(D, X)_{uv,h} = \langle D_{u,h}, X_{v,h} \rangle
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch

SDDMM_CHUNK_ELEMENTS = 1 << 22  # elements of the gathered rows per chunk of the dot-product SDDMM


class Pattern:
    r"""Structure of a local ``m × k`` sparse block: CSR arrays, the row of every edge and the transposed order.

    Args:
        mat: SciPy matrix (its values are ignored; explicit entries are edges, duplicates summed first).
        device: where the index tensors live.
        transpose: build the transposed order now (else on first use).
    Attributes:
        crow, col: CSR row pointer and column of each edge (``int64``); ``row``: destination row of each edge.
        t_crow, t_col, t_perm: CSR of the transpose; its edge ``t`` is edge ``t_perm[t]`` of this pattern (built
            on first use: a block row of ``n`` columns would otherwise keep an ``n + 1`` pointer it never needs).
    """

    def __init__(self, mat: sp.spmatrix, *, device="cpu", transpose: bool = False):
        mat = sp.csr_matrix(mat)
        mat.sum_duplicates()
        mat.sort_indices()
        self.shape = (int(mat.shape[0]), int(mat.shape[1]))
        self.nnz = int(mat.nnz)
        indptr = mat.indptr.astype(np.int64)
        indices = mat.indices.astype(np.int64)
        row = np.repeat(np.arange(self.shape[0], dtype=np.int64), np.diff(indptr))
        self.crow, self.col, self.row = (torch.from_numpy(a).to(device) for a in (indptr, indices, row))
        self._t = None
        if transpose:
            self.transpose()

    def transpose(self):
        """``(t_crow, t_col, t_perm)``, built once."""
        if self._t is None:
            row, col = self.row.cpu().numpy(), self.col.cpu().numpy()
            t_perm = np.lexsort((row, col)).astype(np.int64)  # by column, then row: CSR order of the transpose
            t_crow = np.zeros(self.shape[1] + 1, dtype=np.int64)
            np.cumsum(np.bincount(col, minlength=self.shape[1]), out=t_crow[1:])
            self._t = tuple(torch.from_numpy(np.ascontiguousarray(a)).to(self.device)
                            for a in (t_crow, row[t_perm], t_perm))
        return self._t

    @property
    def device(self):
        return self.crow.device

    def with_values(self, values: torch.Tensor, *, transpose: bool = False) -> torch.Tensor:
        """Torch sparse CSR tensor of this pattern (or its transpose) with ``values`` (``nnz``, no autograd)."""
        if transpose:
            t_crow, t_col, t_perm = self.transpose()
            return torch.sparse_csr_tensor(t_crow, t_col, values[t_perm], size=(self.shape[1], self.shape[0]))
        return torch.sparse_csr_tensor(self.crow, self.col, values, size=self.shape)

    def index_tensors(self) -> list:
        """The index tensors held now (the transpose's once built)."""
        return [self.crow, self.col, self.row] + list(self._t or ())


def _heads(values: torch.Tensor) -> int:
    return 1 if values.dim() == 1 else int(values.shape[1])


def as_edges(values: torch.Tensor) -> torch.Tensor:
    """``nnz`` or ``nnz × K`` values as ``nnz × K`` (works for zero edges)."""
    return values.reshape(values.shape[0], _heads(values))


def _head(values: torch.Tensor, h: int) -> torch.Tensor:
    return values if values.dim() == 1 else values[:, h].contiguous()


def spmm(pat: Pattern, values: torch.Tensor, x: torch.Tensor, *, transpose: bool = False) -> torch.Tensor:
    r"""``M(values) X`` (or ``M(values)ᵀ X`` with ``transpose``), head by head.

    Args:
        values: ``nnz`` or ``nnz × K``; ``x``: ``k × K·F`` (``m × K·F`` when transposed), ``K·F`` divisible by K.
    Returns: ``m × K·F`` (``k × K·F``). No autograd: the callers' Functions supply the adjoints.
    """
    out_rows = pat.shape[1] if transpose else pat.shape[0]
    k = _heads(values)
    width = x.shape[1] // k
    if pat.nnz == 0 or x.shape[1] == 0:
        return x.new_zeros((out_rows, x.shape[1]))
    x = x.contiguous()
    if k == 1:
        return torch.sparse.mm(pat.with_values(values.reshape(-1), transpose=transpose), x)
    outs = [torch.sparse.mm(pat.with_values(_head(values, h), transpose=transpose),
                            x[:, h * width:(h + 1) * width].contiguous()) for h in range(k)]
    return torch.cat(outs, dim=1)


def sddmm_dot(pat: Pattern, dst: torch.Tensor, src: torch.Tensor, heads: int = 1) -> torch.Tensor:
    r"""Per-edge, per-head dot products :math:`\langle D_{u,h}, X_{v,h} \rangle` → ``nnz × heads``.

    Runs over chunks of edges so the gathered rows never exceed :data:`SDDMM_CHUNK_ELEMENTS` elements."""
    width = dst.shape[1]
    out = dst.new_empty((pat.nnz, heads))
    if pat.nnz == 0:
        return out
    step = max(1, SDDMM_CHUNK_ELEMENTS // max(1, width))
    for e0 in range(0, pat.nnz, step):
        e1 = min(pat.nnz, e0 + step)
        prod = dst[pat.row[e0:e1]] * src[pat.col[e0:e1]]
        out[e0:e1] = prod.reshape(e1 - e0, heads, width // heads).sum(dim=2)
    return out


def row_reduce(pat: Pattern, values: torch.Tensor, op: str) -> torch.Tensor:
    """Per destination row, ``"sum"`` or ``"max"`` of the edge values (``nnz × K`` → ``m × K``); an empty row
    gives 0 (sum) or −inf (max)."""
    vals = as_edges(values)
    if op == "sum":
        out = vals.new_zeros((pat.shape[0], vals.shape[1]))
        return out.index_add_(0, pat.row, vals)
    out = vals.new_full((pat.shape[0], vals.shape[1]), float("-inf"))
    idx = pat.row.unsqueeze(1).expand_as(vals)
    return out.scatter_reduce(0, idx, vals, reduce="amax", include_self=True)


def col_sum(pat: Pattern, values: torch.Tensor) -> torch.Tensor:
    """Per source column, the sum of the edge values (``nnz × K`` → ``k × K``)."""
    vals = as_edges(values)
    return vals.new_zeros((pat.shape[1], vals.shape[1])).index_add_(0, pat.col, vals)
