"""Link prediction on sampled minibatches (``--task link --sampler``): with every neighbour sampled and one step per
epoch (the minibatches of a step cover every training positive) each epoch equals the full-graph link model's —
the loss, the encoder's and the decoder's update, the metrics of the same pairs — in one process, with the
evaluation in chunks spread over P = 2 and 4 ranks, on a dataset's own split, and across a resume; with a
smaller fanout it learns."""
import json
import math

import pytest
import torch

import gridgnn
from gridgnn.distributed.launch import launch
from gridgnn.graph.links import link_split
from gridgnn.graph.spec import load_graph
from gridgnn.testing import minibatch_state_worker
from gridgnn.train.config import TrainConfig

SBM = "synthetic:sbm?n=300&classes=6&avg_degree=8&features=12&p_in_ratio=0.95&noise=2"
BASE = dict(data=SBM, task="link", hidden=12, embedding_dim=8, lr=0.02, weight_decay=0.0, dtype="float64",
            epochs=3, keep="last", negatives=2, quiet=True)
METRICS = ("loss", "val_auc", "test_auc", "val_hits", "test_hits", "val_mrr", "test_mrr")


def full_graph_records(**kw) -> list[dict]:
    records = []
    gridgnn.train(**{**BASE, **kw}, callbacks=[records.append])
    return records


def assert_same_epochs(got: list[dict], ref: list[dict]):
    assert len(got) == len(ref)
    for a, b in zip(got, ref):
        for k in METRICS:
            if b[k] is None:
                assert a[k] is None, k
            else:
                assert a[k] == pytest.approx(b[k], rel=1e-9, abs=1e-12), (a["epoch"], k)


def train_positives(data=SBM) -> int:
    return link_split(load_graph(data, seed=0), 0.05, 0.1, seed=0).train.shape[1]


@pytest.mark.parametrize("model,extra", [("sage", dict(dropout=0.3)),
                                         ("gcn", dict(decoder="mlp", dropout=0.0, link_split="0.9,0,0.1"))])
def test_one_process_at_full_fanout_equals_the_full_graph_run(model, extra):
    """One minibatch of every positive per epoch, every neighbour sampled, the evaluation pairs in chunks of 7: the
    epochs of the full-graph run, dropout (keyed by the step, here the epoch), the MLP decoder and a split without
    validation edges included."""
    ref = full_graph_records(model=model, **extra)
    got = []
    gridgnn.train(**BASE, model=model, **extra, sampler="sage", fanout="-1", batch_size=10 ** 6, eval_batch_size=7,
                  callbacks=[got.append])
    assert_same_epochs(got, ref)
    assert got[0]["minibatches"] == 1 and got[0]["fetch_bytes"] == 0
    assert (got[0]["val_auc"] is None) == (extra.get("link_split") == "0.9,0,0.1")


@pytest.mark.parametrize("world", [2, 4])
def test_ranks_in_lockstep_equal_the_full_graph_run(tmp_path, world):
    """P ranks, each a minibatch of a P-th of the positives per step, the evaluation's chunks scored where the
    schedule puts them and gathered in the split's order: every rank ends each epoch with the full-graph run's
    metrics. P = 2: a dataset's own split (ogbl-collab's negatives, scored against every positive, cut in as many
    chunks as the positives); P = 4: c = 2, the sampling graph partitioned."""
    if world == 2:
        from ..graph.test_ogb import write_ogbl

        write_ogbl(tmp_path / "d", citation=False)
        data = dict(data=f"ogb:{tmp_path / 'd'}", hits_k=2, negatives=None)
        e = load_graph(data["data"]).meta["link_split"].train.shape[1]
        layout = dict(eval_batch_size=3)
    else:
        data, e = {}, train_positives()
        layout = dict(eval_batch_size=9, replication=2, sample_graph="partitioned")
    cfg = TrainConfig(**{**BASE, **data}, model="sage", dropout=0.2, decoder="mlp", sampler="sage", fanout="-1",
                      batch_size=math.ceil(e / world), nproc=world, **layout)
    cfg.validate()
    ranks = launch(minibatch_state_worker, world, cfg, device="cpu", collect=True)
    ref = full_graph_records(**data, model="sage", dropout=0.2, decoder="mlp")
    for r in ranks:
        assert_same_epochs(r["history"], ref)
        assert all(h["minibatches"] == world for h in r["history"])


def test_a_datasets_negatives_per_positive_are_scored_as_the_full_graph_run_scores_them(tmp_path):
    """ogbl-citation2's layout (K negatives per positive, with their positive's chunk; MRR and its Hits@K)."""
    from ..graph.test_ogb import write_ogbl

    write_ogbl(tmp_path / "d", citation=True)
    own = dict(data=f"ogb:{tmp_path / 'd'}", hits_k=2, negatives=None, dropout=0.0)
    ref = full_graph_records(**own)
    got = []
    gridgnn.train(**{**BASE, **own}, sampler="sage", fanout="-1", batch_size=10 ** 6, eval_batch_size=3,
                  callbacks=[got.append])
    assert_same_epochs(got, ref)
    assert got[-1]["test_mrr"] is not None


def test_resume_reproduces_the_uninterrupted_run(tmp_path):
    """Several minibatches per epoch at fanout 4, the MLP decoder (its parameters and Adam's state in the
    checkpoint, its best epoch's parameters in model.pt): 4 epochs, or 2 then 2 more from the checkpoint, the same
    epochs and the same model bit for bit."""
    run = dict(BASE, model="sage", decoder="mlp", dropout=0.2, sampler="sage", fanout="4", batch_size=200,
               epochs=4, keep="best")
    whole = gridgnn.train(**run, out=str(tmp_path / "whole"))
    gridgnn.train(**{**run, "epochs": 2}, checkpoint_every=1, out=str(tmp_path / "part"))
    resumed = gridgnn.train(resume=str(tmp_path / "part"), epochs=4, quiet=True)
    assert resumed["resumed_from_epoch"] == 2 and resumed["minibatches_per_epoch"] > 1

    def lines(d):
        return [{k: v for k, v in json.loads(ln).items() if k in METRICS}
                for ln in (d / "metrics.jsonl").read_text().splitlines()]

    assert lines(tmp_path / "part") == lines(tmp_path / "whole")
    assert resumed["test_auc"] == whole["test_auc"] and resumed["model_epoch"] == whole["model_epoch"]
    a, b = (torch.load(tmp_path / d / "model.pt", weights_only=True)["params"] for d in ("whole", "part"))
    assert a.keys() == b.keys() and "decoder" in a
    for name in a:
        for x, y in zip(a[name], b[name]):
            assert torch.equal(x, y), name


def test_sampled_link_prediction_trains_as_well_as_the_full_graph_run():
    """GCN, 5 neighbours per hop, minibatches of 256 positives, 10 epochs in float32: the loss falls and the test AUC
    (at the best validation epoch) is within 0.03 of the full-graph run's (0.907 against 0.897 here)."""
    run = dict(BASE, model="gcn", dropout=0.0, dtype="float32", epochs=10, keep="best")
    full = gridgnn.train(**run)
    got = []
    summary = gridgnn.train(**run, sampler="sage", fanout="5", batch_size=256, callbacks=[got.append])
    assert summary["task"] == "link" and summary["algo"] == "minibatch" and "test_acc" not in summary
    assert summary["minibatches_per_epoch"] == math.ceil(train_positives() / 256)
    assert got[-1]["loss"] < 0.75 * got[0]["loss"]
    assert summary["test_auc"] > full["test_auc"] - 0.03, (summary["test_auc"], full["test_auc"])
