"""What a trained model's inference and PyG export read from the graph they are handed: a model trained on
features of its own refuses a graph without them (degree features are no substitute), ``--model`` naming another
model than the run's is refused, and the export reads edge features and weights as gridgnn does (in the run's
dtype, required where the layers read them, ignored where they read none, zero-weight edges left out)."""
import numpy as np
import pytest
import torch
from torch_geometric.data import Data

import gridgnn
from gridgnn.errors import GridGnnError
from gridgnn.nn import GATv2, GINE
from gridgnn.nn.pyg_export import PygExport


@pytest.fixture(scope="module")
def given_features_run(tmp_path_factory):
    """GCN trained on 3 features of its own (as many as gridgnn's degree features)."""
    r = np.random.default_rng(3)
    n = 40
    ei = torch.from_numpy(np.stack([r.integers(0, n, 150), r.integers(0, n, 150)]))
    data = Data(edge_index=ei, x=torch.randn(n, 3, generator=torch.Generator().manual_seed(1)),
                y=torch.from_numpy(r.integers(0, 3, n)), num_nodes=n)
    out = tmp_path_factory.mktemp("given3") / "run"
    gridgnn.train(graph=data, model="gcn", epochs=2, out=str(out), quiet=True)
    return out, ei, n


def test_a_model_on_given_features_refuses_a_graph_without_them(given_features_run):
    out, ei, n = given_features_run
    model = gridgnn.load(str(out))
    with pytest.raises(GridGnnError, match="no node features"):
        model.predict(Data(edge_index=ei, num_nodes=n))
    with pytest.raises(GridGnnError, match="no node features"):
        model(None, ei, num_nodes=n)


def test_load_refuses_another_model_than_the_runs(given_features_run):
    out, _, _ = given_features_run
    with pytest.raises(GridGnnError, match="another model than the run's"):
        gridgnn.load(str(out), model="gat")
    assert gridgnn.load(str(out), model="gcn").config["model"] == "gcn"


def test_load_takes_the_runs_model_by_another_name_of_the_same_class(given_features_run, monkeypatch):
    """A model of one's own registered under a name when its module is imported: the command line names it by
    import path (the run recorded the registered name); the two are the same class, so they agree."""
    from gridgnn.nn import GCN, MODELS

    out, _, _ = given_features_run
    monkeypatch.setitem(MODELS, "tests.api.test_export_inputs:GCN", GCN)  # as resolve_model would register it
    assert gridgnn.load(str(out), model="tests.api.test_export_inputs:GCN").dims[0] == 3


def _graph(seed=5, n=20, m=60, d=3):
    r = np.random.default_rng(seed)
    pairs = sorted({(int(a), int(b)) for a, b in zip(r.integers(0, n, m), r.integers(0, n, m)) if a != b})
    ei = torch.tensor(pairs, dtype=torch.long).T
    return torch.randn(n, 7, dtype=torch.float64), ei, torch.randn(ei.shape[1], d, dtype=torch.float64)


@pytest.mark.parametrize("cls", [GINE, GATv2])
def test_export_reads_edge_features_in_the_models_dtype_and_requires_them(cls):
    x, ei, ea = _graph()
    model = cls([7, 5, 3], edge_dim=3, dropout=0.0, seed=2, dtype=torch.float64)
    export = PygExport(model.to_pyg(), edge_dim=3)
    want = export.net(x, ei, ea)
    got = export(x, ei, edge_attr=ea.float())  # the loaders' float32 edge features, cast as gridgnn casts them
    assert got.dtype == torch.float64
    assert torch.allclose(got, export.net(x.float().double(), ei, ea.float().double()), rtol=0, atol=0)
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="reads edge features 3 wide"):
        export(x, ei)
    with pytest.raises(ValueError, match="reads edge features 3 wide"):
        export(x, ei, edge_attr=ea[:, :2])
    one = PygExport(cls([7, 5, 3], edge_dim=1, dropout=0.0, seed=2, dtype=torch.float64).to_pyg(), edge_dim=1)
    assert torch.equal(one(x, ei, edge_attr=ea[:, 0]), one(x, ei, edge_attr=ea[:, :1]))  # [E] reads as [E, 1]
    assert torch.equal(PygExport(export.net)(x, ei, edge_attr=ea), export(x, ei, edge_attr=ea))  # width not told


def test_export_of_gatv2_without_edge_features_ignores_given_ones():
    x, ei, ea = _graph()
    model = GATv2([7, 5, 3], edge_dim=0, dropout=0.0, seed=2, dtype=torch.float64)
    export = PygExport(model.to_pyg(), edge_dim=0)
    assert torch.equal(export(x, ei, edge_attr=ea), export(x, ei))


