"""Property-based: random values for every training option — in and out of their declared ranges, of the wrong
type, in Python (TrainConfig), as flags (gridgnn train's parser) and in a TOML --config file — are either a valid
config (and a cheap one trains a tiny graph for one epoch) or refused before anything starts with one GridGnnError
(flags: one `gridgnn: error:` line, exit 2); never another exception, never a hang."""
import math
from dataclasses import MISSING, fields

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gridgnn
from gridgnn.cli import build_parser, train_config
from gridgnn.errors import GridGnnError
from gridgnn.train.config import TrainConfig, field_range, flag, read_config_file
from gridgnn.train.invocation import config_from_flags

TINY = "synthetic:sbm?n=60&classes=3&avg_degree=4&features=6"
#: fields left at their defaults: they name files and folders (the loaders' own fuzz tests cover those), or the device
FIXED = ("data", "out", "resume", "profile", "device", "overwrite", "quiet", "log_every")
WORDS = st.sampled_from(["", "x", "-1", "1e400", "nan", "mean", "gat", "1d", "plexus", "2,2", "sage", "ladies", "l2",
                         "float64", "random", "double-perm", "15,10", "a,b", "0,0", "auto", "serial"])
BAD = st.one_of(st.none(), st.booleans(), WORDS, st.lists(st.integers(-3, 9), max_size=3),
                st.floats(allow_nan=True, allow_infinity=True))


def _value(f):
    """A value for field ``f``: mostly plausible (its choices, its range and just outside it), sometimes anything."""
    spec, choices = field_range(f), f.metadata.get("choices")
    plausible = []
    if choices:
        plausible.append(st.sampled_from(list(choices)))
    if spec is not None:
        lo = spec.low if spec.low is not None else -10
        hi = spec.high if spec.high is not None else lo + 64
        if spec.kind is int:
            plausible.append(st.integers(int(lo) - 2, int(min(hi, lo + 64)) + 2))
            plausible.append(st.sampled_from([int(lo), int(hi), int(hi) + 1, -(2 ** 70), 2 ** 70, 10 ** 400]))
        else:
            plausible.append(st.floats(lo - 1, min(hi, lo + 10) + 1, allow_nan=False))
    if f.name in ("model",):
        plausible.append(st.sampled_from(["gcn", "gat", "agnn", "va", "sage", "rgcn", "nope", "pkg.mod:Cls"]))
    if f.name in ("algo",):
        plausible.append(st.sampled_from(["serial", "1d", "1d-sa", "1.5d", "2d", "3d", "plexus", "auto", "nope"]))
    if f.name in ("grid", "fanout", "eval_fanout"):
        plausible.append(st.one_of(WORDS, st.lists(st.integers(-2, 6), min_size=1, max_size=3)))
    if "bool" in str(f.type):
        plausible.append(st.booleans())
    if f.name in ("bases", "relations"):  # options of one model (rgcn): most often not given
        plausible.append(st.none())
    return st.one_of(*plausible, BAD) if plausible else BAD


FIELDS = [f for f in fields(TrainConfig) if f.name not in FIXED]
CONFIGS = st.fixed_dictionaries({}, optional={f.name: _value(f) for f in FIELDS})


def _cheap(cfg: TrainConfig) -> bool:
    return (cfg.algo == "serial" and cfg.sampler is None and cfg.nproc == 1 and cfg.hidden * max(cfg.heads or 1, 1)
            <= 64 and cfg.layers <= 4 and cfg.epochs >= 1 and (cfg.embedding_dim or 0) <= 64
            and cfg.model_negatives <= 64)


def _validated(kw: dict):
    """The config of ``kw`` as the CLI and Python resolve it, or ``None`` when refused with a GridGnnError."""
    try:
        return config_from_flags(dict(kw, data=TINY, quiet=True))
    except GridGnnError:
        return None


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kw=CONFIGS)
def test_python_options_are_a_config_or_one_error(kw):
    cfg = _validated(kw)
    if cfg is not None and _cheap(cfg):
        try:
            summary = gridgnn.train(cfg, epochs=1)  # a valid, cheap config trains...
        except GridGnnError as exc:  # ...or is refused at run time with one line (e.g. a huge --lr diverges)
            assert "\n" not in str(exc)
        else:
            assert summary["epochs_trained"] == 1 and math.isfinite(summary["final_loss"])


def _argv(kw: dict) -> list[str]:
    argv = []
    for name, value in kw.items():
        if isinstance(value, bool):
            if value:
                argv.append(flag(name))
            continue
        if value is None:
            continue
        argv += [flag(name), ",".join(map(str, value)) if isinstance(value, list) else str(value)]
    return argv


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kw=CONFIGS)
def test_flags_are_a_config_or_one_error_line(kw, capsys):
    parser = build_parser()
    try:
        args = parser.parse_args(["train", "--data", TINY, *_argv(kw)])
        train_config(args)
    except SystemExit as exc:  # argparse: a value of the wrong type, one line
        assert exc.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("gridgnn: error: "), err
    except GridGnnError:
        pass


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kw=CONFIGS, sectioned=st.booleans())
def test_toml_files_are_a_config_or_one_error(kw, sectioned, tmp_path):
    """The options at the top level, or each in the table of its section (``[optimizer]`` ...)."""
    lines, tables = [], {}
    for name, value in kw.items():
        if value is None:
            continue
        if isinstance(value, float) and not math.isfinite(value):
            text = "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
        elif isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, str):
            text = '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
        elif isinstance(value, list):
            text = "[" + ", ".join(map(str, value)) + "]"
        else:
            text = str(value)
        if sectioned:
            tables.setdefault(SECTION_OF[name], []).append(f"{name} = {text}")
        else:
            lines.append(f"{name} = {text}")
    for section, rows in tables.items():
        lines += [f"[{section}]", *rows]
    path = tmp_path / "run.toml"
    path.write_text("\n".join(lines) + "\n")
    try:
        config_from_flags(dict(read_config_file(str(path)), data=TINY))
    except GridGnnError:
        pass


SECTION_OF = {f.name: f.metadata["section"] for f in fields(TrainConfig)}


def test_the_generator_reaches_both_outcomes():
    """Not a vacuous property: the options are valid often and refused often. (Each field the config gains is one
    more chance of a refused value: the example count grows with the fields.)"""
    outcomes = {True: 0, False: 0}

    @settings(max_examples=400, deadline=None, database=None, derandomize=True)
    @given(kw=CONFIGS)
    def count(kw):
        outcomes[_validated(kw) is not None] += 1

    count()
    assert outcomes[True] >= 8 and outcomes[False] >= 40, outcomes


@pytest.mark.parametrize("f", [f for f in FIELDS if f.default is not MISSING], ids=lambda f: f.name)
def test_each_default_is_valid(f):
    assert _validated({f.name: f.default}) is not None
