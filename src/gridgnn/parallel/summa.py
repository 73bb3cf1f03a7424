r"""SUMMA machinery shared by ``--algo 2d`` (CAGNET Algorithm 3) and ``--algo 3d`` (CAGNET Split-3D-SpMM).

Grid: ``pr × pc`` process rows × columns (axes ``row_axis``, ``col_axis``) times ``z`` fiber layers
(``fiber_axis``; ``z = 1`` and no axis for 2D). Rank ``(i, j, k)``.

Vertex blocks: ``B(i, k)`` = block ``i·z + k`` of ``pr·z`` equal blocks; process row ``i`` owns the matrix rows
``R_i = ∪_k B(i, k)`` (contiguous). Dense matrices ``X`` (``H``, ``G``, ``Z``) live as blocks
``X[B(i, k), C_j]`` with ``C_j`` the ``j``-th of ``pc`` equal column blocks — so 2D holds ``X[R_i, C_j]``.

One product ``Y = M X`` (``M`` = :math:`\hat M` or its transpose): in fiber layer ``k`` the inner index set
``V_k = ∪_i B(i, k)`` is cut into *panels* — the common refinement of the ``B(i, k)`` (whose rows of ``X``
process row ``i`` holds) and of ``pc`` equal parts of ``V_k`` (whose columns of ``M`` process column ``j``
holds). For each panel ``p`` (Alg. 3 lines 3–11): ``Â ← BCAST(M[R_i, p], P(i, :, k))`` (sparse: index and
value arrays) ; ``X̂ ← BCAST(X[p, C_j], P(:, j, k))`` ; ``T += SPMM(Â, X̂)``. Then 3D reduce-scatters the
partial ``T[R_i, C_j]`` over the fiber into ``T[B(i, k), C_j]`` (Split-3D). The *partial SUMMA* with the
replicated ``W`` (lines 12–18) broadcasts each ``T[B(i,k), C_q]`` along the process row and multiplies
``T[B(i,k), :] · W[:, C'_j]``.

GCN layer, forward: ``T = SUMMA(M̂, H)`` ; ``Z = partial-SUMMA(T, W) + b``. Backward (CAGNET §IV-C.3–4, reusing
``M̂ᵀ G``): ``U = SUMMA(M̂ᵀ, ∂Z)`` ; gather ``U[B(i,k), :]`` along the row (partial SUMMA) ;
``∂H = U Wᵀ[:, C_j]`` ; ``∂W[C_j, :] = H[B(i,k), C_j]ᵀ U[B(i,k), :]`` (each rank's unique share; the gradient
all-reduce sums them). No transpose communication: each rank reads its blocks of :math:`\hat M^\mathsf{T}`.
The logits are column-sharded along ``col_axis``; as CAGNET §IV-C.2 describes, each rank all-gathers its
logits rows along the process row (broadcasts of ``|B(i,k)|·|C_q|·w``) before the log-softmax; its backward
is local (each rank keeps the gradient of its own columns).

*Communication* per SUMMA and rank with ``w``-byte values: every panel ``p`` of the rank's fiber layer —
the owner column sends ``8(|R_i| + 1 + nnz) + w·nnz`` bytes of ``M[R_i, p]`` (others of the row receive it),
the owner row sends ``|p|·|C_j|·w`` (others of the column receive); 3D adds a reduce-scatter of
``|R_i|·|C_j|·w`` over ``z``; the partial SUMMA broadcasts ``|B(i,k)|·|C_q|·w`` from each column ``q``.
"""
from __future__ import annotations

import numpy as np
import torch

from ..errors import GridGnnError
from ..ops import spmm
from ..partition import block_range, even_bounds
from .base import Plan


