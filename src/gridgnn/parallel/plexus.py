r"""``--algo plexus``: Plexus 3D tensor parallelism (Ranjan et al. 2025, §3, Algorithm 1) on the grid
``("x", "y", "z")`` of shape ``Gx × Gy × Gz``.

Each layer ``l`` has *roles* ``(a, b, c)``: ``(x, y, z)`` for ``l ≡ 0``, ``(z, x, y)`` for ``l ≡ 1``,
``(y, z, x)`` for ``l ≡ 2 (mod 3)`` — the rotation of §3.2, so a layer's output is already in the next layer's
input layout and at most three adjacency shards exist (six with the double permutation of §5.1). With
``V^a_k`` = the ``k``-th of ``G_a`` equal vertex blocks and ``C^b_k`` the ``k``-th of ``G_b`` column blocks:

==========  ===================================================  =========================================
matrix      local block on rank with coordinates ``(a_i, b_j, c_k)``  replicated along
==========  ===================================================  =========================================
``F``       rows ``V^a_i`` (input order), cols ``C^b_j`` of ``f_in``   ``c`` (layer 0: sharded along ``c``)
``A``       rows ``V^c_k`` (output order) × cols ``V^a_i``             ``b``
``W``       rows ``C^b_j`` of ``f_in`` × cols ``C^a_i`` of ``f_out``   sharded along ``c``, gathered per forward
``H=AF``    rows ``V^c_k`` × ``C^b_j``  (all-reduce over ``a``)        ``a``
``Q=HW``    rows ``V^c_k`` × ``C^a_i``  (all-reduce over ``b``)        ``b``
==========  ===================================================  =========================================

The parameters are sharded too: each rank holds the rows ``c_k`` (of ``G_c`` equal parts) of its block
``W[C^b_j, C^a_i]`` and the bias block ``b[C^a_i]``; the layer-0 input ``F`` is held as the ``c_k``-th row part
of ``F[V^a_i, C^b_j]``.

Forward (Alg. 1 lines 2–8): [layer 0: all-gather ``F`` over ``c``] ; ``H = SpMM(A, F)`` ; all-reduce ``H``
over ``a`` ; all-gather ``W`` over ``c`` ; ``Q = H W`` ; all-reduce ``Q`` over ``b``. Backward (lines 14–23):
``∂W = Hᵀ ∂Q`` ; reduce-scatter ``∂W`` over ``c`` (and all-reduce ``∂b`` over ``c``) ; ``∂H = ∂Q Wᵀ`` ;
all-reduce over ``a`` ; ``∂F = Aᵀ ∂H`` (the local transpose: no transpose communication) ; all-reduce over
``c`` (layer 0: reduce-scatter, skipped because the input features are not trainable). No gradient all-reduce
remains for the trainer. Blocked aggregation (§5.2): with ``block_rows > 0`` the SpMM and its all-reduce run in
row blocks of that many rows.

*Communication* per layer and rank (``w`` = bytes per element, ``n_c = |V^c_k|``):
forward — all-reduce of ``n_c |C^b_j| w`` over ``G_a`` and of ``n_c |C^a_i| w`` over ``G_b``
(``2(g−1)/g`` of each, both ways), all-gather of the ``W`` block over ``G_c`` (layer 0 also of ``F``);
backward — reduce-scatter of the ``W`` block and all-reduce of the bias block over ``G_c``, all-reduce of
``n_c |C^b_j| w`` over ``G_a`` and, for ``l > 0``, of ``|V^a_i| |C^b_j| w`` over ``G_c``.
"""
from __future__ import annotations

import numpy as np
import torch

from ..errors import GridGnnError
from ..ops import spmm, to_torch_csr
from ..partition import block_range, even_bounds
from ..partition.layout import plexus_roles as roles
from .base import Plan

