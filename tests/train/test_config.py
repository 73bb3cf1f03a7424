"""Bad `gridgnn train` flags: exit status 2, exactly one `gridgnn: error:` line naming the value, no traceback,
and nothing created (the checks run before any data is loaded, in this process)."""
import pytest

from gridgnn.errors import GridGnnError
from gridgnn.train.config import MAX_HIDDEN, SEED_LIMIT

from ._runs import run_main

SBM = "synthetic:sbm?n=200&classes=4&avg_degree=6&features=8"

BAD = [
    (["--lr", "nan"], "--lr must be in (0, 1e+06], got nan"),
    (["--lr", "inf"], "got inf"),
    (["--lr", "-0.1"], "got -0.1"),
    (["--lr", "1e38"], "got 1e+38"),
    (["--weight-decay", "nan"], "--weight-decay must be in [0, 1e+06], got nan"),
    (["--weight-decay", "-1"], "got -1"),
    (["--dropout", "nan"], "--dropout must be in [0, 1), got nan"),
    (["--dropout", "1"], "got 1.0"),
    (["--timeout", "nan"], "--timeout must be in (0, 2.592e+06] seconds, got nan"),
    (["--timeout", "inf"], "got inf"),
    (["--timeout", "0"], "got 0.0"),
    (["--seed", "99999999999999999999"], f"--seed must be in [0, {SEED_LIMIT - 1}], got 99999999999999999999"),
    (["--seed", str(SEED_LIMIT)], f"got {SEED_LIMIT}"),
    (["--seed", "-1"], "got -1"),
    (["--hidden", "1e11"], "argument --hidden: invalid int value: '1e11'"),
    (["--hidden", str(MAX_HIDDEN + 1)], f"--hidden must be in [1, {MAX_HIDDEN}], got {MAX_HIDDEN + 1}"),
    (["--hidden", "0"], "got 0"),
    (["--layers", "100000"], "--layers must be in [1, 1024], got 100000"),
    (["--epochs", "0"], "--epochs must be in [1, 100000000], got 0"),
    (["--epochs", str(10**12)], f"got {10**12}"),
    (["--log-every", "-1"], "--log-every must be in [0, 100000000], got -1"),
    (["--checkpoint-every", "-2"], "--checkpoint-every must be in [0, 100000000], got -2"),
    (["--lr", "abc"], "argument --lr: invalid float value: 'abc'"),
    (["--algo", "4d"], "--algo '4d' is not available; choose one of serial, 1d"),
    # bounds of the sampling options (an unbounded --bulk looped for ever; a huge fanout overflowed the sampler)
    (["--model", "sage", "--sampler", "sage", "--bulk", "100000000"], "--bulk must be in [1, 4096], got 100000000"),
    (["--model", "sage", "--sampler", "sage", "--fanout", "1e20"], "--fanout '1e20' must be integers"),
    (["--model", "sage", "--sampler", "sage", "--fanout", str(2**62)], "needs one size in [1, 1048576]"),
    (["--model", "sage", "--sampler", "ladies", "--eval-fanout", f"5,{10**20}"], "--eval-fanout"),
    (["--model", "sage", "--sampler", "sage", "--layers", "3", "--fanout", "10,,5"], "must be integers separated"),
    (["--model", "sage", "--sampler", "sage", "--fanout", "7,"], "--fanout '7,' must be integers"),  # (was 7,7)
    # --partition where nothing reads it (it was ignored, an unknown method too)
    (["--partition", "bogus"], "--partition bogus orders the vertices of several processes' blocks; --algo serial"),
    (["--algo", "edge", "--nproc", "2", "--partition", "metis"], "--partition metis cuts the vertices into row "
                                                                 "blocks; --algo edge on --nproc 2 has one"),
    (["--algo", "1.5d", "--nproc", "2", "--replication", "2", "--partition", "hypergraph"],
     "--algo 1.5d on --nproc 2 --replication 2 has one"),  # (the partitioner ran, and its parts were one)
    (["--model", "sage", "--sampler", "sage", "--partition", "metis"], "--partition metis applies to full-graph"),
    # flags that shaped nothing (accepted, ignored, and recorded in the summary as if they had)
    (["--layers", "1", "--hidden", "32"], "--hidden 32 sets the hidden layers' width; --layers 1 has none"),
    (["--model", "gat", "--layers", "1", "--heads", "4"], "--heads 4 sets the hidden layers' heads"),
    (["--algo", "1d", "--nproc", "1", "--overlap"], "--overlap hides the transfers between processes"),
    (["--task", "link", "--link-split", "0.9,0,0.1", "--early-stop", "1"], "--early-stop 1 watches the validation"),
]


