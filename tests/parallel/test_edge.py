"""Edge-parallel training (``--algo edge``, :mod:`gridgnn.parallel.edge`) on P ∈ {1, 2, 4, 8}: its cases cover every
built-in model (test_layouts.py checks them, prefix ``edge-``, equal to serial — logits, every parameter's gradient
and the loss, float64, 1e-5 — with the bytes of its byte model and the schedule the model sums), and the edges are
split by count (no rank holds more than one edge above another)."""
import numpy as np

from gridgnn.graph import gcn_normalize
from gridgnn.parallel.edge import edge_split, local_edges

from ._fidelity import selected
from .conftest import GRAPHS


def test_every_model_case_ran(dist_results):
    P, sel = selected(dist_results, "edge-")  # every P runs some; P = 4 runs every built-in model
    models = {case.model for case, _ in sel.values()}
    assert P != 4 or models >= {"gcn", "gat", "agnn", "va", "sage", "gine", "gatv2", "rgcn"}, models


def test_the_ranks_hold_every_edge_once_split_by_count():
    mat = gcn_normalize(GRAPHS["directed"])
    for P in (1, 2, 3, 4, 8, 200):  # 200: more ranks than edges, some hold none
        parts = [local_edges(mat, P, r) for r in range(P)]
        sizes = np.array([p.nnz for p in parts])
        assert sizes.sum() == mat.nnz and sizes.max() - sizes.min() <= 1
        assert np.array_equal(np.diff(edge_split(mat.nnz, P)), sizes)
        assert abs(sum(parts) - mat).max() == 0  # together, exactly the matrix
