"""1.5D (CAGNET Alg. 2) and 1.5D sparsity-aware (ICPP'24 Alg. 2), every c dividing P, equal the serial reference; bytes equal the model."""
from ._fidelity import check_against_serial, check_bytes, check_each, check_sa_receives_no_more, check_schedule

PREFIX = "1.5d-"


def test_logits_and_gradients_equal_serial(dist_results):
    check_each(dist_results, PREFIX, check_against_serial)


def test_measured_bytes_equal_volume_model(dist_results):
    check_each(dist_results, PREFIX, check_bytes)


def test_each_rank_runs_the_schedule_the_byte_model_sums(dist_results):
    check_each(dist_results, PREFIX, check_schedule)


def test_sparsity_aware_moves_no_more_than_oblivious(dist_results):
    check_sa_receives_no_more(dist_results, "1.5d-sa", "1.5d")