class Geometry:
    r"""Blocks and panels of a ``pr × pc × z`` grid for ``n`` vertices (see the module docstring).

    Attributes:
        fine: ``even_bounds(n, pr·z)``; ``B(i, k)`` = ``fine[i·z + k] : fine[i·z + k + 1]``.
        panels[k]: list of ``(v0, v1, i_owner, j_owner)`` for fiber layer ``k``.
    """

    def __init__(self, n: int, pr: int, pc: int, z: int):
        if pr * z > n:
            raise GridGnnError(f"grid needs {pr * z} vertex blocks but the graph has only {n} vertices")
        self.n, self.pr, self.pc, self.z = n, pr, pc, z
        self.fine = even_bounds(n, pr * z)
        self.panels = []
        for k in range(z):
            ranges = [self.block(i, k) for i in range(pr)]
            total = sum(b - a for a, b in ranges)
            cuts = even_bounds(total, pc)  # positions in the concatenated V_k sequence
            out, pos = [], 0
            for i, (a, b) in enumerate(ranges):
                start = a
                while start < b:
                    off = pos + (start - a)
                    j = int(np.searchsorted(cuts, off, side="right") - 1)
                    end = min(b, a + (int(cuts[j + 1]) - pos))
                    out.append((start, end, i, j))
                    start = end
                pos += b - a
            self.panels.append(out)

    def block(self, i: int, k: int) -> tuple[int, int]:
        return block_range(self.fine, i * self.z + k)

    def rows(self, i: int) -> tuple[int, int]:
        return int(self.fine[i * self.z]), int(self.fine[(i + 1) * self.z])

    def fiber_bounds(self, i: int) -> np.ndarray:
        """Boundaries of ``B(i, 0..z-1)`` relative to the start of ``R_i``."""
        return self.fine[i * self.z:(i + 1) * self.z + 1] - self.fine[i * self.z]


class SummaSpMM:
    r"""``Y[B(i,k), C_j] = (M X)[B(i,k), C_j]`` for one matrix version, on this rank.

    Args:
        transpose: use :math:`\hat M^\mathsf{T}` (backward).
        version: ``"rc"``/``"cr"`` of the source (rows in the output order, columns in the input order).
    """

    def __init__(self, plan, version: str, transpose: bool):
        self.plan = plan
        geo, comm = plan.geo, plan.comm
        i, j, k = plan.i, plan.j, plan.k
        r0, r1 = geo.rows(i)
        self.local = {}  # panel index -> (index tensor, value tensor) of M[R_i, panel] this rank owns
        nnz_mine = {}
        for p, (v0, v1, _, jo) in enumerate(geo.panels[k]):
            if jo != j:
                continue
            if transpose:
                m = plan.source.submatrix(version, (v0, v1), (r0, r1)).T.tocsr()
            else:
                m = plan.source.submatrix(version, (r0, r1), (v0, v1))
            m.sort_indices()
            idx = torch.from_numpy(np.concatenate([m.indptr, m.indices]).astype(np.int64)).to(plan.device)
            val = torch.from_numpy(m.data.astype(np.float64)).to(plan.dtype).to(plan.device)
            self.local[p] = (idx, val)
            nnz_mine[p] = int(m.nnz)
        with comm.phase("setup"):
            allnnz = comm.all_gather_json(nnz_mine, plan.col_axis)
        self.nnz = {int(p): v for d in allnnz for p, v in d.items()}

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        plan = self.plan
        geo, comm, i, j, k = plan.geo, plan.comm, plan.i, plan.j, plan.k
        r0, r1 = geo.rows(i)
        nrow = r1 - r0
        b0, _ = geo.block(i, k)
        t = x.new_zeros((nrow, x.shape[1]))
        for p, (v0, v1, io, jo) in enumerate(geo.panels[k]):  # Alg. 3 line 3
            nnz = self.nnz[p]
            if jo == j:
                idx, val = self.local[p]
            else:
                idx = torch.empty(nrow + 1 + nnz, dtype=torch.int64, device=x.device)
                val = torch.empty(nnz, dtype=x.dtype, device=x.device)
            comm.broadcast(idx, jo, plan.col_axis, tag="bcast_sparse")  # line 9: Â ← BCAST(Aᵀ_ic, P(i,:))
            comm.broadcast(val, jo, plan.col_axis, tag="bcast_sparse")
            if io == i:
                xp = x[v0 - b0:v1 - b0].contiguous()
            else:
                xp = x.new_empty((v1 - v0, x.shape[1]))
            comm.broadcast(xp, io, plan.row_axis)  # line 10: Ĥ ← BCAST(H_rj, P(:,j))
            if nnz:
                a = torch.sparse_csr_tensor(idx[:nrow + 1], idx[nrow + 1:], val, size=(nrow, v1 - v0))
                t += spmm(a, xp)  # line 11
        if plan.fiber_axis is not None:  # Split-3D: reduce-scatter the partial sums over the fiber
            t = comm.reduce_scatter_rows(t, geo.fiber_bounds(i), plan.fiber_axis)
        return t


