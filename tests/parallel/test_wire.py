"""``--comm-dtype`` on every layout family and P ∈ {2, 4, 8} (float64 training, conftest.wire_cases): the bytes of
every collective on every rank equal the byte model priced at the wire's element size (weights' gradients, sparse
panels, max/min and int64 keys at the training dtype's; ``--grad-dtype bfloat16``: the gradient buckets narrowed,
the forward exact), and the results stay within the wire's precision of the serial reference — a float32 wire within the fidelity tolerance itself, bfloat16/float16 within a few units of
their rounding (a defect of the mechanism — a piece in the wrong place, a sum in the narrow type — is off by
orders of magnitude more)."""
import pytest

from ._fidelity import check_bytes, check_each, check_within_wire_precision

PREFIX = "wire-"


def _moves(dist_results):
    if dist_results[0] == 1:
        pytest.skip("one process moves nothing over the wire")


def test_narrowed_runs_stay_within_the_wire_precision_of_serial(dist_results):
    _moves(dist_results)
    check_each(dist_results, PREFIX, check_within_wire_precision)


def test_measured_bytes_equal_the_model_at_the_wire_size(dist_results):
    _moves(dist_results)
    check_each(dist_results, PREFIX, check_bytes)
