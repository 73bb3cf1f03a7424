"""The numba kernels behind :mod:`gridgnn.ops.kernels` (imported only when numba is installed). Module-level
functions, so numba's on-disk cache serves every later process (spawned ranks load them instead of compiling).

Row kernels take ``runs``: row bounds of chunks with about equal edge counts, one ``prange`` iteration each; a
row is written by one iteration only (no atomics; each row sums its edges in CSR order, whatever the threads).
"""
import types

import numpy as np
from llvmlite import binding as _llvm
from llvmlite import ir
from numba import njit, prange
from numba import types as nbtypes
from numba.core import cgutils
from numba.extending import intrinsic

_PAR = dict(parallel=True, cache=True, nogil=True)
#: edges ahead whose source row is prefetched (a gather is latency-bound: measured best at 8 on the 2-core box)
PREFETCH_EDGES = 8
#: the prefetch covers at most this many 64-byte lines of a row (1 KiB)
_PREFETCH_LINES = 16
_PREFETCH = "llvm.prefetch.p0" if _llvm.llvm_version_info[0] >= 17 else "llvm.prefetch.p0i8"


@intrinsic
def prefetch_row(typingctx, arr, i):
    """Hint the cache lines of row ``i`` of a C-contiguous 2D array (``llvm.prefetch``: read, high locality)."""
    def codegen(context, builder, signature, args):
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        zero = context.get_constant(nbtypes.intp, 0)
        row = context.cast(builder, args[1], signature.args[1], nbtypes.intp)  # an int32 column index widened
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [row, zero], wraparound=False)
        i8p = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]),
                                            _PREFETCH)
        base = builder.bitcast(ptr, i8p)
        itemsize = context.get_abi_sizeof(context.get_data_type(aryty.dtype))
        nbytes = builder.mul(builder.extract_value(ary.shape, 1), context.get_constant(nbtypes.intp, itemsize))
        for k in range(_PREFETCH_LINES):
            off = context.get_constant(nbtypes.intp, 64 * k)
            with builder.if_then(builder.icmp_signed("<", off, nbytes)):
                builder.call(fn, [builder.gep(base, [off]), i32(0), i32(3), i32(1)])
        return context.get_dummy_value()

    return nbtypes.void(arr, i), codegen


def serial_twin(kernel):
    """The same kernel compiled without ``parallel`` (``prange`` runs as ``range``): no thread pool is woken, for
    small inputs and one-thread ranks. A copy of the function under another name, so numba's cache (whose key
    ignores the ``parallel`` flag) keeps the two apart. Compiled with the kernel's own ``fastmath``: the same
    reassociation, so the twin and the kernel give the same bits whatever the threads or the size (without it, the
    sums of the kernels that allow ``reassoc`` differed in the last bits between a small rank and a large one)."""
    fn = kernel.py_func
    code = fn.__code__.replace(co_name=fn.__name__ + "_serial", co_qualname=fn.__qualname__ + "_serial")
    fastmath = kernel.targetoptions.get("fastmath", False)
    return njit(cache=True, nogil=True, fastmath=fastmath)(types.FunctionType(code, fn.__globals__, code.co_name))


@njit(cache=True, nogil=True, inline="always")
def _head_axpy(acc, w, xr, one, hh, lo, hi):
    """``acc[lo[k]:hi[k]] += w[hh[k]] · xr[lo[k]:hi[k]]`` per range ``k``; ``one``: ``acc += w[0] · xr`` over every
    column (a fixed-span loop)."""
    if one:
        v = w[0]
        for f in range(acc.shape[0]):
            acc[f] += v * xr[f]
    else:
        for k in range(hh.shape[0]):
            v = w[hh[k]]
            for f in range(lo[k], hi[k]):
                acc[f] += v * xr[f]


