"""Training from Python (gridgnn.train, Trainer) in this process, spawned, and under torchrun; a graph handed
over in memory (a Graph or a PyG Data); config files (TOML, a previous run's summary.json) with flags over them;
--version."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import gridgnn
from gridgnn import TrainConfig, Trainer
from gridgnn.errors import GridGnnError

from ..train._runs import TORCHRUN, free_loopback_port, run_main

SBM = "synthetic:sbm?n=300&classes=3&avg_degree=6&features=8"
BASE = dict(data=SBM, epochs=3, dtype="float64", seed=4, quiet=True, hidden=8)


@pytest.fixture(scope="module")
def serial_summary():
    return gridgnn.train(TrainConfig(**BASE))


def test_python_serial_equals_the_cli(serial_summary, tmp_path):
    assert run_main(["train", "--data", SBM, "--epochs", 3, "--dtype", "float64", "--seed", 4, "--quiet",
                     "--hidden", 8, "--out", tmp_path / "cli"]) == 0
    cli = json.loads((tmp_path / "cli" / "summary.json").read_text())
    assert serial_summary["final_loss"] == cli["final_loss"]
    assert serial_summary["test_acc"] == cli["test_acc"]
    assert serial_summary["config"] == {**cli["config"], "out": None}
    assert serial_summary["data"] == SBM


def test_spawned_and_in_memory_graphs_equal_serial(serial_summary):
    """Trainer(...).fit() spawns P = 2 ranks and returns rank 0's summary; a Graph or a PyG Data handed over
    from Python trains exactly like the spec it came from."""
    spawned = Trainer(TrainConfig(**BASE), algo="1d", nproc=2).fit()
    assert spawned["nproc"] == 2 and spawned["algo"] == "1d"
    assert abs(spawned["final_loss"] - serial_summary["final_loss"]) <= 1e-9 * abs(serial_summary["final_loss"])

    graph = gridgnn.load_graph(SBM, seed=4)
    assert gridgnn.load_graph(graph) is graph
    from torch_geometric.data import Data
    import torch

    dst = np.repeat(np.arange(graph.n), np.diff(graph.indptr))  # CSR rows are destinations
    data = Data(edge_index=torch.from_numpy(np.stack([graph.indices, dst]).astype(np.int64)),
                x=torch.from_numpy(graph.x), y=torch.from_numpy(graph.y),
                train_mask=torch.from_numpy(graph.train_mask), val_mask=torch.from_numpy(graph.val_mask),
                test_mask=torch.from_numpy(graph.test_mask), num_nodes=graph.n)
    converted = gridgnn.load_graph(data)
    assert np.array_equal(converted.indptr, graph.indptr) and np.array_equal(converted.indices, graph.indices)
    assert np.array_equal(converted.x, graph.x) and np.array_equal(converted.y, graph.y)
    cfg = TrainConfig(**{**BASE, "data": None})
    for g in (graph, data):
        s = gridgnn.train(cfg, graph=g)
        assert s["final_loss"] == serial_summary["final_loss"], type(g)
        assert s["data"].startswith("in-memory:")
    s = gridgnn.train(cfg, graph=data, algo="1d-sa", nproc=2)  # spawned ranks receive the graph
    assert abs(s["final_loss"] - serial_summary["final_loss"]) <= 1e-9 * abs(serial_summary["final_loss"])


def test_python_errors_are_exceptions():
    with pytest.raises(GridGnnError, match="--hidden must be"):
        gridgnn.train(TrainConfig(**{**BASE, "hidden": 0}))
    with pytest.raises(GridGnnError, match="load_graph takes"):
        gridgnn.load_graph(42)
    with pytest.raises(gridgnn.TrainingFailed) as info:  # a rank fails after the spawn: the job's exit status
        gridgnn.train(TrainConfig(**{**BASE, "data": "npz:/nonexistent/graph.npz"}), algo="1d", nproc=2,
                      task="link")  # (link prediction: every rank loads its graph)
    assert info.value.exit_status == 2
    with pytest.raises(GridGnnError, match="/nonexistent/graph.npz") as info:  # loaded once, before any spawn
        gridgnn.train(TrainConfig(**{**BASE, "data": "npz:/nonexistent/graph.npz"}), algo="1d", nproc=2)
    assert not isinstance(info.value, gridgnn.TrainingFailed)


_TORCHRUN_SCRIPT = """
import json, sys
import gridgnn

