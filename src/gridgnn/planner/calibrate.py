r"""``gridgnn calibrate``: measure this machine's :class:`~gridgnn.planner.timing.Profile`.

* **Local kernels** (one process, for each thread count a rank may get: 1 and all cores): the library's own
  sparse products (:func:`~gridgnn.ops.pattern.spmm`, :func:`~gridgnn.ops.pattern.sddmm_dot`) on random CSR
  blocks of several nonzero counts and widths (fitted through ``t = a + κ_nnz·nnz + κ_edge·nnz·W``), dense
  products (``torch.mm``) of several shapes and a node-wise pass (ReLU and a dropout scale), each through
  ``t = a + κ_u·units``, by non-negative least squares on relative residuals; ``κ_launch``, the seconds of one
  call, from a product on an 8-vertex block.
* **Collectives** (spawned groups of 2, 4, … ``max_nproc`` processes on the current backend): every collective
  the library uses, through its communication layer (so the bytes are those it accounts), on buffers of 1 KB to
  4 MB; per collective and group size ``α`` and ``β`` fitted by least squares through ``t = α + β · bytes``
  (bytes per rank: the larger of sent and received), on the slowest rank's median time.
"""
from __future__ import annotations

import statistics
import time

import numpy as np
import torch

from ..distributed.machine import usable_cores
from .timing import PROFILE_VERSION, Profile

SIZES_BYTES = (1 << 10, 1 << 14, 1 << 18, 1 << 20, 1 << 22)
CALIBRATED = ("allreduce", "bcast", "reduce", "allgather", "reducescatter", "alltoallv")


def _median_time(fn, reps: int, device: str = "cpu") -> float:
    """Median seconds of ``fn()`` after one warm-up call (a CUDA device is synchronized around each call)."""
    def sync():
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    fn()
    ts = []
    for _ in range(reps):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def _nnls(rows, secs):
    """Non-negative least squares of ``secs`` on the columns of ``rows``, each row weighted by ``1/secs`` (relative
    residuals: small calls count as much as large ones)."""
    from scipy.optimize import nnls

    a, y = np.array(rows, dtype=np.float64), np.array(secs, dtype=np.float64)
    coef, _ = nnls(a / y[:, None], np.ones_like(y))
    return [float(c) for c in coef], float(np.median(np.abs(a @ coef - y) / y))


def _line_fit(units: list[float], secs: list[float]) -> tuple[float, float]:
    """Least squares ``t = a + b·u`` with ``a, b ≥ 0`` (relative residuals). Work costs time: where noise (a busy
    machine) lets the intercept absorb every measurement, the slope is the smallest observed seconds per unit
    (an upper bound, never 0)."""
    (a, b), _ = _nnls([[1.0, u] for u in units], secs)
    if b <= 0:
        b = min(t / u for t, u in zip(secs, units))
    return a, b


def measure_kernels(threads: int, *, quick: bool = False, seed: int = 0, device: str = "cpu") -> dict:
    """``{unit: seconds per unit}`` of the local kernels with ``threads`` threads on ``device``."""
    import scipy.sparse as sp

    from ..ops import kernels
    from ..ops.pattern import Pattern, sddmm_dot, spmm

    torch.set_num_threads(threads)
    kernels.set_threads(threads)
    rng = np.random.default_rng(seed)
    reps = 3 if quick else 5
    n = 20000
    rows, secs = [], []
    for nnz in ((50_000, 200_000) if quick else (50_000, 200_000, 800_000)):
        mat = sp.random(n, n, density=nnz / n / n, format="csr", random_state=rng)
        pat = Pattern.from_scipy(mat, device=device)
        vals = torch.rand(pat.nnz, dtype=torch.float32, device=device)
        for w in (4, 16, 64):
            x = torch.rand(n, w, dtype=torch.float32, device=device)
            for fn in (lambda: spmm(pat, vals, x), lambda: sddmm_dot(pat, x, x)):
                secs.append(_median_time(fn, reps, device))
                rows.append([1.0, pat.nnz, pat.nnz * w])
    (_, per_nnz, edge), _ = _nnls(rows, secs)
    if per_nnz <= 0 and edge <= 0:  # launch-bound (a GPU's small products): sparse work must still cost time,
        edge = min(t / r[2] for t, r in zip(secs, rows))  # as _line_fit's slope: the smallest seen per unit
    units, secs = [], []
    for m in ((5000, 20000) if quick else (5000, 20000, 50000)):
        for k, w in ((32, 32), (64, 128), (128, 64)):
            a, b = torch.rand(m, k, device=device), torch.rand(k, w, device=device)
            secs.append(_median_time(lambda: torch.mm(a, b), reps, device))
            units.append(m * k * w)
    _, flop = _line_fit(units, secs)
    units, secs = [], []
    for m in (5000, 50000):
        for w in (16, 128):
            x = torch.rand(m, w, device=device)
            keep = torch.rand(m, w, device=device) > 0.5
            secs.append(_median_time(lambda: torch.relu(x) * keep * 2.0, reps, device))
            units.append(m * w)
    _, elem = _line_fit(units, secs)
    units, secs = [], []
    for m in (5000, 50000):  # a narrowed wire's cast, down and back (two elements cast per element)
        for w in (16, 128):
            x = torch.rand(m, w, device=device)
            secs.append(_median_time(lambda: x.to(torch.bfloat16).to(torch.float32), reps, device))
            units.append(2 * m * w)
    _, cast = _line_fit(units, secs)
    tiny = Pattern.from_scipy(sp.random(8, 8, density=0.3, format="csr", random_state=rng), device=device)
    tv, tx = torch.rand(tiny.nnz, device=device), torch.rand(8, 4, device=device)
    launch = _median_time(lambda: spmm(tiny, tv, tx), 20, device)
    return {"edge": edge, "nnz": per_nnz, "flop": flop, "elem": elem, "cast": cast, "launch": launch}