def test_export_reads_weights_in_the_models_dtype_and_drops_a_zero_weight_self_loop_where_gridgnn_does():
    from gridgnn.nn import GCN

    x, ei, ea = _graph()
    w = torch.rand(ei.shape[1], dtype=torch.float64) + 0.5
    gcn = GCN([7, 5, 3], dropout=0.0, seed=2, dtype=torch.float32)
    export = PygExport(gcn.to_pyg())
    assert export(x, ei, edge_weight=w).dtype == torch.float32  # a float64 weight on a float32 model
    # GINE aggregates no zero-weight edge (gridgnn's matrix stores none), a self-loop of weight 0 included
    gine = GINE([7, 5, 3], edge_dim=3, dropout=0.0, seed=2, dtype=torch.float64)
    export = PygExport(gine.to_pyg(), edge_dim=3)
    loop = torch.tensor([[4], [4]])
    with_loop = export(x, torch.cat([ei, loop], 1), edge_attr=torch.cat([ea, torch.ones(1, 3, dtype=ea.dtype)]),
                       edge_weight=torch.cat([torch.ones(ei.shape[1], dtype=torch.float64), torch.zeros(1)]))
    assert torch.equal(with_loop, export(x, ei, edge_attr=ea))


def test_export_refuses_edges_gridgnn_refuses():
    """Out-of-range vertex or relation ids, a weight or feature row missing per edge, negative or non-finite weights
    and non-finite edge features: one ValueError naming the problem (PyG's layers would index out of range, or
    normalize by a negative degree without a word)."""
    from gridgnn.nn import GCN, RGCN

    x, ei, ea = _graph()
    m = ei.shape[1]
    gcn = PygExport(GCN([7, 5, 3], dropout=0.0, seed=2, dtype=torch.float64).to_pyg())
    with pytest.raises(ValueError, match="vertex id 20, out of range for 20 vertices"):
        gcn(x, torch.cat([ei, torch.tensor([[0], [20]])], 1))
    with pytest.raises(ValueError, match="vertex id -1"):
        gcn(x, torch.cat([ei, torch.tensor([[-1], [0]])], 1))
    with pytest.raises(ValueError, match="2 × edges"):
        gcn(x, ei.T.contiguous()[:5])
    with pytest.raises(ValueError, match="edge_weight must hold one value per edge"):
        gcn(x, ei, edge_weight=torch.ones(m - 1))
    # a model that reads no edge features ignores a generic data.edge_attr, unchecked
    assert torch.equal(gcn(x, ei, edge_attr=torch.full((m, 2), float("nan"))), gcn(x, ei))
    w = torch.ones(m, dtype=torch.float64)
    w[3] = -0.5
    with pytest.raises(ValueError, match=f"edge {int(ei[0, 3])} -> {int(ei[1, 3])} has weight -0.5"):
        gcn(x, ei, edge_weight=w)
    w[3] = float("nan")
    with pytest.raises(ValueError, match="edge_weight holds values that are not finite"):
        gcn(x, ei, edge_weight=w)
    gine = PygExport(GINE([7, 5, 3], edge_dim=3, dropout=0.0, seed=2, dtype=torch.float64).to_pyg(), edge_dim=3)
    bad = ea.clone()
    bad[0, 1] = float("inf")
    with pytest.raises(ValueError, match="edge_attr holds values that are not finite"):
        gine(x, ei, edge_attr=bad)
    with pytest.raises(ValueError, match="edge_attr must hold one row per edge"):
        gine(x, ei, edge_attr=ea[:-1])
    rgcn = PygExport(RGCN([7, 5, 3], num_relations=2, dropout=0.0, seed=2, dtype=torch.float64).to_pyg())
    kinds = torch.arange(m) % 2
    assert rgcn(x, ei, edge_type=kinds).shape == (20, 3)
    with pytest.raises(ValueError, match=r"relation id 2, out of range \(valid 0..1\)"):
        rgcn(x, ei, edge_type=kinds + (torch.arange(m) == 7).long())
    with pytest.raises(ValueError, match="integer relation ids"):
        rgcn(x, ei, edge_type=kinds.double())


