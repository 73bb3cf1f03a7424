r"""``gridgnn`` command line: ``train``, ``simulate``, ``calibrate``, ``plan``, ``partition`` and ``shard`` (see
``gridgnn <command> --help``)."""
from __future__ import annotations

import argparse
import re
import sys

from .errors import CommFailure, GridGnnError, Terminated, out_of_memory


def _train_parser(sub) -> None:
    """``gridgnn train``'s flags, generated from :class:`~gridgnn.train.config.TrainConfig`'s fields: one flag per
    field (``weight_decay`` → ``--weight-decay``), grouped by section, its help, default and range from the field's
    declaration (the same range the config checks)."""
    from .train.config import add_flags

    # argument_default=SUPPRESS: a flag left out is absent from the namespace, so run_train knows which flags
    # were given (a resumed run overrides its checkpoint's config with exactly those); defaults live in TrainConfig.
    p = sub.add_parser("train", help="train a GNN (serial or distributed)", argument_default=argparse.SUPPRESS,
                       allow_abbrev=False,
                       description="Full-graph GNN training, or minibatch training with --sampler. With no --data the "
                                   "embedded synthetic SBM runs. Every flag is also a TrainConfig field of the same "
                                   "name (--weight-decay: weight_decay) and a key of a --config TOML file.")
    p.error = _one_line_error  # a bad flag is one `gridgnn: error:` line (exit 2), as every other bad input
    p.add_argument("--config", metavar="FILE",
                   help="options from a TOML file (keys = these flags), or a previous run's summary.json (or its "
                        "folder) to rerun it; flags given here override the file")
    add_flags(p)


def _one_line_error(message: str, command: str = "train"):
    """``ArgumentParser.error`` of ``gridgnn COMMAND``: one line, exit status 2."""
    print(f"gridgnn: error: {message} (see gridgnn {command} --help)", file=sys.stderr, flush=True)
    raise SystemExit(2)


def _one_line_errors(parser, command: str) -> None:
    """Make a bad flag of ``gridgnn COMMAND`` one ``gridgnn: error:`` line, as every other bad input."""
    parser.error = lambda message: _one_line_error(message, command)


def _top_level_error(message: str):
    """``ArgumentParser.error`` of ``gridgnn``: one line (naming the command's help when one was given), exit 2."""
    cmd = next((a for a in sys.argv[1:2] if a in ("train", "partition", "shard", "simulate", "calibrate", "plan",
                                                   "predict", "export")),
               None)
    print(f"gridgnn: error: {message} (see gridgnn {cmd + ' ' if cmd else ''}--help)", file=sys.stderr, flush=True)
    raise SystemExit(2)


def train_config(args):
    """The validated :class:`~gridgnn.train.config.TrainConfig` of a parsed ``gridgnn train`` command line."""
    from .distributed.launch import env_context
    from .train.invocation import config_from_flags

    given = {k: v for k, v in vars(args).items() if k not in ("command", "func", "config")}
    typed_keep = given.get("keep")  # (a file's --keep, a summary's above all, is no request of this command line)
    if getattr(args, "config", None) is not None:  # the file's options, the flags on the command line over them
        from .nn.base import is_import_path
        from .graph.spec import spec_key
        from .train.config import is_run_summary, read_config_file

        from_file = read_config_file(args.config)
        for key, what in (("model", "model"), ("algo", "algorithm")):
            named = from_file.get(key)
            if is_import_path(named) and given.get(key) != named:  # no code is imported on a file's word
                raise GridGnnError(f"--config {args.config} names the {what} {named} by import path; gridgnn "
                                   f"imports code only when the command line names it: add --{key} {named}")
        if is_run_summary(args.config):  # what the run resolved for itself, not what its command line said
            if given.get("algo", from_file.get("algo")) != "auto":  # a rerun of an --algo auto run on a chosen one
                from_file.pop("profile", None)
            if given.get("model", from_file.get("model")) != from_file.get("model") \
                    or spec_key(given.get("data", from_file.get("data"))) != spec_key(from_file.get("data")):
                from_file.pop("edge_dim", None)  # the edge-feature width a run derived from its data and model
                from_file.pop("relations", None)  # and its relation count
        given = {**from_file, **given}
    env = env_context(given.get("device", "auto"))
    cfg = config_from_flags(given, env_world=env.world_size if env is not None else None)
    if typed_keep == "last" and cfg.out is None:  # (the Python API hands its model on: there it chooses)
        raise GridGnnError("--keep last chooses the parameters the run hands on (model.pt, --save-logits); without "
                           "--out DIR the command line hands none on")
    return cfg


