"""The Triton kernels compiled for a GPU on this machine, without one (:func:`gridgnn.ops.triton_kernels.build`:
Triton's compiler and the ``ptxas`` it ships, the specialization its JIT would make for the launch): what the
interpreter cannot check (tests/ops/test_triton_kernels.py) — that every kernel compiles, for every data type and
variant the wrappers launch, and that none spills registers to local memory beyond a value parked once a program.
The SDDMM's tiles of 2048–4096 elements spilled 36 to 6392 bytes a thread before its tile was bounded (TILE)."""
import os

import pytest
import torch

from gridgnn.ops import triton_kernels as TK

pytestmark = [pytest.mark.skipif(not TK.HAVE_TRITON, reason="Triton is not installed"),
              pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") == "1",
                                 reason="TRITON_INTERPRET=1: the kernels are interpreted, not compiled")]

#: spilled bytes a thread that are a value parked once a program (ptxas stores one 32-bit value in the prologue and
#: loads it once after the loops: float64's attention backward on sm_90, 4 bytes); a spill in a loop is far more
PARKED = 8


def test_the_recorded_launches_are_those_the_wrappers_make():
    """:func:`launches_for` covers every kernel with both scores and both dropout settings, in the block sizes the
    wrappers choose (the widest spans hold the most registers), and records without running anything."""
    launches = TK.launches_for(torch.float64, 64)
    assert sorted({name for name, _, _ in launches}) == ["attend_bwd", "attend_fwd", "edge_mask", "node_mask",
                                                         "sddmm_dot"]
    assert {(n, m["KEY_IN_MEMORY"]) for n, _, m in launches if n.endswith("_mask")} == \
        {(n, k) for n in ("node_mask", "edge_mask") for k in (False, True)}  # (a CUDA graph's keys: in memory)
    # the integer types Triton gives a key and a threshold by their values: uint64, int64, int32 keys; a threshold of
    # p < 0.5 (uint64) and of p > 0.5 (int64)
    args = [a for n, a, m in launches if n == "node_mask" and not m["KEY_IN_MEMORY"]]
    assert {(a[-3] >= 2**63, a[-3] >= 2**31, a[-1] >= 2**63) for a in args} == \
        {(True, True, True), (False, True, False), (False, False, True)}, [(a[-3], a[-1]) for a in args]
    variants = {(m["DOT"], m["KEEP"]) for name, _, m in launches if name == "attend_fwd"}
    assert variants == {(False, False), (False, True), (True, False), (True, True)}
    sddmm = [m for name, _, m in launches if name == "sddmm_dot"]
    assert sddmm == [{"BLOCK_E": TK.TILE // 64, "BLOCK_F": 64}]
    assert {m["BLOCK_F"] for name, _, m in launches if name == "attend_fwd"} == {TK.SPAN_BYTES // 8}
    assert {m["BLOCK_F"] for n, _, m in TK.launches_for(torch.float32, 64) if n == "attend_fwd"} == {64}
    assert TK._recorded is None  # (the recording ends with its block)


@pytest.mark.parametrize("capability, dtype, span", [(90, torch.float32, 64), (80, torch.float64, 64)])
def test_every_kernel_compiles_for_the_gpu_without_spilling_registers(capability, dtype, span, tmp_path, monkeypatch):
    """Each launch of :func:`launches_for` at the widest blocks (the most registers), built for an H100/H200
    (sm_90) in float32 and for an A100 (sm_80) in float64: it compiles, and ``ptxas`` spills at most
    :data:`PARKED` bytes a thread (in a fresh cache, so that ptxas runs and reports; ``benchmarks/triton_build.py``
    prints every type, width and target)."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    try:
        builds = [TK.build(name, args, meta, capability) for name, args, meta in TK.launches_for(dtype, span)]
    except TK.BuildUnsupported as exc:  # (internals of another Triton than the one build() reads)
        pytest.skip(str(exc))
    assert len(builds) == 17
    spilled = [b for b in builds if b.spill_bytes > PARKED]
    assert not spilled, spilled
    assert all(0 < b.registers <= 255 for b in builds), builds
    fp = "fp32" if dtype == torch.float32 else "fp64"
    assert all(fp in b.signature for b in builds if b.kernel in ("sddmm_dot", "attend_fwd", "attend_bwd"))
