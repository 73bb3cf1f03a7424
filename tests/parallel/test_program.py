"""A primitive's program (gridgnn.parallel.program): the engine takes its steps in order and must run them all; the
planner's byte model sums the same steps. The measured-bytes tests of every family check that the records agree
with what the ranks moved; these check the mechanism that keeps the engine and the program one list."""
import numpy as np
import pytest
import scipy.sparse as sp
import torch

from gridgnn.distributed.accounting import Transfer
from gridgnn.parallel import blockrow
from gridgnn.parallel.blockrow import BlockRowGraph
from gridgnn.parallel.program import Program, needs_grad
from gridgnn.parallel.program import PrimitiveCall
from gridgnn.partition import RowPartition


def _rec(axis="rep"):
    return Transfer("allreduce", axis, 2, 0, rows=3)


def test_take_in_order_and_done():
    prog = Program()
    prog.fwd("fetch", [_rec(), _rec()], 4)
    prog.fwd("row_all", _rec(), 4, exact=True)
    prog.bwd("row_all", [], 4)
    assert len(prog.take("fwd", "fetch")) == 2
    with pytest.raises(RuntimeError, match="skipped row_all"):
        prog.done("fwd")
    assert prog.take_one("fwd", "row_all") == _rec()
    prog.done("fwd")
    with pytest.raises(RuntimeError, match=r"ran 'push' \(bwd\) where its program says 'row_all'"):
        prog.take("bwd", "push")
    assert list(prog.take("bwd", "row_all")) == []
    with pytest.raises(RuntimeError, match="says 'nothing more'"):
        prog.take("bwd", "row_all")


def test_records_are_made_when_read_and_priced_per_unit():
    made = []
    prog = Program()
    prog.fwd("fetch", lambda: made.append(1) or [_rec()], 6)
    prog.fwd("row_all", _rec(), 6, "key", exact=True)
    prog.fwd("mask", _rec(), 1, "byte")
    assert made == []  # a planner that sums a step's bytes another way never builds its records
    fetch, keys, mask = prog.steps
    assert list(fetch.records) == [_rec()] and made == [1]
    assert (fetch.row_bytes(4), keys.row_bytes(4), mask.row_bytes(4)) == (24, 48, 1)


def test_needs_grad_follows_autograd():
    a, b = torch.ones(2, requires_grad=True), torch.ones(2)
    assert needs_grad(a, b, None) == (True, False, False)
    with torch.no_grad():
        assert needs_grad(a, b) == (False, False)


def _graph():
    a = sp.random(9, 9, density=0.4, random_state=3, format="csr") + sp.eye(9, format="csr")
    return BlockRowGraph(None, a.tocsr(), RowPartition.identity(9, 1), 0)


@pytest.mark.parametrize("grads", [(True, True), (False, True), (True, False)])
def test_the_engine_runs_its_program_whole(grads):
    g = _graph()
    values = g.gcn_values.clone().requires_grad_(grads[0])
    x = torch.randn(9, 3, dtype=torch.float64, requires_grad=grads[1])
    y = g.spmm_sum(values, x).sum()
    y.backward(retain_graph=True)  # the engine checks each phase against its program
    y.backward()  # a second backward through the retained graph runs the program's backward again


@pytest.mark.parametrize("change", ["extra", "missing"])
def test_an_engine_and_a_program_that_disagree_fail_on_the_first_call(monkeypatch, change):
    real = blockrow.program

    def changed(call, sched, *, sparsity_aware):
        prog = real(call, sched, sparsity_aware=sparsity_aware)
        if change == "extra":
            prog.fwd("row_all", [], 1)
        else:
            prog.steps = [s for s in prog.steps if not (s.phase == "fwd" and s.name == "row_all")]
        return prog

    monkeypatch.setattr(blockrow, "program", changed)
    g = _graph()
    x = torch.randn(9, 3, dtype=torch.float64)
    with pytest.raises(RuntimeError, match="skipped row_all" if change == "extra" else "says 'nothing more'"):
        g.spmm_sum(g.gcn_values, x)


def test_the_block_row_program_of_each_primitive():
    """The steps a reviewer reads in the family file's table, per primitive and gradient (the sparsity-aware
    backward reads the halo its forward kept)."""
    g = _graph()

    def names(name, grads, sa=False, width=4, heads=2):
        prog = blockrow.program(PrimitiveCall(name, 0, width, heads, grads), g.schedule, sparsity_aware=sa)
        return [(s.phase, s.name, s.cols) for s in prog.steps]

    assert names("spmm", (True, True)) == [("fwd", "fetch", 4), ("fwd", "row_all", 4), ("bwd", "fetch", 4),
                                           ("bwd", "push", 4), ("bwd", "row_all", 4)]
    assert names("spmm", (True, True), sa=True) == [("fwd", "fetch", 4), ("fwd", "row_all", 4),
                                                    ("bwd", "push", 4), ("bwd", "row_all", 4)]
    assert names("sddmm_add", (True, True)) == [("fwd", "fetch", 2), ("bwd", "row_all", 2), ("bwd", "push", 2),
                                                ("bwd", "row_all", 2)]
    assert names("linear", (True, True)) == []
    assert np.array_equal([s.exact for s in blockrow.program(PrimitiveCall("edge_softmax", 0, 2, 2, (True,)),
                                                             g.schedule, sparsity_aware=False).steps],
                          [True, False, False])
    with pytest.raises(ValueError, match="no program for primitive 'gather'"):
        names("gather", (True,))