@njit(**_PAR)
def spmm_kernel(crow, col, vals, x, ranges, runs, out):
    """``out[i, a:b] = Σ_j vals[j, h] · x[col[j], a:b]`` over the edges ``j`` of row ``i``, for every ``(h, a, b)``
    of ``ranges``; columns outside the ranges are 0. Each row accumulates in a private buffer (no aliasing with
    ``x``: the feature loop vectorizes); the source row ``PREFETCH_EDGES`` edges ahead is prefetched."""
    width = out.shape[1]
    heads, lo, hi = ranges[:, 0].copy(), ranges[:, 1].copy(), ranges[:, 2].copy()
    ahead = col.shape[0] - PREFETCH_EDGES
    for r in prange(runs.shape[0] - 1):
        acc = np.empty(width, dtype=out.dtype)
        for i in range(runs[r], runs[r + 1]):
            for f in range(width):
                acc[f] = 0
            for j in range(crow[i], crow[i + 1]):
                if j < ahead:
                    prefetch_row(x, col[j + PREFETCH_EDGES])
                _head_axpy(acc, vals[j], x[col[j]], False, heads, lo, hi)
            for f in range(width):
                out[i, f] = acc[f]


@njit(**_PAR)
def spmm_one_kernel(crow, col, vals, x, runs, out):
    """:func:`spmm_kernel` with one value per edge (``vals``: ``nnz``) over every column: the common case (GCN,
    one head) kept apart because its single fixed-span feature loop runs twice as fast as the ranged one."""
    width = out.shape[1]
    ahead = col.shape[0] - PREFETCH_EDGES
    for r in prange(runs.shape[0] - 1):
        acc = np.empty(width, dtype=out.dtype)
        for i in range(runs[r], runs[r + 1]):
            for f in range(width):
                acc[f] = 0
            for j in range(crow[i], crow[i + 1]):
                if j < ahead:
                    prefetch_row(x, col[j + PREFETCH_EDGES])
                v = vals[j]
                xr = x[col[j]]
                for f in range(width):
                    acc[f] += v * xr[f]
            for f in range(width):
                out[i, f] = acc[f]


@njit(**_PAR)
def spmm_cols_kernel(crow, col, vals, x, runs, out):
    """:func:`spmm_kernel` with one head per column (``vals``: ``nnz × W``, ``x``: ``k × W``): per-edge vectors summed
    into their rows, e.g. GINE's messages against ones; the same sums in the same order as :func:`spmm_kernel`,
    without its loop over one-column ranges."""
    width = out.shape[1]
    ahead = col.shape[0] - PREFETCH_EDGES
    for r in prange(runs.shape[0] - 1):
        acc = np.empty(width, dtype=out.dtype)
        for i in range(runs[r], runs[r + 1]):
            for f in range(width):
                acc[f] = 0
            for j in range(crow[i], crow[i + 1]):
                if j < ahead:
                    prefetch_row(x, col[j + PREFETCH_EDGES])
                v = vals[j]
                xr = x[col[j]]
                for f in range(width):
                    acc[f] += v[f] * xr[f]
            for f in range(width):
                out[i, f] = acc[f]


@njit(fastmath=True, **_PAR)
def sddmm_dot_kernel(crow, col, dst, src, ranges, runs, out):
    """``out[j, h] += ⟨dst[i, a:b], src[col[j], a:b]⟩`` for every edge ``j`` of row ``i`` and ``(h, a, b)``
    (``fastmath``: each dot product is summed in a vectorized order, the same whatever the threads)."""
    nr = ranges.shape[0]
    heads, lo, hi = ranges[:, 0].copy(), ranges[:, 1].copy(), ranges[:, 2].copy()
    ahead = col.shape[0] - PREFETCH_EDGES
    for r in prange(runs.shape[0] - 1):
        for i in range(runs[r], runs[r + 1]):
            d = dst[i]
            for j in range(crow[i], crow[i + 1]):
                if j < ahead:
                    prefetch_row(src, col[j + PREFETCH_EDGES])
                s = src[col[j]]
                for k in range(nr):
                    acc = d[lo[k]] * s[lo[k]]  # ranges are never empty; acc has the arrays' dtype
                    for f in range(lo[k] + 1, hi[k]):
                        acc += d[f] * s[f]
                    out[j, heads[k]] += acc


