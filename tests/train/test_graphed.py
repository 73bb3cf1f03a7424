"""``--cuda-graph`` (:mod:`gridgnn.train.graphed`): the training step recorded once and replayed every epoch trains
exactly as the eager step does — here on the host taking a GPU's code paths (``GRIDGNN_DEVICE_PATHS=host``), where
the step is recorded by :class:`~gridgnn.train.graphed.HostGraph` (every operation replayed on its recorded tensors,
what a CUDA graph does with its kernels' addresses), on a GPU under the ``gpu`` marker with ``torch.cuda.graph``."""
import numpy as np
import pytest
import torch

import gridgnn
from gridgnn.distributed import NullComm
from gridgnn.errors import GridGnnError
from gridgnn.ops import device_paths
from gridgnn.testing import Case, build_model
from gridgnn.ops import triton_kernels as TK
from gridgnn.train.graphed import WARMUP_STEPS, CudaGraphs, GraphedStep, HostGraph, HostGraphs, first_error
from gridgnn.train.rank_layout import build_rank
from gridgnn.train.step import evaluation, forward_backward

from tests._devices import ON_A_GPU

from .test_device_paths import CASES

EPOCHS = WARMUP_STEPS + 4  # the eager steps, the recorded one, three replays


@pytest.fixture
def device_paths_on_host(monkeypatch):
    monkeypatch.setenv(device_paths.ENV, device_paths.HOST)


def train(case: Case, device: str, graphed: bool):
    """``EPOCHS`` epochs of Adam on the serial plan: the losses, the parameters, and the :class:`GraphedStep`."""
    comm = NullComm()
    plan, data = build_rank(case.graph, "serial", comm, case.dims, dtype=torch.float64, device=device,
                            model=lambda p: build_model(case, p))
    model = build_model(case, plan).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=0.05)

    def step(epoch):
        return forward_backward(model, plan, comm, data, epoch=epoch)[0]

    def evaluated():
        return evaluation(model, plan, comm, data)
    run = GraphedStep(step, model.parameters(), device, evaluation=evaluated) if graphed else None
    losses, logits = [], []
    for epoch in range(EPOCHS):
        opt.zero_grad(set_to_none=True)
        losses.append(float(run(epoch) if graphed else step(epoch)))
        opt.step()
        logits.append((run.evaluate() if graphed else evaluated())[0].cpu().clone())
    return losses, [p.detach().cpu().clone() for p in model.parameters()] + logits, run


def assert_same_training(case: Case, device: str, tol: float = 0.0):
    """The losses, the parameters and every epoch's evaluated logits of graphed training are the eager run's."""
    eager_losses, eager_tensors, _ = train(case, device, graphed=False)
    losses, tensors, step = train(case, device, graphed=True)
    assert step.graph is not None and step.eager_steps == WARMUP_STEPS
    assert step.eval_graph is not None and step.eager_evaluations == WARMUP_STEPS
    np.testing.assert_allclose(losses, eager_losses, rtol=tol, atol=0)
    assert len(set(eager_losses)) == EPOCHS  # (each epoch its own masks and parameters)
    for p, q in zip(tensors, eager_tensors):
        np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=tol, atol=tol)
    return step


@pytest.mark.parametrize("model, graph, dims, options", CASES, ids=[f"{c[0]}-{k}" for k, c in enumerate(CASES)])
def test_the_replayed_step_trains_as_the_eager_step(model, graph, dims, options, device_paths_on_host):
    """Every model, node dropout (and attention dropout where it has one): the losses of every epoch and the
    parameters after them are the eager run's, bit for bit — the replays drew each epoch's masks from the epoch
    written into the device tensor they read, and the optimizer found the replay's gradients."""
    step = assert_same_training(Case(graph, "serial", dims, model=model, dropout=0.4, seed=3, **options), "cpu")
    assert isinstance(step.graph, HostGraph) and len(step.graph.ops) > 20 and len(step.eval_graph.ops) > 5
    # what the captures read and did not make is held while the graphs live: the parameters, the features, ...
    held = {t.untyped_storage().data_ptr() for t in step.pinned}
    assert all(p.untyped_storage().data_ptr() in held for p in step.params)


def test_a_replay_reads_its_epoch_from_the_device(device_paths_on_host):
    """The same epoch replayed twice gives the same loss; another epoch, other dropout masks and another loss (the
    parameters unchanged in between)."""
    case = Case(CASES[0][1], "serial", CASES[0][2], model="gcn", dropout=0.5, seed=1)
    *_, step = train(case, "cpu", graphed=True)
    first, again, other = (float(step(e)) for e in (7, 7, 8))
    assert first == again != other


