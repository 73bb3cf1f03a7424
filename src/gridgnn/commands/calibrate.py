r"""``gridgnn calibrate``: measure this machine's profile (:mod:`gridgnn.planner.calibrate`), then fit the time
model's coefficients θ (:func:`gridgnn.planner.timing.fit_profile`) to real training steps: by default a few
short runs it trains itself (:func:`fit_steps`: one configuration per algorithm on :data:`STEP_GRAPH`), with
``--fit`` the runs given."""
from __future__ import annotations

import os
import sys

from ..train.outputs import add_overwrite_flag, check_new_files

#: the graph calibrate's own training steps run on: large enough that a step is mostly the work the model prices
STEP_GRAPH = "synthetic:rmat?scale=14&edge_factor=16&features=64"
#: ``--quick``: a smaller one, fewer configurations and epochs
STEP_GRAPH_QUICK = "synthetic:rmat?scale=11&edge_factor=8&features=16"
STEP_EPOCHS = 6


def add_calibrate_arguments(p) -> None:
    p.add_argument("--out", metavar="FILE", default="profile.json", help="profile written (default profile.json)")
    add_overwrite_flag(p)
    p.add_argument("--max-nproc", type=int, default=None, metavar="P",
                   help=f"largest group the collectives are measured on (2, 4, … P; default {_MEASURING['max_nproc']})")
    p.add_argument("--quick", action="store_true",
                   help="fewer sizes and repetitions, four short training steps on a small graph (a rough profile)")
    p.add_argument("--profile", metavar="FILE|PRESET",
                   help="start from this profile instead of measuring (with --fit: refit its coefficients)")
    p.add_argument("--fit", nargs="+", metavar="RUN_DIR",
                   help="fit the time model to these gridgnn train --out directories (their summary.json) instead "
                        "of the short runs calibrate trains itself")
    p.add_argument("--no-steps", action="store_true",
                   help="measure kernels and collectives only (θ = 1, 1, 0: no training steps are run)")
    p.add_argument("--device", choices=("cpu", "cuda"), default=None,
                   help=f"where the kernels and steps are measured (default {_MEASURING['device']})")


#: the defaults of the flags that say how calibrate measures, which --profile (no measurement) refuses
_MEASURING = {"max_nproc": 8, "device": "cpu", "quick": False, "no_steps": False}


def fit_rows(profile, run_dirs: list[str]) -> list[dict]:
    r"""For every run directory: its configuration simulated and priced with ``profile`` (unfitted terms) next to
    its measured median step time."""
    from ..errors import GridGnnError
    from ..graph.saved import read_document
    from ..graph.spec import load_graph
    from ..planner.plan import Candidate, price
    from ..train.config import read_config_file
    from ..train.invocation import config_from_flags
    from ..train.planning import simulate_config

    rows, graphs = [], {}
    for d in run_dirs:
        path = os.path.join(d, "summary.json")
        if not os.path.isfile(path):
            raise GridGnnError(f"--fit {d}: no summary.json (a gridgnn train --out directory)")
        flags = read_config_file(path)  # checks the file (bounded, strict JSON, a run's config)
        summary = read_document(path, "a run summary", kind="json")
        measured = summary.get("epoch_time_median_s")
        if not isinstance(measured, (int, float)) or not measured > 0:
            raise GridGnnError(f"--fit {d}: summary.json has no measured epoch_time_median_s")
        if str(flags.get("data", "")).startswith("in-memory:") or flags.get("sampler"):
            raise GridGnnError(f"--fit {d}: only full-graph runs of a data SPEC can be simulated")
        if flags.get("task", "node") != "node":  # (its decoder's traffic and work are not in the simulated step)
            raise GridGnnError(f"--fit {d}: a --task {flags['task']} run; the planner prices node classification's "
                               "step, which is what --fit compares")
        if flags.get("algo") == "auto":  # an --algo auto run: the configuration it picked
            plan = summary.get("plan")
            picked = plan.get("picked") if isinstance(plan, dict) else None
            if not isinstance(picked, dict) or not all(isinstance(k, str) for k in picked):
                raise GridGnnError(f"--fit {d}: an --algo auto run whose summary.json holds no plan's pick (plan: "
                                   "{picked: {...}})")
            flags.update(picked)
            flags.pop("profile", None)
        flags.pop("out", None)  # (the run's outputs: a simulation writes none)
        flags.pop("save_logits", None)
        flags.pop("checkpoint_every", None)
        cfg = config_from_flags(flags)
        key = (cfg.data, cfg.seed)
        if key not in graphs:
            graphs[key] = load_graph(cfg.data, seed=cfg.seed)
        vol, *_ = simulate_config(cfg, graphs[key])
        cand = Candidate(cfg.algo, tuple(cfg.mesh_shape(cfg.nproc)) if cfg.grid else None, cfg.replication,
                         cfg.partition)
        row = price(cand, vol, profile, nproc=cfg.nproc, overlap=cfg.overlap)  # (--comm-dtype: in the simulation)
        row.update(run=d, nproc=cfg.nproc, measured_step_s=float(measured))
        rows.append(row)
    return rows