def _blocked_allreduce_spmm(comm, mat, x, axis, block_rows: int):
    """``all_reduce(mat @ x)`` over ``axis``, in row blocks of ``block_rows`` (0: one block)."""
    rows = mat.shape[0]
    if block_rows <= 0 or block_rows >= rows:
        y = spmm(mat, x)
        comm.all_reduce(y, axis)
        return y
    outs = []
    crow = mat.crow_indices()
    for r0 in range(0, rows, block_rows):
        r1 = min(rows, r0 + block_rows)
        sub = _row_slice(mat, crow, r0, r1)
        y = spmm(sub, x)
        comm.all_reduce(y, axis)
        outs.append(y)
    return torch.cat(outs)


def _row_slice(mat, crow, r0: int, r1: int):
    a, b = int(crow[r0]), int(crow[r1])
    return torch.sparse_csr_tensor(crow[r0:r1 + 1] - a, mat.col_indices()[a:b], mat.values()[a:b],
                                   size=(r1 - r0, mat.shape[1]))


class _PlexusLayer(torch.autograd.Function):
    @staticmethod
    def forward(ctx, f, w_shard, b, plan, layer):
        L = plan.layers[layer]
        a, bx, c = L["roles"]
        comm = plan.comm
        if layer == 0:  # line 2: all-gather F across the c (= Z) group
            f = torch.cat(comm.all_gather_rows(f.contiguous(), c, rows=L["f_parts"]))
        h = _blocked_allreduce_spmm(comm, L["A"], f.contiguous(), a, plan.block_rows)  # lines 3–4
        w_blk = torch.cat(comm.all_gather_rows(w_shard.contiguous(), c, rows=L["w_parts"]))  # line 6
        q = h @ w_blk  # line 7
        comm.all_reduce(q, bx)  # line 8
        if b is not None:
            q = q + b
        ctx.save_for_backward(h, w_blk)
        ctx.plan, ctx.layer, ctx.has_b = plan, layer, b is not None
        ctx.needs_f = ctx.needs_input_grad[0]
        return q

    @staticmethod
    def backward(ctx, dq):
        h, w_blk = ctx.saved_tensors
        plan, L = ctx.plan, ctx.plan.layers[ctx.layer]
        a, bx, c = L["roles"]
        comm = plan.comm
        dq = dq.contiguous()
        dw = comm.reduce_scatter_rows(h.t() @ dq, L["w_bounds"], c)  # lines 15–16
        db = None
        if ctx.has_b:
            db = dq.sum(dim=0)
            comm.all_reduce(db, c)  # the bias block is replicated along c; its rows were split along c
        df = None
        if ctx.needs_f:
            dh = dq @ w_blk.t()  # line 19
            comm.all_reduce(dh, a)  # line 20
            df = spmm(L["At"], dh)  # line 22
            if ctx.layer == 0:  # line 23: F is sharded along c
                df = comm.reduce_scatter_rows(df, L["f_bounds"], c)
            else:  # later layers: F is replicated along c
                comm.all_reduce(df, c)
        return df, dw, db, None, None


