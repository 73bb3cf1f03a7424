"""Heterogeneous graphs: a PyG ``HeteroData`` converts with every type's features (in its own columns), labels,
masks and ids kept and each edge type a relation; ``synthetic:typed-sbm`` has the relations and class shifts it
documents (counted by brute force); R-GCN trains on it from the command line and ``--save-logits`` maps its rows
back to each vertex type."""
import json

import numpy as np
import pytest
import torch
from torch_geometric.data import HeteroData

from gridgnn.errors import GridGnnError
from gridgnn.graph import Graph, load_graph
from gridgnn.graph.hetero import typed_sbm_graph


def hetero_data(seed: int = 0) -> HeteroData:
    r = np.random.default_rng(seed)
    d = HeteroData()
    d["paper"].x = torch.from_numpy(r.normal(size=(12, 5)))
    d["paper"].y = torch.from_numpy(r.integers(0, 3, 12))
    d["paper"].train_mask = torch.from_numpy(np.arange(12) < 6)
    d["author"].x = torch.from_numpy(r.normal(size=(7, 3)))
    d["venue"].num_nodes = 4  # no features: one column of ones
    d["author", "writes", "paper"].edge_index = torch.from_numpy(np.stack([r.integers(0, 7, 20), r.integers(0, 12, 20)]))
    d["paper", "rev_writes", "author"].edge_index = d["author", "writes", "paper"].edge_index.flip(0)
    d["paper", "in", "venue"].edge_index = torch.from_numpy(np.stack([np.arange(12), np.arange(12) % 4]))
    return d


def test_heterodata_converts_every_type():
    d = hetero_data()
    g = load_graph(d)
    assert g.node_types == {"names": ["paper", "author", "venue"], "offsets": [0, 12, 19, 23]}
    assert g.meta["relations"] == ["author__writes__paper", "paper__rev_writes__author", "paper__in__venue"]
    assert g.x.shape == (23, 5 + 3 + 1) and g.meta["feature_columns"] == [0, 5, 8]
    assert np.allclose(g.x[:12, :5], d["paper"].x.numpy()) and not g.x[:12, 5:].any()
    assert np.allclose(g.x[12:19, 5:8], d["author"].x.numpy()) and not g.x[12:19, [0, 1, 2, 3, 4, 8]].any()
    assert (g.x[19:, 8] == 1).all() and not g.x[19:, :8].any()
    assert np.array_equal(g.y[:12], d["paper"].y.numpy()) and (g.y[12:] == -1).all()
    assert np.array_equal(g.train_mask[:12], np.arange(12) < 6) and not g.train_mask[12:].any()
    # every given edge is one count of its relation, at its two endpoints' joint ids (duplicates merged)
    offsets = {"paper": 0, "author": 12, "venue": 19}
    want = np.zeros((23, 23, 3), dtype=int)
    for r, et in enumerate(d.edge_types):
        s, _, t = et
        for a, b in d[et].edge_index.numpy().T:
            want[b + offsets[t], a + offsets[s], r] = 1
    got = np.zeros_like(want)
    src, dst = g.edge_index()
    got[dst, src] = g.edge_type_counts
    assert np.array_equal(got, want)


@pytest.mark.parametrize("bad, message", [
    (lambda d: d["author", "writes", "paper"].edge_index.__setitem__((0, 0), 7), "'author' id out of range"),
    (lambda d: setattr(d["paper"], "y", torch.arange(6)), "labels y have 6 entries for 12 vertices"),
    (lambda d: setattr(d["paper"], "y", torch.rand(12)), "labels y must be integers"),
    (lambda d: setattr(d["paper"], "train_mask", torch.arange(12) % 3), "train_mask must be boolean"),
    (lambda d: setattr(d["paper", "cites", "topic"], "edge_index", torch.zeros(2, 1, dtype=torch.long)),
     "node type 'topic', which has no vertices"),
    (lambda d: setattr(d["author", "writes", "paper"], "edge_index", torch.zeros(2, 3) + 0.5),
     "ids must be integers"),
])
def test_heterodata_refusals(bad, message):
    d = hetero_data()
    bad(d)
    with pytest.raises(GridGnnError, match=message):
        load_graph(d)


def test_typed_sbm_has_its_documented_relations():
    g = typed_sbm_graph(n=1200, classes=4, types=3, relations=4, avg_degree=8, p_in=0.7, seed=3)
    offsets = g.node_types["offsets"]
    assert offsets == [0, 400, 800, 1200] and g.num_relations == 4
    assert [g.x[offsets[t]:offsets[t + 1]].any(axis=0).sum() for t in range(3)] == [16, 20, 24]
    assert (g.y[:400] >= 0).all() and (g.y[400:] == -1).all()
    cls = np.concatenate([g.y[:400], np.full(800, -1)])
    src, dst = g.edge_index()
    typ = np.searchsorted(offsets, np.arange(1200), side="right") - 1
    for r in range(4):
        on = g.edge_type_counts[:, r] > 0
        t_dst, t_src = r % 3, ((r + 1) % 3 if r < 3 else r % 3)
        assert (typ[dst[on]] == t_dst).all() and (typ[src[on]] == t_src).all()
    # the class shift of relation 3 (type 0 → type 0, both labelled): P(c_src = c_dst + 3) = p_in + (1 - p_in)/4
    on = g.edge_type_counts[:, 3] > 0
    share = np.mean(cls[src[on]] == (cls[dst[on]] + 3) % 4)
    assert abs(share - (0.7 + 0.3 / 4)) < 0.05, share


