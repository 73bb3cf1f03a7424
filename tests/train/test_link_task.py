"""``--task link`` end to end: training learns, the metrics are those of the model's scores on the right graphs,
a spawned run equals the serial one, and what link prediction does not combine with is refused."""
import json

import numpy as np
import pytest
import torch

import gridgnn
from gridgnn.errors import GridGnnError
from gridgnn.graph import Graph
from gridgnn.graph.links import auc, hits_at, hits_per_positive, link_split, mrr, negative_pairs
from gridgnn.graph.spec import load_graph

from ._runs import cli_batch, run_main

SBM = "synthetic:sbm?n=400&classes=8&avg_degree=8&features=16&p_in_ratio=0.95&noise=2"
LINK = dict(data=SBM, task="link", hidden=32, embedding_dim=16, lr=0.02, weight_decay=0.0, dropout=0.0, quiet=True)


def test_serial_link_prediction_learns_and_its_metrics_are_the_models_scores():
    records = []
    result = gridgnn.train(**LINK, epochs=40, negatives=2, callbacks=[records.append])
    assert result["task"] == "link" and result["negatives"] == 2 and result["link_split"] == [0.85, 0.05, 0.1]
    assert "test_acc" not in result and "val_acc" not in result  # the node task's keys: not a link run's
    # a random encoder already ranks homophilous pairs well (0.93 here); training gains on it and the loss falls
    assert result["test_auc"] > records[0]["test_auc"] + 0.015, (records[0]["test_auc"], result["test_auc"])
    assert records[-1]["loss"] < 0.8 * records[0]["loss"]
    best = max(range(len(records)), key=lambda i: (records[i]["val_auc"], -i))
    assert result["best_epoch"] == best and result["test_auc"] == records[best]["test_auc"]
    # the kept epoch's metrics (--keep best: the best validation AUC's), recomputed from the trained model:
    # validation pairs scored on the training graph, test pairs on the training and validation edges (PyG's
    # split), each with its own fixed negatives
    g = load_graph(SBM, seed=0)
    s = link_split(g, 0.05, 0.1, seed=0)
    assert result["keep"] == "best" and result["model_epoch"] == best
    last = records[result["model_epoch"]]
    for name, graph in (("val", s.train_graph), ("test", s.test_graph)):
        src, dst = graph.edge_index()
        z = result.model(torch.from_numpy(g.x), np.stack([src, dst])).double().numpy()
        pos = getattr(s, name)
        neg = negative_pairs(g, pos.shape[1], 2, seed=0, split=name)
        sp = (z[pos[0]] * z[pos[1]]).sum(1)
        sn = (z[neg[0]] * z[neg[1]]).sum(1)
        assert abs(auc(sp, sn) - last[f"{name}_auc"]) < 1e-4, name
        assert abs(hits_at(sp, sn, 50) - last[f"{name}_hits"]) < 1e-9, name
        assert abs(mrr(sp, sn.reshape(-1, 2)) - last[f"{name}_mrr"]) < 1e-9, name
    # score(): the same scores from the model's own inference of the graph given
    got = result.model.score(np.stack([pos[0], pos[1]]).T, data=SBM)
    z = result.model.predict(SBM).astype(np.float64)
    np.testing.assert_allclose(got, (z[pos[0]] * z[pos[1]]).sum(1), rtol=1e-5)
    with pytest.raises(GridGnnError, match="integer vertex ids"):
        result.model.score(np.zeros((3, 3), dtype=np.int64))