def _gather_cols(plan, t: torch.Tensor, width: int) -> torch.Tensor:
    """Partial SUMMA: broadcast every ``T[B(i,k), C_q]`` along the process row; returns ``T[B(i,k), :]``."""
    comm, j = plan.comm, plan.j
    cb = even_bounds(width, plan.geo.pc)
    parts = []
    for q in range(plan.geo.pc):  # Alg. 3 line 12
        c0, c1 = block_range(cb, q)
        buf = t.contiguous() if q == j else t.new_empty((t.shape[0], c1 - c0))
        comm.broadcast(buf, q, plan.col_axis)  # line 16: T̂ ← BCAST(T_ic, P(i,:))
        parts.append(buf)
    return torch.cat(parts, dim=1)


class _SummaLayer(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, w, b, plan, layer):
        fwd, _ = plan.ops[layer]
        t = fwd(h.contiguous())  # T = Â H  (SUMMA, then 3D fiber reduce-scatter)
        t_full = _gather_cols(plan, t, w.shape[0])  # partial SUMMA
        o0, o1 = plan.col_block(w.shape[1])
        z = t_full @ w[:, o0:o1]  # line 18: H_ij += GEMM(T̂, W(actv, colrange))
        if b is not None:
            z = z + b[o0:o1]
        ctx.save_for_backward(h, w)
        ctx.plan, ctx.layer, ctx.has_b, ctx.needs_h = plan, layer, b is not None, ctx.needs_input_grad[0]
        return z

    @staticmethod
    def backward(ctx, dz):
        h, w = ctx.saved_tensors
        plan = ctx.plan
        _, bwd = plan.ops[ctx.layer]
        dz = dz.contiguous()
        u = bwd(dz)  # U = M̂ᵀ ∂Z (SUMMA with the transposed blocks)
        u_full = _gather_cols(plan, u, w.shape[1])
        i0, i1 = plan.col_block(w.shape[0])
        o0, o1 = plan.col_block(w.shape[1])
        dw = torch.zeros_like(w)
        dw[i0:i1] = h.t() @ u_full  # Y = Hᵀ (M̂ᵀ G): this rank's rows of ∂W, summed over (i, k) by the grad all-reduce
        db = None
        if ctx.has_b:
            db = dz.new_zeros(w.shape[1])
            db[o0:o1] = dz.sum(dim=0)
        dh = u_full @ w[i0:i1].t() if ctx.needs_h else None  # G^{l-1} = (M̂ᵀ G) Wᵀ
        return dh, dw, db, None, None


class _GatheredCE(torch.autograd.Function):
    """Cross-entropy after the row all-gather of the logits (CAGNET); backward keeps this rank's columns."""

    @staticmethod
    def forward(ctx, logits, y, mask, plan, n_train):
        full = _gather_cols(plan, logits, plan.dims[-1])
        z = full[mask]
        logp = torch.log_softmax(z, dim=1)
        loss = -logp.gather(1, y[mask].unsqueeze(1)).sum() / n_train
        ctx.save_for_backward(logp, mask, y)
        ctx.plan, ctx.n_train, ctx.shape = plan, n_train, logits.shape
        return loss

    @staticmethod
    def backward(ctx, grad):
        logp, mask, y = ctx.saved_tensors
        g = torch.exp(logp)
        g[torch.arange(g.shape[0]), y[mask]] -= 1.0
        c0, c1 = ctx.plan.out_cols(None)
        out = logp.new_zeros(ctx.shape)
        out[mask] = g[:, c0:c1] * (grad / ctx.n_train)
        return out, None, None, None, None


