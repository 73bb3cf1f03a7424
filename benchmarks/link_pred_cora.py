"""Cora link prediction as PyG's ``examples/link_pred.py`` sets it up, twice in the same run: with PyG
(``RandomLinkSplit``, ``negative_sampling``, two ``GCNConv``, sklearn-free AUC) and with gridgnn's pieces
(:mod:`gridgnn.graph.links`: the split, keyed negatives and AUC; gridgnn's serial GCN as the encoder). Both: 5 %
validation and 10 % test edges (undirected), 2 layers 128 → 64, dot-product decoder, binary cross-entropy on the
training edges and one fresh negative per positive every epoch, Adam lr 0.01, 100 epochs, the test AUC of the epoch
with the best validation AUC. Not yet a ``gridgnn train`` task (issue 26): this measures the pieces against PyG's
example before they are.

Usage: python benchmarks/link_pred_cora.py [CORA_DIR] [--seeds 5] [--epochs 100]
"""
from __future__ import annotations

import argparse
import os
import statistics

import numpy as np
import torch
import torch.nn.functional as F

from _common import run  # noqa: F401 - puts src/ on the path
from gridgnn.graph import gcn_normalize
from gridgnn.graph.links import auc, link_split, negative_pairs
from gridgnn.graph.loaders import load_planetoid
from gridgnn.nn import GCN
from gridgnn.parallel.serial import build_serial


def train_gridgnn(g, seed: int, epochs: int) -> float:
    s = link_split(g, 0.05, 0.1, seed=seed)
    plans = {name: build_serial(gcn_normalize(graph), dtype=torch.float32)
             for name, graph in (("train", s.train_graph), ("test", s.test_graph))}
    model = GCN([g.num_features, 128, 64], dropout=0.0, seed=seed)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    x = torch.from_numpy(g.x)
    fixed = {name: (getattr(s, name), negative_pairs(g, getattr(s, name).shape[1], 1, seed=seed, split=name))
             for name in ("val", "test")}

    def scores(z, pairs):
        p = torch.from_numpy(pairs)
        return (z[p[0]] * z[p[1]]).sum(-1)

    best_val, final_test = -1.0, 0.0
    for epoch in range(epochs):
        model.train()
        opt.zero_grad()
        z = model(x, plans["train"])
        neg = negative_pairs(s.train_graph, s.train.shape[1], 1, seed=seed, epoch=epoch)
        logits = torch.cat([scores(z, s.train), scores(z, neg)])
        labels = torch.cat([torch.ones(s.train.shape[1]), torch.zeros(neg.shape[1])])
        F.binary_cross_entropy_with_logits(logits, labels).backward()
        opt.step()
        model.eval()
        with torch.no_grad():
            got = {}
            for name, plan in (("val", plans["train"]), ("test", plans["test"])):
                z = model(x, plan)
                pos, negs = fixed[name]
                got[name] = auc(scores(z, pos).numpy(), scores(z, negs).numpy())
        if got["val"] > best_val:
            best_val, final_test = got["val"], got["test"]
    return final_test


def train_pyg(g, seed: int, epochs: int) -> float:
    from torch_geometric.data import Data
    from torch_geometric.nn import GCNConv
    from torch_geometric.transforms import RandomLinkSplit
    from torch_geometric.utils import negative_sampling

    torch.manual_seed(seed)
    data = Data(x=torch.from_numpy(g.x), edge_index=torch.from_numpy(g.edge_index()))
    tr, va, te = RandomLinkSplit(num_val=0.05, num_test=0.1, is_undirected=True,
                                 add_negative_train_samples=False)(data)
    conv1, conv2 = GCNConv(g.num_features, 128), GCNConv(128, 64)
    opt = torch.optim.Adam(list(conv1.parameters()) + list(conv2.parameters()), lr=0.01)

    def encode(d):
        return conv2(conv1(d.x, d.edge_index).relu(), d.edge_index)

    def decode(z, idx):
        return (z[idx[0]] * z[idx[1]]).sum(-1)

    best_val, final_test = -1.0, 0.0
    for _ in range(epochs):
        opt.zero_grad()
        z = encode(tr)
        neg = negative_sampling(tr.edge_index, num_nodes=tr.num_nodes, num_neg_samples=tr.edge_label_index.size(1),
                                method="sparse")
        idx = torch.cat([tr.edge_label_index, neg], dim=1)
        labels = torch.cat([tr.edge_label, tr.edge_label.new_zeros(neg.size(1))])
        F.binary_cross_entropy_with_logits(decode(z, idx), labels).backward()
        opt.step()
        with torch.no_grad():
            got = {}
            for name, d in (("val", va), ("test", te)):
                out = decode(encode(d), d.edge_label_index).numpy()
                lab = d.edge_label.numpy().astype(bool)
                got[name] = auc(out[lab], out[~lab])
        if got["val"] > best_val:
            best_val, final_test = got["val"], got["test"]
    return final_test


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("cora", nargs="?", default=os.path.join(here, "..", "..", "shared", "data", "planetoid", "cora"))
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--epochs", type=int, default=100)
    args = ap.parse_args()
    g = load_planetoid(args.cora)
    res = {"pyg": [], "gridgnn": []}
    for seed in range(args.seeds):
        res["pyg"].append(train_pyg(g, seed, args.epochs))
        res["gridgnn"].append(train_gridgnn(g, seed, args.epochs))
        print(f"seed {seed}: PyG {res['pyg'][-1]:.4f}  gridgnn {res['gridgnn'][-1]:.4f}", flush=True)
    print(f"\n| run | mean test AUC ({args.seeds} seeds) | std | per seed |")
    print("|---|---|---|---|")
    for name, v in res.items():
        print(f"| {name} | {statistics.mean(v):.4f} | {statistics.pstdev(v):.4f} | "
              f"{', '.join(f'{a:.4f}' for a in v)} |")
    print(f"\ngap (gridgnn − PyG): {statistics.mean(res['gridgnn']) - statistics.mean(res['pyg']):+.4f}")
    np.set_printoptions(precision=4)


if __name__ == "__main__":
    main()
