"""CUDA: every distributed case of tests/parallel run on GPUs (NCCL, one GPU per rank) equals the serial reference
computed on the CPU, moves the bytes of the model, and refuses what the CPU run refuses; the serial path on a GPU
equals the serial path on the CPU. P runs over {1, 2, 4, 8} up to the visible GPUs. Skipped without CUDA."""
import pytest
import torch

from gridgnn.distributed.launch import launch
from gridgnn.testing import Case, Refusal, distributed_worker, serial_case

from ._fidelity import RTOL, check_against_serial, check_bytes, check_within_wire_precision, rel
from .conftest import EDGE_GRAPHS, PS, cases_for, results, shapes_2d, shapes_3d, staged_cases

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


@pytest.fixture(autouse=True)
def strict_kernels(monkeypatch):
    """``GRIDGNN_KERNELS=triton`` here and in the ranks spawned from here: a Triton kernel that cannot run on this
    GPU fails the test instead of falling back to the torch reference unseen."""
    monkeypatch.setenv("GRIDGNN_KERNELS", "triton")


def gpu_counts():
    return [P for P in PS if P <= (torch.cuda.device_count() if torch.cuda.is_available() else 0)] or [1]


def edge_cases(P: int) -> list:
    """GINE and GATv2 with edge features on one layout of each family (tests/parallel has them at P = 4 and 8)."""
    if P in (4, 8):
        return []
    out = []
    for j, (algo, grid) in enumerate((("1d", None), ("1d-sa", None), ("2d", shapes_2d(P)[-1]), ("3d", shapes_3d(P)[-1]))):
        gname = tuple(EDGE_GRAPHS)[j % 2]
        out.append((f"gine-{algo}-{gname}", Case(graph=EDGE_GRAPHS[gname], algo=algo, grid=grid, model="gine",
                                                 dims=[7, 5, 3], options={"edge_dim": 4, "eps": 0.25}, dropout=0.4,
                                                 seed=7, epoch=3)))
        out.append((f"gatv2-{algo}-{gname}", Case(graph=EDGE_GRAPHS[gname], algo=algo, grid=grid, model="gatv2",
                                                  heads=2, out_heads=2, dims=[7, 3, 3], options={"edge_dim": 4},
                                                  dropout=0.4, attn_dropout=0.3, seed=7, epoch=3)))
    return out


def test_serial_on_a_gpu_equals_serial_on_the_cpu():
    seen = {}
    for name, case in cases_for(1) + edge_cases(1):  # one case of each model and each option set of it
        key = (case.model, tuple(sorted(case.options)), case.heads > 1)
        if key in seen:
            continue
        seen[key] = name
        cpu, gpu = serial_case(case), serial_case(case, "cuda")
        assert rel(gpu.logits, cpu.logits) < RTOL, name
        assert abs(gpu.loss - cpu.loss) <= RTOL * abs(cpu.loss), name
        for a, b in zip(gpu.grads, cpu.grads):
            assert rel(a, b) < RTOL, name
    assert {"gcn", "gat", "agnn", "va", "sage", "gine", "gatv2"} <= {k[0] for k in seen}


@pytest.mark.parametrize("P", gpu_counts(), ids=lambda p: f"P{p}")
def test_every_case_on_gpus_equals_serial_on_the_cpu(P):
    named = cases_for(P) + edge_cases(P)
    out = launch(distributed_worker, P, [c for _, c in named], device="cuda", collect=True)
    cpu = results(P)  # the same cases on the CPU (gloo): the refusals must agree

    def check(name, case, per_rank):
        refused_on_cpu = name in cpu and isinstance(cpu[name][1][0], Refusal)
        if isinstance(per_rank[0], Refusal) or refused_on_cpu:
            assert isinstance(per_rank[0], Refusal) and refused_on_cpu, "refused on one device only"
            return
        check_against_serial(case, per_rank, P)
        check_bytes(case, per_rank, P)

    _every_case(named, out, P, check)


