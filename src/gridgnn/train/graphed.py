r"""``--cuda-graph``: one process's full-graph training step recorded once as a CUDA graph and replayed every epoch.

On a GPU a small graph's epoch is bound by the host: Python, the dispatcher and one launch per operation (the second
GPU run measured GCN's and GraphSAGE's device time at 2.8 and 2.3 ms of 4.3 and 3.7 ms epochs, ``docs/benchmarks.md``).
A CUDA graph launches the step's kernels as one. :class:`GraphedStep` runs the step (forward, loss, backward) eagerly
for :data:`WARMUP_STEPS` epochs on a side stream — the caches the step builds on first use (the ids' device copies,
the patterns' derived arrays, Triton's compiled kernels) are built there — then records it once
(``torch.cuda.graph``) and replays it from then on. What changes from epoch to epoch reaches the replays through
device memory: the epoch, which keys the dropout masks, is a 0-d tensor the step reads
(:func:`gridgnn.nn.dropout.device_key`), written before each replay; the parameters are updated in place by the
optimizer, which runs eagerly after the replay (so the learning-rate schedule and every optimizer stay as they are);
the gradients land in the graph's memory and are handed back to the parameters after each replay.

A step may be recorded only if it reads nothing back from the device (what ``tests/train/test_no_read_back.py``
checks), brings nothing from the host's memory (every tensor it reads exists before it, or is made by it) and writes
nothing made before it but the gradients it is given. One process only: a collective's bookkeeping (its bytes, its
timing) is Python, which a replay skips.

``GRIDGNN_DEVICE_PATHS=host`` (the host takes a GPU's code paths, :mod:`gridgnn.ops.device_paths`) records and
replays on the host instead (:class:`HostGraphs`, a test mode): every operation the step dispatches is recorded
with its tensors and replayed on them in order, a replay writing its results into the recorded outputs — what a CUDA
graph does with its kernels and their addresses — and a step that reads back, brings host data in or writes what it
did not make is refused as a capture would fail. So the equality of graphed and eager training is checked here
(``tests/train/test_graphed.py``); the capture itself (streams, the graph's memory pool, cuSPARSE and Triton under
capture) waits for a GPU.
"""
from __future__ import annotations

import contextlib
import gc
import warnings

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from ..errors import GridGnnError
from ..ops.device_paths import device_paths

#: eager steps before the capture (on a side stream on a GPU): the step's first-use caches are built by then
WARMUP_STEPS = 2


class GraphedStep:
    r"""``step(epoch)`` — forward, loss and backward of one epoch, the epoch a 0-d ``int64`` tensor on ``device``;
    returns the loss — run eagerly :data:`WARMUP_STEPS` times, then recorded once and replayed (module docstring).
    Call it with the epoch (an int) after the optimizer's ``zero_grad``; it returns the loss and leaves the
    gradients on ``params`` for the optimizer."""

    def __init__(self, step, params, device, *, warmup: int = WARMUP_STEPS):
        if not device_paths(device):
            raise GridGnnError("--cuda-graph records a step on a CUDA device; this run computes on the host "
                               "(--device cuda)")
        self.step, self.warmup = step, warmup
        self.params = [p for p in params if p.requires_grad]
        self.graphs = HostGraphs() if torch.device(device).type == "cpu" else CudaGraphs()
        self.epoch = torch.zeros((), dtype=torch.int64, device=device)
        self.graph = self.loss = None
        self.grads: list = []
        self.eager_steps = 0

    def __call__(self, epoch: int) -> torch.Tensor:
        self.epoch.fill_(epoch)
        if self.graph is None and self.eager_steps < self.warmup:
            self.eager_steps += 1
            with self.graphs.warming():
                return self.step(self.epoch)
        if self.graph is None:
            for p in self.params:  # the graph's backward makes the gradients in its own memory
                p.grad = None
            self.graph, self.loss = self.graphs.capture(lambda: self.step(self.epoch))
            self.grads = [p.grad for p in self.params]
        self.graph.replay()
        for p, grad in zip(self.params, self.grads):
            p.grad = grad
        return self.loss


class CudaGraphs:
    """Recording on a GPU: ``torch.cuda.graph``, the eager steps before it on a side stream (as PyTorch's
    whole-network capture does)."""

    @contextlib.contextmanager
    def warming(self):
        side, main = torch.cuda.Stream(), torch.cuda.current_stream()
        side.wait_stream(main)
        with torch.cuda.stream(side):
            yield
        main.wait_stream(side)

    @staticmethod
    def capture(fn):
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                out = fn()
        except RuntimeError as exc:  # an operation a capture does not admit: the run ends, saying so
            text = str(exc).strip().splitlines()
            raise GridGnnError(f"--cuda-graph: this step could not be recorded on this GPU ({text[0] if text else exc}"
                               "); train without --cuda-graph") from None
        return graph, out


