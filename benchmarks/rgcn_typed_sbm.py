"""R-GCN on a typed SBM (3 vertex types, 4 relations; ``synthetic:typed-sbm``): test accuracy of PyG's ``RGCNConv``
stack trained serially, of gridgnn's ``--model rgcn`` serially and on every algorithm at P, and of GCN on the same
graph (relations ignored), over seeds; then the bytes one epoch moves per algorithm for R-GCN with one weight per
relation and with bases, next to GCN of the same widths (the aggregation bytes per relation or basis).

Both sides train alike: 2 layers, hidden 16, ReLU, dropout 0.5 on each layer's input, Adam (lr 0.01, weight
decay 5e-4), 100 epochs, the test accuracy of the best validation epoch. PyG draws its own initial weights (its
``reset_parameters``), gridgnn its own: the accuracies agree as two seeds of one method do, not bit for bit.

``--timing N``: instead, the serial forward+backward time of one step of gridgnn's R-GCN (one ``spmm`` per relation,
or per basis) against PyG's ``RGCNConv`` stack with the same weights, on a typed SBM of ``N`` vertices, for R = 4
and 16 relations with and without bases (median of 5, measured in the same process).

Usage: python benchmarks/rgcn_typed_sbm.py [--seeds 5] [--epochs 100] [--nproc 4] [--algos 1d,2d] [--n 3000]
       python benchmarks/rgcn_typed_sbm.py --timing 50000
"""
from __future__ import annotations

import argparse
import statistics

import torch
import torch.nn.functional as F

from _common import against_pyg, every_algorithm, run
from gridgnn.graph.spec import load_graph


def pyg_accuracy(spec: str, seed: int, epochs: int, hidden: int, bases: int | None) -> float:
    from torch_geometric.nn import RGCNConv

    g = load_graph(spec, seed=seed)
    torch.manual_seed(seed)
    x = torch.from_numpy(g.x)
    ei = torch.from_numpy(g.edge_index())
    # every stored entry once per edge of each relation it stands for (the typed multigraph as given)
    rel = torch.from_numpy(g.edge_type_counts).long()
    reps = rel.sum(1)
    ei = ei.repeat_interleave(reps, dim=1)
    et = torch.arange(g.num_relations).repeat(rel.shape[0]).repeat_interleave(rel.reshape(-1))
    y = torch.from_numpy(g.y)
    masks = [torch.from_numpy(m) for m in (g.train_mask, g.val_mask, g.test_mask)]
    convs = torch.nn.ModuleList([RGCNConv(g.num_features, hidden, g.num_relations, num_bases=bases),
                                 RGCNConv(hidden, g.num_classes, g.num_relations, num_bases=bases)])
    opt = torch.optim.Adam(convs.parameters(), lr=0.01, weight_decay=5e-4)

    def forward(train: bool):
        h = F.dropout(x, 0.5, training=train)
        h = F.relu(convs[0](h, ei, et))
        h = F.dropout(h, 0.5, training=train)
        return convs[1](h, ei, et)

    best_val, best_test = -1.0, 0.0
    for _ in range(epochs):
        convs.train()
        opt.zero_grad()
        F.cross_entropy(forward(True)[masks[0]], y[masks[0]]).backward()
        opt.step()
        convs.eval()
        with torch.no_grad():
            pred = forward(False).argmax(1)
        val, test = (float((pred[m] == y[m]).float().mean()) for m in masks[1:])
        if val > best_val:
            best_val, best_test = val, test
    return best_test


def timing_table(n: int, hidden: int = 64, repeats: int = 5) -> None:
    from gridgnn.nn import RGCN
    from gridgnn.parallel.blockrow import serial_plan
    from gridgnn.train.rank_layout import attach_edge_features

    print(f"serial forward+backward of one step, 2 layers, hidden {hidden}, median of {repeats} "
          f"(torch threads {torch.get_num_threads()})")
    print(f"{'graph':38s} {'R':>3s} {'B':>3s} {'gridgnn ms':>11s} {'PyG ms':>8s} {'ratio':>6s} {'max |diff|':>11s}")
    for relations in (4, 16):
        spec = f"synthetic:typed-sbm?n={n}&types=3&relations={relations}&avg_degree=16"
        g = load_graph(spec)
        x = torch.from_numpy(g.x)
        rel = torch.from_numpy(g.edge_type_counts).long()
        ei = torch.from_numpy(g.edge_index()).repeat_interleave(rel.sum(1), dim=1)
        et = torch.arange(relations).repeat(rel.shape[0]).repeat_interleave(rel.reshape(-1))
        for bases in (0, 2):
            model = RGCN([g.num_features, hidden, g.num_classes], num_relations=relations, bases=bases, dropout=0.0)
            plan = serial_plan(g, dtype=torch.float32)
            attach_edge_features(plan, g, 2)
            a, b, diff = against_pyg(model, plan, x, (x, ei, et), repeats)
            print(f"{g.name:38s} {relations:3d} {bases:3d} {1e3 * a:11.1f} {1e3 * b:8.1f} {a / b:6.2f} {diff:11.2e}")


