"""A family answers for itself (issue 43): the memory model is the family object's method, the byte model is looked
up along the family's class hierarchy, and a family with neither is refused in one line by the memory guard and the
planner, never priced as another family."""
import numpy as np
import pytest
import torch

from gridgnn.errors import GridGnnError
from gridgnn.graph.synthetic import sbm_graph
from gridgnn.nn import GCN
from gridgnn.parallel import registry
from gridgnn.parallel.blockrow import BlockRowFamily
from gridgnn.parallel.family import Algorithm, Family
from gridgnn.partition import RowPartition
from gridgnn.planner import primitives
from tests.planner._measure import gcn_estimate as estimate_rank_memory
from gridgnn.planner.simulate import step_volume


class BareFamily(Family):
    """A layout family of its own that states no memory model and registers no byte model."""

    name = "bare-test"

    def plan_class(self, spec):
        from gridgnn.parallel.blockrow import RowBlockPlan

        return RowBlockPlan

    def build(self, spec, comm, source, dims, **kw):
        raise AssertionError("never built here")

    def rules(self, spec, *, double=False):
        return BlockRowFamily().rules(spec, double=double)

    def vertex_blocks(self, spec, world, replication, shape):
        return world

    def grad_members(self, spec, world, replication, shape):
        return world


class MirroredRows(BlockRowFamily):
    """A family that lays data out as the block-row one (its subclass): priced and estimated by it."""

    name = "mirrored-test"


@pytest.fixture
def registered(monkeypatch):
    def add(spec):
        monkeypatch.setitem(registry.ALGORITHMS, spec.name, spec)
        return spec
    return add


def test_a_family_without_models_is_refused_by_the_memory_guard_and_the_planner(registered, monkeypatch):
    spec = registered(Algorithm("bare-1d", "1d", BareFamily()))
    with pytest.raises(GridGnnError, match=r"bare-1d: the bare-test family states no memory model"):
        estimate_rank_memory("bare-1d", (2,), 100, 400, [8, 4, 2])
    with pytest.raises(GridGnnError, match=r"bare-1d: the planner has no byte model of the bare-test family"):
        primitives.volume_model(spec, graph=None, source=None, rows=None, shape=(2,), world=2, replication=1,
                                calls=[])
    # a byte model registered for the family's class is the one the planner asks, and only for that class
    seen = []
    monkeypatch.setitem(primitives.VOLUME_MODELS, BareFamily, lambda spec, **kw: seen.append((spec, kw)) or "model")
    assert primitives.volume_model(spec, graph=None, source=None, rows=None, shape=[2], world=2, replication=1,
                                   calls=[]) == "model"
    assert seen[0][0] is spec and seen[0][1]["shape"] == (2,)


def test_a_subclass_family_is_estimated_and_priced_by_its_base(registered):
    g = sbm_graph(n=300, classes=3, avg_degree=8, features=8, seed=2)
    rows = RowPartition.random(g.n, 4, seed=1)
    registered(Algorithm("mirrored-1d", "1d", MirroredRows()))
    mine = estimate_rank_memory("mirrored-1d", (4,), g.n, g.nnz, [8, 6, 3], row_bounds=rows.bounds)
    base = estimate_rank_memory("1d", (4,), g.n, g.nnz, [8, 6, 3], row_bounds=rows.bounds)
    assert [r.per_component for r in mine.ranks] == [r.per_component for r in base.ranks]

    def model(plan):
        return GCN([8, 6, 3], plan=plan, dtype=torch.float64, seed=0)

    a, b = (step_volume(g, algo, 4, source=None, rows=rows, shape=(4,), replication=1, build_model=model,
                        traits=registry.algorithm(algo).traits) for algo in ("mirrored-1d", "1d"))
    assert a.bytes.keys() == b.bytes.keys() and a.bytes["fwd.bcast"][0].sum() > 0
    for k in a.bytes:
        assert all(np.array_equal(x, y) for x, y in zip(a.bytes[k], b.bytes[k])), k


def test_the_one_process_path_is_read_from_the_grid_not_the_name(registered):
    """An algorithm of another name on the ``single`` grid trains in the launching process like ``serial`` (the
    trainer, predict and the memory check ask :func:`registry.one_process`); every built-in distributed algorithm
    and ``auto`` do not."""
    assert registry.one_process("serial")
    assert not any(registry.one_process(a) for a in registry.BUILTIN if a != "serial")
    assert not registry.one_process("auto")
    mine = registered(Algorithm("my-serial", "single", registry.ALGORITHMS["serial"].family))
    assert registry.one_process("my-serial") and mine.one_process
    # a builder of its own on that grid would be passed over by the serial plan: refused when registered
    with pytest.raises(GridGnnError, match="single grid, which trains the serial plan"):
        registry.register(Algorithm("my-own", "single", registry.ALGORITHMS["serial"].family, build=lambda *a, **k: 0))
    assert "my-own" not in registry.ALGORITHMS
