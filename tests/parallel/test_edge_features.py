"""Edge features on every algorithm (GINE and GATv2, PyG ``GINEConv`` / ``GATv2Conv(edge_dim=d)`` semantics), at
P = 4 and 8: each rank reads the
features of its local edges by their original ids, whatever the partition, permutation and grid; logits and every
gradient (the edge projection's included, summed over the ranks that split a row's edges) equal serial in float64,
and the measured bytes equal the byte model. Plexus, whose ``sddmm_add`` takes per-node scores, refuses GINE with
one line on every rank."""
import pytest

from gridgnn.testing import Refusal

from ._fidelity import check_against_serial, check_bytes, check_each


@pytest.fixture
def edge_results(dist_results):
    if dist_results[0] not in (4, 8):
        pytest.skip("the edge-feature cases run at P = 4 and 8")
    return dist_results


@pytest.mark.parametrize("model", ["gine", "gatv2"])
def test_equals_serial_and_bytes_equal_model(edge_results, model):
    check_each(edge_results, f"{model}-", check_against_serial)
    check_each(edge_results, f"{model}-", check_bytes)


def test_plexus_refuses_gine_on_every_rank(edge_results):
    _, per_rank = edge_results[1]["refused-gine-plexus"]
    assert all(isinstance(r, Refusal) for r in per_rank)
    assert len({r.message for r in per_rank}) == 1
    assert "sddmm_add on plexus takes per-node scores" in per_rank[0].message
