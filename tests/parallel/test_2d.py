"""2D (CAGNET Alg. 3, SUMMA + partial SUMMA) on every pr x pc factorization of P: logits and gradients equal the serial reference (float64, 1e-5), and the bytes of every
collective on every rank equal the byte model of gridgnn.planner.primitives (the traced primitives summed)."""
from ._fidelity import check_against_serial, check_bytes, check_each

PREFIX = "2d-"


def test_logits_and_gradients_equal_serial(dist_results):
    check_each(dist_results, PREFIX, check_against_serial)


def test_measured_bytes_equal_volume_model(dist_results):
    check_each(dist_results, PREFIX, check_bytes)
