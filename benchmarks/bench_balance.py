r"""Adjacency balance of the 2D blocks: original order, single, double (Plexus §5.1) and balanced permutation.

For every graph and block grid it prints a Markdown table of

.. math::

    \rho_\mathrm{used} = \max / \operatorname{mean} \ \mathrm{nnz}

over the :math:`R \times C` blocks of the matrices that training multiplies — :math:`P_r \hat M P_c^\mathsf{T}`
and, for two distinct permutations, also :math:`P_c \hat M P_r^\mathsf{T}` (the union of both versions'
blocks, :func:`gridgnn.partition.permute.nnz_max_over_mean_used`) — where
:math:`\hat M = D^{-1/2}(M+I)D^{-1/2}` (with self-loops), plus the time of each permutation. The Plexus
paper's ``europe_osm`` numbers (Table 3, 8×8 shards) are quoted as a reference row.

Graphs: a random geometric graph in spatial (Hilbert) order (:func:`gridgnn.graph.synthetic_geo.geometric_graph`,
the analogue of a road network) and R-MAT (Graph500 parameters).

Usage::

    python benchmarks/bench_balance.py [--geo-n 1000000] [--geo-degree 10] [--rmat-scale 16]
                                       [--rmat-edge-factor 16] [--blocks 8x8,16x16] [--seed 0]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))


from gridgnn.graph import gcn_normalize  # noqa: E402
from gridgnn.graph.synthetic import rmat_graph  # noqa: E402
from gridgnn.graph.synthetic_geo import geometric_graph  # noqa: E402
from gridgnn.partition.permute import make_permutations, nnz_max_over_mean_used  # noqa: E402
from gridgnn.commands.shard import parse_blocks  # noqa: E402

METHOD_ROWS = (("original order", "identity"), ("single permutation", "single-perm"),
               ("double permutation (Plexus)", "double-perm"), ("balanced-perm (ours)", "balanced-perm"))
#: Plexus Table 3: max/mean nnz over 8×8 shards of europe_osm
PLEXUS_EUROPE_OSM = {"original order": "7.70", "single permutation": "3.24", "double permutation (Plexus)": "1.001"}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--geo-n", type=int, default=1_000_000)
    ap.add_argument("--geo-degree", type=float, default=10.0)
    ap.add_argument("--rmat-scale", type=int, default=16)
    ap.add_argument("--rmat-edge-factor", type=int, default=16)
    ap.add_argument("--blocks", default="8x8,16x16", help="block grids separated by commas (default 8x8,16x16)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    grids = [parse_blocks(b) for b in args.blocks.split(",") if b.strip()]

    graphs = []
    t = time.perf_counter()
    g = geometric_graph(args.geo_n, args.geo_degree, seed=args.seed)
    graphs.append((f"geometric n={g.n}, d̄={g.nnz / g.n:.1f}", gcn_normalize(g), time.perf_counter() - t))
    t = time.perf_counter()
    g = rmat_graph(args.rmat_scale, args.rmat_edge_factor, seed=args.seed)
    graphs.append((f"R-MAT scale {args.rmat_scale}, ef {args.rmat_edge_factor}", gcn_normalize(g),
                   time.perf_counter() - t))
    del g

    cols = [(name, mat, R, C) for name, mat, _ in graphs for R, C in grids]
    ratio = {}
    secs = {}
    for name, mat, R, C in cols:
        for label, method in METHOD_ROWS:
            t = time.perf_counter()
            pr, pc = make_permutations(method, mat, R, C, args.seed)
            secs[label, name, R, C] = time.perf_counter() - t
            ratio[label, name, R, C] = nnz_max_over_mean_used(mat, pr, pc, R, C)

    labels = [label for label, _ in METHOD_ROWS]
    print("max/mean nnz over the blocks of both matrix versions (M̂ with self-loops), seed", args.seed)
    for name, mat, gen in graphs:
        print(f"  {name}: n={mat.shape[0]}, nnz(M̂)={mat.nnz}, generated in {gen:.1f} s")
    print()
    print("| graph | blocks | " + " | ".join(labels) + " |")
    print("|---|---|" + "---:|" * len(labels))
    for name, _, R, C in cols:
        print(f"| {name} | {R}×{C} | " + " | ".join(f"{ratio[label, name, R, C]:.3f}" for label in labels) + " |")
    ref = [f"{PLEXUS_EUROPE_OSM[label]}" if label in PLEXUS_EUROPE_OSM else "—" for label in labels]
    print("| *europe_osm, Plexus Table 3 (reference)* | 8×8 | " + " | ".join(ref) + " |")
    print()
    print("| permutation time (s) | blocks | " + " | ".join(labels[1:]) + " |")
    print("|---|---|" + "---:|" * (len(labels) - 1))
    for name, _, R, C in cols:
        print(f"| {name} | {R}×{C} | " + " | ".join(f"{secs[label, name, R, C]:.2f}" for label in labels[1:]) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
