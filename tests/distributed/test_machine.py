"""A rank gives freed host tensors back at once (distributed.machine.release_freed_memory): its resident set falls
when a tensor of a few MiB is freed, where glibc's default keeps it in the heap; and every spawned rank runs with it."""
import os
import subprocess
import sys

import pytest

from gridgnn.distributed import launch
from gridgnn.distributed.machine import MMAP_THRESHOLD_BYTES, runs_on_glibc

pytestmark = pytest.mark.skipif(not runs_on_glibc(), reason="the threshold is glibc's (Linux)")

#: in a fresh interpreter: free a 16 MiB block (glibc's default then raises its threshold to 16 MiB), then allocate,
#: touch and free 8 MiB; print the resident set's fall in MiB
_PROBE = """
import sys, torch
from gridgnn.distributed.machine import release_freed_memory
def rss():
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmRSS:")) / 1024
if sys.argv[1] == "release":
    assert release_freed_memory()
a = torch.ones(4 << 20); del a
b = torch.ones(2 << 20)
before = rss(); del b
print(before - rss())
"""


def _fall(mode: str) -> float:
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_MMAP_THRESHOLD_"}
    out = subprocess.run([sys.executable, "-c", _PROBE, mode], capture_output=True, text=True, env=env, check=True)
    return float(out.stdout.split()[-1])


def test_a_freed_tensor_leaves_the_resident_set_at_once():
    kept = _fall("default")
    if kept > 2:
        pytest.skip(f"this glibc gave the freed 8 MiB back without the threshold too ({kept:.1f} MiB)")
    assert MMAP_THRESHOLD_BYTES <= 8 << 20
    assert _fall("release") > 7  # 8 MiB freed, 8 MiB gone from the resident set


def _threshold_in_force(ctx):
    from gridgnn.distributed import machine

    return list(machine._RELEASING)  # what the rank's start set, before anything else could


@pytest.mark.skipif("MALLOC_MMAP_THRESHOLD_" in os.environ, reason="glibc's own threshold is set: the ranks keep it")
def test_spawned_ranks_release_freed_memory():
    assert launch.launch(_threshold_in_force, 2, device="cpu", collect=True) == [[True], [True]]
