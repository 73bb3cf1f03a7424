"""1D (CAGNET Alg. 1) and 1D sparsity-aware (ICPP'24 Alg. 1) equal the serial reference; bytes equal the model."""
from ._fidelity import check_against_serial, check_bytes, check_each, selected

PREFIX = "1d-"


def test_logits_and_gradients_equal_serial(dist_results):
    check_each(dist_results, PREFIX, check_against_serial)


def test_measured_bytes_equal_volume_model(dist_results):
    check_each(dist_results, PREFIX, check_bytes)


def test_sparsity_aware_receives_no_more_than_oblivious(dist_results):
    """NnzCols(i, q) is a subset of block q, so every rank receives at most what the broadcasts bring."""
    P, sel = selected(dist_results, "1d-sa")
    for name, (case, per_rank) in sel.items():
        twin = dict(selected(dist_results, PREFIX)[1])[name.replace("1d-sa", "1d", 1)][1]
        for r_sa, r_ob in zip(per_rank, twin):
            sa = sum(v[1] for k, v in r_sa.comm.items() if k.startswith(("fwd.", "bwd.")))
            ob = sum(v[1] for k, v in r_ob.comm.items() if k.startswith(("fwd.", "bwd.")))
            assert sa <= ob, (name, r_sa.rank)
