"""The parameter gradients' all-reduce in buckets (:class:`gridgnn.train.step.GradReducer`): the packing, and on two
gloo ranks that ``--overlap`` starts every bucket during the backward (none waits for its end), in bucket order,
each an all-reduce of its own, with the sums of the plain run bit for bit; and that a parameter one rank's backward
does not reach gets the others' sum, one no rank reaches keeps no gradient, as serially."""
import pytest
import torch
import torch.utils.checkpoint

from gridgnn.distributed.accounting import allreduce, grad_bucket_elements, grad_buckets
from gridgnn.distributed.comm import Comm
from gridgnn.distributed.grid import ProcessGrid
from gridgnn.distributed.launch import launch
from gridgnn.errors import GridGnnError
from gridgnn.train.step import GradReducer


def test_buckets_fill_from_the_last_tensor_and_keep_model_order():
    assert grad_buckets([10, 20, 30], 1000) == [[0, 1, 2]]  # one bucket: the model in order
    assert grad_buckets([10, 20, 30, 5], 35) == [[2, 3], [0, 1]]  # from the back, at most 35 bytes each
    assert grad_buckets([10, 20, 30, 5], 34) == [[3], [2], [0, 1]]
    assert grad_buckets([100, 1, 1], 10) == [[1, 2], [0]]  # a tensor larger than the cap goes alone
    assert grad_buckets([], 10) == []


def _model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 4), torch.nn.Tanh(),
                               torch.nn.Linear(4, 3)).double()


def worker(ctx):
    ctx.init()
    grid = ProcessGrid.build("1d", "cpu")
    out = {}
    for overlap in (False, True):
        comm = Comm(grid, overlap=overlap, grad_bucket_bytes=300)
        model = _model(0)
        x = torch.linspace(-1, 1, 42, dtype=torch.float64).reshape(7, 6) * (grid.global_rank + 1)
        loss = model(x).pow(2).sum()
        red = GradReducer(model, comm, "p", loss=loss)
        with red:
            loss.backward()
            started = len(red._started)  # before the context's end: what the backward itself started
        out[overlap] = {"started": started, "buckets": len(red.buckets),
                        "grads": [p.grad.clone() for p in model.parameters()],
                        "calls": comm.log.stats["grad.allreduce"].calls}
    rank = grid.global_rank
    for case, overlap, branch in (("uneven", False, rank == 1), ("uneven", True, rank == 1), ("none", True, False)):
        comm = Comm(grid, overlap=overlap, grad_bucket_bytes=300)
        model = _uneven(0)
        loss = _uneven_loss(model, rank, branch)
        red = GradReducer(model, comm, "p", loss=loss)
        with red:
            loss.backward()
            started = len(red._started)
        stats = comm.log.stats
        out[(case, overlap)] = {"grads": [None if p.grad is None else p.grad.clone() for p in model.parameters()],
                                "sent": stats["grad.allreduce"].sent, "calls": stats["grad.allreduce"].calls,
                                "agreed": stats["setup.allreduce"].calls, "started": started}
        if case == "uneven" and overlap:  # a later step in which both ranks' branches flip: what was agreed is gone
            model.zero_grad(set_to_none=True)
            loss = _uneven_loss(model, rank, not branch)
            try:
                with GradReducer(model, comm, "p", loss=loss):
                    loss.backward()
            except GridGnnError as exc:
                out["changed"] = str(exc)
    comm = Comm(grid, overlap=True, grad_bucket_bytes=300)
    model = _uneven(0)
    h = torch.tanh(model[0](torch.linspace(-1, 1, 42, dtype=torch.float64).reshape(7, 6)))
    loss = torch.utils.checkpoint.checkpoint(model[1], h, use_reentrant=True).pow(2).sum()  # layer 1: out of sight
    try:
        with GradReducer(model, comm, "p", loss=loss):
            loss.backward()
    except GridGnnError as exc:
        out["reentrant"] = str(exc)
    return out


def _uneven(seed: int) -> torch.nn.Module:
    """Three layers: ``0`` reached by both ranks, ``1`` by rank 1 alone, ``2`` by none (as a layer of one's own
    whose branch a rank's block does not need)."""
    torch.manual_seed(seed)
    return torch.nn.ModuleList([torch.nn.Linear(6, 5), torch.nn.Linear(5, 5), torch.nn.Linear(5, 5)]).double()