def test_spawned_link_prediction_equals_serial(tmp_path):
    """Five epochs in float64 with dropout: Plexus (a double permutation: the test graph is laid out on the
    training graph's two vertex orders) at P = 2 reproduces the serial run's every epoch (one step of every
    algorithm is tests/parallel/test_link.py's). The same run with ``--comm-dtype auto`` (the encoder's node data
    in bfloat16, the guard probing) moves fewer forward bytes and scores within 0.05 of it."""
    base = ["train", "--task", "link", "--data", SBM, "--hidden", 16, "--embedding-dim", 8, "--epochs", 5,
            "--dtype", "float64", "--dropout", 0.3, "--negatives", 3, "--quiet"]
    runs = {"serial": [], "plexus": ["--algo", "plexus", "--nproc", 2, "--partition", "double-perm"]}
    runs["plexus-auto"] = runs["plexus"] + ["--comm-dtype", "auto"]
    r, codes = cli_batch([base + ["--out", tmp_path / k] + extra for k, extra in runs.items()])
    assert codes == [0, 0, 0], r.stderr[-3000:]
    hist = {k: [json.loads(line) for line in (tmp_path / k / "metrics.jsonl").read_text().splitlines()]
            for k in runs}
    for k in ("plexus",):
        for a, b in zip(hist[k], hist["serial"]):
            assert abs(a["loss"] - b["loss"]) <= 1e-9 * abs(b["loss"]), (k, a["epoch"])
            for m in ("val_auc", "test_auc", "val_mrr", "test_mrr", "val_hits", "test_hits"):
                assert abs(a[m] - b[m]) < 1e-12, (k, m, a["epoch"])
    s = json.loads((tmp_path / "plexus" / "summary.json").read_text())
    assert s["comm_bytes_per_epoch"]["by_phase"]["decode.alltoallv"] > 0
    assert s["comm_bytes_per_epoch"]["by_phase"]["decode_bwd.alltoallv"] > 0
    low = json.loads((tmp_path / "plexus-auto" / "summary.json").read_text())
    assert low["comm_wire"]["guard"] and "wire" in hist["plexus-auto"][0]  # the first epoch probes
    fwd = [sum(v for k, v in x["comm_bytes_per_epoch"]["by_phase"].items() if k.startswith("fwd.")) for x in (s, low)]
    assert fwd[1] < fwd[0], fwd
    assert low["comm_bytes_per_epoch"]["by_phase"]["decode.alltoallv"] == \
        s["comm_bytes_per_epoch"]["by_phase"]["decode.alltoallv"]  # the decoder's fetch stays exact
    assert abs(low["test_auc"] - s["test_auc"]) < 0.05
    # gridgnn predict --pairs: one score per pair from the run's model.pt
    pairs = np.array([[0, 5, 9, 17], [1, 6, 399, 17]])
    np.save(tmp_path / "pairs.npy", pairs)
    assert run_main(["predict", "--run", tmp_path / "plexus", "--data", SBM, "--pairs", tmp_path / "pairs.npy",
                     "--out", tmp_path / "scores.npy"]) == 0
    z = gridgnn.load(str(tmp_path / "plexus")).predict(SBM)
    np.testing.assert_allclose(np.load(tmp_path / "scores.npy"), (z[pairs[0]] * z[pairs[1]]).sum(1), rtol=1e-12)
    assert run_main(["predict", "--run", tmp_path / "plexus", "--data", SBM, "--pairs", tmp_path / "pairs.npy",
                     "--classes", "--out", tmp_path / "bad.npy"]) == 2


@pytest.mark.parametrize("options,words", [
    (dict(negatives=2), "--negatives applies to --task link"),
    (dict(task="link", save_logits=True, out="x"), "--save-logits"),
    (dict(task="link", link_split="0.9,0.05"), "three fractions"),
    (dict(task="link", link_split="0.5,0.3,0.3"), "add up to 1"),
    (dict(task="link", algo="auto", nproc=2), "--task link"),
    (dict(task="link", decoder="mlp", link_split=None, hits_k=0), "--hits-k"),
])
def test_what_link_prediction_does_not_take_is_refused(options, words):
    with pytest.raises(GridGnnError, match=words.replace("-", "\\-").replace(".", "\\.")):
        gridgnn.train(data=SBM, epochs=1, quiet=True, **options)


def test_featureless_data_gets_degree_features_of_the_training_edges_only(tmp_path):
    """Degree features counted on the whole graph would carry the held-out edges into the encoder: the split
    recounts them on the training edges."""
    g = load_graph(SBM, seed=0)
    src, dst = g.edge_index()
    path = tmp_path / "edges.txt"
    np.savetxt(path, np.stack([src, dst], axis=1)[src < dst], fmt="%d")
    plain = load_graph(f"edgelist:{path}", seed=0)
    assert plain.meta.get("features") == "degree"
    s = link_split(plain, 0.05, 0.1, seed=0)
    from gridgnn.graph.loaders import degree_features

    t = s.train_graph
    np.testing.assert_array_equal(s.train_graph.x, degree_features(t.indptr, t.indices, t.n))
    assert s.test_graph.x is s.train_graph.x and not np.array_equal(s.train_graph.x, plain.x)