def collective_worker(ctx, sizes: tuple[int, ...], reps: int) -> dict:
    """Worker for :func:`~gridgnn.distributed.launch.launch`: this rank's median seconds and accounted bytes per
    collective and buffer size."""
    from ..distributed.comm import Comm
    from ..distributed.grid import ProcessGrid

    ctx.init()
    comm = Comm(ProcessGrid.build("1d", "cpu" if ctx.device == "cpu" else "cuda"))
    g, me = comm.grid.world_size, comm.grid.global_rank
    dev = ctx.device
    sync = torch.zeros(1, device=dev)
    settle = torch.cuda.synchronize if dev != "cpu" else (lambda: None)
    out: dict = {}
    for coll in CALIBRATED:
        out[coll] = {}
        for nbytes in sizes:
            elems = max(g, nbytes // 4)
            rows = elems // g
            buf = torch.rand(rows * g, device=dev)

            def call():
                if coll == "allreduce":
                    comm.all_reduce(buf, "p")
                elif coll == "bcast":
                    comm.broadcast(buf, 0, "p")
                elif coll == "reduce":
                    comm.reduce(buf, 0, "p")
                elif coll == "allgather":
                    comm.all_gather_rows(buf[:rows].reshape(rows, 1), "p", rows=[rows] * g)
                elif coll == "reducescatter":
                    comm.reduce_scatter_rows(buf.reshape(-1, 1), [k * rows for k in range(g + 1)], "p")
                else:
                    comm.all_to_all_v(list(buf.reshape(g, rows, 1)), [rows] * g, "p")

            ts = []
            for rep in range(reps + 1):
                comm.all_reduce(sync, "p")  # start together
                settle()  # (a GPU's queued calls return at once: wait for the device around each)
                comm.log.reset()
                t0 = time.perf_counter()
                call()
                settle()
                if rep:
                    ts.append(time.perf_counter() - t0)
            stats = next(iter(comm.log.stats.values()))
            out[coll][str(nbytes)] = (statistics.median(ts), max(stats.sent, stats.recv))
    ctx.shutdown()
    return {"rank": me, "times": out}


def measure_collectives(max_nproc: int, *, device: str = "cpu", quick: bool = False) -> dict:
    """``{collective: {members: [alpha_s, beta_s_per_byte]}}`` for groups of 2, 4, … ``max_nproc``."""
    from ..distributed.launch import launch

    sizes = SIZES_BYTES[1:4] if quick else SIZES_BYTES
    reps = 3 if quick else 7
    table: dict = {c: {} for c in CALIBRATED}
    g = 2
    while g <= max_nproc:
        per_rank = launch(collective_worker, g, sizes, reps, device=device, collect=True, timeout_s=300)
        for coll in CALIBRATED:
            units, secs = [], []
            for nbytes in sizes:
                key = str(nbytes)
                secs.append(max(r["times"][coll][key][0] for r in per_rank))
                units.append(max(r["times"][coll][key][1] for r in per_rank))
            alpha, beta = _line_fit(units, secs)
            table[coll][str(g)] = [alpha, beta]
        g *= 2
    return table


def calibrate(*, max_nproc: int = 8, device: str = "cpu", quick: bool = False) -> Profile:
    """Measure the kernels and collectives of this machine into a :class:`Profile` (unfitted: θ = 1, 1, 0)."""
    cores = usable_cores()
    threads = sorted({1, cores}) if device == "cpu" else [cores]  # a GPU rank's kernels do not use its threads
    if device == "cuda" and not torch.cuda.is_available():
        from ..errors import GridGnnError

        raise GridGnnError("--device cuda: no CUDA device is visible")
    kernels = {str(t): measure_kernels(t, quick=quick, device=device) for t in threads}
    torch.set_num_threads(cores)
    coll = measure_collectives(max_nproc, device=device, quick=quick) if max_nproc >= 2 else {}
    intra = {}
    if coll.get("bcast", {}).get("2"):  # a link: the two-process broadcast (one message, one hop)
        alpha, beta = coll["bcast"]["2"]
        intra = {"alpha_s": alpha, "bandwidth_Bps": 1.0 / beta if beta > 0 else 1e12}
    return Profile(
        name=f"measured by gridgnn calibrate on {cores} cores ({device})", device=device,
        cores=cores if device == "cpu" else 0, ranks_per_node=0, kernels=kernels, collectives=coll,
        links={"intra": intra} if intra else {},
        sources={"kernels": "gridgnn calibrate: library kernels on random blocks, least squares",
                 "collectives": f"gridgnn calibrate: groups of 2..{max_nproc} on {device}, least squares"},
        version=PROFILE_VERSION)