def test_recording_refuses_what_a_capture_cannot_hold():
    """A read back (a number, a boolean, an output sized by the data), host data entering the step, a write into a
    tensor made before it: each a :class:`GridGnnError` naming the operation, as a capture would fail."""
    held, counts = torch.ones(3), torch.tensor([1, 2, 0])
    for reads_back in (lambda: float((held * 2).sum()), lambda: torch.equal(held * 2, held),
                       lambda: (held * 2)[held > 0], lambda: torch.nonzero(held * 2),
                       lambda: torch.repeat_interleave(held * 2, counts)):
        with pytest.raises(GridGnnError, match="reads a value back"):
            with HostGraph():
                reads_back()
    with HostGraph():  # (its output sized by the caller: a capture holds it)
        torch.repeat_interleave(held * 2, counts, output_size=3)
    with pytest.raises(GridGnnError, match="made from host data"):
        with HostGraph():
            held + torch.from_numpy(np.ones(3))
    with pytest.raises(GridGnnError, match="writes a tensor made before the step"):
        with HostGraph():
            held.add_(1.0)
    with HostGraph() as graph:  # what it made, it may write; a replay writes the results where they were
        out = held * 2
        out.add_(held)
    held.fill_(5.0)
    graph.replay()
    assert torch.equal(out, torch.full((3,), 15.0))


def trained_both_ways(graphs, monkeypatch, tmp_path, **cfg):
    """``gridgnn.train`` without and with ``cuda_graph`` (outputs in ``tmp_path/False`` and ``tmp_path/True``): each
    run's epoch records and its result, after checking that the graphed run recorded its step, then its evaluation
    in the step's memory pool (``graphs``: :class:`HostGraphs` or :class:`CudaGraphs`)."""
    pools = []
    capture = graphs.capture
    monkeypatch.setattr(graphs, "capture", staticmethod(lambda fn, pool: pools.append(pool is not None)
                                                        or capture(fn, pool)))
    records, results = {}, {}
    for graphed in (False, True):
        records[graphed] = []
        run = gridgnn.TrainConfig(**cfg, cuda_graph=graphed, out=str(tmp_path / str(graphed)))
        results[graphed] = gridgnn.train(run, callbacks=[records[graphed].append])
    assert pools == [False, True]  # the step, then the evaluation in the step's pool
    assert len(records[True]) == len(records[False]) == cfg["epochs"]
    return records, results


def trained(result) -> dict[str, torch.Tensor]:
    """The trained parameters: the model's and a link model's decoder's."""
    return result.model.state_dict()


NODE_RECORD = ("loss", "train_acc", "val_acc", "test_acc")
LINK_RECORD = ("loss", "val_auc", "val_hits", "val_mrr", "test_auc", "test_hits", "test_mrr")


def test_the_trainer_records_the_step_and_trains_as_without(device_paths_on_host, monkeypatch, tmp_path):
    """``gridgnn.train(..., cuda_graph=True)`` in this process: every epoch's loss and accuracies, the trained
    parameters and the saved logits (the evaluation replayed once more) are those of the same run without it."""
    records, results = trained_both_ways(
        HostGraphs, monkeypatch, tmp_path, data="synthetic:sbm?n=300&classes=4&avg_degree=6&features=12", model="gat",
        heads=2, hidden=4, epochs=6, dropout=0.3, device="cpu", quiet=True, save_logits=True)
    assert [[r[k] for k in NODE_RECORD] for r in records[True]] == [[r[k] for k in NODE_RECORD] for r in records[False]]
    mine, eager = trained(results[True]), trained(results[False])
    assert mine.keys() == eager.keys() and all(torch.equal(p, eager[name]) for name, p in mine.items())
    saved = [np.load(tmp_path / str(graphed) / "logits.npy") for graphed in (True, False)]
    assert np.array_equal(*saved) and np.isfinite(saved[0]).all()


def test_link_prediction_records_its_step_and_trains_as_without(device_paths_on_host, monkeypatch, tmp_path):
    """``--task link``: the training pairs (each epoch's negatives drawn anew on the host) reach the replays through
    one device tensor written before each; the step (an MLP decoder's parameters among those it trains) and the
    scoring of the validation and test pairs (the test pairs on the test graph) are recorded, and every epoch's loss
    and metrics and the trained parameters are the run's without it."""
    records, results = trained_both_ways(
        HostGraphs, monkeypatch, tmp_path, data="synthetic:sbm?n=300&classes=4&avg_degree=6&features=12",
        task="link", decoder="mlp", hidden=8, epochs=6, dropout=0.3, device="cpu", quiet=True)
    assert [[r[k] for k in LINK_RECORD] for r in records[True]] == [[r[k] for k in LINK_RECORD] for r in records[False]]
    mine, eager = trained(results[True]), trained(results[False])
    assert any(k.startswith("decoder.") for k in mine) and mine.keys() == eager.keys()
    assert all(torch.equal(p, eager[name]) for name, p in mine.items())


