"""Densification guard: one GAT training step on a graph with 10⁶ vertices and few edges. An n×n tensor (4 TB in
float32) could not be allocated; the step runs on edge tensors of nnz × heads only."""
import numpy as np
import torch

from gridgnn.graph import Graph, gcn_normalize
from gridgnn.nn import GAT
from gridgnn.ops.loss import masked_cross_entropy
from gridgnn.parallel.blockrow import build_serial


def test_one_gat_step_on_a_million_vertices():
    n = 1_000_000
    r = np.random.default_rng(0)
    src = r.integers(0, n, 200_000)
    dst = r.integers(0, n, 200_000)
    g = Graph.from_edges(src, dst, n, directed=True, x=r.normal(size=(n, 4)).astype(np.float32),
                         y=r.integers(0, 3, n), train_mask=r.random(n) < 0.01, val_mask=np.zeros(n, bool),
                         test_mask=np.zeros(n, bool))
    plan = build_serial(gcn_normalize(g), dtype=torch.float32)
    model = GAT([4, 4, 3], heads=2, dropout=0.5, attn_dropout=0.5, dtype=torch.float32)
    model.train()
    out = model(torch.from_numpy(g.x), plan)
    mask = torch.from_numpy(g.train_mask)
    loss = masked_cross_entropy(out, torch.from_numpy(g.y), mask, int(mask.sum()))
    loss.backward()
    assert out.shape == (n, 3) and torch.isfinite(loss)
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
