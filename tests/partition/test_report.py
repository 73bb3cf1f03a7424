"""``gridgnn partition`` glue: printed table, the partition file and FILE.json, reusable partitions."""
from __future__ import annotations

import argparse
import json

import numpy as np
import pytest

from gridgnn.errors import GridGnnError
from gridgnn.graph.spec import load_graph
from gridgnn.partition.partitioners import load_partition_file
from gridgnn.partition.quality import REPORT_KEYS, quality_report, volume_matrix
from gridgnn.commands.partition import add_partition_arguments, format_report, run_partition_command

SPEC = "synthetic:sbm?n=600&classes=4&avg_degree=8&features=4"


def parse(argv):
    return add_partition_arguments(argparse.ArgumentParser()).parse_args(argv)


@pytest.mark.parametrize("method", ["random", "metis", "balanced"])
def test_partition_command_writes_file_and_report(tmp_path, capsys, method):
    out = tmp_path / f"{method}.part"
    args = parse(["--data", SPEC, "--parts", "4", "--method", method, "--out", str(out), "--feature-size", "64"])
    assert run_partition_command(args) == 0
    printed = capsys.readouterr().out
    assert "max send per part" in printed and "send imbalance" in printed and f"wrote {out}" in printed
    lines = out.read_text().splitlines()
    graph = load_graph(SPEC, seed=0)
    assert len(lines) == graph.n
    part = np.array([int(x) for x in lines])
    rep = json.loads((tmp_path / f"{method}.part.json").read_text())
    for key in REPORT_KEYS:
        assert key in rep, key
    # the JSON volumes are those of the written partition (recomputed from scratch), bytes = rows × f × 4
    fresh = quality_report(graph.csr(), part, 4, f=64)
    for key in ("edge_cut", "total_volume_rows", "max_send_rows", "max_recv_rows", "messages", "send_imbalance",
                "nnz_imbalance"):
        assert rep[key] == pytest.approx(fresh[key]), key
    assert rep["max_send_bytes"] == rep["max_send_rows"] * 64 * 4
    assert rep["seconds"] >= 0 and rep["peak_rss_bytes"] > 0 and rep["method"] == method
    vol = volume_matrix(graph.csr(), part, 4)
    assert rep["send_rows"] == vol.sum(axis=1).tolist() and rep["recv_rows"] == vol.sum(axis=0).tolist()
    # the per-part nonzeros beside the graph's (one key each: the scalar once overwrote the list)
    assert rep["part_nnz"] == fresh["part_nnz"] and sum(rep["part_nnz"]) == rep["nnz"] == graph.csr().nnz
    # reusable: the file loads back as the same partition
    rp = load_partition_file(out, graph.n, 4)
    np.testing.assert_array_equal(rp.part_of_old(), part)


def test_partition_command_without_out_only_prints(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert run_partition_command(parse(["--data", SPEC, "--parts", "3", "--method", "metis"])) == 0
    assert "total volume" in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []


def test_directed_graph_reports_backward_volume(tmp_path, capsys):
    edges = tmp_path / "g.txt"
    rng = np.random.default_rng(0)
    src, dst = rng.integers(0, 80, 300), rng.integers(0, 80, 300)
    edges.write_text("".join(f"{a} {b}\n" for a, b in zip(src, dst) if a != b))
    out = tmp_path / "d.part"
    args = parse(["--data", f"edgelist:{edges}?directed=1", "--parts", "3", "--method", "metis", "--out", str(out)])
    assert run_partition_command(args) == 0
    rep = json.loads((tmp_path / "d.part.json").read_text())
    graph = load_graph(f"edgelist:{edges}?directed=1")
    part = np.array([int(x) for x in out.read_text().split()])
    bwd = volume_matrix(graph.csr().T, part, 3)
    assert rep["backward"]["total_volume_rows"] == int(bwd.sum())
    assert rep["backward"]["max_send_rows"] == int(bwd.sum(axis=1).max())
    assert "backward" in capsys.readouterr().out


def test_partition_command_errors_are_clear(tmp_path):
    with pytest.raises(GridGnnError, match="unknown partition method 'kway'"):
        run_partition_command(parse(["--data", SPEC, "--parts", "2", "--method", "kway"]))
    with pytest.raises(GridGnnError, match="positive"):
        run_partition_command(parse(["--data", SPEC, "--parts", "0", "--method", "metis"]))
    with pytest.raises(GridGnnError, match=r"--seed must be in \[0, "):  # one line, not NumPy's traceback
        run_partition_command(parse(["--data", SPEC, "--parts", "2", "--method", "random", "--seed", "-1"]))
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(GridGnnError, match="cannot write"):  # a parent that is a file cannot be created
        run_partition_command(parse(["--data", SPEC, "--parts", "2", "--method", "metis",
                                     "--out", str(blocker / "x.part")]))
    out = tmp_path / "missing" / "x.part"  # missing parent directories are created
    assert run_partition_command(parse(["--data", SPEC, "--parts", "2", "--method", "metis", "--out", str(out)])) == 0
    assert out.exists() and out.with_name("x.part.json").exists()


def test_format_report_is_a_table():
    graph = load_graph(SPEC)
    part = np.arange(graph.n) % 2
    rep = quality_report(graph.csr(), part, 2, f=128)
    text = format_report(rep)
    assert "MB (f=128)" in text and "messages" in text
    assert str(rep["max_send_rows"]) in text