def test_export_counts_degree_features_per_vertex_pair_as_the_loader_does(tmp_path):
    """An R-GCN trained on degree features (a typed graph without features, as PyG's Entities datasets): pairs
    joined by two relations count once in the degrees, as the loader counted them, so PyG's own edges and types
    without x give the trained model's logits (the export counted relation edges: 0.75 apart)."""
    from gridgnn.graph import Graph

    rng = np.random.default_rng(7)
    n, relations = 30, 3
    src, dst, kind = rng.integers(0, 28, 90), rng.integers(0, 28, 90), rng.integers(0, relations, 90)
    src, dst = np.r_[src, src[:8]], np.r_[dst, dst[:8]]
    kind = np.r_[kind, (kind[:8] + 1) % relations]  # 8 pairs joined by a second relation
    split = np.arange(n) % 3
    g = Graph.from_edges(src, dst, n, edge_type=kind, num_relations=relations, y=np.arange(n) % 3,
                         train_mask=split == 0, val_mask=split == 1, test_mask=split == 2)
    from gridgnn.graph.loaders import save_npz

    save_npz(g, tmp_path / "typed.npz")  # saved without features: the loader gives it degree features
    g = gridgnn.load_graph(f"npz:{tmp_path / 'typed.npz'}")
    assert g.meta.get("features") == "degree"
    result = gridgnn.train(graph=g, model="rgcn", epochs=2, dtype="float64", hidden=6, dropout=0.0, quiet=True)
    net = result.model.to_pyg()
    got = net(None, torch.tensor(np.stack([src, dst])), edge_type=torch.tensor(kind), num_nodes=n)
    np.testing.assert_allclose(got.double().numpy(), result.model.predict(g), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("model", ["sage", "gcn"])
def test_edges_out_of_a_vertex_of_weighted_degree_zero_stay_in_the_pattern(model):
    """Vertex 0 has a self-loop of weight 0 and no weighted edge in, so GCN's degree of it is 0 and its normalized
    out-edges are 0; they are still edges for the layers that aggregate over the pattern (SAGE dropped them: 1.05
    off PyG's SAGEConv on the same edges and weights), and GCN stays PyG's gcn_norm."""
    from gridgnn.graph import Graph

    rng = np.random.default_rng(4)
    n = 30
    pairs = sorted({(int(a), int(b)) for a, b in zip(rng.integers(1, 28, 80), rng.integers(1, 28, 80)) if a != b})
    pairs += [(0, k) for k in range(1, 6)] + [(0, 0)]
    src, dst = np.array(pairs).T
    w = rng.uniform(0.5, 2, src.size)
    w[-1] = 0.0
    x = rng.normal(size=(n, 5)).astype(np.float32)
    split = np.arange(n) % 3
    g = Graph.from_edges(src, dst, n, weights=w, directed=True, x=x, y=np.arange(n) % 3, train_mask=split == 0,
                         val_mask=split == 1, test_mask=split == 2)
    result = gridgnn.train(graph=g, model=model, epochs=2, dtype="float64", hidden=6, dropout=0.0, quiet=True)
    got = result.model.to_pyg()(torch.tensor(x), torch.tensor(np.stack([src, dst])), edge_weight=torch.tensor(w))
    np.testing.assert_allclose(got.double().numpy(), result.model.predict(g), rtol=1e-9, atol=1e-12)


def test_gatv2_fills_self_loops_with_the_mean_of_the_edges_it_aggregates():
    """A self-loop GATv2 adds takes the mean of the features of the edges into its vertex (PyG's
    ``fill_value="mean"``); an edge of weight 0 is no edge of gridgnn's matrix, so its features are no part of
    that mean (they were: 1e-2 off the export given ``edge_weight=``, which leaves the edge out), on every rank
    alike (a spawned rank's edge table carries the weights)."""
    from gridgnn.graph import Graph

    rng = np.random.default_rng(6)
    n = 30
    pairs = sorted({(int(a), int(b)) for a, b in zip(rng.integers(0, n, 120), rng.integers(0, n, 120)) if a != b})
    src, dst = np.array(pairs).T
    w = rng.uniform(0.5, 2, src.size)
    w[::4] = 0.0
    ea = rng.normal(size=(src.size, 3))
    x = rng.normal(size=(n, 5)).astype(np.float32)  # (the export reads x in float32, as the loaders hold it)
    split = np.arange(n) % 3
    g = Graph.from_edges(src, dst, n, weights=w, directed=True, x=x, y=np.arange(n) % 3, edge_attr=ea,
                         train_mask=split == 0, val_mask=split == 1, test_mask=split == 2)
    opts = dict(graph=g, model="gatv2", epochs=2, dtype="float64", hidden=6, dropout=0.0, quiet=True)
    serial = gridgnn.train(**opts)
    want = serial.model.predict(g)
    got = serial.model.to_pyg()(torch.tensor(x), torch.tensor(np.stack([src, dst])), edge_attr=torch.tensor(ea),
                                edge_weight=torch.tensor(w))
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-9, atol=1e-12)
    ranks = gridgnn.train(**opts, algo="1d", nproc=2)
    np.testing.assert_allclose(ranks.model.predict(g), want, rtol=1e-7, atol=1e-10)
