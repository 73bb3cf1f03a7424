"""One process, one graph: local kernels and model epochs next to their references, measured in one invocation.

On one synthetic graph (default: SBM, 100,000 vertices, average degree 20, 128 features, 8 classes):

1. **Kernels** (float32): STREAM copy bandwidth of this machine (a parallel numba copy and torch's ``copy_``, the
   faster counts), then SpMM (``f`` = 128) with the numba kernel and with ``torch.sparse.mm`` (the reference), as
   GB/s under the gather model (bytes = nnz·f·4 + n·f·4 + nnz·12) and as a fraction of STREAM copy; SDDMM
   (dot, 8 heads), the edge-softmax row reductions and the keyed dropout mask, numba next to the torch / NumPy
   reference. ``--spmm-n/--spmm-nnz`` add the SpMM on a second, uniform random graph.
2. **Epochs** (each in its own subprocess, so each peak memory is its own; median of ``--epochs`` after
   ``--warmup``; forward + loss + backward + Adam): GCN (3 layers, hidden 128) — PyG ``GCNConv`` on
   ``edge_index`` and on a CSR ``adj_t`` (cached normalization), gridgnn serial with the numba kernels and with
   the torch references (``GRIDGNN_KERNELS=torch``); GAT and AGNN also with the attention composed of the
   numba primitives instead of its fused kernels; GAT (8 heads × 8, one output head, 2 layers, dropout 0.6 on
   inputs and attention) — PyG ``GATConv`` and gridgnn likewise; AGNN (PyG's example: linear → 2 propagations →
   linear, hidden 64) and VA (hidden 64) — PyG ``AGNNConv`` and gridgnn; GraphSAGE (mean, 2 layers, hidden 128,
   dropout 0.5) — PyG ``SAGEConv`` on ``edge_index`` and on the CSR ``adj_t``, and gridgnn.
3. **Bytes per epoch at P = 4** of every algorithm and model, from the byte models (``model_bytes.py``), which
   the test suite checks against measured bytes.

``--allocated`` (CPU) adds a column that stands in for a GPU's ``torch.cuda.max_memory_allocated`` where no GPU is
at hand: the bytes of the tensors alive before one more epoch plus the largest sum of that epoch's own allocations
alive at once (torch.profiler's memory timeline; the keyed dropout masks, which the CPU hashes into NumPy arrays,
re-homed in torch storage so that they count). It is the torch allocator's view, not the process's: no allocator
slack, no NumPy temporaries, and, for the torch compositions, a CPU-only extra — an operation that mixes a boolean
mask with floats converts the mask on the CPU into a float temporary, where a GPU casts inside its kernel.

Usage: python benchmarks/bench_local.py [--data SPEC] [--epochs 5] [--warmup 1] [--skip kernels,epochs,bytes]
       [--device cuda] [--profile DIR] [--allocated]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

DEFAULT = "synthetic:sbm?n=100000&classes=8&avg_degree=20&features=128"


def best_of(fn, repeat: int = 5) -> float:
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def stream_copy_gbs(elements: int = 1 << 26) -> float:
    """STREAM copy (bytes read + written per second) of a float32 array, the better of numba and torch."""
    import numpy as np
    import torch
    from numba import njit, prange

    @njit(parallel=True)
    def copy(a, b):
        for i in prange(a.shape[0]):
            b[i] = a[i]

    a = np.ones(elements, dtype=np.float32)
    b = np.empty_like(a)
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    t = min(best_of(lambda: copy(a, b)), best_of(lambda: tb.copy_(ta)))
    return 2 * a.nbytes / t / 1e9


def kernels_section(spec: str, extra: tuple[int, int] | None) -> None:
    import numpy as np
    import scipy.sparse as sp
    import torch

    from gridgnn.graph import gcn_normalize
    from gridgnn.graph.spec import load_graph
    from gridgnn.nn import dropout as D
    from gridgnn.ops import kernels as K
    from gridgnn.ops import pattern as P

    stream = stream_copy_gbs()
    print(f"\nthreads: torch {torch.get_num_threads()}; STREAM copy: {stream:.2f} GB/s")
    g = load_graph(spec)
    mats = {f"{spec.split(':')[-1]} (Â, n={g.n})": gcn_normalize(g)}
    if extra:
        n, nnz = extra
        r = np.random.default_rng(0)
        a = sp.csr_matrix((np.ones(nnz, np.float32), (r.integers(0, n, nnz), r.integers(0, n, nnz))), shape=(n, n))
        mats[f"uniform random n={n}, nnz={nnz}"] = a
    print("\n| graph | kernel | nnz | f | numba (ms) | torch reference (ms) | numba GB/s | × STREAM | reference × STREAM |")
    print("|---|---|---|---|---|---|---|---|---|")
    f = 128
    for name, mat in mats.items():
        pat = P.Pattern.from_scipy(mat, transpose=True)
        n, nnz = mat.shape[0], pat.nnz
        vals = torch.from_numpy(np.asarray(mat.data, dtype=np.float32))
        x = torch.randn(mat.shape[1], f)
        gather = (nnz * f * 4 + n * f * 4 + nnz * 12) / 1e9

        def both(fn):
            fused = best_of(fn)
            os.environ["GRIDGNN_KERNELS"] = "torch"
            try:
                ref = best_of(fn)
            finally:
                del os.environ["GRIDGNN_KERNELS"]
            return fused, ref

        for kname, fn in (("spmm", lambda: P.spmm(pat, vals, x)),
                          ("spmm (transposed)", lambda: P.spmm(pat, vals, x, transpose=True))):
            t, tr = both(fn)
            print(f"| {name} | {kname} | {nnz} | {f} | {t * 1e3:.1f} | {tr * 1e3:.1f} | {gather / t:.2f} | "
                  f"{gather / t / stream:.2f} | {gather / tr / stream:.2f} |")
        if not name.startswith("uniform"):
            e8 = torch.randn(nnz, 8)
            d = torch.randn(n, 64)
            t, tr = both(lambda: P.sddmm_dot(pat, d, d, 8))
            print(f"| {name} | sddmm_dot, 8 heads × 8 | {nnz} | 64 | {t * 1e3:.1f} | {tr * 1e3:.1f} | | | |")
            t, tr = both(lambda: (P.row_reduce(pat, e8, "max"), P.row_reduce(pat, e8, "sum")))
            print(f"| {name} | row max + row sum, 8 heads | {nnz} | | {t * 1e3:.1f} | {tr * 1e3:.1f} | | | |")
            ids = np.arange(n)
            t = best_of(lambda: D.keep_mask(ids, f, 0.5, seed=0, epoch=0, layer=1))
            tr = best_of(lambda: D.keep_mask_reference(ids, f, 0.5, seed=0, epoch=0, layer=1), repeat=2)
            gbs = n * f / t / 1e9
            print(f"| {name} | keyed dropout mask | | {f} | {t * 1e3:.1f} | {tr * 1e3:.1f} (NumPy) | "
                  f"{gbs:.2f} G masks/s | | |")
    assert K.enabled()


# ------------------------------------------------------------------------------------------------ epochs
def worker(impl: str, model: str, spec: str, epochs: int, warmup: int, device: str = "cpu",
           profile_dir: str | None = None, allocated: bool = False) -> None:
    """One run's epochs in this process: prints its result as a ``RESULT`` line of JSON, then profiles (``profile_dir``)."""
    import numpy as np
    import torch
    import torch.nn.functional as F

    if allocated:
        rehome_masks()

    from gridgnn.graph.spec import load_graph
    from gridgnn.distributed.machine import measured_peak_bytes

    torch.manual_seed(0)
    g = load_graph(spec)
    x = torch.from_numpy(np.asarray(g.x, dtype=np.float32)).to(device)
    y = torch.from_numpy(g.y).to(device)
    # the labelled training rows by position (a boolean mask indexing reads its count back from a GPU at every step)
    train = torch.from_numpy(np.flatnonzero(g.train_mask & (g.y >= 0))).to(device)
    f, c = g.num_features, g.num_classes
    dims = {"gcn": [f, 128, 128, c], "gat": [f, 8, c], "agnn": [f, 64, 64, 64, c], "va": [f, 64, c],
            "sage": [f, 128, c]}[model]
    if impl.startswith("pyg"):
        import torch_geometric.nn as pygnn

        ei = torch.from_numpy(g.edge_index())
        adj = ei.to(device)
        if impl == "pyg-csr":  # rows = targets, as PyG expects of a sparse adjacency
            adj = torch.sparse_coo_tensor(ei.flip(0), torch.ones(ei.shape[1]), (g.n, g.n)).coalesce().to_sparse_csr()
            adj = adj.to(device)
        if model in ("gcn", "sage"):
            conv_of = {"gcn": lambda a, b: pygnn.GCNConv(a, b, cached=True),
                       "sage": lambda a, b: pygnn.SAGEConv(a, b, aggr="mean")}[model]
            convs = torch.nn.ModuleList([conv_of(a, b) for a, b in zip(dims[:-1], dims[1:])])

            def forward():
                h = x
                for i, conv in enumerate(convs):
                    h = conv(F.dropout(h, 0.5, training=True), adj)
                    h = torch.relu(h) if i < len(convs) - 1 else h
                return h
        elif model == "gat":
            convs = torch.nn.ModuleList([pygnn.GATConv(f, 8, heads=8, dropout=0.6),
                                         pygnn.GATConv(64, c, heads=1, concat=False, dropout=0.6)])

            def forward():
                h = F.elu(convs[0](F.dropout(x, 0.6, training=True), adj))
                return convs[1](F.dropout(h, 0.6, training=True), adj)
        else:  # AGNN, PyG's Cora example
            convs = torch.nn.ModuleList([torch.nn.Linear(f, 64), pygnn.AGNNConv(requires_grad=False),
                                         pygnn.AGNNConv(requires_grad=True), torch.nn.Linear(64, c)])

            def forward():
                h = torch.relu(convs[0](F.dropout(x, 0.5, training=True)))
                h = convs[2](convs[1](h, adj), adj)
                return convs[3](F.dropout(h, 0.5, training=True))
        params = convs.to(device).parameters()
    else:
        if impl == "gridgnn-torch":
            os.environ["GRIDGNN_KERNELS"] = "torch"
        if impl == "gridgnn-composed":  # the numba kernels, attention as its composition of primitives
            from gridgnn.parallel.blockrow import BlockRowGraph

            BlockRowGraph.fused_attention = lambda self, *a, **k: None
        from gridgnn.nn import MODELS
        from gridgnn.parallel.blockrow import serial_plan

        plan = serial_plan(g, dtype=torch.float32, device=device)
        opts = {"gcn": dict(dropout=0.5), "gat": dict(dropout=0.6, heads=8), "agnn": dict(dropout=0.5),
                "va": dict(dropout=0.5), "sage": dict(dropout=0.5, aggr="mean")}[model]
        if impl.endswith("-lean"):  # --layer-order lean: the first layer multiplies first at equal widths
            opts["layer_order"] = "lean"
        net = MODELS[model].from_options(dims, plan=None, dtype=torch.float32, seed=0, **opts).to(device)
        net.train()

        def forward():
            net.epoch += 1
            return net(x, plan)

        params = net.parameters()
    opt = torch.optim.Adam(params, lr=0.005, weight_decay=5e-4)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    def step():
        opt.zero_grad()
        out = forward()
        F.cross_entropy(out[train], y[train]).backward()
        opt.step()

    if impl.startswith("gridgnn-graphed"):  # --cuda-graph: forward, loss and backward recorded, then replayed
        from gridgnn.train.graphed import WARMUP_STEPS, GraphedStep

        warmup = max(warmup, WARMUP_STEPS + 1)  # (the epoch that records is not timed)

        def forward_backward(epoch):
            net.epoch = epoch
            loss = F.cross_entropy(net(x, plan)[train], y[train])
            loss.backward()
            return loss.detach()

        graphed, epochs_run = GraphedStep(forward_backward, net.parameters(), device), [0]

        def step():  # noqa: F811 - the graphed form of the step above
            opt.zero_grad(set_to_none=True)
            graphed(epochs_run[0])
            epochs_run[0] += 1
            opt.step()

    times = []
    resident = restart_peak(device)  # the training's own peak: above what the set-up left resident
    for epoch in range(warmup + epochs):
        sync()
        t0 = time.perf_counter()
        step()
        sync()
        if epoch >= warmup:
            times.append(time.perf_counter() - t0)
    peak = measured_peak_bytes(device)
    result = {"epoch_ms": 1e3 * statistics.median(times), "peak_bytes": peak, "n": g.n, "nnz": g.nnz,
              "training_bytes": peak - resident if resident is not None else None}
    if device == "cuda":  # (a CUDA graph's pool stays reserved between replays; allocated counts only the live)
        from gridgnn.ops import triton_kernels

        result["reserved_bytes"] = torch.cuda.max_memory_reserved()
        if impl.startswith("gridgnn"):
            result["kernels_off"] = sorted(triton_kernels.off) if triton_kernels.HAVE_TRITON else ["all (no Triton)"]
    if allocated:
        result["allocated_bytes"] = allocated_peak(step)
    # the row's result first: a profiler that fails, hangs or runs past the worker's time costs its table alone
    print("RESULT " + json.dumps(result), flush=True)
    if profile_dir and (impl.startswith("gridgnn") or impl == "pyg-csr"):  # ours and the best of PyG
        os.makedirs(profile_dir, exist_ok=True)
        try:
            write_profile(step, sync, device, os.path.join(profile_dir, f"profile-{model}-{impl}.txt"))
        except Exception as exc:  # noqa: BLE001 - any profiler failure
            print(f"no profile of {model} {impl}: {type(exc).__name__}: {exc}", file=sys.stderr)


