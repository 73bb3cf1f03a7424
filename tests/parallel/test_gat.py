"""GAT on the primitives of every algorithm (1D, 1D-sa, 1.5D, 1.5D-sa with every c dividing P and uneven blocks;
2D and 3D on every grid shape; Plexus on every x·y·z factorization, single and double permutation; directed and
undirected graphs with isolated vertices, input and attention dropout): logits and every parameter gradient
equal serial GAT in float64; measured bytes equal the sum of the primitives' byte models per rank and
collective."""
from ._fidelity import check_against_serial, check_bytes, check_each

PREFIX = "gat-"


def test_logits_and_gradients_equal_serial(dist_results):
    check_each(dist_results, PREFIX, check_against_serial)


def test_measured_bytes_equal_primitive_model(dist_results):
    check_each(dist_results, PREFIX, check_bytes)