def test_a_graph_link_prediction_cannot_split_is_refused():
    g = load_graph(SBM, seed=0)
    featured = Graph.from_edges(*g.edge_index(), g.n, directed=True, x=g.x,
                                edge_attr=np.ones((g.nnz, 2)))
    with pytest.raises(GridGnnError, match="edge features"):
        gridgnn.train(graph=featured, task="link", epochs=1, quiet=True)
    with pytest.raises(GridGnnError, match="graph in memory"):
        gridgnn.train(graph=g, task="link", algo="1d", nproc=2, epochs=1, quiet=True)
    weighted = Graph.from_edges(*g.edge_index(), g.n, directed=True, x=g.x, weights=np.full(g.nnz, 2.0))
    with pytest.raises(GridGnnError, match="weighted graph"):
        gridgnn.train(graph=weighted, task="link", epochs=1, quiet=True)


@pytest.mark.parametrize("citation", [False, True])
def test_an_ogbl_dataset_trains_on_its_own_split(tmp_path, citation):
    """ogbl-collab's layout (negatives against every positive: AUC and Hits@K, no MRR) and ogbl-citation2's (K
    negatives per positive: MRR too): the metrics are the trained model's scores of the dataset's own pairs, and
    the run at P = 2 (2D) equals the serial one."""
    from gridgnn.graph.links import given_split

    from ..graph.test_ogb import write_ogbl

    write_ogbl(tmp_path / "d", citation=citation)
    spec = f"ogb:{tmp_path / 'd'}"
    base = ["train", "--task", "link", "--data", spec, "--hidden", 8, "--embedding-dim", 4, "--epochs", 3,
            "--dtype", "float64", "--dropout", 0, "--hits-k", 2, "--quiet"]
    other = (base + ["--out", tmp_path / "2d", "--algo", "2d", "--nproc", 2] if citation
             else base + ["--link-split", "0.8,0.1,0.1"])  # one spawned run for the two layouts
    r, codes = cli_batch([base + ["--out", tmp_path / "serial"], other])
    assert codes == [0, 0 if citation else 2], r.stderr[-3000:]
    ser = json.loads((tmp_path / "serial" / "summary.json").read_text())
    assert ser["link_split"] == "the dataset's: split/" + ("source" if citation else "collab")
    if citation:
        dist = json.loads((tmp_path / "2d" / "summary.json").read_text())
        for k in ("final_loss", "test_auc", "val_auc", "test_hits", "test_mrr"):
            assert abs(ser[k] - dist[k]) < 1e-9, k
    else:
        assert "holds its own link split" in r.stderr
    assert (ser["test_mrr"] is None) != citation
    g = load_graph(spec)
    s = g.meta["link_split"]
    model = gridgnn.load(str(tmp_path / "serial"))
    records = [json.loads(x) for x in (tmp_path / "serial" / "metrics.jsonl").read_text().splitlines()]
    last = records[ser["model_epoch"]]  # the epoch whose parameters model.pt holds (--keep best)
    assert given_split(g, s).test_graph is g  # OGB's protocol: the training edges pass every split's messages
    z = model.predict(g)
    for name in ("val", "test"):
        pos, neg = getattr(s, name), getattr(s, f"{name}_neg")
        sp, sn = (z[pos[0]] * z[pos[1]]).sum(1), (z[neg[0]] * z[neg[1]]).sum(1)
        assert abs(auc(sp, sn) - last[f"{name}_auc"]) < 1e-12
        if citation:  # OGB's citation2: each positive ranked among its own negatives
            assert abs(hits_per_positive(sp, sn.reshape(-1, 3), 2) - last[f"{name}_hits"]) < 1e-12
            assert abs(mrr(sp, sn.reshape(-1, 3)) - last[f"{name}_mrr"]) < 1e-12
        else:
            assert abs(hits_at(sp, sn, 2) - last[f"{name}_hits"]) < 1e-12
    # the best epoch is picked by OGB's metric: MRR with negatives per positive, else Hits@K
    hist = [json.loads(x) for x in (tmp_path / "serial" / "metrics.jsonl").read_text().splitlines()]
    key = "val_mrr" if citation else "val_hits"
    assert ser["best_epoch"] == max(range(len(hist)), key=lambda i: (hist[i][key], -i))


