"""Never silent, third round (issue 42): every saved file a user hands back — pair lists, model files, summaries,
configs, OGB split files — goes through the checked readers of ``gridgnn.graph`` and is refused with one line (exit
2), never a traceback, a hang or a silently different result; and the Python API's failures say what they are."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import gridgnn
from gridgnn.errors import GridGnnError
from gridgnn.graph import Graph
from gridgnn.graph.safe_io import DataFileError
from gridgnn.graph.saved import MAX_DEPTH, as_pairs, read_document, read_pairs, read_torch

from ..train._runs import run_main

S = "synthetic:sbm?n=200&classes=3&avg_degree=6&features=8"


def _one_line(capsys, *needles):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("gridgnn: error: "), err
    for needle in needles:
        assert needle in err[0], err
    return err[0]


@pytest.fixture(scope="module")
def node_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("node") / "run"
    assert run_main(["train", "--data", S, "--epochs", "2", "--hidden", "8", "--quiet", "--out", out]) == 0
    return out


@pytest.fixture(scope="module")
def link_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("link") / "run"
    assert run_main(["train", "--data", S, "--task", "link", "--epochs", "2", "--hidden", "8", "--quiet",
                     "--out", out]) == 0
    return out


# ------------------------------------------------------------------------------------------ 2, 6: pairs
def test_uint8_pairs_are_ids_never_a_mask(link_run, tmp_path, capsys):
    """Case 2: a uint8 [2, 200] file scored 100 pairs (torch indexed with it as a boolean mask)."""
    p = np.zeros((2, 200), np.uint8)
    p[0, :100] = 1
    p[1, 50:150] = 1
    np.save(tmp_path / "p.npy", p)
    assert run_main(["predict", "--run", link_run, "--data", S, "--pairs", tmp_path / "p.npy",
                     "--out", tmp_path / "s.npy"]) == 0
    scores = np.load(tmp_path / "s.npy")
    assert scores.shape == (200,)
    same = gridgnn.load(link_run).score(p.astype(np.int64), S)
    np.testing.assert_array_equal(scores, same)
    np.testing.assert_array_equal(as_pairs(p), p.astype(np.int64))
    assert as_pairs(torch.from_numpy(p.T.copy())).dtype == np.int64  # [m, 2] tensors too
    np.save(tmp_path / "b.npy", p.astype(bool))
    assert run_main(["predict", "--run", link_run, "--data", S, "--pairs", tmp_path / "b.npy",
                     "--out", tmp_path / "b-out.npy"]) == 2
    _one_line(capsys, "b.npy", "a boolean mask is not a list of pairs")
    for bad in (p.astype(np.float32), np.zeros((3, 4), np.int64), [[0, 1], [2]]):
        with pytest.raises(GridGnnError, match="integer vertex ids of shape"):
            as_pairs(bad)


def test_a_fifo_or_a_lying_header_as_pairs_is_one_line(link_run, tmp_path, capsys):
    """Case 6: --pairs FIFO blocked until killed; a header claiming 1.4 TiB was 'out of memory' (exit 1)."""
    fifo = tmp_path / "fifo.npy"
    os.mkfifo(fifo)
    r = subprocess.run([sys.executable, "-m", "gridgnn", "predict", "--run", str(link_run), "--data", S, "--pairs",
                        str(fifo), "--out", str(tmp_path / "f.npy")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        f"gridgnn: error: {fifo}: not a regular file (cannot read array file)"], r.stderr
    huge = tmp_path / "huge.npy"
    header = "{'descr': '<i8', 'fortran_order': False, 'shape': (2, 100000000000), }"
    header += " " * (118 - len(header)) + "\n"
    huge.write_bytes(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode() + b"\0" * 64)
    assert run_main(["predict", "--run", link_run, "--data", S, "--pairs", huge, "--out", tmp_path / "h.npy"]) == 2
    _one_line(capsys, "huge.npy", "header declares shape (2, 100000000000)")
    assert not os.path.exists(tmp_path / "h.npy")


# ------------------------------------------------------------------------------------------ 3, 8: model files
def _model(run):
    return torch.load(os.path.join(run, "model.pt"), weights_only=True)


@pytest.mark.parametrize("damage,needle", [
    ("nan", "NaN or infinite"), ("inf", "NaN or infinite"), ("meta", "device meta"),
    ("sparse", "sparse_coo tensor"), ("no-biases", "the model has biases, weights"),
    ("task", "--task must be one of node, link, got 'nonsense'"), ("algo", "--algo 'evil' is not an algorithm"),
    ("deep", f"more deeply than {MAX_DEPTH} levels"),
    # a pipeline step this gridgnn does not take, or one it does not know, would be skipped at inference
    ("loops", "input_pipeline record"), ("step", "input_pipeline record"),
])
def test_a_damaged_model_file_is_one_line_in_predict_export_and_load(node_run, tmp_path, capsys, damage, needle):
    """Cases 3, 8 and 20: NaN/inf weights gave NaN logits (exit 0); a meta or sparse tensor, a missing group, a
    nonsense config or deep nesting gave a traceback or loaded."""
    obj = _model(node_run)
    w = obj["params"]["weights"]
    if damage in ("nan", "inf"):
        w[0] = w[0].clone()
        w[0][1, 2] = float(damage)
    elif damage == "meta":
        w[0] = torch.empty(w[0].shape, dtype=w[0].dtype, device="meta")
    elif damage == "sparse":
        w[0] = w[0].to_sparse()
    elif damage == "no-biases":
        del obj["params"]["biases"]
    elif damage == "task":
        obj["config"]["task"] = "nonsense"
    elif damage == "algo":
        obj["config"]["algo"] = "evil"
    elif damage == "loops":
        obj["config"]["input_pipeline"]["self_loops"] = "remove"
    elif damage == "step":
        obj["config"]["input_pipeline"]["reverse_edges"] = True
    else:
        deep = []
        for _ in range(MAX_DEPTH + 5):
            deep = [deep]
        obj["config"]["extra"] = deep
    run = tmp_path / "run"
    run.mkdir()
    torch.save(obj, run / "model.pt")
    assert run_main(["predict", "--run", run, "--data", S, "--out", tmp_path / "l.npy"]) == 2
    _one_line(capsys, str(run / "model.pt"), needle)
    assert run_main(["export", "--run", run, "--to", "pyg", "--out", tmp_path / "e.pt"]) == 2
    _one_line(capsys, needle)
    with pytest.raises(GridGnnError, match="model.pt"):
        gridgnn.load(run)
    assert not os.path.exists(tmp_path / "l.npy") and not os.path.exists(tmp_path / "e.pt")


def test_a_summarys_pipeline_record_beside_an_older_model_file_is_checked(node_run, tmp_path, capsys):
    """A model file without the record takes the summary's (gridgnn.train's runs keep it there): a damaged one was
    trusted (a KeyError traceback at inference) and is now one line naming the summary."""
    obj = _model(node_run)
    del obj["config"]["input_pipeline"]
    run = tmp_path / "run"
    run.mkdir()
    torch.save(obj, run / "model.pt")
    (run / "summary.json").write_text(json.dumps({**json.loads((node_run / "summary.json").read_text()),
                                                  "input_pipeline": {"feature_norm": "row"}}))
    assert run_main(["predict", "--run", run, "--data", S, "--out", tmp_path / "l.npy"]) == 2
    _one_line(capsys, "summary.json", "input_pipeline record")
    assert not os.path.exists(tmp_path / "l.npy")


def test_resume_from_a_checkpoint_with_nan_weights_is_refused_at_once(tmp_path, capsys):
    """Case 3: --resume from such a checkpoint was caught only later as 'training diverged'."""
    out = tmp_path / "a"
    assert run_main(["train", "--data", S, "--epochs", "2", "--hidden", "8", "--checkpoint-every", "1", "--quiet",
                     "--out", out]) == 0
    ck = torch.load(out / "checkpoint.pt", weights_only=True)
    ck["optimizer"]["exp_avg"]["weights"][1][0, 0] = float("nan")
    torch.save(ck, out / "checkpoint.pt")
    assert run_main(["train", "--resume", out, "--epochs", "4", "--quiet", "--out", tmp_path / "b"]) == 2
    _one_line(capsys, "checkpoint.pt", "NaN or infinite")


def test_a_deep_summary_beside_a_good_model_is_ignored_not_a_traceback(node_run, tmp_path):
    """Case 7: a deep summary.json beside a valid model.pt gave RecursionError in predict/export/load."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "model.pt").write_bytes((node_run / "model.pt").read_bytes())
    (run / "summary.json").write_text("[" * 100_000 + "]" * 100_000)
    model = gridgnn.load(run)
    assert model.summary is None
    np.testing.assert_array_equal(model.predict(S), gridgnn.load(node_run).predict(S))


