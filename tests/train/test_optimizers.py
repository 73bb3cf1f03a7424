"""--optimizer, --momentum, --lr-schedule, --warmup: the rate of every epoch, the state a checkpoint carries (a
resumed run equals the uninterrupted one bit for bit), the refusals, and what the memory guard counts."""
import json
import math

import pytest
import torch

from gridgnn.errors import GridGnnError
from gridgnn.train.config import TrainConfig
from gridgnn.train.optim import memory_state, rate, state_keys

from ._runs import run_main
from tests._devices import ON_A_GPU

S = "synthetic:sbm?n=120&classes=3&features=6&avg_degree=5"


def test_the_rate_of_every_epoch():
    cfg = TrainConfig(lr=0.1, epochs=10, warmup=2, lr_schedule="cosine")
    rates = [rate(cfg, e) for e in range(10)]
    assert rates[:2] == [0.05, 0.1]  # linear warm-up to lr
    assert rates[2] == 0.1 and all(a > b for a, b in zip(rates[2:], rates[3:]))
    assert math.isclose(rates[-1], 0.1 * 0.5 * (1 + math.cos(math.pi * 7 / 8)))
    step = TrainConfig(lr=0.1, epochs=11, warmup=1, lr_schedule="step", lr_step=3, lr_gamma=0.5)
    assert [rate(step, e) for e in range(11)] == [0.1] * 4 + [0.05] * 3 + [0.025] * 3 + [0.0125]
    default_step = TrainConfig(lr=1.0, epochs=9, lr_schedule="step")  # a third of the epochs, times 0.1
    assert [rate(default_step, e) for e in range(9)] == [1.0] * 3 + [0.1] * 3 + [pytest.approx(0.01)] * 3
    assert {rate(TrainConfig(lr=0.3), e) for e in range(200)} == {0.3}


@pytest.mark.parametrize("flags,needle", [
    (dict(momentum=0.5), "--momentum applies to --optimizer sgd, not adam"),
    (dict(lr_step=3), "--lr-step applies to --lr-schedule step, not none"),
    (dict(lr_gamma=0.5, lr_schedule="cosine"), "--lr-gamma applies to --lr-schedule step, not cosine"),
    (dict(warmup=5, epochs=5), "--warmup 5 leaves no epoch after the warm-up of --epochs 5"),
    # schedules that never change the rate within the run (they were accepted and trained at --lr throughout)
    (dict(warmup=4, epochs=5, lr_schedule="cosine"), "--lr-schedule cosine: the one epoch after the warm-up"),
    (dict(epochs=1, lr_schedule="step"), "--lr-schedule step: the one epoch after the warm-up"),
    (dict(epochs=10, warmup=2, lr_schedule="step", lr_step=8), r"--lr-step 8: the first step would come at epoch "
                                                               r"11, after the last of --epochs 10 \(give --lr-step 7"),
    (dict(optimizer="lbfgs"), "optimizer"),
])
def test_options_that_would_be_ignored_are_refused(flags, needle):
    with pytest.raises(GridGnnError, match=needle):
        TrainConfig(data=S, **flags).validate()


def test_a_step_schedule_a_checkpoint_may_continue_to_is_accepted(tmp_path):
    """--lr-step fixes its steps whatever --epochs, so a run that writes checkpoints may be resumed into them: its
    first part is not refused (one epoch after the warm-up, or the step past its last epoch)."""
    for epochs, warmup, step in ((3, 2, 1), (10, 2, 8)):
        TrainConfig(data=S, epochs=epochs, warmup=warmup, lr_schedule="step", lr_step=step, checkpoint_every=1,
                    out=str(tmp_path / "run")).validate()


