"""Minibatch training (MLSys'24 §6): P ranks in lockstep — uneven minibatch counts, ranks left without a minibatch
in a step, graph replicated or partitioned sampling — train exactly what one process computes by stacking each
step's minibatches (the same samples, one update on their union), float64; one process equals it too."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from gridgnn.distributed.launch import launch
from gridgnn.errors import GridGnnError
from gridgnn.graph.spec import load_graph
from gridgnn.train.data_checks import with_feature_norm
from gridgnn.partition import even_bounds
from gridgnn.sampling import minibatches, sample_bulk
from gridgnn.sampling.distributed import fetch_bytes, sampling_bytes
from gridgnn.sampling.plan import GcnNormalization, MinibatchPlan
from gridgnn.testing import minibatch_state_worker
from gridgnn.train.config import MAX_FANOUT, TrainConfig
from gridgnn.train.minibatch import neighbours, schedule
from gridgnn.train.worker import train_worker
from gridgnn.train.rank_layout import attach_edge_features
from gridgnn.train.rank_setup import build_model

DATA = "synthetic:sbm?n=240&classes=4&avg_degree=6&features=6"


def config(**kw) -> TrainConfig:
    base = dict(data=DATA, model="sage", sampler="sage", fanout="4,3", batch_size=9, bulk=2, layers=2, hidden=8,
                epochs=2, dtype="float64", dropout=0.3, lr=0.02, seed=3, quiet=True,
                keep="last")  # the parameters after the last step: what the reference trains to
    base.update(kw)
    cfg = TrainConfig(**base)
    cfg.validate()
    return cfg


def reference(cfg: TrainConfig, world: int) -> dict:
    """One process: every step's minibatches (of all ranks) stacked, the summed loss over their targets (the
    features normalized as the run's ``--feature-norm`` says: VA's unit-L2 rows)."""
    g = with_feature_norm(load_graph(cfg.data, seed=cfg.seed), cfg)
    adj = neighbours(g)
    dims = [g.num_features] + [cfg.hidden] * (cfg.layers - 1) + [g.num_classes]
    model = build_model(cfg, dims, None, torch.float64)
    gcn = GcnNormalization(g, adj)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    train = np.flatnonzero(g.train_mask & (g.y >= 0))
    y = torch.from_numpy(g.y)
    for epoch in range(cfg.epochs):
        batches = minibatches(train, cfg.model_batch_size, seed=cfg.seed, epoch=epoch)
        steps = schedule(len(batches), world, cfg.model_bulk)
        for n, (_, _, ids) in enumerate(steps):
            live = [t for t in ids if t >= 0]
            s = sample_bulk(adj, [batches[t] for t in live], cfg.model_fanouts, sampler=cfg.sampler, seed=cfg.seed,
                            epoch=epoch, batch_ids=live)
            model.train()
            model.epoch = epoch * len(steps) + n
            opt.zero_grad()
            plan = MinibatchPlan(s, gcn=gcn)
            attach_edge_features(plan, g, len(plan.graphs))
            out = model(torch.from_numpy(g.x[s.nodes[0]]).double(), plan)
            (F.cross_entropy(out, y[s.nodes[-1]], reduction="sum") / len(s.nodes[-1])).backward()
            opt.step()
    return model.state_dict()


def assert_same(state, ref):
    for k, v in ref.items():
        torch.testing.assert_close(state[k], v, rtol=1e-9, atol=1e-11, msg=k)


#: the graphs of the models that read edge features or relation types
EDGE_DATA = {"gine": DATA + "&edge_features=3", "gatv2": DATA + "&edge_features=3",
             "rgcn": "synthetic:typed-sbm?n=240&relations=3"}


@pytest.mark.parametrize("sampler,model", [("sage", "sage"), ("ladies", "sage"), ("sage", "gcn"), ("ladies", "gcn"),
                                           ("sage", "gat"), ("ladies", "va"), ("sage", "gine"), ("ladies", "rgcn")])
def test_one_process_equals_the_reference(sampler, model):
    cfg = config(sampler=sampler, model=model, fanout="4,3" if sampler == "sage" else "12,10",
                 data=EDGE_DATA.get(model, DATA))
    out = train_worker(None, cfg, return_state=True)
    assert_same(out["state"], reference(cfg, 1))
    assert out["summary"]["minibatches_per_epoch"] == len(minibatches(np.zeros(out_train(cfg)), 9))


def out_train(cfg) -> int:
    g = load_graph(cfg.data, seed=cfg.seed)
    return int((g.train_mask & (g.y >= 0)).sum())


def test_four_ranks_in_lockstep_equal_the_reference():
    """P = 4, c = 2, partitioned sampling, k = 2: the epoch's minibatches do not fill the last bulk, so some
    ranks step without a minibatch; every rank ends with the reference's parameters."""
    cfg = config(nproc=4, replication=2, sample_graph="partitioned")
    n_batches = len(minibatches(np.zeros(out_train(cfg)), 9))
    assert n_batches % (4 * 2) != 0  # uneven: the last bulk leaves ranks idle
    ranks = launch(minibatch_state_worker, 4, cfg, device="cpu", collect=True)
    ref = reference(cfg, 4)
    for r in ranks:
        assert_same(r["state"], ref)
    summary = next(r["summary"] for r in ranks if r["summary"] is not None)
    assert summary["minibatches_per_epoch"] == n_batches
    want = sampling_model(cfg, 4)
    assert want > 0 and summary["sampling_bytes_per_epoch"] == pytest.approx(want, rel=1e-12)
    assert summary["fetch_bytes_per_epoch"] == pytest.approx(fetch_model(cfg, 4), rel=1e-12)