class HostGraphs:
    """Recording on the host (``GRIDGNN_DEVICE_PATHS=host``, a test mode): :class:`HostGraph`."""

    warming = staticmethod(contextlib.nullcontext)

    @staticmethod
    def capture(fn):
        graph = HostGraph()
        with graph:
            out = fn()
        return graph, out


#: operations that read a value back or size their output by the data: a capture refuses them
_READS_BACK = {torch.ops.aten._local_scalar_dense.default, torch.ops.aten.nonzero.default,
               torch.ops.aten.masked_select.default, torch.ops.aten._unique2.default,
               torch.ops.aten.unique_consecutive.default, torch.ops.aten.unique_dim.default,
               torch.ops.aten.repeat_interleave.Tensor, torch.ops.aten.bincount.default}


def _parts(t: torch.Tensor) -> list[torch.Tensor]:
    """The strided tensors that hold ``t``'s data (a sparse compressed tensor's index and value arrays)."""
    if t.layout == torch.strided:
        return [t]
    if t.layout == torch.sparse_csr:
        return [t.crow_indices(), t.col_indices(), t.values()]
    if t.layout == torch.sparse_coo:
        return [t._indices(), t._values()]
    return []


def _storages(tree) -> list[tuple[torch.Tensor, int]]:
    """``(part, its storage's address)`` of every tensor in ``tree`` that holds data."""
    out = []
    for leaf in tree_flatten(tree)[0]:
        if isinstance(leaf, torch.Tensor):
            out += [(p, p.untyped_storage().data_ptr()) for p in _parts(leaf) if p.numel()]
    return out


class HostGraph(TorchDispatchMode):
    r"""The host's stand-in for a CUDA graph: the operations dispatched while it is entered are recorded with their
    tensors (kept alive, as a graph keeps its memory) and :meth:`replay` runs them again in order on the same
    tensors, each writing its result into the tensors it returned when recorded. Like a capture (whose kernels then
    read and write fixed addresses, with the scalars they were launched with), recording refuses, with a
    :class:`GridGnnError` naming the operation:

    * an operation that reads a value back to the host or sizes its output by the data (:data:`_READS_BACK`);
    * a tensor that enters from the host: one that existed neither before the recording nor as an output of a
      recorded operation (made from host data: a replay would read what the recording read);
    * an operation that writes into a tensor made before the recording (a replay would write it again each epoch,
      where the recording, unlike a capture, has already run it once).

    Unlike a capture, the recording runs the operations (a replay then runs them again)."""

    def __init__(self):
        super().__init__()
        self.ops: list = []
        gc.collect()
        with warnings.catch_warnings():  # (the isinstance test touches deprecated module attributes)
            warnings.simplefilter("ignore")
            self.before = {ptr for t in gc.get_objects() if isinstance(t, torch.Tensor) and t.device.type == "cpu"
                           for _, ptr in _storages(t)}
        self.made: set[int] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = str(func.overloadpacket).removeprefix("aten.")
        if func in _READS_BACK:
            raise GridGnnError(f"--cuda-graph: the step reads a value back ({name}); a CUDA graph cannot hold it")
        for _, ptr in _storages((args, kwargs)):
            if ptr not in self.before and ptr not in self.made:
                raise GridGnnError(f"--cuda-graph: the step's {name} reads a tensor made from host data during the "
                                   "step; a CUDA graph would read the same data at every replay")
        written = [a for s, a in zip(func._schema.arguments, args) if s.alias_info is not None and s.alias_info.is_write]
        written += [kwargs[s.name] for s in func._schema.arguments if s.name in kwargs and s.alias_info is not None
                    and s.alias_info.is_write]
        for _, ptr in _storages(written):
            if ptr in self.before:
                raise GridGnnError(f"--cuda-graph: the step's {name} writes a tensor made before the step; a "
                                   "CUDA graph would write it again at every replay")
        out = func(*args, **kwargs)
        for _, ptr in _storages(out):
            self.made.add(ptr)
        self.ops.append((func, args, kwargs, out))
        return out

    def replay(self) -> None:
        """Every recorded operation again, in order, its results written into the tensors it returned."""
        with torch.no_grad():
            for func, args, kwargs, out in self.ops:
                for (mine, ptr), (now, at) in zip(_storages(out), _storages(func(*args, **kwargs))):
                    if at != ptr:  # (a view or an in-place result is already where it belongs)
                        mine.copy_(now)
