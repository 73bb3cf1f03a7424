r"""``gridgnn simulate``: the bytes and messages every rank of a configuration sends and receives in one training
step, its local work and its estimated peak memory, without starting its processes
(:mod:`gridgnn.planner.simulate`), as a table and as JSON."""
from __future__ import annotations

import time

SIMULATE_FLAGS = ("data", "model", "heads", "aggr", "bases", "layers", "hidden", "algo", "nproc", "replication", "grid",
                  "partition", "seed", "dtype", "comm_dtype", "grad_dtype", "overlap")


def add_model_arguments(p) -> None:
    """The data and model flags that ``simulate`` and ``plan`` share with ``train``."""
    p.add_argument("--data", metavar="SPEC", help="data SPEC (default: the embedded synthetic SBM)")
    from ..nn import MODELS

    p.add_argument("--model", metavar="NAME", help=f"{', '.join(MODELS)} (default gcn), or package.module:Class")
    p.add_argument("--heads", type=int, metavar="K")
    p.add_argument("--aggr", choices=("mean", "sum", "max", "min"))
    p.add_argument("--bases", type=int, metavar="B", help="rgcn: basis matrices per layer (0: one per relation)")
    p.add_argument("--layers", type=int, metavar="L")
    p.add_argument("--hidden", type=int, metavar="H")


def add_wire_argument(p) -> None:
    """``--comm-dtype``, ``--grad-dtype`` and ``--overlap`` as ``simulate`` and ``plan`` price them (the fixed wire types: ``auto``
    decides while training)."""
    p.add_argument("--comm-dtype", dest="comm_dtype", choices=("float64", "float32", "bfloat16", "float16"),
                   help="the wire type of node rows and partial sums (default: --dtype; auto's choices are made "
                        "while training)")
    p.add_argument("--grad-dtype", dest="grad_dtype", choices=("float64", "float32", "bfloat16"),
                   help="the wire type of the weights' gradients (default: --dtype)")
    p.add_argument("--overlap", action="store_true", default=None,
                   help="transfers overlapped with the computation (the stage loops of 1d, 1.5d, 2d, 3d: two remote "
                        "blocks in memory; the -sa halo; the gradient buckets; plan: the time model hides what the "
                        "computation can)")


def add_simulate_arguments(p) -> None:
    add_model_arguments(p)
    from ..parallel import ALGOS

    p.add_argument("--algo", metavar="A", help=f"{', '.join(ALGOS)} (or an algorithm of your own by import path)")
    p.add_argument("--nproc", type=int, metavar="P", help="processes simulated (none are started)")
    p.add_argument("--replication", type=int, metavar="C")
    p.add_argument("--grid", metavar="X,Y[,Z]")
    p.add_argument("--partition", metavar="METHOD|FILE")
    p.add_argument("--seed", type=int)
    p.add_argument("--dtype", choices=("float32", "float64"))
    add_wire_argument(p)
    p.add_argument("--out", metavar="FILE", help="write the per-rank volumes as JSON")
    p.add_argument("--per-rank", action="store_true", help="also print one line per rank")


def run_simulate_command(args) -> int:
    from ..errors import GridGnnError
    from ..train.invocation import config_from_flags
    from ..train.outputs import write_report

    given = {k: getattr(args, k) for k in SIMULATE_FLAGS if getattr(args, k) is not None}
    if given.get("nproc") is None:
        given["nproc"] = 1
    if given.get("algo") == "auto":
        raise GridGnnError("gridgnn simulate models one configuration; gridgnn plan ranks them all (what --algo "
                           "auto picks)")
    cfg = config_from_flags(given)
    if cfg.sampler is not None:
        raise GridGnnError("gridgnn simulate models full-graph training (no --sampler)")
    from ..graph.spec import load_graph
    from ..train.planning import memory_per_rank, simulate_config

    t0 = time.perf_counter()
    graph = load_graph(cfg.data, seed=cfg.seed)
    vol, shape, source, rows = simulate_config(cfg, graph)
    memory = memory_per_rank(cfg, graph, source, rows, shape, vol.trace)
    wall = time.perf_counter() - t0
    ranks = vol.per_rank()
    for r in ranks:  # local work of the step (gridgnn.planner.primitives.call_work) and the memory estimate
        r["work"] = {u: float(v[r["rank"]]) for u, v in vol.work.items()}
        r["peak_memory_bytes"] = None if memory is None else memory[r["rank"]]
    moved = vol.moved_by_phase()
    report = {
        "algo": cfg.algo, "nproc": cfg.nproc, "grid": list(shape), "replication": cfg.replication,
        "partition": cfg.partition, "model": cfg.model, "layers": cfg.layers, "hidden": cfg.hidden,
        "dtype": cfg.dtype, "data": cfg.data or "default", "n": graph.n, "nnz": graph.nnz,
        "nparams": vol.nparams, "primitives": [c.name for c in vol.calls],
        "step_bytes_moved": {"total": float(sum(moved.values())), "by_phase": moved},
        "max_rank_send_bytes": max(r["sent_total"] for r in ranks),
        "max_rank_recv_bytes": max(r["recv_total"] for r in ranks),
        "max_rank_messages": max(r["calls_total"] for r in ranks),
        "max_rank_work": {u: float(v.max()) for u, v in vol.work.items()},
        "max_rank_peak_memory_bytes": None if memory is None else max(memory),
        "ranks": ranks, "simulate_time_s": wall,
    }
    if args.out:
        write_report(args.out, report)
    print(f"{cfg.algo} P={cfg.nproc} grid {'x'.join(map(str, shape))} on n={graph.n} nnz={graph.nnz}, "
          f"{cfg.model} {cfg.layers} layers hidden {cfg.hidden}, {cfg.dtype}: one training step")
    print(f"{'phase.collective':<22} {'moved MB':>12} {'max rank sent MB':>17} {'max rank recv MB':>17} "
          f"{'max rank msgs':>14}")
    for key, v in moved.items():
        s, r, c = vol.bytes[key]
        print(f"{key:<22} {v / 1e6:12.4f} {s.max() / 1e6:17.4f} {r.max() / 1e6:17.4f} {int(c.max()):14d}")
    print(f"{'total':<22} {report['step_bytes_moved']['total'] / 1e6:12.4f} "
          f"{report['max_rank_send_bytes'] / 1e6:17.4f} {report['max_rank_recv_bytes'] / 1e6:17.4f} "
          f"{report['max_rank_messages']:14d}")
    work = report["max_rank_work"]
    mem = report["max_rank_peak_memory_bytes"]
    print(f"busiest rank: {work['nnz']:.4g} edges visited, {work['edge']:.4g} edge x column products, "
          f"{work['flop']:.4g} dense multiply-adds" + ("" if mem is None else f"; peak memory {mem / 2 ** 30:.3f} GiB"))
    if args.per_rank:
        for r in ranks:
            print(f"rank {r['rank']:5d}: sent {r['sent_total'] / 1e6:.4f} MB, received {r['recv_total'] / 1e6:.4f} MB "
                  f"in {r['calls_total']} messages; {r['work']['nnz']:.4g} edges visited")
    print(f"simulated in {wall:.2f} s" + (f"; per-rank volumes in {args.out}" if args.out else ""))
    return 0

