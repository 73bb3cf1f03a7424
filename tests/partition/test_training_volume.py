"""Partitions in training (issue: sparsity-aware communication with graph partitioners): with every
partitioner, 1d-sa / 1.5d-sa training equals the serial reference, and the bytes each rank sends in the
forward all-to-allv equal the partition report's send volume (rows × aggregated width × 8 bytes)."""
import json
import subprocess
import sys

import numpy as np
import pytest

from gridgnn.distributed.launch import launch
from gridgnn.graph.spec import load_graph
from gridgnn.partition.partitioners import load_partition_file, partition_graph
from gridgnn.partition.quality import quality_report, volume_matrix
from gridgnn.testing import Case, distributed_worker

from ..parallel._fidelity import check_against_serial

SPEC = "synthetic:sbm?n=300&classes=4&avg_degree=6&features=12"
METHODS = ("random", "metis", "metis-vol", "hypergraph", "balanced")
DIMS = [12, 8, 4]  # aggregated widths: min(12, 8) = 8 and min(8, 4) = 4 (see GCN layer order)
P = 4


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    graph = load_graph(SPEC)
    out = tmp_path_factory.mktemp("part") / "metis4"
    r = subprocess.run([sys.executable, "-m", "gridgnn", "partition", "--data", SPEC, "--parts", str(P), "--method",
                        "metis", "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    parts = {m: partition_graph(graph, P, m, seed=0) for m in METHODS if m != "random"}
    parts["file"] = load_partition_file(str(out), graph.n, P)
    cases = [(m, Case(graph=graph, algo="1d-sa", dims=DIMS, partition=rp, dropout=0.3, seed=2))
             for m, rp in parts.items()]
    cases.append(("random", Case(graph=graph, algo="1d-sa", dims=DIMS, partition="random", dropout=0.3, seed=2)))
    cases.append(("1.5d-metis", Case(graph=graph, algo="1.5d-sa", dims=DIMS, replication=2,
                                     partition=partition_graph(graph, P // 2, "metis", seed=0), dropout=0.3, seed=2)))
    res = launch(distributed_worker, P, [c for _, c in cases], device="cpu", collect=True)
    report = json.loads(out.with_name(out.name + ".json").read_text())
    return graph, {name: (case, [res[r][k] for r in range(P)]) for k, (name, case) in enumerate(cases)}, report


def test_training_with_each_partition_equals_serial(runs):
    _, res, _ = runs
    for name, (case, per_rank) in res.items():
        try:
            check_against_serial(case, per_rank)
        except AssertionError as e:
            raise AssertionError(f"{name}: {e}") from e


@pytest.mark.parametrize("name", ["metis", "metis-vol", "hypergraph", "balanced", "file"])
def test_measured_send_bytes_equal_partition_volume(runs, name):
    graph, res, _ = runs
    case, per_rank = res[name]
    part = case.partition.part_of_old()
    vol = volume_matrix(graph.csr(), part, P)  # [q, p] = rows q sends to p
    send_rows = vol.sum(axis=1) - np.diag(vol)
    width = sum(min(a, b) for a, b in zip(DIMS[:-1], DIMS[1:]))
    for r in per_rank:
        sent = r.comm["fwd.alltoallv"][0]
        assert sent == send_rows[r.rank] * width * 8, (r.rank, sent, send_rows)


def test_report_file_matches_measured_training_bytes(runs):
    """The JSON that ``gridgnn partition --out`` writes predicts the busiest and the mean sender."""
    graph, res, report = runs
    _, per_rank = res["file"]
    width = sum(min(a, b) for a, b in zip(DIMS[:-1], DIMS[1:]))
    rows = np.array([r.comm["fwd.alltoallv"][0] / (width * 8) for r in per_rank])
    assert rows.max() == report["max_send_rows"]
    assert abs(rows.mean() - report["mean_send_rows"]) < 1e-9
    rep = quality_report(graph.csr(), res["file"][0].partition.part_of_old(), P)
    assert rep["total_volume_rows"] == rows.sum()


def test_partitioned_sparsity_aware_moves_fewer_bytes_than_random(runs):
    """SBM has locality: every graph partitioner beats the random permutation in total volume."""
    _, res, _ = runs
    total = {n: sum(r.comm["fwd.alltoallv"][0] for r in per_rank) for n, (_, per_rank) in res.items()}
    for m in ("metis", "metis-vol", "hypergraph", "balanced"):
        assert total[m] < total["random"], total
