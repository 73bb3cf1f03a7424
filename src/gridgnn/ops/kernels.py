r"""Fused local CPU kernels, compiled with numba (``parallel=True``, cached on disk), and the rule that picks them.

Each kernel replaces a composition of torch ops that stays in the package as its tested reference
(:mod:`gridgnn.ops.pattern`, :mod:`gridgnn.nn.dropout`); ``tests/ops/test_kernels.py`` checks every kernel
against its reference on random patterns with empty rows, isolated vertices, unsorted input and one huge row.

=======================  ===============================================  ======================================
kernel                   computes                                         replaces
=======================  ===============================================  ======================================
:func:`spmm_csr`         :math:`Y_{u,h} = \sum_v e_{uv,h} X_{v,h}`        ``torch.sparse.mm`` per head, and the
                         (or the transpose, via the CSR of the             transposed values' gather
                         transpose and its edge permutation)
:func:`sddmm_dot_csr`    :math:`e_{uv,h} = \langle D_{u,h}, X_{v,h}\rangle`  gathered ``nnz × F`` chunks
:func:`sddmm_add_csr`    :math:`e_{uv,h} = s_{u,h} + t_{v,h}`              two ``nnz × K`` gathers and a sum
:func:`segment_reduce`   per row ``sum`` / ``max`` of an edge tensor        ``index_add_`` / ``scatter_reduce``
                         in CSR order
:func:`row_exp`,         the edge softmax's local passes: ``exp(e − m)``   gathers of the row statistics per
:func:`row_dot`,         with its row sums; ``Σ α ∂α`` per row; the        edge, scatters of the sums
:func:`row_apply`        division and the backward's update
:func:`keyed_mask`,      the keep masks of :mod:`gridgnn.nn.dropout`,      ``uint64`` NumPy passes with
:func:`edge_mask`        bit for bit                                       ``n × f`` temporaries
:func:`masked_scale`     ``x / (1 − p)`` where kept, else 0                 a bool → float cast, a division and
                         (the bits of ``x * mask / (1 − p)``)              a product
:func:`top_per_row`     the winners of keyed weighted sampling without   a ``lexsort`` of every candidate
                         replacement, per row of a CSR                     (:mod:`gridgnn.sampling.matrix`)
:func:`sage_rows`       GraphSAGE's selection straight from the rows of   ``Q A`` formed by SpGEMM, normalized,
                         ``A`` (``Q`` selects one vertex per row)          then :func:`top_per_row`
:func:`relabel`         per minibatch: next frontier and the columns of    global sorts of (minibatch, vertex)
                         the sampled entries in it                         keys (:mod:`gridgnn.sampling.matrix`)
:func:`block_cols`      the distinct columns per block of a (permuted)     a ``np.unique`` per block row of the
                         matrix, read through its row order                 permuted copy (:mod:`~gridgnn.partition.counts`)
:func:`attend_forward`,  GAT / AGNN attention on whole rows: score →       ``sddmm → LeakyReLU → edge_softmax →
:func:`attend_backward`  softmax → (dropout) → aggregate, and back,        dropout → spmm`` and their backwards
                         keeping only ``K`` scalars per edge               (:mod:`gridgnn.parallel.attention`)
=======================  ===============================================  ======================================

**Selection.** :func:`fused` is true for CPU tensors of ``float32``/``float64`` when numba imports and the
environment variable ``GRIDGNN_KERNELS`` is not ``torch`` (set it to compare with the references, as the
benchmarks do) and the host is not taking a device's code paths (``GRIDGNN_DEVICE_PATHS=host``,
:mod:`~gridgnn.ops.device_paths`). Every other case — CUDA tensors above all — runs the torch reference.

**Parallelism.** Row kernels split the rows into runs of about equal *edge* counts (``8 ×`` the thread count)
and run them in a ``prange``; a row is written by one thread only, so there are no atomics and the result does
not depend on the thread count (each row sums its edges in CSR order). The number of threads follows
``torch.get_num_threads()`` at every call (the launcher sets it per rank); with one thread, or below
:data:`SERIAL_BELOW` operations, the kernel's serial twin runs and no pool is woken. numba's ``workqueue``
threading layer is chosen unless ``NUMBA_THREADING_LAYER`` says otherwise: its idle workers sleep, where
OpenMP's spin and slowed ranks sharing cores by 2× in the test suite.
"""
from __future__ import annotations