def step_candidates(nproc: int, quick: bool = False) -> list:
    """The configurations :func:`fit_steps` trains: for each algorithm its most even grid (the smallest largest axis;
    1.5D: the smallest replication), random vertex order, so that the fit sees every family and a spread of
    compute and communication; ``quick``: ``1d``, ``1d-sa``, ``2d`` and ``plexus`` only."""
    from ..planner.plan import candidates

    by_algo: dict = {}
    for cand in candidates(nproc, row_partitions=("random",), plexus_orders=("random",)):
        by_algo.setdefault(cand.algo, []).append(cand)
    if quick:
        by_algo = {a: c for a, c in by_algo.items() if a in ("1d", "1d-sa", "2d", "plexus")}
    return [min(cands, key=lambda c: max(c.grid) if c.grid else c.replication) for cands in by_algo.values()]


def fit_steps(profile, *, nproc: int, quick: bool = False, device: str = "cpu") -> list[dict]:
    """Train each of :func:`step_candidates` for a few epochs on :data:`STEP_GRAPH` (GCN, 2 layers of 64) on
    ``device`` (the one the kernels were measured on) and return :func:`fit_rows` of the runs: their unfitted
    predicted terms next to their measured median step times. A run that fails is said in one line and left out."""
    import tempfile

    from ..errors import GridGnnError
    from ..train.api import train
    from ..train.config import TrainConfig

    graph = STEP_GRAPH_QUICK if quick else STEP_GRAPH
    epochs = 3 if quick else STEP_EPOCHS
    cands = step_candidates(nproc, quick)
    with tempfile.TemporaryDirectory(prefix="gridgnn-calibrate-") as folder:
        dirs = []
        for k, cand in enumerate(cands, 1):
            print(f"training step {k} of {len(cands)}: {cand.name} on {nproc} processes …", flush=True)
            out = os.path.join(folder, cand.name.replace(" ", "-"))
            try:
                train(TrainConfig(data=graph, nproc=nproc, epochs=epochs, hidden=64, layers=2, quiet=True, out=out,
                                  device=device, **cand.options()))
            except GridGnnError as exc:
                print(f"gridgnn: warning: training step {cand.name} failed, left out of the fit: "
                      f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}", file=sys.stderr, flush=True)
                continue
            dirs.append(out)
        return fit_rows(profile, dirs)


def _report_fit(fit: dict, rows: list[dict], what: str) -> None:
    print(f"time model fitted to {fit['runs']} {what}: step = {fit['comp']:.3f}·compute + {fit['comm']:.3f}·"
          f"communication + {fit['const_s'] * 1e3:.2f} ms; relative error median {fit['median_rel_err']:.1%}, "
          f"largest {fit['max_rel_err']:.1%}")
    for r in rows:
        pred = fit["comp"] * r["comp_s"] + fit["comm"] * r["comm_s"] + fit["const_s"]
        print(f"  {r['name']:<28} P={r['nproc']:<3d} measured {r['measured_step_s'] * 1e3:8.2f} ms, "
              f"predicted {pred * 1e3:8.2f} ms")
    for term in ("comp", "comm"):
        if fit[term] == 0:  # (the runs could not tell it from the constant: plans built on this fit ignore it)
            what = "compute" if term == "comp" else "communication"
            print(f"note: the fit gives {what} no weight: plans with this profile rank configurations without it; "
                  f"runs that differ more in {what} fit it", flush=True)


