"""The jitted Triton kernels of :mod:`gridgnn.ops.triton_kernels` (imported on first use: Triton is optional, and
``TRITON_INTERPRET`` is read when these are decorated)."""
import triton
import triton.language as tl


@triton.jit
def mix(z):
    """SplitMix64's finalizer of ``z + G`` in ``uint64`` (wrap-around arithmetic, logical shifts)."""
    z = z + 0x9E3779B97F4A7C15
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
    z = (z ^ (z >> 27)) * 0x94D049BB133111EB
    return z ^ (z >> 31)


@triton.jit
def the_key(key, key_at, KEY_IN_MEMORY: tl.constexpr):
    """The key as ``uint64``: the argument ``key``, or (``KEY_IN_MEMORY``) the ``int64`` at ``key_at``, read at the
    launch (a CUDA graph's replay reads it then)."""
    if KEY_IN_MEMORY:
        return tl.load(key_at).to(tl.uint64, bitcast=True)
    return key.to(tl.uint64)


@triton.jit(do_not_specialize=["total", "width", "features", "c0", "key", "threshold"])
def node_mask(ids, out, total, width, features, c0, key, key_at, threshold, BLOCK: tl.constexpr,
              KEY_IN_MEMORY: tl.constexpr):
    """``out[r·width + c] = mix((ids[r]·features + c0 + c) ^ key) < threshold`` (unsigned; the key: :func:`the_key`)."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    inside = offs < total
    row = offs // width
    col = offs - row * width
    node = tl.load(ids + row, mask=inside, other=0).to(tl.uint64)
    z = (node * features.to(tl.uint64) + (col + c0).to(tl.uint64)) ^ the_key(key, key_at, KEY_IN_MEMORY)
    keep = mix(z) < threshold.to(tl.uint64)
    tl.store(out + offs, keep.to(tl.uint8), mask=inside)


@triton.jit(do_not_specialize=["total", "heads", "key", "threshold"])
def edge_mask(dst, src, out, total, heads, key, key_at, threshold, BLOCK: tl.constexpr, KEY_IN_MEMORY: tl.constexpr):
    """``out[e·heads + h] = mix(mix(mix(dst[e] ^ key) + src[e]) ^ (h + 1)·G) < threshold`` (unsigned; the key:
    :func:`the_key`)."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    inside = offs < total
    e = offs // heads
    head = offs - e * heads
    d = tl.load(dst + e, mask=inside, other=0).to(tl.uint64)
    s = tl.load(src + e, mask=inside, other=0).to(tl.uint64)
    edge = mix(mix(d ^ the_key(key, key_at, KEY_IN_MEMORY)) + s)
    keep = mix(edge ^ ((head + 1).to(tl.uint64) * 0x9E3779B97F4A7C15)) < threshold.to(tl.uint64)
    tl.store(out + offs, keep.to(tl.uint8), mask=inside)


@triton.jit(do_not_specialize=["nnz", "width", "heads", "segments"])
def sddmm_dot(row, col, dst, src, out, seg_head, seg_start, seg_len, nnz, width, heads, segments,
              BLOCK_E: tl.constexpr, BLOCK_F: tl.constexpr):
    """``out[e, h] += Σ_{c ∈ segment} dst[row[e], c] · src[col[e], c]`` for every column segment ``(h, start,
    len)``, ``BLOCK_F`` columns at a time: a program's edges read their two rows once, no ``edges × width``
    product is formed."""
    e = tl.program_id(0).to(tl.int64) * BLOCK_E + tl.arange(0, BLOCK_E)
    inside = e < nnz
    u = tl.load(row + e, mask=inside, other=0).to(tl.int64)
    v = tl.load(col + e, mask=inside, other=0).to(tl.int64)
    f = tl.arange(0, BLOCK_F)
    for s in range(segments):
        h = tl.load(seg_head + s).to(tl.int64)
        start = tl.load(seg_start + s).to(tl.int64)
        n = tl.load(seg_len + s)
        acc = tl.zeros([BLOCK_E], dtype=out.dtype.element_ty)
        for c in range(0, n, BLOCK_F):
            tile = inside[:, None] & ((c + f)[None, :] < n)
            cols = (start + c + f)[None, :]
            x = tl.load(dst + u[:, None] * width + cols, mask=tile, other=0.0)
            y = tl.load(src + v[:, None] * width + cols, mask=tile, other=0.0)
            acc += tl.sum(x * y, axis=1).to(acc.dtype)
        at = out + e * heads + h
        # (another segment of the same head stored its sum from other threads of the program: wait for them)
        tl.debug_barrier()
        tl.store(at, tl.load(at, mask=inside, other=0.0) + acc, mask=inside)


@triton.jit
def _edges(crow, i, j0, BLOCK_E: tl.constexpr):
    """The edge positions ``j0 + 0..BLOCK_E`` of row ``i`` and which of them lie in the row."""
    j = j0 + tl.arange(0, BLOCK_E)
    return j, j < tl.load(crow + i + 1).to(tl.int64)


