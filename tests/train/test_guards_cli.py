"""Hostile inputs through the whole `gridgnn train` command, serial and at P=2: each ends with exit status 2 and
exactly one `gridgnn: error:` line naming the problem, no traceback, and no --out folder. The memory guard
refuses configurations that cannot fit before anything large is allocated, and a run that fits records the
estimate it was admitted with next to the measured peak of every rank."""
import json
import zipfile

import numpy as np
import pytest

from gridgnn.graph import Graph
from gridgnn.graph.loaders import load_edgelist, save_npz

from ._runs import cli_batch


def _labelled(n, src, dst, **extra):
    rng = np.random.default_rng(0)
    return Graph.from_edges(src, dst, n, directed=False, x=rng.standard_normal((n, 4)).astype(np.float32),
                            y=np.arange(n) % 2, train_mask=np.arange(n) % 3 == 0, val_mask=np.arange(n) % 3 == 1,
                            test_mask=np.arange(n) % 3 == 2, **extra)


def _hostile_files(tmp_path) -> list[tuple[list, str]]:
    """``(flags, words the error line must hold)`` of each hostile input."""
    cases = []
    huge_id = tmp_path / "huge_id.txt"
    huge_id.write_text("0 1\n1 999999999999\n")
    cases.append((["--data", f"edgelist:{huge_id}"], "?num_nodes=N"))
    mtx = tmp_path / "huge.mtx"
    mtx.write_text("%%MatrixMarket matrix coordinate pattern general\n1000000000000 1000000000000 1\n1 2\n")
    cases.append((["--data", f"mtx:{mtx}"], "huge.mtx"))
    good = tmp_path / "good.npz"
    save_npz(_labelled(30, np.arange(29), np.arange(1, 30)), good)
    raw = good.read_bytes()
    trunc = tmp_path / "trunc.npz"
    trunc.write_bytes(raw[: len(raw) // 2])
    cases.append((["--data", f"npz:{trunc}"], "trunc.npz"))
    flipped = bytearray(raw)
    flipped[len(raw) // 3] ^= 0xFF
    flip = tmp_path / "flip.npz"
    flip.write_bytes(bytes(flipped))
    cases.append((["--data", f"npz:{flip}"], "flip.npz"))
    npy = tmp_path / "array.npz"  # an .npy renamed .npz
    with open(npy, "wb") as fh:
        np.save(fh, np.arange(10))
    cases.append((["--data", f"npz:{npy}"], "array.npz"))
    label = tmp_path / "label.npz"
    with zipfile.ZipFile(good) as zf:
        members = {n[:-4]: np.load(zf.open(n)) for n in zf.namelist()}
    members["y"] = members["y"].copy()
    members["y"][3] = 10**12
    np.savez(label, **members)
    cases.append((["--data", f"npz:{label}"], "label"))
    part = tmp_path / "part.txt"
    part.write_text("\n".join(["0"] * 29 + ["100000000000000000000000"]) + "\n")
    cases.append((["--data", f"npz:{good}", "--algo", "1d", "--partition", str(part)], "part.txt"))
    cases.append((["--data", "synthetic:sbm?n=1000000000000"], "n=1000000000000"))
    # the memory guard: 2**40 weights of the middle layer (16 TiB with Adam's state) before anything is built
    cases.append((["--data", f"npz:{good}", "--hidden", 2**20, "--layers", 3], "smaller --hidden"))
    # a model the guard reads from its trace: its parameters are refused before the trace builds them
    cases.append((["--data", f"npz:{good}", "--model", "gat", "--hidden", 2**20, "--layers", 3], "smaller --hidden"))
    return cases


@pytest.mark.parametrize("nproc", [1, 2])
def test_hostile_inputs_end_with_one_line_and_no_output(tmp_path, nproc):
    cases = _hostile_files(tmp_path)
    argvs = []
    for i, (flags, _) in enumerate(cases):
        algo = [] if "--algo" in flags else ["--algo", "serial" if nproc == 1 else "1d"]
        argvs.append(["train", *flags, *algo, "--nproc", nproc, "--epochs", 2, "--quiet",
                      "--out", tmp_path / f"out{i}"])
    r, codes = cli_batch(argvs, timeout=600)
    assert codes == [2] * len(cases), (codes, r.stderr[-3000:])
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == len(cases) and all(ln.startswith("gridgnn: error: ") for ln in lines), r.stderr[-3000:]
    for line, (flags, words) in zip(lines, cases):
        assert words in line, (flags, line)
    assert not any((tmp_path / f"out{i}").exists() for i in range(len(cases)))


def test_what_cannot_work_is_refused_before_spawning(tmp_path):
    """--nproc beyond what the machine can start, and more blocks than a synthetic graph has vertices: refused
    by the launching process (the messages below are only printed there)."""
    r, codes = cli_batch([["train", "--algo", "1d", "--nproc", 10**6, "--epochs", 1, "--out", tmp_path / "o"],
                          ["train", "--data", "synthetic:sbm?n=6&classes=2&avg_degree=1", "--algo", "plexus",
                           "--nproc", 8, "--grid", "8,1,1", "--epochs", 1, "--out", tmp_path / "o"]])
    assert codes == [2, 2], r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 2 and "just to start 1000000 processes" in lines[0] and "at most --nproc" in lines[0]
    assert "cannot split 6 vertices into 8 vertex blocks (plexus on 8 processes)" in lines[1], lines
    assert not (tmp_path / "o").exists()


def test_an_allocation_that_fails_anyway_is_one_line():
    """Under an address-space limit the memory guard cannot see (it reads the machine's free memory), the
    MemoryError of whatever allocation fails is one `gridgnn: error: out of memory` line, exit status 1."""
    import resource
    import subprocess
    import sys

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (1500 * 2**20, 1500 * 2**20))

    r = subprocess.run([sys.executable, "-m", "gridgnn", "train", "--data", "synthetic:sbm?n=1000000",
                        "--epochs", "1", "--quiet"], capture_output=True, text=True, timeout=300, preexec_fn=limit)
    assert r.returncode == 1, r.stderr[-2000:]
    assert r.stderr.startswith("gridgnn: error: out of memory: ") and r.stderr.count("\n") == 1, r.stderr[-2000:]


def test_summary_holds_the_memory_estimate_and_the_measured_peak(tmp_path):
    """Every rank's estimate of a GAT run (a model the memory guard reads from its trace) is within a factor 1.5 of
    its measured peak (the loose bound keeps allocator noise out of the test), and the
    ``?relabel=1`` ids reach ``node_ids.npy`` next to ``logits.npy``."""
    text = tmp_path / "ids.txt"
    ids = np.array([7, 10**12, 55, 3, 900000000000, 41])
    rng = np.random.default_rng(1)
    edges = {(int(ids[i]), int(ids[(i + 1) % 6])) for i in range(6)} | \
        {tuple(int(v) for v in rng.choice(ids, 2, replace=False)) for _ in range(6)}
    text.write_text("".join(f"{a} {b}\n" for a, b in edges))
    g = load_edgelist(text, relabel=True)
    labelled = _labelled(g.n, *np.nonzero(g.csr().toarray()), original_ids=g.original_ids)
    data = tmp_path / "relabelled.npz"
    save_npz(labelled, data)
    out = tmp_path / "run"
    r, codes = cli_batch([["train", "--data", f"npz:{data}", "--algo", "1d-sa", "--nproc", 2, "--epochs", 2, "--model", "gat",
                           "--quiet", "--save-logits", "--out", out]])
    assert codes == [0], r.stderr[-3000:]
    s = json.loads((out / "summary.json").read_text())
    est, peak = s["estimated_peak_memory_bytes"], s["peak_memory_bytes"]
    assert len(est) == len(peak) == 2
    for e, m in zip(est, peak):
        assert m / 1.5 < e < 1.5 * m, (est, peak)
    assert np.array_equal(np.load(out / "node_ids.npy"), np.sort(ids))
    assert np.load(out / "logits.npy").shape == (6, 2)


def test_a_grid_with_more_column_blocks_than_vertices_names_the_count(capsys):
    """2D's column blocks cut the vertices too: a 1x4 grid on 3 vertices is refused up front, naming the vertex
    blocks (it was refused later, as "blocks 1×4 invalid for n=3")."""
    from ._runs import run_main

    assert run_main(["train", "--data", "synthetic:sbm?n=3&classes=1&avg_degree=2&features=4", "--algo", "2d",
                     "--nproc", 4, "--grid", "1,4", "--epochs", 1, "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot split 3 vertices into 4 vertex blocks (2d on 4 processes)" in err[0], err


@pytest.mark.parametrize("sampler", [None, "sage"])
def test_overlapping_masks_and_early_stop_without_validation_are_refused(sampler):
    """A vertex in the training and the test masks: its test accuracy was reported over training vertices, as if
    held out (the OGB loader already refused overlapping split files); full-graph and minibatch runs alike."""
    import gridgnn
    from gridgnn.errors import GridGnnError
    from gridgnn.graph.spec import load_graph

    g = load_graph("synthetic:sbm?n=60&classes=3&avg_degree=4&features=4")
    test = g.test_mask.copy()
    test[np.flatnonzero(g.train_mask)[:3]] = True
    opts = dict(model="sage", sampler="sage", batch_size=8) if sampler else {}
    with pytest.raises(GridGnnError, match="the graph's train and test masks share 3 vertices"):
        gridgnn.train(graph=g.with_(test_mask=test), epochs=1, quiet=True, **opts)
    gridgnn.train(graph=g, epochs=1, quiet=True, early_stop=1, **opts)  # disjoint, validated: trains
    # --early-stop with no validation vertex to watch (it never stopped, and --keep best kept the last epoch)
    with pytest.raises(GridGnnError, match="--early-stop 2 watches the validation accuracy; the graph has no "
                                           "labelled validation vertices"):
        gridgnn.train(graph=g.with_(val_mask=np.zeros(g.n, bool)), epochs=1, quiet=True, early_stop=2, **opts)