import importlib.util
import os
import time

import numpy as np
import torch

from .device_paths import host_takes_device_paths

HAVE_NUMBA = importlib.util.find_spec("numba") is not None
_FLOATS = (torch.float32, torch.float64)


def enabled() -> bool:
    """numba is present and the kernels are not disabled (``GRIDGNN_KERNELS=torch``)."""
    return HAVE_NUMBA and os.environ.get("GRIDGNN_KERNELS", "auto") != "torch"


def fused(*tensors: torch.Tensor) -> bool:
    """True when the numba kernels serve these tensors (CPU, float32/float64, numba present, not disabled, the host
    not taking a device's code paths: :mod:`~gridgnn.ops.device_paths`)."""
    if not enabled() or host_takes_device_paths():
        return False
    return all(t.device.type == "cpu" and (t.dtype in _FLOATS or not t.is_floating_point()) for t in tensors)


_JIT: dict = {}
#: below this many inner-loop operations a kernel runs its serial twin (waking a thread pool costs more)
SERIAL_BELOW = 1 << 16
_NAMES = ("spmm", "spmm_one", "spmm_cols", "sddmm_dot", "sddmm_cols", "sddmm_add", "segment", "keyed_mask", "edge_mask", "masked_scale",
          "row_exp", "row_dot", "row_apply", "attend_fwd", "attend_bwd", "top_rows", "relabel", "sage_rows",
          "block_cols")


_COMPILE_S = [0.0]  # seconds spent in calls that compiled (or loaded from the cache) a new kernel signature


def compile_seconds() -> float:
    """Seconds this process has spent compiling kernels (or loading them from numba's cache): the calls that
    added a signature to their kernel. The trainer reports the epochs' share of it."""
    return _COMPILE_S[0]


def _timed_first_calls(kernel):
    """``kernel`` called as is, the call's time added to :func:`compile_seconds` when it added a signature."""
    def call(*args):
        before = len(kernel.signatures)
        t0 = time.perf_counter()
        out = kernel(*args)
        if len(kernel.signatures) != before:
            _COMPILE_S[0] += time.perf_counter() - t0
        return out
    return call


_SET_UP_IN = [0]  # the process whose environment numba's configuration was last read from (0: none yet)


def _set_up() -> None:
    """numba imported, the kernels put in :data:`_JIT` (each compiled or loaded from numba's on-disk cache at its
    first call) and numba's run-time settings read from this process's environment (the threading layer and its
    thread count among them). It runs again in a process forked after it ran (the launcher's fork server,
    :func:`prepare`), for the child's own ``NUMBA_*``; what numba fixes when it decorates the kernels or builds its
    compiler (``NUMBA_CACHE_DIR``, ``NUMBA_DISABLE_JIT``, ``NUMBA_OPT``, ``NUMBA_CPU_NAME``) stays as the fork
    server's environment had it at the process's first launch (``GRIDGNN_START_METHOD=spawn`` for fresh
    interpreters)."""
    import numba

    if not _JIT:
        from . import _numba_kernels as nk

        for n in _NAMES:
            par = getattr(nk, f"{n}_kernel")
            _JIT[n] = (_timed_first_calls(par), _timed_first_calls(nk.serial_twin(par)))
    numba.config.reload_config()  # (re-reads NUMBA_* only where they changed since numba last read them)
    if "NUMBA_THREADING_LAYER" not in os.environ:
        # workqueue: idle workers sleep; OpenMP's spin, which halves the speed of ranks sharing cores
        numba.config.THREADING_LAYER = "workqueue"
    _SET_UP_IN[0] = os.getpid()