def test_state_and_memory_per_optimizer():
    assert state_keys("adam", None) == state_keys("adamw", None) == ("exp_avg", "exp_avg_sq")
    assert state_keys("sgd", None) == ("momentum_buffer",) and state_keys("sgd", 0.0) == ()
    assert memory_state(TrainConfig()) == (2, True)
    assert memory_state(TrainConfig(optimizer="sgd", momentum=0.0)) == (0, False)
    from tests.planner._measure import gcn_estimate as estimate_rank_memory

    def params(state):
        est = estimate_rank_memory("serial", (1,), 200, 1000, [16, 8, 4], elem_bytes=4, optimizer_state=state)
        return est.ranks[0].per_component["parameters"]

    elements = 16 * 8 + 8 + 8 * 4 + 4
    assert params((2, True)) - params((1, False)) == 4 * elements + 4 * 4  # a moment less, no step counters


@pytest.mark.parametrize("flags", [
    dict(optimizer="sgd", momentum=0.8, lr_schedule="step", lr_step=2, warmup=1),
    dict(optimizer="sgd", momentum=0.0),  # plain SGD: no state at all
])  # (AdamW: the cosine run below)
def test_a_resumed_run_sets_the_same_rates_and_state(tmp_path, flags):
    """SGD's momentum buffers (plain SGD: none) through a checkpoint, and the rates of epochs 3..5 of a step
    schedule of its own length: the resumed run's records and state equal the uninterrupted run's bit for bit."""
    common = ["train", "--data", S, "--hidden", 8, "--quiet", "--dtype", "float64", "--lr", 0.05,
              "--checkpoint-every", 3]
    for k, v in flags.items():
        common += ["--" + k.replace("_", "-"), v]
    assert run_main([*common, "--epochs", 6, "--out", tmp_path / "ref"]) == 0
    assert run_main([*common, "--epochs", 3, "--out", tmp_path / "ck"]) == 0
    assert run_main(["train", "--resume", tmp_path / "ck", "--epochs", 6, "--quiet", "--out", tmp_path / "res"]) == 0

    def records(run):
        return [{k: v for k, v in json.loads(line).items() if not k.endswith("_s")}
                for line in (tmp_path / run / "metrics.jsonl").read_text().splitlines()]

    ref, res = records("ref"), records("res")
    cfg = TrainConfig(lr=0.05, epochs=6, **flags)
    assert ref == res and [r["lr"] for r in ref] == [rate(cfg, e) for e in range(6)]
    a, b = (torch.load(tmp_path / run / "checkpoint.pt", weights_only=True)["optimizer"] for run in ("ref", "res"))
    keys = state_keys(cfg.optimizer, cfg.momentum)
    assert a["name"] == b["name"] == cfg.optimizer and set(a) - {"name", "step"} == set(keys)
    assert "step" not in a and bool(keys) == (cfg.momentum != 0.0)
    for key in keys:
        for name in a[key]:
            for x, y in zip(a[key][name], b[key][name], strict=True):
                assert x.numpy().tobytes() == y.numpy().tobytes()


@pytest.mark.parametrize("optimizer", ["adam", "adamw"])
def test_on_a_device_adam_is_fused_and_updates_as_the_host_does(optimizer, monkeypatch):
    """On a device (here the host taking its paths) Adam and AdamW are torch's fused kernels, with their step
    counters on the parameters' device; five updates with weight decay equal the host's unfused ones (float64,
    1e-13: the same arithmetic, in another order); SGD and the host itself are unchanged."""
    from gridgnn.ops import device_paths
    from gridgnn.train.optim import make_optimizer

    def trained(host_paths: bool):
        monkeypatch.setenv(device_paths.ENV, device_paths.HOST if host_paths else "")
        g = torch.Generator().manual_seed(0)
        params = [torch.nn.Parameter(torch.randn(shape, generator=g, dtype=torch.float64))
                  for shape in [(6, 5), (5,), (0, 3), (5, 2)]]  # (an empty shard, as a rank of Plexus may hold)
        opt = make_optimizer(TrainConfig(optimizer=optimizer, lr=0.05, weight_decay=0.01), params)
        for _ in range(5):
            for p in params:
                p.grad = torch.randn(p.shape, generator=g, dtype=torch.float64)
            opt.step()
        return params, opt

    host, host_opt = trained(False)
    device, device_opt = trained(True)
    assert device_opt.defaults["fused"] and not host_opt.defaults["fused"]
    assert all(device_opt.state[p]["step"].device == p.device and float(device_opt.state[p]["step"]) == 5
               for p in device)
    for p, q in zip(device, host):
        torch.testing.assert_close(p, q, rtol=1e-13, atol=0)
    assert not make_optimizer(TrainConfig(optimizer="sgd"), device).defaults.get("fused")