def test_two_ranks_with_edge_features_equal_the_reference():
    """GINE on sampled minibatches over 2 ranks (graph-partitioned sampling): each rank's samples read their edges'
    features from the graph by original ids, and both ranks end with the one-process reference's parameters."""
    cfg = config(nproc=2, model="gine", data=EDGE_DATA["gine"], sample_graph="partitioned")
    ranks = launch(minibatch_state_worker, 2, cfg, device="cpu", collect=True)
    cfg.edge_dim = 3  # (settled from the data by each rank)
    ref = reference(cfg, 2)
    for r in ranks:
        assert_same(r["state"], ref)


def fetch_model(cfg: TrainConfig, world: int) -> float:
    """Bytes of the training fetches per epoch (all ranks), from the samples and the byte model."""
    g = load_graph(cfg.data, seed=cfg.seed)
    adj = neighbours(g)
    bounds = even_bounds(g.n, world // cfg.replication)
    train = np.flatnonzero(g.train_mask & (g.y >= 0))
    total = 0.0
    for epoch in range(cfg.epochs):
        batches = minibatches(train, cfg.model_batch_size, seed=cfg.seed, epoch=epoch)
        for _, _, ids in schedule(len(batches), world, cfg.model_bulk):
            fronts = [sample_bulk(adj, [batches[t]], cfg.model_fanouts, sampler=cfg.sampler, seed=cfg.seed,
                                  epoch=epoch, batch_ids=[t]).nodes[0] if t >= 0 else np.zeros(0, np.int64)
                      for t in ids]
            sent, recv = fetch_bytes(fronts, bounds, cfg.replication, 8 * g.num_features)
            assert sent.sum() == recv.sum()
            total += sent.sum()
    return total / cfg.epochs


def sampling_model(cfg: TrainConfig, world: int) -> float:
    """Bytes of the training's sampling per epoch (all ranks; the evaluation's is the evaluation's traffic)."""
    g = load_graph(cfg.data, seed=cfg.seed)
    train = np.flatnonzero(g.train_mask & (g.y >= 0))
    total = 0.0
    for epoch in range(cfg.epochs):
        batches = minibatches(train, cfg.model_batch_size, seed=cfg.seed, epoch=epoch)
        model = sampling_bytes(neighbours(g), batches, cfg.model_fanouts, world=world, c=cfg.replication,
                               k=cfg.model_bulk, sampler=cfg.sampler, seed=cfg.seed, epoch=epoch)
        total += sum(max(sent.sum(), recv.sum()) for sent, recv in model.values())
    return total / cfg.epochs


def test_minibatch_flags_are_checked():
    with pytest.raises(GridGnnError, match="--model gcn, gat, va, sage, gine, gatv2 or rgcn"):
        config(model="agnn", layers=3)
    with pytest.raises(GridGnnError, match="--algo"):
        config(algo="1d", nproc=2)
    with pytest.raises(GridGnnError, match=r"needs one size in \[1, 1048576\]"):
        config(fanout="4,3,2")
    with pytest.raises(GridGnnError, match="divide"):
        config(nproc=4, replication=3)
    with pytest.raises(GridGnnError, match="add --sampler"):
        TrainConfig(fanout="3,3").validate()
    # LADIES' default fanout is the batch size, within the bound an explicit one is held to
    assert config(sampler="ladies", fanout=None, batch_size=5_000_000).model_fanouts == [MAX_FANOUT] * 2
    assert config(sampler="ladies", fanout=None, batch_size=50).model_fanouts == [50, 50]


def test_a_fanout_list_may_start_with_every_neighbour():
    """``--fanout -1,5`` is a value (argparse took it for an unknown flag); a number-like flag is still refused."""
    from gridgnn.cli import build_parser

    args = build_parser().parse_args(["train", "--sampler", "sage", "--fanout", "-1,5", "--eval-fanout", "-1,-1"])
    assert (args.fanout, args.eval_fanout) == ("-1,5", "-1,-1")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["train", "--fanout", "-x,5"])


