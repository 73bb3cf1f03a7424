"""A sampled minibatch as a plan: with one minibatch holding every vertex and every neighbour sampled, GraphSAGE
on the sample equals full-graph GraphSAGE (logits and every parameter gradient, float64, every aggregation); a
stacked bulk of minibatches equals each minibatch alone; LADIES' weighted mean uses its 1/p weights."""
import numpy as np
import pytest
import scipy.sparse as sp
import torch

from gridgnn.graph import gcn_normalize
from gridgnn.graph.graph import Graph
from gridgnn.graph.spec import load_graph
from gridgnn.nn.gat import GAT
from gridgnn.nn.gcn import GCN
from gridgnn.nn.sage import SAGE
from gridgnn.nn.va import VA
from gridgnn.parallel.blockrow import build_serial
from gridgnn.sampling import minibatches, sample_bulk
from gridgnn.sampling.plan import GcnNormalization, MinibatchPlan
from gridgnn.train.minibatch import neighbours


def run(model, x, plan):
    model.zero_grad()
    out = model(torch.from_numpy(x[plan.in_rows(0)]).double(), plan)
    (out * torch.linspace(-1, 1, out.numel(), dtype=out.dtype).reshape(out.shape)).sum().backward()
    return out.detach(), [p.grad.clone() for p in model.parameters()]


def with_zero_weights(g: Graph) -> Graph:
    """``g`` with every fifth edge of weight 0 (stored: no edge for the normalized matrix the full-graph layers
    read, so none for the sampler either) and the others of weight 1.5."""
    w = np.full(len(g.indices), 1.5)
    w[::5] = 0.0
    return g.with_(values=w)


@pytest.mark.parametrize("aggr,sampler", [("mean", "sage"), ("sum", "sage"), ("max", "sage"), ("min", "sage"),
                                          ("mean", "ladies")])
def test_full_fanout_on_all_vertices_equals_full_graph_sage(aggr, sampler):
    """With every neighbour sampled (GraphSAGE's or LADIES' ``-1``, where LADIES keeps every candidate surely),
    on a graph with edges of weight 0."""
    g = with_zero_weights(load_graph("synthetic:sbm?n=300&classes=4&avg_degree=6&features=8", seed=1))
    model = SAGE([8, 16, 4], aggr=aggr, dropout=0.3, seed=2, dtype=torch.float64)
    model.train()
    full = run(model, g.x, build_serial(gcn_normalize(g), dtype=torch.float64))
    sample = sample_bulk(neighbours(g), [np.arange(g.n)], [-1, -1], sampler=sampler)
    mini = run(model, g.x, MinibatchPlan(sample))
    torch.testing.assert_close(mini[0], full[0], rtol=1e-10, atol=1e-12)
    for a, b in zip(mini[1], full[1]):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", ["sage", "gcn", "gat", "va"])
def test_a_bulk_equals_its_minibatches_alone(name):
    """Stacked minibatches (block diagonal; a destination's own row is not its row number among the sources)
    give each minibatch's logits alone, for every model that trains on samples."""
    g = load_graph("synthetic:sbm?n=400&classes=4&avg_degree=8&features=8", seed=1)
    batches = minibatches(np.arange(0, 400, 3), 30, seed=4)
    adj = neighbours(g)
    gcn = GcnNormalization(g, adj)
    bulk = sample_bulk(adj, batches, [5, 3], seed=4)
    model = {"sage": lambda: SAGE([8, 16, 4], dropout=0.0, seed=2, dtype=torch.float64),
             "gcn": lambda: GCN([8, 16, 4], dropout=0.0, seed=2, dtype=torch.float64),
             "gat": lambda: GAT([8, 6, 4], heads=3, dropout=0.0, attn_dropout=0.0, seed=2, dtype=torch.float64),
             "va": lambda: VA([8, 16, 4], dropout=0.0, seed=2, dtype=torch.float64)}[name]()
    stacked = model(torch.from_numpy(g.x[bulk.nodes[0]]).double(), MinibatchPlan(bulk, gcn=gcn)).detach()
    for i in range(bulk.k):
        one = bulk.batch(i)
        alone = model(torch.from_numpy(g.x[one.nodes[0]]).double(), MinibatchPlan(one, gcn=gcn)).detach()
        torch.testing.assert_close(stacked[bulk.ptr[-1][i]:bulk.ptr[-1][i + 1]], alone, rtol=1e-12, atol=1e-12)