@pytest.mark.parametrize("flags, words", [
    (dict(nproc=2, algo="1d"), "one process"),
    (dict(nproc=1, algo="1d"), "one process"),
    (dict(sampler="sage"), "full-graph training"),
    (dict(device="cpu"), "on a CUDA device"),
])
def test_cuda_graph_refuses_what_it_cannot_record(flags, words, monkeypatch):
    monkeypatch.delenv(device_paths.ENV, raising=False)
    with pytest.raises(GridGnnError, match=f"--cuda-graph.*{words}"):
        gridgnn.TrainConfig(data="synthetic:sbm?n=100", cuda_graph=True, **flags).validate()


def test_a_failed_capture_is_named_by_its_first_error():
    """A capture's end reports only that an earlier operation invalidated it: the message names that operation's
    error (and stops at a ``from None``)."""
    try:
        try:
            raise RuntimeError("operation not permitted when stream is capturing")
        except RuntimeError:
            raise RuntimeError("the capture was invalidated")
    except RuntimeError as exc:
        assert str(first_error(exc)) == "operation not permitted when stream is capturing"
    try:
        try:
            raise ValueError("unrelated, handled earlier")
        except ValueError:
            raise RuntimeError("its own") from None
    except RuntimeError as exc:
        assert str(first_error(exc)) == "its own"


@pytest.mark.skipif(not TK.HAVE_TRITON, reason="Triton is not installed")
def test_what_a_triton_launch_is_given_is_held_while_a_capture_runs(monkeypatch):
    """A launch bypasses the dispatcher, so the capture's tensors seen there are not all it reads: inside
    ``holding()`` every tensor a launch is given is kept (here a launch that cannot run still hands them over)."""
    monkeypatch.setattr(TK, "off", {})
    monkeypatch.delenv("GRIDGNN_KERNELS", raising=False)
    table = torch.arange(4.0)
    with pytest.warns(RuntimeWarning), TK.holding() as held:
        assert not TK._launch("no_such_kernel", 1, table, 3)
    assert len(held) == 1 and held[0] is table
    assert TK._held is None


class _NoKernel:
    """Triton's kernels stood in: ``kernels.name[grid](...)`` runs nothing."""

    def __getattr__(self, name):
        return self

    def __getitem__(self, grid):
        return lambda *args, **meta: None


@pytest.mark.skipif(not TK.HAVE_TRITON, reason="Triton is not installed")
def test_a_capture_holds_what_its_launches_read_from_outside_and_not_what_they_wrote(monkeypatch):
    """Of what the recorded launches were given, the capture holds the tensors made before it (the ids, a cached
    segment table read through a view made inside) and not those made inside it (the masks and products the
    launches wrote, which live in the graph's pool and may be freed there)."""
    from gridgnn.train.graphed import Capture

    monkeypatch.setattr(TK, "off", {})
    monkeypatch.setattr(TK, "_kernels", lambda: _NoKernel())
    monkeypatch.setenv("GRIDGNN_KERNELS", "triton")
    ids, key = torch.arange(6), torch.tensor(3)
    dst, src, row, col = torch.ones(6, 4), torch.ones(6, 4), torch.arange(6), torch.arange(6)
    TK._segments.cache_clear()
    table = TK._segments(((0, 0, 4),), "cpu")  # (made before: a cached table)
    with Capture() as seen, TK.holding() as launched:
        mask = TK.node_keep_mask(ids, 4, 0, 4, key, 2**63)
        out = TK.sddmm_dot(row, col, dst, src, 1, [(0, 0, 4)])
    held = {t.untyped_storage().data_ptr() for t in seen.not_made(launched)}
    ptr = lambda t: t.untyped_storage().data_ptr()  # noqa: E731
    assert {ptr(t) for t in (ids, key, dst, src, row, col, table)} <= held
    assert ptr(mask) not in held and ptr(out) not in held
    TK._segments.cache_clear()


@pytest.mark.skipif(not TK.HAVE_TRITON, reason="Triton is not installed")
def test_a_launch_failing_within_a_capture_is_raised_not_turned_off(monkeypatch):
    """Outside the tests a launch that fails turns its kernel off; within a CUDA graph's capture it is raised, for
    the capture to name it (the reference run in its place would be recorded in a capture the failure spoiled)."""
    monkeypatch.setattr(TK, "off", {})
    monkeypatch.delenv("GRIDGNN_KERNELS", raising=False)
    monkeypatch.setattr(TK, "_capturing", lambda: True)
    with pytest.raises(Exception):
        TK._launch("no_such_kernel", 1, torch.arange(4.0))
    assert "no_such_kernel" not in TK.off