def test_the_mlp_decoder_trains_and_the_saved_model_scores_with_it(tmp_path):
    """--decoder mlp (OGB's LinkPredictor): the last epoch's test AUC is the trained model's — embeddings and
    decoder — on the test pairs, also after model.pt is written and read back."""
    records = []
    result = gridgnn.train(**LINK, epochs=8, decoder="mlp", callbacks=[records.append], out=str(tmp_path / "run"))
    assert result["decoder"] == "mlp"
    assert records[-1]["loss"] < 0.9 * records[0]["loss"] and records[-1]["test_auc"] > records[0]["test_auc"]
    g = load_graph(SBM, seed=0)
    s = link_split(g, 0.05, 0.1, seed=0)
    neg = negative_pairs(g, s.test.shape[1], 1, seed=0, split="test")
    for model in (result.model, gridgnn.load(str(tmp_path / "run"))):
        got = auc(model.score(s.test, data=s.test_graph), model.score(neg, data=s.test_graph))
        assert abs(got - records[-1]["test_auc"]) < 1e-4
    # the exports hold the decoder too (they held the encoder alone: the pairs' scores were lost)
    model = result.model
    assert run_main(["export", "--run", tmp_path / "run", "--to", "state-dict", "--out", tmp_path / "sd.pt"]) == 0
    saved = torch.load(tmp_path / "sd.pt", weights_only=True)
    decoder = model.decoder.state_dict()
    assert decoder and all(torch.equal(saved[f"decoder.{k}"], v) for k, v in decoder.items())
    z = torch.from_numpy(model.predict(s.test_graph))
    with torch.no_grad():
        scores = model.to_pyg().decoder(z[torch.from_numpy(s.test[0])], z[torch.from_numpy(s.test[1])])
    np.testing.assert_allclose(scores.numpy(), model.score(s.test, data=s.test_graph), rtol=1e-6)


def test_link_checkpoint_resumes_bit_for_bit(tmp_path):
    """A link run (MLP decoder: its parameters and Adam state ride in the checkpoint) checkpointed at epoch 3 and
    resumed to 6 equals the uninterrupted run bit for bit (metrics, model.pt). A checkpoint whose epoch records
    carry the wire guard's per-site errors (as a ``--comm-dtype auto`` run's do) resumes too."""
    base = ["train", "--task", "link", "--data", SBM, "--hidden", 16, "--embedding-dim", 8, "--decoder", "mlp",
            "--dropout", 0.3, "--quiet", "--checkpoint-every", 3]
    r, codes = cli_batch([base + ["--epochs", 6, "--out", tmp_path / "ref"],
                          base + ["--epochs", 3, "--out", tmp_path / "res"],
                          ["train", "--resume", tmp_path / "res", "--epochs", 6, "--quiet"],
                          base + ["--epochs", 3, "--out", tmp_path / "wire"]])
    assert codes == [0] * 4, r.stderr[-3000:]
    timing = ("epoch_time_s", "eval_time_s", "comm_time_s", "compute_time_s", "compile_time_s")

    def untimed(folder):
        lines = (folder / "metrics.jsonl").read_text().splitlines()
        return [{k: v for k, v in json.loads(line).items() if k not in timing} for line in lines]

    assert untimed(tmp_path / "ref") == untimed(tmp_path / "res") and len(untimed(tmp_path / "ref")) == 6
    a, b = (torch.load(tmp_path / k / "model.pt", weights_only=True)["params"] for k in ("ref", "res"))
    assert a.keys() == b.keys() and "decoder" in a
    for name in a:
        assert all(torch.equal(x, y) for x, y in zip(a[name], b[name], strict=True)), name
    s = json.loads((tmp_path / "res" / "summary.json").read_text())
    assert s["resumed_from_epoch"] == 3 and s["epochs_trained"] == 6
    ck = torch.load(tmp_path / "wire" / "checkpoint.pt", weights_only=True)
    ck["records"][0]["wire"] = {"fwd.bcast@row": {"error": 0.002, "wire": "bfloat16"}}
    torch.save(ck, tmp_path / "wire" / "checkpoint.pt")
    assert run_main(["train", "--resume", tmp_path / "wire", "--epochs", 4, "--quiet"]) == 0
    w = json.loads((tmp_path / "wire" / "summary.json").read_text())
    assert w["resumed_from_epoch"] == 3 and w["epochs_trained"] == 4