@triton.jit
def _row_head(crow, consts):
    """This program's destination row ``i`` (program 0) and head ``h`` (program 1), the row's edges ``start..end``,
    and ``consts = [slope, q]`` (in the data's type: a Python float would reach the kernel as float32)."""
    i = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1).to(tl.int64)
    return i, h, tl.load(crow + i).to(tl.int64), tl.load(crow + i + 1).to(tl.int64), tl.load(consts), \
        tl.load(consts + 1)


@triton.jit
def _head_dots(rows, src, i, h, c, inside, per, width, BLOCK_E: tl.constexpr, BLOCK_F: tl.constexpr):
    """Per edge to the sources ``c``: ``⟨rows[i, head h], src[c, head h]⟩`` (``per`` columns a head of the
    ``width``-wide ``rows`` and ``src``, ``BLOCK_F`` at a time)."""
    f = tl.arange(0, BLOCK_F)
    e = tl.zeros([BLOCK_E], dtype=src.dtype.element_ty)
    for f0 in range(0, per, BLOCK_F):
        cols = h * per + f0 + f
        on = (f0 + f) < per
        u = tl.load(rows + i * width + cols, mask=on, other=0.0)
        v = tl.load(src + c[:, None] * width + cols[None, :], mask=inside[:, None] & on[None, :], other=0.0)
        e += tl.sum(v * u[None, :], axis=1)
    return e


