r"""Fidelity harness: run one forward/backward of a model (any of the registry) with a distributed algorithm on every rank and
return what the serial reference must reproduce (logits in original node order, parameter gradients,
loss) plus the communication log. Used by the test suite; also handy to check a new machine.

One spawned group runs many cases, so process start-up is paid once per P.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import numpy as np
import torch

from .distributed import Comm, NullComm, ProcessGrid
from .graph import Graph
from .nn import resolve_model
from .nn.decoders import make_decoder
from .ops import masked
from .parallel import algorithm, one_process
from .parallel.checks import LayoutError
from .parallel.pairs import RowDirectory
from .partition import RowPartition
from .train.worker import train_worker
from .parallel.source import InMemorySource
from .train.rank_layout import build_rank, make_source
from .train.link import LinkPairs, link_forward_backward
from .train.step import forward_backward


@dataclass
class Case:
    graph: Graph
    algo: str
    dims: list
    replication: int = 1
    partition: str | RowPartition = "random"
    dropout: float = 0.0
    seed: int = 0
    epoch: int = 0
    grid: tuple | None = None  # 2d/3d/plexus mesh shape
    block_rows: int = 0
    model: str = "gcn"
    heads: int = 1  # GAT: heads of the hidden layers and of the last layer
    out_heads: int = 1
    attn_dropout: float = 0.0
    options: dict = field(default_factory=dict)  # other keyword options of the model's from_options
    wire: str | None = None  # --comm-dtype: node data crosses the wire in this type (float64 training)
    overlap: bool = False  # --overlap: the stage loops start their transfers early
    grad_bucket_bytes: int | None = None  # the gradient all-reduce's buckets (None: 25 MiB)
    grad_wire: str | None = None  # --grad-dtype: the gradient buckets cross the wire in this type
    task: str = "node"  # "link": link prediction on the split of ``graph`` (:func:`link_setup`)
    decoder: str = "dot"  # a link case's pair decoder (--decoder)
    recompute_block: int | None = None  # ops.masked.RECOMPUTE_BLOCK in this case (None: as it is)


#: the link split and negatives of a ``task="link"`` case: 15 % validation, 20 % test edges, 2 negatives each
LINK_SPLIT, LINK_NEGATIVES = (0.15, 0.2), 2


def link_setup(case: Case):
    """The :class:`~gridgnn.graph.links.LinkSplit` of a link case (its encoder trains on ``split.train_graph``)."""
    from .graph.links import link_split

    return link_split(case.graph, *LINK_SPLIT, seed=case.seed)


@dataclass
class CaseResult:
    node_ids: np.ndarray
    cols: tuple
    logits: np.ndarray
    grads: list
    loss: float
    comm: dict = field(default_factory=dict)
    rank: int = 0
    copies: int = 1
    grad_slices: list = field(default_factory=list)
    schedule: object = None  # the schedule records this rank's engine ran (block-row, SUMMA, Plexus), else None
    # per weight gradient summed over blocks of a recomputed dropout output (ops.masked.RowBlocks), the shape of the
    # rank's input it recomputed
    blocks_recomputed: list = field(default_factory=list)


def run_case(case: Case, comm, device: str = "cpu") -> CaseResult:
    """One forward/backward of ``case`` on this rank, on ``device`` (``"cpu"``, ``"cuda"``, ``"cuda:N"``); what it
    returns is on the host."""
    dtype = torch.float64
    source = rows = None
    split = link_setup(case) if case.task == "link" else None
    graph = case.graph if split is None else split.train_graph
    if one_process(case.algo):
        pass
    elif isinstance(case.partition, RowPartition):
        rows = case.partition
        source = InMemorySource(graph, rows.perm)
    else:
        source, rows = make_source(graph, case.algo, comm.grid.world_size, replication=case.replication,
                                   shape=comm.grid.shape, method=case.partition, seed=case.seed)
    comm.log.reset()
    plan, data = build_rank(graph, case.algo, comm, case.dims, source=source, rows=rows, dtype=dtype,
                            device=device, block_rows=case.block_rows, model=lambda p: build_model(case, p))
    if split is not None:
        directory = RowDirectory(comm, data.node_ids, plan.out_cols(case.dims[-1]), case.dims[-1], graph.n)
        pairs = LinkPairs(case.graph, split, negatives=LINK_NEGATIVES, seed=case.seed, world=directory.world,
                          me=directory.me)
    setup = comm.log.snapshot()
    comm.log.reset()
    model = build_model(case, plan).to(device)
    decoder_params = []
    with recompute_blocks(case.recompute_block) as blocks:
        if split is None:
            loss, logits = forward_backward(model, plan, comm, data, epoch=case.epoch)
        else:
            decoder = make_decoder(case.decoder, case.dims[-1], seed=case.seed, dtype=dtype).to(device)
            loss, logits = link_forward_backward(model, plan, comm, data, directory, pairs, decoder,
                                                 epoch=case.epoch)
            decoder_params = list(decoder.parameters())  # replicated: every rank holds the whole
    stats = {k: (v.sent, v.recv, v.calls) for k, v in comm.log.snapshot().items()}
    stats.update({k: (v.sent, v.recv, v.calls) for k, v in setup.items()})
    entries = model.parameter_entries()  # each rank's shard of a sharded parameter
    params = [e[2] for e in entries] + decoder_params
    slices = [plan.param_slice(layer, kind, shape) for _, layer, _, shape, kind in entries] \
        + [(slice(None),) * p.dim() for p in decoder_params]
    return CaseResult(data.node_ids.copy(), plan.out_cols(case.dims[-1]), logits.detach().cpu().numpy().copy(),
                      [p.grad.detach().cpu().numpy().copy() for p in params], float(loss), stats,
                      comm.grid.global_rank, getattr(plan, "copies", 1), slices,
                      _schedules(plan), blocks)


@contextlib.contextmanager
def recompute_blocks(elements: int | None):
    """Within: :data:`gridgnn.ops.masked.RECOMPUTE_BLOCK` set to ``elements`` (``None``: left as it is); yields a
    list to which each weight gradient summed over blocks of a recomputed dropout output meanwhile adds the shape of
    the input it recomputed."""
    shapes = []
    if elements is None:
        yield shapes
        return
    before, t_matmul = masked.RECOMPUTE_BLOCK, masked.RowBlocks.t_matmul

    def counted(self, *args, **kwargs):
        shapes.append(tuple(self.x.shape))
        return t_matmul(self, *args, **kwargs)

    masked.RECOMPUTE_BLOCK, masked.RowBlocks.t_matmul = elements, counted
    try:
        yield shapes
    finally:
        masked.RECOMPUTE_BLOCK, masked.RowBlocks.t_matmul = before, t_matmul


def _schedules(plan):
    """The schedules this rank's engine ran: block-row — its :class:`~gridgnn.partition.layout.BlockRowSchedule`;
    SUMMA — ``{matrix version: SummaSchedule}``; Plexus — a ``PlexusSchedule`` per layer; ``None`` for a family
    without schedule records."""
    if isinstance(getattr(plan, "schedules", None), list):
        return list(plan.schedules)
    graphs = getattr(plan, "graphs", None)
    if isinstance(graphs, dict) and all(hasattr(g, "schedule") for g in graphs.values()):
        return {v: g.schedule for v, g in graphs.items()}
    return getattr(getattr(plan, "dgraph", None), "schedule", None)


def build_model(case: Case, plan):
    """The case's model, its parameters laid out for ``plan`` (float64)."""
    options = {"heads": case.heads, "out_heads": case.out_heads, "attn_dropout": case.attn_dropout, **case.options}
    return resolve_model(case.model).from_options(case.dims, dropout=case.dropout, seed=case.seed, dtype=torch.float64,
                                                  plan=plan, **options)  # each takes the options it declares


