r"""This machine as the launcher and the memory guard see it: the memory a process can still get, the peak a
process has used, the bare runtime of a gridgnn process (measured, see :mod:`gridgnn.planner.memory`) and the check
that the processes to be started fit before any data is loaded."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

from ..errors import GridGnnError

MIB = 2 ** 20
GIB = 2 ** 30

#: Private (anonymous) resident memory of a gridgnn rank that has trained (measured 222 + 34 MiB: :mod:`gridgnn.planner.memory`).
RUNTIME_PRIVATE_BYTES = 258 * MIB
#: File-backed resident memory of the shared libraries (measured 100 + 105 MiB); counted once per machine.
RUNTIME_SHARED_BYTES = 205 * MIB
#: Extra private memory of ``import torch_geometric`` (measured 100 MiB; only the Planetoid loader imports it).
PYG_IMPORT_BYTES = 100 * MIB


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, as ``taskset`` or a batch scheduler sets it; not the
    machine's count)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def format_gib(nbytes: float) -> str:
    """Bytes for a message: GiB from 0.1 GiB up (thousands separated), MiB/KiB/B below."""
    v = nbytes / GIB
    if v >= 100:
        return f"{v:,.0f} GiB"
    if v >= 0.1:
        return f"{v:.2f} GiB"
    for unit, size in (("MiB", MIB), ("KiB", 1024)):
        if nbytes >= size:
            return f"{nbytes / size:.1f} {unit}"
    return f"{int(nbytes)} B"


def _cgroup_headroom() -> int | None:
    """Bytes left under this process's cgroup memory limit (v2 ``memory.max``, v1 ``limit_in_bytes``)."""
    for limit_f, usage_f in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                             ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                              "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        try:
            limit = Path(limit_f).read_text().strip()
            if limit == "max":
                return None
            used = int(Path(usage_f).read_text().strip())
            if int(limit) >= 2 ** 60:  # v1 "unlimited"
                return None
            return max(0, int(limit) - used)
        except (OSError, ValueError):
            continue
    return None


def available_memory() -> int:
    r"""Bytes of memory this process can still allocate, measured now.

    ``MemAvailable`` of ``/proc/meminfo`` (Linux), else ``os.sysconf("SC_AVPHYS_PAGES") * SC_PAGE_SIZE``; the
    smaller of that and the headroom of a cgroup memory limit (v2 ``memory.max``, v1 ``limit_in_bytes``). When nothing can be
    measured, ``2**63 - 1`` (no ceiling).
    """
    avail = None
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        avail = None
    if avail is None:
        try:
            avail = int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
        except (OSError, ValueError, AttributeError):
            avail = None
    cg = _cgroup_headroom()
    if cg is not None:
        avail = cg if avail is None else min(avail, cg)
    return int(avail) if avail is not None and avail > 0 else np.iinfo(np.int64).max


def available_memory_bytes(device="cpu") -> int:
    r"""Memory a new allocation can get now, in bytes.

    CPU: :func:`available_memory` (``MemAvailable``, capped by what a cgroup limit
    leaves): the whole machine's — the caller divides it among its local processes. CUDA (``"cuda"``,
    ``"cuda:N"`` or a ``torch.device``): the device's free bytes (``torch.cuda.mem_get_info``).
    """
    name = str(device)
    if name.startswith("cuda"):
        import torch

        free, _ = torch.cuda.mem_get_info(torch.device(name))
        return int(free)
    return available_memory()


#: ``mallopt``'s ``M_MMAP_THRESHOLD``: host allocations from this size on are mapped on their own and unmapped when
#: freed (glibc's default raises the threshold up to 32 MiB as such blocks are freed, and the heap then keeps the
#: freed tensors below it: measured at R-MAT scale 20, P = 4, 1d-sa, a rank's resident peak grew from 1.35–1.49 GiB
#: after two epochs to 1.45–1.52 after five; with 4 MiB it stayed at 1.15–1.17, epochs 3–5 % slower)
MMAP_THRESHOLD_BYTES = 4 * MIB
_RELEASING = []