@pytest.mark.parametrize("suffix,text", [(".toml", "a = " + "[" * 50_000 + "]" * 50_000 + "\n"),
                                         (".json", '{"config": ' + "[" * 50_000 + "]" * 50_000 + "}"),
                                         (".json", '{"config": ' + "[" * (MAX_DEPTH + 2) + "]" * (MAX_DEPTH + 2) + "}")])
def test_deeply_nested_configs_are_one_line(tmp_path, capsys, suffix, text):
    """Case 7: --config deep.toml / deep.json gave RecursionError."""
    f = tmp_path / f"deep{suffix}"
    f.write_text(text)
    assert run_main(["train", "--config", f, "--quiet"]) == 2
    _one_line(capsys, f"--config {f}", f"more deeply than {MAX_DEPTH} levels")


def test_documents_and_torch_files_are_checked(tmp_path):
    f = tmp_path / "x.json"
    f.write_text('{"a": [1, 2, {"b": null}]}')
    assert read_document(f, "a file") == {"a": [1, 2, {"b": None}]}
    f.write_text('{"a": NaN')
    with pytest.raises(DataFileError, match="x.json: a file is not valid JSON"):
        read_document(f, "a file")
    t = tmp_path / "t.pt"
    torch.save({"w": torch.nn.Parameter(torch.ones(2)), "k": (1, "s")}, t)
    got = read_torch(t, "a file")
    assert type(got["w"]) is torch.Tensor and not got["w"].requires_grad and got["k"] == (1, "s")
    for bad, needle in ((torch.ones(2, dtype=torch.complex64), "complex64"),
                        (torch.tensor([1.0, float("-inf")]), "NaN or infinite"), (object, "no gridgnn file")):
        try:
            torch.save({"v": bad}, t)
        except Exception:  # noqa: BLE001 - an object torch cannot save is not a case
            continue
        with pytest.raises(DataFileError, match=needle):
            read_torch(t, "a file")


