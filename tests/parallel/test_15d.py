"""1.5D (CAGNET Alg. 2) and 1.5D sparsity-aware (ICPP'24 Alg. 2), every c dividing P: the sparsity-aware fetch
receives no more than the oblivious broadcasts (their equality with serial and the byte model: test_layouts.py)."""
from ._fidelity import check_sa_receives_no_more


def test_sparsity_aware_moves_no_more_than_oblivious(dist_results):
    check_sa_receives_no_more(dist_results, "1.5d-sa", "1.5d")