@triton.jit
def _score(a_dst, a_src, i, h, c, inside, heads, dwidth, slope, DOT: tl.constexpr, BLOCK_E: tl.constexpr,
           BLOCK_D: tl.constexpr):
    """The scores of row ``i``'s edges to the sources ``c`` in head ``h``: ``⟨a_dst[i, head], a_src[c, head]⟩``
    (``DOT``, ``dwidth / heads`` columns a head, ``BLOCK_D`` at a time) or ``LeakyReLU_slope(a_dst[i, h] +
    a_src[c, h])``."""
    if DOT:
        e = _head_dots(a_dst, a_src, i, h, c, inside, dwidth // heads, dwidth, BLOCK_E, BLOCK_D)
    else:
        v = tl.load(a_dst + i * heads + h) + tl.load(a_src + c * heads + h, mask=inside, other=0.0)
        e = tl.where(v > 0, v, v * slope)
    return e


@triton.jit
def _weighted_rows(out, src, weights, keep, crow, col, i, h, start, end, per, width, heads, s, q, KEEP: tl.constexpr,
                   BLOCK_E: tl.constexpr, BLOCK_F: tl.constexpr):
    """``out[i, head h] = Σ_j w_j src[col_j, head h]`` over row ``i``'s edges ``start..end`` (``per`` columns a head
    of the ``width``-wide ``src`` and ``out``, ``BLOCK_F`` at a time), ``w_j = weights[j, h] / s`` (``KEEP``: ``/ q``
    where ``keep``, else 0)."""
    f = tl.arange(0, BLOCK_F)
    for f0 in range(0, per, BLOCK_F):
        cols = h * per + f0 + f
        on = (f0 + f) < per
        acc = tl.zeros([BLOCK_F], dtype=out.dtype.element_ty)
        for j0 in range(start, end, BLOCK_E):
            j, inside = _edges(crow, i, j0, BLOCK_E)
            c = tl.load(col + j, mask=inside, other=0).to(tl.int64)
            w = tl.load(weights + j * heads + h, mask=inside, other=0.0) / s
            if KEEP:
                kept = tl.load(keep + j * heads + h, mask=inside, other=0)
                w = tl.where(kept != 0, w / q, 0.0)
            v = tl.load(src + c[:, None] * width + cols[None, :], mask=inside[:, None] & on[None, :], other=0.0)
            acc += tl.sum(w[:, None] * v, axis=0)
        tl.store(out + i * width + cols, acc, mask=on)


@triton.jit(do_not_specialize=["heads", "width", "dwidth"])
def attend_fwd(crow, col, a_dst, a_src, x, keep, consts, alpha, out, heads, width, dwidth, DOT: tl.constexpr,
               KEEP: tl.constexpr, BLOCK_E: tl.constexpr, BLOCK_F: tl.constexpr, BLOCK_D: tl.constexpr):
    """Row ``i`` = program 0, head ``h`` = program 1, in passes over the row's edges (``BLOCK_E`` at a time):
    the scores (written to ``alpha``) and their maximum; ``exp(score − max)`` (written over them) and its sum;
    ``out[i, head] = Σ_j α_j / q · keep_j · x[col_j, head]`` (``BLOCK_F`` columns at a time); ``alpha /= sum``.
    ``consts = [slope, q]`` in the data's type (a Python float would reach the kernel as float32)."""
    i, h, start, end, slope, q = _row_head(crow, consts)
    top = tl.full([BLOCK_E], float("-inf"), dtype=alpha.dtype.element_ty)
    for j0 in range(start, end, BLOCK_E):
        j, inside = _edges(crow, i, j0, BLOCK_E)
        c = tl.load(col + j, mask=inside, other=0).to(tl.int64)
        e = _score(a_dst, a_src, i, h, c, inside, heads, dwidth, slope, DOT, BLOCK_E, BLOCK_D)
        tl.store(alpha + j * heads + h, e, mask=inside)
        top = tl.maximum(top, tl.where(inside, e, float("-inf")))
    m = tl.max(top, axis=0)
    tl.debug_barrier()  # (a pass reads what the previous one wrote, possibly through other threads of the program;
    # a pass that writes over what it read waits between the two as well)
    total = tl.zeros([BLOCK_E], dtype=alpha.dtype.element_ty)
    for j0 in range(start, end, BLOCK_E):
        j, inside = _edges(crow, i, j0, BLOCK_E)
        p = tl.exp(tl.load(alpha + j * heads + h, mask=inside, other=0.0) - m)
        tl.debug_barrier()  # (warps that hold copies of the block read it before one of them writes it over)
        tl.store(alpha + j * heads + h, p, mask=inside)
        total += tl.where(inside, p, 0.0)
    s = tl.sum(total, axis=0)
    tl.debug_barrier()
    _weighted_rows(out, x, alpha, keep, crow, col, i, h, start, end, width // heads, width, heads, s, q, KEEP,
                   BLOCK_E, BLOCK_F)
    tl.debug_barrier()
    for j0 in range(start, end, BLOCK_E):
        j, inside = _edges(crow, i, j0, BLOCK_E)
        a = tl.load(alpha + j * heads + h, mask=inside, other=0.0) / s
        tl.debug_barrier()
        tl.store(alpha + j * heads + h, a, mask=inside)


@triton.jit(do_not_specialize=["heads", "width", "dwidth"])
def attend_bwd(crow, col, a_dst, a_src, x, dy, alpha, keep, consts, g_edge, g_dst, heads, width, dwidth,
               DOT: tl.constexpr, KEEP: tl.constexpr, BLOCK_E: tl.constexpr, BLOCK_F: tl.constexpr,
               BLOCK_D: tl.constexpr):
    """The backward of :func:`attend_fwd` for row ``i`` and head ``h``: ``∂α_j = ⟨dy[i, head], x[col_j, head]⟩ / q
    · keep_j`` (written to ``g_edge``) and ``r = Σ_j α_j ∂α_j``; the score gradient ``α_j (∂α_j − r)`` (``× slope``
    where ``a_dst + a_src ≤ 0``, LeakyReLU) over them; the destination's gradient: its sum (``g_dst[i, h]``) or,
    ``DOT``, ``Σ_j g_edge_j · a_src[col_j, head]``. The sources' gradients are transposed products, the caller's."""
    i, h, start, end, slope, q = _row_head(crow, consts)
    per = width // heads
    total = tl.zeros([BLOCK_E], dtype=g_edge.dtype.element_ty)
    for j0 in range(start, end, BLOCK_E):
        j, inside = _edges(crow, i, j0, BLOCK_E)
        c = tl.load(col + j, mask=inside, other=0).to(tl.int64)
        da = _head_dots(dy, x, i, h, c, inside, per, width, BLOCK_E, BLOCK_F)
        if KEEP:
            kept = tl.load(keep + j * heads + h, mask=inside, other=0)
            da = tl.where(kept != 0, da / q, 0.0)
        tl.store(g_edge + j * heads + h, da, mask=inside)
        total += tl.where(inside, tl.load(alpha + j * heads + h, mask=inside, other=0.0) * da, 0.0)
    r = tl.sum(total, axis=0)
    tl.debug_barrier()
    total = tl.zeros([BLOCK_E], dtype=g_edge.dtype.element_ty)
    for j0 in range(start, end, BLOCK_E):
        j, inside = _edges(crow, i, j0, BLOCK_E)
        c = tl.load(col + j, mask=inside, other=0).to(tl.int64)
        de = tl.load(alpha + j * heads + h, mask=inside, other=0.0) * (
            tl.load(g_edge + j * heads + h, mask=inside, other=0.0) - r)
        if not DOT:
            v = tl.load(a_dst + i * heads + h) + tl.load(a_src + c * heads + h, mask=inside, other=0.0)
            de = tl.where(v > 0, de, de * slope)
            total += tl.where(inside, de, 0.0)
        tl.debug_barrier()
        tl.store(g_edge + j * heads + h, de, mask=inside)
    if DOT:
        tl.debug_barrier()  # (g_dst[i, head] = Σ_j g_edge_j a_src[col_j, head]: the score gradient as the weights)
        _weighted_rows(g_dst, a_src, g_edge, keep, crow, col, i, h, start, end, dwidth // heads, dwidth, heads, 1.0, q,
                       False, BLOCK_E, BLOCK_D)
    else:
        tl.store(g_dst + i * heads + h, tl.sum(total, axis=0))
