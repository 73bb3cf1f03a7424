"""``--comm-dtype`` and ``--overlap`` from the command line (one spawned group of 4 runs every training): overlap
gives the run without it bit for bit; float32 on a float32 run is today's run bit for bit; bfloat16 halves the node data's bytes while the weights' gradients stay float32; ``auto``
probes every K steps, reports its errors and decisions in metrics.jsonl and summary.json, stays narrow where the
error is small and falls back to the exact wire where it is not; what cannot apply is refused with one line."""
import json

import pytest

from gridgnn.distributed.launch import launch

from ._runs import group_worker, run_main

SBM = "synthetic:sbm?n=240&classes=3&avg_degree=6&features=8"
BASE = ["--data", SBM, "--hidden", 8, "--nproc", 4, "--epochs", 3, "--seed", 3, "--quiet"]
COMMON = [*BASE, "--algo", "1.5d", "--replication", 2]
RUNS = {"default": [], "float32": ["--comm-dtype", "float32"], "bfloat16": ["--comm-dtype", "bfloat16"],
        "auto": ["--comm-dtype", "auto", "--comm-check-every", 2],
        "auto-strict": ["--comm-dtype", "auto", "--comm-check-every", 2, "--comm-tolerance", 1e-12],
        "overlap": ["--overlap"]}
#: Plexus with all-reduced and with reduce-scattered sums (whole flag lists, on BASE)
PLEXUS = {"plexus": ["--algo", "plexus", "--grid", "2,1,2"], "plexus-rs": ["--algo", "plexus-rs", "--grid", "2,1,2"]}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("wire")
    argv = [[*COMMON, *flags, "--out", d / name] for name, flags in RUNS.items()]
    argv += [[*BASE, *flags, "--out", d / name] for name, flags in PLEXUS.items()]
    # auto-strict stopped after its first epoch and resumed (the guard's decisions go on from the checkpoint)
    argv += [[*COMMON, *RUNS["auto-strict"], "--epochs", 1, "--checkpoint-every", 1, "--out", d / "strict-part"],
             ["--resume", d / "strict-part", "--epochs", 3, "--nproc", 4, "--quiet", "--out", d / "strict-resumed"]]
    launch(group_worker, 4, argv, device="cpu")
    out = {"dir": d}
    for name in [*RUNS, *PLEXUS, "strict-resumed"]:
        out[name] = (json.loads((d / name / "summary.json").read_text()),
                     [json.loads(ln) for ln in (d / name / "metrics.jsonl").read_text().splitlines()])
    return out


def _same(a, b, keys=("loss", "train_acc", "val_acc", "test_acc", "bytes_sent")):
    return [{k: r[k] for k in keys} for r in a] == [{k: r[k] for k in keys} for r in b]


def test_float32_wire_is_todays_run_bit_for_bit(runs):
    (s0, m0), (s1, m1) = runs["default"], runs["float32"]
    assert _same(m0, m1)
    assert s0["comm_bytes_per_epoch"] == s1["comm_bytes_per_epoch"] and s1["comm_wire"] is None  # (no --comm-dtype)


def test_overlap_is_the_same_run_bit_for_bit(runs):
    """... but for the first epoch's one all-reduce in which the ranks agree on the parameters their backward
    reaches (a count per tensor: GCN's 4 in float32, over the 2 block rows), counted in its bytes_sent and in no
    per-epoch figure."""
    from gridgnn.distributed.accounting import allreduce

    (s0, m0), (s1, m1) = runs["default"], runs["overlap"]
    assert _same(m0, m1, keys=("loss", "train_acc", "val_acc", "test_acc"))
    agreed = allreduce(2, 4 * 4)[0]
    assert [r["bytes_sent"] for r in m1] == [m0[0]["bytes_sent"] + agreed] + [r["bytes_sent"] for r in m0[1:]]
    assert s0["comm_bytes_per_epoch"] == s1["comm_bytes_per_epoch"] and s1["config"]["overlap"] is True