class PlexusPlan(Plan):
    r"""Plexus on this rank.

    Args:
        comm: communication layer on a ``("x", "y", "z")`` grid.
        source: the block source (:mod:`gridgnn.parallel.source`); its ``perm_r``/``perm_c`` give the vertex
            orders: layer ``l`` reads its input in ``perm_c`` order and writes its output in ``perm_r`` order
            for even ``l``, the other way round for odd ``l`` (one order for a single permutation).
        dims: layer widths ``[f_0, ..., f_L]``.
        block_rows: blocked aggregation (0 = off).
    """

    name = "plexus"

    def __init__(self, comm, source, dims: list[int], *, dtype=torch.float64, device="cpu", block_rows: int = 0):
        self.comm, self.grid, self.source, self.dims = comm, comm.grid, source, list(dims)
        self.block_rows = int(block_rows)
        if block_rows < 0:
            raise GridGnnError(f"--blocked-aggregation must be >= 0, got {block_rows}")
        n = source.n
        g = {ax: self.grid.size(ax) for ax in ("x", "y", "z")}
        for ax, s in g.items():
            if s > n:
                raise GridGnnError(f"grid axis {ax} has {s} processes but the graph only {n} vertices")
        self.vb = {ax: even_bounds(n, g[ax]) for ax in g}
        self.me = {ax: self.grid.rank(ax) for ax in g}
        self.layers = []
        shards: dict = {}
        for layer, (fi, fo) in enumerate(zip(dims[:-1], dims[1:])):
            a, b, c = roles(layer)
            version = "rc" if layer % 2 == 0 else "cr"
            key = (layer % 3, version if source.double else "rc")
            if key not in shards:
                rows = block_range(self.vb[c], self.me[c])
                cols = block_range(self.vb[a], self.me[a])
                m = source.submatrix(version, rows, cols)
                shards[key] = (to_torch_csr(m, dtype=dtype, device=device),
                               to_torch_csr(m.T.tocsr(), dtype=dtype, device=device), int(m.nnz))
            A, At, nnz = shards[key]
            fb = block_range(even_bounds(fi, g[b]), self.me[b])
            wb = even_bounds(fb[1] - fb[0], g[c])  # rows of the W block, split along c
            self.layers.append({
                "roles": (a, b, c), "A": A, "At": At, "nnz": nnz,
                "f_in_block": fb, "f_out_block": block_range(even_bounds(fo, g[a]), self.me[a]),
                "w_bounds": wb, "w_parts": np.diff(wb).tolist(),
            })
        na = block_range(self.vb["x"], self.me["x"])
        fbounds = even_bounds(na[1] - na[0], g["z"])  # layer-0 input rows, split along z (= c of layer 0)
        self.layers[0]["f_bounds"], self.layers[0]["f_parts"] = fbounds, np.diff(fbounds).tolist()
        self._shard_nnz = [v[2] for v in shards.values()]
        last = roles(len(dims) - 2)
        self.class_axis = last[0]
        self.copies = g[last[0]] * g[last[1]]
        self.grad_axes = ()  # the layers reduce their own parameter gradients (reduce-scatter / all-reduce)

    def param_slice(self, layer: int, kind: str) -> tuple[slice, ...]:
        """This rank's shard of layer ``layer``'s weight (``kind="w"``) or bias (``"b"``)."""
        L = self.layers[layer]
        a0, a1 = L["f_out_block"]
        if kind == "b":
            return (slice(a0, a1),)
        b0, _ = L["f_in_block"]
        k = self.me[L["roles"][2]]
        r0, r1 = block_range(L["w_bounds"], k)
        return (slice(b0 + r0, b0 + r1), slice(a0, a1))

    def shard_nnz(self) -> list[int]:
        return list(self._shard_nnz)

    # ------------------------------------------------------------------ layouts
    def in_rows(self, layer: int) -> np.ndarray:
        a = roles(layer)[0]
        r0, r1 = block_range(self.vb[a], self.me[a])
        rows = self._order(layer, "in")[r0:r1]
        if layer == 0:  # the layer-0 input is held as the z-th row part of the block
            k0, k1 = block_range(self.layers[0]["f_bounds"], self.me["z"])
            rows = rows[k0:k1]
        return rows

    def in_cols(self, layer: int, f: int) -> tuple[int, int]:
        b = roles(layer)[1]
        return block_range(even_bounds(f, self.grid.size(b)), self.me[b])

    def out_rows(self) -> np.ndarray:
        last = len(self.dims) - 2
        c = roles(last)[2]
        r0, r1 = block_range(self.vb[c], self.me[c])
        return self._order(last, "out")[r0:r1]

    def out_cols(self, classes) -> tuple[int, int]:
        classes = self.dims[-1] if classes is None else classes
        a = roles(len(self.dims) - 2)[0]
        return block_range(even_bounds(classes, self.grid.size(a)), self.me[a])

    def input(self, x=None) -> torch.Tensor:
        r"""Layer-0 input shard: the ``z``-th row part of the ``(V^x_i, C^y_j)`` block (all-gathered over ``z``
        in every forward, Alg. 1 line 2)."""
        c0, c1 = self.in_cols(0, self.dims[0])
        mine = self.source.node_rows("x", self.in_rows(0))[:, c0:c1]
        return torch.from_numpy(np.ascontiguousarray(mine, dtype=np.float64))

    def layer(self, layer: int, h, w, b):
        return _PlexusLayer.apply(h, w, b, self, layer)