# ------------------------------------------------------------------------------------------ 9: OGB split values
@pytest.mark.parametrize("value,needle", [
    (torch.nn.Parameter(torch.tensor([[0.5, 1.0]])), None),
    ([[0, 1], [2]], "edge is a list, not an array"),
    (torch.tensor([[0, 1], [1, 2]]).to_sparse(), "sparse_coo tensor"),
])
def test_ogbl_split_values_of_other_kinds_are_one_line(tmp_path, value, needle):
    """Case 9: a Parameter, a ragged list or a sparse tensor in a split file was converted outside the reader."""
    from ..graph.test_ogb import write_ogbl

    write_ogbl(tmp_path)
    path = tmp_path / "split" / "collab" / "valid.pt"
    d = torch.load(path, weights_only=False)
    d["edge"] = value
    torch.save(d, path)
    with pytest.raises(GridGnnError) as err:
        gridgnn.load_graph(f"ogb:{tmp_path}")
    assert "valid.pt" in str(err.value)
    if needle is None:  # a Parameter is read as its data: float ids are then refused as ids
        assert "integer vertex ids" in str(err.value)
    else:
        assert needle in str(err.value)


# ------------------------------------------------------------------------------------------ 5: relations
def test_a_stored_edge_of_no_relation_is_refused(tmp_path, capsys):
    """Case 5: all-zero edge_type_counts trained rgcn with no messages at all."""
    from gridgnn.graph import save_npz

    g = Graph.from_edges([0, 1, 2, 3, 4], [1, 2, 3, 4, 0], 5, edge_type=[0, 1, 0, 1, 0], directed=True,
                         x=np.eye(5, dtype=np.float32), y=np.array([0, 1, 0, 1, 0]))
    f = save_npz(g, tmp_path / "g.npz")
    arrs = dict(np.load(f))
    arrs["edge_type_counts"] = np.zeros_like(arrs["edge_type_counts"])
    np.savez(f, **arrs)
    assert run_main(["train", "--data", f"npz:{f}", "--model", "rgcn", "--epochs", "1", "--quiet"]) == 2
    _one_line(capsys, "belongs to no relation", "and 4 more")


