"""GCN epoch time and bytes per epoch, measured in one run on one graph.

Prints (1) epoch times of gridgnn serial and P=2 runs next to PyG ``GCNConv`` (edge_index path and
torch-sparse CSR path) with the same widths, and (2) bytes per epoch of 1d vs 1d-sa vs 1.5d(-sa) with the
random and the METIS partition. Usage:
    python benchmarks/bench_gcn.py [--data SPEC] [--epochs 30] [--nproc 2] [--partitions random,metis]
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from _common import run
from gridgnn.graph.spec import DEFAULT_SPEC, load_graph


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=DEFAULT_SPEC)
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=16)
    ap.add_argument("--partitions", default="random,metis")
    args = ap.parse_args()

    graph = load_graph(args.data)
    print(f"graph {args.data}: n={graph.n} nnz={graph.nnz} f={graph.num_features} classes={graph.num_classes}; "
          f"torch threads={torch.get_num_threads()}")


    def pyg_epoch_time(sparse: bool) -> float:
        from torch_geometric.nn import GCNConv

        torch.manual_seed(0)
        x = torch.from_numpy(graph.x).float()
        y = torch.from_numpy(graph.y)
        mask = torch.from_numpy(graph.train_mask)
        ei = torch.from_numpy(graph.edge_index())
        if sparse:  # adj_t: rows = targets, as PyG expects for sparse adjacency input
            adj = torch.sparse_coo_tensor(ei.flip(0), torch.ones(ei.shape[1]), (graph.n, graph.n)).to_sparse_csr()
        convs = torch.nn.ModuleList([GCNConv(graph.num_features, args.hidden, cached=True),
                                     GCNConv(args.hidden, graph.num_classes, cached=True)])
        opt = torch.optim.Adam(convs.parameters(), lr=0.01, weight_decay=5e-4)
        times = []
        for _ in range(args.epochs):
            t0 = time.perf_counter()
            opt.zero_grad()
            h = torch.nn.functional.dropout(x, 0.5)
            h = torch.relu(convs[0](h, adj if sparse else ei))
            h = torch.nn.functional.dropout(h, 0.5)
            out = convs[1](h, adj if sparse else ei)
            loss = torch.nn.functional.cross_entropy(out[mask], y[mask])
            loss.backward()
            opt.step()
            times.append(time.perf_counter() - t0)
        return statistics.median(times[1:])


    common = dict(data=args.data, epochs=args.epochs, hidden=args.hidden, layers=2)
    rows = []
    t_pyg = pyg_epoch_time(False)
    t_pyg_csr = pyg_epoch_time(True)
    serial = run(algo="serial", **common)
    rows.append(("PyG GCNConv (edge_index)", 1, t_pyg))
    rows.append(("PyG GCNConv (CSR adj_t)", 1, t_pyg_csr))
    rows.append(("gridgnn serial", 1, serial["epoch_time_median_s"]))
    dist_runs = {}
    for part in args.partitions.split(","):
        for algo, c in (("1d", 1), ("1d-sa", 1), ("1.5d", 2), ("1.5d-sa", 2)):
            if args.nproc % c:
                continue
            s = run(algo=algo, nproc=args.nproc, replication=c, partition=part, **common)
            dist_runs[(algo, c, part)] = s
            rows.append((f"gridgnn {algo} ({part}{', c=2' if c == 2 else ''})", args.nproc, s["epoch_time_median_s"]))

    print("\n| run | P | epoch time (ms, median) | × PyG edge_index | × gridgnn serial |")
    print("|---|---|---|---|---|")
    for name, p, t in rows:
        print(f"| {name} | {p} | {t * 1e3:.2f} | {t / t_pyg:.2f} | {t / serial['epoch_time_median_s']:.2f} |")

    print("\n| algo | partition | bytes/epoch fwd+bwd (moved, all ranks) | max rank send/epoch | all phases incl. eval | × 1d |")
    print("|---|---|---|---|---|---|")
    for (algo, c, part), s in dist_runs.items():
        ph = s["comm_bytes_per_epoch"]["by_phase"]
        train = sum(v for k, v in ph.items() if k.split(".")[0] in ("fwd", "bwd"))
        base = dist_runs.get(("1d", 1, part))
        bt = sum(v for k, v in base["comm_bytes_per_epoch"]["by_phase"].items() if k.split(".")[0] in ("fwd", "bwd"))
        print(f"| {algo}{' c=2' if c == 2 else ''} | {part} | {train / 1e6:.3f} MB | "
              f"{s['max_rank_send_bytes_per_epoch'] / 1e6:.3f} MB | {s['comm_bytes_per_epoch']['total'] / 1e6:.3f} MB | "
              f"{train / bt:.3f} |")


if __name__ == "__main__":
    main()