@pytest.mark.parametrize("flags, named", [(["--decoder", "dot"], "--decoder 'dot' differs"),
                                          (["--negatives", 3], "--negatives 3 differs"),
                                          (["--link-split", "0.8,0.1,0.1"], "--link-split '0.8,0.1,0.1' differs"),
                                          (["--task", "node"], "--task 'node' differs"),
                                          (["--hits-k", 5], "--hits-k 5 differs")])
def test_a_link_resume_keeps_its_trajectory(tmp_path, capsys, flags, named):
    """What a link run's trajectory depends on cannot change on --resume (one line naming the flag, before any
    rank starts); left out, it is inherited. (The largest --seed seeds the MLP decoder too: it overflowed.)"""
    out = tmp_path / "run"
    assert run_main(["train", "--task", "link", "--data", SBM, "--decoder", "mlp", "--epochs", 1,
                     "--checkpoint-every", 1, "--quiet", "--seed", 2**63 - 1, "--out", out]) == 0
    capsys.readouterr()
    assert run_main(["train", "--resume", out, "--epochs", 2, "--quiet", *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and named in err[0], err


def test_a_hits_k_the_split_cannot_measure_is_refused_when_given_and_none_when_default():
    """Hits@K is 1.0 whatever the scores once K reaches a split's negatives (OGB's definition): a given ``--hits-k``
    there is refused before training; the default's is reported as none, not as a perfect 1.0."""
    tiny = dict(LINK, data="synthetic:sbm?n=60&classes=2&avg_degree=4&features=8", epochs=2)
    with pytest.raises(GridGnnError, match=r"--hits-k 20: the validation split holds 6 negative pairs.*"
                                           r"--hits-k 6 or less, or more --negatives"):
        gridgnn.train(**tiny, hits_k=20)
    result = gridgnn.train(**tiny)  # default K = 50 past the 6 negatives
    assert result["test_hits"] is None and result["val_hits"] is None and result["test_auc"] is not None
    result = gridgnn.train(**tiny, hits_k=5, negatives=2)
    assert result["hits_k"] == 5 and 0.0 <= result["test_hits"] <= 1.0


def test_a_split_that_measures_nothing_is_refused(tmp_path):
    """What left the metrics or the best epoch empty without a word: a fraction of the edges that rounds to no edge
    (--early-stop and --keep best then watched nothing), --hits-k with no validation or test edges, and an own
    split whose best epoch Hits@K picks when the default K is past its negatives (every epoch scored none, so the
    last was "best" and --early-stop never stopped)."""
    from ..graph.test_ogb import write_ogbl

    with pytest.raises(GridGnnError, match=r"the validation fraction 0.0001 of the graph's \d+ edges is no edge"):
        gridgnn.train(**LINK, epochs=1, link_split="0.9998,0.0001,0.0001", early_stop=1)
    with pytest.raises(GridGnnError, match="--hits-k 3 measures the validation and test edges; --link-split 1,0,0 "
                                           "holds none"):
        gridgnn.train(**LINK, epochs=1, link_split="1,0,0", hits_k=3)
    write_ogbl(tmp_path / "d")
    tiny = dict(LINK, data=f"ogb:{tmp_path / 'd'}", hidden=8, embedding_dim=4, epochs=1)
    with pytest.raises(GridGnnError, match=r"own split picks the best epoch by Hits@50 \(the default K\): the "
                                           r"validation split holds 5 negative pairs.*give --hits-k 5 or less\)"):
        gridgnn.train(**tiny)
    assert gridgnn.train(**tiny, hits_k=5)["val_hits"] is not None
