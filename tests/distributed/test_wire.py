"""Wire precision in the communication layer, on four gloo ranks: narrowed sums add in float32 (values a bfloat16
ring sum would get wrong), what crosses is rounded and what a rank keeps is not, max/min, integers and the phases
outside fwd/bwd/eval are never narrowed, the recorded bytes are the narrow ones, float16 overflow completes the
collective and is kept for the trainer (which stops every rank alike), and the auto guard keeps exact the site whose sums cancel while a benign site stays narrow,
with the same decisions on every rank."""
import pytest
import torch

from gridgnn.distributed.comm import Comm
from gridgnn.distributed.grid import ProcessGrid
from gridgnn.distributed.launch import launch
from gridgnn.distributed.wire import WirePolicy

P = 4
TINY = 2.0 ** -12  # below bfloat16's resolution at 1


def _bytes(comm, key):
    s = comm.log.stats.get(key)
    return None if s is None else (s.sent, s.recv)


def worker(ctx):
    ctx.init()
    grid = ProcessGrid.build("1d", "cpu")
    r = grid.global_rank
    out = {}
    comm = Comm(grid, wire=WirePolicy(torch.bfloat16))
    with comm.phase("fwd"):
        t = torch.full((5,), 256.0 if r == 0 else 1.0)  # 256 + 1 + 1 + 1: a bfloat16 ring stays at 256
        comm.all_reduce(t, "p", wire=True)
        out["allreduce"] = t.tolist()
        out["allreduce_bytes"] = _bytes(comm, "fwd.allreduce")
        t = torch.full((3,), 256.0 if r == 0 else 1.0)
        comm.reduce(t, 1, "p", wire=True)
        out["reduce"] = t.tolist()
        out["reduce_bytes"] = _bytes(comm, "fwd.reduce")
        t = torch.full((8, 1), 256.0 if r == 0 else 1.0)
        out["reducescatter"] = comm.reduce_scatter_rows(t, [0, 2, 4, 6, 8], "p", wire=True).reshape(-1).tolist()
        x = torch.tensor([1.0 + TINY, 3.14159]) if r == 2 else torch.zeros(2)
        comm.broadcast(x, 2, "p", wire=True)
        out["bcast"] = x.tolist()
        mine = torch.tensor([[float(r + 1) + TINY]])
        got = comm.all_to_all_v([mine] * P, [1] * P, "p", wire=True)
        out["alltoallv"] = [float(b) for b in got]
        t = torch.tensor([1.0 + TINY * (r + 1)])
        comm.all_reduce(t, "p", op="max", wire=True)
        out["max"] = t.item()
        t = torch.tensor([2 ** 40 + r], dtype=torch.int64)
        comm.all_reduce(t, "p", wire=True)
        out["int"] = t.item()
    with comm.phase("grad"):
        t = torch.full((3,), 1.0 + TINY)
        comm.all_reduce(t, "p", wire=True)
        out["grad"] = t.tolist()
        out["grad_bytes"] = _bytes(comm, "grad.allreduce")

    c16 = Comm(grid, wire=WirePolicy(torch.float16))
    with c16.phase("fwd"):
        t = torch.full((2,), 1e5 if r == 1 else 1.0)  # only rank 1's data overflows
        c16.all_reduce(t, "p", wire=True)  # the collective still completes on every rank
        out["overflow"] = c16.wire.overflow
        out["overflowed"] = t.tolist()

    policy = WirePolicy(torch.bfloat16, guard=True, check_every=3, tolerance=1e-2)
    comm = Comm(grid, wire=policy)
    cancel = (1000.0 if r % 2 == 0 else -1000.0) + 0.1 * (r + 1)  # sums to 1.0: its bf16 terms lose it all
    out["steps"] = []
    for step in range(4):
        policy.begin_step(step)
        comm.log.reset()
        with comm.phase("fwd"):
            t = torch.full((4,), cancel)
            comm.all_reduce(t, "p", wire=True)
            comm.all_to_all_v([torch.full((2, 3), 1.7 + r)] * P, [2] * P, "p", wire=True)
        report = policy.settle(comm)
        out["steps"].append({"sum": t.tolist(), "report": report, "probe": _bytes(comm, "probe.allreduce"),
                             "bytes": _bytes(comm, "fwd.allreduce")})
    out["exact"] = sorted(policy.exact)
    out["summary"] = policy.summary()
    return out


@pytest.fixture(scope="module")
def ranks():
    return launch(worker, P, device="cpu", collect=True)


