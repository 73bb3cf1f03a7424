"""AGNN and vanilla attention on the primitives of every algorithm (1D, 1D-sa, 1.5D, 1.5D-sa with every c dividing P
and uneven blocks; 2D and 3D on every grid shape; Plexus on every x·y·z factorization, single and double
permutation; directed and undirected graphs with isolated vertices, dropout): logits and every parameter gradient
(β included) equal serial in float64; measured bytes equal the sum of the primitives' byte models per rank and
collective (the row norms and β's gradient on Plexus included)."""
import pytest

from ._fidelity import check_against_serial, check_bytes, check_each


@pytest.mark.parametrize("model", ["agnn", "va"])
def test_logits_and_gradients_equal_serial(dist_results, model):
    check_each(dist_results, f"{model}-", check_against_serial)


@pytest.mark.parametrize("model", ["agnn", "va"])
def test_measured_bytes_equal_primitive_model(dist_results, model):
    check_each(dist_results, f"{model}-", check_bytes)


@pytest.mark.parametrize("aggr", ["mean", "sum", "max", "min"])
def test_sage_equals_serial_and_bytes_equal_model(dist_results, aggr):
    """GraphSAGE: every aggregation equals serial (max/min: the same winners, ties to the smallest original id,
    whatever the permutation and P), bytes equal the model (the ⊕ and key all-reduces of 1.5D included)."""
    check_each(dist_results, f"sage-{aggr}-", check_against_serial)
    check_each(dist_results, f"sage-{aggr}-", check_bytes)
