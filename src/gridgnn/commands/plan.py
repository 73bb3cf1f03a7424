r"""``gridgnn plan``: every valid configuration of a run ranked by predicted step time and per-rank memory
(:mod:`gridgnn.planner.plan`, :mod:`gridgnn.planner.timing`), as a table and as ``plan.json``."""
from __future__ import annotations

import math
import time

import shlex

from ..errors import GridGnnError
from ..train.config import add_flags, command_flags, given_flags
from ..train.outputs import add_overwrite_flag, check_new_files
from .simulate import SIMULATE_FLAGS, fixed_wire

#: The config fields ``plan`` reads: those of ``simulate`` but the layout, which it chooses.
PLAN_FLAGS = tuple(f for f in SIMULATE_FLAGS if f not in ("algo", "replication", "grid", "partition",
                                                          "blocked_aggregation"))


def add_plan_arguments(p) -> None:
    add_flags(p, PLAN_FLAGS + ("profile",), helps={
        "nproc": "processes planned for (none are started)",
        "profile": "machine profile (gridgnn calibrate --out FILE, or local-cpu, perlmutter-a100, frontier-mi250x; "
                   "default local-cpu)"})
    p.add_argument("--algos", metavar="A,B", help="only these algorithms (default: all)")
    p.add_argument("--partitions", metavar="M,N",
                   help="row partitions of the 1D/1.5D candidates (default random,metis)")
    p.add_argument("--memory", metavar="GiB", type=float,
                   help="memory the ranks of a node may use (default: this machine's available memory)")
    p.add_argument("--jobs", type=int, metavar="N",
                   help="worker processes that price the configurations (default: one per core for a large plan; "
                        "1 for a small one); the plan is the same whatever the number")
    p.add_argument("--top", type=int, default=20, metavar="N", help="rows printed (default 20; plan.json has all)")
    p.add_argument("--out", metavar="FILE", help="write the ranked plan as JSON (e.g. plan.json)")
    add_overwrite_flag(p)


def check_read(nproc: int, listing: dict, *, partitions: str | None, overlap: bool) -> None:
    """``--partitions`` and ``--overlap`` refused where no candidate of the algorithms listed reads them (the
    families' own candidates say which do), as training refuses what shapes nothing."""
    from ..parallel.registry import algorithm
    from ..planner.plan import candidates

    probe = "\0given"  # a row partition no family names: a candidate carrying it reads --partitions
    planned = candidates(nproc, row_partitions=(probe,), algos=listing.get("algos"))
    which = f"--algos {','.join(listing['algos'])}" if "algos" in listing else "the candidates"
    which += f" of {nproc} process{'es' if nproc > 1 else ''}"
    if partitions is not None and not any(c.partition == probe for c in planned):
        raise GridGnnError(f"--partitions {partitions} orders the rows of the 1D/1.5D candidates; {which} have "
                           "none")
    if overlap and not any(algorithm(c.algo).overlap for c in planned):
        raise GridGnnError(f"--overlap prices transfers hidden behind the work; {which} have no overlap")


