"""Helpers of the train tests: run many `gridgnn train` command lines with one start-up.

* :func:`cli_batch` runs command lines one after the other through ``gridgnn.cli.main`` in one subprocess (the
  Python and torch import is paid once; distributed ones still spawn their ranks).
* :func:`group_worker` is a :func:`gridgnn.distributed.launch.launch` worker: every rank of one spawned group parses
  each command line with the CLI's own parser and ``train_config`` (as ``run_train`` does) and calls
  ``train_worker`` — many P=4 trainings for the price of one process start-up.
* :func:`run_main` calls ``main`` in this process and returns its exit status (argparse errors included).
"""
import json
import subprocess
import sys

import torch

_BATCH = """
import json, sys
from gridgnn.cli import main
codes = []
for argv in json.loads(sys.argv[1]):
    try:
        codes.append(main(argv))
    except SystemExit as exc:
        codes.append(exc.code)
print("CODES " + json.dumps(codes))
"""


def cli_batch(argvs, *, timeout=600):
    """``(completed process, exit codes)`` of ``gridgnn <argv>`` for each argv, run in one subprocess."""
    argvs = [[str(a) for a in argv] for argv in argvs]
    r = subprocess.run([sys.executable, "-c", _BATCH, json.dumps(argvs)], capture_output=True, text=True,
                       timeout=timeout)
    codes = None
    for line in r.stdout.splitlines():
        if line.startswith("CODES "):
            codes = json.loads(line[6:])
    return r, codes


def group_worker(ctx, argvs):
    """Run every ``gridgnn train`` command line in ``argvs`` on this rank, in order (see the module docstring)."""
    from gridgnn.cli import build_parser, train_config
    from gridgnn.distributed import Comm, ProcessGrid
    from gridgnn.train.trainer import train_worker

    ctx.init()
    world = Comm(ProcessGrid.build("1d", "cpu"))
    for argv in argvs:
        cfg = train_config(build_parser().parse_args(["train", *map(str, argv)]))
        assert cfg.nproc == ctx.world_size, (argv, cfg.nproc)
        world.all_reduce(torch.zeros(1), "p")  # every rank has validated before rank 0 writes anything
        train_worker(ctx, cfg)
        world.all_reduce(torch.zeros(1), "p")  # rank 0 has written every output of this run
    return None


def run_main(argv) -> int:
    """Exit status of ``gridgnn.cli.main(argv)`` in this process."""
    from gridgnn.cli import main

    try:
        return main([str(a) for a in argv])
    except SystemExit as exc:
        return exc.code