@pytest.mark.parametrize("flags,message", BAD, ids=[" ".join(f) for f, _ in BAD])
def test_bad_flag_is_one_line_and_creates_nothing(tmp_path, capsys, flags, message):
    out = tmp_path / "new" / "run"
    code = run_main(["train", "--data", SBM, "--epochs", 2, "--quiet", "--out", out, *flags]
                    if "--epochs" not in flags else ["train", "--data", SBM, "--quiet", "--out", out, *flags])
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("gridgnn: error: "), err
    assert message in lines[0], err
    assert not (tmp_path / "new").exists()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("flags,message", [
    (["--checkpoint-every", "2"], "--checkpoint-every 2 needs --out DIR"),
    (["--overwrite"], "--overwrite applies to the outputs in --out"),
    (["--save-logits"], "--save-logits writes OUT/logits.npy; give --out DIR"),  # (it wrote nothing, silently)
    (["--keep", "last"], "--keep last chooses the parameters the run hands on"),  # (the line reports the best)
])
def test_flags_that_need_out(capsys, flags, message):
    code = run_main(["train", "--data", SBM, "--epochs", 2, "--quiet", *flags])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and message in err, err


def test_largest_seed_trains(tmp_path, capsys):
    """2**63 - 1 is accepted and usable end to end (initial weights, dropout keys, the synthetic graph)."""
    code = run_main(["train", "--data", SBM, "--epochs", 2, "--quiet", "--seed", SEED_LIMIT - 1,
                     "--out", tmp_path / "run"])
    assert code == 0, capsys.readouterr().err
    assert (tmp_path / "run" / "summary.json").exists()


def test_every_numeric_flag_declares_its_range_and_help_shows_it():
    """One declaration per field: --help shows the range the config checks (model options: the model's Option)."""
    import argparse
    from dataclasses import fields

    from gridgnn.cli import build_parser
    from gridgnn.train.config import TrainConfig, field_range, flag

    train = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices["train"]
    helps = {a.option_strings[0]: a.help for a in train._actions if a.option_strings}
    numeric = [f for f in fields(TrainConfig) if "int" in str(f.type) or "float" in str(f.type)]
    assert len(numeric) >= 15
    for f in numeric:
        spec = field_range(f)
        if f.name in ("heads", "attn_dropout", "bases"):  # declared by the models that take them
            assert "[1, 1024]" in helps["--heads"] and "[0, 1)" in helps["--attn-dropout"]
            assert "[0, 4096]" in helps["--bases"]
            continue
        assert spec is not None, f.name
        assert spec.bound_text() in helps[flag(f.name)], (f.name, helps[flag(f.name)])
        with pytest.raises(GridGnnError, match=f"{flag(f.name)} must be"):  # and the config checks that range
            spec.check(flag(f.name), (spec.low - 1) if spec.low is not None else spec.high * 2)


def test_the_link_task_has_defaults_of_its_own_and_a_given_value_wins():
    """--task link takes PyG's link_pred.py setup for the fields it leaves out (declared per field, shown in
    --help); a value given — even the node task's default — wins; the node task is unchanged."""
    from gridgnn.train.config import task_defaults
    from gridgnn.train.invocation import config_from_flags

    link = config_from_flags({"task": "link"})
    assert (link.hidden, link.embedding_dim, link.dropout, link.weight_decay, link.epochs) == (128, 64, 0.0, 0.0, 100)
    assert task_defaults("link") == {"hidden": 128, "embedding_dim": 64, "epochs": 100, "weight_decay": 0.0,
                                     "dropout": 0.0}
    given = config_from_flags({"task": "link", "dropout": 0.5, "hidden": 16})
    assert (given.dropout, given.hidden, given.weight_decay) == (0.5, 16, 0.0)
    assert given.model_embedding_dim == 16  # --hidden given: the embeddings are as wide (the 64 goes with 128)
    node = config_from_flags({})
    assert (node.hidden, node.dropout, node.weight_decay, node.epochs) == (16, 0.5, 5e-4, 200)
    import gridgnn.train.api as api

    assert api.Trainer(task="link", dropout=0.5).resolved_config().dropout == 0.5  # a keyword given insists
    assert api.Trainer(task="link").resolved_config().dropout == 0.0


