"""--checkpoint-every / --resume: a resumed run equals the uninterrupted one — bit for bit with the same algorithm
and P (every algorithm), within float tolerance across a change of algorithm and P — and a bad checkpoint is one
clear error.

Every run trains the same small SBM for 6 epochs, or for 3 with a checkpoint and then resumed to 6. The serial
runs, a 1d P=2 run and a CLI-launched plexus P=4 resume go through `gridgnn` in two subprocesses; the P=4 runs of
every algorithm share one spawned group (start-up paid once), each rank parsing the command line with the CLI's
own parser (tests/train/_runs.py).
"""
import json

import numpy as np
import pytest
import torch

import gridgnn
from gridgnn.distributed.launch import launch
from gridgnn.graph.loaders import save_npz
from gridgnn.graph.spec import load_graph

from ._runs import cli_batch, group_worker, run_main

SBM = "synthetic:sbm?n=400&classes=4&avg_degree=8&features=16"
COMMON = ["--data", SBM, "--quiet", "--save-logits", "--seed", 3]
TIMING = {"epoch_time_s", "eval_time_s", "comm_time_s", "compute_time_s", "compile_time_s"}
#: one algorithm per layout family and grid, and each way Plexus shards its weights (1d-sa and 1.5d keep their
#: parameters and resume as 1d and 1.5d-sa do)
P4 = {
    "1d": [], "1.5d-sa": ["--replication", 2], "2d": ["--grid", "2,2"], "3d": ["--grid", "2,1,2"],
    "plexus": ["--grid", "1,2,2", "--partition", "double-perm"], "plexus-rs": ["--grid", "2,1,2"],
}


GAT = ["--model", "gat", "--heads", 2, "--hidden", 4, "--attn-dropout", 0.3]
AGNN = ["--model", "agnn", "--layers", 4, "--hidden", 6]  # linear layers 0 and 3, a trained β in layer 2


