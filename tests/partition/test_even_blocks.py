"""Even blocks written three ways: the bounds (even_bounds), one block's range (even_range) and the sizes
(even_sizes) — the byte and memory models read the last two at P = 1024 where building the bounds per rank cost
seconds; they must agree with the bounds for every size, including fewer vertices than blocks."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from gridgnn.errors import GridGnnError
from gridgnn.partition.layout import block_range, even_bounds, even_range, even_sizes


@settings(max_examples=200, deadline=None)
@given(n=st.integers(0, 5000), parts=st.integers(1, 300))
def test_range_and_sizes_equal_the_bounds(n, parts):
    bounds = even_bounds(n, parts)
    assert even_sizes(n, parts) == tuple(int(d) for d in np.diff(bounds))
    for k in {0, parts // 2, parts - 1}:
        assert even_range(n, parts, k) == block_range(bounds, k)


def test_a_block_outside_the_parts_is_refused():
    with pytest.raises(IndexError):
        even_range(10, 3, 3)
    with pytest.raises(IndexError):
        even_range(10, 3, -1)
    with pytest.raises(GridGnnError):
        even_sizes(10, 0)