@pytest.mark.parametrize("relations", [1, 2])
def test_few_relations_train_and_the_export_merges_typed_duplicates(relations):
    """The layout trace's tiny typed graph once had stored edges of no relation with 1 or 2 relations (refused by
    the rule above); and a Data with repeated typed edges gives the same logits through gridgnn and its export."""
    from torch_geometric.data import Data

    rng = np.random.default_rng(relations)
    n = 30
    ei = torch.from_numpy(rng.integers(0, n, (2, 80)))
    kind = torch.from_numpy(rng.integers(0, relations, 80))
    data = Data(x=torch.randn(n, 4, generator=torch.Generator().manual_seed(0)), edge_index=ei, edge_type=kind,
                y=torch.from_numpy(rng.integers(0, 3, n)), num_nodes=n, num_relations=relations)
    result = gridgnn.train(graph=data, model="rgcn", epochs=2, dtype="float64", quiet=True)
    dup = Data(x=data.x, edge_index=torch.cat([ei, ei[:, :10]], 1), edge_type=torch.cat([kind, kind[:10]]),
               num_nodes=n, num_relations=relations)
    ours = result.predict(dup)
    np.testing.assert_array_equal(ours, result.predict(data))
    theirs = result.model.to_pyg()(dup.x, dup.edge_index, edge_type=dup.edge_type).detach().numpy()
    np.testing.assert_allclose(theirs, ours, rtol=1e-9, atol=1e-12)


# ------------------------------------------------------------------------------------------ 12, 13, 18: Python API
def _record_interrupt(rec):  # a module-level callback: picklable, sent to the spawned rank 0
    raise KeyboardInterrupt


def test_callbacks_are_checked_and_a_keyboard_interrupt_is_an_interrupt(tmp_path):
    """Case 12: callbacks=5 was a TypeError; a KeyboardInterrupt in a callback at nproc=2 a rank's traceback (then a
    TrainingFailed, a GridGnnError that a caller's except swallowed; now the KeyboardInterrupt itself)."""
    with pytest.raises(GridGnnError, match="callbacks must be a list of callables.*int 5"):
        gridgnn.train(data=S, epochs=1, quiet=True, callbacks=5)
    seen = []
    gridgnn.train(data=S, epochs=2, hidden=8, quiet=True, callbacks=seen.append)  # one callable is a list of one
    assert [r["epoch"] for r in seen] == [0, 1]
    script = tmp_path / "cb.py"
    script.write_text("import sys, gridgnn\n"
                      f"sys.path.insert(0, {os.getcwd()!r})\n"
                      "from tests.reliability.test_checked_readers import _record_interrupt\n"
                      "if __name__ == '__main__':\n"
                      f"    gridgnn.train(data={S!r}, epochs=2, hidden=8, algo='1d', nproc=2, quiet=True,\n"
                      "                  callbacks=[_record_interrupt])\n")
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    lines = r.stderr.strip().splitlines()
    assert lines[0] == "gridgnn: interrupted: rank 0: KeyboardInterrupt", r.stderr
    assert lines[-1] == "KeyboardInterrupt", r.stderr  # an interrupt, as at nproc=1: not a GridGnnError to swallow
    assert r.stderr.count("Traceback") == 1  # the script's own uncaught exception; no rank's traceback


def _record_exit(rec):  # a module-level callback that ends its process (sent to the spawned rank 0)
    raise SystemExit(0)


