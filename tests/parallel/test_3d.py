"""3D (CAGNET Split-3D-SpMM) on every x*y*z factorization of P, non-cubic included: logits and gradients equal the serial reference (float64, 1e-5), and the bytes of every
collective on every rank equal the volume model of gridgnn.planner.volume (formulas in its docstrings)."""
from ._fidelity import check_against_serial, check_bytes


def _cases(dist_results):
    P, res = dist_results
    sel = {k: v for k, v in res.items() if k.startswith("3d-")}
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