def _algo(name):
    return ["--algo", "serial"] if name == "serial" else ["--algo", name, "--nproc", 4, *P4[name]]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Every run of this module, once: ``{name: folder}``."""
    root = tmp_path_factory.mktemp("resume")
    d = {}

    def at(name):
        d[name] = root / name
        return d[name]

    f64 = ["--dtype", "float64"]
    # serial (float32: bit-exact; float64: reference of the cross-algorithm resumes) and 1d at P=2
    first = []
    for name, extra in (("serial", []), ("serial64", f64)):
        first += [["train", *COMMON, *extra, "--epochs", 6, "--checkpoint-every", 3, "--out", at(f"{name}-ref")],
                  ["train", *COMMON, *extra, "--epochs", 3, "--checkpoint-every", 3, "--out", at(f"{name}-ck")]]
    first.append(["train", "--resume", d["serial-ck"], "--epochs", 6, "--quiet"])  # --out defaults to the folder
    first.append(["train", *COMMON, *f64, "--algo", "1d", "--nproc", 2, "--epochs", 3, "--checkpoint-every", 3,
                  "--out", at("1d-p2-ck")])

    r, codes = cli_batch(first)
    assert codes == [0] * len(first), (codes, r.stderr[-3000:])
    d["serial-res"] = d["serial-ck"]

    group = []
    for name in P4:
        group += [[*COMMON, *_algo(name), "--epochs", 6, "--checkpoint-every", 3, "--out", at(f"{name}-ref")],
                  [*COMMON, *_algo(name), "--epochs", 3, "--checkpoint-every", 3, "--out", at(f"{name}-ck")],
                  ["--resume", d[f"{name}-ck"], "--epochs", 6, "--quiet", "--out", at(f"{name}-res")]]
    group += [
        ["--resume", d["serial64-ck"], "--algo", "2d", "--nproc", 4, "--grid", "2,2", "--epochs", 6, "--quiet",
         "--out", at("serial-to-2d")],
        ["--resume", d["1d-p2-ck"], "--algo", "plexus", "--nproc", 4, "--grid", "1,2,2", "--partition",
         "double-perm", "--epochs", 6, "--quiet", "--out", at("1d-p2-to-plexus")],
        [*COMMON, *f64, *_algo("plexus"), "--epochs", 3, "--checkpoint-every", 3, "--out", at("plexus64-ck")],
    ]
    for k, extra in enumerate((["--epochs", 6], ["--epochs", 3])):  # GAT (sharded weights and biases on Plexus)
        group.append([*COMMON, *GAT, *_algo("plexus"), *extra, "--checkpoint-every", 3,
                      "--out", at(("gat-plexus-ref", "gat-plexus-ck")[k])])
    group.append(["--resume", d["gat-plexus-ck"], "--epochs", 6, "--quiet", "--out", at("gat-plexus-res")])
    for k, extra in enumerate((["--epochs", 6], ["--epochs", 3])):  # AGNN: parameters in some layers only
        group.append([*COMMON, *AGNN, *_algo("plexus"), *extra, "--checkpoint-every", 3,
                      "--out", at(("agnn-plexus-ref", "agnn-plexus-ck")[k])])
    group.append(["--resume", d["agnn-plexus-ck"], "--epochs", 6, "--quiet", "--out", at("agnn-plexus-res")])
    launch(group_worker, 4, group, device="cpu", collect=True)

    last = [["train", "--resume", d["plexus64-ck"], "--algo", "serial", "--epochs", 6, "--quiet",
             "--out", at("plexus-to-serial")],
            ["train", "--resume", d["plexus-ck"], "--epochs", 6, "--quiet", "--out", at("plexus-cli-res")]]
    r, codes = cli_batch(last)
    assert codes == [0, 0], (codes, r.stderr[-3000:])
    return d


def _metrics(folder):
    lines = (folder / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}")) for line in lines]


def _untimed(rec):
    return {k: v for k, v in rec.items() if k not in TIMING}


def _ckpt(folder):
    return torch.load(folder / "checkpoint.pt", weights_only=True)


def _tensors(ck):
    out = []
    for group in (ck["params"], ck["optimizer"]["exp_avg"], ck["optimizer"]["exp_avg_sq"]):
        for name in sorted(group):
            out += group[name]
    return out


def _assert_bit_equal(ref, res):
    ma, mb = _metrics(ref), _metrics(res)
    assert [r["epoch"] for r in mb] == list(range(6))
    assert [_untimed(r) for r in ma] == [_untimed(r) for r in mb]
    a, b = np.load(ref / "logits.npy"), np.load(res / "logits.npy")
    assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    ca, cb = _ckpt(ref), _ckpt(res)
    assert ca["epoch"] == cb["epoch"] == 6 and ca["best_epoch"] == cb["best_epoch"]
    assert float(ca["optimizer"]["step"]) == float(cb["optimizer"]["step"]) == 6.0
    for x, y in zip(_tensors(ca), _tensors(cb), strict=True):
        assert x.dtype == y.dtype and x.shape == y.shape and x.numpy().tobytes() == y.numpy().tobytes()
    sa, sb = (json.loads((f / "summary.json").read_text()) for f in (ref, res))
    assert sa["resumed_from_epoch"] is None and sb["resumed_from_epoch"] == 3
    for key in ("best_epoch", "test_acc", "val_acc", "train_acc", "final_loss", "algo", "grid", "nproc", "seed"):
        assert sa[key] == sb[key], key


@pytest.mark.parametrize("algo", ["serial", *P4])
def test_resume_reproduces_the_uninterrupted_run_bit_for_bit(runs, algo):
    _assert_bit_equal(runs[f"{algo}-ref"], runs[f"{algo}-res"])


def test_gat_resume_is_bit_exact(runs):
    """GAT on Plexus: weights and biases sharded, attention vectors whole — the checkpoint holds them all."""
    _assert_bit_equal(runs["gat-plexus-ref"], runs["gat-plexus-res"])
    assert sorted(_ckpt(runs["gat-plexus-ref"])["params"]) == ["att_dst", "att_src", "biases", "weights"]
    _assert_bit_equal(runs["agnn-plexus-ref"], runs["agnn-plexus-res"])
    params = _ckpt(runs["agnn-plexus-ref"])["params"]
    assert sorted(params) == ["betas", "biases", "weights"] and len(params["betas"]) == 1
    assert [tuple(w.shape) for w in params["weights"]] == [(16, 6), (6, 4)]


def test_resume_launched_by_the_cli_is_bit_exact(runs):
    """The checkpoint of the group's plexus run, resumed by `gridgnn train --resume` (spawned ranks)."""
    _assert_bit_equal(runs["plexus-ref"], runs["plexus-cli-res"])


