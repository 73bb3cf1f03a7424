"""End-to-end: the gridgnn CLI trains, writes its outputs, equals serial training, and fails cleanly."""
import json
import subprocess
import sys
import time

import numpy as np
import pytest

from gridgnn.graph.loaders import save_npz
from gridgnn.graph import Graph

from ._runs import cli_batch, run_main, run_stderr

SUMMARY_KEYS = {"test_acc", "val_acc", "best_epoch", "epoch_time_median_s", "comm_bytes_per_epoch",
                "max_rank_send_bytes_per_epoch", "algo", "grid", "nproc", "partition", "seed"}


def gridgnn(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "gridgnn", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


def test_default_data_trains_and_writes_outputs(tmp_path):
    out = tmp_path / "run"
    t0 = time.perf_counter()
    r = gridgnn("train", "--epochs", 60, "--nproc", 2, "--algo", "1d-sa", "--out", out, "--save-logits",
                "--log-every", 20)
    took = time.perf_counter() - t0
    assert r.returncode == 0, r.stderr
    s = json.loads((out / "summary.json").read_text())
    assert SUMMARY_KEYS <= set(s)
    # the start-up by stage: the launcher's (the SPEC generated once, its shards written), then rank 0's own
    stages = s["startup_s"]
    assert list(stages) == ["checks", "load", "shard", "spawn", "read", "join", "memory", "build", "model",
                            "optimizer", "total"], stages
    assert min(stages.values()) >= 0 and abs(sum(stages.values()) - 2 * stages["total"]) < 0.01
    assert stages["total"] < took
    assert s["nproc"] == 2 and s["algo"] == "1d-sa" and s["grid"] == [2]
    assert len(s["devices"]) == 2 and all(d.startswith("cpu") for d in s["devices"])  # what the times ran on
    from gridgnn.graph.spec import load_graph

    g = load_graph(None)
    chance = 1.0 / g.num_classes
    assert s["test_acc"] > chance + 0.25, s["test_acc"]
    lines = (out / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 60 and json.loads(lines[-1])["epoch"] == 59
    assert (out / "breakdown.png").stat().st_size > 1000
    logits = np.load(out / "logits.npy")
    assert logits.shape == (g.n, g.num_classes) and logits.dtype == np.float32  # the run's dtype
    # per-phase bytes add up to the total, and 1d-sa moved data in both passes
    cb = s["comm_bytes_per_epoch"]
    assert abs(sum(cb["by_phase"].values()) - cb["total"]) < 1e-6 * max(1.0, cb["total"])
    assert cb["by_phase"]["fwd.alltoallv"] > 0 and cb["by_phase"]["bwd.alltoallv"] > 0
    assert "final: test_acc=" in r.stdout


CORA_P4 = {"1d": [], "1d-sa": [], "1.5d": ["--replication", 2], "1.5d-sa": ["--replication", 2],
           "2d": ["--grid", "2,2"], "3d": ["--grid", "2,1,2"],
           "plexus": ["--grid", "1,2,2", "--partition", "double-perm"],
           "plexus-balanced": ["--grid", "2,2,1", "--partition", "balanced-perm", "--blocked-aggregation", 300]}


@pytest.fixture(scope="module")
def cora_runs(tmp_path_factory, cora_dir):
    """10 epochs of Adam with dropout in float64 on Cora: serially, and at P = 4 on every algorithm in one spawned
    group (each rank parsing the command line with the CLI's parser, tests/train/_runs.py). (20 epochs tested the
    same path twice as long; the whole-run equality on Cora is benchmarks/cora_accuracy.py's.)"""
    from gridgnn.distributed.launch import launch

    from ._runs import group_worker

    root = tmp_path_factory.mktemp("cora")
    common = ["--data", f"planetoid:{cora_dir}", "--epochs", 10, "--dtype", "float64", "--quiet", "--save-logits",
              "--seed", 3]
    r = gridgnn("train", *common, "--algo", "serial", "--out", root / "serial")
    assert r.returncode == 0, r.stderr
    launch(group_worker, 4, [[*common, "--algo", name.partition("-balanced")[0], "--nproc", 4, *extra,
                              "--out", root / name] for name, extra in CORA_P4.items()], device="cpu", collect=True)
    return root


@pytest.mark.parametrize("name", list(CORA_P4))
def test_cora_training_equals_serial(cora_runs, name):
    """Logits after 10 epochs equal serial training (same seed), and so do the best epoch and the accuracy."""
    out, ref = cora_runs / name, cora_runs / "serial"
    a, b = np.load(out / "logits.npy"), np.load(ref / "logits.npy")
    assert np.abs(a - b).max() <= 1e-5 * np.abs(b).max()
    sa, sb = json.loads((out / "summary.json").read_text()), json.loads((ref / "summary.json").read_text())
    assert sa["best_epoch"] == sb["best_epoch"] and sa["test_acc"] == sb["test_acc"]
    assert sa["algo"] == name.partition("-balanced")[0] and sa["nproc"] == 4


def _bad_npz(tmp_path):
    g = Graph.from_edges([0, 1], [1, 2], 3, directed=False, x=np.ones((3, 2)), y=np.array([0, 1, 0]),
                         train_mask=np.array([1, 1, 0], bool))
    path = tmp_path / "bad.npz"
    save_npz(g, path)
    d = dict(np.load(path))
    d["x"] = np.array([[1.0, np.nan], [0, 1], [1, 1]])
    np.savez(path, **d)
    return path


BAD_CASES = ["missing", "nan", "range", "grid", "serial-nproc", "scheme", "replication", "grid3d", "perm"]


BAD_RUNS = [(c, p) for c in BAD_CASES for p in (1, 2) if not (c == "serial-nproc" and p == 1)]  # serial, 1: valid

def _bad_args(case: str, tmp_path) -> tuple[list, str]:
    if case == "missing":
        return ["--data", f"npz:{tmp_path / 'nope.npz'}"], "nope.npz"
    if case == "nan":
        return ["--data", f"npz:{_bad_npz(tmp_path)}"], "NaN"
    if case == "range":
        f = tmp_path / "e.txt"
        f.write_text("0 1\n1 -2\n")
        return ["--data", f"edgelist:{f}"], "-2"
    if case == "grid":
        return ["--algo", "1.5d", "--replication", 3], "replication"
    if case == "serial-nproc":
        return ["--algo", "serial"], "serial"
    if case == "replication":
        return ["--algo", "1d", "--replication", 2], "replication"
    if case == "grid3d":
        return ["--algo", "plexus", "--grid", "3,1,1"], "3,1,1"
    if case == "perm":
        return ["--algo", "2d", "--partition", "metis"], "metis"
    return ["--data", "bogus:thing"], "bogus"


@pytest.fixture(scope="module")
def bad_runs(tmp_path_factory):
    """Every bad-input run of ``gridgnn train``, one after another in one interpreter (the start-up of Python and
    torch paid once): ``(case, nproc) → (exit status, everything written to the process's stderr meanwhile,
    the spawned ranks' included)``."""
    tmp = tmp_path_factory.mktemp("bad")
    runs, expected = [], {}
    for case, nproc in BAD_RUNS:
        args, msg = _bad_args(case, tmp)
        algo = [] if "--algo" in args else ["--algo", "1d"]
        runs.append([str(a) for a in ["train", *args, *algo, "--nproc", nproc, "--epochs", 2, "--quiet"]])
        expected[(case, nproc)] = msg
    r, codes = cli_batch(runs, segmented=True)
    assert codes is not None, r.stderr[-3000:]
    out = {}
    for i, key in enumerate(BAD_RUNS):
        out[key] = (codes[i], run_stderr(r, i), expected[key])
    return out


@pytest.mark.parametrize("case,nproc", BAD_RUNS)
def test_bad_input_is_one_clear_error(bad_runs, case, nproc):
    code, err, msg = bad_runs[(case, nproc)]
    assert code == 2, (code, err[-2000:])
    assert "gridgnn: error:" in err and msg in err, err[-2000:]
    assert "Traceback" not in err, err[-2000:]


SMALL = "synthetic:sbm?n=600&classes=4&avg_degree=8&features=16"


def test_sharded_dataset_trains_like_in_memory(tmp_path):
    """gridgnn shard + --data sharded:DIR: each rank reads its blocks; logits equal in-memory training with the
    same permutations (plexus, double-perm) and serial training (1d from a single-perm shard). The model is VA,
    whose features are read with unit-L2 rows (``--feature-norm auto``): from the shards' chunks, from the
    in-memory graph and on Plexus' column blocks alike — and it matters (``none`` gives other logits)."""
    common = ["--model", "va", "--epochs", 8, "--dtype", "float64", "--quiet", "--save-logits", "--seed", 5]
    for method in ("double-perm", "single-perm"):
        assert run_main(["shard", "--data", SMALL, "--blocks", "3x3", "--method", method, "--seed", 5,
                         "--out", tmp_path / method]) == 0
        meta = json.loads((tmp_path / method / "meta.json").read_text())
        assert meta["blocks"] == [3, 3] and meta["nnz_max_over_mean"] >= 1.0
    runs = {
        "sharded-plexus": ["--data", f"sharded:{tmp_path / 'double-perm'}", "--algo", "plexus", "--nproc", 4,
                           "--grid", "2,1,2"],
        "memory-plexus": ["--data", SMALL, "--partition", "double-perm", "--algo", "plexus", "--nproc", 4,
                          "--grid", "2,1,2"],
        "sharded-1d": ["--data", f"sharded:{tmp_path / 'single-perm'}", "--algo", "1d-sa", "--nproc", 2],
        "serial": ["--data", SMALL, "--algo", "serial"],
        "serial-none": ["--data", SMALL, "--algo", "serial", "--feature-norm", "none"],
    }
    logits = {}
    for name, args in runs.items():
        assert run_main(["train", *args, *common, "--out", tmp_path / name]) == 0  # in this process: no start-up
        logits[name] = np.load(tmp_path / name / "logits.npy")
    ref = logits["serial"]
    assert np.abs(logits["serial-none"] - ref).max() > 1e-3 * np.abs(ref).max()
    assert np.array_equal(logits["sharded-plexus"], logits["memory-plexus"])
    for name in ("sharded-plexus", "sharded-1d"):
        assert np.abs(logits[name] - ref).max() <= 1e-5 * np.abs(ref).max(), name
    s = json.loads((tmp_path / "sharded-plexus" / "summary.json").read_text())
    assert s["partition"] == "double-perm" and s["nnz_max_over_mean"] >= 1.0 and s["feature_norm"] == "l2"


def test_partition_command_reports_permutation_balance(tmp_path):
    out = tmp_path / "perm"
    r = gridgnn("partition", "--data", SMALL, "--method", "balanced-perm", "--blocks", "4x4", "--out", out)
    assert r.returncode == 0, r.stderr
    rep = json.loads(out.with_suffix(".json").read_text())
    pr, pc = np.load(f"{out}.perm_r.npy"), np.load(f"{out}.perm_c.npy")
    assert sorted(pr) == list(range(600)) and sorted(pc) == list(range(600))
    from gridgnn.graph import gcn_normalize
    from gridgnn.graph.spec import load_graph
    from gridgnn.partition.permute import nnz_max_over_mean_used

    g = load_graph(SMALL)
    assert abs(rep["nnz_max_over_mean"] - nnz_max_over_mean_used(gcn_normalize(g), pr, pc, 4, 4)) < 1e-12


def test_ranks_agree_on_a_partition_that_is_not_reproducible(tmp_path):
    """Mt-KaHyPar gives each process a different partition; the ranks adopt rank 0's and training still
    equals serial training."""
    common = ["--data", SMALL, "--epochs", 5, "--dtype", "float64", "--quiet", "--save-logits", "--seed", 1]
    r = gridgnn("train", *common, "--algo", "serial", "--out", tmp_path / "s")
    assert r.returncode == 0, r.stderr
    r = gridgnn("train", *common, "--algo", "1d-sa", "--nproc", 2, "--partition", "hypergraph", "--out", tmp_path / "h")
    assert r.returncode == 0, r.stderr
    a, b = np.load(tmp_path / "h" / "logits.npy"), np.load(tmp_path / "s" / "logits.npy")
    assert a.dtype == b.dtype == np.float64  # --dtype float64 logits are saved unrounded, distributed or not
    assert np.abs(a - b).max() <= 1e-5 * np.abs(b).max()


@pytest.mark.parametrize("argv", [["train", "--log", "5"], ["train", "--epoch", "1"], ["train", "--log-ev", "2"],
                                  ["simulate", "--hid", "8"], ["plan", "--npro", "2"], ["shard", "--memory", "1G"]])
def test_a_flag_is_never_matched_by_a_prefix(argv, capsys):
    """A flag is read whole: a prefix of a longer flag is refused (exit 2), so a flag added later cannot change what
    an older command line means (``--log 5`` is refused by --log's choices, never read as ``--log-every 5``)."""
    assert run_main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("gridgnn: error:"), err


def test_the_commands_flags_of_config_fields_are_trains():
    """simulate, plan and predict read config fields with the flags train generates from their declarations: the
    same choices, types and ranges, every model option included (no hand-written copy that drifts)."""
    from gridgnn.cli import build_parser
    from gridgnn.commands.plan import PLAN_FLAGS
    from gridgnn.commands.predict import PREDICT_LAYOUT
    from gridgnn.commands.simulate import SIMULATE_FLAGS

    sub = next(a for a in build_parser()._actions if a.dest == "command").choices

    def actions(cmd):
        return {a.dest: a for a in sub[cmd]._actions}

    train = actions("train")
    for cmd, names in (("simulate", SIMULATE_FLAGS), ("plan", PLAN_FLAGS), ("predict", PREDICT_LAYOUT + ("nproc",))):
        mine = actions(cmd)
        for name in names:
            a, b = mine[name], train[name]
            assert (a.option_strings, a.choices, a.type, a.nargs) == (b.option_strings, b.choices, b.type, b.nargs), \
                (cmd, name)
    for name in ("attn_dropout", "edge_dim", "relations", "feature_norm"):
        assert name in actions("simulate") and name in actions("plan")
    assert run_main(["simulate", "--model", "gat", "--attn-dropout", "2"]) == 2  # the field's range, one line
