"""A product whose input is a dropout's output recomputed by blocks of rows (gridgnn.ops.masked.RowBlocks), in every
family's ``linear`` (tests/parallel/conftest.py, ``recompute_block_cases``, P = 2): test_layouts holds each to the
serial reference made whole and to its byte model; here, every rank did sum a weight gradient by blocks."""
import pytest

from .conftest import recompute_block_cases, results


@pytest.mark.parametrize("name", [name for name, _ in recompute_block_cases(2)])
def test_every_rank_summed_a_weight_gradient_by_blocks(name):
    case, per_rank = results(2)[name]
    assert [r.blocks_recomputed > 0 for r in per_rank] == [True, True], [r.blocks_recomputed for r in per_rank]