def test_cli_minibatch_run_writes_its_summary(tmp_path, capsys):
    """``gridgnn train --sampler ladies`` end to end in one process: metrics per epoch and the summary's minibatch
    fields; a bad minibatch flag is one error line."""
    import json

    from tests.train._runs import run_main

    out = tmp_path / "run"
    code = run_main(["train", "--data", DATA, "--model", "sage", "--sampler", "ladies", "--fanout", "40",
                     "--batch-size", "8", "--bulk", "3", "--epochs", "2", "--quiet", "--out", str(out)])
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    for key in ("minibatches_per_s", "sampling_s", "fetch_s", "compute_s", "sampling_bytes_per_epoch",
                "fetch_bytes_per_epoch"):
        assert key in summary
    assert summary["sampler"] == "ladies" and summary["fanout"] == [40, 40]
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 2
    capsys.readouterr()
    assert run_main(["train", "--sampler", "sage", "--model", "sage", "--fanout", "0,3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--fanout" in err[0]


def full_graph_logits(cfg: TrainConfig, state) -> np.ndarray:
    """The trained parameters on the whole graph (serial full-graph SAGE, eval mode): what exact inference gives."""
    from gridgnn.graph import gcn_normalize
    from gridgnn.parallel.blockrow import build_serial

    g = with_feature_norm(load_graph(cfg.data, seed=cfg.seed), cfg)
    dims = [g.num_features] + [cfg.hidden] * (cfg.layers - 1) + [g.num_classes]
    model = build_model(cfg, dims, None, torch.float64)
    model.load_state_dict(state)
    model.eval()
    with torch.no_grad():
        return model(torch.from_numpy(g.x).double(), build_serial(gcn_normalize(g), dtype=torch.float64)).numpy()


@pytest.mark.parametrize("world,model", [(1, "sage"), (4, "sage"), (1, "gcn"), (1, "gat")])
def test_saved_logits_are_exact_inference_of_the_trained_model(tmp_path, world, model):
    """``--save-logits`` with minibatches: every vertex's logits, in original order, from full-neighbourhood
    minibatches spread over the ranks, equal the trained parameters applied to the whole graph."""
    cfg = config(save_logits=True, out=str(tmp_path / f"p{world}"), eval_batch_size=50, model=model,
                 **({"nproc": 4, "replication": 2, "sample_graph": "partitioned"} if world > 1 else {}))
    if world == 1:
        state = train_worker(None, cfg, return_state=True)["state"]
    else:
        state = launch(minibatch_state_worker, 4, cfg, device="cpu", collect=True)[0]["state"]
    logits = np.load(tmp_path / f"p{world}" / "logits.npy")
    expected = full_graph_logits(cfg, state)
    assert logits.shape == expected.shape and not np.isnan(logits).any()
    assert logits.dtype == np.float64  # the run's dtype (a float32 run saves float32)
    np.testing.assert_allclose(logits, expected, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("world", [1, 2])
def test_resume_reproduces_the_uninterrupted_minibatch_run(tmp_path, world):
    """``--checkpoint-every`` / ``--resume`` with minibatches: 4 epochs in one go, or 2 then 2 more from the
    checkpoint, give the same parameters bit for bit, the same metrics lines and the same saved logits (the
    sampling and the dropout are keyed by the epoch and the step, Adam's state is in the checkpoint)."""
    import json
    import statistics

    from tests.train._runs import cli_batch

    common = ["--data", DATA, "--model", "sage", "--sampler", "sage", "--fanout", "4,3", "--batch-size", 9,
              "--bulk", 2, "--hidden", 8, "--dropout", 0.3, "--seed", 3, "--quiet", "--save-logits",
              "--nproc", world] + (["--replication", 2, "--sample-graph", "partitioned"] if world > 1 else [])
    r, codes = cli_batch([
        ["train", *common, "--epochs", 4, "--checkpoint-every", 4, "--out", tmp_path / "whole"],
        ["train", *common, "--epochs", 2, "--checkpoint-every", 1, "--out", tmp_path / "part"],
        ["train", "--resume", tmp_path / "part", "--epochs", 4, "--quiet", "--save-logits"],
        # another P sums other minibatches into a step: refused (it went on, silently another run)
        ["train", "--resume", tmp_path / "part", "--epochs", 5, "--quiet", "--nproc", 2 if world == 1 else 4],
    ])
    assert codes == [0, 0, 0, 2], r.stderr[-3000:]
    assert f"--nproc {2 if world == 1 else 4} differs from the checkpoint's {world}" in r.stderr
    assert "a resumed minibatch run keeps its process count" in r.stderr
    whole = torch.load(tmp_path / "whole" / "checkpoint.pt", weights_only=True)
    resumed = torch.load(tmp_path / "part" / "checkpoint.pt", weights_only=True)
    assert resumed["epoch"] == whole["epoch"] == 4
    for name, tensors in whole["params"].items():
        for a, b in zip(tensors, resumed["params"][name]):
            assert torch.equal(a, b), name
    drop = ("epoch_time_s", "eval_time_s", "minibatches_per_s", "sampling_s", "fetch_s", "compute_s", "compile_time_s")

    def lines(d):
        return [{k: v for k, v in json.loads(ln).items() if k not in drop}
                for ln in (d / "metrics.jsonl").read_text().splitlines()]

    assert lines(tmp_path / "part") == lines(tmp_path / "whole")
    np.testing.assert_array_equal(np.load(tmp_path / "part" / "logits.npy"),
                                  np.load(tmp_path / "whole" / "logits.npy"))
    summary = json.loads((tmp_path / "part" / "summary.json").read_text())
    assert summary["resumed_from_epoch"] == 2 and summary["epochs"] == 4
    ran = [json.loads(ln) for ln in (tmp_path / "part" / "metrics.jsonl").read_text().splitlines()][2:]
    for key, field in (("epoch_time_median_s", "epoch_time_s"), ("sampling_s", "sampling_s")):
        assert summary[key] == pytest.approx(statistics.median(r[field] for r in ran), rel=1e-6), key  # this run's
    assert json.loads((tmp_path / "whole" / "summary.json").read_text())["resumed_from_epoch"] is None