def _every_case(named, out, P, check) -> None:
    """``check(name, case, per_rank)`` on every case of a launch; one assertion listing every case that failed."""
    failures = []
    for k, (name, case) in enumerate(named):
        try:
            check(name, case, [out[r][k] for r in range(P)])
        except AssertionError as e:
            failures.append(f"{name}: {e}")
    assert not failures, f"P={P}: {len(failures)} of {len(named)} cases differ:\n" + "\n".join(failures)


@pytest.mark.parametrize("P", [2, 4], ids=lambda p: f"P{p}")
def test_ranks_sharing_one_gpu_equal_serial_on_the_cpu(P):
    """P ranks on one GPU, their collectives staged through the host over gloo (:mod:`gridgnn.distributed.staged`):
    every algorithm's device code at P > 1 — each algorithm with GCN, GAT and SAGE, every ``--overlap`` case
    (CUDA events, started all-to-allvs and broadcasts, gradient buckets), a narrowed wire per family, bfloat16
    gradients — equals the serial reference computed on the CPU, with the bytes of the model."""
    named = staged_cases(P)
    out = launch(distributed_worker, P, [c for _, c in named], device="cuda", stage_on_host=True, collect=True)

    def check(name, case, per_rank):
        assert not isinstance(per_rank[0], Refusal), f"refused: {per_rank[0]}"
        if case.wire is None and case.grad_wire is None:
            check_against_serial(case, per_rank, P)
        else:  # narrowed wires: within their rounding
            check_within_wire_precision(case, per_rank, P)
        check_bytes(case, per_rank, P)

    _every_case(named, out, P, check)


def _timing_worker(ctx):
    """Collectives on a CUDA mesh, with the device-wide synchronize counted: the Comm times them with events."""
    from gridgnn.distributed.comm import Comm
    from gridgnn.distributed.grid import ProcessGrid

    ctx.init()
    grid = ProcessGrid.build("1d", "cuda")
    comm = Comm(grid, overlap=True)
    calls = []
    real = torch.cuda.synchronize
    torch.cuda.synchronize = lambda *a, **k: (calls.append(1), real(*a, **k))[1]
    try:
        x = torch.ones(1 << 20, device="cuda")
        with comm.phase("fwd"):
            comm.all_reduce(x, "p")
            pending = comm.broadcast(x, 0, "p", async_op=True)
            y = (x * 2).sum()  # work queued while the broadcast travels
            pending.wait()
        synced = len(calls)
    finally:
        torch.cuda.synchronize = real
    stats = comm.log.stats
    return {"synced": synced, "seconds": {k: v.seconds for k, v in stats.items()}, "y": float(y)}


def test_collectives_are_timed_with_cuda_events_not_device_synchronizes():
    P = max(gpu_counts())
    if P < 2:
        pytest.skip("needs two GPUs")
    out = launch(_timing_worker, P, device="cuda", collect=True)
    for r in range(P):
        assert out[r]["synced"] == 0
        assert set(out[r]["seconds"]) == {"fwd.allreduce", "fwd.bcast"}
        assert all(s > 0 for s in out[r]["seconds"].values())


def test_a_timed_call_on_the_device_queues_events_and_is_read_with_the_log():
    """One GPU: what the Comm times on a CUDA mesh is a DeviceSpan (two events, no synchronize), its seconds read
    when the log's stats are."""
    from gridgnn.distributed.comm import Comm, DeviceSpan
    from gridgnn.distributed.grid import ProcessGrid

    comm = Comm(ProcessGrid.single())
    comm._on_device = True  # as on a CUDA mesh (a one-process grid has none)
    calls = []
    real = torch.cuda.synchronize
    torch.cuda.synchronize = lambda *a, **k: (calls.append(1), real(*a, **k))[1]
    try:
        x = torch.randn(2048, 2048, device="cuda")
        span = comm._run(lambda: x @ x, "matmul", "p")
        comm._record("matmul", 0.0, 0.0, span)
    finally:
        torch.cuda.synchronize = real
    assert isinstance(span, DeviceSpan) and not calls
    assert comm.log.stats["fwd.matmul"].seconds > 0