def test_narrowed_sums_add_in_float32(ranks):
    exact = 259.0
    rounded = torch.tensor(exact).to(torch.bfloat16).item()  # 260: the sum rounded once for every member
    assert rounded != 256.0  # what a bfloat16 ring sum would leave
    for r, out in enumerate(ranks):
        assert out["allreduce"] == [rounded] * 5
        assert out["reducescatter"] == [exact, exact]  # the kept piece: summed in float32, not re-rounded
        if r == 1:
            # one piece per element summed in float32 by its owner; the root's own stays exact, the others arrive rounded
            assert out["reduce"] == [rounded, exact, rounded]
        # 5 elements in 4 padded pieces of 2 bfloat16: 2·(g−1) pieces each way
        assert out["allreduce_bytes"] == (2 * 3 * 2 * 2, 2 * 3 * 2 * 2)
        # the reduce: 3 elements in 4 pieces of 1 summed by their owners (all-to-all), the sums gathered on rank 1
        assert out["reduce_bytes"] == ((3 * 2.0, 2 * 3 * 2.0) if r == 1 else (4 * 2.0, 3 * 2.0))


def test_what_crosses_is_rounded_and_what_stays_is_not(ranks):
    for r, out in enumerate(ranks):
        if r == 2:
            assert out["bcast"] == [1.0 + TINY, pytest.approx(3.14159, abs=1e-6)]
        else:
            assert out["bcast"] == [1.0, torch.tensor(3.14159).to(torch.bfloat16).item()]
        assert out["alltoallv"] == [float(k + 1) + (TINY if k == r else 0.0) for k in range(P)]


def test_max_integers_and_other_phases_are_never_narrowed(ranks):
    for out in ranks:
        assert out["max"] == 1.0 + TINY * P
        assert out["int"] == 4 * 2 ** 40 + 6
        assert out["grad"] == [torch.tensor(4 * (1.0 + TINY)).item()] * 3
        assert out["grad_bytes"] == (2 * 3 / 4 * 12, 2 * 3 / 4 * 12)  # float32 ring bytes


def test_float16_overflow_is_kept_for_the_trainer_and_no_rank_is_left_waiting(ranks):
    for r, out in enumerate(ranks):
        if r == 1:  # the rank whose data overflowed says where; the trainer ends every rank at the step's end
            msg = out["overflow"]
            assert "on rank 1" in msg and "float16's range" in msg and "bfloat16 or auto" in msg and "\n" not in msg
        else:
            assert out["overflow"] is None
        assert out["overflowed"] == [float("inf")] * 2  # what arrived: the collective did not hang


def test_float16_casts_are_watched_and_read_once_at_the_first_overflow(monkeypatch):
    """A cast is watched as two device scalars (no read per collective); reading ``overflow`` names the first that
    went beyond float16's range with its peak — not a cast whose data was already infinite or NaN — and is kept;
    a loop that never reads is read every ``WATCHED`` casts, so the watched scalars stay bounded."""
    policy = WirePolicy(torch.float16)
    for name, data in (("a", [1.0, 2.0]), ("b", [float("inf"), 1.0]), ("c", [7e4, 1.0]), ("d", [9e4])):
        exact = torch.tensor(data)
        policy.watch(exact, exact.to(torch.float16), f"{name} reached {{peak}}")
    assert len(policy._watched) == 4
    assert policy.overflow == "c reached 7e+04" and policy._watched == []
    policy.watch(torch.tensor([1e6]), torch.tensor([1e6]).half(), "later")  # the first is kept: nothing watched
    assert policy.overflow == "c reached 7e+04" and policy._watched == []
    quiet = WirePolicy(torch.float16)
    monkeypatch.setattr(WirePolicy, "WATCHED", 3)
    for _ in range(7):
        quiet.watch(torch.ones(2), torch.ones(2).half(), "never")
    assert len(quiet._watched) == 1 and quiet.overflow is None
    nan = WirePolicy(torch.float16)
    nan.watch(torch.tensor([float("nan"), 1e5]), torch.tensor([float("nan"), 1e5]).half(), "nan")
    assert nan.overflow is None  # (as before: data not all finite is not an overflow of the wire)


def test_auto_guard_keeps_the_cancelling_site_exact_and_the_benign_one_narrow(ranks):
    for out in ranks:
        assert out["exact"] == ["fwd.allreduce@p"]
        first = out["steps"][0]
        assert first["report"]["fwd.allreduce@p"]["wire"] == "exact"
        assert first["report"]["fwd.allreduce@p"]["error"] > 0.5  # the bf16 terms lost the sum
        assert first["report"]["fwd.alltoallv@p"]["wire"] == "bfloat16"
        assert 0 < first["report"]["fwd.alltoallv@p"]["error"] < 1e-2
        assert first["probe"] is not None  # the probe ran the other precision once more
        later = out["steps"][1]
        assert later["report"] is None and later["probe"] is None  # not a probe step
        assert later["sum"] == pytest.approx([1.0] * 4, abs=1e-3)  # exact now
        assert later["bytes"] == (2 * 3 / 4 * 16, 2 * 3 / 4 * 16)  # a float32 ring of 4 elements
        assert out["steps"][3]["report"] is not None  # every check_every steps
        assert out["summary"]["kept_exact"] == ["fwd.allreduce@p"]
    assert all(out["steps"][0]["report"] == ranks[0]["steps"][0]["report"] for out in ranks)  # one decision