def test_ladies_mean_is_the_weighted_mean_of_its_block():
    g = load_graph("synthetic:sbm?n=200&classes=4&avg_degree=8&features=5", seed=3)
    bulk = sample_bulk(neighbours(g), [np.arange(20)], [15], sampler="ladies", seed=1)
    plan = MinibatchPlan(bulk)
    x = torch.from_numpy(g.x[bulk.nodes[0]]).double()
    got = plan.graph(0).spmm(None, x, semiring="mean", mask=torch.from_numpy(
        plan.graph(0).edge_ids()[0] != plan.graph(0).edge_ids()[1]))
    want = torch.from_numpy(bulk.blocks[0] @ x.numpy())
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name,sampler", [("gcn", "sage"), ("gat", "sage"), ("va", "sage"), ("gcn", "ladies"),
                                          ("gat", "ladies")])
def test_full_fanout_on_all_vertices_equals_the_full_graph_model(name, sampler):
    """GCN, GAT and VA on a sample of every vertex with every neighbour: the full-graph model (logits and gradients,
    float64, dropout on inputs and attention), on a directed graph with some self-loops of its own (their weights
    kept, as gcn_normalize keeps them) and edges of weight 0."""
    g = load_graph("synthetic:sbm?n=300&classes=4&avg_degree=6&features=8", seed=1)
    m = sp.csr_matrix((np.ones(len(g.indices)), g.indices, g.indptr), shape=(g.n, g.n)).tolil()
    for v in range(0, g.n, 7):
        m[v, v] = 2.0  # a weighted self-loop of the data
    m[5, 9] = 0.0  # and one direction of an edge removed: directed
    g = Graph.from_scipy(m.tocsr(), x=g.x, y=g.y, train_mask=g.train_mask, val_mask=g.val_mask, test_mask=g.test_mask)
    dst = np.repeat(np.arange(g.n), np.diff(g.indptr))
    g = g.with_(values=np.where((np.arange(len(g.indices)) % 5 == 0) & (dst != g.indices), 0.0, g.values))
    model = {"gcn": lambda: GCN([8, 16, 4], dropout=0.3, seed=2, dtype=torch.float64),
             "gat": lambda: GAT([8, 6, 4], heads=3, dropout=0.3, attn_dropout=0.2, seed=2, dtype=torch.float64),
             "va": lambda: VA([8, 16, 4], dropout=0.3, seed=2, dtype=torch.float64)}[name]()
    model.train()
    full = run(model, g.x, build_serial(gcn_normalize(g), dtype=torch.float64))
    adj = neighbours(g)
    sample = sample_bulk(adj, [np.arange(g.n)], [-1, -1], sampler=sampler)
    mini = run(model, g.x, MinibatchPlan(sample, gcn=GcnNormalization(g, adj)))
    torch.testing.assert_close(mini[0], full[0], rtol=1e-10, atol=1e-12)
    for a, b in zip(mini[1], full[1]):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_sampled_gcn_aggregation_is_unbiased():
    """GraphSAGE samples of 2 neighbours: over 600 seeds, the mean of the sampled GCN aggregation of every vertex
    lies within 5 standard errors of the exact (M̂ H)_u, on vertices of degree up to 12 (a missing |N(u)| factor
    or a biased selection is off by many)."""
    g = load_graph("synthetic:sbm?n=60&classes=3&avg_degree=6&features=3", seed=4)
    adj = neighbours(g)
    gcn = GcnNormalization(g, adj)
    h = torch.from_numpy(np.random.default_rng(0).standard_normal((g.n, 3)))
    exact = torch.from_numpy(gcn_normalize(g) @ h.numpy())
    draws = []
    for seed in range(600):
        s = sample_bulk(adj, [np.arange(g.n)], [2], seed=seed)
        block = MinibatchPlan(s, gcn=gcn).graph(0)
        draws.append(block.spmm(block.gcn_values, h[s.nodes[0]]))
    draws = torch.stack(draws)
    err = (draws.mean(0) - exact).abs()
    se = draws.std(0) / np.sqrt(len(draws))
    assert (np.diff(adj.indptr) > 2).sum() > 30  # most rows are sampled, not kept whole
    assert (err <= 5 * se + 1e-12).all(), float((err / (se + 1e-12)).max())


