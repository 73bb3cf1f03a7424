"""Plexus 3D tensor parallelism on every x*y*z factorization of P: 2, 3 (with blocked aggregation) and 4 layers (the shard rotation wraps), single and double permutation: logits and gradients equal the serial reference (float64, 1e-5), and the bytes of every
collective on every rank equal the byte model of gridgnn.planner.primitives (the traced primitives summed)."""
from ._fidelity import check_against_serial, check_bytes, check_each, check_schedule

PREFIX = "plexus-"


def test_logits_and_gradients_equal_serial(dist_results):
    check_each(dist_results, PREFIX, check_against_serial)


def test_measured_bytes_equal_volume_model(dist_results):
    check_each(dist_results, PREFIX, check_bytes)


def test_each_rank_runs_the_schedule_the_byte_model_sums(dist_results):
    check_each(dist_results, PREFIX, check_schedule)
