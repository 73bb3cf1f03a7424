"""Every layout family's cases (tests/parallel/conftest.py, one spawned group per P ∈ {1, 2, 4, 8}), by the prefix of
their names: logits, every parameter's gradient and the loss equal the serial reference on every rank (float64,
1e-5), the bytes of every collective on every rank equal the byte model of :mod:`gridgnn.planner.primitives` (the
traced primitives summed over the family's records), and each rank runs the schedule the model sums.

* ``1d-``: 1D (CAGNET Alg. 1) and 1D sparsity-aware (ICPP'24 Alg. 1); ``1.5d-``: 1.5D and 1.5D sparsity-aware,
  every c dividing P (tests/parallel/test_1d.py, test_15d.py: the sparsity-aware volume bounds).
* ``2d-``: 2D (CAGNET Alg. 3, SUMMA + partial SUMMA) on every pr × pc factorization of P.
* ``3d-``: 3D (CAGNET Split-3D-SpMM) on every x·y·z factorization of P, non-cubic included.
* ``plexus-``: Plexus and plexus-rs (test_plexus.py).
* ``edge-``: edge-parallel training, every built-in model (test_edge.py).
"""
import pytest

from ._fidelity import check_against_serial, check_bytes, check_each, check_schedule

PREFIXES = ("1d-", "1.5d-", "2d-", "3d-", "plexus-", "edge-")


@pytest.mark.parametrize("prefix", PREFIXES)
def test_logits_and_gradients_equal_serial(dist_results, prefix):
    check_each(dist_results, prefix, check_against_serial)


@pytest.mark.parametrize("prefix", PREFIXES)
def test_measured_bytes_equal_volume_model(dist_results, prefix):
    check_each(dist_results, prefix, check_bytes)


@pytest.mark.parametrize("prefix", PREFIXES)
def test_each_rank_runs_the_schedule_the_byte_model_sums(dist_results, prefix):
    check_each(dist_results, prefix, check_schedule)