def run_train(args) -> int:
    from .train.api import run

    run(train_config(args))
    return 0


PERM_METHODS = ("identity", "single-perm", "double-perm", "balanced-perm")


def _partition_parser(sub) -> None:
    from .commands.partition import DEFAULTS
    from .train.outputs import add_overwrite_flag

    p = sub.add_parser("partition", help="partition or permute a graph and report its quality", allow_abbrev=False,
                       description="Vertex partitions for 1d/1.5d (--parts K: edge cut, send/receive volumes) or "
                                   "row/column permutations for 2d/3d/plexus (--blocks RxC: max/mean nnz of the "
                                   "adjacency blocks).")
    p.add_argument("--data", default=None, metavar="SPEC", help="data SPEC (default: the embedded synthetic SBM)")
    p.add_argument("--method", required=True, metavar="M",
                   help="random, metis, metis-vol, hypergraph, balanced (with --parts); "
                        + ", ".join(PERM_METHODS) + " (with --blocks)")
    p.add_argument("--parts", type=int, default=None, metavar="K", help="number of parts (P for 1D, P/c for 1.5D)")
    p.add_argument("--blocks", default=None, metavar="RxC",
                   help=f"block grid of the permutation report (default {DEFAULTS['blocks']})")
    p.add_argument("--out", default=None, metavar="FILE",
                   help="partition: one part per vertex per line, report in FILE.json; permutations: "
                        "FILE.perm_r.npy, FILE.perm_c.npy, FILE.json and FILE (the row block of every vertex "
                        "under perm_r, as a partition file)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--feature-size", type=int, default=None, metavar="F",
                   help=f"f for the byte volumes (4-byte values; default {DEFAULTS['feature_size']})")
    p.add_argument("--imbalance", type=float, default=None,
                   help=f"allowed nnz imbalance of the partitioners (default {DEFAULTS['imbalance']})")
    add_overwrite_flag(p)
    p.set_defaults(func=run_partition)


def run_partition(args) -> int:
    from .commands.partition import DEFAULTS
    from .partition.partitioners import METHODS

    permutes = args.method in PERM_METHODS
    if args.method == "random" and args.imbalance is not None:  # (it was recorded in the report, but never read)
        raise GridGnnError("--imbalance applies to the methods that balance parts by weight; --method random splits "
                           "the rows evenly")
    for key, perm_only in (("parts", False), ("feature_size", False), ("imbalance", False), ("blocks", True)):
        if getattr(args, key) is None:
            setattr(args, key, DEFAULTS.get(key))
        elif perm_only != permutes:  # a flag of the other kind of method, which this one would ignore
            raise GridGnnError(f"--{key.replace('_', '-')} applies to the "
                               + (f"permutation methods ({', '.join(PERM_METHODS)})" if perm_only else
                                  f"partition methods ({', '.join(METHODS)})")
                               + f"; --method {args.method} "
                               + ("is a permutation method (--blocks RxC)" if permutes else "takes --parts K"))
    from .train.outputs import check_new_files  # before any work: the files this writes must be new, or --overwrite

    suffixes = ("", ".json", ".perm_r.npy", ".perm_c.npy") if permutes else ("", ".json")
    check_new_files([f"{args.out}{s}" for s in suffixes] if args.out else [], overwrite=args.overwrite)
    if permutes:
        from .commands.shard import run_perm_report

        return run_perm_report(args)
    if args.parts is None:
        raise GridGnnError(f"--method {args.method} needs --parts K (permutation methods: {', '.join(PERM_METHODS)})")
    from .commands.partition import run_partition_command

    return run_partition_command(args)


