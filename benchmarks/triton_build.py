"""The Triton kernels built for GPUs on this machine, no GPU needed: per launch the wrappers make (both data types,
heads of 8 to 128 columns, every variant), the registers a thread, the bytes spilled to local memory a thread, the
shared memory a program, and the warps an SM keeps resident as far as the registers allow (65536 registers an SM,
allocated a warp at a time in units of 8 a thread, at most 64 warps: A100 and H100 alike) — where a kernel's tiles
stand against the register file before a GPU times them.

    python benchmarks/triton_build.py [--capabilities 80,90] [--spans 8,16,32,64]
"""
import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import torch  # noqa: E402

from gridgnn.ops import triton_kernels as TK  # noqa: E402


def resident_warps(registers: int, warps: int = 4) -> int:
    """Warps an SM keeps resident, bounded by registers alone (programs of ``warps`` warps, whole programs)."""
    per_warp = -(-registers // 8) * 8 * 32
    return min(64, 65536 // (per_warp * warps) * warps)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--capabilities", default="80,90", help="CUDA compute capabilities (80: A100, 90: H100/H200)")
    ap.add_argument("--spans", default="8,16,32,64", help="columns a head (the blocks the wrappers choose)")
    args = ap.parse_args(argv)
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="gridgnn-triton-")
    print(f"TILE={TK.TILE} SPAN_BYTES={TK.SPAN_BYTES}")
    print(f"{'sm':>3} {'kernel':<11} {'data':<5} {'meta':<50} {'regs':>4} {'spill B':>7} {'shared B':>8} "
          f"{'warps/SM':>8} {'s':>5}")
    seen, worst = set(), {}
    for cap in (int(c) for c in args.capabilities.split(",")):
        for dtype in (torch.float32, torch.float64):
            for span in (int(s) for s in args.spans.split(",")):
                for name, launch_args, meta in TK.launches_for(dtype, span):
                    key = (cap, name, dtype, tuple(sorted(meta.items())))
                    if key in seen:
                        continue
                    seen.add(key)
                    t = time.perf_counter()
                    b = TK.build(name, launch_args, meta, cap)
                    data = str(dtype).removeprefix("torch.float") if name not in ("node_mask", "edge_mask") else "-"
                    print(f"{cap:>3} {name:<11} {data:<5} {b.meta:<50} {b.registers:>4} {b.spill_bytes:>7} "
                          f"{b.shared_bytes:>8} {resident_warps(b.registers):>8} {time.perf_counter() - t:>5.2f}",
                          flush=True)
                    w = worst.setdefault(name, [0, 0])
                    w[0], w[1] = max(w[0], b.registers), max(w[1], b.spill_bytes)
    print("most registers / spilled bytes a thread, per kernel:",
          ", ".join(f"{k} {r}/{s}" for k, (r, s) in worst.items()))


if __name__ == "__main__":
    main()