def test_a_step_on_the_host_paths_is_not_recorded(monkeypatch):
    monkeypatch.delenv(device_paths.ENV, raising=False)
    with pytest.raises(GridGnnError, match="--cuda-graph records a step on a CUDA device"):
        GraphedStep(lambda e: None, [], "cpu")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("model, graph, dims, options", CASES, ids=[f"{c[0]}-{k}" for k, c in enumerate(CASES)])
def test_on_a_gpu_the_cuda_graph_trains_as_the_eager_step(model, graph, dims, options):
    """``torch.cuda.graph`` on a GPU: every model's graphed training equals its eager training on the same GPU
    (float64; the same kernels run, in the same order)."""
    step = assert_same_training(Case(graph, "serial", dims, model=model, dropout=0.4, seed=3, **options), "cuda",
                                tol=1e-12)
    assert isinstance(step.graph, torch.cuda.CUDAGraph)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("task", ["node", "link"])
def test_on_a_gpu_the_trainer_with_cuda_graphs_trains_as_without(tmp_path, monkeypatch, task):
    """``gridgnn.train(..., device="cuda", cuda_graph=True)``: the step and the evaluation recorded once each (in
    one memory pool), and every epoch's loss and metrics, the trained parameters and (node classification) the
    saved logits (one more replay of the evaluation) as without it (float64, 1e-12)."""
    options = dict(save_logits=True) if task == "node" else dict(task="link", decoder="mlp")
    records, results = trained_both_ways(
        CudaGraphs, monkeypatch, tmp_path, data="synthetic:sbm?n=2000&classes=4&avg_degree=8&features=32",
        model="sage", hidden=16, epochs=8, dropout=0.3, device="cuda", dtype="float64", quiet=True, **options)
    for got, want in zip(records[True], records[False]):
        for k in NODE_RECORD if task == "node" else LINK_RECORD:
            assert got[k] == pytest.approx(want[k], rel=1e-12, abs=1e-12), (got["epoch"], k)
    mine, eager = trained(results[True]), trained(results[False])
    assert mine.keys() == eager.keys()
    for name, p in mine.items():
        np.testing.assert_allclose(p.cpu().numpy(), eager[name].cpu().numpy(), rtol=1e-12, atol=1e-12, err_msg=name)
    if task == "node":
        saved = [np.load(tmp_path / str(graphed) / "logits.npy") for graphed in (True, False)]
        np.testing.assert_allclose(saved[0], saved[1], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("device", [pytest.param("cpu", id="host-paths"), pytest.param("cuda", marks=ON_A_GPU)])
@pytest.mark.parametrize("model, graph, dims, options", [CASES[0], CASES[3]], ids=["gcn", "gat"])
def test_a_step_recomputing_by_blocks_is_recorded_as_the_eager_step(model, graph, dims, options, device,
                                                                   monkeypatch):
    """A product's dropped input recomputed by blocks of two rows (``RowBlocks``: no test graph reaches a block
    unless asked), recorded and replayed (on a GPU with the kernels strict): training equals the eager step's."""
    from gridgnn.testing import recompute_blocks

    if device == "cuda":
        monkeypatch.setenv("GRIDGNN_KERNELS", "triton")
    else:
        monkeypatch.setenv(device_paths.ENV, device_paths.HOST)
    with recompute_blocks(2 * dims[0]) as shapes:
        assert_same_training(Case(graph, "serial", dims, model=model, dropout=0.4, seed=3, **options), device,
                             tol=1e-12 if device == "cuda" else 0.0)
    assert shapes


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_a_gpu_a_recorded_step_holds_about_what_the_eager_step_holds(monkeypatch):
    """GAT with attention dropout (masks drawn again in the backward, Triton's attention): the peak allocated while
    recording and replaying stays near the eager training's — what the kernels wrote in the capture is freed in the
    graph's pool as in an eager step, not held with the graph (``Capture.not_made``)."""
    from gridgnn.graph.spec import load_graph

    monkeypatch.setenv("GRIDGNN_KERNELS", "triton")
    graph = load_graph("synthetic:sbm?n=20000&classes=4&avg_degree=16&features=64")
    case = Case(graph, "serial", [64, 16, 4], model="gat", heads=4, attn_dropout=0.3, dropout=0.4, seed=3)
    peaks = []
    for graphed in (False, True):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        train(case, "cuda", graphed)
        peaks.append(torch.cuda.max_memory_allocated() - base)
    assert peaks[1] <= 1.25 * peaks[0], peaks