# ------------------------------------------------------------------------------------------------ field roles
#: a value other than the default for each field (what the role tests change it to)
_OTHER = {"data": "synthetic:sbm?n=60", "model": "gat", "heads": 2, "attn_dropout": 0.25, "aggr": "max", "bases": 2,
          "edge_dim": 3, "relations": 2, "task": "link", "link_split": "0.8,0.1,0.1", "decoder": "mlp",
          "algo": "1d", "profile": "local-cpu", "grid": "2,2", "partition": "identity", "fanout": "5,5",
          "eval_fanout": "5", "sampler": "sage", "sample_graph": "partitioned", "out": "elsewhere",
          "resume": "elsewhere", "comm_dtype": "bfloat16", "grad_dtype": "bfloat16", "lr_schedule": "step",
          "optimizer": "sgd", "dtype": "float64", "keep": "last", "log": "tensorboard", "feature_norm": "row",
          "device": "cpu"}


def _other(f):
    from dataclasses import MISSING

    if f.name in _OTHER:
        return _OTHER[f.name]
    d = f.default if f.default is not MISSING else None
    if isinstance(d, bool):
        return not d
    if f.metadata.get("choices"):
        return next(c for c in f.metadata["choices"] if c != d)
    if "float" in str(f.type):
        return 0.25 if d is None else d / 2
    return 3 if d is None else d + 1


def test_every_config_field_declares_a_role():
    """What a field is to the run is declared with it (:data:`ROLES`): a field added without one fails here, and
    the rules of resume, rerun and inference read nothing else."""
    from dataclasses import fields

    from gridgnn.train.config import ROLES, TrainConfig

    missing = [f.name for f in fields(TrainConfig) if f.metadata.get("role") not in ROLES]
    assert not missing, f"config fields without a role: {missing}"


def test_each_role_decides_what_a_resumed_run_rerun_or_inference_takes(tmp_path):
    """For every field, changed from its default in a saved config: a resumed run keeps a ``model``/``trajectory``
    field (a different value given is refused, naming the flag), takes a ``layout`` field unless ``--algo``
    changes, takes a ``run``/``display`` field unless given, never takes an ``invocation`` field; a rerun from a
    summary drops ``invocation`` and ``display`` fields; inference takes the ``model`` fields and the seed."""
    import json
    from dataclasses import fields

    from gridgnn.errors import GridGnnError
    from gridgnn.train.checkpoint import resume_base
    from gridgnn.train.config import TrainConfig, flag, read_config_file
    from gridgnn.train.trained import TrainedModel

    (tmp_path / "checkpoint.pt").write_bytes(b"")  # resume_base reads the path only
    resume = str(tmp_path)
    defaults = TrainConfig().to_dict()
    for f in fields(TrainConfig):
        role, name, value = f.metadata["role"], f.name, _other(f)
        saved = {**defaults, "algo": "1d", name: value}
        if role == "link":
            saved["task"] = "link"
        base = resume_base({"config": saved}, {}, resume)
        if role == "invocation":
            assert name not in base or (name == "out" and base[name] == resume), name
        else:
            assert base[name] == value, (name, role)
        if role in ("model", "trajectory", "link"):
            other = defaults[name] if defaults[name] != value else _other(f)
            with pytest.raises(GridGnnError, match=flag(name)):
                resume_base({"config": saved}, {name: other}, resume)
        if role == "layout":
            assert name not in resume_base({"config": saved}, {"algo": "2d"}, resume), name
        if role in ("run", "display"):
            assert "algo" in base and base[name] == value
        # a rerun from a summary.json
        (tmp_path / "summary.json").write_text(json.dumps({"config": {name: value}, "data": None}))
        rerun = read_config_file(tmp_path / "summary.json")
        assert (name in rerun) == (role not in ("invocation", "display")), (name, role)
        # inference of a model trained with it (which runs quiet whatever the training did)
        cfg = TrainedModel({**defaults, name: value}, [4, 3], {})._train_config()
        if name != "quiet":  # (every field of the model; of the others those declared so: the seed, the order)
            assert (getattr(cfg, name) == value) == (role == "model" or name in ("seed", "layer_order")), (name, role)


