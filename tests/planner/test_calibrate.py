"""`gridgnn calibrate`: a quick profile of this machine that the planner reads (kernel coefficients, α and β of every
collective the library uses), and `--fit` fitting the time model's coefficients to measured runs."""
import json

import pytest

from gridgnn.planner.calibrate import CALIBRATED
from gridgnn.planner.timing import WORK_UNITS, load_profile

from ..train._runs import cli_batch, run_main

SBM = "synthetic:sbm?n=300&classes=3&avg_degree=6&features=8"
RUNS = {"serial": ["--algo", "serial", "--checkpoint-every", 2],  # (--fit simulates the run: no outputs to check)
        "1d": ["--algo", "1d", "--nproc", 2],
        "1d-sa": ["--algo", "1d-sa", "--nproc", 2], "auto": ["--algo", "auto", "--nproc", 2]}


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory):
    d = tmp_path_factory.mktemp("cal")
    argvs = [["train", "--data", SBM, "--hidden", 8, "--epochs", 3, "--quiet", "--out", d / name, *flags]
             for name, flags in RUNS.items()]
    argvs.append(["calibrate", "--quick", "--max-nproc", 2, "--out", d / "profile.json"])
    argvs.append(["calibrate", "--profile", d / "profile.json", "--fit", *[d / n for n in RUNS],
                  "--out", d / "fitted.json"])
    r, codes = cli_batch(argvs)
    assert codes == [0] * len(argvs), r.stderr[-3000:]
    return d, r.stdout


def test_quick_profile_has_every_price(calibrated):
    d, _ = calibrated
    prof = load_profile(str(d / "profile.json"))
    assert prof.device == "cpu" and prof.cores >= 1
    assert "1" in prof.kernels
    for k in prof.kernels.values():
        assert set(k) == set(WORK_UNITS) and all(v >= 0 for v in k.values())
        assert k["edge"] + k["nnz"] > 0 and k["flop"] > 0 and k["launch"] > 0  # work costs time
    assert set(prof.collectives) == set(CALIBRATED)
    for coll, table in prof.collectives.items():
        alpha, beta = table["2"]
        assert alpha >= 0 and beta >= 0 and alpha + beta > 0, coll


def test_calibrate_fits_the_time_model_to_real_steps(calibrated):
    from gridgnn.commands.calibrate import step_candidates

    d, out = calibrated
    fit = json.loads((d / "profile.json").read_text())["fit"]
    steps = step_candidates(2, quick=True)
    assert fit["runs"] == len(steps) >= 3 and min(fit["comp"], fit["comm"], fit["const_s"]) >= 0
    assert f"time model fitted to {len(steps)} real steps" in out
    assert {c.algo for c in steps} == {"1d", "1d-sa", "2d", "plexus"}  # every family
    # each printed step: its measured time and θ·(compute, communication) + θ₀ of it; the largest error is the fit's
    printed = [line for line in out.split("time model fitted to")[1].splitlines()[1:len(steps) + 1]]
    errs = [abs(float(line.split("predicted")[1].split("ms")[0]) - float(line.split("measured")[1].split("ms")[0]))
            / float(line.split("measured")[1].split("ms")[0]) for line in printed]
    assert [line.split()[0] for line in printed] == [c.algo for c in steps]
    assert max(errs) == pytest.approx(fit["max_rel_err"], abs=0.01)


def test_fit_to_runs(calibrated):
    d, out = calibrated
    fitted = json.loads((d / "fitted.json").read_text())
    fit = fitted["fit"]
    assert fit["runs"] == len(RUNS) and min(fit["comp"], fit["comm"], fit["const_s"]) >= 0
    base = json.loads((d / "profile.json").read_text())
    assert fitted["kernels"] == base["kernels"] and fitted["collectives"] == base["collectives"]
    assert f"time model fitted to {len(RUNS)} runs" in out
    # every printed prediction is θ·(compute, communication) + θ₀ of its run: the largest error printed is theirs
    errs = []
    for line in out.split(f"time model fitted to {len(RUNS)} runs")[1].splitlines():
        if "measured" in line and "predicted" in line:
            meas = float(line.split("measured")[1].split("ms")[0])
            pred = float(line.split("predicted")[1].split("ms")[0])
            errs.append(abs(pred - meas) / meas)
    assert len(errs) == len(RUNS)
    assert max(errs) == pytest.approx(fit["max_rel_err"], abs=0.01)


