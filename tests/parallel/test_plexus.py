"""Plexus 3D tensor parallelism on every x*y*z factorization of P: 2, 3 (with blocked aggregation) and 4 layers (the shard rotation wraps), single and double permutation, and plexus-rs on every shape, are checked equal to serial and to the byte model by
test_layouts.py (prefix ``plexus-``); here: a model that calls a primitive plexus-rs does not lay out is refused on
every rank."""
from gridgnn.testing import Refusal


def test_plexus_rs_refuses_what_it_does_not_lay_out(dist_results):
    _, res = dist_results
    _, per_rank = res["refused-gat-plexus-rs"]
    assert all(isinstance(r, Refusal) for r in per_rank)
    assert len({r.message for r in per_rank}) == 1
    assert "plexus-rs lays out linear, spmm, add_bias" in per_rank[0].message and "use --algo plexus" in \
        per_rank[0].message
