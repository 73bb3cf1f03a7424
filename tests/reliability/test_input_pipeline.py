"""The input pipeline travels with the model (issue 42): what training did to the data before the first layer
(feature normalization, degree features, the duplicate-edge rule) is recorded in model.pt and applied by predict
and by the PyG export, so PyG's own copy of Cora, or a Data with duplicate edges, gives gridgnn's numbers; an older
model.pt without the record still loads; silent choices (degree features, a random split) say so; a float
edge_index is refused."""
import io
import shutil

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

import gridgnn
from gridgnn.errors import GridGnnError
from gridgnn.train.model_file import read_model_file, write_model_file


@pytest.fixture(scope="module")
def pyg_cora(cora_dir, tmp_path_factory):
    """PyG's own Planetoid dataset object built from the same raw files (raw 0/1 features)."""
    from torch_geometric.datasets import Planetoid

    root = tmp_path_factory.mktemp("pyg")
    raw = root / "Cora" / "raw"
    raw.mkdir(parents=True)
    for f in cora_dir.glob("ind.cora.*"):
        shutil.copy(f, raw / f.name)
    return Planetoid(str(root), "Cora")[0]


@pytest.fixture(scope="module")
def cora_models(cora_dir):
    """GCN and GAT trained on planetoid: for 5 epochs, serially, in float64."""
    return {m: gridgnn.train(data=f"planetoid:{cora_dir}", model=m, epochs=5, dtype="float64", quiet=True,
                             **({"heads": 2, "hidden": 4} if m == "gat" else {}))
            for m in ("gcn", "gat")}


def _roundtrip(module):
    """What a user gets back from ``gridgnn export --to pyg`` (torch.save, then torch.load)."""
    buf = io.BytesIO()
    torch.save(module, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=False)


@pytest.mark.parametrize("model", ["gcn", "gat"])
def test_export_on_pyg_planetoid_equals_predict(cora_models, cora_dir, pyg_cora, model):
    result = cora_models[model]
    rec = result["input_pipeline"]
    assert rec["feature_norm"] == "row" and result["feature_norm"] == "row" and rec["features"] == "given"
    assert result.model.input_pipeline == rec
    ours = result.predict(pyg_cora)  # PyG's raw 0/1 rows: row-normalized as in training
    assert np.allclose(ours, result.predict(f"planetoid:{cora_dir}"), rtol=1e-9, atol=1e-12)
    exported = _roundtrip(result.model.to_pyg())
    with torch.no_grad():
        theirs = exported(pyg_cora.x, pyg_cora.edge_index)  # as a PyG user calls a model: no edge weights
    assert np.allclose(theirs.numpy(), ours, rtol=1e-6, atol=1e-6), np.abs(theirs.numpy() - ours).max()
    assert (theirs.argmax(1).numpy() == ours.argmax(1)).all()


def test_model_file_without_the_record_loads_with_the_old_behaviour(cora_models, cora_dir, tmp_path):
    model = cora_models["gcn"].model
    write_model_file(str(tmp_path / "model.pt"), {k: v for k, v in model.config.items() if k != "input_pipeline"},
                     model.dims, model.params, 5)
    assert "input_pipeline" not in read_model_file(str(tmp_path))["config"]
    old = gridgnn.load(str(tmp_path))
    assert old.input_pipeline is None and old.config["feature_norm"] == "auto"
    # the features "as loaded" then were planetoid's row-normalized ones: the same logits
    assert np.allclose(old.predict(f"planetoid:{cora_dir}"), model.predict(f"planetoid:{cora_dir}"),
                       rtol=1e-9, atol=1e-12)
    # a damaged record is one line
    bad = dict(model.config, input_pipeline={"version": 99})
    write_model_file(str(tmp_path / "bad.pt"), bad, model.dims, model.params, 5)
    with pytest.raises(GridGnnError, match="input_pipeline record"):
        gridgnn.load(str(tmp_path / "bad.pt"))


def _multigraph(seed: int = 0, n: int = 60, m: int = 240, features: int | None = 6):
    r = np.random.default_rng(seed)
    src, dst = r.integers(0, n, m), r.integers(0, n, m)
    keep = src != dst
    src, dst = src[keep], dst[keep]
    src, dst = np.r_[src, src[:30]], np.r_[dst, dst[:30]]  # 30 edges given twice (at least)
    y = torch.from_numpy(r.integers(0, 3, n))
    data = Data(edge_index=torch.from_numpy(np.stack([src, dst])), y=y, num_nodes=n)
    if features:
        data.x = torch.from_numpy(r.random((n, features)).astype(np.float32))
    split = torch.from_numpy(np.arange(n) % 3)
    data.train_mask, data.val_mask, data.test_mask = split == 0, split == 1, split == 2
    return data