class SummaPlan(Plan):
    r"""2D (``z = 1``) or 3D (Split-3D) CAGNET on this rank; see the module docstring.

    Args:
        comm: on a ``("row", "col")`` grid (2D) or ``("x", "y", "z")`` grid (3D: ``x`` = process rows,
            ``y`` = process columns, ``z`` = fiber).
        source: block source; layer ``l`` uses version ``"rc"`` for even ``l`` and ``"cr"`` for odd ``l``
            (identical for a single permutation).
        dims: layer widths.
    """

    def __init__(self, name: str, comm, source, dims, *, dtype=torch.float64, device="cpu"):
        self.name, self.comm, self.grid, self.source, self.dims = name, comm, comm.grid, source, list(dims)
        self.dtype, self.device = dtype, device
        if self.grid.kind == "2d":
            self.row_axis, self.col_axis, self.fiber_axis = "row", "col", None
        else:
            self.row_axis, self.col_axis, self.fiber_axis = "x", "y", "z"
        pr, pc = self.grid.size(self.row_axis), self.grid.size(self.col_axis)
        z = 1 if self.fiber_axis is None else self.grid.size(self.fiber_axis)
        self.geo = Geometry(source.n, pr, pc, z)
        self.i, self.j = self.grid.rank(self.row_axis), self.grid.rank(self.col_axis)
        self.k = 0 if self.fiber_axis is None else self.grid.rank(self.fiber_axis)
        cache = {}
        self.ops = []
        for layer in range(len(dims) - 1):
            v = "rc" if layer % 2 == 0 or not source.double else "cr"
            if v not in cache:
                fwd = SummaSpMM(self, v, transpose=False)
                # M̂ is symmetric for an undirected graph: with one permutation its transpose blocks are its own
                bwd = fwd if not (source.directed or source.double) else SummaSpMM(self, v, transpose=True)
                cache[v] = (fwd, bwd)
            self.ops.append(cache[v])
        self.copies = pc  # the logits rows are gathered on every member of the process row
        self.grad_axes = self.grid.names

    def shard_nnz(self) -> list[int]:
        """nnz of this rank's block ``M[R_i, part j of V_k]`` in each matrix version it uses."""
        seen, out = set(), []
        for fwd, _ in self.ops:
            if id(fwd) not in seen:
                seen.add(id(fwd))
                out.append(sum(fwd.nnz[p] for p in fwd.local))
        return out

    def col_block(self, width: int) -> tuple[int, int]:
        return block_range(even_bounds(width, self.geo.pc), self.j)

    def in_rows(self, layer: int) -> np.ndarray:
        b0, b1 = self.geo.block(self.i, self.k)
        return self._order(layer, "in")[b0:b1]

    def in_cols(self, layer: int, f: int) -> tuple[int, int]:
        return self.col_block(f)

    def out_rows(self) -> np.ndarray:
        b0, b1 = self.geo.block(self.i, self.k)
        return self._order(len(self.dims) - 2, "out")[b0:b1]

    def out_cols(self, classes) -> tuple[int, int]:
        return self.col_block(self.dims[-1] if classes is None else classes)

    def loss(self, logits, y, mask, n_train: int) -> torch.Tensor:
        return _GatheredCE.apply(logits, y, mask, self, n_train)

    def predict(self, logits) -> torch.Tensor:
        return _gather_cols(self, logits.contiguous(), self.dims[-1]).argmax(dim=1)

    def input(self, x=None) -> torch.Tensor:
        c0, c1 = self.in_cols(0, self.dims[0])
        block = self.source.node_rows("x", self.in_rows(0))[:, c0:c1]
        return torch.from_numpy(np.ascontiguousarray(block, dtype=np.float64))

    def layer(self, layer: int, h, w, b):
        return _SummaLayer.apply(h, w, b, self, layer)
