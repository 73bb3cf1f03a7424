"""A product whose input is a dropout's output recomputed by blocks of rows (gridgnn.ops.masked.RowBlocks), in every
family's ``linear`` (tests/parallel/conftest.py, ``recompute_block_cases``, P = 2): test_layouts holds each to the
serial reference made whole and to its byte model; here, every rank did sum a weight gradient by blocks."""
import pytest

from .conftest import recompute_block_cases, results


@pytest.fixture(params=(2,), ids=lambda p: f"P{p}")
def dist_results(request):  # (the P group of tests/parallel where the cases exist: their spawned group runs once)
    return request.param, results(request.param)


@pytest.mark.parametrize("name", [name for name, _ in recompute_block_cases(2)])
def test_every_rank_summed_a_weight_gradient_by_blocks(dist_results, name):
    _, per_rank = dist_results[1][name]
    assert [r.blocks_recomputed > 0 for r in per_rank] == [True, True], [r.blocks_recomputed for r in per_rank]
