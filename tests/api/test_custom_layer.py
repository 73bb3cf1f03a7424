"""The public model API is enough: the example's edge-gated GCN (examples/custom_layer.py), written only against
the primitives, equals its serial run on every algorithm at P = 4 — every block-row layout (every c, uneven
blocks), every 2D and 3D grid shape, every Plexus shape (single and double permutation) — in float64, logits and
every parameter gradient; and the bytes every rank measures equal the byte model traced from the model, with no
byte model written for it."""
import numpy as np
import pytest

from gridgnn.distributed.launch import launch
from gridgnn.errors import GridGnnError
from gridgnn.nn import MODELS, resolve_model
from gridgnn.testing import Case, distributed_worker

from ..parallel._fidelity import check_against_serial, check_bytes
from ..parallel.conftest import GRAPHS, N, shapes_2d, shapes_3d, skewed_partition

MODEL = "examples.custom_layer:EdgeGatedGCN"
P = 4


def cases() -> list[tuple[str, Case]]:
    out, k = [], 0

    def add(tag, **kw):
        nonlocal k
        gname = tuple(GRAPHS)[k % 2]
        dims, heads = ([7, 3, 3], 2) if k % 2 else ([7, 2, 4, 3], 3)
        k += 1
        out.append((f"{tag}-{gname}", Case(graph=GRAPHS[gname], dims=dims, model=MODEL, options={"heads": heads},
                                           dropout=0.4, seed=11, epoch=2, **kw)))

    add("serial", algo="serial")
    for algo in ("1d", "1d-sa"):
        add(f"{algo}-skewed", algo=algo, partition=skewed_partition(N, P, 5))
        add(f"{algo}-random", algo=algo, partition="random")
    for c in (1, 2, 4):
        for algo in ("1.5d", "1.5d-sa"):
            add(f"{algo}-c{c}", algo=algo, replication=c, partition=skewed_partition(N, P // c, 6))
    for algo, shapes in (("2d", shapes_2d(P)), ("3d", shapes_3d(P))):
        for shape in shapes:
            add(f"{algo}-{'x'.join(map(str, shape))}", algo=algo, grid=shape, partition="random")
    for j, shape in enumerate(shapes_3d(P)):
        for part in ("random", "double-perm"):
            add(f"plexus-{'x'.join(map(str, shape))}-{part}", algo="plexus", grid=shape, partition=part)
    return out


@pytest.fixture(scope="module")
def results():
    named = [(n, c) for n, c in cases() if c.algo != "serial"]
    out = launch(distributed_worker, P, [c for _, c in named], device="cpu", collect=True)
    return {name: (case, [out[r][i] for r in range(P)]) for i, (name, case) in enumerate(named)}


def test_every_algorithm_equals_serial_and_bytes_equal_the_traced_model(results):
    assert len(results) >= 30
    for name, (case, per_rank) in results.items():
        try:
            check_against_serial(case, per_rank, P)
            check_bytes(case, per_rank, P)
        except AssertionError as e:
            raise AssertionError(f"{name}: {e}") from e


def test_the_gate_gates():
    """The gates act: with every gate vector pushed to -inf (σ → 0) each layer's aggregation vanishes and the
    logits are the last bias; with σ → 1 the layer is GCN's propagation of ``X W``."""
    import torch

    from gridgnn.distributed import NullComm
    from gridgnn.train.rank_layout import build_rank

    g, dims = GRAPHS["undirected"], [7, 3, 3]
    cls = resolve_model(MODEL)
    plan, data = build_rank(g, "serial", NullComm(), dims, dtype=torch.float64,
                            model=lambda p: cls.from_options(dims, plan=p, dtype=torch.float64, heads=1))
    model = cls.from_options(dims, plan=plan, dtype=torch.float64, seed=3, heads=1, dropout=0.0).eval()
    x = data.x
    with torch.no_grad():
        model.param("bias", 1).copy_(torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64))
        for layer in range(2):
            for name in ("gate_dst", "gate_src"):
                model.param(name, layer).fill_(0.0)
        half = model(x, plan)  # σ(0) = 1/2 on every edge: GCN propagation at half weight
        gm = plan.graph(0)
        h = torch.relu(gm.spmm(0.5 * gm.gcn_values, x @ model.param("weight", 0)) + model.param("bias", 0))
        ref = gm.spmm(0.5 * gm.gcn_values, h @ model.param("weight", 1)) + model.param("bias", 1)
        np.testing.assert_allclose(half.numpy(), ref.numpy(), rtol=1e-12, atol=1e-12)
        model.param("weight", 1).fill_(1.0)
        model.param("gate_dst", 1).fill_(-1e6)  # every layer-1 score is -1e6 · (sum of positive ReLU outputs)
        closed = model(x, plan)
        rows = (h.sum(dim=1) > 1e-3).numpy()  # σ(-3e6 · Σh) is 0 in float64 there
        assert rows.any()
        np.testing.assert_allclose(closed.numpy()[rows], np.broadcast_to([0.5, -1.0, 2.0], closed[rows].shape),
                                   atol=1e-12)


def test_import_path_registers_and_bad_paths_are_one_line_errors():
    assert resolve_model(MODEL) is MODELS[MODEL] is MODELS["edge-gated-gcn"]
    for bad, words in (("nosuch_pkg.mod:X", "cannot import"), ("os:path", "not a gridgnn model"),
                       ("examples.custom_layer:Nothing", "has no Nothing"), ("a b:c", "import path"),
                       ("nomodel", "not available")):
        with pytest.raises(GridGnnError, match=words):
            resolve_model(bad)


def test_checkpoint_of_a_plugin_model_resumes_only_when_the_command_line_names_it(tmp_path, capsys):
    """A checkpoint naming a model by import path is understood once --model names it again; on the word of the
    checkpoint alone nothing is imported (one error line saying what to give)."""
    import json

    from ..train._runs import run_main

    common = ["--data", "synthetic:sbm?n=200&classes=3&avg_degree=6&features=8", "--dtype", "float64", "--quiet"]
    run = tmp_path / "run"
    assert run_main(["train", *common, "--model", MODEL, "--heads", 2, "--epochs", 2, "--checkpoint-every", 2,
                     "--out", run]) == 0
    import gridgnn.nn.base as base

    base.MODELS.pop(MODEL, None)  # as in a fresh process that has not imported it
    assert run_main(["train", "--resume", run, "--epochs", 4, "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"give --model {MODEL}" in err[0], err
    assert run_main(["train", "--resume", run, "--model", MODEL, "--epochs", 4, "--quiet"]) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert summary["resumed_from_epoch"] == 2 and summary["model"] == MODEL