@pytest.mark.parametrize("model", ["gcn", "gat", "sage"])
def test_duplicate_edges_give_the_same_logits_through_gridgnn_and_the_export(model, capsys):
    data = _multigraph()
    result = gridgnn.train(graph=data, model=model, epochs=3, dtype="float64", log_every=0)
    assert "duplicate edges merged" in capsys.readouterr().out
    ours = result.predict(data)
    exported = _roundtrip(result.model.to_pyg())
    with torch.no_grad():
        theirs = exported(data.x, data.edge_index).numpy()
    assert np.allclose(theirs, ours, rtol=1e-7, atol=1e-9), np.abs(theirs - ours).max()
    assert np.allclose(result.model(data.x, data.edge_index).numpy(), ours, rtol=1e-9, atol=1e-12)
    if model == "gcn":  # weighted duplicates: their weights add up, in both
        w = torch.rand(data.edge_index.shape[1], generator=torch.Generator().manual_seed(1), dtype=torch.float64)
        data.edge_weight = w
        ours = result.predict(data)
        with torch.no_grad():
            theirs = exported(data.x, data.edge_index, edge_weight=w).numpy()
        assert np.allclose(theirs, ours, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("model", ["gcn", "gat", "sage"])
def test_the_export_reads_the_edges_gridgnn_reads(model):
    """Edges of weight 0 (gridgnn's normalized matrix stores none, so GAT and SAGE never see them) are left out by
    the export given ``edge_weight=``; a self-loop of the data, which SAGE does not aggregate (its PyG layer does),
    is left out before SAGE's layers; an ``edge_type`` given to a model that reads none is ignored (it merged
    duplicates per relation). Each gave other logits than ``predict`` before."""
    data = _multigraph(seed=3)
    n = data.num_nodes
    loops = torch.arange(0, n, 7)
    data.edge_index = torch.cat([data.edge_index, torch.stack([loops, loops])], dim=1)  # self-loops of the data
    w = torch.rand(data.edge_index.shape[1], generator=torch.Generator().manual_seed(2), dtype=torch.float64) + 0.5
    w[::5] = 0.0  # (the duplicates' weights add: a pair given twice keeps weight 0 only where both are)
    w[data.edge_index[0] == data.edge_index[1]] = 0.7  # (a self-loop of weight 0: GAT's PyG layer re-adds it)
    result = gridgnn.train(graph=data, model=model, epochs=3, dtype="float64", log_every=0)
    exported = _roundtrip(result.model.to_pyg())
    weighted = data.clone()
    weighted.edge_weight = w
    ours = result.predict(weighted)
    with torch.no_grad():
        theirs = exported(data.x, data.edge_index, edge_weight=w).numpy()
        typed = exported(data.x, data.edge_index, edge_weight=w,
                         edge_type=torch.arange(data.edge_index.shape[1]) % 3).numpy()
    assert np.allclose(theirs, ours, rtol=1e-7, atol=1e-9), np.abs(theirs - ours).max()
    assert np.allclose(typed, ours, rtol=1e-7, atol=1e-9), np.abs(typed - ours).max()
    assert np.allclose(result.model(data.x, data.edge_index, w).numpy(), ours, rtol=1e-9, atol=1e-12)


def test_the_export_reads_float64_features_in_float32_as_gridgnn_loads_them():
    """gridgnn's loaders hold features in float32; the export read a float64 x as given (logits about 1e-8 off)."""
    data = _multigraph(seed=4)
    data.x = torch.from_numpy(np.random.default_rng(4).random((data.num_nodes, 6)))  # float64, not float32-exact
    result = gridgnn.train(graph=data, model="gcn", epochs=2, dtype="float64", log_every=0)
    with torch.no_grad():
        theirs = result.model.to_pyg()(data.x, data.edge_index).numpy()
    np.testing.assert_allclose(theirs, result.predict(data), rtol=1e-12, atol=1e-14)


def test_an_export_that_reads_relations_asks_for_them():
    from gridgnn.graph.hetero import typed_sbm_graph

    g = typed_sbm_graph(n=60, types=2, relations=3, features=4, seed=0)
    result = gridgnn.train(graph=g, model="rgcn", epochs=1, hidden=4, log_every=0)
    src, dst = g.edge_index()
    with pytest.raises(ValueError, match="reads relation types: give edge_type="):
        result.model.to_pyg()(torch.from_numpy(g.x), torch.from_numpy(np.stack([src, dst])))


def test_typed_duplicates_merge_like_every_edge():
    from gridgnn.graph import Graph

    g = Graph.from_edges([0, 0, 0, 1], [1, 1, 1, 2], 3, edge_type=[0, 0, 1, 0])
    assert g.edge_type_counts.tolist() == [[1, 1], [1, 0]] and g.meta["duplicate_edges_merged"] == 1


def test_featureless_data_without_masks_says_so_and_records_it(capsys):
    data = _multigraph(features=None)
    del data.train_mask, data.val_mask, data.test_mask
    result = gridgnn.train(graph=data, model="gcn", epochs=2, log_every=0)
    out = capsys.readouterr().out
    assert "no node features (x): training on 3 degree features" in out
    assert "no train/val/test masks: using a random 60/20/20 (seed 0) split" in out
    rec = result["input_pipeline"]
    assert rec["features"] == "degree" and rec["split"] == "random 60/20/20 (seed 0)"
    gridgnn.train(graph=data, model="gcn", epochs=1, quiet=True)
    assert capsys.readouterr().out == ""  # quiet: nothing
    # predict: a graph without x gets the degree features again; one with features of its own is refused as such
    ours = result.predict(data)
    with torch.no_grad():
        theirs = _roundtrip(result.model.to_pyg())(None, data.edge_index, num_nodes=data.num_nodes).numpy()
    assert np.allclose(theirs, ours, rtol=1e-5, atol=1e-6)
    with pytest.raises(GridGnnError, match="trained on degree features"):
        result.predict(_multigraph(features=3))
    # and a model trained on given features, handed a graph without any, does not speak of 3 features
    given = gridgnn.train(graph=_multigraph(features=6), model="gcn", epochs=1, quiet=True)
    with pytest.raises(GridGnnError, match=r"the graph has no node features \(x\); the model was trained on 6"):
        given.predict(data)


def test_float_edge_index_is_refused():
    data = _multigraph()
    data.edge_index = data.edge_index.double()
    with pytest.raises(GridGnnError, match="integer vertex ids") as err:
        gridgnn.train(graph=data, model="gcn", epochs=1, quiet=True)
    assert "\n" not in str(err.value)
    model = gridgnn.train(graph=_multigraph(), model="gcn", epochs=1, quiet=True).model
    with pytest.raises(ValueError, match="integer vertex ids"):
        model.to_pyg()(data.x, data.edge_index)


@pytest.mark.parametrize("featured,weighted", [(True, True), (False, False)])
def test_a_symmetrized_training_graph_symmetrizes_a_directed_one_at_inference(featured, weighted):
    """A loader that added the reverse edges (?directed=0, planetoid:) is recorded: predict and the export add them
    to a directed copy of the graph too, so it gives the logits of the undirected one (degree features counted on
    the symmetrized edges)."""
    rng = np.random.default_rng(4)
    n = 40
    src, dst = rng.integers(0, n, 120), rng.integers(0, n, 120)
    keep = src != dst
    src, dst = src[keep], dst[keep]
    w = rng.uniform(0.5, 2.0, src.size) if weighted else None
    node = {"y": rng.integers(0, 3, n)}
    if featured:
        node["x"] = rng.normal(size=(n, 5)).astype(np.float32)
    from gridgnn.graph.loaders import apply_defaults

    undirected = apply_defaults(gridgnn.Graph.from_edges(src, dst, n, weights=w, directed=False, **node))
    result = gridgnn.train(graph=undirected, epochs=3, hidden=8, dtype="float64", quiet=True)
    assert result["input_pipeline"]["symmetrize"] is True
    ours = result.predict(undirected)
    # the user's own copy: one direction of each edge (the larger weight where both were given)
    coo = undirected.csr().tocoo()
    lower = coo.row > coo.col  # destination above source: one direction of each undirected edge
    data = Data(edge_index=torch.from_numpy(np.stack([coo.col[lower], coo.row[lower]]).astype(np.int64)),
                num_nodes=n)
    assert gridgnn.load_graph(data).directed
    if weighted:
        data.edge_weight = torch.from_numpy(coo.data[lower])
    if featured:
        data.x = torch.from_numpy(node["x"])
    assert np.allclose(result.predict(data), ours, rtol=1e-12, atol=1e-12)
    exported = _roundtrip(result.model.to_pyg())
    with torch.no_grad():
        kw = {"edge_weight": data.edge_weight} if weighted else {}
        theirs = exported(data.x if featured else None, data.edge_index, num_nodes=n, **kw).numpy()
    assert np.allclose(theirs, ours, rtol=1e-6, atol=1e-9), np.abs(theirs - ours).max()
    directed = gridgnn.train(graph=apply_defaults(gridgnn.Graph.from_edges(src, dst, n, directed=True, **node)),
                             epochs=1, quiet=True)
    assert directed["input_pipeline"]["symmetrize"] is False