def test_a_resumed_run_compares_its_data_spec_as_parsed(tmp_path):
    """The same SPEC written with its parameters in another order is the checkpoint's data; other values are not."""
    from gridgnn.errors import GridGnnError
    from gridgnn.train.checkpoint import resume_base

    (tmp_path / "checkpoint.pt").write_bytes(b"")
    saved = {"data": "synthetic:sbm?n=200&features=8"}
    assert resume_base({"config": saved}, {"data": " synthetic:sbm?features=8&n=200"}, str(tmp_path))
    for other in ("synthetic:sbm?n=201&features=8", "synthetic:sbm?n=200", "synthetic:rmat?scale=8"):
        with pytest.raises(GridGnnError, match="--data .* differs from the checkpoint's"):
            resume_base({"config": saved}, {"data": other}, str(tmp_path))


def test_section_options_hold_every_field_once_and_build_the_same_config():
    """The section classes are made from the fields' declarations: every field is in exactly one of them (a field
    added to TrainConfig lands in its section with nothing restated), a config built from sections equals the flat
    one, its sections() give the same objects back, and a value given twice (or a section twice) is refused."""
    import dataclasses

    from gridgnn import TrainConfig
    from gridgnn.train.config import SECTION_CLASSES, DataOptions, OptimizerOptions, RunOptions

    names = [f.name for c in SECTION_CLASSES.values() for f in dataclasses.fields(c)]
    assert sorted(names) == sorted(f.name for f in dataclasses.fields(TrainConfig)) and len(set(names)) == len(names)
    for key, cls in SECTION_CLASSES.items():
        for f in dataclasses.fields(cls):
            assert f.metadata["section"] == key and f.default == TrainConfig.__dataclass_fields__[f.name].default
    cfg = TrainConfig.from_sections(DataOptions(model="gat", hidden=24), OptimizerOptions(lr=0.05, epochs=7),
                                    quiet=True, algo="1d", nproc=2)
    assert cfg == TrainConfig(model="gat", hidden=24, lr=0.05, epochs=7, quiet=True, algo="1d", nproc=2)
    secs = cfg.sections()
    assert list(secs) == list(SECTION_CLASSES) and secs["optimizer"] == OptimizerOptions(lr=0.05, epochs=7)
    assert TrainConfig.from_sections(*secs.values()) == cfg
    with pytest.raises(GridGnnError, match="lr is given twice: in OptimizerOptions and as an option"):
        TrainConfig.from_sections(OptimizerOptions(lr=0.05), lr=0.1)
    with pytest.raises(GridGnnError, match="RunOptions section is given twice"):
        TrainConfig.from_sections(RunOptions(quiet=True), RunOptions())
    with pytest.raises(GridGnnError, match="takes section options"):
        TrainConfig.from_sections({"lr": 0.1})
    with pytest.raises(GridGnnError, match="unknown training option"):
        TrainConfig.from_sections(RunOptions(quiet=True), learning_rate=0.1)
    with pytest.raises(TypeError, match="OptimizerOptions.*hidden"):
        OptimizerOptions(hidden=3)  # a field of another section


@pytest.mark.parametrize("argv,message", [
    (["--method", "identity", "--parts", "4"], "--parts applies to the partition methods (random, metis"),
    (["--method", "double-perm", "--blocks", "2x2", "--imbalance", "0.5"], "--imbalance applies to the partition"),
    (["--method", "metis", "--parts", "4", "--blocks", "2x2"], "--blocks applies to the permutation methods"),
    (["--method", "random", "--parts", "2", "--imbalance", "0.1"], "--imbalance applies to the methods that balance"),
])
def test_partition_refuses_a_flag_its_method_would_ignore(capsys, argv, message):
    assert run_main(["partition", "--data", SBM, *argv]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], lines