def serial_step(net, opt, x, plan, y, rows):
    """One training step of the gridgnn model ``net`` on ``plan``: its next epoch's forward, the cross-entropy over
    ``rows``, the backward and ``opt``'s update."""
    import torch.nn.functional as F

    def step():
        opt.zero_grad()
        net.epoch += 1
        F.cross_entropy(net(x, plan)[rows], y[rows]).backward()
        opt.step()
    return step


def restart_peak(device: str) -> int | None:
    """Restart the peak that :func:`measured_peak_bytes` reads from what is resident now and return that (CPU: the
    resident set, Linux's ``clear_refs`` resetting ``VmHWM``; CUDA: the allocator's bytes); None where it cannot."""
    if device == "cuda":
        import torch

        torch.cuda.reset_peak_memory_stats()
        return torch.cuda.memory_allocated()
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        with open("/proc/self/status") as fh:
            return next(int(ln.split()[1]) * 1024 for ln in fh if ln.startswith("VmHWM:"))
    except (OSError, StopIteration):
        return None


def rehome_masks() -> None:
    """Have the keyed dropout masks, which the CPU hashes into NumPy arrays, live in torch storage (the same bits),
    so that :func:`allocated_peak` counts them as a GPU's allocator counts the masks its kernels write."""
    import torch

    import gridgnn.nn.dropout as D

    for name in ("keep_mask", "edge_keep_mask"):
        def rehomed(*args, _hash=getattr(D, name), **kw):
            return torch.from_numpy(_hash(*args, **kw)).clone().numpy()  # (the array views the torch storage)
        setattr(D, name, rehomed)


