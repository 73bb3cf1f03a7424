"""Host-staged collectives (:mod:`gridgnn.distributed.staged`, the test mode in which ranks share one GPU) on the
CPU: every collective the Comm issues crosses fresh host buffers over gloo and is copied back — at once, or at
``wait()`` for a started one — and the run still equals the serial reference with the bytes of the model; the same
path a GPU run takes (tests/parallel/test_cuda.py runs it on a device)."""
import pytest
import torch
import torch.distributed as dist

from gridgnn.distributed import staged
from gridgnn.distributed.launch import launch
from gridgnn.errors import GridGnnError
from gridgnn.ops import device_paths
from gridgnn.testing import Refusal, distributed_worker

from ._fidelity import check_against_serial, check_bytes, check_within_wire_precision
from .conftest import staged_cases


def _staged_worker(ctx, cases):
    out = distributed_worker(ctx, cases)
    started = dict(staged.STAGED.started)
    return (out, dict(staged.STAGED.calls), staged.network() is staged.STAGED, device_paths.device_paths(ctx.device),
            started, _breaking_the_contract(ctx.device))


def _breaking_the_contract(device):
    """A started all-reduce's tensor read before its ``wait()``, and a started broadcast's tensor written by its
    root before its ``wait()``: what each rank read early and got after, and what the broadcast's wait raised."""
    rank = dist.get_rank()
    t = torch.full((3,), float(rank + 1), device=device)
    pending = staged.STAGED.all_reduce(t, async_op=True)
    early = t.clone()
    pending.wait()
    b = torch.arange(4.0, device=device)
    pending = staged.STAGED.broadcast(b, src=0, async_op=True)
    if rank == 0:
        b.add_(1)
    try:
        pending.wait()
        raised = None
    except RuntimeError as exc:
        raised = str(exc)
    return early.cpu(), t.cpu(), raised


@pytest.mark.parametrize("P", [2, 4])
def test_staged_collectives_equal_serial_with_the_model_bytes(P, monkeypatch):
    """The ranks take a device's code paths as well (``GRIDGNN_DEVICE_PATHS=host``: the torch compositions, the
    rows of every edge kept, masks drawn from the ids' copies, sums at repeated indices in order), so that what they
    run is what ranks sharing a GPU run, but for the device and Triton; the serial reference takes the host's."""
    named = staged_cases(P)
    monkeypatch.setenv(device_paths.ENV, device_paths.HOST)  # (the ranks take the launcher's environment)
    out = launch(_staged_worker, P, [c for _, c in named], device="cpu", stage_on_host=True, collect=True)
    monkeypatch.delenv(device_paths.ENV)
    for r in range(P):
        assert out[r][2], "the ranks' Comm did not issue its collectives through the staged network"
        assert out[r][3], "the ranks took the host's code paths"
        # every kind of collective the engines use went through the host buffers, started ones included
        assert set(out[r][1]) == {"broadcast", "reduce", "all_reduce", "gather", "all_gather", "all_to_all_single"}
        # the overlap cases started broadcasts, reduces (a narrowed one: a gather), all-reduces (buckets) and
        # all-to-alls, each of which filled what it receives until its wait() and checked what it sends at it: a read
        # before the wait would have spread NaN into the results compared below, a write would have raised
        assert set(out[r][4]) == {"broadcast", "reduce", "gather", "all_reduce", "all_to_all_single"}, out[r][4]
        early, after, raised = out[r][5]
        assert early.isnan().all() and after.tolist() == [P * (P + 1) / 2] * 3, (early, after)
        if r == 0:
            assert raised is not None and "started broadcast" in raised and "written before its wait()" in raised
        else:
            assert raised is None, raised
    for k, (name, case) in enumerate(named):
        per_rank = [out[r][0][k] for r in range(P)]
        assert not isinstance(per_rank[0], Refusal), name
        if case.grad_wire is None and case.wire is None:
            check_against_serial(case, per_rank, P)
        else:
            check_within_wire_precision(case, per_rank, P)
        check_bytes(case, per_rank, P)


def test_staged_collectives_are_a_local_mode_only(monkeypatch):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29999")
    with pytest.raises(GridGnnError, match="local test mode"):
        launch(_staged_worker, 1, [], device="cpu", stage_on_host=True)