def fmt(accs: list[float]) -> str:
    return f"{statistics.mean(accs):.4f} ± {statistics.pstdev(accs):.4f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--epochs", type=int, default=100)
    ap.add_argument("--nproc", type=int, default=4)
    ap.add_argument("--algos", default=None, help="comma-separated subset of the algorithms (default: all)")
    ap.add_argument("--n", type=int, default=3000)
    ap.add_argument("--bases", type=int, default=0, help="bases of the accuracy runs (0: one weight per relation)")
    ap.add_argument("--timing", type=int, default=0, metavar="N", help="the serial timing table on N vertices only")
    args = ap.parse_args()
    if args.timing:
        timing_table(args.timing)
        return
    spec = f"synthetic:typed-sbm?n={args.n}&types=3&relations=4"
    g = load_graph(spec)
    print(f"{spec}: n={g.n}, stored entries {g.nnz}, relations {g.meta['relations']}, "
          f"{int(g.train_mask.sum())}/{int(g.val_mask.sum())}/{int(g.test_mask.sum())} train/val/test vertices "
          f"(type0), {args.seeds} seeds, {args.epochs} epochs")
    seeds = range(args.seeds)
    common = dict(data=spec, epochs=args.epochs, hidden=16)
    rows = [("PyG RGCNConv serial", [pyg_accuracy(spec, s, args.epochs, 16, args.bases or None) for s in seeds])]
    rgcn = dict(model="rgcn", bases=args.bases)
    for algo, nproc, kw in every_algorithm(args.nproc, args.algos):
        accs = [run(**common, **rgcn, algo=algo, nproc=nproc, seed=s, **kw)["test_acc"] for s in seeds]
        rows.append((f"gridgnn rgcn {algo} P={nproc}", accs))
    rows.append(("gridgnn gcn serial (relations ignored)", [run(**common, model="gcn", seed=s)["test_acc"]
                                                            for s in seeds]))
    print(f"{'run':44s} {'test accuracy':>18s}   per seed")
    for name, accs in rows:
        print(f"{name:44s} {fmt(accs):>18s}   {' '.join(f'{a:.3f}' for a in accs)}")
    print(f"\nP={args.nproc}, bytes one training epoch moves (fwd+bwd+grad over all ranks), hidden 16; per term: "
          "the R-GCN bytes over its aggregations per layer (R = 4 relations, or B = 2 bases)")
    print(f"{'algo':8s} {'gcn':>10s} {'rgcn B=0':>10s} {'/gcn':>6s} {'per rel.':>9s} {'rgcn B=2':>10s} {'/gcn':>6s}")
    for algo, nproc, kw in every_algorithm(args.nproc, args.algos)[1:]:
        got = {}
        for name, mk in (("gcn", dict(model="gcn")), ("r0", dict(model="rgcn", bases=0)),
                         ("r2", dict(model="rgcn", bases=2))):
            s = run(data=spec, epochs=1, hidden=16, algo=algo, nproc=nproc, **kw, **mk)
            got[name] = sum(v for k, v in s["comm_bytes_per_epoch"]["by_phase"].items()
                            if k.split(".")[0] in ("fwd", "bwd", "grad"))
        print(f"{algo:8s} {got['gcn']:10,.0f} {got['r0']:10,.0f} {got['r0'] / got['gcn']:6.2f} "
              f"{got['r0'] / 4:9,.0f} {got['r2']:10,.0f} {got['r2'] / got['gcn']:6.2f}")


if __name__ == "__main__":
    main()
