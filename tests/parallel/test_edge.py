"""Edge-parallel training (``--algo edge``, :mod:`gridgnn.parallel.edge`) on P ∈ {1, 2, 4, 8}: every built-in model
equals the serial reference (logits, every parameter's gradient and the loss, float64, 1e-5) on every rank, the
bytes every rank moves equal the byte model, each rank runs the schedule the model sums, and the edges are split
by count (no rank holds more than one edge above the mean)."""
import numpy as np

from gridgnn.graph import gcn_normalize
from gridgnn.parallel.edge import edge_split, local_edges

from ._fidelity import check_against_serial, check_bytes, check_each, check_schedule, selected
from .conftest import GRAPHS

PREFIX = "edge-"


def test_logits_and_gradients_equal_serial(dist_results):
    check_each(dist_results, PREFIX, check_against_serial)


def test_measured_bytes_equal_volume_model(dist_results):
    check_each(dist_results, PREFIX, check_bytes)


def test_each_rank_runs_the_schedule_the_byte_model_sums(dist_results):
    check_each(dist_results, PREFIX, check_schedule)


def test_every_model_case_ran(dist_results):
    P, sel = selected(dist_results, PREFIX)
    models = {case.model for case, _ in sel.values()}
    assert models >= {"gcn", "gat", "agnn", "va", "sage", "gine", "gatv2", "rgcn"}, models


def test_the_ranks_hold_every_edge_once_split_by_count():
    mat = gcn_normalize(GRAPHS["directed"])
    for P in (1, 2, 3, 4, 8, 200):  # 200: more ranks than edges, some hold none
        parts = [local_edges(mat, P, r) for r in range(P)]
        sizes = np.array([p.nnz for p in parts])
        assert sizes.sum() == mat.nnz and sizes.max() - sizes.min() <= 1
        assert np.array_equal(np.diff(edge_split(mat.nnz, P)), sizes)
        assert abs(sum(parts) - mat).max() == 0  # together, exactly the matrix
