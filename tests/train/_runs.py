"""Helpers of the train tests: run many `gridgnn train` command lines with one start-up.

* :func:`cli_batch` runs command lines one after the other through ``gridgnn.cli.main`` in one subprocess (the
  Python and torch import is paid once; distributed ones still spawn their ranks).
* :func:`group_worker` is a :func:`gridgnn.distributed.launch.launch` worker: every rank of one spawned group parses
  each command line with the CLI's own parser and ``train_config`` (as ``run_train`` does) and calls
  ``train_worker`` — many P=4 trainings for the price of one process start-up.
* :func:`run_main` calls ``main`` in this process and returns its exit status (argparse errors included).
"""
import json
import os
import subprocess
import sys

import torch

_BATCH = """
import json, sys
from gridgnn.cli import main
codes = []
for i, argv in enumerate(json.loads(sys.argv[1])):
    if len(sys.argv) > 2:  # segmented: what follows on stderr, the ranks' included, is run i's
        print(f"@@run {i}", file=sys.stderr, flush=True)
    try:
        codes.append(main(argv))
    except SystemExit as exc:
        codes.append(exc.code)
print("CODES " + json.dumps(codes))
"""


def cli_batch(argvs, *, timeout=600, segmented=False):
    """``(completed process, exit codes)`` of ``gridgnn <argv>`` for each argv, run in one subprocess
    (``segmented``: stderr marks where each run starts, for :func:`run_stderr`)."""
    argvs = [[str(a) for a in argv] for argv in argvs]
    r = subprocess.run([sys.executable, "-c", _BATCH, json.dumps(argvs), *(["segmented"] if segmented else [])],
                       capture_output=True, text=True, timeout=timeout)
    codes = None
    for line in r.stdout.splitlines():
        if line.startswith("CODES "):
            codes = json.loads(line[6:])
    return r, codes


def run_stderr(r, i: int) -> str:
    """What run ``i`` of a ``segmented`` :func:`cli_batch` wrote to stderr (its spawned ranks included: they share
    the fd)."""
    return r.stderr.split(f"@@run {i}\n", 1)[1].split(f"@@run {i + 1}\n", 1)[0]


def free_loopback_port() -> int:
    """A loopback port free at this moment (for a torchrun rendezvous)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


#: the torchrun of this environment
TORCHRUN = os.path.join(os.path.dirname(sys.executable), "torchrun")


def group_worker(ctx, argvs):
    """Run every ``gridgnn train`` command line in ``argvs`` on this rank, in order (see the module docstring)."""
    from gridgnn.cli import build_parser, train_config
    from gridgnn.distributed import Comm, ProcessGrid
    from gridgnn.train.worker import train_worker

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