def prepare() -> None:
    """Pay now what a process's first kernel call would: numba imported, the kernels set up and numba's CPU compiler
    target initialized (about 0.7 s on a small CPU). The launcher's fork server does it once
    (:mod:`gridgnn.train.fork_preload`), so that the ranks it forks inherit it instead of each paying it again; no
    kernel runs, so no thread pool exists to be forked. Nothing when the kernels are off."""
    if enabled():
        _set_up()
        from numba.core.registry import cpu_target

        cpu_target.target_context.refresh()


def _kernel(name: str, work: float):
    """Kernel ``name`` (:mod:`gridgnn.ops._numba_kernels`, compiled or loaded from numba's on-disk cache on first
    use): the parallel one on as many threads as torch (which the launcher sets per rank), or its serial twin for
    one thread or less than :data:`SERIAL_BELOW` operations of ``work``."""
    if _SET_UP_IN[0] != os.getpid():
        _set_up()
    threads = torch.get_num_threads()
    if threads <= 1 or work < SERIAL_BELOW:
        return _JIT[name][1]
    set_threads(threads)
    return _JIT[name][0]


def set_threads(n: int) -> None:
    """Use ``n`` threads in the kernels (bounded by the threads numba started with)."""
    if HAVE_NUMBA:
        import numba

        if _SET_UP_IN[0] != os.getpid():  # before numba starts its pool: this process's threading layer
            _set_up()
        n = max(1, min(int(n), numba.config.NUMBA_NUM_THREADS))
        if numba.get_num_threads() != n:
            numba.set_num_threads(n)


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().numpy()


def _runs(crow: np.ndarray) -> np.ndarray:
    """Row bounds of runs with about equal edge counts (8 per thread; a row is never split)."""
    m = crow.shape[0] - 1
    parts = max(1, min(m, 8 * torch.get_num_threads()))
    if parts <= 1:
        return np.array([0, m], dtype=np.int64)
    targets = np.linspace(0, crow[-1], parts + 1)[1:-1]
    cut = np.searchsorted(crow, targets, side="left")
    return np.unique(np.concatenate([[0], np.clip(cut, 0, m), [m]])).astype(np.int64)


def head_columns(heads: int, width: int, c0: int = 0, c1: int | None = None) -> list[tuple[int, int, int]]:
    """``(head, a, b)``: the local columns ``a:b`` (relative to ``c0``) of the global columns ``c0:c1`` of a
    ``width``-wide tensor split into ``heads`` equal heads."""
    c1 = width if c1 is None else c1
    per = width // heads
    out = []
    for h in range(heads):
        a, b = max(c0, h * per), min(c1, (h + 1) * per)
        if a < b:
            out.append((h, a - c0, b - c0))
    return out


def _ranges(col_heads, width: int, heads: int) -> np.ndarray:
    spans = col_heads if col_heads is not None else head_columns(heads, width)
    return np.asarray(spans, dtype=np.int64).reshape(-1, 3)


def _one_head_per_column(ranges: np.ndarray, width: int) -> bool:
    """``ranges`` are ``(h, h, h + 1)`` for every column ``h``: per-edge vectors, one value per column."""
    return ranges.shape[0] == width > 1 and bool((ranges[:, 0] == np.arange(width)).all()
                                                 and (ranges[:, 1] == ranges[:, 0]).all()
                                                 and (ranges[:, 2] == ranges[:, 0] + 1).all())


