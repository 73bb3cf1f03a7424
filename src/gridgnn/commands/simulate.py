r"""``gridgnn simulate``: the bytes and messages every rank of a configuration sends and receives in one training
step, its local work and its estimated peak memory, without starting its processes
(:mod:`gridgnn.planner.simulate`), as a table and as JSON."""
from __future__ import annotations

import time

from ..errors import GridGnnError
from ..train.config import add_flags, given_flags
from ..train.outputs import add_overwrite_flag, check_new_files

#: The config fields ``simulate`` reads (its flags are generated from their declarations, as ``train``'s): the data,
#: the model, the layout and the wire of one full-graph configuration.
SIMULATE_FLAGS = ("data", "model", "heads", "attn_dropout", "aggr", "bases", "layer_order", "edge_dim", "relations",
                  "layers", "hidden", "feature_norm", "algo", "nproc", "replication", "grid", "partition",
                  "blocked_aggregation", "seed", "dtype", "comm_dtype", "grad_dtype", "overlap")


def add_simulate_arguments(p) -> None:
    add_flags(p, SIMULATE_FLAGS, helps={"nproc": "processes simulated (none are started)"})
    p.add_argument("--out", metavar="FILE", help="write the per-rank volumes as JSON")
    add_overwrite_flag(p)
    p.add_argument("--per-rank", action="store_true", help="also print one line per rank")


def fixed_wire(given: dict) -> None:
    """``simulate`` and ``plan`` price a fixed wire: ``--comm-dtype auto`` decides while training."""
    if given.get("comm_dtype") == "auto":
        raise GridGnnError("--comm-dtype auto decides while training; give the wire type to price (float32, "
                           "bfloat16, float16)")


def run_simulate_command(args) -> int:
    from ..train.invocation import config_from_flags
    from ..graph.files import write_report

    check_new_files([args.out], overwrite=args.overwrite)  # before any work
    given = given_flags(args, SIMULATE_FLAGS)
    given.setdefault("nproc", 1)
    fixed_wire(given)
    if given.get("algo") == "auto":
        raise GridGnnError("gridgnn simulate models one configuration; gridgnn plan ranks them all (what --algo "
                           "auto picks)")
    cfg = config_from_flags(given)
    if cfg.sampler is not None:
        raise GridGnnError("gridgnn simulate models full-graph training (no --sampler)")
    from ..train.data_checks import planned_graph
    from ..train.planning import memory_per_rank, simulate_config

    t0 = time.perf_counter()
    graph = planned_graph(cfg)
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

