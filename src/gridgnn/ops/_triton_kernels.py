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


@triton.jit(do_not_specialize=["total", "width", "features", "c0", "key", "threshold"])
def node_mask(ids, out, total, width, features, c0, key, threshold, BLOCK: tl.constexpr):
    """``out[r·width + c] = mix((ids[r]·features + c0 + c) ^ key) < threshold`` (unsigned)."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    inside = offs < total
    row = offs // width
    col = offs - row * width
    node = tl.load(ids + row, mask=inside, other=0).to(tl.uint64)
    z = (node * features.to(tl.uint64) + (col + c0).to(tl.uint64)) ^ key.to(tl.uint64)
    keep = mix(z) < threshold.to(tl.uint64)
    tl.store(out + offs, keep.to(tl.uint8), mask=inside)


@triton.jit(do_not_specialize=["total", "heads", "key", "threshold"])
def edge_mask(dst, src, out, total, heads, key, threshold, BLOCK: tl.constexpr):
    """``out[e·heads + h] = mix(mix(mix(dst[e] ^ key) + src[e]) ^ (h + 1)·G) < threshold`` (unsigned)."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    inside = offs < total
    e = offs // heads
    head = offs - e * heads
    d = tl.load(dst + e, mask=inside, other=0).to(tl.uint64)
    s = tl.load(src + e, mask=inside, other=0).to(tl.uint64)
    edge = mix(mix(d ^ key.to(tl.uint64)) + s)
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
        tl.store(at, tl.load(at, mask=inside, other=0.0) + acc, mask=inside)