def runs_on_glibc() -> bool:
    """Whether this process's C library is glibc (on Linux)."""
    try:
        return sys.platform.startswith("linux") and (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc")
    except (ValueError, OSError):
        return False


def release_freed_memory() -> bool:
    """Make this process give freed host tensors of :data:`MMAP_THRESHOLD_BYTES` and more back to the system at once
    (glibc's ``mallopt``), so that its resident set follows the tensors alive, as the memory guard counts them.
    Idempotent; a no-op where the C library is not glibc, or where the user set glibc's own
    ``MALLOC_MMAP_THRESHOLD_`` (which glibc has applied). Returns whether the threshold is in force."""
    if _RELEASING:
        return _RELEASING[0]
    ok = False
    if "MALLOC_MMAP_THRESHOLD_" not in os.environ and runs_on_glibc():
        import ctypes  # (only where there is a glibc to ask)

        try:
            ok = bool(ctypes.CDLL("libc.so.6").mallopt(-3, MMAP_THRESHOLD_BYTES))  # M_MMAP_THRESHOLD
        except (OSError, AttributeError):
            ok = False
    _RELEASING.append(ok)
    return ok


def device_name(device="cpu") -> str:
    """What a run's summary names as the device a rank computed on: a GPU's model (``cuda:0 NVIDIA H200``), else
    ``cpu`` with the processor's model where Linux names it (what a timing was measured on)."""
    name = str(device)
    if name.startswith("cuda"):
        import torch

        return f"{name} {torch.cuda.get_device_name(torch.device(name))}"
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return f"cpu {line.split(':', 1)[1].strip()}"
    except OSError:
        pass
    return "cpu"


def measured_peak_bytes(device="cpu") -> int:
    r"""Peak memory this process has used so far, in bytes: CPU — the peak resident set size of this process's
    address space (Linux: ``VmHWM`` of ``/proc/self/status``; elsewhere ``getrusage(RUSAGE_SELF).ru_maxrss``,
    which on Linux would be wrong here: it survives ``execve``, so a spawned rank would start at its parent's
    peak); CUDA — the torch allocator's ``max_memory_allocated`` of the device."""
    name = str(device)
    if name.startswith("cuda"):
        import torch

        return int(torch.cuda.max_memory_allocated(torch.device(name)))
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def spawn_capacity(available: int, *, per_process: int = RUNTIME_PRIVATE_BYTES,
                   shared: int = RUNTIME_SHARED_BYTES) -> int:
    """How many gridgnn processes fit in ``available`` bytes before any data is loaded."""
    return max(0, int((available - shared) // per_process))


def check_spawn(nproc: int, available: int, *, per_process: int = RUNTIME_PRIVATE_BYTES,
                shared: int = RUNTIME_SHARED_BYTES) -> None:
    r"""Refuse to start ``nproc`` local processes whose bare runtime alone cannot fit:
    :math:`\text{nproc} \cdot \text{per\_process} + \text{shared} > \text{available}` (defaults: the measured
    baseline of a gridgnn rank, see the module docstring). Call it in the launcher, before spawning, with
    :func:`available_memory_bytes` of the host; add :data:`PYG_IMPORT_BYTES` to ``per_process`` for Planetoid
    data."""
    if nproc < 1:
        raise GridGnnError(f"--nproc must be >= 1, got {nproc}")
    need = nproc * per_process + shared
    if need <= available:
        return
    cap = spawn_capacity(available, per_process=per_process, shared=shared)
    raise GridGnnError(
        f"--nproc {nproc} needs about {format_gib(need)} just to start {nproc} processes (about "
        f"{per_process / MIB:.0f} MiB each for Python, torch and gloo, before any data) but {format_gib(available)} "
        f"are available on this machine; use at most --nproc {cap} here, or launch across machines "
        f"(torchrun/srun)")
