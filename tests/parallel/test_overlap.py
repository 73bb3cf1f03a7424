"""``--overlap`` on the stage loops (1D and 1.5D, uneven blocks; 2D and 3D panel loops), the sparsity-aware
all-to-allv (1d-sa, 1.5d-sa) and the gradient buckets (P ∈ {1, 2, 4, 8}): each stage's (panel's) broadcasts started
while the previous one computes and each push finished during the next, the halo travelling while the block's own
rows compute, each gradient bucket summed while the backward goes on — gives the run without overlap bit for bit
(logits, every gradient, the loss) with the same collectives, bytes and calls on every rank, a bfloat16 wire
included, but for the one all-reduce (phase setup) in which the ranks agree on the parameters their backward
reaches, where a gradient is summed; and it equals the serial reference, with the bytes and calls (one all-reduce
per bucket) of the model."""
import numpy as np

from ._fidelity import check_against_serial, check_bytes, selected


def test_overlapped_stage_loops_equal_the_plain_ones_bit_for_bit(dist_results):
    P, on = selected(dist_results, "overlap-on-")
    _, off = selected(dist_results, "overlap-off-")
    assert set(on) and {k.replace("-on-", "-off-") for k in on} == set(off)
    for name, (case, ranks) in on.items():
        plain = off[name.replace("-on-", "-off-")][1]
        assert case.overlap and not off[name.replace("-on-", "-off-")][0].overlap
        for a, b in zip(ranks, plain):
            assert np.array_equal(a.logits, b.logits), name
            assert all(np.array_equal(g, h) for g, h in zip(a.grads, b.grads)), name
            assert a.loss == b.loss, name
            agreed = a.comm.get("setup.allreduce")
            node_sums = case.task == "node" and "grad.allreduce" in a.comm  # (link prediction starts none early)
            assert (agreed is not None) == node_sums and "setup.allreduce" not in b.comm, name
            if agreed is not None:  # an all-reduce of a count per parameter tensor, one per axis of the sum (3D: 2)
                assert agreed[2] == (2 if "-3d-" in name else 1) and agreed[0] == agreed[1] > 0, name
            step = {k: v for k, v in a.comm.items() if k != "setup.allreduce"}
            assert {k: v[:2] for k, v in step.items()} == {k: v[:2] for k, v in b.comm.items()}, name
            assert {k: v[2] for k, v in step.items()} == {k: v[2] for k, v in b.comm.items()}, name
        if case.wire is None:
            if case.grad_wire is None:  # (narrowed gradients: tests/parallel/test_wire.py)
                check_against_serial(case, ranks, P)
            check_bytes(case, ranks, P)
