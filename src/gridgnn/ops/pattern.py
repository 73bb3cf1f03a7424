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

A layout that shards feature columns passes ``col_heads``: the ``(head, c0, c1)`` column ranges of the local
block (a head may straddle two blocks; the dot product is then a partial sum over the local columns).
"""
from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp
import torch

from . import kernels, triton_kernels
from .device_paths import device_paths
from .kernels import head_columns  # noqa: F401  (the column spans of heads; defined with the kernels)

warnings.filterwarnings("ignore", message=".*Sparse CSR tensor support is in beta.*")
warnings.filterwarnings("ignore", message=".*Sparse invariant checks are implicitly disabled.*")

SDDMM_CHUNK_ELEMENTS = 1 << 22  # elements of the gathered rows per chunk of the dot-product SDDMM
INT32_MAX = int(np.iinfo(np.int32).max)


def index_dtype(*sizes: float) -> torch.dtype:
    r"""The index dtype of a sparse block whose extents and stored entries are ``sizes`` (rows, columns, nnz):
    ``int32`` while every one fits (SciPy's own rule), else ``int64``. Row pointers, columns, rows, the transposed
    order and edge positions of a block are all below its largest size, so 4 bytes per index suffice for every
    block of a graph below 2³¹ vertices and 2³¹ entries per block."""
    return torch.int32 if index_bytes(*sizes) == 4 else torch.int64


def np_index(dtype: torch.dtype):
    """The NumPy dtype of a torch index dtype (``int32`` or ``int64``)."""
    return np.int32 if dtype == torch.int32 else np.int64


def index_bytes(*sizes):
    """Bytes per index of a block of ``sizes`` (:func:`index_dtype`): 4 or 8 — per element where the sizes are
    arrays (one per block)."""
    if any(isinstance(v, np.ndarray) for v in sizes):
        return np.where(np.maximum.reduce(np.broadcast_arrays(*map(np.asarray, sizes))) <= INT32_MAX, 4, 8)
    return 4 if max(sizes, default=0) <= INT32_MAX else 8


def holds_row(device) -> bool:
    """Whether a pattern on ``device`` keeps the row of every edge (:class:`Pattern`): on a device
    (:func:`~gridgnn.ops.device_paths.device_paths`), whose torch compositions gather by it; the host derives it when
    asked (one pass over ``crow``)."""
    return device_paths(device)


def row_index(row: torch.Tensor | None, crow: torch.Tensor | None) -> torch.Tensor:
    """``row`` (the row of every edge), or where a caller passes ``None`` the rows of the CSR pointer ``crow``."""
    return row if row is not None else rows_of(crow)


def rows_of(crow: torch.Tensor, nnz: int | None = None) -> torch.Tensor:
    """The row of every edge of a CSR row pointer (``crow``'s dtype and device); ``nnz`` where the caller knows it
    (on a device, else the length is read back from it: a wait for the device's queue)."""
    m = crow.numel() - 1
    return torch.repeat_interleave(torch.arange(m, dtype=crow.dtype, device=crow.device), crow[1:] - crow[:-1],
                                   output_size=nnz)


def transpose_by_sort(col: torch.Tensor, row: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(t_crow, t_col, t_perm)`` of the edges ``(row, col)`` given in row order, ``k`` columns: a stable sort by
    column (rows ascending within a column) and the pointer searched in the sorted columns — what a device runs,
    with nothing read back to the host (``bincount`` would read the columns' maximum)."""
    cols, t_perm = torch.sort(col, stable=True)
    wide = col.dtype == torch.int64
    t_crow = torch.searchsorted(cols, torch.arange(k + 1, dtype=col.dtype, device=col.device), out_int32=not wide)
    return t_crow, row[t_perm], t_perm.to(col.dtype)


class Pattern:
    r"""Structure of a local ``m × k`` sparse block: CSR arrays, the row of every edge and the transposed order.

    Args:
        crow, col: CSR row pointer and column of each edge (integer tensors, columns sorted within a row); kept
            in :func:`index_dtype` of ``(m, k, nnz)`` (``int32`` below 2³¹: 4 bytes per index, cast if given wider).
        shape: ``(m, k)``.
        transpose: build the transposed order now (else on first use).
        row: the row of each edge, when another pattern of the same rows has it (else made from ``crow``); kept
            only where :func:`holds_row` (ignored on the host's paths).
        symmetric: the caller's word that the block is square and its pattern symmetric (an undirected graph's
            whole matrix): the transpose's row pointer and columns, checked equal when it is built, are then this
            pattern's own, held once (only the transposed order is the transpose's own).
    Attributes:
        row: destination row of each edge — kept on a device, whose torch compositions gather by it; on the host's
        paths derived from ``crow`` when asked and not kept (:func:`holds_row`: the numba kernels walk ``crow``, so
        a host pattern is column + value, 8 bytes per stored entry, not 12). ``transpose()`` gives ``(t_crow, t_col,
        t_perm)``: the CSR of the transpose, whose edge ``t`` is edge ``t_perm[t]`` of this pattern (built once, on
        first use, so a block row of ``n`` columns never keeps an ``n + 1`` pointer it does not need).
    """

    def __init__(self, crow: torch.Tensor, col: torch.Tensor, shape: tuple[int, int], *, transpose: bool = False,
                 row: torch.Tensor | None = None, symmetric: bool = False):
        self.shape = (int(shape[0]), int(shape[1]))
        self.nnz = int(col.numel())
        dt = index_dtype(*self.shape, self.nnz)
        self.crow, self.col = crow.to(dt), col.to(dt)
        self._row = None
        if holds_row(self.crow.device):
            self._row = row.to(dt) if row is not None else rows_of(self.crow, self.nnz)
        self._t = None
        self._symmetric = bool(symmetric) and self.shape[0] == self.shape[1]
        #: what callers derive from this pattern, by key: made once (on a device, where making it reads the pattern
        #: back to the host) and kept while the pattern lives
        self.derived: dict = {}
        if transpose:
            self.transpose()

    @classmethod
    def from_scipy(cls, mat: sp.spmatrix, *, device="cpu", transpose: bool = False,
                   symmetric: bool = False) -> "Pattern":
        """From a SciPy matrix (its values are ignored; duplicates are summed first, indices sorted)."""
        mat = sp.csr_matrix(mat)
        mat.sum_duplicates()
        mat.sort_indices()
        dt = np_index(index_dtype(*mat.shape, mat.nnz))
        crow = torch.from_numpy(mat.indptr.astype(dt)).to(device)
        col = torch.from_numpy(mat.indices.astype(dt)).to(device)
        return cls(crow, col, mat.shape, transpose=transpose, symmetric=symmetric)

    @property
    def device(self):
        return self.crow.device

    @property
    def row(self) -> torch.Tensor:
        """The destination row of every edge (kept on a device; on the CPU made from ``crow`` for the caller)."""
        return row_index(self._row, self.crow)

    @property
    def kept_row(self) -> torch.Tensor | None:
        """The rows this pattern keeps (:func:`holds_row`), else ``None``: what a caller hands on to share them."""
        return self._row

    @property
    def index_dtype(self) -> torch.dtype:
        """The dtype of every index tensor of this pattern (:func:`index_dtype`)."""
        return self.crow.dtype

    def transpose(self):
        """``(t_crow, t_col, t_perm)``, built once: the edges by column, rows ascending within a column (on the CPU
        SciPy's counting transpose of the edge positions, one pass; on a device a stable sort)."""
        if self._t is None:
            dt = self.index_dtype
            if not device_paths(self.device):
                npdt = np_index(dt)
                pos = sp.csr_matrix((np.arange(self.nnz, dtype=npdt), self.col.numpy(), self.crow.numpy()),
                                    shape=self.shape).tocsc()
                self._t = self._shared(*(torch.from_numpy(np.ascontiguousarray(a, dtype=npdt))
                                         for a in (pos.indptr, pos.indices, pos.data)))
                return self._t
            self._t = self._shared(*transpose_by_sort(self.col, self.row, self.shape[1]))
        return self._t

    def _shared(self, t_crow, t_col, t_perm) -> tuple:
        """The transpose, with this pattern's row pointer and columns in place of its own where the caller said the
        pattern is symmetric and they are equal (on a device the check reads one flag back, where the pattern is
        built)."""
        if self._symmetric and torch.equal(t_crow, self.crow) and torch.equal(t_col, self.col):
            return self.crow, self.col, t_perm
        return t_crow, t_col, t_perm

    def with_values(self, values: torch.Tensor, *, transpose: bool = False) -> torch.Tensor:
        """Torch sparse CSR tensor of this pattern (or its transpose) with ``values`` (``nnz``, no autograd)."""
        if transpose:
            t_crow, t_col, t_perm = self.transpose()
            return torch.sparse_csr_tensor(t_crow, t_col, values[t_perm], size=(self.shape[1], self.shape[0]))
        return torch.sparse_csr_tensor(self.crow, self.col, values, size=self.shape)

    def index_tensors(self) -> list:
        """The index tensors held now (the transpose's once built; each once)."""
        held = [self.crow, self.col] + ([self._row] if self._row is not None else []) + list(self._t or ())
        return [t for k, t in enumerate(held) if all(t is not u for u in held[:k])]


def _heads(values: torch.Tensor) -> int:
    return 1 if values.dim() == 1 else int(values.shape[1])


def as_edges(values: torch.Tensor) -> torch.Tensor:
    """``nnz`` or ``nnz × K`` values as ``nnz × K`` (works for zero edges)."""
    return values.reshape(values.shape[0], _heads(values))


def spmm(pat: Pattern, values: torch.Tensor, x: torch.Tensor, *, transpose: bool = False,
         col_heads: list[tuple[int, int, int]] | None = None) -> torch.Tensor:
    r"""``M(values) X`` (or ``M(values)ᵀ X`` with ``transpose``), head by head.

    Args:
        values: ``nnz`` or ``nnz × K``; ``x``: ``k × W`` (``m × W`` when transposed).
        col_heads: the head of each local column range (default: ``W`` split into ``K`` equal heads).
    Returns: ``m × W`` (``k × W``). No autograd: the callers' Functions supply the adjoints.
    """
    out_rows = pat.shape[1] if transpose else pat.shape[0]
    if pat.nnz == 0 or x.shape[1] == 0:
        return x.new_zeros((out_rows, x.shape[1]))
    x = x.contiguous()
    vals = as_edges(values)
    if kernels.fused(x, vals):
        crow, col, perm = pat.transpose() if transpose else (pat.crow, pat.col, None)
        return kernels.spmm_csr(crow, col, perm, vals, x, out_rows, col_heads)
    return spmm_reference(pat, vals, x, transpose=transpose, col_heads=col_heads)


def sparse_times(a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``torch.sparse.mm(a, x)`` (``a``: sparse CSR), the same bits, without its temporary: torch's composite fills
    an ``m × n`` tensor with zeros and adds the product to it (``at::_sparse_mm``), so that a second output-sized
    tensor (and a fill) is made at every product; ``addmm`` with β = 0 onto an expanded zero makes the output alone."""
    return torch.addmm(x.new_zeros(()).expand(a.shape[0], x.shape[1]), a, x, beta=0)


def spmm_reference(pat: Pattern, vals: torch.Tensor, x: torch.Tensor, *, transpose: bool = False,
                   col_heads: list[tuple[int, int, int]] | None = None) -> torch.Tensor:
    """:func:`spmm` as ``torch.sparse.mm`` per head (:func:`sparse_times`; ``vals``: ``nnz × K``, ``x`` contiguous,
    both non-empty)."""
    out_rows = pat.shape[1] if transpose else pat.shape[0]
    heads = col_heads if col_heads is not None else head_columns(vals.shape[1], x.shape[1])
    if len(heads) == 1 and heads[0][1] == 0 and heads[0][2] == x.shape[1]:
        return sparse_times(pat.with_values(vals[:, heads[0][0]].contiguous(), transpose=transpose), x)
    out = x.new_zeros((out_rows, x.shape[1]))
    for h, a, b in heads:
        out[:, a:b] = sparse_times(pat.with_values(vals[:, h].contiguous(), transpose=transpose),
                                   x[:, a:b].contiguous())
    return out


def sddmm_dot(pat: Pattern, dst: torch.Tensor, src: torch.Tensor, heads: int = 1, *,
              col_heads: list[tuple[int, int, int]] | None = None) -> torch.Tensor:
    r"""Per-edge, per-head dot products :math:`\langle D_{u,h}, X_{v,h} \rangle` over the local columns →
    ``nnz × heads`` (``col_heads``: the column segments ``(h, a, b)`` summed into head ``h``; a head may have
    several). Runs over chunks of edges so the gathered rows never exceed :data:`SDDMM_CHUNK_ELEMENTS` elements."""
    width = dst.shape[1]
    col_heads = col_heads if col_heads is not None else head_columns(heads, width)
    if pat.nnz == 0 or width == 0:
        return dst.new_zeros((pat.nnz, heads))
    if kernels.fused(dst, src):
        return kernels.sddmm_dot_csr(pat.crow, pat.col, dst, src, heads, col_heads)
    if triton_kernels.usable(dst.device):
        out = triton_kernels.sddmm_dot(pat.row, pat.col, dst, src, heads, col_heads)
        if out is not None:
            return out
    return sddmm_dot_reference(pat, dst, src, heads, col_heads=col_heads)


def sddmm_dot_reference(pat: Pattern, dst: torch.Tensor, src: torch.Tensor, heads: int = 1, *,
                        col_heads: list[tuple[int, int, int]] | None = None) -> torch.Tensor:
    """:func:`sddmm_dot` over gathered chunks of edges (torch ops only)."""
    width = dst.shape[1]
    col_heads = col_heads if col_heads is not None else head_columns(heads, width)
    out = dst.new_zeros((pat.nnz, heads))
    step = max(1, SDDMM_CHUNK_ELEMENTS // max(1, width))
    per = width // heads  # equal heads side by side (the default split): one reduction over a heads × per view
    even = per * heads == width and list(col_heads) == [(h, h * per, (h + 1) * per) for h in range(heads)]
    row = pat.row
    for e0 in range(0, pat.nnz, step):
        e1 = min(pat.nnz, e0 + step)
        prod = dst[row[e0:e1]] * src[pat.col[e0:e1]]
        if even:
            out[e0:e1] = prod.view(e1 - e0, heads, per).sum(dim=2)
            continue
        for h, a, b in col_heads:  # (a head in several segments: their sums added, as the kernels add them)
            out[e0:e1, h] += prod[:, a:b].sum(dim=1)
    return out


def sddmm_add(pat: Pattern, s_dst: torch.Tensor, s_src: torch.Tensor) -> torch.Tensor:
    r"""Per edge and head, :math:`s^{dst}_{u,h} + s^{src}_{v,h}` (``m × K`` and ``k × K`` → ``nnz × K``)."""
    if pat.nnz and kernels.fused(s_dst, s_src):
        return kernels.sddmm_add_csr(pat.crow, pat.col, s_dst, s_src)
    return s_dst[pat.row] + s_src[pat.col]


def reduce_rows(row: torch.Tensor | None, m: int, values: torch.Tensor, op: str,
                crow: torch.Tensor | None = None) -> torch.Tensor:
    """Per destination row (``row[e]`` of each edge, ``m`` rows), ``"sum"`` or ``"max"`` of the edge values
    (``nnz × K`` → ``m × K``); an empty row gives 0 (sum) or −inf (max). ``crow``: the CSR pointer when the edges
    are in row order (a segmented reduction then replaces the scatter; ``row`` may then be ``None``)."""
    vals = as_edges(values)
    if crow is not None and kernels.fused(vals):
        return kernels.segment_reduce(crow, vals, op)
    if crow is not None and op == "sum" and device_paths(vals.device):
        return segmented_sum(crow, vals)
    row = row_index(row, crow)
    if op == "sum":
        return add_at(vals.new_zeros((m, vals.shape[1])), row, vals)
    out = vals.new_full((m, vals.shape[1]), float("-inf"))
    return out.scatter_reduce(0, row.long().unsqueeze(1).expand_as(vals), vals, reduce="amax", include_self=True)


def exp_shifted(row: torch.Tensor | None, m: torch.Tensor, e: torch.Tensor,
                crow: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    r"""The numerator and the local denominator of a softmax per destination row: :math:`x_{uv} = \exp(e_{uv} -
    m_u)` (``nnz × K``, ``m``: ``rows × K`` shifts) and :math:`\sum_v x_{uv}` (``rows × K``); one pass with
    ``crow``."""
    e = as_edges(e)
    if crow is not None and kernels.fused(e, m):
        return kernels.row_exp(crow, e, m)
    row = row_index(row, crow)
    ex = torch.exp(e - m[row])
    return ex, reduce_rows(row, m.shape[0], ex, "sum", crow)


def divide_rows(row: torch.Tensor | None, ex: torch.Tensor, s: torch.Tensor, crow: torch.Tensor | None = None) -> torch.Tensor:
    """``ex[e] / s[row[e]]`` per edge and head."""
    if crow is not None and kernels.fused(ex, s):
        return kernels.row_apply(crow, ex, None, s)
    return ex / s[row_index(row, crow)]


def dot_rows(row: torch.Tensor | None, rows: int, a: torch.Tensor, b: torch.Tensor,
             crow: torch.Tensor | None = None) -> torch.Tensor:
    """Per destination row and head, ``Σ_v a_uv b_uv`` of two ``nnz × K`` edge tensors."""
    if crow is not None and kernels.fused(a, b):
        return kernels.row_dot(crow, a, b)
    return reduce_rows(row, rows, a * b, "sum", crow)


def softmax_grad_rows(row: torch.Tensor | None, a: torch.Tensor, da: torch.Tensor, r: torch.Tensor,
                      crow: torch.Tensor | None = None) -> torch.Tensor:
    r""":math:`\alpha_{uv} (\partial\alpha_{uv} - r_u)` per edge and head (``r``: the row sums of
    :math:`\alpha \odot \partial\alpha`)."""
    if crow is not None and kernels.fused(a, da, r):
        return kernels.row_apply(crow, a, da, r)
    return a * (da - r[row_index(row, crow)])


def row_reduce(pat: Pattern, values: torch.Tensor, op: str) -> torch.Tensor:
    """:func:`reduce_rows` over the rows of ``pat``."""
    return reduce_rows(pat.kept_row, pat.shape[0], values, op, crow=pat.crow)


def col_sum(pat: Pattern, values: torch.Tensor) -> torch.Tensor:
    """Per source column, the sum of the edge values (``nnz × K`` → ``k × K``); fused: a segmented sum over the
    transposed order."""
    vals = as_edges(values)
    if pat.nnz and kernels.fused(vals):
        t_crow, _, t_perm = pat.transpose()
        return kernels.segment_reduce(t_crow, vals[t_perm], "sum")
    if pat.nnz and device_paths(vals.device):
        return col_sum_in_order(pat, vals)
    return add_at(vals.new_zeros((pat.shape[1], vals.shape[1])), pat.col, vals)


def add_at(out: torch.Tensor, index: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """``out[index[i]] += values[i]`` along the first dimension, in place, every sum added in the same order on every
    run: ``index_add_`` on the host (it adds index by index), ``index_put_`` with ``accumulate`` on a device (which
    sorts the indices first; a device's ``index_add_`` adds with atomics, in an order that changes from run to run,
    and the host's ``index_put_`` too from 32768 elements on several threads)."""
    if not device_paths(out.device):
        return out.index_add_(0, index, values)
    return out.index_put_((index.long(),), values, accumulate=True)


def segmented_sum(crow: torch.Tensor, vals: torch.Tensor) -> torch.Tensor:
    """Per segment ``crow[i]..crow[i+1]`` of the rows of ``vals`` (``nnz × K``), their sum added in order (an empty
    segment: 0): what a device runs for a sum per row or column, where ``index_add_`` adds with atomics in an order
    that changes from run to run — the same bits every run, as the numba kernel's."""
    return torch.segment_reduce(vals, "sum", offsets=crow, axis=0)


def col_sum_in_order(pat: Pattern, vals: torch.Tensor) -> torch.Tensor:
    """:func:`col_sum` of the edge values ``vals`` (``nnz × K``) as a :func:`segmented_sum` over the transposed
    order (each column's edges added in the order of their rows)."""
    t_crow, _, t_perm = pat.transpose()
    return segmented_sum(t_crow, vals[t_perm])
