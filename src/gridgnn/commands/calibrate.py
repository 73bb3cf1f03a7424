r"""``gridgnn calibrate``: measure this machine's profile (:mod:`gridgnn.planner.calibrate`) and, with ``--fit``,
fit the time model's coefficients to measured runs (:func:`gridgnn.planner.timing.fit_profile`)."""
from __future__ import annotations

import os


def add_calibrate_arguments(p) -> None:
    p.add_argument("--out", metavar="FILE", default="profile.json", help="profile written (default profile.json)")
    p.add_argument("--max-nproc", type=int, default=8, metavar="P",
                   help="largest group the collectives are measured on (2, 4, … P; default 8)")
    p.add_argument("--quick", action="store_true", help="fewer sizes and repetitions (a rough profile in seconds)")
    p.add_argument("--profile", metavar="FILE|PRESET",
                   help="start from this profile instead of measuring (with --fit: refit its coefficients)")
    p.add_argument("--fit", nargs="+", metavar="RUN_DIR",
                   help="fit the time model to these gridgnn train --out directories (their summary.json)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")


def fit_rows(profile, run_dirs: list[str]) -> list[dict]:
    r"""For every run directory: its configuration simulated and priced with ``profile`` (unfitted terms) next to
    its measured median step time."""
    from ..errors import GridGnnError
    from ..graph.saved import read_document
    from ..graph.spec import load_graph
    from ..planner.plan import Candidate, price
    from ..train.config import config_from_flags, read_config_file
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
        if flags.get("algo") == "auto":  # an --algo auto run: the configuration it picked
            flags.update((summary.get("plan") or {}).get("picked") or {})
            flags.pop("profile", None)
        flags.pop("out", None)
        cfg = config_from_flags(flags)
        key = (cfg.data, cfg.seed)
        if key not in graphs:
            graphs[key] = load_graph(cfg.data, seed=cfg.seed)
        vol, *_ = simulate_config(cfg, graphs[key])
        cand = Candidate(cfg.algo, tuple(cfg.mesh_shape(cfg.nproc)) if cfg.grid else None, cfg.replication,
                         cfg.partition)
        row = price(cand, vol, profile, nproc=cfg.nproc, overlap=cfg.overlap)  # (--comm-dtype: in the simulation)
        row.update(run=d, measured_step_s=float(measured))
        rows.append(row)
    return rows


def run_calibrate_command(args) -> int:
    from ..errors import GridGnnError
    from ..planner.timing import fit_profile, load_profile
    from ..train.outputs import write_report

    if args.max_nproc < 1:
        raise GridGnnError(f"--max-nproc must be >= 1, got {args.max_nproc}")
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
    if args.fit:
        profile.fit = {"comp": 1.0, "comm": 1.0, "const_s": 0.0}
        rows = fit_rows(profile, args.fit)
        fit = fit_profile(profile, [(r["comp_s"], r["comm_s"], r["measured_step_s"]) for r in rows])
        print(f"time model fitted to {fit['runs']} runs: step = {fit['comp']:.3f}·compute + {fit['comm']:.3f}·"
              f"communication + {fit['const_s'] * 1e3:.2f} ms; relative error median {fit['median_rel_err']:.1%}, "
              f"largest {fit['max_rel_err']:.1%}")
        for r in rows:
            pred = fit["comp"] * r["comp_s"] + fit["comm"] * r["comm_s"] + fit["const_s"]
            print(f"  {r['name']:<28} P={r['config']} measured {r['measured_step_s'] * 1e3:8.2f} ms, "
                  f"predicted {pred * 1e3:8.2f} ms")
    write_report(args.out, profile.to_json())
    print(f"profile written to {args.out}")
    return 0
