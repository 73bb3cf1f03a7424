"""The issue's acceptance comparison: R-MAT (Graph500 parameters), scale 14, 16 parts.

With nnz per part within 1.10× of the mean for every graph partitioner, ``balanced`` must leave the busiest
sender with ≤ 0.9× the rows that ``metis`` leaves it, at a total volume ≤ 1.02× of METIS' (ICPP'24 §5: the
all-to-allv time is set by the maximum, not the average).
"""
from __future__ import annotations

import numpy as np
import pytest

from gridgnn.graph.synthetic import rmat_graph
from gridgnn.partition.partitioners import partition_vector, vertex_weights
from gridgnn.partition.quality import part_loads, quality_report

K = 16


@pytest.fixture(scope="module")
def rmat14():
    return rmat_graph(14, edge_factor=16, seed=0).csr()


@pytest.fixture(scope="module")
def reports(rmat14):
    out = {}
    for method in ("random", "metis", "metis-vol", "hypergraph", "balanced"):
        part = partition_vector(rmat14, K, method, seed=0)
        out[method] = (part, quality_report(rmat14, part, K))
    return out


def test_balanced_cuts_the_maximum_send_volume_of_metis(reports):
    metis = reports["metis"][1]
    bal = reports["balanced"][1]
    assert bal["max_send_rows"] <= 0.9 * metis["max_send_rows"], (bal["max_send_rows"], metis["max_send_rows"])
    assert bal["total_volume_rows"] <= 1.02 * metis["total_volume_rows"]
    # and the receive side does not get worse than METIS' either
    assert bal["max_recv_rows"] <= metis["max_recv_rows"]


@pytest.mark.parametrize("method", ["metis", "metis-vol", "hypergraph", "balanced"])
def test_graph_partitioners_balance_nnz_within_ten_percent(rmat14, reports, method):
    part, rep = reports[method]
    nnz, _ = part_loads(rmat14, part, K)
    assert nnz.max() <= 1.10 * nnz.mean(), (method, nnz.max() / nnz.mean())
    w = np.bincount(part, weights=vertex_weights(rmat14), minlength=K)
    assert w.max() <= 1.10 * w.mean()
    assert rep["nnz_imbalance"] == pytest.approx(nnz.max() / nnz.mean() - 1)


def test_random_balances_rows_not_nnz(rmat14, reports):
    # the oblivious default gives equal rows; on a skewed graph its nnz balance is much worse (documented)
    part, rep = reports["random"]
    assert rep["vertex_imbalance"] < 1e-3
    assert rep["total_volume_rows"] > reports["metis"][1]["total_volume_rows"]


def test_every_partition_is_valid(rmat14, reports):
    for method, (part, _) in reports.items():
        assert part.shape == (rmat14.shape[0],)
        assert np.bincount(part, minlength=K).min() >= 1, method
        assert part.min() >= 0 and part.max() < K