@pytest.mark.parametrize("name", ["gine", "gatv2", "rgcn"])
def test_full_fanout_with_edge_features_or_relations_equals_the_full_graph_model(name):
    """GINE and GATv2 (edge features) and R-GCN (relation types) on a sample of every vertex with every neighbour:
    the full-graph model (logits and gradients, float64, dropout), the sample's edges reading the graph's edge table
    by original ids (a self-loop of the data comes as the destination's own entry, with its features)."""
    from gridgnn.nn import resolve_model

    if name == "rgcn":
        g = load_graph("synthetic:typed-sbm?n=240&relations=3", seed=1)
        opts = dict(num_relations=g.num_relations)
    else:
        g = load_graph("synthetic:sbm?n=240&classes=4&avg_degree=6&features=8&edge_features=3", seed=1)
        src, dst = g.edge_index()
        loops = np.arange(0, g.n, 9)  # self-loops of the data, with features of their own
        attr = np.concatenate([g.edge_attr, np.random.default_rng(2).normal(size=(loops.size, 3))])
        g = Graph.from_edges(np.concatenate([src, loops]), np.concatenate([dst, loops]), g.n, directed=True,
                             edge_attr=attr, x=g.x, y=g.y, train_mask=g.train_mask, val_mask=g.val_mask,
                             test_mask=g.test_mask)
        opts = dict(edge_dim=3, **({"heads": 2} if name == "gatv2" else {}))
    model = resolve_model(name).from_options([g.num_features, 12, g.num_classes], dtype=torch.float64, seed=2,
                                             dropout=0.3, **opts)
    model.train()
    serial = build_serial(gcn_normalize(g), dtype=torch.float64)
    serial.graph(0).edge_table = g
    full = run(model, g.x, serial)
    adj = neighbours(g)
    plan = MinibatchPlan(sample_bulk(adj, [np.arange(g.n)], [-1, -1]), gcn=GcnNormalization(g, adj))
    for layer in range(2):
        plan.graph(layer).edge_table = g
    mini = run(model, g.x, plan)
    torch.testing.assert_close(mini[0], full[0], rtol=1e-10, atol=1e-12)
    for a, b in zip(mini[1], full[1]):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("sampler,fanout", [("sage", 2), ("ladies", 30)])
def test_sampled_relation_weights_are_a_mean_per_relation(sampler, fanout):
    """R-GCN on a sample with few neighbours kept: each destination's weights of each relation sum to the full
    graph's, 1, where a kept neighbour brings the relation (a self-loop of the data keeps its exact share), so the
    sampled aggregation is a (sampling-weighted) mean, not a mean shrunk by the neighbours left out; with no kept
    neighbour of the relation only the self-loop's share remains (the estimate of the neighbours' part is 0)."""
    g = load_graph("synthetic:typed-sbm?n=240&relations=3", seed=1)
    src, dst = g.edge_index()
    loops = np.arange(0, g.n, 11)  # self-loops of the data, of relation 0
    kinds = np.concatenate([np.argmax(g.edge_type_counts, axis=1), np.zeros(loops.size, np.int64)])
    g = Graph.from_edges(np.concatenate([src, loops]), np.concatenate([dst, loops]), g.n, edge_type=kinds,
                         num_relations=3, x=g.x, y=g.y, train_mask=g.train_mask, val_mask=g.val_mask,
                         test_mask=g.test_mask)
    adj = neighbours(g)
    plan = MinibatchPlan(sample_bulk(adj, [np.arange(0, g.n, 2)], [fanout], sampler=sampler, seed=3))
    sg = plan.graph(0)
    sg.edge_table = g
    w = sg.relation_weights()
    row = sg.pattern.row.numpy()
    sums = np.zeros((sg.n_local, 3))
    np.add.at(sums, row, w)
    counts = g.relation_counts(*sg.edge_ids())
    own = sg.pattern.col.numpy() == sg._own.numpy()[row]
    reached = np.zeros((sg.n_local, 3), bool)
    np.logical_or.at(reached, row[~own], counts[~own] > 0)
    assert reached.sum() > 50 and np.allclose(sums[reached], 1.0)
    alone = np.zeros((sg.n_local, 3))
    np.add.at(alone, row[own], counts[own] / np.maximum(g.relation_degree()[sg.edge_ids()[0][own]], 1.0))
    assert np.allclose(sums[~reached], alone[~reached])
    full = g.relation_rows(*sg.edge_ids())  # the full graph's weights of the same entries sum to less
    fsums = np.zeros((sg.n_local, 3))
    np.add.at(fsums, row, full)
    assert fsums[reached].mean() < 0.95