def test_a_fused_optimizer_resumes_with_a_step_counter_of_its_own_on_its_device(tmp_path, monkeypatch):
    """``restore`` into a fused AdamW (the host taking a device's paths): every parameter gets its own copy of the
    checkpoint's step counter, in float32 on the parameter's device, as a fused update reads it — a checkpoint's
    counter saved in float64 included."""
    import gridgnn
    from gridgnn.graph import gcn_normalize
    from gridgnn.graph.spec import load_graph
    from gridgnn.ops import device_paths
    from gridgnn.parallel.blockrow import build_serial
    from gridgnn.train.checkpoint import read_checkpoint, restore
    from gridgnn.train.optim import make_optimizer
    from gridgnn.train.rank_setup import build_model

    monkeypatch.setenv(device_paths.ENV, device_paths.HOST)
    cfg = TrainConfig(data=S, hidden=8, dtype="float64", optimizer="adamw", epochs=2, checkpoint_every=2,
                      quiet=True, out=str(tmp_path / "ck"))
    gridgnn.train(cfg)
    ckpt = read_checkpoint(str(tmp_path / "ck"))
    ckpt["optimizer"]["step"] = ckpt["optimizer"]["step"].double()
    g = load_graph(S)
    plan = build_serial(gcn_normalize(g), dtype=torch.float64)
    model = build_model(cfg, ckpt["dims"], plan, torch.float64)
    opt = make_optimizer(cfg, model.parameters())
    restore(model, opt, plan, ckpt, ckpt["dims"])
    steps = [opt.state[p]["step"] for p in model.parameters()]
    assert opt.defaults["fused"] and len(steps) > 1
    assert all(s.dtype == torch.float32 and s.device == p.device and float(s) == 2
               for s, p in zip(steps, model.parameters()))
    assert len({s.data_ptr() for s in steps}) == len(steps)  # each its own: a fused update adds 1 to each


def _stop_after_epoch_2(rec):  # a callback: the run is interrupted after epoch 2 (its checkpoint written)
    if rec["epoch"] == 2:
        raise KeyboardInterrupt


@pytest.mark.parametrize("paths", ["host", "device", pytest.param("cuda", marks=ON_A_GPU)])
def test_a_cosine_run_interrupted_and_resumed_equals_the_uninterrupted_one(tmp_path, capsys, paths, monkeypatch):
    """Ctrl-C in one process: the loop keeps the 3 finished epochs and the summary names the checkpoint; resuming
    it with the same --epochs sets the cosine's rates of epochs 3..5 as the uninterrupted run did (bit for bit),
    and another --epochs is refused, since the cosine spans them — on the host, on a device's paths (the host
    taking them) and on a GPU, where AdamW is fused and the resumed step counters go back to the device."""
    import gridgnn
    from gridgnn.ops import device_paths

    if paths == "device":
        monkeypatch.setenv(device_paths.ENV, device_paths.HOST)
    else:  # (the host's own paths, whatever the environment running the suite sets)
        monkeypatch.delenv(device_paths.ENV, raising=False)

    opts = dict(data=S, hidden=8, dtype="float64", lr=0.05, optimizer="adamw", lr_schedule="cosine", warmup=1,
                epochs=6, checkpoint_every=1, quiet=True, device="cuda" if paths == "cuda" else "cpu")
    gridgnn.train(**opts, out=str(tmp_path / "ref"))
    with pytest.raises(KeyboardInterrupt):
        gridgnn.train(**opts, out=str(tmp_path / "cut"), callbacks=[_stop_after_epoch_2])
    cut = tmp_path / "cut"
    summary = json.loads((cut / "summary.json").read_text())
    assert summary["interrupted"] == "SIGINT" and summary["epochs_trained"] == 3
    assert summary["checkpoint"] == "checkpoint.pt" and not (cut / "model.pt").exists()
    assert sorted(p.name for p in cut.iterdir()) == ["checkpoint.pt", "metrics.csv", "metrics.jsonl", "summary.json"]
    device = ["--device", opts["device"]]  # (a resumed run does not inherit where it ran)
    assert run_main(["train", "--resume", cut, "--epochs", 8, "--quiet", "--out", tmp_path / "x", *device]) == 2
    assert "--lr-schedule cosine spreads its rates over the run's epochs" in capsys.readouterr().err
    assert run_main(["train", "--resume", cut, "--quiet", *device]) == 0  # into its own folder, its --epochs 6

    def records(run):
        return [{k: v for k, v in json.loads(line).items() if not k.endswith("_s")}
                for line in (tmp_path / run / "metrics.jsonl").read_text().splitlines()]

    ref, res = records("ref"), records("cut")
    assert ref == res and [r["lr"] for r in ref] == [rate(TrainConfig(**opts), e) for e in range(6)]
    a, b = (torch.load(tmp_path / run / "checkpoint.pt", weights_only=True)["optimizer"] for run in ("ref", "cut"))
    assert a["name"] == "adamw" and float(a["step"]) == float(b["step"]) == 6
    for key in ("exp_avg", "exp_avg_sq"):
        for x, y in zip(a[key]["weights"], b[key]["weights"], strict=True):
            assert x.numpy().tobytes() == y.numpy().tobytes()


