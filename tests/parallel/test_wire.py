"""``--comm-dtype`` on every layout family and P ∈ {2, 4, 8} (float64 training, conftest.wire_cases): the bytes of
every collective on every rank equal the byte model priced at the wire's element size (weights' gradients, sparse
panels, max/min and int64 keys at the training dtype's; ``--grad-dtype bfloat16``: the gradient buckets narrowed,
the forward exact), and the results stay within the wire's precision of the serial reference — a float32 wire within the fidelity tolerance itself, bfloat16/float16 within a few units of
their rounding (a defect of the mechanism — a piece in the wrong place, a sum in the narrow type — is off by
orders of magnitude more)."""
import numpy as np
import pytest

from gridgnn.testing import assemble, serial_case

from ._fidelity import RTOL, check_bytes, check_each, rel

PREFIX = "wire-"
#: unit roundoff of each wire type
UNIT = {"bfloat16": 2.0 ** -8, "float16": 2.0 ** -11}


def check_within_wire_precision(case, per_rank, P):
    ref = serial_case(case)
    logits = rel(assemble(per_rank, case.graph.n, case.dims[-1]), ref.logits)
    grads = []
    for r in per_rank:  # norm-wise over a rank's parameters (a gradient that cancels is relatively noisier)
        diff = np.concatenate([(g - gr[s]).ravel() for g, gr, s in zip(r.grads, ref.grads, r.grad_slices)])
        norm = np.concatenate([gr[s].ravel() for gr, s in zip(ref.grads, r.grad_slices)])
        grads.append(np.linalg.norm(diff) / np.linalg.norm(norm))
    if case.grad_wire is not None:  # only the gradients crossed narrowed: the forward is exact
        u = UNIT[case.grad_wire]
        assert logits < RTOL and 0 < max(grads) < 4 * u, (logits, grads)
    elif case.wire == "float32":
        assert logits < RTOL and max(grads) < RTOL, (logits, grads)
    else:
        u = UNIT[case.wire]
        assert logits < 8 * u and max(grads) < 32 * u, (logits, grads)  # within a few roundings
        assert logits + max(grads) > 0  # and narrowed: something did cross rounded


def _moves(dist_results):
    if dist_results[0] == 1:
        pytest.skip("one process moves nothing over the wire")


def test_narrowed_runs_stay_within_the_wire_precision_of_serial(dist_results):
    _moves(dist_results)
    check_each(dist_results, PREFIX, check_within_wire_precision)


def test_measured_bytes_equal_the_model_at_the_wire_size(dist_results):
    _moves(dist_results)
    check_each(dist_results, PREFIX, check_bytes)