@dataclass
class Refusal:
    """A case its algorithm refused before training (:class:`~gridgnn.parallel.checks.LayoutError`), on every
    rank alike."""

    message: str


def serial_case(case: Case, device: str = "cpu") -> CaseResult:
    """The case's serial reference (every recomputed dropout output made whole: ``recompute_block`` left out)."""
    return run_case(Case(**{**case.__dict__, "algo": "serial", "recompute_block": None}), NullComm(), device)


def wire_of(case: Case):
    """The case's :class:`~gridgnn.distributed.wire.WirePolicy` (``None``: node data crosses in float64)."""
    from .distributed.wire import WIRE_TYPES, WirePolicy

    return None if case.wire is None else WirePolicy(WIRE_TYPES[case.wire])


def grad_wire_of(case: Case):
    """The type the case's gradient buckets cross in (``None``: float64)."""
    from .distributed.wire import WIRE_TYPES

    return None if case.grad_wire is None else WIRE_TYPES[case.grad_wire]


def distributed_worker(ctx, cases: list[Case]) -> list[CaseResult]:
    """Worker for :func:`gridgnn.distributed.launch.launch`: runs every case on this rank, on the launch's device
    (``launch(..., device="cuda")``: one GPU per rank, NCCL)."""
    ctx.init()
    out, grids = [], {}
    for case in cases:
        spec = algorithm(case.algo)
        key = (spec.grid, spec.mesh_shape(ctx.world_size, replication=case.replication, grid=case.grid))
        if key not in grids:  # every rank builds the same meshes in the same order
            grids[key] = ProcessGrid.build(key[0], ctx.device.split(":")[0], shape=key[1])
        try:
            out.append(run_case(case, Comm(grids[key], wire=wire_of(case), overlap=case.overlap,
                                                grad_bucket_bytes=case.grad_bucket_bytes,
                                                grad_wire=grad_wire_of(case)), ctx.device))
        except LayoutError as e:  # raised by the model's trace, before any collective of the case
            out.append(Refusal(str(e)))
    return out