def test_a_toml_file_is_read_as_its_flags(tmp_path, capsys):
    """Keys of a TOML file count as the flags they stand for: the drops of a rerun from a run's summary (the profile
    of an --algo auto run, the edge width a run derived) do not apply to them, so they are checked, not lost."""
    (tmp_path / "prof.toml").write_text('profile = "perlmutter-a100"\n')
    (tmp_path / "ed.toml").write_text("edge_dim = 8\n")
    assert run_main(["train", "--config", tmp_path / "prof.toml", "--data", SBM, "--epochs", 1, "--quiet"]) == 2
    assert run_main(["train", "--config", tmp_path / "ed.toml", "--model", "gine", "--data",
                     f"{SBM}&edge_features=4", "--epochs", 1, "--quiet"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2 and "--profile applies to --algo auto" in lines[0], lines
    assert "built for edge features 8 wide; the graph's are 4 wide" in lines[1], lines


def test_numpy_values_are_the_python_values_they_hold():
    import numpy as np

    from gridgnn import TrainConfig
    from gridgnn.train.api import Trainer
    from gridgnn.train.config import SamplingOptions

    want = TrainConfig(model="sage", sampler="sage", fanout="5,5", hidden=8)
    assert TrainConfig(model="sage", sampler="sage", fanout=np.array([5, 5]), hidden=np.int64(8)) == want
    assert TrainConfig.from_sections(SamplingOptions(sampler="sage", fanout=np.array([5, 5])), model="sage",
                                     hidden=8) == want
    cfg = Trainer(data=SBM, model="sage", sampler="sage", fanout=np.array([5, 5])).resolved_config()
    assert cfg.fanout == "5,5" and type(cfg.hidden) is int


def test_a_resume_on_another_algorithm_drops_how_the_old_one_communicated(tmp_path):
    """--overlap and --comm-dtype belong to the old algorithm's layout (a serial resume of such a run was refused
    with no way to unset them); a value the checkpoint gave that the new run refuses is named as the checkpoint's."""
    import json

    from ._runs import cli_batch, run_stderr

    ov, mb = tmp_path / "ov", tmp_path / "mb"
    r, codes = cli_batch([
        ["train", "--data", SBM, "--algo", "1d", "--nproc", 2, "--overlap", "--comm-dtype", "bfloat16", "--epochs", 1,
         "--checkpoint-every", 1, "--out", ov, "--quiet"],
        ["train", "--resume", ov, "--algo", "serial", "--epochs", 2, "--out", tmp_path / "ov-serial", "--quiet"],
        ["train", "--data", SBM, "--model", "sage", "--sampler", "sage", "--epochs", 1, "--checkpoint-every", 1,
         "--out", mb, "--quiet"],
        ["train", "--resume", mb, "--algo", "1d", "--nproc", 2, "--epochs", 2, "--out", tmp_path / "mb-1d",
         "--quiet"],
        # the same algorithm: a switch the checkpoint turned on is turned off by --no-X
        ["train", "--resume", ov, "--no-overlap", "--epochs", 2, "--out", tmp_path / "ov-off", "--quiet"]],
        segmented=True)
    assert codes == [0, 0, 0, 2, 0], r.stderr[-3000:]
    config = json.loads((tmp_path / "ov-serial" / "summary.json").read_text())["config"]
    assert config["algo"] == "serial" and not config["overlap"] and config["comm_dtype"] is None
    config = json.loads((tmp_path / "ov-off" / "summary.json").read_text())["config"]
    assert config["algo"] == "1d" and not config["overlap"] and config["comm_dtype"] == "bfloat16"
    err = run_stderr(r, 3).strip().splitlines()
    assert len(err) == 1 and err[0].endswith(f"(--sampler 'sage' came from the checkpoint of --resume {mb})"), err


def test_a_value_recorded_or_inherited_is_no_request(tmp_path):
    """The refusals of flags that shape nothing (--hidden with --layers 1, --save-logits without --out, ...) read
    what is given: a summary records the run's resolved --hidden, which its rerun with --layers 1 takes."""
    import json

    out = tmp_path / "l1"
    assert run_main(["train", "--data", SBM, "--epochs", 1, "--layers", 1, "--save-logits", "--quiet",
                     "--out", out]) == 0
    assert json.loads((out / "summary.json").read_text())["config"]["hidden"] == 16
    assert run_main(["train", "--config", out / "summary.json", "--quiet", "--out", tmp_path / "again"]) == 0


def test_a_recorded_keep_last_is_no_request(tmp_path, capsys):
    """--keep last without --out is refused on the command line; a summary that recorded it (a run with --out)
    reruns without --out, as any recorded value does."""
    out = tmp_path / "last"
    assert run_main(["train", "--data", SBM, "--epochs", 1, "--keep", "last", "--quiet", "--out", out]) == 0
    assert run_main(["train", "--config", out / "summary.json", "--quiet"]) == 0, capsys.readouterr().err
    assert run_main(["train", "--config", out / "summary.json", "--keep", "last", "--quiet"]) == 2
    assert "--keep last chooses the parameters" in capsys.readouterr().err
