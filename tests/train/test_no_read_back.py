"""A training step reads nothing back from the device: on a GPU each read (``.item()``, a bool of a tensor, a
boolean mask's index, ``nonzero``, a ``repeat_interleave`` or ``bincount`` that must learn its length) makes the
host wait for the device's queue, so that the host, which issues the launches of a small model (GCN's and
GraphSAGE's epochs were bound by it on an H200), cannot run ahead of it. Checked here on the host taking the device's
code paths (``GRIDGNN_DEVICE_PATHS=host``, :mod:`gridgnn.ops.device_paths`: the torch compositions, the rows of every
edge kept, the masks drawn from the ids' copies): the trainer's step (:func:`gridgnn.train.step.forward_backward`)
under a dispatch mode that records every operation whose result length or value the host must read."""
import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from gridgnn.distributed.comm import NullComm
from gridgnn.graph import gcn_normalize
from gridgnn.graph.spec import load_graph
from gridgnn.nn import MODELS
from gridgnn.ops import device_paths
from gridgnn.parallel import blockrow
from gridgnn.train.rank_layout import local_data
from gridgnn.train.step import forward_backward

READS = ("_local_scalar_dense", "nonzero", "masked_select", "bincount", "_unique", "unique_consecutive")


class Reads(TorchDispatchMode):
    """The operations of its block that read a device's data back to the host."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = str(func)
        reads = any(k in name for k in READS)
        if name.startswith("aten.repeat_interleave") and kwargs.get("output_size") is None:
            reads = True
        if name.startswith("aten.index.Tensor"):
            reads = any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in args[1])
        if reads:
            self.seen.append(name)
        return func(*args, **kwargs)


@pytest.mark.parametrize("model, options", [("gcn", {}), ("sage", {"aggr": "mean"}), ("sage", {"aggr": "max"}),
                                            ("gat", {"heads": 2}), ("agnn", {}), ("gatv2", {"heads": 2})])
def test_a_training_step_reads_nothing_back_from_the_device(model, options, monkeypatch):
    monkeypatch.setenv(device_paths.ENV, device_paths.HOST)
    g = load_graph("synthetic:sbm?n=200&classes=4&avg_degree=5&features=8")
    plan = blockrow.build_serial(gcn_normalize(g), dtype=torch.float32)
    data = local_data(g, plan, dtype=torch.float32, device="cpu")
    dims = [8, 8, 8, 4] if model == "agnn" else [8, 8, 4]
    net = MODELS[model].from_options(dims, plan=plan, dtype=torch.float32, seed=0, dropout=0.5, **options)
    comm = NullComm()
    forward_backward(net, plan, comm, data, epoch=0)  # (the first step finds the labelled rows, once)
    with Reads() as reads:
        forward_backward(net, plan, comm, data, epoch=1)
    assert reads.seen == []
    assert np.isfinite(float(net.parameters().__next__().grad.sum()))


def _distributed_worker(ctx, cases):
    from gridgnn.distributed.comm import Comm
    from gridgnn.distributed.grid import ProcessGrid
    from gridgnn.parallel import algorithm
    from gridgnn.testing import build_model
    from gridgnn.train.rank_layout import build_rank, make_source

    ctx.init()
    found = []
    for case in cases:
        spec = algorithm(case.algo)
        shape = spec.mesh_shape(ctx.world_size, replication=case.replication, grid=case.grid)
        comm = Comm(ProcessGrid.build(spec.grid, "cpu", shape=shape), overlap=case.overlap)
        source, rows = make_source(case.graph, case.algo, ctx.world_size, replication=case.replication, shape=shape,
                                   method="random", seed=0)
        plan, data = build_rank(case.graph, case.algo, comm, case.dims, source=source, rows=rows,
                                dtype=torch.float32, model=lambda p: build_model(case, p))
        model = build_model(case, plan).float()
        forward_backward(model, plan, comm, data, epoch=0)
        with Reads() as reads:
            forward_backward(model, plan, comm, data, epoch=1)
        found.append((case.algo, case.model, reads.seen))
    return found


def test_a_distributed_training_step_reads_nothing_back_from_the_device(monkeypatch):
    """The same on four ranks, one case of each family (block rows with halos and with overlap, replicated rows,
    SUMMA, Plexus, edges) with the attention and a selecting aggregation; the collectives' own sizes are host
    numbers the plans hold."""
    from gridgnn.distributed.launch import launch
    from gridgnn.testing import Case

    monkeypatch.setenv(device_paths.ENV, device_paths.HOST)  # (the ranks take the launcher's environment)
    g = load_graph("synthetic:sbm?n=120&classes=4&avg_degree=5&features=8")
    sage_max = {"aggr": "max"}
    cases = [Case(g, "1d-sa", [8, 8, 4], model="gat", dropout=0.5, overlap=True),
             Case(g, "1.5d", [8, 8, 4], replication=2, model="sage", options=sage_max, dropout=0.5),
             Case(g, "2d", [8, 8, 4], grid=(2, 2), model="gat", dropout=0.5, overlap=True),
             Case(g, "3d", [8, 8, 4], grid=(1, 2, 2), model="sage", options=sage_max, dropout=0.5),
             Case(g, "plexus", [8, 8, 4], grid=(1, 2, 2), model="gat", dropout=0.5),
             Case(g, "edge", [8, 8, 4], grid=(1, 4), model="sage", options=sage_max, dropout=0.5)]
    for rank in launch(_distributed_worker, 4, cases, device="cpu", collect=True):
        assert [(algo, model) for algo, model, seen in rank if seen] == [], rank


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("model, options", [("gcn", {}), ("sage", {"aggr": "mean"}), ("sage", {"aggr": "max"}),
                                            ("gat", {"heads": 2}), ("agnn", {})])
def test_on_a_gpu_a_training_step_reads_nothing_back(model, options):
    """On the device itself, the Triton kernels and cuSPARSE in the loop: CUDA's synchronization check set to
    raise (``torch.cuda.set_sync_debug_mode("error")``) sees everything the dispatch mode above cannot (a
    ``.cpu()``, a copy to the host) — one step after a first one (which builds the kernels and finds the
    labelled rows)."""
    g = load_graph("synthetic:sbm?n=2000&classes=4&avg_degree=8&features=16")
    plan = blockrow.build_serial(gcn_normalize(g), dtype=torch.float32, device="cuda")
    data = local_data(g, plan, dtype=torch.float32, device="cuda")
    dims = [16, 16, 16, 4] if model == "agnn" else [16, 16, 4]
    net = MODELS[model].from_options(dims, plan=plan, dtype=torch.float32, seed=0, dropout=0.5, **options).cuda()
    comm = NullComm()
    forward_backward(net, plan, comm, data, epoch=0)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        forward_backward(net, plan, comm, data, epoch=1)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    torch.cuda.synchronize()