if __name__ == "__main__":
    s = gridgnn.train(gridgnn.TrainConfig(data=sys.argv[1], algo="1d", epochs=3, dtype="float64", seed=4,
                                          quiet=True, hidden=8))
    if s is not None:
        print("SUMMARY " + json.dumps({"loss": s["final_loss"], "nproc": s["nproc"]}))
"""


def test_a_script_under_torchrun(tmp_path, serial_summary):
    script = tmp_path / "job.py"
    script.write_text(_TORCHRUN_SCRIPT)
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    port = free_loopback_port()  # for torchrun's static rendezvous
    r = subprocess.run([TORCHRUN, "--nnodes", "1", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
                        "--master-port", str(port), str(script), SBM], capture_output=True, text=True, timeout=300,
                       env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = [json.loads(ln[8:]) for ln in r.stdout.splitlines() if ln.startswith("SUMMARY ")]
    assert len(lines) == 1 and lines[0]["nproc"] == 2  # rank 0 only
    assert abs(lines[0]["loss"] - serial_summary["final_loss"]) <= 1e-9 * abs(serial_summary["final_loss"])


def test_toml_config_flags_override_and_summary_reruns(tmp_path):
    toml = tmp_path / "run.toml"
    toml.write_text(f'[train]\ndata = "{SBM}"\nepochs = 5\nhidden = 8\nweight-decay = 0.001\ndtype = "float64"\n'
                    f'algo = "2d"\nnproc = 2\ngrid = [1, 2]\nseed = 4\n')
    first = tmp_path / "first"
    assert run_main(["train", "--config", toml, "--epochs", 3, "--quiet", "--out", first]) == 0
    s1 = json.loads((first / "summary.json").read_text())
    assert s1["epochs"] == 3 and s1["hidden"] == 8 and s1["grid"] == [1, 2] and s1["config"]["weight_decay"] == 1e-3
    again = tmp_path / "again"
    assert run_main(["train", "--config", first, "--quiet", "--out", again]) == 0  # the folder: its summary.json
    s2 = json.loads((again / "summary.json").read_text())
    assert s2["final_loss"] == s1["final_loss"] and s2["test_acc"] == s1["test_acc"]
    assert {**s2["config"], "out": None} == {**s1["config"], "out": None}


@pytest.mark.parametrize("text, words", [
    ("epochs = 3\nlearning_rate = 0.1\n", "unknown option(s) learning_rate"),
    ("epochs = [3\n", "not valid TOML"),
    ('epochs = "many"\n', "--epochs must be an integer"),
])
def test_bad_config_files_are_one_line_errors(tmp_path, capsys, text, words):
    f = tmp_path / "bad.toml"
    f.write_text(text)
    assert run_main(["train", "--config", f, "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("gridgnn: error:") and words in err[0], err


def test_version():
    r = subprocess.run([sys.executable, "-m", "gridgnn", "--version"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == f"gridgnn {gridgnn.__version__}"
    from importlib.metadata import version

    assert version("gridgnn") == gridgnn.__version__


def test_config_files_are_data(tmp_path, monkeypatch, capsys):
    """A summary.json or TOML file naming a model by import path imports nothing unless the command line names
    the same model; a wrong value type is one error line, from a file and from Python; a run on a graph from
    Python is not rerun on another graph."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "payload.py").write_text("open('IMPORTED', 'w').write('ran')\nX = 1\n")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "summary.json").write_text(json.dumps({"config": {"model": "payload:X", "epochs": 2}}))
    (tmp_path / "run.toml").write_text('model = "payload:X"\nepochs = 2\n')
    for source in ("run", "run.toml"):
        assert run_main(["train", "--config", tmp_path / source, "--quiet"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "add --model payload:X" in err[0], err
    assert not (tmp_path / "IMPORTED").exists()
    (tmp_path / "mem").mkdir()
    (tmp_path / "mem" / "summary.json").write_text(json.dumps({"data": "in-memory:pyg", "config": {"data": None}}))
    assert run_main(["train", "--config", tmp_path / "mem", "--quiet"]) == 2
    assert "give --data" in capsys.readouterr().err
    for text, words in (('lr = "x"', "--lr must be a number"), ("grid = [2.0, 2]\nalgo = \"2d\"", "--grid must be"),
                        ("data = 5", "--data must be a string"), ('quiet = "no"', "--quiet must be true or false"),
                        ("out = 5", "--out must be a string")):
        (tmp_path / "bad.toml").write_text(text + "\nepochs = 2\n")
        assert run_main(["train", "--config", tmp_path / "bad.toml"]) == 2, text
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and words in err[0], (text, err)
    with pytest.raises(GridGnnError, match="--lr must be a number"):
        gridgnn.train(lr="x")
    with pytest.raises(GridGnnError, match="not both"):
        gridgnn.train(graph=gridgnn.load_graph(SBM), data=SBM)
    with pytest.raises(GridGnnError, match="unknown training option"):
        gridgnn.train(learning_rate=0.1)


def test_python_resume_follows_the_command_line_rules(tmp_path):
    run = tmp_path / "run"
    assert run_main(["train", "--data", SBM, "--epochs", 2, "--lr", 0.05, "--checkpoint-every", 2, "--quiet",
                     "--out", run]) == 0
    assert Trainer(TrainConfig(resume=str(run), epochs=4)).resolved_config().lr == 0.05  # inherited
    with pytest.raises(GridGnnError, match="differs from the checkpoint"):  # a keyword insists, as a flag does
        Trainer(TrainConfig(resume=str(run), epochs=4), lr=0.01).resolved_config()


def test_bad_models_of_your_own_are_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "broken_layer.py").write_text("raise RuntimeError('boom at import')\n")
    for model, words in (("broken_layer:X", "importing broken_layer failed: RuntimeError: boom"),
                         ("gridgnn.nn.base:Model", "has no parameters")):
        assert run_main(["train", "--model", model, "--epochs", 2, "--quiet"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and words in err[0], err


def test_a_spawned_job_runs_from_a_thread_other_than_the_main_one(tmp_path):
    """``gridgnn.train(nproc=2)`` called in a ``threading.Thread`` (a notebook's or a service's worker) was
    ``ValueError: signal only works in main thread``: the launcher installs its handlers only in the main thread."""
    import subprocess
    import sys

    script = tmp_path / "thread.py"
    script.write_text("import threading, gridgnn\n"
                      "out = []\n"
                      "def job():\n"
                      "    out.append(gridgnn.train(data='synthetic:sbm?n=200&classes=2&avg_degree=4&features=8',\n"
                      "                             algo='1d', nproc=2, epochs=1, quiet=True)['epochs_trained'])\n"
                      "if __name__ == '__main__':\n"
                      "    t = threading.Thread(target=job); t.start(); t.join()\n"
                      "    print('trained', out)\n")
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == "trained [1]", r.stderr


def test_the_python_api_takes_paths_and_a_lone_size_as_the_command_line_does():
    """``out=Path(...)`` was refused as "must be a string", and ``fanout=5`` too, where ``--fanout 5`` and
    ``fanout=[5]`` were taken."""
    from pathlib import Path

    from gridgnn.train.config import TrainConfig

    cfg = TrainConfig(out=Path("runs") / "a", data=Path("npz:g.npz"), fanout=5, eval_fanout=[4, 3])
    assert (cfg.out, cfg.data, cfg.fanout, cfg.eval_fanout) == (str(Path("runs") / "a"), "npz:g.npz", "5", "4,3")