def test_rgcn_on_heterodata_spawned_equals_serial_and_saves_logits_per_type(tmp_path):
    """A HeteroData in memory, trained serially and by two spawned ranks (which receive the relation table with
    their shards), gives the same logits; ``node_types.json`` says which rows are which type's."""
    import gridgnn

    d = hetero_data(1)
    logits = {}
    for algo, nproc in (("serial", 1), ("1d", 2)):
        out = tmp_path / algo
        gridgnn.train(graph=d, model="rgcn", bases=2, epochs=3, hidden=4, dropout=0.0, dtype="float64", algo=algo,
                      nproc=nproc, out=str(out), save_logits=True, quiet=True)
        assert json.loads((out / "node_types.json").read_text()) == {"names": ["paper", "author", "venue"],
                                                                     "offsets": [0, 12, 19, 23]}
        assert json.loads((out / "summary.json").read_text())["config"]["relations"] == 3
        logits[algo] = np.load(out / "logits.npy")
    assert logits["serial"].shape == (23, 3)
    assert np.allclose(logits["1d"], logits["serial"], rtol=1e-9, atol=1e-12)
    # the trained model called PyG's way on the same typed edges gives the same logits
    g = load_graph(d)
    src, dst = g.edge_index()
    reps = g.edge_type_counts.sum(1)
    kind = np.concatenate([np.repeat(np.arange(3), row) for row in g.edge_type_counts])
    ei = torch.from_numpy(np.stack([np.repeat(src, reps), np.repeat(dst, reps)]))
    again = gridgnn.load(str(tmp_path / "serial"))(torch.from_numpy(g.x).double(), ei, edge_type=torch.from_numpy(kind))
    assert np.allclose(again.numpy(), logits["serial"], rtol=1e-9, atol=1e-12)


def test_inference_refuses_a_heterodata_whose_types_come_in_another_order(tmp_path):
    """The vertex types number the vertices and the feature columns, the edge types the relations: the same graph
    built with its types inserted in another order was accepted and gave other logits (the typed weights read other
    types' features). The run's order is recorded with the model (``input_pipeline.types``) and checked."""
    import gridgnn

    def built(order):
        d, r = HeteroData(), np.random.default_rng(2)
        parts = {"a": torch.from_numpy(r.normal(size=(9, 3))), "b": torch.from_numpy(r.normal(size=(6, 3)))}
        edges = {("a", "to", "b"): np.stack([r.integers(0, 9, 20), r.integers(0, 6, 20)]),
                 ("b", "back", "a"): np.stack([r.integers(0, 6, 15), r.integers(0, 9, 15)])}
        for t in order:
            d[t].x = parts[t]
            if t == "a":
                d[t].y = torch.arange(9) % 3
                d[t].train_mask = torch.arange(9) < 5
        for et in sorted(edges, reverse=order[0] != "a"):
            d[et].edge_index = torch.from_numpy(edges[et])
        return d

    result = gridgnn.train(graph=built("ab"), model="rgcn", epochs=2, hidden=4, dtype="float64", quiet=True,
                           out=str(tmp_path / "run"))
    for model in (result.model, gridgnn.load(str(tmp_path / "run"))):
        assert model.input_pipeline["types"] == {"vertices": ["a", "b"], "columns": [0, 3],
                                                 "relations": ["a__to__b", "b__back__a"]}
        np.testing.assert_array_equal(model.predict(built("ab")), result.model.predict(built("ab")))
        with pytest.raises(GridGnnError, match=r"trained on vertex types \['a', 'b'\].*this graph has \['b', 'a'\]"):
            model.predict(built("ba"))