def test_calibrate_refuses_bad_input(capsys, tmp_path, calibrated):
    d, _ = calibrated
    good = json.loads((d / "profile.json").read_text())
    bad = {"not-a-profile.json": {"hello": 1},
           "kernels-list.json": dict(good, kernels=[1, 2]),
           "zero-threads.json": dict(good, kernels={"0": good["kernels"]["1"]}),
           "bad-collective.json": dict(good, collectives={"allreduce": {"2": [1e-4]}}),
           "bad-link.json": dict(good, links={"intra": {"alpha_s": 1e-4, "bandwidth_Bps": 0}})}
    for name, obj in bad.items():
        (tmp_path / name).write_text(json.dumps(obj))
    no_time = tmp_path / "run"
    no_time.mkdir()
    summary = json.loads((d / "1d" / "summary.json").read_text())
    del summary["epoch_time_median_s"]
    (no_time / "summary.json").write_text(json.dumps(summary))
    link = tmp_path / "link"  # a link-prediction run: priced as node classification's step, it was accepted
    link.mkdir()
    summary = json.loads((d / "1d" / "summary.json").read_text())
    summary["config"]["task"] = "link"
    (link / "summary.json").write_text(json.dumps(summary))
    auto = tmp_path / "auto"  # an --algo auto run whose plan is not a plan
    auto.mkdir()
    summary = json.loads((d / "1d" / "summary.json").read_text())
    summary["config"]["algo"], summary["plan"] = "auto", "x"
    (auto / "summary.json").write_text(json.dumps(summary))
    calls = [["calibrate", "--profile", str(tmp_path / name), "--out", str(tmp_path / "o.json")] for name in bad]
    calls += [["calibrate", "--profile", "local-cpu", "--fit", str(tmp_path), "--out", str(tmp_path / "o.json")],
              ["calibrate", "--profile", "local-cpu", "--fit", str(no_time), "--out", str(tmp_path / "o.json")],
              ["calibrate", "--profile", "local-cpu", "--fit", str(link), "--out", str(tmp_path / "o.json")],
              ["plan", "--nproc", 4, "--profile", "nosuch"],
              ["plan", "--nproc", 4, "--algos", "1d,nosuch"],
              ["plan", "--nproc", 4, "--algos", "serial"],
              ["plan", "--nproc", 4, "--memory", "inf"],
              ["simulate", "--algo", "auto", "--nproc", 4],
              ["calibrate", "--profile", "local-cpu", "--quick", "--out", str(tmp_path / "o.json")],
              ["calibrate", "--profile", "local-cpu", "--max-nproc", 4, "--out", str(tmp_path / "o.json")],
              ["plan", "--nproc", 4, "--partitions", "metis,bogus"],
              ["plan", "--nproc", 4, "--algos", ","],
              ["calibrate", "--device", "cuda", "--max-nproc", 4096, "--out", str(tmp_path / "o.json")],
              ["calibrate", "--max-nproc", 1 << 40, "--out", str(tmp_path / "o.json")],
              ["calibrate", "--profile", "local-cpu", "--fit", str(auto), "--out", str(tmp_path / "o.json")],
              ["calibrate", "--no-steps", "--fit", str(d / "1d"), "--out", str(tmp_path / "o.json")],
              ["plan", "--nproc", 2, "--overwrite"], ["simulate", "--nproc", 2, "--algo", "1d", "--overwrite"],
              ["partition", "--data", SBM, "--parts", 2, "--method", "metis", "--overwrite"]]
    for argv in calls:
        assert run_main(argv) == 2, argv
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == len(calls) and all(ln.startswith("gridgnn: error:") for ln in err), err
    words = ["not a gridgnn profile", "kernels must map", "kernels['0']", "collectives['allreduce']",
             "links['intra']", "no summary.json", "no measured epoch_time_median_s", "a --task link run",
             "neither a file nor a preset",
             "unknown algorithm 'nosuch'", "serial runs on one process", "--memory must be", "gridgnn plan ranks",
             "--quick says how calibrate measures; --profile local-cpu reads a profile", "--max-nproc says how",
             "--partitions: unknown row partition 'bogus'", "--algos ',' names nothing",
             # (these two failed after minutes of measuring kernels, naming --nproc; the last was an AttributeError)
             "--max-nproc 4096 measures groups of up to 4096 ranks, one GPU each", "the memory available here",
             "an --algo auto run whose summary.json holds no plan's pick",
             "--no-steps keeps the time model at θ = 1, 1, 0; --fit fits it",  # (it fitted θ after measuring)
             *["--overwrite replaces the files of a previous --out FILE; give --out"] * 3]  # (it replaced nothing)
    for line, word in zip(err, words):
        assert word in line, (word, line)