def run_plan_command(args) -> int:
    from ..train.data_checks import planned_graph
    from ..parallel import ALGOS
    from ..distributed.machine import available_memory_bytes
    from ..planner.plan import Candidate
    from ..planner.timing import load_profile
    from ..train.invocation import config_from_flags
    from ..train.console import Progress
    from ..graph.files import write_report
    from ..train.planning import plan_configs
    from ..train.rank_layout import BUILTIN_PARTITIONS, GRAPH_PARTITIONERS

    check_new_files([args.out], overwrite=args.overwrite)  # before any work
    given = given_flags(args, PLAN_FLAGS)
    given.setdefault("nproc", 1)
    # the job planned, as its command line, which the pick's flags complete (--overlap: where the pick overlaps)
    job = command_flags({k: v for k, v in given.items() if k != "overlap"})
    fixed_wire(given)
    given["algo"] = "serial" if given["nproc"] == 1 else "1d"
    cfg = config_from_flags(given)
    profile = load_profile(getattr(args, "profile", None))
    listing = {}
    for flag, text, key, valid in (("--algos", args.algos, "algos", ALGOS),
                                   ("--partitions", args.partitions, "row_partitions",
                                    BUILTIN_PARTITIONS + GRAPH_PARTITIONERS)):
        if text is None:
            continue
        names = tuple(a.strip() for a in text.split(",") if a.strip())
        if not names:  # (an empty list planned everything)
            raise GridGnnError(f"{flag} {text!r} names nothing; leave it out to plan every one")
        unknown = [a for a in names if a not in valid]
        if unknown:
            raise GridGnnError(f"{flag}: unknown {'algorithm' if key == 'algos' else 'row partition'} "
                               f"{unknown[0]!r}; choose from {', '.join(valid)}")
        listing[key] = list(names) if key == "algos" else names
    check_read(cfg.nproc, listing, partitions=args.partitions, overlap=bool(given.get("overlap")))
    if args.top < 1:
        raise GridGnnError(f"--top must be >= 1, got {args.top}")
    if args.memory is not None and not (math.isfinite(args.memory) and args.memory > 0):
        raise GridGnnError(f"--memory must be a positive number of GiB, got {args.memory}")
    avail = int(args.memory * 2 ** 30) if args.memory is not None else available_memory_bytes("cpu")
    t0 = time.perf_counter()
    graph = planned_graph(cfg)
    progress = Progress(0, what="plan", unit="configurations")
    try:
        rows = plan_configs(cfg, graph, profile, available_bytes=avail, progress=progress, jobs=args.jobs,
                            **listing)
    finally:
        progress.close()
    wall = time.perf_counter() - t0
    print(f"{len(rows)} configurations of {cfg.nproc} processes for {cfg.model} ({cfg.layers} layers, hidden "
          f"{cfg.hidden}) on n={graph.n} nnz={graph.nnz}; profile: {profile.name}")
    fit = profile.fit
    runs = fit.get("runs")
    print(f"step ms = {fit.get('comp', 1.0):.3g} x comp ms + {fit.get('comm', 1.0):.3g} x comm ms + "
          f"{fit.get('const_s', 0.0) * 1e3:.3g} ms: comp and comm are the model's local work and transfers, the "
          f"factors and the constant (optimizer, Python, overlap) " + (f"fitted to {runs} measured runs" if runs else
                                                                      "of the profile (not fitted)"))
    print(f"{'rank':>4}  {'configuration':<30} {'step ms':>9} {'comp ms':>9} {'comm ms':>9} {'MB moved':>10} "
          f"{'msgs':>6} {'GiB/rank':>9}")
    for r in rows[:args.top]:
        mem = "-" if r["peak_memory_bytes"] is None else f"{r['peak_memory_bytes'] / 2 ** 30:.3f}"
        print(f"{r['rank']:4d}  {r['name']:<30} {r['predicted_step_s'] * 1e3:9.2f} {r['comp_s'] * 1e3:9.2f} "
              f"{r['comm_s'] * 1e3:9.2f} {r['step_bytes_moved'] / 1e6:10.3f} {r['max_rank_messages']:6d} "
              f"{mem:>9}" + ("" if r["fits"] else "  does not fit"))
    if len(rows) > args.top:
        print(f"… {len(rows) - args.top} more" + (f" in {args.out}" if args.out else " (--out FILE writes them all)"))
    best = rows[0]  # (ranked: a configuration that fits first)
    if best["fits"]:
        pick = shlex.join(["gridgnn", "train", *job, *Candidate.from_options(best["config"]).flags(),
                           *(["--overlap"] if best["config"].get("overlap") else [])])
        print(f"pick: {pick}  (planned in {wall:.1f} s)")
    else:
        shared = "; the ranks of a node share its memory" if profile.cores else ""
        print(f"pick: none, no configuration fits in the memory available (--memory, default this machine's; "
              f"GiB/rank is a configuration's busiest rank{shared})  (planned in {wall:.1f} s)")
    if args.out:
        write_report(args.out, {"nproc": cfg.nproc, "model": cfg.model, "layers": cfg.layers, "hidden": cfg.hidden,
                              "data": cfg.data or "default", "n": graph.n, "nnz": graph.nnz,
                              "profile": profile.name, "fit": profile.fit, "plan_s": wall, "configs": rows})
    return 0
