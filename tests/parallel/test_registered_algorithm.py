"""An algorithm is one file plus its registration: a 1D variant registered here — its plan built by this file's
function, nothing edited elsewhere — trains every built-in model equal to serial (logits and gradients, float64) and
moves exactly the bytes its family's byte model says, on four processes."""
import pytest

from gridgnn.distributed.launch import launch
from gridgnn.parallel import Algorithm, algorithm, register
from gridgnn.parallel.base import RowBlockPlan, make_graph
from gridgnn.testing import Case, distributed_worker

from ._fidelity import check_against_serial, check_bytes, check_each
from .conftest import GRAPHS, N, skewed_partition

P = 4


def build_reversed_1d(spec, comm, source, dims, *, rows, dtype, device, **_):
    """CAGNET's 1D with the stage loop run backwards: every rank fetches the source blocks from the last to the
    first (another summation order, the same data movement)."""
    grid = comm.grid
    p = grid.size("p")
    graph = make_graph(comm, source, rows, grid.rank("p"), fetch_axis="p", stages=list(range(p))[::-1],
                       reduce_axis=None, sparsity_aware=False, dtype=dtype, device=device)
    return RowBlockPlan(spec.name, graph, rows, grid.rank("p"), "p", comm=comm, source=source)


REVERSED = register(Algorithm("1d-reversed", "1d", "block-row", paper="a test's own", build=build_reversed_1d))


def worker(ctx, cases):
    """Importing this module (as the spawned ranks do to find this function) registers the algorithm."""
    return distributed_worker(ctx, cases)


@pytest.fixture(scope="module")
def results():
    cases = {}
    for k, (model, options) in enumerate((("gcn", {}), ("gat", {"heads": 2}), ("sage", {"aggr": "max"}),
                                          ("va", {}))):
        gname = tuple(GRAPHS)[k % 2]
        cases[f"{model}-{gname}"] = Case(graph=GRAPHS[gname], algo="1d-reversed", dims=[7, 4, 3], model=model,
                                         options=options, partition=skewed_partition(N, P, 5), dropout=0.3, seed=4,
                                         epoch=1)
    out = launch(worker, P, list(cases.values()), device="cpu", collect=True)
    return {name: (case, [out[r][i] for r in range(P)]) for i, (name, case) in enumerate(cases.items())}


def test_a_registered_algorithm_equals_serial_with_modelled_bytes(results):
    assert algorithm("1d-reversed") is REVERSED
    check_each((P, results), "", check_against_serial)
    check_each((P, results), "", check_bytes)


def test_a_name_is_registered_once():
    with pytest.raises(ValueError, match="already registered"):
        register(Algorithm("1d-reversed", "1d", "block-row", paper="another"))
    assert register(REVERSED) is REVERSED


def test_the_plan_is_the_registered_builders():
    """``build_plan`` hands a registered algorithm to its own builder (here: one process, one block)."""
    from gridgnn.distributed import NullComm
    from gridgnn.train.rank_layout import build_rank, make_source

    g = GRAPHS["directed"]
    source, rows = make_source(g, "1d-reversed", 1)
    plan, data = build_rank(g, "1d-reversed", NullComm(), [7, 3], source=source, rows=rows)
    assert plan.name == "1d-reversed" and plan.dgraph.stages == [0] and data.x.shape == (N, 7)