@pytest.mark.parametrize("name,source", [("serial-to-2d", "serial64-ck"), ("1d-p2-to-plexus", "1d-p2-ck"),
                                         ("plexus-to-serial", "plexus64-ck")])
def test_resume_across_algorithm_and_process_count(runs, name, source):
    """float64: the resumed run equals the uninterrupted serial run within 1e-6 (logits) and keeps the first 3
    epochs of its checkpoint verbatim."""
    ref, res = runs["serial64-ref"], runs[name]
    a, b = np.load(ref / "logits.npy"), np.load(res / "logits.npy")
    assert np.abs(a - b).max() <= 1e-6 * np.abs(a).max()
    ma, mb, mc = _metrics(ref), _metrics(res), _metrics(runs[source])
    assert mb[:3] == mc[:3]
    for x, y in zip(ma, mb, strict=True):
        assert abs(x["loss"] - y["loss"]) <= 1e-9 * abs(x["loss"])
        assert (x["train_acc"], x["val_acc"], x["test_acc"]) == (y["train_acc"], y["val_acc"], y["test_acc"])
    s = json.loads((res / "summary.json").read_text())
    assert s["resumed_from_epoch"] == 3 and s["dtype"] == "float64"


def test_checkpoint_holds_full_unsharded_state(runs):
    """Plexus shards W and b over 4 ranks; its checkpoint holds the full tensors, equal to the serial run's."""
    ck, ref = _ckpt(runs["plexus64-ck"]), _ckpt(runs["serial64-ck"])
    assert ck["format"] == "gridgnn-checkpoint" and ck["gridgnn_version"] == gridgnn.__version__
    assert ck["epoch"] == 3 and len(ck["records"]) == 3 and ck["config"]["algo"] == "plexus"
    assert ck["dims"] == [16, 16, 4] and [tuple(w.shape) for w in ck["params"]["weights"]] == [(16, 16), (16, 4)]
    for x, y in zip(_tensors(ck), _tensors(ref), strict=True):
        assert x.dtype == torch.float64 and x.shape == y.shape
        assert torch.allclose(x, y, rtol=1e-9, atol=1e-12)


def test_resume_into_its_own_folder_inherits_the_config(runs):
    """`--resume DIR --epochs 6` alone: algo, seed, dtype, --save-logits and --checkpoint-every come from the
    checkpoint, --out defaults to DIR, and the checkpoint there moves on to epoch 6."""
    folder = runs["serial-res"]
    s = json.loads((folder / "summary.json").read_text())
    assert s["seed"] == 3 and s["algo"] == "serial" and s["epochs"] == 6 and s["checkpoint_every"] == 3
    assert (folder / "logits.npy").exists() and _ckpt(folder)["epoch"] == 6
    assert not list(folder.glob(".*.tmp"))


# ------------------------------------------------------------------------------------------- bad checkpoints
@pytest.fixture(scope="module")
def small_ckpt(tmp_path_factory):
    """A 2-epoch serial checkpoint, trained in this process."""
    out = tmp_path_factory.mktemp("small") / "run"
    assert run_main(["train", "--data", SBM, "--epochs", 2, "--checkpoint-every", 2, "--quiet", "--out", out]) == 0
    return out


def _one_error(capsys, code, *needles):
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("gridgnn: error: "), err
    for n in needles:
        assert n in lines[0], (n, err)
    return lines[0]


class _Payload:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        import os

        return os.system, (f"touch {self.path}",)