@njit(**_PAR)
def sddmm_cols_kernel(crow, col, dst, src, runs, out):
    """:func:`sddmm_dot_kernel` with one head per column: ``out[j, f] = dst[i, f] · src[col[j], f]`` (the gradient
    of per-edge vectors summed by :func:`spmm_cols_kernel`; the same values as the ranged kernel)."""
    width = dst.shape[1]
    ahead = col.shape[0] - PREFETCH_EDGES
    for r in prange(runs.shape[0] - 1):
        for i in range(runs[r], runs[r + 1]):
            d = dst[i]
            for j in range(crow[i], crow[i + 1]):
                if j < ahead:
                    prefetch_row(src, col[j + PREFETCH_EDGES])
                s = src[col[j]]
                for f in range(width):
                    out[j, f] = d[f] * s[f]


@njit(**_PAR)
def sddmm_add_kernel(crow, col, s_dst, s_src, runs, out):
    """``out[j, h] = s_dst[i, h] + s_src[col[j], h]``."""
    for r in prange(runs.shape[0] - 1):
        for i in range(runs[r], runs[r + 1]):
            for j in range(crow[i], crow[i + 1]):
                c = col[j]
                for h in range(out.shape[1]):
                    out[j, h] = s_dst[i, h] + s_src[c, h]


@njit(**_PAR)
def segment_kernel(crow, vals, is_max, runs, out):
    """Per row, the sum (``out`` starts at 0) or the max (``out`` starts at −inf) of its edges' values."""
    for r in prange(runs.shape[0] - 1):
        for i in range(runs[r], runs[r + 1]):
            for j in range(crow[i], crow[i + 1]):
                for h in range(vals.shape[1]):
                    if is_max:
                        if vals[j, h] > out[i, h]:
                            out[i, h] = vals[j, h]
                    else:
                        out[i, h] += vals[j, h]


# SplitMix64 finalizer in uint64 arithmetic (every constant typed, so nothing is promoted to float64)
_G = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)


@njit(cache=True, nogil=True, inline="always")
def _mix(z):
    z = z + _G
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)


@njit(**_PAR)
def keyed_mask_kernel(ids, features, c0, key, threshold, out):
    """``out[i, f] = mix((ids[i] · features + c0 + f) ^ key) < threshold``."""
    for i in prange(ids.shape[0]):
        base = ids[i] * features + c0
        for f in range(out.shape[1]):
            out[i, f] = _mix((base + np.uint64(f)) ^ key) < threshold


@njit(**_PAR)
def edge_mask_kernel(dst, src, key, threshold, out):
    """``out[e, h] = mix(mix(mix(dst[e] ^ key) + src[e]) ^ (h + 1)·G) < threshold``."""
    for e in prange(dst.shape[0]):
        edge = _mix(_mix(dst[e] ^ key) + src[e])
        for h in range(out.shape[1]):
            out[e, h] = _mix(edge ^ (np.uint64(h + 1) * _G)) < threshold


