"""The layer zoo (tests/api/zoo.py: GATv2, GIN, residual GCN, two linears, an edge MLP — each the naive way and,
where it differs, the documented way) on every algorithm at P = 4: each case equals its serial run (logits and every
gradient, float64) with measured bytes equal to the traced byte model, **or** is refused before training with one
line naming the primitive or operation and the layouts. A silent difference fails. The refusals are the expected
ones (the table below), so the check cannot pass by refusing everything."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from gridgnn.distributed.launch import launch
from gridgnn.errors import GridGnnError
from gridgnn.nn import resolve_model
from gridgnn.testing import Case, Refusal, distributed_worker
from gridgnn.train.rank_layout import model_trace

from ..parallel._fidelity import check_against_serial, check_bytes
from ..parallel.conftest import GRAPHS, N, shapes_2d, skewed_partition

P = 4
ZOO = ("tests.api.zoo:GATv2", "tests.api.zoo:GIN", "tests.api.zoo:GINMoved", "tests.api.zoo:ResidualGCN", "tests.api.zoo:ResidualGCNMoved", "tests.api.zoo:TwoLinear", "tests.api.zoo:EdgeMLP",
       "tests.api.zoo:EdgeMLPBare", "tests.api.zoo:ScaledInput")
#: (model, algorithm family) → the words its refusal must contain; absent: it must equal serial
REFUSED = {
    ("tests.api.zoo:GATv2", "plexus"): ("sddmm_add", "per-node scores", "columns split over"),
    ("tests.api.zoo:GIN", "plexus"): ("torch add combines", "g.at_destinations"),
    ("tests.api.zoo:ResidualGCN", "plexus"): ("torch add combines", "g.at_destinations"),
    ("tests.api.zoo:EdgeMLPBare", "plexus"): ("m1", "self.param"),
    ("tests.api.zoo:EdgeMLPBare", "1.5d"): ("m1", "partial over rep", "self.param"),
    ("tests.api.zoo:EdgeMLPBare", "edge"): ("m1", "partial over rep", "self.param"),
    ("tests.api.zoo:EdgeMLPBare", "2d"): ("partial over col", "self.param"),
    ("tests.api.zoo:EdgeMLPBare", "3d"): ("partial over y", "self.param"),
}


def family(algo: str) -> str:
    return algo.removesuffix("-sa")


def cases() -> list[tuple[str, Case]]:
    out = []
    for m, model in enumerate(ZOO):
        gname = tuple(GRAPHS)[m % 2]
        dims = [7, 3, 3] if m % 2 else [7, 2, 4, 3]

        def add(tag, **kw):
            out.append((f"{model.partition(':')[2]}-{tag}-{gname}", Case(graph=GRAPHS[gname], dims=dims, model=model,
                                                        options={"heads": 2}, dropout=0.3, seed=5, epoch=1, **kw)))

        add("1d", algo="1d", partition=skewed_partition(N, P, 5))
        add("1d-sa", algo="1d-sa", partition="random")
        for c in (2, 4):  # c = 1 is 1D's layout
            add(f"1.5d-c{c}", algo="1.5d" if c == 2 else "1.5d-sa", replication=c,
                partition=skewed_partition(N, P // c, 6))
        for shape in shapes_2d(P):
            add(f"2d-{'x'.join(map(str, shape))}", algo="2d", grid=shape)
        for shape in ((1, 2, 2), (2, 1, 2), (2, 2, 1)):  # each axis of the fiber layout split once
            add(f"3d-{'x'.join(map(str, shape))}", algo="3d", grid=shape)
        for shape, part in (((1, 2, 2), "random"), ((2, 1, 2), "double-perm"), ((2, 2, 1), "random"),
                            ((4, 1, 1), "double-perm"), ((1, 1, 4), "random")):
            add(f"plexus-{'x'.join(map(str, shape))}-{part}", algo="plexus", grid=shape, partition=part)
        add("edge", algo="edge")
    return out


@pytest.fixture(scope="module")
def results():
    named = cases()
    out = launch(distributed_worker, P, [c for _, c in named], device="cpu", collect=True)
    return {name: (case, [out[r][i] for r in range(P)]) for i, (name, case) in enumerate(named)}


def test_every_zoo_layer_equals_serial_or_is_refused(results):
    seen = {"equal": 0, "refused": 0}
    for name, (case, per_rank) in results.items():
        want = REFUSED.get((case.model, family(case.algo)))
        refusals = [r for r in per_rank if isinstance(r, Refusal)]
        if refusals:
            assert len(refusals) == P, f"{name}: refused on some ranks only"
            msg = refusals[0].message
            assert all(r.message == msg for r in refusals), name
            assert "\n" not in msg, f"{name}: a refusal is one line: {msg!r}"
            assert want is not None, f"{name}: refused, but it should run equal to serial: {msg}"
            for word in want:
                assert word in msg, f"{name}: {word!r} not in the refusal {msg!r}"
            seen["refused"] += 1
            continue
        assert want is None, f"{name}: ran, but it should be refused ({want})"
        try:
            check_against_serial(case, per_rank, P)
            check_bytes(case, per_rank, P)
        except AssertionError as e:
            raise AssertionError(f"{name}: {e}") from e
        seen["equal"] += 1
    assert seen["refused"] >= 20 and seen["equal"] >= 80, seen


@pytest.mark.parametrize("model", ZOO)
def test_the_trace_refuses_exactly_the_table(model):
    """Without processes: the trace of each zoo layer against every algorithm's rules refuses where the table says
    (1D keeps every edge of a row on one rank: even a bare read of an edge parameter is exact there)."""
    cls = resolve_model(model)
    for algo in ("serial", "1d", "1d-sa", "1.5d", "1.5d-sa", "2d", "3d", "plexus", "edge"):
        want = REFUSED.get((model, family(algo)))
        try:
            model_trace([7, 3, 3], lambda p: cls.from_options([7, 3, 3], plan=p, dtype=torch.float64, heads=2), algo)
        except GridGnnError as e:
            assert want is not None, f"{model} on {algo}: {e}"
        else:
            assert want is None, f"{model} on {algo} was not refused"


def test_raw_ops_that_are_not_local_are_refused():
    """Operations on node or edge tensors that no layout keeps local: each one line, naming what it does."""
    from gridgnn.nn import Model

    class Probe(Model):
        def __init__(self, dims, *, op, **kw):
            super().__init__(dims, **kw)
            self.op = op
            self.add_parameter("w", 0, self.glorot(dims[0], dims[1]))
            self.add_parameter("b", 0, self.zeros(dims[1]), kind="b")

        def forward(self, x, plan):
            g = plan.graph(0)
            h = g.spmm(g.gcn_values, plan.linear(0, x, self.param("w", 0)))
            return self.op(h, g, plan, self)

    ops = {
        "row sum": (lambda h, g, plan, m: h - h.sum(dim=0), ("1d", "plexus"), "mixes the rows"),
        "transpose": (lambda h, g, plan, m: h @ (h.T @ h), ("1d", "2d"), "mixes the rows"),
        "row index": (lambda h, g, plan, m: h[torch.arange(h.shape[0]).flip(0)], ("1.5d",), "mixes the rows"),
        "dropout": (lambda h, g, plan, m: torch.nn.functional.dropout(h, 0.5), ("serial", "1d"), "random"),
        "column mix": (lambda h, g, plan, m: h.softmax(dim=1), ("plexus",), "mixes the feature columns"),
        "bias broadcast": (lambda h, g, plan, m: h + m.param("b", 0), ("plexus",), "plan.add_bias"),
        "node with edges": (lambda h, g, plan, m: h + g.gcn_values.sum() * 0 + g.gcn_values[:1].sum(),
                            ("1d",), "mixes the rows"),
        # operations that keep the shape but mix or move elements (they were taken as elementwise, and a custom
        # layer trained differently from serial where its tensors were split)
        "layer norm": (lambda h, g, plan, m: F.layer_norm(h, h.shape[-1:]), ("plexus",), "mixes the feature columns"),
        "softmin": (lambda h, g, plan, m: F.softmin(h, dim=1), ("plexus",), "mixes the feature columns"),
        "batch norm": (lambda h, g, plan, m: F.batch_norm(h, None, None, training=True), ("1d-sa", "plexus"),
                       "torch batch_norm is not an operation gridgnn knows to keep every element in place"),
        "triu": (lambda h, g, plan, m: torch.triu(h), ("1d",), "torch triu is not an operation gridgnn knows"),
        "flipud": (lambda h, g, plan, m: torch.flipud(h), ("2d",), "torch flipud is not an operation"),
        "layer norm over rows": (lambda h, g, plan, m: F.layer_norm(h, h.shape), ("1d",), "mixes the rows"),
        "rrelu": (lambda h, g, plan, m: F.rrelu(h, training=True), ("1d",), "random"),
    }
    for name, (op, algos, words) in ops.items():
        for algo in algos:
            with pytest.raises(GridGnnError, match=words) as info:
                model_trace([7, 3], lambda p: Probe([7, 3], op=op, plan=p, dtype=torch.float64), algo)
            assert "\n" not in str(info.value), name
    # the same operations where they are local: whole columns (block-row) or nothing split (serial)
    for name in ("column mix", "bias broadcast", "layer norm", "softmin"):
        model_trace([7, 3], lambda p: Probe([7, 3], op=ops[name][0], plan=p, dtype=torch.float64), "1.5d")
    for name in ("row sum", "batch norm", "triu"):
        model_trace([7, 3], lambda p: Probe([7, 3], op=ops[name][0], plan=p, dtype=torch.float64), "serial")
    def pointwise(h, g, plan, m):  # elementwise, however spelled: none is refused where anything is split
        keep = h > 0
        keep &= h < 1  # an in-place dunder
        h = F.dropout(h, 0.0, training=True) + F.dropout(h, 0.5, training=False)  # dropouts that draw nothing
        return F.gelu(torch.clamp(h, -1, 1)).sigmoid() * 2 + torch.special.expit(h) * keep + F.rrelu(h)

    model_trace([7, 3], lambda p: Probe([7, 3], op=pointwise, plan=p, dtype=torch.float64), "plexus")


def test_at_destinations_is_the_identity_serially():
    """``g.at_destinations(x)`` is ``x`` in value (the rows of an spmm's input as its destinations)."""
    from gridgnn.distributed import NullComm
    from gridgnn.train.rank_layout import build_rank

    g = GRAPHS["directed"]
    plan, data = build_rank(g, "serial", NullComm(), [7, 3], dtype=torch.float64)
    x = data.x.clone().requires_grad_(True)
    y = plan.graph(0).at_destinations(x)
    np.testing.assert_array_equal(y.detach().numpy(), data.x.numpy())