def allocated_peak(step) -> int:
    """The CPU's stand-in for ``torch.cuda.max_memory_allocated`` over one more epoch (see the module docstring):
    the storages of the tensors alive now (each once) plus the peak of the epoch's allocations less its frees."""
    from gridgnn.testing import profiled_peak

    return resident_bytes() + profiled_peak(step)


def resident_bytes() -> int:
    """The bytes of the storages of the CPU tensors alive now, each once (a sparse CSR tensor's three arrays)."""
    import gc

    import torch

    gc.collect()
    seen = {}
    for t in gc.get_objects():
        if isinstance(t, torch.Tensor) and t.device.type == "cpu":
            parts = [t] if t.layout == torch.strided else \
                [t.crow_indices(), t.col_indices(), t.values()] if t.layout == torch.sparse_csr else []
            for part in parts:
                st = part.untyped_storage()
                seen[st.data_ptr()] = st.nbytes()
    return sum(seen.values())


def write_profile(step, sync, device: str, path: str, epochs: int = 3) -> None:
    """``epochs`` more epochs under torch.profiler: the operators and kernels by their own device time (on a GPU)
    and by their own host time, written to ``path``."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=acts) as prof:
        for _ in range(epochs):
            step()
        sync()
    table = prof.key_averages()
    with open(path, "w") as fh:
        fh.write(f"{epochs} epochs under torch.profiler\n")
        if device == "cuda":
            fh.write(table.table(sort_by="self_device_time_total", row_limit=30) + "\n")
        fh.write(table.table(sort_by="self_cpu_time_total", row_limit=30) + "\n")


RUNS = {  # model → implementations, the first PyG one is the reference of the ratios
    "gcn": ("pyg", "pyg-csr", "gridgnn", "gridgnn-lean", "gridgnn-torch"),
    "gat": ("pyg", "gridgnn", "gridgnn-composed", "gridgnn-torch"),
    "agnn": ("pyg", "gridgnn", "gridgnn-composed", "gridgnn-torch"),
    "va": ("gridgnn", "gridgnn-torch"),
    "sage": ("pyg", "pyg-csr", "gridgnn", "gridgnn-lean", "gridgnn-torch"),
}
GPU_RUNS = {"gcn": ("pyg", "pyg-csr", "gridgnn", "gridgnn-graphed", "gridgnn-graphed-lean"),
            "gat": ("pyg", "gridgnn", "gridgnn-graphed"), "agnn": ("pyg", "gridgnn", "gridgnn-graphed"),
            "va": ("gridgnn",),
            "sage": ("pyg", "pyg-csr", "gridgnn", "gridgnn-graphed", "gridgnn-graphed-lean")}  # Triton's or torch's
NAMES = {"pyg": "PyG (edge_index)", "pyg-csr": "PyG (CSR adj_t)", "gridgnn": "gridgnn serial (numba kernels)",
         "gridgnn-composed": "gridgnn serial (numba kernels, attention unfused)",
         "gridgnn-torch": "gridgnn serial (torch references)",
         "gridgnn-graphed": "gridgnn serial, --cuda-graph",
         "gridgnn-lean": "gridgnn serial (numba kernels), --layer-order lean",
         "gridgnn-graphed-lean": "gridgnn serial, --cuda-graph --layer-order lean"}


def epochs_section(spec: str, epochs: int, warmup: int, models: list[str], device: str = "cpu",
                   profile_dir: str | None = None, allocated: bool = False) -> None:
    peak = "VmHWM of the worker process" if device == "cpu" else "torch.cuda.max_memory_allocated"
    print(f"\nepochs on {device}: median of {epochs} after {warmup} warm-up, float32; peak = {peak}")
    print("training = the peak of the epochs above what the set-up left resident (the graph, the model)")
    extra = " allocated, torch's view (MiB) | × PyG best |" if allocated else \
        " reserved (MiB) | × PyG best |" if device == "cuda" else ""
    print("\n| model | run | epoch time (ms) | × PyG best | peak memory (MiB) | × PyG best | training (MiB) | × PyG best |"
          + extra)
    print("|---|---|---|---|---|---|---|---|" + ("---|---|" if extra else ""))
    impls = RUNS if device == "cpu" else GPU_RUNS
    for model in models:
        res, shown = {}, set()
        for k, impl in enumerate(impls[model]):
            try:
                r = subprocess.run([sys.executable, __file__, "--worker", impl, "--model", model, "--data", spec,
                                    "--epochs", str(epochs), "--warmup", str(warmup), "--device", device]
                                   + (["--profile", profile_dir] if profile_dir else [])
                                   + (["--allocated"] if allocated else []),
                                   capture_output=True, text=True,
                                   timeout=WORKER_S if device == "cuda" else None)
                out, why = r.stdout, f"failed: {r.stderr.strip().splitlines()[-3:]}"
            except subprocess.TimeoutExpired as exc:  # (its result stands where it printed one before its profile)
                out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
                why = f"failed: no result within {WORKER_S} s"
            line = [ln for ln in out.splitlines() if ln.startswith("RESULT ")]
            if line:
                res[impl] = json.loads(line[0][7:])
            else:
                print(f"| {model} | {impl} | {why} | | | |", flush=True)
            # a row as soon as its ratios are known: PyG's once the last PyG run is done (they come first), so that
            # a benchmark interrupted keeps the rows it finished
            if not any(i.startswith("pyg") for i in impls[model][k + 1:]):
                show(model, res, shown, device)


def show(model: str, res: dict, shown: set, device: str) -> None:
    """Print the rows of the results in ``res`` not yet ``shown`` (adding them), their ratios against ``res``."""
    for i in res:
        if i not in shown:
            shown.add(i)
            print(row(model, i, res[i], res, device), flush=True)


#: seconds a worker on a GPU (one model and implementation: set-up, warm-up, the timed epochs) may take before it
#: is named failed and the next runs (a recorded step that hangs in a capture must not take the rest of the lease)
WORKER_S = 120


def row(model: str, impl: str, r: dict, res: dict, device: str) -> str:
    """The table's row of ``impl``'s result ``r``, its ratios against the best of the PyG results in ``res``."""
    pyg = [res[i] for i in res if i.startswith("pyg")]
    best_t = min((p["epoch_ms"] for p in pyg), default=None)
    best_m = min((p["peak_bytes"] for p in pyg), default=None)
    best_s = min((p["training_bytes"] for p in pyg if p["training_bytes"] is not None), default=None)
    best_a = min((p["allocated_bytes"] for p in pyg if "allocated_bytes" in p), default=None)
    best_r = min((p["reserved_bytes"] for p in pyg if "reserved_bytes" in p), default=None)
    rt = f"{r['epoch_ms'] / best_t:.2f}" if best_t else "–"
    rm = f"{r['peak_bytes'] / best_m:.2f}" if best_m else "–"
    step = r["training_bytes"]
    rs = f"{step / best_s:.2f}" if best_s and step is not None else "–"
    name = NAMES[impl] if device == "cpu" else NAMES[impl].replace(" (numba kernels)", "")
    if r.get("kernels_off"):  # (a Triton kernel that could not run here: its torch reference was timed instead)
        name += f" — Triton off: {', '.join(r['kernels_off'])}"
    tail = ""
    if "allocated_bytes" in r:
        a = r["allocated_bytes"]
        tail = f" {a / 2**20:.0f} | {f'{a / best_a:.2f}' if best_a else '–'} |"
    elif "reserved_bytes" in r:
        a = r["reserved_bytes"]
        tail = f" {a / 2**20:.0f} | {f'{a / best_r:.2f}' if best_r else '–'} |"
    return (f"| {model} | {name} | {r['epoch_ms']:.{0 if device == 'cpu' else 1}f} | {rt} | "
            f"{r['peak_bytes'] / 2**20:.0f} | {rm} | {'–' if step is None else f'{step / 2**20:.0f}'} | {rs} |" + tail)

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=DEFAULT)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--models", default="gcn,gat,agnn,va,sage")
    ap.add_argument("--skip", default="", help="comma-separated sections to skip: kernels, epochs, bytes")
    ap.add_argument("--spmm-n", type=int, default=200_000)
    ap.add_argument("--spmm-nnz", type=int, default=4_000_000)
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="where the epochs section runs")
    ap.add_argument("--profile", metavar="DIR", help="after the timed epochs, profile 3 more of each gridgnn run "
                    "(torch.profiler; and PyG's CSR run) into DIR/profile-MODEL-RUN.txt")
    ap.add_argument("--allocated", action="store_true", help="CPU: a column of the torch allocator's peak over one "
                    "more epoch (torch.profiler's memory timeline), a GPU's max_memory_allocated stood in for")
    ap.add_argument("--worker")
    ap.add_argument("--model")
    args = ap.parse_args()
    if args.worker:
        worker(args.worker, args.model, args.data, args.epochs, args.warmup, args.device, args.profile,
               args.allocated and args.device == "cpu")
        return
    skip = set(filter(None, args.skip.split(",")))
    print(f"data: {args.data}")
    if "kernels" not in skip:
        kernels_section(args.data, (args.spmm_n, args.spmm_nnz) if args.spmm_n else None)
    if "epochs" not in skip:
        epochs_section(args.data, args.epochs, args.warmup, args.models.split(","), args.device, args.profile,
                       args.allocated and args.device == "cpu")
    if "bytes" not in skip:
        print("\nbytes per training epoch at P = 4 (byte models, float32, random partition / permutation):\n",
              flush=True)
        here = os.path.dirname(os.path.abspath(__file__))
        subprocess.run([sys.executable, os.path.join(here, "model_bytes.py"), "--data", args.data, "--nprocs", "4",
                        "--models", "gcn,gat,agnn,va,sage"], check=True)


if __name__ == "__main__":
    main()