def test_sys_exit_in_a_rank_is_one_line_and_a_failed_job(tmp_path):
    """sys.exit(0) in a callback at nproc=2 ended rank 0 with status 0 and no result: rank 1 then failed on its next
    collective with a line about a peer, and the cause went unsaid. Now the rank says what it did."""
    script = tmp_path / "cb_exit.py"
    script.write_text("import sys, gridgnn\n"
                      f"sys.path.insert(0, {os.getcwd()!r})\n"
                      "from tests.reliability.test_checked_readers import _record_exit\n"
                      "if __name__ == '__main__':\n"
                      "    try:\n"
                      f"        gridgnn.train(data={S!r}, epochs=2, hidden=8, algo='1d', nproc=2, quiet=True,\n"
                      "                      callbacks=[_record_exit])\n"
                      "    except gridgnn.GridGnnError as exc:\n"
                      "        print('caught', type(exc).__name__)\n")
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.stderr.strip().splitlines() == [
        "gridgnn: error: rank 0: its code called sys.exit(0) before the job's work ended"], r.stderr
    assert r.stdout.strip() == "caught TrainingFailed", r.stdout


def test_a_script_without_a_main_guard_is_one_line(tmp_path):
    """Case 13: a script calling gridgnn.train(nproc=4) at its top level gave a 165-line double traceback."""
    script = tmp_path / "noguard.py"
    script.write_text(f"import gridgnn\n\ngridgnn.train(data={S!r}, epochs=1, algo='1d', nproc=2, quiet=True)\n")
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 1
    assert r.stderr.strip().splitlines()[-1] == (
        "gridgnn.errors.GridGnnError: noguard.py line 3 starts processes from the top level of the script; every "
        "process imports the script again, so put that code under 'if __name__ == \"__main__\":'"), r.stderr
    assert r.stderr.count("Traceback") == 1 and "bootstrapping" not in r.stderr


def test_the_python_exception_carries_the_ranks_first_line(tmp_path):
    """Case 18: from Python the exception read only 'training failed (exit status 2); the ranks' messages are
    above'. A graph the ranks load themselves (link prediction) fails on the ranks: the exception carries their
    first line; one the launching process loads for them (node classification) is refused before any rank starts,
    with the same line."""
    from gridgnn.train.launching import TrainingFailed

    f = tmp_path / "neg.txt"
    f.write_text("0 1 -1\n1 2 -1\n2 0 -1\n")
    with pytest.raises(TrainingFailed, match=r"training failed \(exit status 2\): link prediction on a weighted "
                                             r"graph is not supported yet") as err:
        gridgnn.train(data=f"edgelist:{f}", algo="1d", nproc=2, epochs=1, quiet=True, task="link")
    assert err.value.exit_status == 2
    with pytest.raises(gridgnn.GridGnnError, match=r"^edge weights must be non-negative to train .* edge 2 -> 0 "
                                                   r"has weight -1") as err:
        gridgnn.train(data=f"edgelist:{f}", algo="1d", nproc=2, epochs=1, quiet=True)
    assert not isinstance(err.value, TrainingFailed)


# ------------------------------------------------------------------------------------------ 20: simulate's ranges
def test_simulate_and_plan_refuse_a_model_that_cannot_be_built(capsys):
    """Case 20: simulate --hidden 1048576 --layers 1024 tried an 8 TiB allocation (exit 1)."""
    for cmd in (["simulate"], ["plan", "--nproc", "4"]):
        assert run_main([*cmd, "--hidden", "1048576", "--layers", "1024"]) == 2
        _one_line(capsys, "try a smaller --hidden or fewer --layers")
    assert run_main(["simulate", "--comm-dtype", "float64", "--algo", "1d", "--nproc", "2"]) == 2
    _one_line(capsys, "--comm-dtype float64 is wider than --dtype float32")


def test_saved_configs_are_checked_like_flags(node_run, tmp_path, capsys):
    summary = json.loads((node_run / "summary.json").read_text())
    summary["config"]["feature_norm"] = "sideways"
    f = tmp_path / "summary.json"
    f.write_text(json.dumps(summary))
    assert run_main(["train", "--config", f, "--quiet"]) == 2
    _one_line(capsys, "--feature-norm must be one of")
    with pytest.raises(DataFileError, match="the pairs must be integer"):
        np.save(tmp_path / "f.npy", np.zeros((2, 3), np.float64))
        read_pairs(tmp_path / "f.npy")
