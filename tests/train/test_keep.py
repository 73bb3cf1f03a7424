"""--keep best|last: the parameters a run hands on (model.pt, predict, --save-logits, the Python API's model) are
those of the epoch whose metrics summary.json reports (best, the default) or of the last epoch; a resumed run hands
on the same ones as the uninterrupted run, and a checkpoint that lost the best epoch's parameters is refused."""
import numpy as np
import pytest
import torch

import gridgnn
from gridgnn.graph.spec import load_graph

#: a learning rate high enough that the validation accuracy peaks well before the last of 12 epochs (seed 1)
SBM = "synthetic:sbm?n=300&classes=3&avg_degree=6&features=12"
RUN = dict(data=SBM, epochs=12, lr=0.2, hidden=8, dtype="float64", seed=1, quiet=True)


def _test_accuracy(logits: np.ndarray) -> float:
    g = load_graph(SBM, seed=1)
    test = np.asarray(g.test_mask, bool) & (np.asarray(g.y) >= 0)
    return float((logits.argmax(axis=1)[test] == np.asarray(g.y)[test]).mean())


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("keep")
    out = {}
    for keep in ("best", "last"):
        out[keep] = (gridgnn.train(**RUN, keep=keep, out=str(root / keep), save_logits=True), root / keep)
    return out


def test_the_kept_model_is_the_one_the_summary_reports(runs):
    best, folder = runs["best"]
    s = best.summary
    assert s["keep"] == "best" and s["model_epoch"] == s["best_epoch"] < s["epochs_trained"] - 1  # a real choice
    loaded = gridgnn.load(str(folder))
    logits = loaded.predict(SBM)
    assert _test_accuracy(logits) == s["test_acc"]  # predict agrees with the summary
    np.testing.assert_array_equal(logits, np.load(folder / "logits.npy"))
    np.testing.assert_array_equal(best.predict(SBM), logits)  # the Python API's model is the same
    assert loaded.epoch == s["best_epoch"] + 1


def test_keep_last_hands_on_the_last_epoch(runs):
    (best, best_dir), (last, last_dir) = runs["best"], runs["last"]
    s = last.summary
    assert s["keep"] == "last" and s["model_epoch"] == s["epochs_trained"] - 1
    apart = ("keep", "model_epoch", "config", "wall_time_s", "epoch_time_median_s", "eval_time_median_s",
             "peak_memory_bytes", "estimated_peak_memory_bytes", "startup_s")
    assert {k: v for k, v in s.items() if k not in apart} == \
        {k: v for k, v in best.summary.items() if k not in apart}  # the same training
    # the memory guard counts --keep best's copy of the parameters: GCN 12 → 8 → 3 with biases, float64
    copy = 8 * (12 * 8 + 8 + 8 * 3 + 3)
    assert best.summary["estimated_peak_memory_bytes"][0] - s["estimated_peak_memory_bytes"][0] == copy
    import json

    records = [json.loads(line) for line in (last_dir / "metrics.jsonl").read_text().splitlines()]
    logits = gridgnn.load(str(last_dir)).predict(SBM)
    assert _test_accuracy(logits) == records[-1]["test_acc"]
    assert not np.array_equal(logits, gridgnn.load(str(best_dir)).predict(SBM))


def test_a_resumed_run_hands_on_the_uninterrupted_runs_model(runs, tmp_path):
    """The best epoch lies before the checkpoint: its parameters travel in the checkpoint (``best_params``)."""
    best, folder = runs["best"]
    first = tmp_path / "first"
    gridgnn.train(**{**RUN, "epochs": 8}, out=str(first), checkpoint_every=8)
    ckpt = torch.load(first / "checkpoint.pt", weights_only=True)
    assert ckpt["best_epoch"] < 7 and "best_params" in ckpt
    gridgnn.train(**RUN, resume=str(first))
    a = torch.load(first / "model.pt", weights_only=True)["params"]
    b = torch.load(folder / "model.pt", weights_only=True)["params"]
    assert a.keys() == b.keys() and all(torch.equal(x, y) for k in a for x, y in zip(a[k], b[k]))


def test_a_checkpoint_without_the_best_parameters_is_refused_for_keep_best(tmp_path):
    first = tmp_path / "first"
    gridgnn.train(**{**RUN, "epochs": 8}, keep="last", out=str(first), checkpoint_every=8)
    ckpt = torch.load(first / "checkpoint.pt", weights_only=True)
    assert "best_params" not in ckpt and ckpt["best_epoch"] < 7
    with pytest.raises(gridgnn.GridGnnError, match="--keep best, but the checkpoint holds the parameters of its "
                                                   "last epoch"):  # refused before any rank starts
        gridgnn.train(**RUN, keep="best", resume=str(first), out=str(tmp_path / "again"))
    gridgnn.train(**RUN, keep="last", resume=str(first), out=str(tmp_path / "again"))  # what the line says works


def test_one_loop_hands_back_the_state_of_either_batch_source():
    """``train_worker(return_state=True)``, the tests' hook, answers alike for the full graph and for minibatches:
    the summary, this rank's parameters and the epoch records (the parameters are the model's)."""
    from gridgnn.train.config import TrainConfig
    from gridgnn.train.worker import train_worker

    tiny = "synthetic:sbm?n=60&classes=3&avg_degree=4&features=6"
    for extra in ({"algo": "serial"}, {"sampler": "sage", "fanout": "3,3"}):
        out = train_worker(None, TrainConfig(data=tiny, epochs=2, hidden=8, quiet=True, **extra), return_state=True)
        assert out["summary"]["epochs_trained"] == 2 and len(out["history"]) == 2
        assert out["state"] and all(v.dtype.is_floating_point for v in out["state"].values())
