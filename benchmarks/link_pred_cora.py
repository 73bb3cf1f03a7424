"""Cora link prediction as PyG's ``examples/link_pred.py`` sets it up, in the same run: with PyG
(``RandomLinkSplit``, ``negative_sampling``, two ``GCNConv``, sklearn-free AUC) and with ``gridgnn train --task
link`` serially and on every algorithm at ``--nproc`` (default 4). Both: 5 % validation and 10 % test edges
(undirected), 2 layers 128 → 64, dot-product decoder, binary cross-entropy on the training edges and one fresh
negative per positive every epoch, Adam lr 0.01 without weight decay or dropout, 100 epochs, the test AUC of the
epoch with the best validation AUC. The split and the negatives are PyG's in the PyG runs and gridgnn's keyed ones
in gridgnn's (the same sizes and properties, other edges): the comparison is of means over seeds.

With ``--sampled``, gridgnn's runs are those of link prediction on sampled minibatches (``--sampler sage``): every
neighbour with one minibatch of every training positive per epoch (the full-graph run's epochs), and ``--fanout``
neighbours per hop with minibatches of ``--batch-size`` positives, at P = 1 and 2.

Usage: python benchmarks/link_pred_cora.py [CORA_DIR] [--seeds 5] [--epochs 100] [--nproc 4] [--algos 1d,2d]
       python benchmarks/link_pred_cora.py [CORA_DIR] --sampled [--fanout 10,10] [--batch-size 512]
"""
from __future__ import annotations

import argparse
import os
import statistics

import torch
import torch.nn.functional as F

from _common import every_algorithm, run
from gridgnn.graph.links import auc
from gridgnn.graph.loaders import load_planetoid


def train_pyg(g, seed: int, epochs: int) -> float:
    from torch_geometric.data import Data
    from torch_geometric.nn import GCNConv
    from torch_geometric.transforms import RandomLinkSplit
    from torch_geometric.utils import negative_sampling

    torch.manual_seed(seed)
    from torch_geometric.transforms import NormalizeFeatures

    # PyG's example normalizes Cora's raw 0/1 rows (NormalizeFeatures), as planetoid:'s run does (feature_norm row)
    data = NormalizeFeatures()(Data(x=torch.from_numpy(g.x), edge_index=torch.from_numpy(g.edge_index())))
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
    ap.add_argument("--nproc", type=int, default=4)
    ap.add_argument("--algos", default=None, help="comma-separated subset of the algorithms (serial always runs)")
    ap.add_argument("--defaults", action="store_true",
                    help="gridgnn serially at --task link's own defaults (gridgnn.train(data=..., task='link', "
                         "seed=S): no other option given) instead of the setup written out")
    ap.add_argument("--sampled", action="store_true", help="serial full-graph and sampled minibatch runs")
    ap.add_argument("--fanout", default="10,10", help="--sampled: neighbours per hop")
    ap.add_argument("--batch-size", type=int, default=512, help="--sampled: training positives per minibatch")
    args = ap.parse_args()
    if args.sampled and args.defaults:
        ap.error("--sampled and --defaults are two different tables: give one")
    g = load_planetoid(args.cora)
    configs = every_algorithm(args.nproc, args.algos) if not args.defaults else [("serial", 1, {})]
    if args.sampled:
        sampled = dict(algo="serial", sampler="sage", fanout=args.fanout, batch_size=args.batch_size)
        configs = [("serial", 1, {}),
                   ("sampled, every neighbour, one batch", 1, dict(sampled, fanout="-1", batch_size=10 ** 6)),
                   (f"sampled, fanout {args.fanout}, batch {args.batch_size}", 1, sampled),
                   (f"sampled, fanout {args.fanout}, batch {args.batch_size}, P=2", 2, sampled)]
    hyper = dict(data=f"planetoid:{args.cora}", task="link", layers=2, hidden=128, embedding_dim=64, lr=0.01,
                 weight_decay=0.0, dropout=0.0, epochs=args.epochs, negatives=1)
    res = {"pyg": [], **{c[0]: [] for c in configs}}
    for seed in range(args.seeds):
        res["pyg"].append(train_pyg(g, seed, args.epochs))
        for algo, p, kw in configs:
            if args.defaults:
                import gridgnn

                res[algo].append(gridgnn.train(data=hyper["data"], task="link", seed=seed, quiet=True)["test_auc"])
                continue
            res[algo].append(run(**{"algo": algo, **kw}, nproc=p, seed=seed, **hyper)["test_auc"])
        print(f"seed {seed}: " + "  ".join(f"{k}={v[-1]:.4f}" for k, v in res.items()), flush=True)
    print(f"\n| run | P | mean test AUC ({args.seeds} seeds) | std | max abs diff to serial (same seed) |")
    print("|---|---|---|---|---|")
    for name, v in res.items():
        p = next((c[1] for c in configs if c[0] == name), 1)
        gap = "" if name == "pyg" else f"{max(abs(a - b) for a, b in zip(v, res['serial'])):.4f}"
        print(f"| {name} | {p} | {statistics.mean(v):.4f} | {statistics.pstdev(v):.4f} | {gap} |")
    print(f"\ngap (gridgnn serial − PyG): {statistics.mean(res['serial']) - statistics.mean(res['pyg']):+.4f}")


if __name__ == "__main__":
    main()