def _check_groups(max_nproc: int, device: str, steps: int = 0) -> None:
    """The largest group calibrate measures (2, 4, … up to ``--max-nproc``) and its training steps' ``steps``
    processes must start here, before any measurement (it failed after the kernels' minutes, naming a flag calibrate
    does not have): one GPU per rank on CUDA, the processes' runtime in host memory on CPU."""
    import torch

    from ..distributed.machine import available_memory_bytes, spawn_capacity
    from ..errors import GridGnnError

    largest = max(1 << (max_nproc.bit_length() - 1), steps)
    if largest < 2:
        return
    if device == "cuda":
        have = torch.cuda.device_count()
        if largest > have:
            raise GridGnnError(f"--max-nproc {max_nproc} measures groups of up to {largest} ranks, one GPU each, but "
                               f"{have} CUDA device(s) are visible: give --max-nproc {max(1, have)}")
        return
    cap = spawn_capacity(available_memory_bytes("cpu"))
    if largest > cap:
        raise GridGnnError(f"--max-nproc {max_nproc} measures groups of up to {largest} processes, but the memory "
                           f"available here starts about {cap}: give --max-nproc {max(1, cap)}")


def run_calibrate_command(args) -> int:
    from ..errors import GridGnnError
    from ..planner.timing import fit_profile, load_profile
    from ..graph.files import write_report

    check_new_files([args.out], overwrite=args.overwrite)  # before any work
    given = [k for k, default in _MEASURING.items() if getattr(args, k) not in (None, default)]
    if args.profile is not None and given:
        raise GridGnnError(f"--{given[0].replace('_', '-')} says how calibrate measures; --profile {args.profile} "
                           "reads a profile instead of measuring one (leave one of them out)")
    for k, default in _MEASURING.items():
        if getattr(args, k) is None:
            setattr(args, k, default)
    if args.max_nproc < 1:
        raise GridGnnError(f"--max-nproc must be >= 1, got {args.max_nproc}")
    if args.fit and args.no_steps:
        raise GridGnnError("--no-steps keeps the time model at θ = 1, 1, 0; --fit fits it to the runs given (leave one "
                           "of them out)")
    if args.profile is None:  # (its training steps, unless --fit or --no-steps: on min(--max-nproc, 4) processes)
        _check_groups(args.max_nproc, args.device, 0 if args.fit or args.no_steps else min(args.max_nproc, 4))
    if args.profile is not None:
        profile = load_profile(args.profile)
    else:
        from ..planner.calibrate import calibrate

        print(f"measuring kernels and collectives (groups of 2..{args.max_nproc}) …", flush=True)
        profile = calibrate(max_nproc=args.max_nproc, device=args.device, quick=args.quick)
    for t, k in sorted(profile.kernels.items(), key=lambda kv: int(kv[0])):
        print(f"kernels, {t} thread(s): " + ", ".join(f"{u} {v:.3g} s" for u, v in k.items()))
    for coll, table in sorted(profile.collectives.items()):
        cells = [f"g={g}: α {a * 1e6:.0f} µs, β⁻¹ {1 / b / 1e9 if b else float('inf'):.2f} GB/s"
                 for g, (a, b) in sorted(table.items(), key=lambda kv: int(kv[0]))]
        print(f"{coll:<14}" + "  ".join(cells))
    steps = not args.fit and args.profile is None and not args.no_steps
    if steps and args.max_nproc < 2:
        print("no training steps (they run on min(--max-nproc, 4) >= 2 processes): θ stays 1, 1, 0", flush=True)
        steps = False
    if args.fit or steps:
        profile.fit = {"comp": 1.0, "comm": 1.0, "const_s": 0.0}
        if args.fit:
            rows, what = fit_rows(profile, args.fit), "runs"
        else:
            nproc = min(args.max_nproc, 4)
            print(f"fitting the time model to real training steps ({STEP_GRAPH_QUICK if args.quick else STEP_GRAPH}, "
                  f"{nproc} processes) …", flush=True)
            rows, what = fit_steps(profile, nproc=nproc, quick=args.quick, device=args.device), "real steps"
        if len(rows) < 3 and not args.fit:  # too few steps ran to fit three coefficients
            print(f"gridgnn: warning: only {len(rows)} training steps ran; θ stays 1, 1, 0", file=sys.stderr,
                  flush=True)
        else:
            fit = fit_profile(profile, [(r["comp_s"], r["comm_s"], r["measured_step_s"]) for r in rows])
            _report_fit(fit, rows, what)
    write_report(args.out, profile.to_json())
    print(f"profile written to {args.out}")
    return 0