def test_a_model_trained_with_them_predicts_without_them(runs):
    """predict does not inherit --overlap or --comm-dtype: serial inference of the overlap run equals the plain run's
    model, and the auto run's model predicts in --dtype on one process."""
    import numpy as np

    import gridgnn

    plain = gridgnn.load(str(runs["dir"] / "default")).predict(SBM)
    assert np.array_equal(gridgnn.load(str(runs["dir"] / "overlap")).predict(SBM), plain)
    assert gridgnn.load(str(runs["dir"] / "auto")).predict(SBM).shape == plain.shape


def test_bfloat16_halves_node_data_and_keeps_weight_gradients(runs):
    f32 = runs["default"][0]["comm_bytes_per_epoch"]["by_phase"]
    b16 = runs["bfloat16"][0]["comm_bytes_per_epoch"]["by_phase"]
    assert b16["grad.allreduce"] == f32["grad.allreduce"]  # the weights' gradients: float32
    for key in ("fwd.bcast", "bwd.reduce"):  # the stage loop's node rows (a reduce narrowed is a gather)
        assert key in f32
    assert b16["fwd.bcast"] == f32["fwd.bcast"] / 2
    assert b16["fwd.allreduce"] < 0.55 * f32["fwd.allreduce"]  # the rep sums; exact max and loss stay
    assert runs["bfloat16"][0]["final_loss"] != runs["default"][0]["final_loss"]
    assert runs["bfloat16"][0]["final_loss"] == pytest.approx(runs["default"][0]["final_loss"], rel=2e-2)


def test_auto_probes_reports_and_stays_narrow_where_the_error_is_small(runs):
    summary, metrics = runs["auto"]
    assert ["wire" in r for r in metrics] == [True, False, True]  # steps 0 and 2 probe (--comm-check-every 2)
    wire = summary["comm_wire"]
    assert wire["low"] == "bfloat16" and wire["guard"] and wire["check_every"] == 2
    assert wire["kept_exact"] == [] and wire["sites"]
    for site, v in wire["sites"].items():
        assert site.split(".")[0] in ("fwd", "bwd", "eval") and v["wire"] == "bfloat16"
        assert 0 <= v["max_error"] < 1e-2
    assert set(metrics[0]["wire"]) == set(wire["sites"])
    probe = {k: v for k, v in summary["comm_bytes_per_epoch"]["by_phase"].items() if k.startswith("probe.")}
    assert probe and sum(probe.values()) > 0  # the guard's own cost is reported apart
    narrow = runs["bfloat16"][1]
    assert metrics[1]["bytes_sent"] == narrow[1]["bytes_sent"]  # a step between probes moves bfloat16's bytes


def test_auto_falls_back_to_the_exact_wire_past_the_tolerance(runs):
    summary, metrics = runs["auto-strict"]
    wire = summary["comm_wire"]
    nonzero = sorted(s for s, v in wire["sites"].items() if v["max_error"] > 1e-12)
    assert nonzero and wire["kept_exact"] == nonzero
    assert all(v["wire"] == "exact" for s, v in wire["sites"].items() if s in nonzero)
    exact = runs["default"][1]
    assert metrics[1]["bytes_sent"] == exact[1]["bytes_sent"]  # after the probe: float32 on every site
    assert metrics[1]["bytes_sent"] > runs["bfloat16"][1][1]["bytes_sent"]


