r"""Fused device kernels, written in Triton: the GPU's counterpart of the numba kernels of :mod:`gridgnn.ops.kernels`.

=======================  ===============================================  ======================================
kernel                   computes                                         replaces (the tested reference)
=======================  ===============================================  ======================================
:func:`node_keep_mask`   the keyed dropout mask of a node block, bit for  :func:`gridgnn.nn.dropout.keep_mask_tensor`:
                         bit (SplitMix64 in ``uint64``, one pass, 1 byte  a dozen ``int64`` passes over the
                         written per element)                             block, in chunks
:func:`edge_keep_mask`   the keyed attention-dropout mask of the edges ×  :func:`~gridgnn.nn.dropout.edge_keep_mask_tensor`
                         heads, bit for bit
:func:`sddmm_dot`        per edge and head :math:`\langle D_{u,h}, X_{v,h}     :func:`gridgnn.ops.pattern.sddmm_dot_reference`:
                         \rangle` (GAT's and AGNN's backward, AGNN's and   gathered ``edges × width`` chunks, a
                         VA's scores), each edge reading its two rows      product and a sum per chunk
:func:`attend_forward`,  GAT's and AGNN's attention on whole rows: per    the composition of the graph's
:func:`attend_backward`  row and head, scores → softmax → dropout →       primitives (``nnz × K`` scores,
                         weighted sum in passes over the row's edges;     exponents, row statistics, masked
                         backward the score gradient and the              copies); tested against
                         destinations'; only ``K`` values per edge        :mod:`gridgnn.ops.attend`'s reference
=======================  ===============================================  ======================================

A GPU profile (docs/benchmarks.md, one H200) found the masks' torch passes at about 45 % of the device time of a GCN
and of a GraphSAGE epoch; one kernel reads the ids once and writes the mask. It found GAT's epoch spending 6.5 ms of
16 in gathers (the softmax's per-edge row statistics, the transposed products' values), which the fused attention
kernels replace on the layouts whose rows are whole.

**Selection.** :func:`usable` is true for CUDA tensors when Triton is installed and ``GRIDGNN_KERNELS`` is not
``torch`` (the references then run, as on a machine without Triton). The kernels are built on first use; a kernel
that cannot be built or launched here (Triton too old or too new for the GPU, no compiler for its launcher) turns
itself off for the process with one warning (:data:`off`; the others stay on), and its reference runs: the same
results (the masks bit for bit, the SDDMM and the attention to rounding), only slower. ``GRIDGNN_KERNELS=triton``
makes such a failure an error instead (the GPU tests set it, so that a kernel that does not run here fails them). With ``TRITON_INTERPRET=1`` set before Triton is
first imported, Triton's interpreter runs them on host tensors — how the tests
check them on a machine without a GPU (tests/ops/test_triton_kernels.py; the interpreter runs the kernels'
arithmetic in NumPy, so it checks their logic and bits, not their compilation or speed: a GPU run does that).

**Built without a GPU.** :func:`build` compiles a launch the wrappers make (:func:`recording`, :func:`launches_for`)
as Triton's JIT would on a GPU of a given compute capability, through Triton's compiler and its ``ptxas``, and reads
``ptxas``'s report: registers and spills a thread. tests/ops/test_triton_build.py holds every kernel to compiling
and not spilling; ``benchmarks/triton_build.py`` prints the table (docs/benchmarks.md). The tiles are bounded by it
(:data:`TILE`, :data:`SPAN_BYTES`); only a GPU times them.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import importlib.util
import io
import os
import re
import warnings

import torch

HAVE_TRITON = importlib.util.find_spec("triton") is not None
#: elements per program of the mask kernels
BLOCK = 1024
#: elements of an operand's tile a program of the SDDMM holds at a step (``BLOCK_E × BLOCK_F``: 8 a thread at 4
#: warps; 2048 held 229 registers a thread, 4096 spilled to local memory — :func:`build` measures it)
TILE = 1024
#: bytes of a head's columns the attention kernels hold per edge at a step (``BLOCK_F`` / ``BLOCK_D``: 64 columns of
#: float32, 32 of float64; 64 of float64 took up to 222 registers a thread and spilled)
SPAN_BYTES = 256
#: the kernels turned off in this process, by name, and why (a kernel that could not be built or launched)
off: dict[str, str] = {}
#: multiply-adds fused (Triton's default until 3.10, which turns it off; set here so that an upgrade changes nothing)
FP_FUSION = True
#: the launches being recorded instead of run (:func:`recording`), or ``None``
_recorded: list | None = None
#: the tensors the launches made while a CUDA graph is captured read (:func:`holding`), or ``None``
_held: list | None = None


def usable(device: torch.device) -> bool:
    """Triton serves tensors on ``device``: a CUDA device, Triton present, the kernels not disabled
    (``GRIDGNN_KERNELS=torch``); a kernel in :data:`off` still answers ``None`` (its caller runs the reference)."""
    return (torch.device(device).type == "cuda" and HAVE_TRITON
            and os.environ.get("GRIDGNN_KERNELS", "auto") != "torch")


def on(*names: str) -> bool:
    """None of the kernels ``names`` was turned off in this process."""
    return not any(name in off for name in names)


def _kernels():
    """The jitted kernels' module, imported on first use (Triton is optional; ``TRITON_INTERPRET`` is read when
    its kernels are decorated)."""
    return importlib.import_module(__name__.rpartition(".")[0] + "._triton_kernels")


def _launch(name: str, programs: int | tuple[int, ...], *args, **meta) -> bool:
    """Run kernel ``name`` on ``programs`` programs (a grid: a tuple); ``False`` where Triton cannot build or launch
    it here (the kernel is then turned off for the process, with one warning)."""
    if _recorded is not None:
        _recorded.append((name, args, meta))
        return True
    if name in off:
        return False
    if _held is not None:
        _held.extend(a for a in args if isinstance(a, torch.Tensor))
    grid = programs if isinstance(programs, tuple) else (programs,)
    strict = os.environ.get("GRIDGNN_KERNELS") == "triton"
    try:
        getattr(_kernels(), name)[grid](*args, enable_fp_fusion=FP_FUSION, **meta)
        if strict and _may_wait():  # (the tests: a fault of the kernel surfaces here, at its own launch, not at a
            torch.cuda.synchronize()  # later wait that names another line)
        return True
    except Exception as exc:  # noqa: BLE001 - any failure of Triton's toolchain: the references serve instead
        if strict or _capturing():  # (the tests): a kernel that cannot run fails; and within a CUDA graph's capture,
            raise  # which the failure may have spoiled: the capture names it as its first error
        text = str(exc).strip().splitlines()
        off[name] = f"{type(exc).__name__}: {text[0][:200] if text else ''}"
        warnings.warn(f"gridgnn: the Triton kernel {name} is off in this process ({off[name]}); its torch "
                      "reference runs instead", RuntimeWarning, stacklevel=3)
        return False


def _capturing() -> bool:
    """A CUDA graph is being captured on the current stream."""
    return torch.cuda.is_available() and torch.cuda.is_initialized() and torch.cuda.is_current_stream_capturing()


def _may_wait() -> bool:
    """A launch may wait for the device: CUDA present, no stream being captured into a CUDA graph, and no
    synchronization check in force (``torch.cuda.set_sync_debug_mode``: a test that the step reads nothing back)."""
    return (torch.cuda.is_available() and torch.cuda.is_initialized() and not _capturing()
            and torch.cuda.get_sync_debug_mode() == 0)


@functools.lru_cache(maxsize=64)
def _segments(segs: tuple, device: str) -> torch.Tensor:
    """The column segments ``(head, start, length)`` as a ``3 × S`` device tensor, copied once per layout (a copy
    from the host at every call would wait for the device)."""
    return torch.tensor(segs, dtype=torch.int64).t().contiguous().to(device)


def _programs(out: torch.Tensor) -> int:
    return (out.numel() + BLOCK - 1) // BLOCK


def _as_uint64_arg(v: int) -> int:
    """A ``uint64`` constant as the kernel argument (Triton types an int above the ``int64`` range ``uint64``)."""
    return int(v) % 2**64


def _key_args(key, out: torch.Tensor) -> tuple:
    """A mask kernel's ``key, key_at`` and its ``KEY_IN_MEMORY``: a key given as an int travels as the argument, one
    given as a 0-d ``int64`` device tensor is read from its memory at the launch (``out`` stands in for the unused
    pointer)."""
    if isinstance(key, torch.Tensor):
        return (0, key.reshape(1)), {"KEY_IN_MEMORY": True}
    return (_as_uint64_arg(key), out), {"KEY_IN_MEMORY": False}


def node_keep_mask(node_ids: torch.Tensor, features: int, c0: int, c1: int, key, threshold: int) -> torch.Tensor:
    """``bool[len(node_ids), c1 − c0]``: :func:`gridgnn.nn.dropout.keep_mask_tensor`'s bits (``node_ids``: int64,
    ``key`` and ``threshold`` as ``uint64`` values, the key also as a 0-d ``int64`` device tensor holding its bits:
    :func:`gridgnn.nn.dropout.device_key`); ``None`` where the kernel cannot run here (:func:`_launch`)."""
    ids = node_ids.reshape(-1).contiguous()
    width = c1 - c0
    out = torch.empty(ids.numel() * width, dtype=torch.uint8, device=ids.device)
    keys, meta = _key_args(key, out)
    if out.numel() and not _launch("node_mask", _programs(out), ids, out, out.numel(), width, features, c0, *keys,
                                   _as_uint64_arg(threshold), BLOCK=BLOCK, **meta):
        return None
    return out.view(torch.bool).reshape(ids.numel(), width)


def edge_keep_mask(dst_ids: torch.Tensor, src_ids: torch.Tensor, heads: int, key, threshold: int) -> torch.Tensor:
    """``bool[edges, heads]``: :func:`gridgnn.nn.dropout.edge_keep_mask_tensor`'s bits (``key``, ``None``: see
    :func:`node_keep_mask`)."""
    dst, src = dst_ids.reshape(-1).contiguous(), src_ids.reshape(-1).contiguous()
    out = torch.empty(dst.numel() * heads, dtype=torch.uint8, device=dst.device)
    keys, meta = _key_args(key, out)
    if out.numel() and not _launch("edge_mask", _programs(out), dst, src, out, out.numel(), heads, *keys,
                                   _as_uint64_arg(threshold), BLOCK=BLOCK, **meta):
        return None
    return out.view(torch.bool).reshape(dst.numel(), heads)


def sddmm_dot(row: torch.Tensor, col: torch.Tensor, dst: torch.Tensor, src: torch.Tensor, heads: int,
              col_heads: list[tuple[int, int, int]]) -> torch.Tensor:
    r"""``nnz × heads``: :func:`gridgnn.ops.pattern.sddmm_dot` — per edge ``(row[e], col[e])`` and column segment
    ``(h, a, b)`` of ``col_heads``, :math:`\sum_{a \le c < b} D_{row,c} X_{col,c}` added to head ``h`` (``None``:
    see :func:`node_keep_mask`)."""
    dst, src = dst.contiguous(), src.contiguous()
    nnz, width = col.numel(), dst.shape[1]
    out = dst.new_zeros((nnz, heads))
    segs = [(h, a, b - a) for h, a, b in col_heads if b > a]
    if nnz == 0 or not segs:
        return out
    seg = _segments(tuple(segs), str(dst.device))
    block_f = _block(max(n for _, _, n in segs))  # columns per step of a segment
    block_e = TILE // block_f
    if not _launch("sddmm_dot", (nnz + block_e - 1) // block_e, row, col, dst, src, out, seg[0], seg[1], seg[2],
                   nnz, width, heads, len(segs), BLOCK_E=block_e, BLOCK_F=block_f):
        return None
    return out


@functools.lru_cache(maxsize=64)
def _consts(slope: float, q: float, dtype: torch.dtype, device: str) -> torch.Tensor:
    """``[slope, q]`` in the data's type on its device, copied once per value (a float argument reaches a kernel as
    float32, which a float64 attention must not round to)."""
    return torch.tensor([slope, q], dtype=dtype).to(device)


def _block(n: int, most: int = 64) -> int:
    """Columns per step for spans of ``n`` columns: a power of two, 16 to ``most``."""
    return min(most, max(16, 1 << (max(1, n) - 1).bit_length()))


def _span_blocks(x: torch.Tensor, a_dst: torch.Tensor, heads: int) -> dict:
    """The attention kernels' ``BLOCK_F`` (a head's columns of ``x``) and ``BLOCK_D`` (of ``a_dst``) per step, at
    most :data:`SPAN_BYTES` of the data's type."""
    most = max(16, SPAN_BYTES // x.element_size())
    return dict(BLOCK_F=_block(x.shape[1] // heads, most), BLOCK_D=_block(a_dst.shape[1] // heads, most))


def _attend_args(crow, col, a_dst, a_src, x, heads, keep):
    """The kernels' tensors, contiguous (``keep`` as bytes); ``None`` where the heads do not divide the widths (the
    reference serves that)."""
    if x.shape[1] % heads or a_dst.shape[1] % heads:
        return None
    keep_arg = keep.contiguous().view(torch.uint8) if keep is not None else crow  # (unread without KEEP)
    return crow.contiguous(), col.contiguous(), a_dst.contiguous(), a_src.contiguous(), x.contiguous(), keep_arg


def attend_forward(crow: torch.Tensor, col: torch.Tensor, a_dst: torch.Tensor, a_src: torch.Tensor,
                   x: torch.Tensor, *, dot: bool, heads: int, slope: float, keep: torch.Tensor | None,
                   q: float) -> tuple[torch.Tensor, torch.Tensor] | None:
    r""":func:`gridgnn.ops.kernels.attend_forward` (the numba kernel's contract): ``(α before dropout: nnz × K,
    out: m × W)``, one program per destination row and head (``None``: see :func:`node_keep_mask`, and where the
    heads do not divide the widths — the reference serves that)."""
    args = _attend_args(crow, col, a_dst, a_src, x, heads, keep)
    if args is None:
        return None
    crow, col, a_dst, a_src, x, keep_arg = args
    m, nnz, width = crow.numel() - 1, col.numel(), x.shape[1]
    alpha = x.new_empty((nnz, heads))
    out = x.new_zeros((m, width))
    if m == 0:
        return alpha, out
    if not _launch("attend_fwd", (m, heads), crow, col, a_dst, a_src, x, keep_arg,
                   _consts(float(slope), float(q), x.dtype, str(x.device)), alpha, out, heads, width, a_dst.shape[1],
                   DOT=bool(dot), KEEP=keep is not None, BLOCK_E=32, **_span_blocks(x, a_dst, heads)):
        return None
    return alpha, out


def attend_backward(crow: torch.Tensor, col: torch.Tensor, a_dst: torch.Tensor, a_src: torch.Tensor,
                    x: torch.Tensor, dy: torch.Tensor, alpha: torch.Tensor, *, dot: bool, slope: float,
                    keep: torch.Tensor | None, q: float) -> tuple[torch.Tensor, torch.Tensor] | None:
    """:func:`gridgnn.ops.kernels.attend_backward`: ``(score gradient: nnz × K, gradient of a_dst)`` (``None``:
    see :func:`node_keep_mask`)."""
    heads = alpha.shape[1]
    args = _attend_args(crow, col, a_dst, a_src, x, heads, keep)
    if args is None:
        return None
    crow, col, a_dst, a_src, x, keep_arg = args
    m, width = crow.numel() - 1, x.shape[1]
    g_edge = alpha.new_zeros(alpha.shape)
    g_dst = a_dst.new_zeros(a_dst.shape)
    if m == 0:
        return g_edge, g_dst
    if not _launch("attend_bwd", (m, heads), crow, col, a_dst, a_src, x, dy.contiguous(), alpha.contiguous(),
                   keep_arg, _consts(float(slope), float(q), x.dtype, str(x.device)), g_edge, g_dst, heads, width,
                   a_dst.shape[1], DOT=bool(dot), KEEP=keep is not None, BLOCK_E=32, **_span_blocks(x, a_dst, heads)):
        return None
    return g_edge, g_dst


# -- the kernels built ahead of time, without a GPU ------------------------------------------------------------------


@contextlib.contextmanager
def recording():
    """Inside, the wrappers record their launches ``(kernel, arguments, meta)`` into the list this yields instead of
    running them (on any device, host tensors included; the wrappers answer their empty outputs)."""
    global _recorded
    outer, _recorded = _recorded, []
    try:
        yield _recorded
    finally:
        _recorded = outer


@contextlib.contextmanager
def holding():
    """Inside, every tensor a kernel launch reads or writes is appended to the list this yields: a CUDA graph keeps
    the addresses its launches were given, so what it did not make must outlive it (a launch bypasses the
    dispatcher, where :class:`gridgnn.train.graphed.Capture` sees the rest)."""
    global _held
    outer, _held = _held, []
    try:
        yield _held
    finally:
        _held = outer


def launches_for(dtype: torch.dtype, span: int) -> list[tuple[str, tuple, dict]]:
    """The launches the wrappers make for features of ``dtype`` whose heads are ``span`` columns wide: both dropout
    masks, the SDDMM, and the fused attention's forward and backward with scores by dot product (AGNN) and by sum
    (GAT), with dropout and without (recorded, not run: :func:`recording`)."""
    n, heads, slope, q = 4, 2, 0.2, 0.5
    crow = torch.arange(0, 2 * n + 1, 2)
    col = torch.arange(2 * n) % n
    x = torch.zeros(n, heads * span, dtype=dtype)
    with recording() as launches:
        # a key given (typed uint64 above 2⁶³, int64 below, int32 below 2³¹, as Triton types an int by its value),
        # and one read from memory (a CUDA graph's); thresholds of p < 0.5 (uint64) and p > 0.5 (int64)
        for key, threshold in ((2**64 - 1, 2**63), (2**40, 2**62), (5, 2**63), (torch.tensor(-1), 2**63)):
            node_keep_mask(torch.arange(n), span, 0, span, key, threshold)
            edge_keep_mask(col, col, heads, key, threshold)
        sddmm_dot(col, col, x, x, heads, [(h, h * span, (h + 1) * span) for h in range(heads)])
        for dot in (False, True):
            a = x if dot else torch.zeros(n, heads, dtype=dtype)
            for keep in (None, torch.ones(2 * n, heads, dtype=torch.bool)):
                attend_forward(crow, col, a, a, x, dot=dot, heads=heads, slope=slope, keep=keep, q=q)
                attend_backward(crow, col, a, a, x, x, torch.zeros(2 * n, heads, dtype=dtype), dot=dot, slope=slope,
                                keep=keep, q=q)
    return launches


class BuildUnsupported(RuntimeError):
    """:func:`build` reads internals of Triton's JIT that this Triton does not have as it expects (made for Triton
    3.9; a test skips on it, naming the version)."""


@dataclasses.dataclass(frozen=True)
class Build:
    """One kernel as a GPU of compute capability ``capability`` would build it for one launch, and what ``ptxas``
    reports of it: ``registers`` a thread, ``spill_bytes`` stored to local memory a thread (registers that did not
    fit), ``shared_bytes`` of shared memory a program."""
    kernel: str
    capability: int
    signature: str
    meta: str
    registers: int
    spill_bytes: int
    shared_bytes: int


def build(kernel: str, args: tuple, meta: dict, capability: int) -> Build:
    """Kernel ``kernel`` compiled ahead of time as Triton's JIT compiles it for the launch ``(args, meta)`` (a
    :func:`recording`'s) on a GPU of compute capability ``capability`` (80: A100, 90: H100 and H200): the same
    specialization (argument types, alignment, constants, options), compiled through Triton's compiler and the
    ``ptxas`` it ships — no GPU needed. Reads Triton's internals (its JIT's binder, made for Triton 3.9):
    :class:`BuildUnsupported` where this Triton's differ."""
    import triton

    try:
        from triton import compile as triton_compile
        from triton import knobs
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource, make_backend
        from triton.runtime.jit import create_function_from_signature

        fn = getattr(_kernels(), kernel)
        target = GPUTarget("cuda", capability, 32)
        backend = make_backend(target)
        meta = dict(meta, enable_fp_fusion=FP_FUSION)
        bound, specialization, options = create_function_from_signature(fn.signature, fn.params, backend)(
            *args, **meta)
        options, signature, constants, attrs = fn._pack_args(backend, meta, bound, specialization, options)
        compilation, nvidia = knobs.compilation, knobs.nvidia  # (set for the compilation below, then restored)
        scopes = compilation.scope(), nvidia.scope()
    except (ImportError, AttributeError, TypeError, ValueError, RuntimeError) as exc:
        raise BuildUnsupported(f"Triton {triton.__version__} cannot build {kernel} ahead of time here "
                               f"({type(exc).__name__}: {exc})") from None
    log = io.StringIO()
    with scopes[0], scopes[1], contextlib.redirect_stdout(log):
        compilation.always_compile = True  # (a cached kernel would skip ptxas and its report)
        nvidia.dump_ptxas_log = True
        compiled = triton_compile(ASTSource(fn, signature, constants, attrs), target=target,
                                  options=options.__dict__)
    report = log.getvalue()
    registers = re.search(r"Used (\d+) registers", report)
    spills = re.search(r"(\d+) bytes spill stores", report)
    if registers is None or spills is None:
        raise RuntimeError(f"ptxas reported no registers or spills for {kernel}:\n{report[-2000:]}")
    return Build(kernel, capability, ",".join(str(t) for k, t in signature.items() if t != "constexpr"),
                 ",".join(f"{k}={v}" for k, v in meta.items() if k.isupper()), int(registers.group(1)),
                 int(spills.group(1)), int(compiled.metadata.shared))
