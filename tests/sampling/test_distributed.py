"""Distributed sampling (MLSys'24 §5) in one spawned group per P ∈ {1, 2, 4, 8}: for every replication c that
divides P and both samplers, the graph-partitioned samples (Algorithm 2) are exactly the graph-replicated ones,
which are exactly the serial samples of the same minibatches; the bytes every rank moves equal the model."""
import numpy as np
import pytest
import scipy.sparse as sp

from gridgnn.distributed.launch import launch
from gridgnn.sampling import minibatches, sample_bulk
from gridgnn.sampling.distributed import num_bulks, rank_batches, sampling_bytes, schedule
from gridgnn.testing import SampleCase, sampling_worker

PS = (1, 2, 4, 8)


def graph(n=61, m=300, seed=0) -> sp.csr_matrix:
    """Directed random pattern with a few isolated vertices (rows = destinations)."""
    r = np.random.default_rng(seed)
    a = sp.coo_matrix((np.ones(m), (r.integers(0, n - 3, m), r.integers(0, n - 3, m))), shape=(n, n)).tocsr()
    a.setdiag(0)
    a.eliminate_zeros()
    a.data[:] = 1
    return a


A = graph()
BATCHES = minibatches(np.arange(61), 6, seed=3, epoch=1)  # 11 minibatches: uneven over the ranks


def cases_for(P):
    out = []
    for c in [c for c in PS if P % c == 0]:
        out.append((f"sage-c{c}", SampleCase(A, BATCHES, [3, 2], sampler="sage", replication=c, k=2, seed=5, epoch=1)))
        out.append((f"ladies-c{c}", SampleCase(A, BATCHES, [8, 5], sampler="ladies", replication=c, k=1, seed=5,
                                               epoch=1)))
    return out


@pytest.fixture(scope="module", params=PS)
def results(request):
    P = request.param
    named = cases_for(P)
    per_rank = launch(sampling_worker, P, [c for _, c in named], device="cpu", collect=True)
    return P, {name: (case, [r[i] for r in per_rank]) for i, (name, case) in enumerate(named)}


def same(x, y):
    ids, nodes, ptr, blocks = x
    ids2, nodes2, ptr2, blocks2 = y
    assert (ids == ids2).all()
    for a, b in zip(nodes, nodes2):
        assert (a == b).all()
    for a, b in zip(ptr, ptr2):
        assert (a == b).all()
    for (p, i, d), (p2, i2, d2) in zip(blocks, blocks2):
        assert (p == p2).all() and (i == i2).all() and np.array_equal(d, d2)


def test_partitioned_equals_replicated_equals_serial(results):
    P, res = results
    for name, (case, ranks) in res.items():
        for r in ranks:
            for bulk, (part, repl) in enumerate(zip(r["partitioned"], r["replicated"])):
                same(part, repl)
                ids = rank_batches(len(case.batches), P, case.k, bulk, r["rank"])
                assert (part[0] == ids).all()
                serial = sample_bulk(case.adj, [case.batches[t] for t in ids], case.fanouts, sampler=case.sampler,
                                     seed=case.seed, epoch=case.epoch, batch_ids=ids)
                same(part, (serial.batch_ids, serial.nodes, serial.ptr,
                            [(b.indptr, b.indices, b.data) for b in serial.blocks]))
        trained = sorted(t for r in ranks for s in r["partitioned"] for t in s[0])
        assert trained == list(range(len(case.batches))), name  # every minibatch once, none dropped


def test_measured_bytes_equal_the_model(results):
    P, res = results
    for name, (case, ranks) in res.items():
        model = sampling_bytes(case.adj, case.batches, case.fanouts, world=P, c=case.replication, k=case.k,
                               sampler=case.sampler, seed=case.seed, epoch=case.epoch)
        measured = {}
        for r in ranks:
            for key, (s, v) in r["comm"].items():
                measured.setdefault(key, (np.zeros(P), np.zeros(P)))
                measured[key][0][r["rank"]] += s
                measured[key][1][r["rank"]] += v
        for key in set(model) | set(measured):
            ms, mr = model.get(key, (np.zeros(P), np.zeros(P)))
            es, er = measured.get(key, (np.zeros(P), np.zeros(P)))
            np.testing.assert_allclose(es, ms, rtol=0, atol=1e-9, err_msg=f"{name}: sent bytes of {key}")
            np.testing.assert_allclose(er, mr, rtol=0, atol=1e-9, err_msg=f"{name}: received bytes of {key}")
        if P > 1 and case.replication < P:
            assert sum(v[0].sum() for v in model.values()) > 0, name


def test_a_step_sums_the_same_minibatches_whatever_the_bulk():
    """Step g of an epoch is one update on minibatches g·P … g·P + P − 1 for every --bulk k (it summed other ones
    at k > 1, so --bulk, a throughput setting, changed what P > 1 trained); each rank's bulk is what it trains."""
    for P in PS:
        for n in (1, 7, 11, 24):
            want = [[g * P + r if g * P + r < n else -1 for r in range(P)] for g in range(-(-n // P))]
            for k in (1, 2, 3, 5):
                steps = schedule(n, P, k)
                assert [ids for _, _, ids in steps] == want, (P, n, k)
                for bulk, s, ids in steps:
                    for r, t in enumerate(ids):
                        mine = rank_batches(n, P, k, bulk, r)
                        assert (t == -1 and len(mine) <= s) or mine[s] == t


def test_bulks_cover_the_epoch():
    for P in PS:
        for k in (1, 2, 3):
            got = sorted(t for b in range(num_bulks(11, P, k)) for r in range(P) for t in rank_batches(11, P, k, b, r))
            assert got == list(range(11))