def spmm_csr(crow: torch.Tensor, col: torch.Tensor, perm: torch.Tensor | None, values: torch.Tensor,
             x: torch.Tensor, out_rows: int, col_heads=None) -> torch.Tensor:
    r""":math:`Y_{u,c} = \sum_{j \in \mathrm{row}(u)} e_{\pi(j), h(c)} X_{\mathrm{col}(j), c}` over a CSR.

    Args:
        crow, col: the CSR (``out_rows + 1`` pointers) whose rows are the output rows.
        perm: edge ``j`` of this CSR reads value ``perm[j]`` (the transposed order), or ``None``.
        values: ``nnz × K`` edge values; ``x``: ``k × W``.
        col_heads: ``(head, a, b)`` column ranges (default ``W`` split into ``K`` equal heads).
    """
    vals = values.reshape(values.shape[0], -1).to(x.dtype)
    x = x.contiguous()
    out = x.new_empty((out_rows, x.shape[1]))
    c = _np(crow)
    ranges = _ranges(col_heads, x.shape[1], vals.shape[1])
    work = col.shape[0] * x.shape[1]
    one = ranges.shape[0] == 1 and ranges[0, 1] == 0 and ranges[0, 2] == x.shape[1]
    if one:
        vals = vals[:, int(ranges[0, 0])]
    vals = vals.contiguous() if perm is None else vals[perm]  # one gather, not a random value load per edge
    cols = not one and vals.shape[1] == x.shape[1] and _one_head_per_column(ranges, x.shape[1])
    if one:
        _kernel("spmm_one", work)(c, _np(col), _np(vals), _np(x), _runs(c), _np(out))
    elif cols:  # one head per column: per-edge vectors
        _kernel("spmm_cols", work)(c, _np(col), _np(vals), _np(x), _runs(c), _np(out))
    else:
        _kernel("spmm", work)(c, _np(col), _np(vals), _np(x), ranges, _runs(c), _np(out))
    return out


def sddmm_dot_csr(crow: torch.Tensor, col: torch.Tensor, dst: torch.Tensor, src: torch.Tensor, heads: int,
                  col_heads=None) -> torch.Tensor:
    r"""Per edge and head, :math:`\langle D_{u,h}, X_{v,h}\rangle` over the local columns → ``nnz × heads``."""
    out = dst.new_zeros((int(col.shape[0]), heads))
    c = _np(crow)
    ranges = _ranges(col_heads, dst.shape[1], heads)
    if heads == dst.shape[1] and _one_head_per_column(ranges, dst.shape[1]):
        _kernel("sddmm_cols", col.shape[0] * dst.shape[1])(c, _np(col), _np(dst.contiguous()),
                                                            _np(src.contiguous()), _runs(c), _np(out))
        return out
    _kernel("sddmm_dot", col.shape[0] * dst.shape[1])(c, _np(col), _np(dst.contiguous()), _np(src.contiguous()),
                                                       _ranges(col_heads, dst.shape[1], heads), _runs(c), _np(out))
    return out


def sddmm_add_csr(crow: torch.Tensor, col: torch.Tensor, s_dst: torch.Tensor, s_src: torch.Tensor) -> torch.Tensor:
    r""":math:`e_{uv,h} = s^{dst}_{u,h} + s^{src}_{v,h}` → ``nnz × K``."""
    out = s_dst.new_empty((int(col.shape[0]), s_dst.shape[1]))
    c = _np(crow)
    _kernel("sddmm_add", out.numel())(c, _np(col), _np(s_dst.contiguous()), _np(s_src.contiguous()), _runs(c),
                                      _np(out))
    return out


def segment_reduce(crow: torch.Tensor, values: torch.Tensor, op: str) -> torch.Tensor:
    """Per CSR row, ``"sum"`` or ``"max"`` of the ``nnz × K`` edge values (empty rows: 0 or −inf)."""
    vals = values.contiguous()
    m = int(crow.shape[0]) - 1
    out = (vals.new_full((m, vals.shape[1]), float("-inf")) if op == "max" else vals.new_zeros((m, vals.shape[1])))
    c = _np(crow)
    _kernel("segment", vals.numel())(c, _np(vals), op == "max", _runs(c), _np(out))
    return out