def _make_bad(kind, src, folder, tmp_path):
    folder.mkdir()
    target = folder / "checkpoint.pt"
    if kind == "not-gridgnn":
        torch.save({"weights": [torch.zeros(2, 2)]}, target)
    elif kind == "text":
        target.write_text("epoch 3, params ...\n")
    elif kind == "json":  # (a metrics.jsonl line: it was said to hold objects other than tensors)
        target.write_text('{"epoch": 0, "loss": 1.0}\n')
    elif kind == "truncated":
        data = (src / "checkpoint.pt").read_bytes()
        target.write_bytes(data[: len(data) // 2])
    elif kind == "code":  # a torch.save file whose pickle calls os.system
        torch.save({"format": "gridgnn-checkpoint", "x": _Payload(tmp_path / "pwned")}, target)
    elif kind == "future":
        ck = _ckpt(src)
        ck["format_version"] = 99
        torch.save(ck, target)
    elif kind == "shape":
        ck = _ckpt(src)
        ck["params"]["weights"][1] = torch.zeros(16, 5)
        torch.save(ck, target)
    elif kind == "moments":
        ck = _ckpt(src)
        del ck["optimizer"]["exp_avg_sq"]
        torch.save(ck, target)
    elif kind in ("step-frac", "step-vec", "neg-sq"):  # resumed without a word: Adam's bias correction read them
        ck = _ckpt(src)
        if kind == "neg-sq":
            ck["optimizer"]["exp_avg_sq"]["weights"][0] = -ck["optimizer"]["exp_avg_sq"]["weights"][0] - 1
        else:
            ck["optimizer"]["step"] = torch.tensor(2.5) if kind == "step-frac" else ck["optimizer"]["step"].reshape(1)
        torch.save(ck, target)
    elif kind in ("val-acc", "no-loss", "wire"):  # records a resumed run reads (it failed by a traceback, or at
        ck = _ckpt(src)  # the end; the wire guard's report: --comm-dtype auto's decisions)
        for rec in ck["records"]:
            if kind == "val-acc":
                rec["val_acc"] = "high"
            elif kind == "wire":
                rec["wire"] = {"fwd.bcast@p": {"error": -1.0, "wire": "exact"}}
            else:
                del rec["loss"]
        torch.save(ck, target)
    elif kind == "missing":
        target.unlink(missing_ok=True)


@pytest.mark.parametrize("kind,needle", [
    ("not-gridgnn", "is not a gridgnn checkpoint"), ("text", "it was not written by torch.save"),
    ("json", "it was not written by torch.save"),
    ("truncated", "truncated or damaged"), ("code", "system, which no gridgnn file holds"),
    ("future", "format version 99"), ("shape", "weights[1] has shape (16, 5)"), ("moments", "optimizer exp_avg_sq"),
    ("missing", "holds no checkpoint.pt"), ("val-acc", "epoch record 0: val_acc 'high' is not a number"),
    ("no-loss", "epoch record 0: its loss None is not a finite number"),
    ("wire", "epoch record 0: wire {'fwd.bcast@p': {'error': -1.0, 'wire... is no report of the wire guard"),
    ("step-frac", "the optimizer step tensor(2.5000) is not a count of steps"),
    ("step-vec", "is not a count of steps"), ("neg-sq", "its optimizer exp_avg_sq holds a negative value"),
])
def test_bad_checkpoint_is_one_clear_error(small_ckpt, tmp_path, capsys, kind, needle):
    folder = tmp_path / "bad"
    _make_bad(kind, small_ckpt, folder, tmp_path)
    capsys.readouterr()
    code = run_main(["train", "--resume", folder, "--epochs", 4, "--quiet"])
    _one_error(capsys, code, needle)
    assert not (tmp_path / "pwned").exists()  # weights_only: the pickled os.system did not run
    assert sorted(p.name for p in folder.iterdir()) == ([] if kind == "missing" else ["checkpoint.pt"])


def test_truncated_checkpoint_via_the_cli(small_ckpt, tmp_path):
    folder = tmp_path / "bad"
    _make_bad("truncated", small_ckpt, folder, tmp_path)
    r, codes = cli_batch([["train", "--resume", folder, "--epochs", 4, "--quiet", "--algo", "1d", "--nproc", 2]])
    assert codes == [2]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gridgnn: error: --resume ") and "Traceback" not in r.stderr


@pytest.mark.parametrize("flag,value", [("--lr", 0.02), ("--hidden", 32), ("--seed", 1), ("--dtype", "float64"),
                                        ("--data", "synthetic:sbm?n=400&classes=4&avg_degree=8&features=8"),
                                        ("--dropout", 0.1), ("--layers", 3), ("--weight-decay", 0)])
def test_resume_refuses_a_flag_that_changes_the_trajectory(small_ckpt, tmp_path, capsys, flag, value):
    out = tmp_path / "o"
    code = run_main(["train", "--resume", small_ckpt, "--epochs", 4, "--quiet", flag, value, "--out", out])
    _one_error(capsys, code, f"{flag} ", "differs from the checkpoint's")
    assert not out.exists()


def test_resume_with_nothing_left_to_train(small_ckpt, capsys):
    code = run_main(["train", "--resume", small_ckpt, "--epochs", 2, "--quiet"])
    _one_error(capsys, code, "is at epoch 2 and --epochs is 2")


def test_a_resume_from_another_folder_reads_the_checkpoints_data(tmp_path, monkeypatch, capsys):
    """A relative --data path is kept absolute in the checkpoint: resumed from another working directory (one
    holding another graph of the same size under the same name), the run reads the file it was trained on, as
    the uninterrupted run does; naming that file by another relative path is the same data."""
    import json
    import shutil

    home, elsewhere = tmp_path / "home", tmp_path / "elsewhere"
    for folder, seed in ((home, 1), (elsewhere, 2)):
        folder.mkdir()
        g = load_graph(SBM, seed=seed)
        save_npz(g.with_(x=np.random.default_rng(seed).normal(size=(g.n, 8)).astype(np.float32)), folder / "g.npz")
    common = ["--data", "npz:g.npz", "--quiet", "--keep", "last", "--seed", 3]
    monkeypatch.chdir(home)
    assert run_main(["train", *common, "--epochs", 4, "--out", "whole"]) == 0
    assert run_main(["train", *common, "--epochs", 2, "--checkpoint-every", 2, "--out", "part"]) == 0
    shutil.copytree(home / "part", home / "part2")
    monkeypatch.chdir(elsewhere)
    assert run_main(["train", "--resume", home / "part", "--epochs", 4, "--quiet"]) == 0
    assert run_main(["train", "--resume", home / "part2", "--data", "npz:../home/g.npz", "--epochs", 4, "--quiet",
                     "--out", home / "again"]) == 0
    whole = json.loads((home / "whole" / "summary.json").read_text())["final_loss"]
    assert json.loads((home / "part" / "summary.json").read_text())["final_loss"] == whole
    assert json.loads((home / "again" / "summary.json").read_text())["final_loss"] == whole
    capsys.readouterr()


def test_a_checkpoint_that_stopped_early_has_nothing_left_to_train(tmp_path, capsys):
    """The last checkpoint of a run --early-stop ended: resumed with the same patience, it trained epochs the
    uninterrupted run did not; now refused, and a larger patience trains on."""
    import json

    out = tmp_path / "run"
    assert run_main(["train", "--data", SBM, "--epochs", 60, "--early-stop", 1, "--checkpoint-every", 1, "--quiet",
                     "--out", out]) == 0
    trained = json.loads((out / "summary.json").read_text())["epochs_trained"]
    assert trained < 60 and _ckpt(out)["epoch"] == trained
    capsys.readouterr()
    code = run_main(["train", "--resume", out, "--epochs", 60, "--quiet", "--out", tmp_path / "more"])
    _one_error(capsys, code, f"is at epoch {trained}, where --early-stop 1 stops a run")
    assert run_main(["train", "--resume", out, "--epochs", trained + 1, "--early-stop", 0, "--quiet", "--out",
                     tmp_path / "more"]) == 0


def test_checkpoint_of_other_data_is_refused_on_every_rank(tmp_path):
    """Same --data SPEC, different file content (8 → 12 features): every rank refuses before any collective."""
    g = load_graph(SBM)
    path = tmp_path / "g.npz"

    def write(f):
        save_npz(g.with_(x=np.random.default_rng(f).normal(size=(g.n, f)).astype(np.float32)), path)

    write(8)
    assert run_main(["train", "--data", f"npz:{path}", "--epochs", 2, "--checkpoint-every", 2, "--quiet",
                     "--out", tmp_path / "run"]) == 0
    write(12)
    r, codes = cli_batch([["train", "--resume", tmp_path / "run", "--epochs", 4, "--quiet", "--algo", "1d",
                           "--nproc", 2]])
    assert codes == [2], r.stderr[-2000:]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "layer widths [8, 16, 4]" in lines[0] and "[12, 16, 4]" in lines[0], r.stderr
    assert _ckpt(tmp_path / "run")["epoch"] == 2  # untouched


def test_a_checkpoint_of_another_name_does_not_make_its_folder_the_runs(small_ckpt, tmp_path, capsys):
    """`--resume D/other.pt` wrote into D as into its own run's folder: it removed the outputs there (another run's)
    and replaced D/checkpoint.pt, without --overwrite. Now D is an --out like any other: refused while it holds
    outputs; D/checkpoint.pt itself (a file or its folder) is the folder's own run."""
    import shutil

    d = tmp_path / "D"
    d.mkdir()
    shutil.copy(small_ckpt / "checkpoint.pt", d / "other.pt")
    for name in ("summary.json", "logits.npy"):
        (d / name).write_text("another run's")
    code = run_main(["train", "--resume", d / "other.pt", "--epochs", 3, "--quiet"])
    _one_error(capsys, code, "already holds a previous run's outputs", "--overwrite")
    assert sorted(p.name for p in d.iterdir()) == ["logits.npy", "other.pt", "summary.json"]
    assert (d / "logits.npy").read_text() == "another run's"
    here = tmp_path / "here"
    shutil.copytree(small_ckpt, here)
    assert run_main(["train", "--resume", here / "checkpoint.pt", "--epochs", 3, "--quiet"]) == 0
    assert json.loads((here / "summary.json").read_text())["epochs"] == 3


def test_a_run_resumed_here_without_checkpoints_leaves_no_stale_one(small_ckpt, tmp_path, capsys):
    """`--resume D --checkpoint-every 0` kept D's epoch-2 checkpoint beside the finished epoch-3 outputs: a later
    `--resume D` went back to epoch 2 and replaced them. The finished run now removes the checkpoint it read."""
    import shutil

    here = tmp_path / "here"
    shutil.copytree(small_ckpt, here)
    assert run_main(["train", "--resume", here, "--epochs", 3, "--checkpoint-every", 0, "--quiet"]) == 0
    assert not (here / "checkpoint.pt").exists() and (here / "model.pt").exists()
    capsys.readouterr()
    _one_error(capsys, run_main(["train", "--resume", here, "--epochs", 4, "--quiet"]), "holds no checkpoint.pt")


def test_a_resume_on_other_data_of_the_same_size_is_refused(tmp_path, capsys):
    """The checkpoint compared n and nnz only: features rewritten in place (or other labels, masks, edges of the same
    count) resumed without a word, the summary calling a model trained on the old data one of the new. The
    checkpoint now holds the graph's fingerprint, the same whichever path read the graph (one process, or shards
    the launcher writes for spawned ranks): a resume on the same data at another P goes on, on other data it is
    refused naming what differs."""
    g = load_graph(SBM, seed=3)
    path = tmp_path / "g.npz"
    save_npz(g, path)
    out = tmp_path / "run"
    assert run_main(["train", "--data", f"npz:{path}", "--epochs", 2, "--checkpoint-every", 2, "--quiet",
                     "--out", out]) == 0
    fork = tmp_path / "fork"
    assert run_main(["train", "--resume", out, "--epochs", 3, "--algo", "1d", "--nproc", 2, "--quiet",
                     "--out", fork]) == 0  # the same data, handed to spawned ranks as shards
    rng = np.random.default_rng(0)
    save_npz(g.with_(x=rng.standard_normal(g.x.shape).astype(g.x.dtype), y=rng.permutation(g.y)), path)
    capsys.readouterr()
    code = run_main(["train", "--resume", out, "--epochs", 3, "--quiet", "--out", tmp_path / "other"])
    _one_error(capsys, code, "was trained on other data: the graph's features, labels differ")
    code = run_main(["train", "--resume", fork, "--epochs", 4, "--algo", "1d", "--nproc", 2, "--quiet",
                     "--out", tmp_path / "other2"])
    assert code == 2 and "the graph's features, labels differ" in capsys.readouterr().err


def test_a_resume_compares_the_feature_norm_as_resolved_on_the_data(tmp_path):
    """--feature-norm auto follows the data's convention (planetoid: row), but the resume compared it as the model
    alone resolves it: a run trained on `none` resumed with `auto` renormalized its features silently, and one
    trained on `row` was refused its `auto`. The checkpoint now records the norm as resolved on its data."""
    from gridgnn.errors import GridGnnError

    g = load_graph(SBM, seed=3)
    g = g.with_(meta={**g.meta, "feature_norm": "row"})  # data whose convention is row-normalized features
    common = dict(graph=g, epochs=2, checkpoint_every=2, quiet=True)
    gridgnn.train(**common, feature_norm="none", out=str(tmp_path / "none"))
    with pytest.raises(GridGnnError, match="trained on features normalized 'none'; this run normalizes them 'row'"):
        gridgnn.train(graph=g, resume=str(tmp_path / "none"), epochs=3, feature_norm="auto", quiet=True,
                      out=str(tmp_path / "a"))
    gridgnn.train(**common, feature_norm="row", out=str(tmp_path / "row"))
    s = gridgnn.train(graph=g, resume=str(tmp_path / "row"), epochs=3, feature_norm="auto", quiet=True,
                      out=str(tmp_path / "b"))
    assert s["epochs"] == 3 and s["input_pipeline"]["feature_norm"] == "row"


def test_a_resume_keeps_what_is_sampled(small_ckpt, tmp_path, capsys):
    """--sampler, --fanout, --batch-size and --eval-fanout could change on resume: a full-graph run went on as
    minibatch training, and a minibatch run on other minibatches. They are now kept, compared as the run uses
    them (--fanout 5 is 5,5 on two layers)."""
    code = run_main(["train", "--resume", small_ckpt, "--epochs", 3, "--sampler", "sage", "--quiet",
                     "--out", tmp_path / "a"])
    _one_error(capsys, code, "--sampler 'sage' differs from the checkpoint's None")
    mb = tmp_path / "mb"
    assert run_main(["train", "--data", SBM, "--model", "sage", "--sampler", "sage", "--fanout", "5,5",
                     "--batch-size", 64, "--epochs", 2, "--checkpoint-every", 2, "--quiet", "--out", mb]) == 0
    capsys.readouterr()
    for flags, words in ((["--fanout", "3,3"], "--fanout '3,3' differs from the checkpoint's [5, 5]"),
                         (["--batch-size", 32], "--batch-size 32 differs from the checkpoint's 64"),
                         (["--eval-fanout", 4], "--eval-fanout '4' differs from the checkpoint's [-1, -1]")):
        code = run_main(["train", "--resume", mb, "--epochs", 3, *flags, "--quiet", "--out", tmp_path / "b"])
        _one_error(capsys, code, words)
    assert run_main(["train", "--resume", mb, "--epochs", 3, "--fanout", 5, "--batch-size", 64, "--quiet",
                     "--out", tmp_path / "c"]) == 0


def _read_one_of(ctx, paths):
    """A rank that reads ``paths[rank]`` as --resume ``paths[0]``: as if the file changed between two ranks' reads."""
    from gridgnn.distributed import Comm, ProcessGrid
    from gridgnn.train.checkpoint import check_same_checkpoint, read_checkpoint

    ckpt = read_checkpoint(str(paths[ctx.rank]))
    ctx.init()
    check_same_checkpoint(Comm(ProcessGrid.build("1d", "cpu")), ckpt, str(paths[0]))


def test_ranks_that_read_different_checkpoints_are_refused(small_ckpt, tmp_path, capsys):
    """Each rank reads --resume itself: a checkpoint rewritten between their reads (a run still writing it, a
    requeued job) started them from different epochs, collectives out of step or a mixed model. They now agree on
    what they read first, and refuse alike."""
    import shutil

    later = tmp_path / "later"
    shutil.copytree(small_ckpt, later)
    assert run_main(["train", "--resume", later, "--epochs", 3, "--checkpoint-every", 1, "--quiet"]) == 0
    first = small_ckpt / "checkpoint.pt"
    assert launch(_read_one_of, 2, [first, first]) is None  # the same file: no word
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        launch(_read_one_of, 2, [first, later / "checkpoint.pt"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "the ranks read different checkpoints from --resume" in err[0] and "(epochs 2..3)" in err[0]


def test_a_resume_on_a_rewritten_sharded_dataset_is_refused(tmp_path, capsys):
    """A sharded: dataset was compared by its size only: rewritten with another graph of the same size, a resume
    went on with it. Its fingerprint is now that of its files (their SHA-256 in meta.json) and what they mean."""
    from gridgnn.commands.shard import shard

    data = tmp_path / "sh"
    shard(SBM, str(data), blocks="2x2", method="single-perm", seed=3)
    out = tmp_path / "run"
    flags = ["--data", f"sharded:{data}", "--algo", "1d", "--nproc", 2, "--quiet"]
    assert run_main(["train", *flags, "--epochs", 2, "--checkpoint-every", 2, "--out", out]) == 0
    shard(SBM, str(data), blocks="2x2", method="single-perm", seed=3, overwrite=True)  # the same files again
    assert run_main(["train", "--resume", out, "--epochs", 3, "--quiet", "--out", tmp_path / "same"]) == 0
    shard(SBM + "&noise=3", str(data), blocks="2x2", method="single-perm", seed=3, overwrite=True)
    capsys.readouterr()
    code = run_main(["train", "--resume", out, "--epochs", 3, "--quiet", "--out", tmp_path / "again"])
    assert code == 2 and "was trained on other data: the graph's files differ" in capsys.readouterr().err


def test_a_patience_given_on_resume_that_would_have_stopped_the_run_earlier_is_refused(tmp_path, capsys):
    """A run without --early-stop, resumed with one: its validation fell after epoch 0 and rose again later, so the
    uninterrupted run with that patience stopped at epoch 1; the check read only the gap since the best epoch
    overall and trained on, epochs the uninterrupted run never trained (its --config rerun then differed)."""
    out = tmp_path / "run"
    assert run_main(["train", "--data", SBM, "--epochs", 6, "--checkpoint-every", 6, "--quiet", "--out", out]) == 0
    ck = _ckpt(out)
    for rec, val in zip(ck["records"], [0.5, 0.4, 0.6, 0.7, 0.8, 0.9]):
        rec["val_acc"] = val
    ck["best_epoch"] = 5
    torch.save(ck, out / "checkpoint.pt")
    capsys.readouterr()
    code = run_main(["train", "--resume", out, "--epochs", 8, "--early-stop", 1, "--quiet", "--out", tmp_path / "a"])
    _one_error(capsys, code, "is at epoch 6, but --early-stop 1 stopped the run at epoch 1 (no better validation "
                             "since epoch 0)")
    assert run_main(["train", "--resume", out, "--epochs", 8, "--early-stop", 2, "--quiet", "--out",
                     tmp_path / "b"]) == 0  # patience 2 never stopped it: trains on