def test_a_sharded_typed_graph_keeps_its_types(tmp_path):
    """Spawned ranks read a graph as shards, which held no type layout: a run at P = 2 recorded none (so its model
    took a graph with the types in another order, which the serial run's refuses), and a sharded: dataset wrote no
    node_types.json. meta.json now holds both; inference on a sharded dataset compares the layout too."""
    import gridgnn

    d = hetero_data(1)
    layout = {"vertices": ["paper", "author", "venue"], "columns": [0, 5, 8],
              "relations": ["author__writes__paper", "paper__rev_writes__author", "paper__in__venue"]}
    gridgnn.shard(d, str(tmp_path / "sh"), blocks="2x2", method="single-perm")
    for name, source in (("spec", dict(graph=d)), ("sharded", dict(data=f"sharded:{tmp_path / 'sh'}"))):
        out = tmp_path / name
        gridgnn.train(**source, model="gcn", algo="1d", nproc=2, epochs=2, hidden=4, out=str(out), save_logits=True,
                      quiet=True)
        assert json.loads((out / "summary.json").read_text())["input_pipeline"]["types"] == layout, name
        assert json.loads((out / "node_types.json").read_text()) == {"names": ["paper", "author", "venue"],
                                                                     "offsets": [0, 12, 19, 23]}, name
    swapped = HeteroData()
    for t in ("author", "paper", "venue"):
        for key, value in d[t].items():
            swapped[t][key] = value
    for et in d.edge_types:
        swapped[et].edge_index = d[et].edge_index
    gridgnn.shard(swapped, str(tmp_path / "swapped"), blocks="2x2", method="single-perm")
    model = gridgnn.load(str(tmp_path / "spec"))
    for data in (swapped, f"sharded:{tmp_path / 'swapped'}"):
        with pytest.raises(GridGnnError, match=r"trained on vertex types \['paper', 'author', 'venue'\]"):
            model.predict(data, algo="1d", nproc=2)


def test_save_npz_keeps_what_the_input_pipeline_reads(tmp_path):
    """A graph saved with save_npz and loaded again lost its loader's notes: Cora's row-normalized convention and
    reverse edges (so a run on the file trained on other features), a HeteroData's vertex types (so inference
    compared none)."""
    from gridgnn.graph.loaders import load_npz, save_npz
    from gridgnn.graph.pipeline import pipeline_record

    for g in (load_graph(hetero_data(1)),
              load_graph("synthetic:sbm?n=60&classes=3&features=4", seed=0)):
        g.meta.update(feature_norm="row", symmetrized=1)
        again = load_npz(save_npz(g, tmp_path / f"{g.name}.npz"))
        assert pipeline_record(again.meta, "auto") == pipeline_record(g.meta, "auto")
    assert pipeline_record(again.meta, "auto")["symmetrize"] is True
    bad = dict(np.load(tmp_path / f"{g.name}.npz"))
    bad["data_notes"] = np.array('{"feature_norm": 3}')
    np.savez(tmp_path / "bad.npz", **bad)
    with pytest.raises(GridGnnError, match="'data_notes' must be a JSON object"):
        load_npz(tmp_path / "bad.npz")


def test_an_npz_counting_a_relation_twice_is_refused(tmp_path):
    """A relation joins a pair once (Graph.from_edges merges an edge given twice with one relation); an npz whose
    edge_type_counts hold 2 trained R-GCN on a multigraph that no export or rerun reproduces: refused, naming it."""
    from gridgnn.graph.loaders import load_npz, save_npz

    g = Graph.from_edges(np.array([0, 1, 2, 2]), np.array([1, 2, 0, 1]), 3, edge_type=np.array([0, 1, 0, 1]))
    path = save_npz(g, tmp_path / "typed.npz")
    arrs = dict(np.load(path, allow_pickle=False))
    counts = arrs["edge_type_counts"].copy()
    counts[0, counts[0].argmax()] = 2
    np.savez(tmp_path / "twice.npz", **{**arrs, "edge_type_counts": counts})
    assert load_npz(path).edge_type_counts.max() == 1
    with pytest.raises(GridGnnError, match=r"edge_type_counts: edge \d -> \d is of a relation 2 times, and 0 more"):
        load_npz(tmp_path / "twice.npz")
    with pytest.raises(GridGnnError, match="a relation joins a pair once"):  # a Graph built directly too
        Graph(indptr=g.indptr, indices=g.indices, n=g.n, directed=True, edge_type_counts=counts)


def test_a_typed_edge_weight_is_refused_and_bfloat16_arrays_are_read():
    """An edge type's edge_weight was dropped without a word (a weight-0 edge became an edge), where a typed PyG
    Data's is refused; a bfloat16 x failed with NumPy's TypeError, and is read as float32."""
    import torch
    from torch_geometric.data import Data, HeteroData

    from gridgnn.errors import GridGnnError
    from gridgnn.graph.spec import load_graph

    d = HeteroData()
    d["paper"].x = torch.randn(4, 3)
    d["paper"].y = torch.tensor([0, 1, 0, 1])
    d["venue"].num_nodes = 3
    d["venue", "has", "paper"].edge_index = torch.tensor([[0, 1, 2], [0, 1, 2]])
    d["venue", "has", "paper"].edge_weight = torch.tensor([5.0, 0.0, 100.0])
    with pytest.raises(GridGnnError, match="has edge_weight; a typed graph takes no edge weights"):
        load_graph(d)
    x = torch.randn(3, 2).bfloat16()
    g = load_graph(Data(edge_index=torch.tensor([[0, 1, 2], [1, 2, 0]]), x=x, y=torch.tensor([0, 1, 0]), num_nodes=3))
    assert g.x.dtype == np.float32 and np.array_equal(g.x, x.float().numpy())
