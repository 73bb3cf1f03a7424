"""1D (CAGNET Alg. 1) and 1D sparsity-aware (ICPP'24 Alg. 1): the sparsity-aware fetch receives no more than the
oblivious broadcasts (their equality with serial and the byte model: test_layouts.py, prefix ``1d-``)."""
from ._fidelity import check_sa_receives_no_more


def test_sparsity_aware_moves_no_more_than_oblivious(dist_results):
    check_sa_receives_no_more(dist_results, "1d-sa", "1d")
