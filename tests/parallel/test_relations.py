"""Relation types on every algorithm (R-GCN, PyG ``RGCNConv`` semantics) at P = 4 and 8: each rank reads its local
edges' per-relation mean weights by their original ids, whatever the partition, permutation and grid; logits and
every gradient (the basis coefficients' included, summed over the ranks that split the edges) equal serial in
float64, and the measured bytes equal the byte model (one aggregation per basis, or per relation without bases)."""
import pytest

from ._fidelity import check_against_serial, check_bytes, check_each, model_volume


@pytest.fixture
def relation_results(dist_results):
    if dist_results[0] not in (4, 8):
        pytest.skip("the relation-type cases run at P = 4 and 8")
    return dist_results


def test_rgcn_equals_serial_and_bytes_equal_model(relation_results):
    check_each(relation_results, "rgcn-", check_against_serial)
    check_each(relation_results, "rgcn-", check_bytes)


def test_aggregations_scale_with_bases_not_relations(relation_results):
    """With B bases a layer aggregates B times whatever R is: the 1D case (B = 2) and its twin with one weight per
    relation (R = 3) differ in forward aggregation bytes by 2 : 3 on the same layout. (The backward differs by more
    than the ratio: with bases the edge values depend on the trained coefficients, whose gradient reads the source
    rows again.)"""
    P, results = relation_results
    case = next(c for name, (c, _) in results.items() if name.startswith("rgcn-b2-1d-skewed"))
    with_bases = model_volume(case, P).bytes
    per_relation = model_volume(type(case)(**{**case.__dict__, "options": {"num_relations": 3, "bases": 0}}),
                                P).bytes
    keys = [k for k in with_bases if k.startswith("fwd")]
    assert keys, with_bases.keys()
    for k in keys:
        b, r = sum(with_bases[k][0]), sum(per_relation[k][0])
        assert 3 * b == 2 * r, (k, b, r)