def _uneven_loss(model: torch.nn.Module, rank: int, branch: bool) -> torch.Tensor:
    h = torch.tanh(model[0](torch.linspace(-1, 1, 42, dtype=torch.float64).reshape(7, 6) * (rank + 1)))
    if branch:
        h = torch.tanh(model[1](h))
    return h.pow(2).sum()


@pytest.fixture(scope="module")
def res():
    """Both tests' cases, run in one group of two ranks."""
    return launch(worker, 2, device="cpu", collect=True)


def test_overlap_starts_every_bucket_during_the_backward_with_the_same_sums(res):
    for r in range(2):
        plain, early = res[r][False], res[r][True]
        assert plain["buckets"] == early["buckets"] == 3  # float64 bytes 240, 40 | 160, 32 | 96, 24 in 300: [w1], [b1 w2], [b2 w3 b3]
        assert plain["started"] == 0 and early["started"] == early["buckets"]
        assert plain["calls"] == early["calls"] == 3
        assert all(torch.equal(a, b) for a, b in zip(plain["grads"], early["grads"]))
    # the sums: each gradient is the sum of both ranks' (the ranks' inputs differ)
    for p0, p1 in zip(res[0][True]["grads"], res[1][True]["grads"]):
        assert torch.equal(p0, p1)
    model = _model(0)
    for k in (1, 2):
        x = torch.linspace(-1, 1, 42, dtype=torch.float64).reshape(7, 6) * k
        model(x).pow(2).sum().backward()
    for got, want in zip(res[0][True]["grads"], (p.grad for p in model.parameters())):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=0)


def test_a_gradient_only_some_ranks_reach_is_summed_and_one_none_reaches_stays_none(res):
    """Rank 0's backward does not reach layer 1, no rank's reaches layer 2: the buckets still match (rank 0 sends
    zeros for layer 1; each bucket carries a count per tensor), layer 1 gets rank 1's gradient on both ranks and
    layer 2 none — the serial run over both ranks' inputs, which Adam's weight decay would tell from zeros. Under
    --overlap the ranks first agree on what each reaches (one all-reduce, phase setup): a bucket that only some
    reach starts after the backward on both, with every later one (in a backward with collectives of its own an
    early start on one rank alone would meet them); buckets no rank reaches start at once; a later step that
    reaches other parameters is refused on the rank whose reach changed, and so is a gradient made outside the
    loss's graph (a reentrant checkpoint's) after its bucket started."""
    serial = _uneven(0)
    for rank in (0, 1):
        _uneven_loss(serial, rank, rank == 1).backward()
    want = [p.grad for p in serial.parameters()]
    assert want[4] is None and want[5] is None
    sizes = [p.numel() for p in serial.parameters()]
    buckets = grad_buckets([8 * k for k in sizes], 300)
    assert buckets == [[3, 4, 5], [1, 2], [0]]  # b1 w2 b2 | b0 w1 | w0: rank 1's or none, mixed, both ranks'
    model_sent = sum(allreduce(2, 8 * grad_bucket_elements(sizes[k] for k in b))[0] for b in buckets)
    for overlap in (False, True):
        for r in range(2):
            got = res[r][("uneven", overlap)]
            assert [g is None for g in got["grads"]] == [w is None for w in want], (overlap, r)
            for g, w in zip(got["grads"], want):
                if w is not None:
                    torch.testing.assert_close(g, w, rtol=1e-12, atol=0)
            assert got["calls"] == 3 and got["sent"] == model_sent
            assert got["started"] == 0 and got["agreed"] == (1 if overlap else 0)
    for r in range(2):
        assert res[r]["changed"].startswith(f"--overlap: the parameters the backward of rank {r} reaches changed "
                                            "since the ranks agreed on them (1.weight, 1.bias)"), res[r]["changed"]
    for r in range(2):  # a reentrant checkpoint makes layer 1's gradients in a backward of its own, after its bucket
        assert res[r]["reentrant"].startswith("--overlap: the gradient of parameter '1.bias' arrived after its "
                                              "bucket's all-reduce started"), res[r]["reentrant"]
    # neither rank reaches layers 1 and 2: their bucket starts at once, the others as their gradients arrive
    serial = _uneven(0)
    for rank in (0, 1):
        _uneven_loss(serial, rank, False).backward()
    for r in range(2):
        got = res[r][("none", True)]
        assert got["started"] == 3 and got["agreed"] == 1
        assert [g is None for g in got["grads"]] == [False, False, True, True, True, True]
        for g, w in zip(got["grads"][:2], serial.parameters()):
            torch.testing.assert_close(g, w.grad, rtol=1e-12, atol=0)
