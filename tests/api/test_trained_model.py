"""The trained model of a run: returned by gridgnn.train, written as model.pt, read back by gridgnn.load; full-graph
inference (predict) on any graph and any algorithm equals the training run's logits; the PyG export's logits equal
gridgnn's (float64)."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import gridgnn
from gridgnn.distributed.launch import launch
from gridgnn.errors import GridGnnError
from gridgnn.graph import apply_defaults
from gridgnn.train.trained import TrainedModel

from ..train._runs import run_main

SBM = "synthetic:sbm?n=300&classes=3&avg_degree=6&features=12"
BIGGER = "synthetic:sbm?n=900&classes=5&avg_degree=9&features=1433"  # same feature width, more vertices

#: (algo, grid or replication) of the P = 4 inferences: every algorithm, and both vertex orders of Plexus
LAYOUTS = [("1d", {}), ("1d-sa", {}), ("1.5d", {"replication": 2}), ("1.5d-sa", {"replication": 2}),
           ("2d", {"grid": "2,2"}), ("3d", {"grid": "1,2,2"}), ("plexus", {"grid": "2,1,2"}),
           ("plexus", {"grid": "1,2,2", "partition": "double-perm"})]


def _predict_group(ctx, model: TrainedModel, jobs):
    """Every ``(data, algo, options)`` of ``jobs`` predicted on this rank of one spawned group (rank 0: the
    logits)."""
    from gridgnn.train.rank_setup import predict_worker

    out = []
    for data, algo, options in jobs:
        cfg = model._train_config(data=data, algo=algo, nproc=ctx.world_size, **options)
        cfg.validate()
        res = predict_worker(ctx, cfg, None, model.dims, model.params)
        out.append(None if res is None else res[0])
    return out


@pytest.fixture(scope="module")
def cora_gat(cora_dir, tmp_path_factory):
    """GAT trained on Cora serially in float64 for a few epochs, with its saved logits."""
    out = tmp_path_factory.mktemp("cora-gat") / "run"
    result = gridgnn.train(data=f"planetoid:{cora_dir}", model="gat", heads=2, hidden=4, epochs=4, dtype="float64",
                           out=str(out), save_logits=True, quiet=True)
    return result, out


def test_train_returns_the_summary_and_the_model(cora_gat):
    result, out = cora_gat
    with open(out / "summary.json") as fh:
        assert json.load(fh)["test_acc"] == result["test_acc"]  # the result is the summary...
    assert isinstance(result.model, TrainedModel) and result.model.dims == [1433, 4, 7]  # ...with the model
    assert {"model.pt", "curves.png", "breakdown.png"} <= set(os.listdir(out))
    loaded = gridgnn.load(str(out))
    assert sorted(loaded.params) == sorted(result.model.params) == ["att_dst", "att_src", "biases", "weights"]
    for name, tensors in result.model.params.items():  # model.pt holds the parameters bit for bit
        assert len(tensors) == len(loaded.params[name]) == 2
        assert all(torch.equal(a, b) for a, b in zip(tensors, loaded.params[name]))
    assert loaded.summary["test_acc"] == result["test_acc"]


def test_predict_repeats_the_layer_order_of_the_run(tmp_path):
    """A ``--layer-order lean`` run (a first layer of equal widths multiplying first) is predicted in that order:
    its saved logits again, bit for bit (the other order gives them only up to rounding)."""
    out = tmp_path / "lean"
    gridgnn.train(data=SBM, model="gcn", hidden=12, layer_order="lean", epochs=2, dtype="float64", out=str(out),
                  save_logits=True, quiet=True)
    model = gridgnn.load(str(out))
    assert model._train_config(data=SBM).layer_order == "lean"
    assert np.array_equal(model.predict(SBM), np.load(out / "logits.npy"))


def test_predict_equals_the_saved_logits_on_every_algorithm(cora_gat, cora_dir):
    result, out = cora_gat
    saved = np.load(out / "logits.npy")
    model = gridgnn.load(str(out))
    assert np.array_equal(model.predict(f"planetoid:{cora_dir}"), saved)  # serial: the same computation
    assert np.array_equal(model.predict(f"planetoid:{cora_dir}", classes=True), saved.argmax(axis=1))
    jobs = [(f"planetoid:{cora_dir}", algo, options) for algo, options in LAYOUTS]
    jobs += [(BIGGER, "2d", {"grid": "2,2"}), (BIGGER, "plexus", {"grid": "2,2,1"})]
    got = launch(_predict_group, 4, model, jobs, device="cpu", collect=True)[0]
    for (data, algo, options), logits in zip(jobs[:len(LAYOUTS)], got):
        np.testing.assert_allclose(logits, saved, rtol=1e-5, atol=1e-9, err_msg=f"{algo} {options}")
    # a larger graph of the same feature width (inductive): serial and P = 4 agree
    bigger = model.predict(BIGGER)
    assert bigger.shape == (900, 7) and bigger.dtype == np.float64
    for logits in got[len(LAYOUTS):]:
        np.testing.assert_allclose(logits, bigger, rtol=1e-5, atol=1e-9)


def test_export_to_pyg_has_gridgnns_logits(cora_gat, cora_dir, tmp_path):
    """GAT exported with gridgnn export, loaded by another process with torch.load and called as a PyG model is,
    ``m(x, edge_index)``, on the raw features (the export applies the run's input pipeline; unpickling its wrapper
    imports gridgnn's small export module, its ``.net`` is plain PyG)."""
    _, out = cora_gat
    path = tmp_path / "gat.pt"
    assert run_main(["export", "--run", out, "--to", "pyg", "--out", path]) == 0
    assert run_main(["export", "--run", out, "--to", "pyg", "--out", path]) == 2  # exists: --overwrite needed
    g = gridgnn.load_graph(f"planetoid:{cora_dir}")
    np.save(tmp_path / "x.npy", g.x.astype(np.float64))
    np.save(tmp_path / "ei.npy", g.edge_index())
    code = ("import sys, numpy as np, torch, torch_geometric\n"
            f"m = torch.load({str(path)!r}, weights_only=False)\n"
            f"x = torch.from_numpy(np.load({str(tmp_path / 'x.npy')!r}))\n"
            f"ei = torch.from_numpy(np.load({str(tmp_path / 'ei.npy')!r}))\n"
            f"np.save({str(tmp_path / 'pyg.npy')!r}, m(x, ei).detach().numpy())\n"
            "assert type(m.net).__module__.startswith('torch_geometric')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    np.testing.assert_allclose(np.load(tmp_path / "pyg.npy"), np.load(out / "logits.npy"), rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("model,options", [("gcn", {}), ("agnn", {"layers": 4}), ("sage", {"aggr": "max"})])
def test_to_pyg_equals_gridgnn_on_cora(cora_dir, model, options):
    result = gridgnn.train(data=f"planetoid:{cora_dir}", model=model, epochs=3, dtype="float64", quiet=True,
                           **options)
    g = gridgnn.load_graph(f"planetoid:{cora_dir}")
    x, ei = torch.from_numpy(g.x), torch.from_numpy(g.edge_index())  # raw float32 rows, as PyG's Planetoid
    pyg = result.model.to_pyg()
    ours = result.predict(f"planetoid:{cora_dir}")
    theirs = (pyg(x, ei, None) if model == "gcn" else pyg(x, ei)).numpy()
    np.testing.assert_allclose(theirs, ours, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(result.model(x, ei).numpy(), ours, rtol=1e-12, atol=0)  # model(x, edge_index)


def test_a_model_without_pyg_equivalent_is_refused_and_exports_its_state_dict(tmp_path):
    out = tmp_path / "va"
    gridgnn.train(data=SBM, model="va", epochs=2, out=str(out), quiet=True)
    with pytest.raises(GridGnnError, match="no PyG equivalent"):
        gridgnn.load(str(out)).to_pyg()
    assert run_main(["export", "--run", out, "--to", "state-dict", "--out", tmp_path / "va.pt"]) == 0
    state = torch.load(tmp_path / "va.pt", weights_only=True)
    params = torch.load(out / "model.pt", weights_only=True)["params"]
    assert sorted(state) == ["biases_0", "biases_1", "weights_0", "weights_1"]  # add_parameter's NAME_LAYER
    assert all(torch.equal(state[f"{name}_{i}"], t) for name, ts in params.items() for i, t in enumerate(ts))
    rebuilt = gridgnn.nn.VA([12, 16, 3], dtype=torch.float32)  # the loader: the model class and load_state_dict
    rebuilt.load_state_dict(state)
    assert all(torch.equal(a, b) for a, b in zip(rebuilt.parameters(), gridgnn.load(str(out)).module.parameters()))


def test_predict_command_writes_logits_or_classes(tmp_path):
    out = tmp_path / "run"
    assert run_main(["train", "--data", SBM, "--epochs", 3, "--out", out, "--save-logits", "--quiet"]) == 0
    assert run_main(["predict", "--run", out, "--data", SBM, "--out", tmp_path / "p"]) == 0
    assert np.array_equal(np.load(tmp_path / "p.npy"), np.load(out / "logits.npy"))
    assert run_main(["predict", "--run", out, "--data", SBM, "--classes", "--out", tmp_path / "c.npy"]) == 0
    assert np.array_equal(np.load(tmp_path / "c.npy"), np.load(out / "logits.npy").argmax(axis=1))
    # refused before any work, one line: an existing --out, a graph of another feature width, no model.pt
    assert run_main(["predict", "--run", out, "--data", SBM, "--out", tmp_path / "p.npy"]) == 2
    assert run_main(["predict", "--run", out, "--data", "synthetic:sbm?n=100&features=5",
                     "--out", tmp_path / "q.npy"]) == 2
    assert run_main(["predict", "--run", tmp_path, "--out", tmp_path / "q.npy"]) == 2
    assert not (tmp_path / "q.npy").exists()


def test_a_damaged_model_file_is_one_line(tmp_path):
    out = tmp_path / "run"
    gridgnn.train(data=SBM, epochs=2, out=str(out), quiet=True)
    obj = torch.load(out / "model.pt", weights_only=True)
    obj["params"]["weights"][0] = obj["params"]["weights"][0][:3]
    torch.save(obj, out / "model.pt")
    with pytest.raises(GridGnnError, match=r"damaged: params weights\[0\] has shape"):
        gridgnn.load(str(out))
    (out / "model.pt").write_bytes(b"not a model")
    with pytest.raises(GridGnnError, match="not a readable gridgnn model file"):
        gridgnn.load(str(out))
    os.remove(out / "model.pt")
    os.mkfifo(out / "model.pt")
    with pytest.raises(GridGnnError, match="not a regular file"):
        gridgnn.load(str(out))


def test_a_minibatch_run_writes_its_model_and_curves(tmp_path):
    graph = gridgnn.load_graph(SBM)
    out = tmp_path / "mb"
    result = gridgnn.train(graph=graph, model="sage", sampler="sage", fanout=[5, 5], batch_size=64, epochs=2,
                           out=str(out), save_logits=True, dtype="float64", quiet=True)
    assert {"model.pt", "curves.png"} <= set(os.listdir(out))
    assert result["data"].startswith("in-memory:") and result["algo"] == "minibatch"
    full = gridgnn.train(graph=graph, model="sage", epochs=1, quiet=True)
    from gridgnn.train.summary import SOURCE_KEYS, summary_keys

    # one schema: each summary holds the keys of its task and batch source, in one order
    assert tuple(result) == summary_keys("node", "minibatch") and tuple(full) == summary_keys("node", "full-graph")
    assert set(result) - set(full) == set(SOURCE_KEYS["minibatch"])
    assert set(full) - set(result) == set(SOURCE_KEYS["full-graph"])
    assert all(result[k] is not None for k in SOURCE_KEYS["minibatch"])
    assert full["nnz_max_over_mean"] is not None
    assert result["fanout"] == [5, 5] and result["partition"] == "identity" and full["partition"] == "none"
    # full-graph inference of the sampled model equals its full-neighbourhood --save-logits
    np.testing.assert_allclose(result.predict(graph), np.load(out / "logits.npy"), rtol=1e-9, atol=1e-12)
    # the summary of an in-memory graph is not rerun on the embedded SBM
    assert run_main(["train", "--config", out / "summary.json"]) == 2


def test_predict_on_a_sharded_dataset_equals_its_spec_and_refuses_a_missing_reverse_edge(tmp_path):
    """Inference reads a sharded dataset as it reads the SPEC it was sharded from: an unlabelled one too (its labels
    were None: a TypeError on every rank); a model trained on a symmetrized graph refuses a directed sharded dataset,
    whose shards cannot gain the reverse edges the in-memory path adds (it gave other logits, silently)."""
    r = np.random.default_rng(0)
    n = 60
    src, dst = r.integers(0, n, 300), r.integers(0, n, 300)
    keep = src != dst
    src, dst = src[keep], dst[keep]
    graph = apply_defaults(gridgnn.Graph.from_edges(src, dst, n, directed=False, y=r.integers(0, 3, n)))
    result = gridgnn.train(graph=graph, epochs=2, quiet=True, dtype="float64")
    edges = tmp_path / "edges.txt"
    edges.write_text("".join(f"{a} {b}\n" for a, b in zip(src, dst)))  # no labels
    for directed in (0, 1):
        gridgnn.shard(f"edgelist:{edges}?directed={directed}", str(tmp_path / f"sh{directed}"), blocks="1x1",
                      method="identity")
    want = result.predict(f"edgelist:{edges}?directed=0")
    np.testing.assert_array_equal(result.predict(f"sharded:{tmp_path / 'sh0'}", algo="1d", nproc=1), want)
    np.testing.assert_array_equal(result.predict(f"edgelist:{edges}?directed=1"), want)  # (reverse edges added)
    with pytest.raises(GridGnnError, match="trained on a symmetrized graph .* holds a directed one"):
        result.predict(f"sharded:{tmp_path / 'sh1'}", algo="1d", nproc=1)


def test_predict_outputs_name_a_file_and_overwrite_leaves_no_stale_ids(tmp_path, capsys):
    """``--out DIR/`` wrote a hidden ``DIR/.npy``; an ``--overwrite`` of a run that wrote ``FILE.node_ids.npy`` (a
    relabelled edge list) by one without ids left the old ids beside the new rows."""
    run = tmp_path / "run"
    edges = tmp_path / "edges.txt"
    edges.write_text("".join(f"{3 * k} {3 * k + 7}\n{3 * k + 7} {3 * k}\n" for k in range(40)))
    assert run_main(["train", "--data", "npz:" + str(_labelled_npz(tmp_path)), "--epochs", 1, "--quiet",
                     "--out", run]) == 0
    out = tmp_path / "o"
    assert run_main(["predict", "--run", run, "--data", f"edgelist:{edges}?relabel=1", "--out", out]) == 0
    assert np.load(f"{out}.node_ids.npy").size == np.load(f"{out}.npy").shape[0] == 80
    assert run_main(["predict", "--run", run, "--data", f"edgelist:{edges}", "--out", out, "--overwrite"]) == 0
    assert np.load(f"{out}.npy").shape[0] == 125 and not os.path.exists(f"{out}.node_ids.npy")
    capsys.readouterr()
    (tmp_path / "d").mkdir()
    assert run_main(["predict", "--run", run, "--data", f"edgelist:{edges}", "--out", f"{tmp_path / 'd'}/"]) == 2
    assert "names a folder" in capsys.readouterr().err
    assert list((tmp_path / "d").iterdir()) == []


def _labelled_npz(tmp_path):
    """A small labelled graph without features (degree features, as an edge list gets)."""
    from gridgnn.graph import save_npz

    r = np.random.default_rng(1)
    src, dst = r.integers(0, 50, 200), r.integers(0, 50, 200)
    g = gridgnn.Graph.from_edges(src, dst, 50, directed=False, y=r.integers(0, 3, 50))
    return save_npz(g, tmp_path / "lab.npz")


def test_predict_over_a_previous_result_never_pairs_new_logits_with_old_ids(tmp_path, monkeypatch):
    """--overwrite removed the previous FILE.node_ids.npy only when the new result had no ids: a failure between the
    two writes (a full disk) left the new logits beside the old run's ids."""
    import contextlib

    import gridgnn.graph.files as files

    out = tmp_path / "run"
    assert run_main(["train", "--data", SBM, "--epochs", 2, "--out", out, "--quiet"]) == 0
    from gridgnn.graph.loaders import save_npz

    g = gridgnn.load_graph(SBM)
    data = save_npz(g.with_(original_ids=np.arange(g.n) * 10), tmp_path / "ids.npz")  # a file's own vertex ids
    pred = tmp_path / "p.npy"
    pred.write_bytes(b"old")
    (tmp_path / "p.node_ids.npy").write_bytes(b"old ids")
    real = files.atomic_write

    @contextlib.contextmanager
    def failing(path, *a, **kw):
        if str(path).endswith(".node_ids.npy"):
            raise OSError(28, "No space left on device")
        with real(path, *a, **kw) as fh:
            yield fh

    monkeypatch.setattr(files, "atomic_write", failing)
    with pytest.raises(OSError):
        run_main(["predict", "--run", out, "--data", f"npz:{data}", "--overwrite", "--out", pred])
    assert not (tmp_path / "p.node_ids.npy").exists()
