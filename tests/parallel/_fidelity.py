"""Shared assertions: distributed logits/gradients equal the serial reference; bytes equal the model."""
import numpy as np

from gridgnn.distributed.wire import WIRE_TYPES
from gridgnn.planner.simulate import step_volume
from gridgnn.testing import LINK_NEGATIVES, assemble, build_model, link_setup, serial_case
from gridgnn.train.rank_layout import make_partition, make_source, num_blocks
from gridgnn.parallel.registry import algorithm
from gridgnn.partition import RowPartition

RTOL = 1e-5


def rel(a, b):
    assert a.shape == b.shape, (a.shape, b.shape)
    if a.size == 0:  # a rank may hold no columns (more column blocks than classes)
        return 0.0
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-300))


def check_against_serial(case, per_rank, P=None):
    ref = serial_case(case)
    full = assemble(per_rank, case.graph.n, case.dims[-1])
    assert not np.isnan(full).any(), "some rows were not produced by any rank"
    assert rel(full, ref.logits) < RTOL
    for r in per_rank:  # replicas must agree with the reference too, not only the first one
        assert rel(r.logits, ref.logits[r.node_ids, r.cols[0]:r.cols[1]]) < RTOL
        assert len(r.grads) == len(ref.grads) == len(r.grad_slices)
        for g, gr, slc in zip(r.grads, ref.grads, r.grad_slices):  # sharded parameters: compare the shard
            assert rel(g, gr[slc]) < RTOL
    # the loss summands of the row blocks add up to the serial loss (each block counted once)
    copies = per_rank[0].copies if case.task == "node" else 1  # a link case's pairs are sliced over every rank
    total = sum(r.loss for r in per_rank) / copies
    assert abs(total - ref.loss) <= RTOL * abs(ref.loss)
    return ref


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


def trained_graph(case):
    """The graph the case's model aggregates over: its graph, or a link case's training graph."""
    return case.graph if case.task == "node" else link_setup(case).train_graph


def rows_of(case, P):
    if isinstance(case.partition, RowPartition):
        return case.partition
    return make_partition(trained_graph(case), num_blocks(case.algo, P, case.replication), case.partition, case.seed)


def model_bytes(case, per_rank, P):
    """The simulator's bytes and messages of ``case.algo`` for this configuration
    (:func:`gridgnn.planner.simulate.step_volume`: the traced model's primitives summed over the layout; a link
    case adds its decoder's fetch, :meth:`~gridgnn.parallel.pairs.RowDirectory.volume` over the ranks' output
    layout and training pairs), ``{key: (sent[P], recv[P], calls[P])}``."""
    total = dict(model_volume(case, P).bytes)
    if case.task == "link":
        from gridgnn.parallel.pairs import RowDirectory
        from gridgnn.train.link import LinkPairs

        ranks = sorted(per_rank, key=lambda r: r.rank)
        width = case.dims[-1]
        directory = RowDirectory.from_layout([r.node_ids for r in ranks], [tuple(r.cols) for r in ranks], width,
                                             case.graph.n)
        split = link_setup(case)
        wants = [LinkPairs(case.graph, split, negatives=LINK_NEGATIVES, seed=case.seed, world=P,
                           me=r).train_wants(case.epoch) for r in range(P)]
        total.update(directory.volume(wants, 8))
        if case.decoder == "mlp":  # its gradients summed over every rank: one ring all-reduce
            from gridgnn.distributed.accounting import allreduce, grad_bucket_elements
            from gridgnn.nn.decoders import MLPDecoder

            nbytes = 8 * grad_bucket_elements(int(np.prod(s)) for s in MLPDecoder.shapes(width))
            sent, recv = allreduce(P, nbytes)
            zero = tuple(np.zeros(P) for _ in range(3))
            s0, r0, c0 = total.get("grad.allreduce", zero)
            total["grad.allreduce"] = (s0 + sent, r0 + recv, c0 + (1 if P > 1 else 0))
    return total


def model_volume(case, P):
    """The simulator's :class:`~gridgnn.planner.simulate.StepVolume` of this configuration."""
    graph = trained_graph(case)
    if not algorithm(case.algo).row_partitioned:
        source, _ = make_source(graph, case.algo, P, shape=case.grid, method=case.partition, seed=case.seed)
        rows = None
    else:
        source, rows = None, rows_of(case, P)
    return step_volume(graph, case.algo, P, source=source, rows=rows, shape=case.grid, loss=case.task == "node",
                       replication=case.replication, build_model=lambda plan: build_model(case, plan),
                       traits=algorithm(case.algo).traits, elem_bytes=8,
                       block_rows=getattr(case, "block_rows", 0), grad_bucket_bytes=case.grad_bucket_bytes,
                       grad_wire_bytes=None if case.grad_wire is None else WIRE_TYPES[case.grad_wire].itemsize,
                       wire_bytes=None if case.wire is None else WIRE_TYPES[case.wire].itemsize)


