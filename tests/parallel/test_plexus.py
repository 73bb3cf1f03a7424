"""Plexus 3D tensor parallelism on every x*y*z factorization of P: 2, 3 (with blocked aggregation) and 4 layers (the shard rotation wraps), single and double permutation: logits and gradients equal the serial reference (float64, 1e-5), and the bytes of every
collective on every rank equal the byte model of gridgnn.planner.primitives (the traced primitives summed).
The ``plexus-rs`` cases (their names start with ``plexus-`` too) run the same checks on every shape; a model that
calls a primitive plexus-rs does not lay out is refused on every rank."""
from gridgnn.testing import Refusal

from ._fidelity import check_against_serial, check_bytes, check_each, check_schedule

PREFIX = "plexus-"


def test_logits_and_gradients_equal_serial(dist_results):
    check_each(dist_results, PREFIX, check_against_serial)


def test_measured_bytes_equal_volume_model(dist_results):
    check_each(dist_results, PREFIX, check_bytes)


def test_each_rank_runs_the_schedule_the_byte_model_sums(dist_results):
    check_each(dist_results, PREFIX, check_schedule)


def test_plexus_rs_refuses_what_it_does_not_lay_out(dist_results):
    _, res = dist_results
    _, per_rank = res["refused-gat-plexus-rs"]
    assert all(isinstance(r, Refusal) for r in per_rank)
    assert len({r.message for r in per_rank}) == 1
    assert "plexus-rs lays out linear, spmm, add_bias" in per_rank[0].message and "use --algo plexus" in \
        per_rank[0].message