def row_exp(crow: torch.Tensor, e: torch.Tensor, m: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(exp(e − m[row]), its row sums)`` for ``nnz × K`` edge values in CSR order and ``m × K`` row shifts."""
    e = e.contiguous()
    ex = torch.empty_like(e)
    s = e.new_zeros((int(crow.shape[0]) - 1, e.shape[1]))
    c = _np(crow)
    _kernel("row_exp", e.numel())(c, _np(e), _np(m.contiguous()), _runs(c), _np(ex), _np(s))
    return ex, s


def row_dot(crow: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Per CSR row, ``Σ_j a[j] ⊙ b[j]`` of two ``nnz × K`` edge tensors → ``m × K``."""
    out = a.new_zeros((int(crow.shape[0]) - 1, a.shape[1]))
    c = _np(crow)
    _kernel("row_dot", a.numel())(c, _np(a.contiguous()), _np(b.contiguous()), _runs(c), _np(out))
    return out


def row_apply(crow: torch.Tensor, a: torch.Tensor, b: torch.Tensor | None, t: torch.Tensor) -> torch.Tensor:
    """Per edge of row ``i``: ``a / t[i]`` (``b`` is ``None``), or ``a ⊙ (b − t[i])``."""
    a = a.contiguous()
    out = torch.empty_like(a)
    c = _np(crow)
    _kernel("row_apply", a.numel())(c, _np(a), _np(a if b is None else b.contiguous()), _np(t.contiguous()),
                                    b is not None, _runs(c), _np(out))
    return out


def _as_uint64(ids) -> np.ndarray:
    """``ids`` as contiguous ``uint64``: a view of contiguous 64-bit integers (the same bits as a conversion, two's
    complement), else a copy — a mask drawn again in the backward allocates the mask alone."""
    a = np.asarray(ids)
    if a.dtype in (np.int64, np.uint64) and a.flags.c_contiguous:
        return a.view(np.uint64)
    return np.ascontiguousarray(a, dtype=np.uint64)


def keyed_mask(ids: np.ndarray, features: int, c0: int, c1: int, key: np.uint64, threshold: np.uint64) -> np.ndarray:
    """``bool[len(ids), c1 − c0]``: ``mix((id · features + col) ^ key) < threshold`` — the node-feature dropout
    hash of :func:`gridgnn.nn.dropout.keep_mask`."""
    out = np.empty((len(ids), c1 - c0), dtype=np.bool_)
    _kernel("keyed_mask", out.size)(_as_uint64(ids), np.uint64(features), np.uint64(c0),
                                    np.uint64(key), np.uint64(threshold), out)
    return out


def edge_mask(dst: np.ndarray, src: np.ndarray, heads: int, key: np.uint64, threshold: np.uint64) -> np.ndarray:
    """``bool[len(dst), heads]``: ``mix(mix(mix(dst ^ key) + src) ^ (h + 1)·G) < threshold`` — the attention
    dropout hash of :func:`gridgnn.nn.dropout.edge_keep_mask`."""
    out = np.empty((len(dst), heads), dtype=np.bool_)
    _kernel("edge_mask", out.size)(_as_uint64(dst), _as_uint64(src), np.uint64(key), np.uint64(threshold), out)
    return out


def masked_scale(x: torch.Tensor, mask: torch.Tensor, q: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """``x / q`` where ``mask`` (bool, same shape), else 0: the bits of ``x * mask / q`` in one pass, into ``out``
    (default: a new tensor; ``x`` itself, contiguous, to overwrite it)."""
    x = x.contiguous()
    out = torch.empty_like(x) if out is None else out
    xs = _np(x).reshape(-1)
    _kernel("masked_scale", x.numel())(xs, _np(mask.contiguous()).reshape(-1), xs.dtype.type(q),
                                       _np(out).reshape(-1))
    return out


def _scalar(like: torch.Tensor, v: float):
    """``v`` in the dtype of ``like`` (so a float32 kernel multiplies by the float32 constant, as torch does)."""
    return _np(like).dtype.type(v)


def _keep_array(keep: torch.Tensor | None) -> np.ndarray:
    return np.zeros((0, 0), dtype=np.bool_) if keep is None else _np(keep.contiguous())


def attend_forward(crow: torch.Tensor, col: torch.Tensor, a_dst: torch.Tensor, a_src: torch.Tensor,
                   x: torch.Tensor, *, dot: bool, heads: int, slope: float, keep: torch.Tensor | None,
                   q: float) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Attention on whole rows of a CSR (rows = destinations): scores (``dot``: per-head
    :math:`\langle a^{dst}_u, a^{src}_v\rangle`; else :math:`\mathrm{LeakyReLU}(a^{dst}_{u,h} + a^{src}_{v,h})`),
    their softmax per row and head, inverted dropout by ``keep`` (``nnz × K`` bool, or ``None``) and the weighted
    sum of the sources' ``x`` rows. Returns ``(α before dropout: nnz × K, out: m × W)``."""
    x, a_dst, a_src = x.contiguous(), a_dst.contiguous(), a_src.contiguous()
    nnz, m = int(col.shape[0]), int(crow.shape[0]) - 1
    alpha = x.new_empty((nnz, heads))
    out = x.new_empty((m, x.shape[1]))
    c = _np(crow)
    dr = _ranges(None, a_dst.shape[1], heads)
    _kernel("attend_fwd", nnz * (x.shape[1] + (a_dst.shape[1] if dot else heads)))(
        c, _np(col), _np(a_dst), _np(a_src), _np(x), dot, _scalar(x, slope), dr,
        _ranges(None, x.shape[1], heads), _keep_array(keep), keep is not None, _scalar(x, q), _runs(c), _np(alpha),
        _np(out))
    return alpha, out


def attend_backward(crow: torch.Tensor, col: torch.Tensor, a_dst: torch.Tensor, a_src: torch.Tensor,
                    x: torch.Tensor, dy: torch.Tensor, alpha: torch.Tensor, *, dot: bool, slope: float,
                    keep: torch.Tensor | None, q: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The row-local part of the backward of :func:`attend_forward`: ``(score gradient: nnz × K, gradient of
    a_dst)``. The sources' gradients (``αᵀ dy``, and the column sums or ``g_edgeᵀ a_dst`` of the score
    gradient) are transposed products over the returned edge tensors."""
    heads = alpha.shape[1]
    g_edge = alpha.new_empty(alpha.shape)
    g_dst = a_dst.new_empty(a_dst.shape)
    c = _np(crow)
    _kernel("attend_bwd", int(col.shape[0]) * (x.shape[1] + (a_dst.shape[1] if dot else heads)))(
        c, _np(col), _np(a_dst.contiguous()), _np(a_src.contiguous()), _np(x.contiguous()), _np(dy.contiguous()),
        _np(alpha.contiguous()), dot, _scalar(x, slope), _ranges(None, a_dst.shape[1], heads),
        _ranges(None, x.shape[1], heads), _keep_array(keep), keep is not None, _scalar(x, q), _runs(c), _np(g_edge),
        _np(g_dst))
    return g_edge, g_dst


def block_cols(indptr: np.ndarray, indices: np.ndarray, rows: np.ndarray, bounds: np.ndarray,
               col_block: np.ndarray, blocks: int) -> np.ndarray:
    """``int64[blocks, R]``: per column block ``q`` and block ``l`` of the rows ``rows[bounds[l]:bounds[l + 1]]``
    of a CSR matrix, the distinct columns ``c`` (of block ``col_block[c]``) that those rows' entries hold: one pass
    over the entries, no sort (:func:`gridgnn.partition.counts.nnz_cols`, whose loop of ``np.unique`` it equals)."""
    out = np.zeros((int(blocks), len(bounds) - 1), dtype=np.int64)
    seen = np.full(len(col_block), -1, dtype=np.int64)
    _kernel("block_cols", 0)(np.ascontiguousarray(indptr, dtype=np.int64), np.ascontiguousarray(indices),
                             np.ascontiguousarray(rows, dtype=np.int64), np.ascontiguousarray(bounds, dtype=np.int64),
                             np.ascontiguousarray(col_block, dtype=np.int64), seen, out)
    return out


def top_per_row(indptr: np.ndarray, indices: np.ndarray, probs: np.ndarray, row_keys: np.ndarray, s: int) -> np.ndarray:
    """``bool[nnz]``: per CSR row, the ``s`` entries with the largest ``log(u) / p`` where ``u`` is the open uniform
    of ``mix(row_keys[row] + column)`` (every entry of a row with at most ``s``); see
    :func:`gridgnn.sampling.matrix.top_per_row_reference`, whose choice it equals."""
    keep = np.zeros(len(indices), dtype=np.bool_)
    indptr = np.ascontiguousarray(indptr, dtype=np.int64)
    _kernel("top_rows", len(indices))(indptr, np.ascontiguousarray(indices, dtype=np.int64),
                                      np.ascontiguousarray(probs, dtype=np.float64),
                                      np.ascontiguousarray(row_keys, dtype=np.uint64), int(s), _runs(indptr), keep)
    return keep


def relabel(nodes: np.ndarray, ptr: np.ndarray, add_cols: np.ndarray, add_vals: np.ndarray, add_ptr: np.ndarray,
            q_cols: np.ndarray, q_ptr: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per minibatch (stacked frontiers ``nodes``/``ptr``): the next frontier — the frontier, then the added
    vertices ``add_cols`` (grouped by ``add_ptr``) not in it, by id — and for every query column (grouped by
    ``q_ptr``) its column in the stacked next frontier (−1 if it was not added) and the value of its added entry.
    Returns ``(next nodes, next ptr, query columns, query values)``; minibatches run in parallel."""
    k = len(ptr) - 1
    add_cols = np.ascontiguousarray(add_cols, dtype=np.int64)
    new_buf = np.empty(len(add_cols), dtype=np.int64)
    new_count = np.zeros(k, dtype=np.int64)
    q_rel = np.empty(len(q_cols), dtype=np.int64)
    q_vals = np.zeros(len(q_cols), dtype=np.float64)
    args = [np.ascontiguousarray(a, dtype=np.int64) for a in (nodes, ptr)]
    n = int(max(add_cols.max(initial=-1), args[0].max(initial=-1), np.max(q_cols, initial=-1))) + 1
    _kernel("relabel", 16 * (len(add_cols) + len(q_cols)) if k > 1 else 0)(
        n, args[0], args[1], add_cols, np.ascontiguousarray(add_vals, dtype=np.float64),
        np.ascontiguousarray(add_ptr, dtype=np.int64), np.ascontiguousarray(q_cols, dtype=np.int64),
        np.ascontiguousarray(q_ptr, dtype=np.int64), max(1, min(k, torch.get_num_threads())), new_buf, new_count,
        q_rel, q_vals)
    sizes = np.diff(args[1]) + new_count
    nptr = np.zeros(k + 1, dtype=np.int64)
    nptr[1:] = np.cumsum(sizes)
    nxt = np.concatenate([part for i in range(k) for part in (args[0][args[1][i]:args[1][i + 1]],
                                                              new_buf[add_ptr[i]:add_ptr[i] + new_count[i]])]
                         or [np.zeros(0, np.int64)])
    owner = np.repeat(np.arange(k, dtype=np.int64), np.diff(q_ptr))
    cols = np.where(q_rel >= 0, q_rel + nptr[owner], -1)
    return nxt, nptr, cols, q_vals


def sage_rows(indptr: np.ndarray, indices: np.ndarray, nodes: np.ndarray, row_keys: np.ndarray,
              s: int) -> tuple[np.ndarray, np.ndarray]:
    """GraphSAGE's sample of the rows ``nodes`` of the CSR ``(indptr, indices)`` (probabilities ``1/deg``):
    ``(row, column)`` of the kept entries in row, then column order — the entries :func:`top_per_row` keeps in
    ``Q A`` for the one-nonzero-per-row ``Q`` of ``nodes``, without forming ``Q A``."""
    nodes = np.ascontiguousarray(nodes, dtype=np.int64)
    deg = (indptr[nodes + 1] - indptr[nodes]).astype(np.int64)
    counts = deg if s < 0 else np.minimum(deg, s)
    offsets = np.zeros(len(nodes) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum(counts)
    out = np.empty(int(offsets[-1]), dtype=np.int64)
    _kernel("sage_rows", int(deg.sum()))(np.ascontiguousarray(indptr, dtype=np.int64),
                                         np.ascontiguousarray(indices, dtype=np.int64), nodes,
                                         np.ascontiguousarray(row_keys, dtype=np.uint64), int(s), offsets,
                                         _runs(offsets), out)
    return np.repeat(np.arange(len(nodes), dtype=np.int64), counts), out
