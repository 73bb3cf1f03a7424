"""An algorithm is one file plus its registration: a 1D variant registered by a file outside the package
(examples/reversed_1d.py: its plan built by that file's function, nothing in gridgnn edited for it) trains every
built-in model equal to serial (logits and gradients, float64) and moves exactly the bytes its family's byte model
says, on four processes; from the command line it is named by import path."""
import json

import pytest

from examples.reversed_1d import REVERSED_1D as REVERSED
from gridgnn.distributed.launch import launch
from gridgnn.parallel import Algorithm, algorithm, register
from gridgnn.testing import Case, distributed_worker

from ._fidelity import check_against_serial, check_bytes, check_each
from .conftest import GRAPHS, N, skewed_partition

P = 4
PATH = "examples.reversed_1d:REVERSED_1D"


def worker(ctx, cases):
    """Importing this module (as the ranks do to find this function) imports the example, which registers it."""
    return distributed_worker(ctx, cases)


@pytest.fixture(scope="module")
def results():
    cases = {}
    for k, (model, options) in enumerate((("gcn", {}), ("gat", {"heads": 2}), ("sage", {"aggr": "max"}),
                                          ("va", {}))):
        gname = tuple(GRAPHS)[k % 2]
        cases[f"{model}-{gname}"] = Case(graph=GRAPHS[gname], algo="1d-reversed", dims=[7, 4, 3], model=model,
                                         options=options, partition=skewed_partition(N, P, 5), dropout=0.3, seed=4,
                                         epoch=1)
    out = launch(worker, P, list(cases.values()), device="cpu", collect=True)
    return {name: (case, [out[r][i] for r in range(P)]) for i, (name, case) in enumerate(cases.items())}


def test_a_registered_algorithm_equals_serial_with_modelled_bytes(results):
    assert algorithm("1d-reversed") is REVERSED
    check_each((P, results), "", check_against_serial)
    check_each((P, results), "", check_bytes)


def test_a_name_is_registered_once():
    with pytest.raises(ValueError, match="already registered"):
        register(Algorithm("1d-reversed", "1d", "block-row", paper="another"))
    assert register(REVERSED) is REVERSED


def test_the_plan_is_the_registered_builders():
    """``build_plan`` hands a registered algorithm to its own builder (here: one process, one block)."""
    from gridgnn.distributed import NullComm
    from gridgnn.train.rank_layout import build_rank, make_source

    g = GRAPHS["directed"]
    source, rows = make_source(g, "1d-reversed", 1)
    plan, data = build_rank(g, "1d-reversed", NullComm(), [7, 3], source=source, rows=rows)
    assert plan.name == "1d-reversed" and plan.dgraph.stages == [0] and data.x.shape == (N, 7)


def test_the_command_line_names_it_by_import_path_and_data_never_does(tmp_path):
    """``--algo package.module:NAME`` trains as the built-in 1D does (float64: the reversed summation order
    changes only rounding) and its summary names it; a checkpoint or a ``--config`` file naming it imports nothing
    until the command line names it too (one error line saying what to give)."""
    from ..train._runs import cli_batch

    common = ["--data", "synthetic:sbm?n=120&classes=3&avg_degree=6&features=8", "--dtype", "float64", "--quiet",
              "--nproc", 2, "--seed", 3]
    mine, ref = tmp_path / "mine", tmp_path / "ref"
    argvs = [["train", *common, "--algo", PATH, "--epochs", 4, "--checkpoint-every", 2, "--out", mine],
             ["train", *common, "--algo", "1d", "--epochs", 4, "--out", ref],
             ["train", "--resume", mine, "--epochs", 6, "--out", tmp_path / "data-word"],
             ["train", "--config", mine / "summary.json", "--out", tmp_path / "file-word"],
             ["train", "--resume", mine, "--algo", PATH, "--epochs", 6, "--out", tmp_path / "resumed"],
             ["train", "--algo", "examples.reversed_1d:build_reversed_1d", "--epochs", 1, "--out", tmp_path / "x"]]
    r, codes = cli_batch(argvs)
    assert codes == [0, 0, 2, 2, 0, 2], (codes, r.stderr[-3000:])
    a, b = (json.loads((d / "summary.json").read_text()) for d in (mine, ref))
    assert a["algo"] == PATH and b["algo"] == "1d"
    assert a["final_loss"] == pytest.approx(b["final_loss"], rel=1e-9) and a["test_acc"] == b["test_acc"]
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("gridgnn: error:")]
    assert len(errors) == 3, r.stderr[-3000:]
    assert f"give --algo {PATH}" in errors[0] and f"add --algo {PATH}" in errors[1]
    assert "build_reversed_1d is not a gridgnn.parallel.Algorithm" in errors[2]
    assert json.loads((tmp_path / "resumed" / "summary.json").read_text())["resumed_from_epoch"] == 4
    assert not any((tmp_path / d).exists() for d in ("data-word", "file-word", "x"))
