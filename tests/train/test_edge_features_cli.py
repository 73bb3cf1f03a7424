"""Edge features end to end: ``gridgnn train --model gine | gatv2`` on a graph that carries them trains serially
and distributed with the same logits (a graph handed over from Python to spawned ranks too, whose shards hold no
edge features: the ranks get the edge table), and what cannot run is one error line: a graph without edge
features, a width that differs from the data's, ``--edge-dim`` for a model that reads none, Plexus, a sharded
dataset."""
import json

import numpy as np

import gridgnn
from gridgnn.graph.spec import load_graph

from ._runs import cli_batch, run_stderr

EDGES = "synthetic:sbm?n=300&classes=3&avg_degree=6&features=8&edge_features=3"
PLAIN = "synthetic:sbm?n=300&classes=3&avg_degree=6&features=8"
COMMON = ["--epochs", 3, "--dtype", "float64", "--dropout", 0.3, "--quiet", "--save-logits"]


def logits(folder):
    return np.load(folder / "logits.npy")


def test_edge_feature_models_train_and_distributed_equals_serial(tmp_path):
    runs = {"gine-s": ["--model", "gine"], "gine-d": ["--model", "gine", "--algo", "1.5d-sa", "--nproc", 4,
                                                        "--replication", 2],
            "gatv2-s": ["--model", "gatv2", "--heads", 2, "--hidden", 4],
            "gatv2-d": ["--model", "gatv2", "--heads", 2, "--hidden", 4, "--algo", "3d", "--nproc", 4, "--grid",
                        "2,1,2"]}
    batch = [["train", "--data", EDGES, *COMMON, *argv, "--out", tmp_path / name] for name, argv in runs.items()]
    r, codes = cli_batch(batch)
    assert codes == [0] * len(batch), r.stderr[-3000:]
    for model in ("gine", "gatv2"):
        s = json.loads((tmp_path / f"{model}-d" / "summary.json").read_text())
        assert s["model"] == model and s["config"]["edge_dim"] == 3
        a, b = logits(tmp_path / f"{model}-s"), logits(tmp_path / f"{model}-d")
        assert np.abs(a - b).max() <= 1e-9 * max(1.0, np.abs(a).max()), model


def test_a_graph_handed_over_to_spawned_ranks_keeps_its_edge_features(tmp_path):
    g = load_graph(EDGES)
    out = {}
    for name, extra in (("serial", {}), ("2d", {"algo": "2d", "nproc": 4})):
        cfg = gridgnn.TrainConfig(model="gine", epochs=3, dtype="float64", quiet=True, save_logits=True,
                                  out=str(tmp_path / name), **extra)
        gridgnn.train(cfg, graph=g)
        out[name] = logits(tmp_path / name)
    assert np.abs(out["serial"] - out["2d"]).max() <= 1e-9 * max(1.0, np.abs(out["serial"]).max())


REFUSED = [
    (["--data", PLAIN, "--model", "gine"], "reads edge features (edge_attr); the graph carries none"),
    (["--data", EDGES, "--model", "gine", "--edge-dim", 2], "built for edge features 2 wide; the graph's are 3"),
    (["--data", EDGES, "--model", "gcn", "--edge-dim", 3], "--edge-dim applies to models that read edge features"),
    (["--data", EDGES, "--model", "gine", "--algo", "plexus", "--nproc", 4, "--grid", "2,2,1"],
     "sddmm_add on plexus takes per-node scores"),
]


def test_what_cannot_run_is_one_line():
    r, codes = cli_batch([["train", *argv, "--epochs", 2, "--quiet"] for argv, _ in REFUSED], segmented=True)
    assert codes == [2] * len(REFUSED), r.stderr[-2000:]
    for i, (argv, words) in enumerate(REFUSED):
        lines = [ln for ln in run_stderr(r, i).splitlines() if ln.strip()]
        assert len(set(lines)) == 1 and lines[0].startswith("gridgnn: error:") and words in lines[0], (argv, lines)


def test_a_sharded_dataset_holds_no_edge_features(tmp_path):
    r, codes = cli_batch([["shard", "--data", EDGES, "--out", tmp_path / "sh", "--blocks", "2x2"],
                          ["train", "--data", f"sharded:{tmp_path / 'sh'}", "--model", "gine", "--algo", "2d",
                           "--nproc", 4, "--epochs", 2, "--quiet"]], segmented=True)
    assert codes == [0, 2], r.stderr[-2000:]
    assert "edge features (3 wide) are not written" in r.stdout
    assert "a sharded dataset holds none" in run_stderr(r, 1)


def test_the_planner_builds_the_model_for_the_datas_edge_features(tmp_path):
    """``gridgnn simulate`` and ``plan`` settle the edge-feature width from the data, as training does."""
    r, codes = cli_batch([["simulate", "--data", EDGES, "--model", "gine", "--algo", "1d-sa", "--nproc", 4],
                          ["plan", "--data", EDGES, "--model", "gatv2", "--heads", 2, "--nproc", 4, "--top", 2]],
                         segmented=True)
    assert codes == [0, 0], r.stderr[-3000:]


def test_a_summary_reruns_with_another_model_and_gatv2_may_leave_edge_features_unread(tmp_path):
    """``--config DIR/summary.json`` with another ``--model`` drops the width the first run derived; ``gatv2
    --edge-dim 0`` trains without the edge term on data that has edge features, and the trained model is called
    PyG's way with them."""
    gine = tmp_path / "gine"
    r, codes = cli_batch([["train", "--data", EDGES, "--model", "gine", "--epochs", 2, "--quiet", "--out", gine],
                          ["train", "--config", gine / "summary.json", "--model", "gcn", "--quiet",
                           "--out", tmp_path / "gcn"],
                          ["train", "--data", EDGES, "--model", "gatv2", "--heads", 2, "--edge-dim", 0, "--epochs", 2,
                           "--quiet", "--out", tmp_path / "plain"]])
    assert codes == [0, 0, 0], r.stderr[-3000:]
    assert json.loads((tmp_path / "plain" / "summary.json").read_text())["config"]["edge_dim"] == 0
    g = load_graph(EDGES)
    import torch

    model = gridgnn.load(str(gine))
    out = model(torch.from_numpy(g.x), torch.from_numpy(g.edge_index()), edge_attr=torch.from_numpy(g.edge_attr))
    ref = model.predict(g)
    assert np.abs(out.numpy() - ref).max() <= 1e-5 * max(1.0, np.abs(ref).max())
