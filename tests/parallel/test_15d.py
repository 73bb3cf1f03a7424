"""1.5D (CAGNET Alg. 2) and 1.5D sparsity-aware (ICPP'24 Alg. 2), every c dividing P, equal the serial reference; bytes equal the model."""
import pytest

from ._fidelity import check_against_serial, check_bytes


def _cases(dist_results):
    P, res = dist_results
    sel = {k: v for k, v in res.items() if k.startswith("1.5d-")}
    assert sel
    return P, sel


def test_logits_and_gradients_equal_serial(dist_results):
    P, sel = _cases(dist_results)
    for name, (case, per_rank) in sel.items():
        try:
            check_against_serial(case, per_rank)
        except AssertionError as e:
            raise AssertionError(f"P={P} {name}: {e}") from e


def test_measured_bytes_equal_volume_model(dist_results):
    P, sel = _cases(dist_results)
    for name, (case, per_rank) in sel.items():
        try:
            check_bytes(case, per_rank, P)
        except AssertionError as e:
            raise AssertionError(f"P={P} {name}: {e}") from e


def test_sparsity_aware_receives_no_more_than_oblivious(dist_results):
    P, sel = _cases(dist_results)
    for name, (case, per_rank) in sel.items():
        if not name.startswith("1.5d-sa"):
            continue
        twin = sel[name.replace("1.5d-sa", "1.5d", 1)][1]
        sa = sum(v[1] for r in per_rank for k, v in r.comm.items() if k.startswith(("fwd.", "bwd.")))
        ob = sum(v[1] for r in twin for k, v in r.comm.items() if k.startswith(("fwd.", "bwd.")))
        assert sa <= ob, name  # NnzCols(i, q) is a subset of block q, per rank and stage