def assemble(results: list[CaseResult], n: int, classes: int) -> np.ndarray:
    """Logits of all ranks in original node order and class order (replicas hold equal copies)."""
    full = np.full((n, classes), np.nan)
    for r in results:
        full[r.node_ids, r.cols[0]:r.cols[1]] = r.logits
    return full


@dataclass
class SampleCase:
    """Distributed sampling of every bulk of one epoch on the 1.5D grid ``P/c × c``, in both modes."""

    adj: object  # scipy CSR, rows = destinations
    batches: list
    fanouts: list
    sampler: str = "sage"
    replication: int = 1
    k: int = 2
    seed: int = 0
    epoch: int = 0


def _sample_arrays(s) -> tuple:
    return (s.batch_ids, s.nodes, s.ptr, [(b.indptr, b.indices, b.data) for b in s.blocks])


def sampling_worker(ctx, cases: list[SampleCase]) -> list[dict]:
    """Worker for :func:`gridgnn.distributed.launch.launch`: per case, this rank's samples of every bulk in the
    ``partitioned`` and ``replicated`` modes and the bytes the partitioned one moved."""
    from .sampling.distributed import PartitionedPattern, num_bulks, sample_rank

    ctx.init()
    out, grids = [], {}
    for case in cases:
        if case.replication not in grids:
            grids[case.replication] = ProcessGrid.build("1.5d", "cpu", replication=case.replication)
        comm = Comm(grids[case.replication])
        pattern = PartitionedPattern(comm, case.adj)
        comm.log.reset()
        res = {"rank": comm.grid.global_rank, "partitioned": [], "replicated": []}
        for bulk in range(num_bulks(len(case.batches), comm.grid.world_size, case.k)):
            for mode in ("partitioned", "replicated"):
                s = sample_rank(comm, case.adj, case.batches, case.fanouts, k=case.k, bulk=bulk,
                                sampler=case.sampler, mode=mode, seed=case.seed, epoch=case.epoch, pattern=pattern)
                res[mode].append(_sample_arrays(s))
        res["comm"] = {key: (v.sent, v.recv) for key, v in comm.log.snapshot().items()}
        out.append(res)
    return out


def minibatch_state_worker(ctx, cfg) -> dict:
    """Worker for :func:`gridgnn.distributed.launch.launch`: minibatch training of ``cfg`` returning every rank's
    trained parameters (:func:`gridgnn.train.worker.train_worker`)."""

    return train_worker(ctx, cfg, return_state=True)


def profiled_peak(fn) -> int:
    """The most bytes of CPU tensors that ``fn()`` had allocated and not yet freed at once (torch's profiler: its
    memory timeline, the torch allocator's view without allocator slack) — the CPU's stand-in for a GPU's peak."""
    return profiled_memory(fn)[0]


def profiled_memory(fn) -> tuple[int, int]:
    """``(peak, left)``: :func:`profiled_peak`, and the bytes ``fn()`` allocated and had not freed when it returned
    (what it leaves alive: a forward's saved activations, with its output)."""
    from torch.profiler import ProfilerActivity, profile
    from torch.profiler._memory_profiler import Action, MemoryProfileTimeline

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True, with_stack=True) as prof:
        fn()
    now = top = 0
    for _, action, (key, _version), nbytes in MemoryProfileTimeline(prof._memory_profile()).timeline:
        if key.device.type == "cpu":
            now += nbytes if action == Action.CREATE else -nbytes if action == Action.DESTROY else 0
            top = max(top, now)
    return top, now