@pytest.mark.parametrize("flags, says", [
    (["--dtype", "float32", "--comm-dtype", "float64"], "wider than --dtype float32"),
    (["--comm-dtype", "bfloat16", "--comm-check-every", 5], "--comm-check-every applies to --comm-dtype auto"),
    (["--comm-tolerance", 0.1], "--comm-tolerance applies to --comm-dtype auto"),
    (["--comm-dtype", "bfloat16", "--sampler", "sage"], "applies to full-graph training"),
    (["--comm-dtype", "int8"], "invalid choice"),
    (["--comm-dtype", "bfloat16"], "one process sends nothing"),
    (["--overlap", "--algo", "plexus", "--nproc", 4], "--overlap applies to --algo 1d, 1d-sa, 1.5d"),
    (["--overlap", "--algo", "plexus-rs", "--nproc", 4], "plexus-rs overlaps nothing yet"),
    (["--overlap", "--sampler", "sage"], "--overlap applies to full-graph training"),
    (["--grad-dtype", "bfloat16"], "one process sums none"),
    (["--dtype", "float32", "--grad-dtype", "float64", "--nproc", 2], "wider than --dtype float32"),
    (["--grad-dtype", "bfloat16", "--algo", "plexus", "--nproc", 4], "inside its primitives"),
    (["--grad-dtype", "bfloat16", "--sampler", "sage", "--nproc", 2], "minibatch runs sum their gradients"),
    (["--grad-dtype", "bfloat16", "--task", "link", "--nproc", 2], "applies to node classification"),
    (["--grad-dtype", "bfloat16", "--algo", "1.5d", "--nproc", 2, "--replication", 2], "has one row block"),
])
def test_what_cannot_apply_is_refused(flags, says, capsys):
    assert run_main(["train", "--data", SBM, "--epochs", 1, "--quiet", *flags]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and err[0].startswith("gridgnn: error:") and says in err[0], err


def test_float16_overflow_ends_every_rank_with_one_line(capsys):
    """Vanilla attention on unscaled features squares them: beyond ±65504 a float16 wire would deliver infinities.
    The collective completes, and at the step's end every rank stops with the first overflowing rank's words."""
    argv = ["train", "--data", SBM, "--model", "va", "--feature-norm", "none", "--hidden", 32, "--algo", "2d",
            "--nproc", 4, "--epochs", 2, "--lr", 0.5, "--quiet", "--comm-dtype", "float16"]
    assert run_main(argv) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and err[0].startswith("gridgnn: error: epoch 0: node data of collective"), err
    assert "beyond float16's range (±65504): use --comm-dtype bfloat16 or auto" in err[0]


def test_plexus_rs_moves_fewer_bytes_and_trains_the_same_model(runs):
    """Reduce-scattered sums (plexus-rs) against all-reduced ones (plexus), measured on the same run: fewer node
    bytes in the forward and in total, the same losses (both equal serial), and the trained model predicts the
    same on one process (its weight rows assembled from the ranks' blocks)."""
    import numpy as np

    import gridgnn

    (s0, m0), (s1, m1) = runs["plexus"], runs["plexus-rs"]
    b0, b1 = s0["comm_bytes_per_epoch"], s1["comm_bytes_per_epoch"]
    fwd = [sum(v for k, v in b["by_phase"].items() if k.startswith("fwd.")) for b in (b0, b1)]
    assert fwd[1] < 0.8 * fwd[0]
    assert b1["total"] < b0["total"]
    assert "fwd.reducescatter" in b1["by_phase"] and "fwd.reducescatter" not in b0["by_phase"]
    assert [r["loss"] for r in m1] == pytest.approx([r["loss"] for r in m0], rel=1e-5)
    p0 = gridgnn.load(str(runs["dir"] / "plexus")).predict(SBM)
    p1 = gridgnn.load(str(runs["dir"] / "plexus-rs")).predict(SBM)
    np.testing.assert_allclose(p1, p0, rtol=1e-4, atol=1e-5)


def test_a_resumed_auto_run_keeps_the_guards_decisions(runs):
    """The sites the guard kept exact stay exact after a resume, and the next probe is when it is due, as in the run
    not interrupted: a resumed run narrowed every site again and probed on its first step, and its trajectory
    drifted from the uninterrupted run's (2e-3 in the logits)."""
    (whole, full), (resumed, rest) = runs["auto-strict"], runs["strict-resumed"]
    assert ["wire" in r for r in rest] == ["wire" in r for r in full] == [True, False, True]
    assert _same(rest, full) and [r.get("wire") for r in rest] == [r.get("wire") for r in full]
    assert resumed["comm_wire"] == whole["comm_wire"] and resumed["comm_wire"]["kept_exact"]
