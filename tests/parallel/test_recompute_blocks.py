"""A product whose input is a dropout's output recomputed by blocks of rows (gridgnn.ops.masked.RowBlocks), in every
family's ``linear`` (tests/parallel/conftest.py, ``recompute_block_cases``, P = 2): test_layouts holds each to the
serial reference made whole and to its byte model; here, every rank did sum a weight gradient by blocks, of the input
block the memory model books its blocks from."""
import pytest

from gridgnn.parallel import algorithm, footprint
from gridgnn.partition.counts import pattern_of
from gridgnn.planner.memory import estimate_rank_memory
from gridgnn.testing import build_model
from gridgnn.train.rank_layout import make_source, model_trace

from .conftest import recompute_block_cases, results

NAMED = dict(recompute_block_cases(2))


@pytest.fixture(params=(2,), ids=lambda p: f"P{p}")
def dist_results(request):  # (the P group of tests/parallel where the cases exist: their spawned group runs once)
    return request.param, results(request.param)


@pytest.mark.parametrize("name", list(NAMED))
def test_every_rank_summed_a_weight_gradient_by_blocks_of_the_input_the_model_books(dist_results, name, monkeypatch):
    """Each rank's inputs recomputed by blocks have the shapes the memory model reads a product's input block off
    (``footprint.product_block``: Plexus' on the linear's layout, its row block and column block, not on the layer's
    output layout), which decide whether it books the input whole or a block, and the block's columns."""
    case = NAMED[name]
    _, per_rank = dist_results[1][name]
    assert [len(r.blocks_recomputed) > 0 for r in per_rank] == [True, True], [r.blocks_recomputed for r in per_rank]
    shape = algorithm(case.algo).mesh_shape(2, replication=case.replication, grid=case.grid)  # (the worker's mesh)
    source, rows = make_source(case.graph, case.algo, 2, shape=shape, method=case.partition, seed=case.seed)
    double = bool(getattr(source, "double", False))
    trace = model_trace(case.dims, lambda plan: build_model(case, plan), case.algo, double=double)
    for r, result in enumerate(per_rank):
        booked = set()

        def product_block(*args, _read=footprint.product_block):
            rows_cols = _read(*args)
            booked.add((round(rows_cols[0]), rows_cols[1]))
            return rows_cols

        monkeypatch.setattr(footprint, "product_block", product_block)
        estimate_rank_memory(case.algo, shape, case.graph.n, case.graph.nnz, case.dims, elem_bytes=8,
                             directed=case.graph.directed, double=double,
                             row_bounds=None if rows is None else rows.bounds,
                             pattern=pattern_of(source, layers=len(case.dims) - 1), dropout=case.dropout, trace=trace,
                             ranks=[r])
        assert set(result.blocks_recomputed) <= booked, (r, result.blocks_recomputed, booked)
