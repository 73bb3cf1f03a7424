r"""``gridgnn`` command line: ``train``, ``simulate``, ``calibrate``, ``plan``, ``partition`` and ``shard`` (see
``gridgnn <command> --help``)."""
from __future__ import annotations

import argparse
import sys

from .errors import CommFailure, GridGnnError, out_of_memory


def _model_option_help(name: str) -> str:
    """A model option's help, from the :class:`~gridgnn.nn.Option` of each registered model that declares it."""
    from .nn import MODELS
    from .nn.base import declared_options

    parts = []
    for model, cls in MODELS.items():
        opt = declared_options(cls).get(name)
        if opt is not None:
            default = "" if opt.default is None else f"default {opt.default}; "
            parts.append(f"{model}: {opt.help} ({default}{opt.range_text()})")
    return "; ".join(parts) + " — and models of your own that take it"


def _train_parser(sub) -> None:
    from .parallel import ALGOS
    from .train.config import MODELS, TrainConfig

    d = TrainConfig()
    # argument_default=SUPPRESS: a flag left out is absent from the namespace, so run_train knows which flags
    # were given (a resumed run overrides its checkpoint's config with exactly those); defaults live in TrainConfig.
    p = sub.add_parser("train", help="train a GNN (serial or distributed)", argument_default=argparse.SUPPRESS,
                       description="Full-graph GNN training, or minibatch training with --sampler. With no --data the "
                                   "embedded synthetic SBM runs.")
    p.error = _one_line_error  # a bad flag is one `gridgnn: error:` line (exit 2), as every other bad input
    p.add_argument("--config", metavar="FILE",
                   help="options from a TOML file (keys = these flags), or a previous run's summary.json (or its "
                        "folder) to rerun it; flags given here override the file")
    p.add_argument("--data", metavar="SPEC",
                   help="synthetic:sbm?n=&classes=&avg_degree=&features= | synthetic:rmat?scale=&edge_factor= | "
                        "planetoid:DIR | ogb:DIR | edgelist:FILE | mtx:FILE | npz:FILE | sharded:DIR")
    p.add_argument("--model", metavar="NAME", help=f"{' | '.join(MODELS)} (default {d.model}), a registered name, "
                                                   "or a model of your own by import path, package.module:Class")
    p.add_argument("--heads", type=int, metavar="K", help=_model_option_help("heads"))
    p.add_argument("--attn-dropout", type=float, metavar="P", help=_model_option_help("attn_dropout"))
    p.add_argument("--aggr", metavar="A", help=_model_option_help("aggr"))
    from .nn import MODELS as REGISTERED
    from .train.config import samplable_models

    own_depth = ", ".join(f"{m} {c.DEFAULT_LAYERS}" for m, c in REGISTERED.items()
                          if getattr(c, "DEFAULT_LAYERS", d.layers) != d.layers)
    p.add_argument("--layers", type=int, metavar="L",
                   help=f"default {d.layers}" + (f" ({own_depth})" if own_depth else ""))
    p.add_argument("--hidden", type=int, metavar="H", help=f"default {d.hidden}")
    p.add_argument("--algo", metavar="NAME",
                   help=f"{', '.join(ALGOS)}, auto (the fastest configuration gridgnn plan predicts; it also picks "
                        "--grid, --replication and --partition), or an algorithm of your own by import path, "
                        f"package.module:NAME (docs/algorithms.md); default {d.algo}")
    p.add_argument("--profile", metavar="FILE|PRESET",
                   help="--algo auto: the machine profile it plans with (gridgnn calibrate --out FILE, or "
                        "local-cpu, perlmutter-a100, frontier-mi250x; default local-cpu)")
    p.add_argument("--nproc", type=int, metavar="P", help="processes to spawn (default 1; under torchrun/srun: "
                                                          "the launcher's world size)")
    p.add_argument("--replication", type=int, metavar="C", help="c of the 1.5D algorithms (divides P)")
    p.add_argument("--grid", metavar="X,Y[,Z]",
                   help="process grid of 2d (PR,PC), 3d (X,Y,Z: rows, columns, fiber) and plexus (X,Y,Z); "
                        "default: the most square / cubic factorization of P")
    p.add_argument("--blocked-aggregation", type=int, metavar="ROWS",
                   help="plexus: SpMM and its all-reduce in row blocks of ROWS rows (Plexus §5.2); 0 = off")
    p.add_argument("--partition", metavar="METHOD|FILE",
                   help="1d/1.5d: random (default), identity, metis, metis-vol, hypergraph, balanced, or a partition "
                        "FILE; 2d/3d/plexus: random (one permutation), identity, double-perm, balanced-perm")
    p.add_argument("--sampler", choices=("sage", "ladies"),
                   help=f"minibatch training with bulk matrix sampling (MLSys'24) on a P/c x c grid (--nproc, "
                        f"--replication) of --model {', '.join(samplable_models())}; without it: full-graph "
                        "training")
    p.add_argument("--fanout", metavar="S1,S2,..",
                   help="per layer from the batch outwards: neighbours per vertex (sage, default 10) or vertices "
                        "per layer (ladies, default --batch-size), at most 2^20; -1: all")
    p.add_argument("--batch-size", type=int, metavar="B", help="training vertices per minibatch (default 1024)")
    p.add_argument("--bulk", type=int, metavar="K", help="minibatches each rank samples at once, 1..4096 (default 1)")
    p.add_argument("--sample-graph", choices=("replicated", "partitioned"),
                   help="sampling with the graph on every rank, or 1.5D-partitioned (Algorithm 2); default replicated")
    p.add_argument("--eval-fanout", metavar="S1,S2,..",
                   help="fanout of the evaluation minibatches (default -1: every neighbour, exact inference)")
    p.add_argument("--eval-batch-size", type=int, metavar="B", help="vertices per evaluation minibatch (default "
                                                                     "--batch-size)")
    p.add_argument("--epochs", type=int, metavar="N", help=f"default {d.epochs}")
    p.add_argument("--lr", type=float, help=f"Adam learning rate (default {d.lr})")
    p.add_argument("--weight-decay", type=float, help=f"default {d.weight_decay}")
    p.add_argument("--dropout", type=float, help=f"default {d.dropout}")
    p.add_argument("--seed", type=int, metavar="S", help=f"0 <= S < 2**63 (default {d.seed})")
    p.add_argument("--out", metavar="DIR", help="write metrics.jsonl, model.pt (the trained model: gridgnn predict, "
                                                "export), curves.png, breakdown.png and summary.json (each to a "
                                                "temporary name, then renamed); a DIR holding a previous run's "
                                                "outputs needs --overwrite")
    p.add_argument("--overwrite", action="store_true",
                   help="remove the previous run's outputs in --out first (only gridgnn's own files)")
    p.add_argument("--save-logits", action="store_true", help="also write logits.npy in original node order, in the "
                                                              "run's --dtype (with ?relabel=1 also node_ids.npy: the "
                                                              "file's id of each row)")
    p.add_argument("--checkpoint-every", type=int, metavar="N",
                   help="write DIR/checkpoint.pt (full parameters and Adam state) every N epochs and at the end")
    p.add_argument("--early-stop", type=int, metavar="PATIENCE",
                   help="stop when the validation accuracy has not improved for PATIENCE epochs (the same epoch on "
                        "every algorithm and P; 0 = never, the default)")
    p.add_argument("--resume", metavar="DIR",
                   help="continue from DIR/checkpoint.pt with any --algo/--nproc; its config is the base, the flags "
                        "given override it (--out defaults to DIR)")
    p.add_argument("--dtype", choices=("float32", "float64"), help=f"default {d.dtype}")
    p.add_argument("--feature-norm", choices=("auto", "none", "l2"),
                   help="input features as loaded (none) or each row scaled to unit L2 norm (l2); default auto: "
                        "the model's choice (va: l2, the others: none)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), help=f"default {d.device}")
    p.add_argument("--quiet", action="store_true", help="no progress bar or per-epoch lines")
    p.add_argument("--log-every", type=int, metavar="N", help="an epoch line every N epochs (default: about 10 "
                                                              "lines per run; 0: none)")
    p.add_argument("--timeout", type=float, dest="timeout_s", metavar="SECONDS",
                   help=f"seconds a collective may wait before the job is ended (default {d.timeout_s:g})")


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
    from .train.config import config_from_flags

    given = {k: v for k, v in vars(args).items() if k not in ("command", "func", "config")}
    if getattr(args, "config", None) is not None:  # the file's options, the flags on the command line over them
        from .nn.base import is_import_path
        from .train.config import read_config_file

        from_file = read_config_file(args.config)
        for key, what in (("model", "model"), ("algo", "algorithm")):
            named = from_file.get(key)
            if is_import_path(named) and given.get(key) != named:  # no code is imported on a file's word
                raise GridGnnError(f"--config {args.config} names the {what} {named} by import path; gridgnn "
                                   f"imports code only when the command line names it: add --{key} {named}")
        if given.get("algo", from_file.get("algo")) != "auto":  # a rerun of an --algo auto run on a chosen one
            from_file.pop("profile", None)
        given = {**from_file, **given}
    env = env_context(given.get("device", "auto"))
    return config_from_flags(given, env_world=env.world_size if env is not None else None)


def run_train(args) -> int:
    from .train.api import run

    run(train_config(args))
    return 0


PERM_METHODS = ("identity", "single-perm", "double-perm", "balanced-perm")


def _partition_parser(sub) -> None:
    p = sub.add_parser("partition", help="partition or permute a graph and report its quality",
                       description="Vertex partitions for 1d/1.5d (--parts K: edge cut, send/receive volumes) or "
                                   "row/column permutations for 2d/3d/plexus (--blocks RxC: max/mean nnz of the "
                                   "adjacency blocks).")
    p.add_argument("--data", default=None, metavar="SPEC", help="data SPEC (default: the embedded synthetic SBM)")
    p.add_argument("--method", required=True, metavar="M",
                   help="random, metis, metis-vol, hypergraph, balanced (with --parts); "
                        + ", ".join(PERM_METHODS) + " (with --blocks)")
    p.add_argument("--parts", type=int, default=None, metavar="K", help="number of parts (P for 1D, P/c for 1.5D)")
    p.add_argument("--blocks", default="8x8", metavar="RxC", help="block grid of the permutation report")
    p.add_argument("--out", default=None, metavar="FILE",
                   help="partition: one part per vertex per line, report in FILE.json; permutations: "
                        "FILE.perm_r.npy, FILE.perm_c.npy and FILE.json")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--feature-size", type=int, default=128, metavar="F", help="f for the byte volumes (4-byte values)")
    p.add_argument("--imbalance", type=float, default=0.05, help="allowed nnz imbalance of the partitioners")
    p.add_argument("--overwrite", action="store_true", help="replace the files of a previous --out FILE")
    p.set_defaults(func=run_partition)


def run_partition(args) -> int:
    if args.out:  # before any work: the files this writes must be new, or --overwrite given
        from .train.outputs import check_new_files

        suffixes = ("", ".json", ".perm_r.npy", ".perm_c.npy") if args.method in PERM_METHODS else ("", ".json")
        check_new_files([f"{args.out}{s}" for s in suffixes], overwrite=args.overwrite)
    if args.method in PERM_METHODS:
        from .commands.shard import run_perm_report

        return run_perm_report(args)
    if args.parts is None:
        raise GridGnnError(f"--method {args.method} needs --parts K (permutation methods: {', '.join(PERM_METHODS)})")
    from .commands.partition import run_partition_command

    return run_partition_command(args)


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    parser = argparse.ArgumentParser(prog="gridgnn", description="Communication-avoiding distributed GNN training.")
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
         "(--to pyg: GCN, GAT, AGNN, SAGE) or as its parameters (--to state-dict: any model).")):
        p = sub.add_parser(name, help=short, description=long)
        getattr(module, add)(p)
        p.set_defaults(func=getattr(module, run))
    for name in ("partition", "shard", "simulate", "calibrate", "plan", "predict", "export"):
        _one_line_errors(sub.choices[name], name)
    return parser


class _Terminated(BaseException):
    """SIGTERM in a process that runs the work itself (serial training, partition, shard)."""


def _on_sigterm(signum, frame):  # noqa: ARG001 - signal handler signature
    raise _Terminated()


def main(argv: list[str] | None = None) -> int:
    r"""Exit status: 0 done; 2 bad input or configuration (one ``gridgnn: error:`` line); 1 a rank died, a
    collective failed or an allocation failed (one line naming the rank); 130 / 143 interrupted by SIGINT / SIGTERM (one line)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    import signal

    old = signal.signal(signal.SIGTERM, _on_sigterm)
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
    except _Terminated:
        print("gridgnn: interrupted (SIGTERM)", file=sys.stderr, flush=True)
        return 143
    finally:
        signal.signal(signal.SIGTERM, old)


if __name__ == "__main__":
    sys.exit(main())
