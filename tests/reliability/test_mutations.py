"""Saved files, mutated (issue 42): ``model.pt``, ``checkpoint.pt``, ``summary.json``, a pair file, a shard block and
``meta.json`` — flipped bytes, truncation, changed dtypes and shapes, NaN and inf, swapped or dropped members,
wrong-typed values. Each mutation is refused with one :class:`GridGnnError` line, or gives exactly the unmutated
result: never silent, never another exception, never a hang (each example under an alarm).

The consumers run in this process: ``gridgnn.load`` + serial ``predict`` (model.pt, summary.json), the resume
check of ``gridgnn train --resume`` and the resumed model's logits (checkpoint.pt), ``read_pairs`` (pairs) and a
:class:`ShardedDataset` reading every block and node array (shards)."""
import contextlib
import json
import os
import shutil
import signal
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gridgnn
from gridgnn.errors import GridGnnError
from gridgnn.graph.saved import read_pairs
from gridgnn.graph.sharded import ShardedDataset

from ..train._runs import run_main

S = "synthetic:sbm?n=120&classes=3&avg_degree=6&features=6"
SETTINGS = settings(max_examples=25, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@contextlib.contextmanager
def alarm(seconds: int = 60):
    def fail(signum, frame):  # noqa: ARG001
        raise AssertionError(f"a mutated file kept a reader busy for more than {seconds} s")

    old = signal.signal(signal.SIGALRM, fail)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def refused_or_same(consume, reference):
    """``consume()`` raises one-line GridGnnError, or returns what ``reference`` is (bit for bit)."""
    with alarm():
        try:
            got = consume()
        except GridGnnError as exc:
            assert "\n" not in str(exc) and str(exc), repr(str(exc))
            return "refused"
    if isinstance(reference, dict):
        assert got.keys() == reference.keys()
        for k in reference:
            np.testing.assert_array_equal(got[k], reference[k], err_msg=k)
    else:
        np.testing.assert_array_equal(got, reference)
    return "same"


# ---------------------------------------------------------------------------------------------- mutations
def flip(data: bytes, positions, masks) -> bytes:
    b = bytearray(data)
    for p, m in zip(positions, masks):
        b[p % len(b)] ^= m
    return bytes(b)


byte_mutation = st.one_of(
    st.tuples(st.just("flip"), st.lists(st.integers(0, 1 << 30), min_size=1, max_size=4),
              st.lists(st.integers(1, 255), min_size=4, max_size=4)),
    st.tuples(st.just("truncate"), st.floats(0.0, 0.999), st.just(None)),
)


def mutate_bytes(path, mutation) -> None:
    kind, a, b = mutation
    data = open(path, "rb").read()
    data = flip(data, a, b) if kind == "flip" else data[:int(len(data) * a)]
    with open(path, "wb") as fh:
        fh.write(data)


def _tensors(obj, out, path=""):
    if isinstance(obj, torch.Tensor):
        out.append(path)
    elif isinstance(obj, dict):
        for k, v in obj.items():
            _tensors(v, out, f"{path}/{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            _tensors(v, out, f"{path}/{i}")
    return out


def _get(obj, path):
    *head, last = [p for p in path.split("/") if p]
    for p in head:
        obj = obj[int(p)] if isinstance(obj, list) else obj[p]
    return obj, (int(last) if isinstance(obj, list) else last)


TENSOR_CHANGES = ("nan", "inf", "float16", "int64", "transpose", "extra-row", "sparse", "meta", "scalar", "drop")
VALUE_CHANGES = ("none", "string", "negative", "huge", "list", "nested", "nan")


def mutate_torch(path, which: int, change: str) -> None:
    obj = torch.load(path, weights_only=True)
    found = _tensors(obj, [])
    holder, key = _get(obj, found[which % len(found)])
    t = holder[key]
    if change in ("nan", "inf"):
        t = t.clone().double() if not t.is_floating_point() else t.clone()
        t.view(-1)[0] = float(change)
    elif change == "float16":
        t = t.half()
    elif change == "int64":
        t = t.long()
    elif change == "transpose":
        t = t.t() if t.dim() == 2 else t.unsqueeze(0)
    elif change == "extra-row":
        t = torch.cat([t, t[:1]]) if t.dim() else t.reshape(1)
    elif change == "sparse":
        t = t.to_sparse()
    elif change == "meta":
        t = torch.empty(t.shape, dtype=t.dtype, device="meta")
    elif change == "scalar":
        t = t.reshape(-1)[:1].reshape(())
    if change == "drop":
        del holder[key]
    else:
        holder[key] = t
    torch.save(obj, path)


def mutate_value(doc: dict, which: int, change: str) -> None:
    """Change one value of a dict (and its nested dicts)."""
    keys = []

    def walk(d, path):
        for k, v in d.items():
            keys.append(path + [k])
            if isinstance(v, dict) and len(path) < 2:
                walk(v, path + [k])

    walk(doc, [])
    path = keys[which % len(keys)]
    holder = doc
    for k in path[:-1]:
        holder = holder[k]
    nested = [1]
    for _ in range(40):
        nested = [nested]
    holder[path[-1]] = {"none": None, "string": "nonsense", "negative": -7, "huge": 2 ** 70, "list": [1, [2]],
                        "nested": nested, "nan": float("nan")}[change]


# ---------------------------------------------------------------------------------------------- runs
@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("mut")
    node = root / "node"
    assert run_main(["train", "--data", S, "--epochs", "2", "--hidden", "8", "--checkpoint-every", "1", "--quiet",
                     "--out", node, "--dtype", "float64"]) == 0
    ds = root / "ds"
    gridgnn.shard(S, str(ds), blocks="2x2", method="double-perm", seed=3)
    pairs = root / "pairs.npy"
    np.save(pairs, np.array([[0, 5, 7], [3, 9, 119]], dtype=np.int32))
    return _Runs(node=node, ds=ds, pairs=pairs, logits=gridgnn.load(node).predict(S),
                 resumed=_resumed(node, root / "resumed-ref"), shards=_read_all(ds))


def _resumed(run, out):
    result = gridgnn.train(resume=str(run), epochs=3, out=str(out), quiet=True)
    return result.predict(S)


def _read_all(ds) -> dict:
    d = ShardedDataset(ds)
    out = {}
    for version in ("rc", "cr") if d.double else ("rc",):
        out[version] = d.submatrix(version, (0, d.n), (0, d.n)).toarray()
    for name in d.node_array_names():
        out[name] = d.node_array(name)
    return out


class _Runs(dict):
    def __repr__(self) -> str:  # hypothesis prints the arguments of a failing example: not the arrays
        return "runs"


@pytest.fixture
def copy(tmp_path, runs):
    def make(name):  # a new folder for every example (hypothesis runs many in one test's tmp_path)
        return shutil.copytree(runs[name], Path(tempfile.mkdtemp(dir=tmp_path)) / name)
    make.__repr__ = lambda: "copy"
    return make


# ---------------------------------------------------------------------------------------------- properties
torch_file_mutation = st.one_of(
    byte_mutation.map(lambda m: ("bytes", m)),
    st.tuples(st.just("torch"), st.tuples(st.integers(0, 200), st.sampled_from(TENSOR_CHANGES))),
    st.tuples(st.just("value"), st.tuples(st.integers(0, 200), st.sampled_from(VALUE_CHANGES))))


def mutate_torch_file(path, mutation) -> None:
    kind, m = mutation
    if kind == "bytes":
        mutate_bytes(path, m)
    elif kind == "torch":
        mutate_torch(path, *m)
    else:
        obj = torch.load(path, weights_only=True)
        mutate_value(obj, *m)
        torch.save(obj, path)


@SETTINGS
@given(torch_file_mutation)
def test_a_mutated_model_file(runs, copy, mutation):
    run = copy("node")
    mutate_torch_file(run / "model.pt", mutation)
    refused_or_same(lambda: gridgnn.load(run).predict(S), runs["logits"])


@SETTINGS
@given(torch_file_mutation)
def test_a_mutated_checkpoint(runs, copy, tmp_path, mutation):
    run = copy("node")
    mutate_torch_file(run / "checkpoint.pt", mutation)
    out = Path(tempfile.mkdtemp(dir=tmp_path)) / "resumed"
    refused_or_same(lambda: _resumed(run, out), runs["resumed"])


@SETTINGS
@given(st.one_of(byte_mutation.map(lambda m: ("bytes", m)),
                 st.tuples(st.just("value"), st.tuples(st.integers(0, 400), st.sampled_from(VALUE_CHANGES)))))
def test_a_mutated_summary_beside_a_good_model(runs, copy, mutation):
    """The summary is not what inference needs: a damaged one is ignored, the logits stay exact."""
    run = copy("node")
    path = run / "summary.json"
    kind, m = mutation
    if kind == "bytes":
        mutate_bytes(path, m)
    else:
        doc = json.loads(path.read_text())
        mutate_value(doc, *m)
        path.write_text(json.dumps(doc))
    refused_or_same(lambda: gridgnn.load(run).predict(S), runs["logits"])
    assert refused_or_same(lambda: gridgnn.load(runs["node"]).predict(S), runs["logits"]) == "same"


@SETTINGS
@given(st.one_of(byte_mutation.map(lambda m: ("bytes", m)),
                 st.sampled_from(["float32", "bool", "uint8", "int16", "uint64", "3rows", "1d", "transposed",
                                  "object"]).map(lambda m: ("array", m))))
def test_a_mutated_pair_file(runs, tmp_path, mutation):
    path = Path(tempfile.mkdtemp(dir=tmp_path)) / "p.npy"
    shutil.copy(runs["pairs"], path)
    ref = np.load(runs["pairs"]).astype(np.int64)
    kind, m = mutation
    expect = ref
    if kind == "bytes":  # a .npy holds no checksum: a changed id is other data, so the header and the length
        if m[0] == "flip":  # are mutated (a flipped id byte is not a damage any reader could see)
            m = ("flip", [x % 128 for x in m[1]], m[2])
        mutate_bytes(path, m)
    else:
        a = np.load(runs["pairs"])
        if m == "transposed":
            a = a.T.copy()
        elif m == "3rows":
            a = np.vstack([a, a[:1]])
        elif m == "1d":
            a = a.reshape(-1)
        elif m == "object":
            a = a.astype(object)
        else:
            a = a.astype(m)
            expect = a.astype(np.int64) if m not in ("float32", "bool") else None
        np.save(path, a, allow_pickle=True)
    outcome = refused_or_same(lambda: read_pairs(path), ref if expect is None else expect)
    if kind == "array" and m in ("float32", "bool", "3rows", "1d", "object"):
        assert outcome == "refused"


SHARD_CHANGES = ("swap-blocks", "swap-with-node-file", "drop-block", "flip-block", "truncate-block")


@SETTINGS
@given(st.one_of(st.tuples(st.just("file"), st.tuples(st.sampled_from(SHARD_CHANGES), byte_mutation)),
                 st.tuples(st.just("meta"), st.tuples(st.integers(0, 400), st.sampled_from(VALUE_CHANGES)))))
def test_a_mutated_sharded_dataset(runs, copy, mutation):
    ds = copy("ds")
    kind, m = mutation
    if kind == "meta":
        doc = json.loads((ds / "meta.json").read_text())
        mutate_value(doc, *m)
        (ds / "meta.json").write_text(json.dumps(doc))
    else:
        change, bm = m
        blocks = sorted(str(p.relative_to(ds)) for p in ds.rglob("block_*.npz"))
        nodes = sorted(str(p.relative_to(ds)) for p in ds.rglob("*.npy"))
        a = ds / blocks[0]
        if change == "swap-blocks":
            b = ds / blocks[1]
            tmp = a.read_bytes()
            a.write_bytes(b.read_bytes())
            b.write_bytes(tmp)
        elif change == "swap-with-node-file":
            a.write_bytes((ds / nodes[0]).read_bytes())
        elif change == "drop-block":
            a.unlink()
        else:
            mutate_bytes(a, ("flip", *bm[1:]) if change == "flip-block" and bm[0] == "flip" else
                         bm if change == "truncate-block" and bm[0] == "truncate" else ("truncate", 0.5, None))
    outcome = refused_or_same(lambda: _read_all(ds), runs["shards"])
    if kind == "file":
        assert outcome == "refused"  # a changed block or node file is never read as data


def test_the_mutation_helpers_change_what_they_say(runs, tmp_path):
    """The strategies are not vacuous: each kind of change is refused at least once on the model file."""
    refused = set()
    for change in TENSOR_CHANGES:
        run = shutil.copytree(runs["node"], tmp_path / change)
        mutate_torch(run / "model.pt", 0, change)
        if refused_or_same(lambda r=run: gridgnn.load(r).predict(S), runs["logits"]) == "refused":
            refused.add(change)
    assert refused == set(TENSOR_CHANGES)
    os.sync()