def build_parser() -> argparse.ArgumentParser:
    from ._version import __version__

    # allow_abbrev=False everywhere: a flag is matched whole, never by a prefix, so a flag added later cannot change
    # what an old command line means (with prefixes, `--log 5` read as `--log-every 5` before --log existed)
    parser = argparse.ArgumentParser(prog="gridgnn", description="Communication-avoiding distributed GNN training.",
                                     allow_abbrev=False)
    parser.error = _top_level_error  # e.g. unrecognized arguments: one line too
    parser.add_argument("--version", action="version", version=f"gridgnn {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    _train_parser(sub)
    sub.choices["train"].set_defaults(func=run_train)
    _partition_parser(sub)
    from .commands import calibrate, plan, predict, shard, simulate

    for name, module, add, run, short, long in (
        ("shard", shard, "add_shard_arguments", "run_shard_command",
         "write a sharded dataset (per-block files) that ranks read in parallel",
         "Permute, normalize and split the adjacency into RxC block files; train with --data sharded:DIR (each "
         "rank reads only its blocks)."),
        ("simulate", simulate, "add_simulate_arguments", "run_simulate_command",
         "bytes every rank moves in one training step, without starting processes",
         "The per-rank bytes and messages of one training step of a configuration (the same flags as gridgnn "
         "train), from the graph and the layout alone: the byte models of the primitives the model calls, which "
         "the test suite checks against measurement; and every rank's local work and memory estimate."),
        ("calibrate", calibrate, "add_calibrate_arguments", "run_calibrate_command",
         "measure this machine's kernels and collectives (a profile for plan)",
         "Measure the local kernels' throughput and the alpha and beta of every collective per group size into a "
         "profile; --fit RUN_DIR... fits the time model's coefficients to measured runs."),
        ("plan", plan, "add_plan_arguments", "run_plan_command",
         "rank every valid configuration by predicted step time and memory",
         "Simulate every valid configuration (algorithm, grid shape, replication, partition or permutation) of "
         "--nproc processes, predict its step time with a profile and its per-rank peak memory, and print them "
         "ranked."),
        ("predict", predict, "add_predict_arguments", "run_predict_command",
         "logits or classes of every vertex of a graph from a trained run's model",
         "Full-graph inference with the model of a run folder (gridgnn train --out DIR) on any graph with the same "
         "feature width, serially or distributed on any algorithm; writes one row per vertex, in the graph's "
         "order, as .npy."),
        ("export", predict, "add_export_arguments", "run_export_command",
         "write a trained run's model as a PyG module or a state_dict",
         "The model of a run folder as a torch_geometric.nn.Sequential of PyG layers with the trained weights "
         "behind the run's input pipeline (--to pyg: GCN, GAT, AGNN, SAGE, GINE, GATv2, R-GCN) or as its "
         "parameters (--to state-dict: any model).")):
        p = sub.add_parser(name, help=short, description=long, allow_abbrev=False)
        getattr(module, add)(p)
        p.set_defaults(func=getattr(module, run))
    for name in ("partition", "shard", "simulate", "calibrate", "plan", "predict", "export"):
        _one_line_errors(sub.choices[name], name)
    for p in sub.choices.values():  # a value such as `--fanout -1,5` is a value, as `-1` is (not an unknown flag)
        p._negative_number_matcher = _NEGATIVE_VALUE
    return parser


#: what argparse takes for a value rather than a flag although it starts with "-": a negative number, or a comma
#: list starting with one (argparse's own pattern, before Python 3.13, knows plain numbers only)
_NEGATIVE_VALUE = re.compile(r"^-\d+$|^-\d*\.\d+$|^-\d+(,-?\d+)+$")


def _on_signal(signum, frame):  # noqa: ARG001 - signal handler signature
    raise Terminated(signum)


def stop_signals(signal) -> tuple:
    """The signals that stop a run as Ctrl-C does: SIGTERM, and SIGHUP (the terminal closed) unless ignored
    (``nohup``)."""
    hup = getattr(signal, "SIGHUP", None)
    return (signal.SIGTERM,) + ((hup,) if hup is not None and signal.getsignal(hup) is not signal.SIG_IGN else ())


def main(argv: list[str] | None = None) -> int:
    r"""Exit status: 0 done; 2 bad input or configuration (one ``gridgnn: error:`` line); 1 a rank died, a
    collective failed or an allocation failed (one line naming the rank); 130 / 143 / 129 interrupted by SIGINT /
    SIGTERM / SIGHUP (one line)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    import signal

    old = {s: signal.signal(s, _on_signal) for s in stop_signals(signal)}
    try:
        return int(args.func(args) or 0)
    except GridGnnError as exc:
        print(f"gridgnn: error: {exc}", file=sys.stderr)
        return 1 if isinstance(exc, CommFailure) else 2
    except (MemoryError, RuntimeError) as exc:  # an allocation the memory guard did not foresee: one line
        line = out_of_memory(exc)
        if line is None:
            raise  # a bug: keep its traceback for the report
        print(f"gridgnn: error: {line}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        print("gridgnn: interrupted (SIGINT)", file=sys.stderr, flush=True)
        return 130
    except Terminated as exc:
        print(f"gridgnn: interrupted ({exc.name})", file=sys.stderr, flush=True)
        return 128 + exc.signum
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


if __name__ == "__main__":
    sys.exit(main())
