"""One spawned process group per P runs every distributed case of tests/parallel (start-up paid once per P)."""
import numpy as np
import pytest

from gridgnn.distributed.launch import launch
from gridgnn.graph import Graph
from gridgnn.partition import RowPartition
from gridgnn.testing import Case, distributed_worker

PS = (1, 2, 4, 8)
N = 29  # not divisible by 2, 4, 8: uneven blocks


def random_graph(n: int, m: int, *, directed: bool, seed: int, isolated: int = 3, f: int = 7) -> Graph:
    """Random graph whose last ``isolated`` vertices have no edges, with a few self-loops."""
    r = np.random.default_rng(seed)
    src, dst = r.integers(0, n - isolated, m), r.integers(0, n - isolated, m)
    src = np.concatenate([src, [0, 1]])
    dst = np.concatenate([dst, [0, 1]])
    x = r.normal(size=(n, f))
    y = r.integers(0, 3, n)
    tm = r.random(n) < 0.6
    return Graph.from_edges(src, dst, n, directed=directed, x=x, y=y, train_mask=tm, val_mask=~tm, test_mask=~tm)


GRAPHS = {"undirected": random_graph(N, 70, directed=False, seed=1),
          "directed": random_graph(N, 90, directed=True, seed=2)}
DIMS = {"2layer": [7, 5, 3], "3layer": [7, 9, 9, 3]}  # 3layer: layer 0 aggregates H (no input gradient)


def skewed_partition(n: int, parts: int, seed: int) -> RowPartition:
    """Blocks of very different sizes (one of a single vertex), vertices scattered."""
    r = np.random.default_rng(seed)
    weights = np.arange(1, parts + 1) ** 2
    part = r.choice(parts, size=n, p=weights / weights.sum())
    part[: parts] = np.arange(parts)  # every part non-empty
    return RowPartition.from_parts(part, parts, "skewed")