def check_bytes(case, per_rank, P):
    model = model_bytes(case, per_rank, P)
    measured = {}
    for r in per_rank:
        for key, stats in r.comm.items():
            if key.split(".")[0] in ("fwd", "bwd", "grad", "decode", "decode_bwd"):
                measured.setdefault(key, tuple(np.zeros(P) for _ in range(3)))
                for acc, v in zip(measured[key], stats):
                    acc[r.rank] = v
    keys = set(model) | set(measured)
    zero = tuple(np.zeros(P) for _ in range(3))
    for key in keys:
        ms, mr, mc = model.get(key, zero)
        es, er, ec = measured.get(key, zero)
        np.testing.assert_allclose(es, ms, rtol=0, atol=1e-6, err_msg=f"sent bytes of {key}")
        np.testing.assert_allclose(er, mr, rtol=0, atol=1e-6, err_msg=f"received bytes of {key}")
        np.testing.assert_array_equal(ec, mc, err_msg=f"messages (calls) of {key}")


def check_schedule(case, per_rank, P):
    """The schedule each rank's engine ran is the one the byte model builds without processes: block-row — its
    fetch, push and row-reduction records, the sparsity-aware counts from its set-up exchange; SUMMA — per matrix
    version its panels' roots and sizes (the nonzeros the owners announced at set-up), fiber and column pieces."""
    from gridgnn.planner.primitives import PlexusVolume, SummaVolume, volume_model

    if algorithm(case.algo).family.name == "plexus":  # per layer: its layouts, the shard's nonzeros, blocked rows
        source, _ = make_source(case.graph, case.algo, P, shape=case.grid, method=case.partition, seed=case.seed)
        calls = model_volume(case, P).calls
        vol = PlexusVolume(source, case.grid, calls, block_rows=case.block_rows, scatter=algorithm(case.algo).scatter)
        for r in per_rank:
            assert r.schedule == [vol.schedule(r.rank, layer) for layer in range(len(r.schedule))], r.rank
        return
    if algorithm(case.algo).family.name == "summa":
        source, _ = make_source(case.graph, case.algo, P, shape=case.grid, method=case.partition, seed=case.seed)
        vol = SummaVolume(source, case.grid)
        for r in per_rank:
            assert r.schedule and all(s == vol.schedule(r.rank, v) for v, s in r.schedule.items()), r.rank
        return
    rows = rows_of(case, P)
    vol = volume_model(algorithm(case.algo), graph=case.graph, source=None, rows=rows, shape=case.grid, world=P,
                       replication=case.replication, calls=None)  # the family's (edge: one block, every rank a stage)
    for r in per_rank:
        assert r.schedule == vol.schedules[r.rank], (r.rank, r.schedule, vol.schedules[r.rank])
        for push in (False, True):  # the sum the model prices is the records' own
            recs = [t for t in r.schedule.fetch(push) if t.moves]
            summed = r.schedule.fetch_bytes(push)
            if not recs:
                assert summed is None or summed[2:4] == (0.0, 0.0), summed
                continue
            assert summed[:2] == (recs[0].key, recs[0].axis) and summed[4] == len(recs)
            assert np.allclose(summed[2:4], np.sum([t.bytes(1.0) for t in recs], axis=0), rtol=0, atol=1e-9)


def selected(dist_results, prefix: str):
    """``(P, {name: (case, per_rank)})`` of the cases whose name starts with ``prefix``."""
    P, res = dist_results
    sel = {k: v for k, v in res.items() if k.startswith(prefix)}
    assert sel, f"no cases for {prefix}"
    return P, sel


def check_each(dist_results, prefix: str, check) -> None:
    """Run ``check(case, per_rank, P)`` on every selected case, naming the case in a failure."""
    P, sel = selected(dist_results, prefix)
    for name, (case, per_rank) in sel.items():
        try:
            check(case, per_rank, P)
        except AssertionError as e:
            raise AssertionError(f"P={P} {name}: {e}") from e


def volume(r, phase: str, side: int) -> float:
    """What one rank's result ``r`` moved in ``phase`` (``fwd``, ``bwd``, ...): bytes sent (``side`` 0) or received
    (1)."""
    return sum(v[side] for k, v in r.comm.items() if k.startswith(phase + "."))


def check_sa_receives_no_more(dist_results, sa_prefix: str, oblivious_prefix: str) -> None:
    """Every rank of a sparsity-aware GCN case receives in the forward fetches at most what its oblivious twin's
    broadcasts bring (``NnzCols(i, q)`` is a subset of block ``q``), and sends in the backward pushes at most
    what the twin's reduces send (the adjoint moves the same rows the other way)."""
    _, sa = selected(dist_results, sa_prefix)
    _, ob = selected(dist_results, oblivious_prefix)
    for name, (_, per_rank) in sa.items():
        twin = ob[name.replace(sa_prefix, oblivious_prefix, 1)][1]
        for r_sa, r_ob in zip(per_rank, twin):
            assert volume(r_sa, "fwd", 1) <= volume(r_ob, "fwd", 1), (name, r_sa.rank)
            assert volume(r_sa, "bwd", 0) <= volume(r_ob, "bwd", 0), (name, r_sa.rank)