@njit(**_PAR)
def masked_scale_kernel(x, mask, q, out):
    """``out = x / q`` where ``mask``, else 0 (flat arrays): inverted dropout, the bits of ``x * mask / q``."""
    n = x.shape[0]
    step = 1 << 16
    for c in prange((n + step - 1) // step):
        for i in range(c * step, min(n, (c + 1) * step)):
            out[i] = (x[i] / q) * mask[i]  # branch-free; a dropped entry is ±0 (NaN for x = ±inf or NaN)


@njit(**_PAR)
def row_exp_kernel(crow, e, m, runs, ex, s):
    """``ex[j, h] = exp(e[j, h] − m[i, h])`` and ``s[i, h] = Σ_j ex[j, h]`` (``s`` starts at 0)."""
    for r in prange(runs.shape[0] - 1):
        for i in range(runs[r], runs[r + 1]):
            for j in range(crow[i], crow[i + 1]):
                for h in range(e.shape[1]):
                    v = np.exp(e[j, h] - m[i, h])
                    ex[j, h] = v
                    s[i, h] += v


@njit(**_PAR)
def row_dot_kernel(crow, a, b, runs, out):
    """``out[i, h] = Σ_j a[j, h] · b[j, h]`` (``out`` starts at 0)."""
    for r in prange(runs.shape[0] - 1):
        for i in range(runs[r], runs[r + 1]):
            for j in range(crow[i], crow[i + 1]):
                for h in range(a.shape[1]):
                    out[i, h] += a[j, h] * b[j, h]


@njit(**_PAR)
def row_apply_kernel(crow, a, b, t, softmax_grad, runs, out):
    """Per edge ``j`` of row ``i``: ``a[j, h] / t[i, h]`` (normalize), or ``a[j, h] · (b[j, h] − t[i, h])`` (the
    softmax backward) when ``softmax_grad``."""
    for r in prange(runs.shape[0] - 1):
        for i in range(runs[r], runs[r + 1]):
            for j in range(crow[i], crow[i + 1]):
                for h in range(a.shape[1]):
                    if softmax_grad:
                        out[j, h] = a[j, h] * (b[j, h] - t[i, h])
                    else:
                        out[j, h] = a[j, h] / t[i, h]


@njit(cache=True, nogil=True, inline="always")
def _head_dots(a, b, one, hh, lo, hi, out, j):
    """``out[j, hh[k]] = Σ_{lo[k] ≤ f < hi[k]} a[f] · b[f]`` per range ``k``; ``one``: a single head over every
    column, a fixed-span loop (vectorizes best)."""
    if one:
        t = a[0] * b[0]
        for f in range(1, a.shape[0]):
            t += a[f] * b[f]
        out[j, 0] = t
    else:
        for h in range(out.shape[1]):
            out[j, h] = 0
        for k in range(hh.shape[0]):
            t = a[lo[k]] * b[lo[k]]
            for f in range(lo[k] + 1, hi[k]):
                t += a[f] * b[f]
            out[j, hh[k]] += t


# The attention kernels reassociate only (each dot product is summed in a vectorized order); ±inf and NaN keep
# their meaning, which the row max needs.
_ATTEND = dict(fastmath={"reassoc"}, **_PAR)


@njit(**_ATTEND)
def attend_fwd_kernel(crow, col, a_dst, a_src, x, dot, slope, dranges, xranges, keep, use_keep, q, runs, alpha,
                      out):
    """Per destination row ``i``, in three passes over its edges and nothing wider than ``K`` per edge:
    scores ``e[j, h]`` (``dot``: ``⟨a_dst[i, a:b], a_src[c, a:b]⟩`` over ``dranges``; else
    ``LeakyReLU_slope(a_dst[i, h] + a_src[c, h])``) → softmax over the row (``alpha``, before dropout) →
    ``out[i, a:b] = Σ_j (α[j, h] / q · keep[j, h]) x[c, a:b]`` over ``xranges``."""
    heads = alpha.shape[1]
    width = out.shape[1]
    nd, nx = dranges.shape[0], xranges.shape[0]
    dh, dlo, dhi = dranges[:, 0].copy(), dranges[:, 1].copy(), dranges[:, 2].copy()
    xh, xlo, xhi = xranges[:, 0].copy(), xranges[:, 1].copy(), xranges[:, 2].copy()
    dwidth = a_dst.shape[1]
    one_d = nd == 1 and dlo[0] == 0 and dhi[0] == dwidth
    one_x = nx == 1 and xlo[0] == 0 and xhi[0] == width
    ahead = col.shape[0] - PREFETCH_EDGES
    for r in prange(runs.shape[0] - 1):
        m = np.empty(heads, dtype=out.dtype)
        s = np.empty(heads, dtype=out.dtype)
        w = np.empty(heads, dtype=out.dtype)
        acc = np.empty(width, dtype=out.dtype)
        for i in range(runs[r], runs[r + 1]):
            for h in range(heads):
                m[h] = -np.inf
                s[h] = 0
            d = a_dst[i]
            for j in range(crow[i], crow[i + 1]):
                c = col[j]
                if dot:
                    if j < ahead:
                        prefetch_row(a_src, col[j + PREFETCH_EDGES])
                    _head_dots(d, a_src[c], one_d, dh, dlo, dhi, alpha, j)
                else:
                    for h in range(heads):
                        v = d[h] + a_src[c, h]
                        alpha[j, h] = v if v > 0 else v * slope
                for h in range(heads):
                    if alpha[j, h] > m[h]:
                        m[h] = alpha[j, h]
            for j in range(crow[i], crow[i + 1]):
                for h in range(heads):
                    v = np.exp(alpha[j, h] - m[h])
                    alpha[j, h] = v
                    s[h] += v
            for f in range(width):
                acc[f] = 0
            for j in range(crow[i], crow[i + 1]):
                if j < ahead:
                    prefetch_row(x, col[j + PREFETCH_EDGES])
                for h in range(heads):
                    a = alpha[j, h] / s[h]
                    alpha[j, h] = a
                    w[h] = (a / q) * keep[j, h] if use_keep else a
                xr = x[col[j]]
                _head_axpy(acc, w, xr, one_x, xh, xlo, xhi)
            for f in range(width):
                out[i, f] = acc[f]


@njit(**_ATTEND)
def attend_bwd_kernel(crow, col, a_dst, a_src, x, dy, alpha, dot, slope, dranges, xranges, keep, use_keep, q,
                      runs, g_edge, g_dst):
    """The backward of :func:`attend_fwd_kernel` per destination row, in two passes over its edges:
    ``∂α[j, h] = ⟨dy[i, a:b], x[c, a:b]⟩ / q · keep`` and the row sums ``r = Σ_j α ∂α``; then the score gradient
    ``g_edge[j, h] = α (∂α − r)`` (through the LeakyReLU: ``× slope`` where ``a_dst + a_src ≤ 0``) and the
    destination gradient ``g_dst`` (``Σ_j g_edge`` per head; ``dot``: ``Σ_j g_edge · a_src[c, a:b]``). The sources' gradients are transposed products over ``g_edge`` and α, left to the caller."""
    heads = alpha.shape[1]
    nd, nx = dranges.shape[0], xranges.shape[0]
    dh, dlo, dhi = dranges[:, 0].copy(), dranges[:, 1].copy(), dranges[:, 2].copy()
    xh, xlo, xhi = xranges[:, 0].copy(), xranges[:, 1].copy(), xranges[:, 2].copy()
    width, dwidth = x.shape[1], a_dst.shape[1]
    one_d = nd == 1 and dlo[0] == 0 and dhi[0] == dwidth
    one_x = nx == 1 and xlo[0] == 0 and xhi[0] == width
    ahead = col.shape[0] - PREFETCH_EDGES
    for r in prange(runs.shape[0] - 1):
        rs = np.empty(heads, dtype=g_edge.dtype)
        acc = np.empty(dwidth, dtype=g_dst.dtype)
        for i in range(runs[r], runs[r + 1]):
            for h in range(heads):
                rs[h] = 0
            dyr = dy[i]
            for j in range(crow[i], crow[i + 1]):
                if j < ahead:
                    prefetch_row(x, col[j + PREFETCH_EDGES])
                _head_dots(dyr, x[col[j]], one_x, xh, xlo, xhi, g_edge, j)
                for h in range(heads):
                    da = (g_edge[j, h] / q) * keep[j, h] if use_keep else g_edge[j, h]
                    g_edge[j, h] = da
                    rs[h] += alpha[j, h] * da
            for f in range(dwidth):
                acc[f] = 0
            for j in range(crow[i], crow[i + 1]):
                c = col[j]
                for h in range(heads):
                    de = alpha[j, h] * (g_edge[j, h] - rs[h])
                    if not dot:
                        if not (a_dst[i, h] + a_src[c, h] > 0):
                            de = de * slope
                        acc[h] += de
                    g_edge[j, h] = de
                if dot:
                    if j < ahead:
                        prefetch_row(a_src, col[j + PREFETCH_EDGES])
                    sr = a_src[c]
                    if one_d:
                        v = g_edge[j, 0]
                        for f in range(dwidth):
                            acc[f] += v * sr[f]
                    else:
                        for k in range(nd):
                            v = g_edge[j, dh[k]]
                            for f in range(dlo[k], dhi[k]):
                                acc[f] += v * sr[f]
            for f in range(dwidth):
                g_dst[i, f] = acc[f]


_S11 = np.uint64(11)


@njit(cache=True, nogil=True, inline="always")
def _sampling_key(row_key, column, prob):
    """``−log(u) / p`` (smaller is better) with ``u`` the open uniform of ``mix(row_key + column)``."""
    h = _mix(row_key + np.uint64(column))
    u = (np.float64(h >> _S11) + 0.5) * 2.0 ** -53
    return -np.log(u) / prob


@njit(cache=True, nogil=True, inline="always")
def _uniform_rank(row_key, column):
    """``−(the 53 bits of u)`` for the open uniform ``u`` of ``mix(row_key + column)`` (smaller is a larger ``u``)."""
    return -np.int64(_mix(row_key + np.uint64(column)) >> _S11)


@njit(cache=True, nogil=True, inline="always")
def _keep_best(best, at, m, s, key, j):
    """Insert candidate ``j`` with ``key`` into the ``m`` best so far (``best`` ascending, ``at`` their positions;
    at most ``s``; a tie keeps the earlier candidate first); returns the new count."""
    if m == s and key >= best[s - 1]:
        return m
    t = m if m < s else s - 1
    while t > 0 and best[t - 1] > key:
        best[t] = best[t - 1]
        at[t] = at[t - 1]
        t -= 1
    best[t] = key
    at[t] = j
    return m + 1 if m < s else m


@njit(**_PAR)
def top_rows_kernel(indptr, indices, probs, row_keys, s, runs, keep):
    """Per CSR row ``i`` of a probability matrix: mark (``keep``) the ``s`` entries with the largest
    ``log(u_j) / p_j`` (all of a row with at most ``s`` entries), ``u_j`` the open uniform of
    ``mix(row_keys[i] + indices[j])`` — weighted sampling without replacement (Efraimidis–Spirakis); ties go to
    the earlier entry. The ``s`` best so far are kept in a sorted buffer (a candidate that is not better than the
    worst of them is dropped at once), so no row is sorted."""
    for r in prange(runs.shape[0] - 1):
        longest = 0
        for i in range(runs[r], runs[r + 1]):
            longest = max(longest, indptr[i + 1] - indptr[i])
        best = np.empty(min(s, longest), dtype=np.float64)  # (a row of at most s entries keeps them all)
        at = np.empty(min(s, longest), dtype=np.int64)
        for i in range(runs[r], runs[r + 1]):
            a, b = indptr[i], indptr[i + 1]
            if b - a <= s:
                for j in range(a, b):
                    keep[j] = True
                continue
            m = 0
            for j in range(a, b):
                m = _keep_best(best, at, m, s, _sampling_key(row_keys[i], indices[j], probs[j]), j)
            for t in range(s):
                keep[at[t]] = True


@njit(**_PAR)
def relabel_kernel(n, nodes, ptr, add_cols, add_vals, add_ptr, q_cols, q_ptr, chunks, new_buf, new_count, q_rel,
                   q_vals):
    """Per minibatch ``i``: its next frontier is its frontier ``nodes[ptr[i]:ptr[i+1]]`` followed by the vertices
    of ``add_cols[add_ptr[i]:add_ptr[i+1]]`` not in it, by id (written to ``new_buf`` from ``add_ptr[i]``,
    ``new_count[i]`` of them); each query column of the minibatch gets its position in that next frontier
    (``q_rel``, relative to the minibatch; −1 when it is not among the added vertices) and the ``add_vals`` of its
    added entry (``q_vals``). ``chunks`` parallel workers take minibatches ``c, c + chunks, …``, each with two
    ``n``-long position maps it resets entry by entry after a minibatch, so only the new vertices are sorted and
    no map is refilled whole."""
    k = ptr.shape[0] - 1
    for c in prange(chunks):
        pos = np.full(n, -1, dtype=np.int64)
        added = np.full(n, -1, dtype=np.int64)
        for i in range(c, k, chunks):
            p0, p1 = ptr[i], ptr[i + 1]
            for t in range(p0, p1):
                pos[nodes[t]] = t - p0
            a0, a1 = add_ptr[i], add_ptr[i + 1]
            fresh = 0
            for t in range(a0, a1):
                v = add_cols[t]
                if added[v] < 0:
                    added[v] = t
                    if pos[v] < 0:
                        new_buf[a0 + fresh] = v
                        fresh += 1
            new = np.sort(new_buf[a0:a0 + fresh])
            for t in range(fresh):
                new_buf[a0 + t] = new[t]
                pos[new[t]] = p1 - p0 + t
            new_count[i] = fresh
            for t in range(q_ptr[i], q_ptr[i + 1]):
                j = added[q_cols[t]]
                if j >= 0:
                    q_rel[t] = pos[q_cols[t]]
                    q_vals[t] = add_vals[j]
                else:
                    q_rel[t] = -1
            for t in range(p0, p1):
                pos[nodes[t]] = -1
            for t in range(fresh):
                pos[new[t]] = -1
            for t in range(a0, a1):
                added[add_cols[t]] = -1


@njit(**_PAR)
def sage_rows_kernel(indptr, indices, nodes, row_keys, s, offsets, runs, out):
    """GraphSAGE's ``SAMPLE(NORM(Q A))`` for a one-nonzero-per-row ``Q`` without forming ``Q A``: row ``i`` of
    ``Q A`` is row ``nodes[i]`` of ``A`` with probabilities ``1/deg``; its ``s`` winners (as in
    :func:`top_rows_kernel`, every entry when ``s < 0`` or ``deg ≤ s``) go to ``out[offsets[i]:offsets[i+1]]`` in
    column order. With one probability for the whole row, ``−log(u)/p`` orders as ``−u``: the ``s`` largest
    uniforms win (ties to the earlier entry), compared as the integers they are made of — no logarithm."""
    for r in prange(runs.shape[0] - 1):
        cap = max(s, 1)
        best = np.empty(cap, dtype=np.int64)
        at = np.empty(cap, dtype=np.int64)
        for i in range(runs[r], runs[r + 1]):
            v = nodes[i]
            a, b = indptr[v], indptr[v + 1]
            o = offsets[i]
            if s < 0 or b - a <= s:
                for j in range(a, b):
                    out[o + j - a] = indices[j]
                continue
            m = 0
            for j in range(a, b):
                m = _keep_best(best, at, m, s, _uniform_rank(row_keys[i], indices[j]), j)
            chosen = np.sort(at[:s])
            for t in range(s):
                out[o + t] = indices[chosen[t]]


@njit(cache=True, nogil=True)
def block_cols_kernel(indptr, indices, rows, bounds, col_block, seen, out):
    """``out[q, l]`` += the distinct columns of block ``q`` among the entries of rows ``rows[bounds[l]:bounds[l +
    1]]`` (``seen``: one stamp per column, ``-1`` at first; block ``l`` stamps the columns it met). One pass over
    the entries, in block order (the stamps are shared: serial)."""
    for l in range(bounds.size - 1):
        for t in range(bounds[l], bounds[l + 1]):
            r = rows[t]
            for e in range(indptr[r], indptr[r + 1]):
                c = indices[e]
                if seen[c] != l:
                    seen[c] = l
                    out[col_block[c], l] += 1