def test_a_checkpoint_written_before_optimizer_choices_resumes(tmp_path):
    """Format 1 held Adam's state under "adam" and no optimizer fields in its config: read as Adam's."""
    common = ["train", "--data", S, "--hidden", 8, "--quiet", "--dtype", "float64", "--checkpoint-every", 2]
    assert run_main([*common, "--epochs", 4, "--out", tmp_path / "ref"]) == 0
    assert run_main([*common, "--epochs", 2, "--out", tmp_path / "old"]) == 0
    path = tmp_path / "old" / "checkpoint.pt"
    ck = torch.load(path, weights_only=True)
    state = ck.pop("optimizer")
    assert state.pop("name") == "adam"
    ck["adam"], ck["format_version"] = state, 1
    for key in ("optimizer", "momentum", "lr_schedule", "warmup", "lr_step", "lr_gamma"):
        del ck["config"][key]
    torch.save(ck, path)
    assert run_main(["train", "--resume", tmp_path / "old", "--epochs", 4, "--quiet", "--out", tmp_path / "res"]) == 0
    ref, res = ([json.loads(line)["loss"] for line in (tmp_path / r / "metrics.jsonl").read_text().splitlines()]
                for r in ("ref", "res"))
    assert ref == res


def test_what_a_resumed_run_may_change_of_the_schedule(tmp_path):
    """--epochs may grow under a step schedule of its own length, not under a default-length one; the optimizer's
    defaults compare equal to their values (momentum 0.9, lr-gamma 0.1)."""
    from gridgnn.train.checkpoint import resume_base

    (tmp_path / "checkpoint.pt").write_bytes(b"x")
    sgd = {"config": {"optimizer": "sgd", "momentum": None, "lr_schedule": "step", "lr_step": 2, "epochs": 6}}
    assert resume_base(sgd, {"epochs": 9, "momentum": 0.9, "lr_gamma": 0.1}, str(tmp_path))["lr_step"] == 2
    with pytest.raises(GridGnnError, match="--momentum 0.5 differs from the checkpoint's None"):
        resume_base(sgd, {"momentum": 0.5}, str(tmp_path))
    default_step = {"config": {"lr_schedule": "step", "epochs": 6}}
    with pytest.raises(GridGnnError, match="--lr-schedule step spreads its rates over the run's epochs"):
        resume_base(default_step, {"epochs": 9}, str(tmp_path))
    assert resume_base(default_step, {"epochs": 6}, str(tmp_path))["epochs"] == 6