def shapes_2d(P: int) -> list[tuple[int, int]]:
    return [(a, P // a) for a in range(1, P + 1) if P % a == 0]


def shapes_3d(P: int) -> list[tuple[int, int, int]]:
    """Every ordered factorization x·y·z = P (non-cubic ones included)."""
    return [(a, b, P // (a * b)) for a in range(1, P + 1) for b in range(1, P + 1) if P % (a * b) == 0]


GRID_DIMS = {"2layer": [7, 5, 3], "3layer": [7, 9, 4, 3], "4layer": [7, 4, 6, 5, 3]}  # 4 layers wrap the rotation


def cases_for(P: int) -> list[tuple[str, Case]]:
    out = []
    # 2D/3D/Plexus: every shape and depth, each on one of the two graphs (alternating with the shape and the depth,
    # so both graphs meet every depth and every axis split): a shape on the second graph ran the same code path.
    # At P = 8 (10 shapes in 3D) each shape runs one depth, the depths rotating over the shapes and the graphs and
    # Plexus' vertex orders rotating apart from them (every depth meets both graphs and both orders); P = 4 runs all.
    for algo, shapes in (("2d", shapes_2d(P)), ("3d", shapes_3d(P)), ("plexus", shapes_3d(P))):
        depths = [k for k in GRID_DIMS if k != "3layer" or algo == "plexus"]
        for j, shape in enumerate(shapes):
            for d, (dname, dims) in enumerate(GRID_DIMS.items()):
                if dname not in depths or (P >= 8 and dname != depths[j % len(depths)]):
                    continue
                turn = j // len(depths) if P >= 8 else j + d
                gname = tuple(GRAPHS)[turn % 2]
                # Plexus: one vertex order per shape and depth, rotating (P = 4: each shape meets both over its
                # depths; P = 8: each depth meets both over its shapes)
                order = j // (2 * len(depths)) if P >= 8 else (j + d + 1)
                parts = (("random", "double-perm")[order % 2],) if algo == "plexus" else ("random",)
                for part in parts:
                    out.append((f"{algo}-{'x'.join(map(str, shape))}-{gname}-{dname}-{part}",
                                Case(graph=GRAPHS[gname], algo=algo, dims=dims, grid=shape, partition=part, dropout=0.4,
                                     seed=7, epoch=3, block_rows=5 if (algo == "plexus" and dname == "3layer") else 0)))
    for j, shape in enumerate(shapes_3d(P)):  # plexus-rs: every shape; depth, graph and vertex orders rotate
        dname, gname = tuple(GRID_DIMS)[j % 3], tuple(GRAPHS)[j % 2]
        part = ("random", "double-perm")[(j // 2) % 2]
        out.append((f"plexus-rs-{'x'.join(map(str, shape))}-{gname}-{dname}-{part}",
                    Case(graph=GRAPHS[gname], algo="plexus-rs", dims=GRID_DIMS[dname], grid=shape, partition=part,
                         dropout=0.4, seed=7, epoch=3)))
    mid = shapes_3d(P)[len(shapes_3d(P)) // 2]
    out.append((f"plexus-rs-sage-sum-{'x'.join(map(str, mid))}",  # two spmm and two linear per layer
                Case(graph=GRAPHS["directed"], algo="plexus-rs", dims=[7, 6, 3], model="sage", options={"aggr": "sum"},
                     grid=mid, partition="double-perm", dropout=0.4, seed=7, epoch=3)))
    if P in (4, 8):  # row blocks smaller than the axis that cuts them into parts: some ranks hold none
        tiny = random_graph(3 if P == 4 else 5, 6, directed=P == 4, seed=9, isolated=1)
        out.append(("plexus-rs-empty-parts", Case(graph=tiny, algo="plexus-rs", dims=[7, 5, 4, 3],
                                                  grid=(2, 1, P // 2), dropout=0.4, seed=7, epoch=3)))
    out.append(("refused-gat-plexus-rs", Case(graph=GRAPHS["undirected"], algo="plexus-rs", dims=[7, 3, 3],
                                              grid=shapes_3d(P)[-1], model="gat", heads=2, seed=7, epoch=3)))
    for gname, g in GRAPHS.items():
        for dname, dims in DIMS.items():
            turn = tuple(GRAPHS).index(gname) + tuple(DIMS).index(dname)
            for algo in ("1d", "1d-sa"):  # (at P = 1 both partitions are the one block: one of them)
                parts = (("random", "random"), ("skewed", skewed_partition(N, P, 5)))[:1 if P == 1 else 2]
                if P >= 8:  # the paths of P = 2 and 4 again: one partition per graph and depth, alternating (the
                    parts = parts[turn % 2:][:1]  # same for both algorithms: the sparsity-aware one's twin)
                for pname, part in parts:
                    out.append((f"{algo}-{gname}-{dname}-{pname}", Case(graph=g, algo=algo, dims=dims, partition=part,
                                                                        dropout=0.4, seed=7, epoch=3)))
            for i, c in enumerate([c for c in PS if P % c == 0]):  # one partition per c, graph and depth, rotating
                if P >= 8 and (i + turn) % 2:  # two c per graph and depth, each c meeting both graphs and depths
                    continue
                for algo in ("1.5d", "1.5d-sa"):
                    t = i + turn if P < 8 else i // 2 + turn  # (P = 8: the two kept c take both partitions)
                    for pname, part in (("random", "random"), ("skewed", skewed_partition(N, P // c, 6)))[t % 2:][:1]:
                        out.append((f"{algo}-c{c}-{gname}-{dname}-{pname}",
                                    Case(graph=g, algo=algo, dims=dims, replication=c, partition=part, dropout=0.4,
                                         seed=7, epoch=3)))
    for gname, g in GRAPHS.items():  # GAT: the primitives on every block-row layout
        for dname, (dims, heads, out_heads) in GAT_DIMS.items():
            kw = dict(graph=g, dims=dims, model="gat", heads=heads, out_heads=out_heads, dropout=0.4,
                      attn_dropout=0.3, seed=7, epoch=3)
            for m, algo in enumerate(("1d", "1d-sa")):
                parts = (("random", "random"), ("skewed", skewed_partition(N, P, 5)))[:1 if P == 1 else 2]
                if P >= 8:  # one partition per algorithm, graph and depth, alternating (P = 2 and 4 run both)
                    parts = parts[(m + tuple(GRAPHS).index(gname) + tuple(GAT_DIMS).index(dname)) % 2:][:1]
                for pname, part in parts:
                    out.append((f"gat-{algo}-{gname}-{dname}-{pname}", Case(algo=algo, partition=part, **kw)))
            cs = [c for c in PS if P % c == 0]  # two c per graph and depth, rotating: the GCN cases run every c
            for m, algo in enumerate(("1.5d", "1.5d-sa")):
                turn = tuple(GRAPHS).index(gname) * 2 + tuple(GAT_DIMS).index(dname)
                # (P = 8: one c, each algorithm meeting every c over the graphs and depths)
                for c in {cs[(2 * turn + m + i) % len(cs)] for i in (0, 1)} if P < 8 else {cs[(turn + m) % len(cs)]}:
                    out.append((f"gat-{algo}-c{c}-{gname}-{dname}-skewed",
                                Case(algo=algo, replication=c, partition=skewed_partition(N, P // c, 6), **kw)))
            for algo, shapes in (("2d", shapes_2d(P)), ("3d", shapes_3d(P))):
                for j, shape in enumerate(shapes):  # heads straddle column blocks when pc does not divide heads × width
                    if (j + tuple(GRAPHS).index(gname) + tuple(GAT_DIMS).index(dname)) % 2 and len(shapes) > 2:
                        continue  # each shape on one graph per depth (alternating): the same path on the other
                    if P >= 8 and (j // 2 + tuple(GAT_DIMS).index(dname)) % 2:
                        continue  # P = 8: each shape under one depth (each depth meeting both graphs)
                    out.append((f"gat-{algo}-{'x'.join(map(str, shape))}-{gname}-{dname}-random",
                                Case(algo=algo, grid=shape, partition="random", **kw)))
    for k, shape in enumerate(shapes_3d(P)):  # Plexus: every shape, each GAT depth; the graphs alternate
        for d, (dname, (dims, heads, out_heads)) in enumerate(GAT_DIMS.items()):
            if len(shapes_3d(P)) > 3 and (k + d) % 2:  # many shapes: each under one depth, alternating
                continue
            gname = tuple(GRAPHS)[k % 2]
            part = "double-perm" if dname == "3layer" else "random"  # the destination gather across two orders
            out.append((f"gat-plexus-{'x'.join(map(str, shape))}-{gname}-{dname}-{part}",
                        Case(graph=GRAPHS[gname], algo="plexus", dims=dims, grid=shape, partition=part, model="gat",
                             heads=heads, out_heads=out_heads, dropout=0.4, attn_dropout=0.3, seed=7, epoch=3)))
    out += attention_cases(P) + layer_order_cases(P) + recompute_block_cases(P)
    return out + wire_cases(P) + overlap_cases(P) + edge_feature_cases(P) + link_cases(P) + relation_cases(P) \
        + edge_cases(P)


def layer_order_cases(P: int) -> list[tuple[str, Case]]:
    """``--layer-order lean`` against ``auto`` on a first layer of equal widths (7 → 7), at P = 2 (the order does not
    depend on P; a first layer multiplying first runs at every P in the narrowing cases): GCN on 1D, a GraphSAGE
    mean on 2D (test_layouts: each equals serial with the bytes of its model; test_layer_order: the lean one moves
    the first layer's columns once more, in the backward)."""
    if P != 2:
        return []
    out = []
    for order in ("auto", "lean"):
        out.append((f"1d-{order}-order-gcn-undirected",
                    Case(graph=GRAPHS["undirected"], algo="1d", dims=[7, 7, 3], options={"layer_order": order},
                         partition=skewed_partition(N, P, 5), dropout=0.4, seed=7, epoch=3)))
        out.append((f"2d-{order}-order-sage-mean-directed",
                    Case(graph=GRAPHS["directed"], algo="2d", dims=[7, 7, 3], model="sage", grid=shapes_2d(P)[-1],
                         options={"aggr": "mean", "layer_order": order}, partition="random", dropout=0.4, seed=7,
                         epoch=3)))
    return out


def recompute_block_cases(P: int) -> list[tuple[str, Case]]:
    """A product's input recomputed from a dropout by blocks of two rows (``recompute_block`` = 2 rows of 7
    features; ops.masked.RowBlocks) in every family's ``linear`` — the block-row (1D), SUMMA (2D), Plexus and
    plexus-rs and edge products — at P = 2 against the serial reference made whole (test_layouts;
    test_recompute_blocks: every rank summed some weight gradient by blocks). GCN 7 → 5 → 3 multiplies its dropped
    features first."""
    if P != 2:
        return []
    kw = dict(dims=[7, 5, 3], dropout=0.4, seed=7, epoch=3, recompute_block=14)
    return [(f"{algo}-blocks-{model}-{gname}", Case(graph=GRAPHS[gname], algo=algo, model=model, **grid, **kw))
            for algo, model, gname, grid in (("1d", "gcn", "undirected", {}),
                                             ("2d", "sage", "directed", {"grid": (1, 2)}),
                                             ("plexus", "gcn", "directed", {"grid": (1, 1, 2)}),
                                             ("plexus-rs", "gcn", "undirected", {"grid": (2, 1, 1)}),
                                             ("edge", "gat", "directed", {}))]


def edge_cases(P: int) -> list[tuple[str, Case]]:
    """Edge-parallel training (``--algo edge``): at P = 4 every built-in model — GCN at two depths, GAT at two, AGNN,
    VA, SAGE (mean, max, and min on a graph of ties: the selecting semiring's winner across ranks), GINE and GATv2
    with edge features, R-GCN —; at P = 1 every third of them, at P = 2 and 8 every other one, alternating (each
    model meets another P; the engine is the block-row one, checked at every P); link prediction
    (``link-gcn-edge-``, checked by test_link) at P = 4 and 8 and a bfloat16 wire (``wire-bfloat16-gat-edge``,
    test_wire) at P = 2 and 4; the graphs alternate."""
    kw = dict(algo="edge", dropout=0.4, seed=7, epoch=3)
    gat = dict(model="gat", heads=2, out_heads=1, attn_dropout=0.3)
    models = [("gcn-2layer", dict(dims=[7, 5, 3])), ("gcn-3layer", dict(dims=[7, 9, 9, 3])),
              ("gat", dict(dims=[7, 3, 3], **gat)), ("gat-3layer", dict(dims=[7, 2, 3, 3], model="gat", heads=3)),
              ("agnn", dict(dims=[7, 4, 4, 4, 3], model="agnn", options={"train_first_beta": True})),
              ("va", dict(dims=[7, 4, 6, 3], model="va")),
              ("sage-mean", dict(dims=[7, 5, 3], model="sage", options={"aggr": "mean"})),
              ("sage-max", dict(dims=[7, 6, 4, 3], model="sage", options={"aggr": "max"}))]
    out = [(f"edge-{tag}-{tuple(GRAPHS)[j % 2]}", Case(graph=GRAPHS[tuple(GRAPHS)[j % 2]], **m, **kw))
           for j, (tag, m) in enumerate(models)]
    out.append(("edge-sage-min-ties", Case(graph=tie_graph(), dims=[7, 5, 3], model="sage", options={"aggr": "min"},
                                           **kw)))
    out.append(("edge-gine-directed", Case(graph=EDGE_GRAPHS["directed"], model="gine", dims=[7, 5, 3],
                                           options={"edge_dim": 4, "eps": 0.25}, **kw)))
    out.append(("edge-gatv2-undirected", Case(graph=EDGE_GRAPHS["undirected"], model="gatv2", dims=[7, 3, 3],
                                              heads=2, out_heads=1, options={"edge_dim": 4}, **kw)))
    out.append(("edge-rgcn-undirected", Case(graph=TYPED_GRAPHS["undirected"], model="rgcn", dims=[7, 9, 3],
                                             options={"num_relations": 3, "bases": 2}, **kw)))
    if P != 4:
        keep = {1: lambda j: j % 3 == 0, 2: lambda j: j % 2 == 1, 8: lambda j: j % 2 == 0}[P]
        out = [case for j, case in enumerate(out) if keep(j)]
    if P in (4, 8):
        out.append(("link-gcn-edge-directed", Case(graph=GRAPHS["directed"], dims=[7, 6, 4], task="link",
                                                   **{**kw, "epoch": 2})))
    if P in (2, 4):
        out.append(("wire-bfloat16-gat-edge", Case(graph=GRAPHS["directed"], dims=[7, 3, 3], wire="bfloat16",
                                                   **gat, **kw)))
    return out


def link_cases(P: int) -> list[tuple[str, Case]]:
    """Link prediction (the encoder on the training graph of the split, a dot decoder over every rank's slice of
    the training pairs): one layout of each algorithm, GCN encoders, a GAT one on 1d-sa and 2d and a GraphSAGE one
    on 3d, the graphs alternating."""
    if P == 1:
        return []
    s2, s3 = shapes_2d(P), shapes_3d(P)
    layouts = [("1d-skewed", dict(algo="1d", partition=skewed_partition(N, P, 8))),
               ("1d-sa", dict(algo="1d-sa")),
               ("1.5d-c2", dict(algo="1.5d", replication=2)),
               ("1.5d-sa-c2", dict(algo="1.5d-sa", replication=2)),
               (f"2d-{'x'.join(map(str, s2[len(s2) // 2]))}", dict(algo="2d", grid=s2[len(s2) // 2])),
               (f"3d-{'x'.join(map(str, s3[-1]))}", dict(algo="3d", grid=s3[-1])),
               (f"plexus-{'x'.join(map(str, s3[1]))}-double-perm", dict(algo="plexus", grid=s3[1],
                                                                         partition="double-perm"))]
    out = []
    for j, (tag, kw) in enumerate(layouts):
        gname = tuple(GRAPHS)[j % 2]
        dims = [7, 6, 4] if j % 3 else [7, 5, 6, 4]
        out.append((f"link-gcn-{tag}-{gname}", Case(graph=GRAPHS[gname], dims=dims, dropout=0.3, seed=7, epoch=2,
                                                    task="link", **kw)))
    out.append(("link-gat-1d-sa", Case(graph=GRAPHS["directed"], algo="1d-sa", dims=[7, 3, 4], model="gat", heads=2,
                                       out_heads=1, dropout=0.3, attn_dropout=0.2, seed=7, epoch=2, task="link")))
    out.append((f"link-gat-2d-{'x'.join(map(str, s2[0]))}",
                Case(graph=GRAPHS["undirected"], algo="2d", grid=s2[0], dims=[7, 3, 4], model="gat", heads=2,
                     out_heads=1, dropout=0.3, seed=7, epoch=2, task="link")))
    out.append((f"link-sage-3d-{'x'.join(map(str, s3[0]))}",
                Case(graph=GRAPHS["directed"], algo="3d", grid=s3[0], dims=[7, 6, 4], model="sage",
                     options={"aggr": "mean"}, dropout=0.3, seed=7, epoch=2, task="link")))
    for algo, kw in (("1.5d-sa", dict(replication=2)), ("plexus", dict(grid=s3[-1], partition="double-perm"))):
        out.append((f"link-mlp-{algo}", Case(graph=GRAPHS["undirected"], algo=algo, dims=[7, 6, 4], dropout=0.3,
                                             seed=7, epoch=2, task="link", decoder="mlp", **kw)))
    return out


def with_edge_features(g: Graph, d: int, seed: int) -> Graph:
    return g.with_(edge_attr=np.random.default_rng(seed).normal(size=(g.nnz, d)))


EDGE_GRAPHS = {"undirected": with_edge_features(GRAPHS["undirected"], 4, 11),
               "directed": with_edge_features(GRAPHS["directed"], 4, 12)}


def edge_feature_cases(P: int) -> list[tuple[str, Case]]:
    """GINE (edge features on every layout) at P = 4 and 8: every block-row algorithm (1.5D with c = 2, uneven
    blocks), every 2D and 3D shape at P = 4 (every third at P = 8; the graphs and depths rotating), and Plexus, which refuses it on every rank;
    GATv2 with edge features on each block-row algorithm and one 2D and 3D shape, and once without them."""
    if P not in (4, 8):
        return []
    out = []
    dims = ([7, 5, 3], [7, 6, 4, 3])

    def add(tag, k, **kw):
        gname = tuple(EDGE_GRAPHS)[k % 2]
        out.append((f"gine-{tag}-{gname}", Case(graph=EDGE_GRAPHS[gname], model="gine", dims=dims[(k // 2) % 2],
                                               options={"edge_dim": 4, "eps": 0.25}, dropout=0.4, seed=7, epoch=3,
                                               **kw)))

    add("1d-skewed", 0, algo="1d", partition=skewed_partition(N, P, 5))
    add("1d-sa-random", 1, algo="1d-sa", partition="random")
    add("1.5d-c2-skewed", 2, algo="1.5d", replication=2, partition=skewed_partition(N, P // 2, 6))
    add("1.5d-sa-c2-random", 3, algo="1.5d-sa", replication=2, partition="random")
    k = 4
    for algo, shapes in (("2d", shapes_2d(P)), ("3d", shapes_3d(P))):
        for shape in shapes if P == 4 else shapes[1::3]:  # every shape at P = 4, every third at P = 8
            add(f"{algo}-{'x'.join(map(str, shape))}", k, algo=algo, grid=shape, partition="random")
            k += 1
    gat = dict(model="gatv2", heads=2, out_heads=2, dims=[7, 3, 3], options={"edge_dim": 4}, dropout=0.4,
               attn_dropout=0.3, seed=7, epoch=3)  # GATv2 with edge features: one case per layout family
    s2, s3 = shapes_2d(P), shapes_3d(P)
    for j, (tag, kw) in enumerate((("1d-skewed", dict(algo="1d", partition=skewed_partition(N, P, 5))),
                                   ("1d-sa-random", dict(algo="1d-sa", partition="random")),
                                   ("1.5d-c2-skewed", dict(algo="1.5d", replication=2,
                                                           partition=skewed_partition(N, P // 2, 6))),
                                   ("1.5d-sa-c2-random", dict(algo="1.5d-sa", replication=2, partition="random")),
                                   (f"2d-{'x'.join(map(str, s2[1]))}", dict(algo="2d", grid=s2[1])),
                                   (f"3d-{'x'.join(map(str, s3[-2]))}", dict(algo="3d", grid=s3[-2])))):
        gname = tuple(EDGE_GRAPHS)[j % 2]
        out.append((f"gatv2-{tag}-{gname}", Case(graph=EDGE_GRAPHS[gname], **kw, **gat)))
    out.append((f"gatv2-no-edge-features-2d-{'x'.join(map(str, s2[-2]))}",
                Case(graph=GRAPHS["undirected"], algo="2d", grid=s2[-2], **{**gat, "options": {}})))
    out.append(("refused-gine-plexus", Case(graph=EDGE_GRAPHS["directed"], algo="plexus", dims=[7, 5, 3],
                                            model="gine", options={"edge_dim": 4}, grid=shapes_3d(P)[0], seed=7,
                                            epoch=3)))
    return out


def typed_graph(g: Graph, relations: int, seed: int) -> Graph:
    """``g``'s edges, each given a random relation, and a few of them given a second relation too (a pair joined
    by two relations is one stored entry counting both), with ``g``'s node data. The pattern stays ``g``'s (that of
    the ``undirected`` graph symmetric); the two directions of a pair draw their relations apart."""
    r = np.random.default_rng(seed)
    src, dst = g.edge_index()
    kind = r.integers(0, relations, src.size)
    again = r.random(src.size) < 0.2
    src, dst = np.concatenate([src, src[again]]), np.concatenate([dst, dst[again]])
    kind = np.concatenate([kind, (kind[again] + 1) % relations])
    return Graph.from_edges(src, dst, g.n, edge_type=kind, num_relations=relations, x=g.x, y=g.y,
                            train_mask=g.train_mask, val_mask=g.val_mask, test_mask=g.test_mask)


TYPED_GRAPHS = {"undirected": typed_graph(GRAPHS["undirected"], 3, 13),
                "directed": typed_graph(GRAPHS["directed"], 3, 14)}


def relation_cases(P: int) -> list[tuple[str, Case]]:
    """R-GCN (relation types, PyG ``RGCNConv`` semantics) on every block-row algorithm and, at P = 4, every 2D, 3D
    and Plexus grid shape (at P = 8 one of each), bases (B = 2) and one weight per relation alternating, each
    layer's narrower side aggregated ([7, 9, 3]: H, then HW), the graphs alternating; Plexus on a double vertex
    order too."""
    if P not in (4, 8):
        return []
    s2, s3 = shapes_2d(P), shapes_3d(P)
    layouts = [("1d-skewed", dict(algo="1d", partition=skewed_partition(N, P, 9))),
               ("1d-sa", dict(algo="1d-sa")),
               ("1.5d-c2", dict(algo="1.5d", replication=2)),
               ("1.5d-sa-c2", dict(algo="1.5d-sa", replication=2))]
    grids = [("2d", s2 if P == 4 else [s2[1]]), ("3d", s3 if P == 4 else [s3[-2]]),
             ("plexus", s3 if P == 4 else [s3[1]])]
    layouts += [(f"{algo}-{'x'.join(map(str, shape))}", dict(algo=algo, grid=shape))
                for algo, shapes in grids for shape in shapes]
    layouts.append((f"plexus-{'x'.join(map(str, s3[-1]))}-double-perm", dict(algo="plexus", grid=s3[-1],
                                                                            partition="double-perm")))
    out = []
    for j, (tag, kw) in enumerate(layouts):
        gname = tuple(TYPED_GRAPHS)[j % 2]
        bases = 2 if j % 2 == 0 else 0
        out.append((f"rgcn-b{bases}-{tag}-{gname}", Case(graph=TYPED_GRAPHS[gname], model="rgcn", dims=[7, 9, 3],
                                                         options={"num_relations": 3, "bases": bases}, dropout=0.4,
                                                         seed=7, epoch=3, **kw)))
    return out


def overlap_cases(P: int) -> list[tuple[str, Case]]:
    """``--overlap`` on the stage loops (1D and 1.5D with uneven blocks, 2D and 3D panels), the sparsity-aware
    all-to-allv (1d-sa, 1.5d-sa) and the gradient buckets: each case twice, with and without
    (``overlap-on-``/``overlap-off-``), two models per layout among GCN (pushes), GAT and VA (a backward that fetches
    again for ``∂e``, the SDDMMs), SAGE-max (the selecting semirings), AGNN with a bfloat16 wire and VA with
    bfloat16 gradients; buckets of 256 bytes, so the gradients cross in several all-reduces."""
    out = []
    kw = dict(dropout=0.4, seed=7, epoch=3, grad_bucket_bytes=256)
    gcn, gat = dict(model="gcn", dims=[7, 9, 4, 3]), dict(model="gat", dims=[7, 3, 3], heads=2, attn_dropout=0.3)
    sage = dict(model="sage", dims=[7, 6, 3], options={"aggr": "max"})
    agnn, va = dict(model="agnn", dims=[7, 5, 5, 3], wire="bfloat16"), dict(model="va", dims=[7, 5, 3],
                                                                          grad_wire="bfloat16")
    layouts = [("1d", dict(replication=1, partition=skewed_partition(N, P, 6)), (gcn, gat)),
               ("1d-sa", dict(replication=1, partition=skewed_partition(N, P, 8)), (va, sage))]
    if P % 2 == 0 and P > 2:  # c = 2 (P = 2 would leave one block: nothing to stage)
        layouts.append(("1.5d", dict(replication=2, partition=skewed_partition(N, P // 2, 7)), (sage, agnn)))
        layouts.append(("1.5d-sa", dict(replication=2, partition=skewed_partition(N, P // 2, 9)), (gcn, va)))
    s2, s3 = shapes_2d(P), shapes_3d(P)
    layouts += [("2d", dict(grid=s2[len(s2) // 2]), (gat, va)), ("3d", dict(grid=s3[len(s3) // 2]), (sage, agnn))]
    k = 0
    for j, (algo, where, models) in enumerate(layouts):
        for i, m in enumerate(models):
            if P >= 8 and (i + j) % 2:  # the paths of P = 2 and 4 again: one model per layout, alternating
                continue
            gname = tuple(GRAPHS)[k % 2]
            k += 1
            case = Case(graph=GRAPHS[gname], algo=algo, **where, **m, **kw)
            name = f"{m['model']}-{algo}-{'x'.join(map(str, case.grid)) if case.grid else f'c{case.replication}'}" \
                   f"-{gname}"
            out += [(f"overlap-on-{name}", Case(**{**case.__dict__, "overlap": True})),
                    (f"overlap-off-{name}", case)]
    return out


def wire_cases(P: int) -> list[tuple[str, Case]]:
    """``--comm-dtype`` on every layout family (float64 training): bfloat16 and float16 node data, and a float32
    wire, on the collectives each family runs (broadcast and its gathered adjoint, all-to-allv, the ``rep`` sums
    next to exact ``max`` reductions, SUMMA panels and fibers, Plexus records with weights that stay exact)."""
    if P == 1:
        return []
    g, d = GRAPHS["undirected"], GRAPHS["directed"]
    kw = dict(dropout=0.4, seed=7, epoch=3)
    gat = dict(model="gat", heads=2, out_heads=1, attn_dropout=0.3)
    s2, s3 = shapes_2d(P)[1], shapes_3d(P)[-2]
    out = [("gcn-1d-skewed", Case(graph=g, algo="1d", dims=[7, 5, 3], partition=skewed_partition(N, P, 5), **kw)),
           ("gat-1d-sa", Case(graph=d, algo="1d-sa", dims=[7, 3, 3], **gat, **kw)),
           ("agnn-1.5d-c2", Case(graph=g, algo="1.5d", dims=[7, 5, 5, 3], model="agnn", replication=2, **kw)),
           ("sage-max-1.5d-sa-c2", Case(graph=d, algo="1.5d-sa", dims=[7, 6, 3], model="sage",
                                        options={"aggr": "max"}, replication=2, **kw)),
           (f"gat-3d-{'x'.join(map(str, s3))}", Case(graph=g, algo="3d", dims=[7, 3, 3], grid=s3, **gat, **kw)),
           (f"va-2d-{'x'.join(map(str, s2))}", Case(graph=d, algo="2d", dims=[7, 5, 3], model="va", grid=s2, **kw)),
           (f"gcn-plexus-{'x'.join(map(str, s3))}-double", Case(graph=d, algo="plexus", dims=[7, 9, 4, 3], grid=s3,
                                                                partition="double-perm", block_rows=5, **kw)),
           (f"gat-plexus-{'x'.join(map(str, s3))}", Case(graph=g, algo="plexus", dims=[7, 3, 3], grid=s3, **gat,
                                                         **kw)),
           (f"gcn-plexus-rs-{'x'.join(map(str, s3))}", Case(graph=d, algo="plexus-rs", dims=[7, 9, 4, 3], grid=s3,
                                                            partition="double-perm", **kw))]
    if P % 2:
        out = [(n, c) for n, c in out if c.replication == 1]
    wires = ("bfloat16", "float16", "float32")  # rotating: each family meets a narrow wire (the mechanism is the
    # same for both 2-byte types) and a float32 one
    narrowed = [(f"wire-{wires[k % 3]}-{name}", Case(**{**case.__dict__, "wire": wires[k % 3]}))
                for k, (name, case) in enumerate(out)]
    # --grad-dtype bfloat16: the gradient buckets narrowed, on the block axis, the block axis with replicas, and
    # SUMMA's rows then fiber (two buckets each: several all-reduces)
    grads = [("gcn-1d", Case(graph=g, algo="1d", dims=[7, 5, 3], **kw)),
             ("va-3d", Case(graph=d, algo="3d", dims=[7, 5, 3], model="va", grid=s3, **kw))]
    if P % 2 == 0 and P > 2:  # (P = 2, c = 2: one block, no gradient sum)
        grads.append(("gat-1.5d-sa-c2", Case(graph=d, algo="1.5d-sa", dims=[7, 3, 3], replication=2, **gat, **kw)))
    return narrowed + [(f"wire-grad-bfloat16-{name}", Case(**{**case.__dict__, "grad_wire": "bfloat16",
                                                             "grad_bucket_bytes": 128})) for name, case in grads]


def attention_cases(P: int) -> list[tuple[str, Case]]:
    """AGNN and vanilla attention on every algorithm: block rows (every c, uneven blocks), every 2D/3D shape,
    every Plexus shape (double permutation on every other); the two graphs and two depths alternate."""
    out = []
    models = {"agnn": [([7, 4, 4, 4, 3], {"train_first_beta": True}), ([7, 5, 5, 3], {})],
              "va": [([7, 5, 3], {}), ([7, 4, 6, 3], {})]}
    for model, variants in models.items():
        k = 0

        def add(tag, **kw):
            nonlocal k
            gname = tuple(GRAPHS)[k % 2]
            dims, options = variants[k % 2]
            k += 1
            out.append((f"{model}-{tag}-{gname}", Case(graph=GRAPHS[gname], dims=dims, model=model, options=options,
                                                      dropout=0.4, seed=7, epoch=3, **kw)))

        for algo in ("1d", "1d-sa"):
            add(f"{algo}-skewed", algo=algo, partition=skewed_partition(N, P, 5))
        for i, c in enumerate([c for c in PS if P % c == 0]):
            for m, algo in enumerate(("1.5d", "1.5d-sa")):
                if P >= 8 and (i + m + tuple(models).index(model)) % 2:  # one of the two per c, rotating
                    continue
                add(f"{algo}-c{c}-skewed", algo=algo, replication=c, partition=skewed_partition(N, P // c, 6))
        half = len(shapes_3d(P)) > 3  # many 3D shapes: each model on every other one (AGNN and VA alternate)
        for algo, shapes in (("2d", shapes_2d(P)), ("3d", shapes_3d(P))):
            for j, shape in enumerate(shapes):
                if algo == "3d" and half and (j + tuple(models).index(model)) % 2:
                    continue
                add(f"{algo}-{'x'.join(map(str, shape))}-random", algo=algo, grid=shape, partition="random")
        for j, shape in enumerate(shapes_3d(P)):
            if half and (j // 2 + tuple(models).index(model)) % 2:  # the kept ones meet both vertex orders
                continue
            part = "double-perm" if j % 2 == 0 else "random"
            add(f"plexus-{'x'.join(map(str, shape))}-{part}", algo="plexus", grid=shape, partition=part)
    return out + sage_cases(P)


def tie_graph() -> Graph:
    """Integer features in {-1, 0, 1}: max/min aggregation meets ties everywhere (the smallest original id wins)."""
    g = random_graph(N, 80, directed=True, seed=3)
    g.x = np.random.default_rng(4).integers(-1, 2, g.x.shape).astype(np.float64)
    return g


def sage_cases(P: int) -> list[tuple[str, Case]]:
    """GraphSAGE: every --aggr on every block-row layout (every c, uneven blocks; max/min also on a graph full of
    ties), mean, max and min on the 2D/3D/Plexus shapes (where a P has more than three shapes, each shape under one
    of them and one graph, rotating; Plexus alternating the double permutation)."""
    out = []
    graphs = {**GRAPHS, "ties": tie_graph()}
    dims = {"2layer": [7, 5, 3], "3layer": [7, 9, 9, 3]}  # (a mean or a sum: each order, equal widths after layer 0)
    k = 0
    for aggr in ("mean", "sum", "max", "min"):
        names = list(graphs) if aggr in ("max", "min") else list(GRAPHS)
        if P == 1:  # one block: one graph per aggregation (the tie graph for max and min)
            names = names[-1:]
        elif P >= 8:  # the paths of P = 2 and 4 again: one graph per aggregation, rotating (ties for max)
            names = [names[("mean", "sum", "max", "min").index(aggr) % len(names) - 1]]
        for gname in names:
            dname = tuple(dims)[k % 2]
            k += 1
            kw = dict(graph=graphs[gname], dims=dims[dname], model="sage", options={"aggr": aggr}, dropout=0.3,
                      seed=7, epoch=3)
            for m, algo in enumerate(("1d", "1d-sa")):
                if P >= 8 and (k // 2 + m) % 2:  # P = 8: one of the two per (aggregation, graph), rotating apart
                    # from the depth (each meets both depths)
                    continue
                out.append((f"sage-{aggr}-{algo}-{gname}-{dname}-skewed",
                            Case(algo=algo, partition=skewed_partition(N, P, 5), **kw)))
            cs = [c for c in PS if P % c == 0]  # one c per (aggregation, graph), rotating: the GCN cases run every c
            for m, algo in enumerate(("1.5d", "1.5d-sa")):
                c = cs[(k + m) % len(cs)]
                out.append((f"sage-{aggr}-{algo}-c{c}-{gname}-{dname}-skewed",
                            Case(algo=algo, replication=c, partition=skewed_partition(N, P // c, 6), **kw)))
            if aggr != "sum":  # sum and mean share the generic path (row_sum + spmm); mean exercises both
                for algo, shapes in (("2d", shapes_2d(P)), ("3d", shapes_3d(P)), ("plexus", shapes_3d(P))):
                    for j, shape in enumerate(shapes):
                        if len(shapes) > 3:  # each shape under one aggregation and one graph, rotating
                            keep = j % 3 == ("mean", "max", "min").index(aggr) \
                                and names[(j // 3) % len(names)] == gname
                        else:  # each shape on one of the graphs (rotating): the other graphs ran its path; two
                            # shapes (2D at P = 2) rotate apart for each aggregation, so that max and min split the
                            # sources of the tie graph and of the directed one
                            turn = ("mean", "max", "min").index(aggr) if len(shapes) <= 2 else 0
                            keep = (j + names.index(gname) + turn) % len(names) == 0
                        if not keep:
                            continue
                        part = "double-perm" if algo == "plexus" and (j + k) % 2 else "random"
                        out.append((f"sage-{aggr}-{algo}-{'x'.join(map(str, shape))}-{gname}-{dname}-{part}",
                                    Case(algo=algo, grid=shape, partition=part, **kw)))
    return out


GAT_DIMS = {"2layer": ([7, 3, 3], 2, 2), "3layer": ([7, 2, 3, 3], 3, 1)}  # (dims, heads, last-layer heads)
_CACHE: dict = {}


def results(P: int):
    """``{case name: (case, [per-rank CaseResult])}`` for every case of P, computed once."""
    if P not in _CACHE:
        named = cases_for(P)
        out = launch(distributed_worker, P, [c for _, c in named], device="cpu", collect=True)
        _CACHE[P] = {name: (case, [out[r][k] for r in range(P)]) for k, (name, case) in enumerate(named)}
    return _CACHE[P]


@pytest.fixture(params=PS, ids=lambda p: f"P{p}")
def dist_results(request):
    return request.param, results(request.param)


def staged_cases(P: int) -> list[tuple[str, Case]]:
    """Cases for ranks that share a device (host-staged collectives, :mod:`gridgnn.distributed.staged`; on a GPU, and
    on the host taking a device's code paths): every ``--overlap`` case (started broadcasts, all-to-allvs and
    gradient buckets, bfloat16 node data and gradients, a narrowed reduce: every kind of collective the Comm issues),
    one narrowed wire per family and the first case of each algorithm × GCN, GAT and SAGE. Refusals are left out
    (the staged test demands every case run)."""
    named = [(n, c) for n, c in cases_for(P) if not n.startswith("refused")]
    out = [(n, c) for n, c in named if n.startswith("overlap-on-")]
    seen_families = set()
    for n, c in named:
        if n.startswith("wire-") and not n.startswith("wire-grad-") and c.algo not in seen_families:
            seen_families.add(c.algo)
            out.append((n, c))
    seen = {(c.algo, c.model) for _, c in out}
    for n, c in named:
        if c.model in ("gcn", "gat", "sage") and (c.algo, c.model) not in seen and c.task == "node":
            seen.add((c.algo, c.model))
            out.append((n, c))
    return out
