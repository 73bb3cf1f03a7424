r"""``--cuda-graph``: one process's full-graph training step and evaluation recorded once as CUDA graphs and replayed
every epoch.

On a GPU a small graph's epoch is bound by the host: Python, the dispatcher and one launch per operation (the second
GPU run measured GCN's and GraphSAGE's device time at 2.8 and 2.3 ms of 4.3 and 3.7 ms epochs, ``docs/benchmarks.md``).
A CUDA graph launches a recorded sequence of kernels as one. :class:`GraphedStep` runs the step (forward, loss,
backward) and the evaluation eagerly for :data:`WARMUP_STEPS` epochs on a side stream — the caches they build on
first use (the ids' device copies, the patterns' derived arrays, Triton's compiled kernels) are built there — then
records each once (``torch.cuda.graph``; the evaluation in the step's memory pool, so that it reuses the step's
temporaries as the eager evaluation does and the peak stays the eager run's) and replays them from then on. What
changes from epoch to epoch reaches the replays through device memory: the epoch, which keys the dropout masks, is
a 0-d tensor the step reads (:func:`gridgnn.nn.dropout.device_key`), written before each replay; the parameters are
updated in place by the optimizer, which runs eagerly between the two replays (so the learning-rate schedule and
every optimizer stay as they are); the gradients land in the graph's memory and are handed back to the parameters
after each replay. What a capture reads that it did not make is held by the :class:`GraphedStep` as long as it lives
(a graph keeps addresses, not tensors: a cached tensor dropped later would leave it reading reused memory): what
its operations read (:class:`Capture`) and what its Triton launches are given (``ops.triton_kernels.holding``).

A step may be recorded only if it reads nothing back from the device (what ``tests/train/test_no_read_back.py``
checks), brings nothing from the host's memory (every tensor it reads exists before it, or is made by it) and writes
nothing made before it but the gradients it is given. One process only: a collective's bookkeeping (its bytes, its
timing) is Python, which a replay skips.

``GRIDGNN_DEVICE_PATHS=host`` (the host takes a GPU's code paths, :mod:`gridgnn.ops.device_paths`) records and
replays on the host instead (:class:`HostGraphs`, a test mode): every operation dispatched is recorded with its
tensors and replayed on them in order, a replay writing its results into the recorded outputs — what a CUDA graph
does with its kernels and their addresses — and what a capture cannot hold is refused (:class:`HostGraph`). So the
equality of graphed and eager training is checked here (``tests/train/test_graphed.py``); the capture itself
(streams, the graph's memory pool, cuSPARSE and Triton under capture) waits for a GPU.
"""
from __future__ import annotations

import contextlib
import gc
import warnings

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from ..errors import GridGnnError
from ..ops import triton_kernels
from ..ops.device_paths import device_paths

#: eager steps before the capture (on a side stream on a GPU): the step's first-use caches are built by then
WARMUP_STEPS = 2


class GraphedStep:
    r"""``step(epoch)`` — forward, loss and backward of one epoch, the epoch a 0-d ``int64`` tensor on ``device``;
    returns the loss — and ``evaluation()`` (optional: the eval-mode forward; returns device tensors), each run
    eagerly :data:`WARMUP_STEPS` times, then recorded once and replayed (module docstring).

    Call it with the epoch (an int) after the optimizer's ``zero_grad``: it returns the loss and leaves the
    gradients on ``params`` for the optimizer; then :meth:`evaluate`. Once recorded, the loss, the gradients and
    the evaluation's outputs are the same tensors at every epoch, overwritten by the next replay: read them before
    it. The model's ``epoch`` is left holding the device tensor."""

    def __init__(self, step, params, device, *, evaluation=None, warmup: int = WARMUP_STEPS):
        if not device_paths(device):
            raise GridGnnError("--cuda-graph records a step on a CUDA device; this run computes on the host "
                               "(--device cuda)")
        self.step, self.evaluation, self.warmup = step, evaluation, warmup
        self.params = [p for p in params if p.requires_grad]
        self.graphs = HostGraphs() if torch.device(device).type == "cpu" else CudaGraphs()
        self.epoch = torch.zeros((), dtype=torch.int64, device=device)
        self.graph = self.loss = self.eval_graph = self.eval_out = None
        self.grads: list = []
        self.pinned: list[torch.Tensor] = []  # what the captures read and did not make
        self.eager_steps = self.eager_evaluations = 0

    def __call__(self, epoch: int) -> torch.Tensor:
        self.epoch.fill_(epoch)
        if self.graph is None and self.eager_steps < self.warmup:
            self.eager_steps += 1
            with self.graphs.warming():
                return self.step(self.epoch)
        if self.graph is None:
            for p in self.params:  # the graph's backward makes the gradients in its own memory
                p.grad = None
            self.graph, self.loss = self._capture(lambda: self.step(self.epoch))
            self.grads = [p.grad for p in self.params]
        self.graph.replay()
        for p, grad in zip(self.params, self.grads):
            p.grad = grad
        return self.loss

    def evaluate(self):
        """The evaluation's outputs: eager until the step is recorded and the evaluation has warmed up as many
        times, then recorded once in the step's memory pool and replayed."""
        if self.eval_graph is None and (self.graph is None or self.eager_evaluations < self.warmup):
            self.eager_evaluations += 1
            with self.graphs.warming():
                return self.evaluation()
        if self.eval_graph is None:
            self.eval_graph, self.eval_out = self._capture(self.evaluation, pool=self.graph)
        self.eval_graph.replay()
        return self.eval_out

    def _capture(self, fn, pool=None):
        graph, out, read = self.graphs.capture(fn, pool)
        self.pinned += read
        return graph, out


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


class Capture(TorchDispatchMode):
    """Entered while a step is recorded: the tensors its operations read that none of them made (``read``, one per
    storage), which the :class:`GraphedStep` holds as long as the graph lives."""

    def __init__(self):
        super().__init__()
        self.made: set[int] = set()
        self.outside: dict[int, torch.Tensor] = {}

    @property
    def read(self) -> list[torch.Tensor]:
        return list(self.outside.values())

    def not_made(self, tensors) -> list[torch.Tensor]:
        """Of ``tensors`` (what the recorded kernel launches were given: they bypass the dispatcher), those the
        recorded operations did not make — one per storage: a storage read from outside (a view made inside of an
        outside tensor included: a cached table's row) or never seen. What the capture made lives in the graph's
        pool and needs no holding: held, the masks, attention values and gradients the launches wrote could not be
        freed or reused while the capture runs, nor after."""
        out = {}
        for t in tensors:
            ptr = t.untyped_storage().data_ptr()
            if ptr in self.outside or ptr not in self.made:
                out.setdefault(ptr, t)
        return list(out.values())

    def dispatched(self, func, args, kwargs):
        return func(*args, **kwargs)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        for part, ptr in _storages((args, kwargs)):
            if ptr not in self.made:
                self.outside.setdefault(ptr, part)
        out = self.dispatched(func, args, kwargs)
        for _, ptr in _storages(out):
            self.made.add(ptr)
        return out


class CudaGraphs:
    """Recording on a GPU: ``torch.cuda.graph``, the eager runs before it on a side stream (as PyTorch's
    whole-network capture does)."""

    def __init__(self):
        self.side = torch.cuda.Stream()

    @contextlib.contextmanager
    def warming(self):
        main = torch.cuda.current_stream()
        self.side.wait_stream(main)
        with torch.cuda.stream(self.side):
            yield
        main.wait_stream(self.side)

    @staticmethod
    def capture(fn, pool=None):
        """``(graph, fn's outputs, the tensors it read and did not make)``; ``pool``: a graph whose memory pool this
        one shares (replayed in the order recorded). An operation the capture does not admit ends the run with a
        :class:`GridGnnError` naming the first failure (the capture's end reports only that it was invalidated)."""
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph, pool=None if pool is None else pool.pool()):
                with Capture() as seen, triton_kernels.holding() as launched:
                    out = fn()
        except GridGnnError:
            raise
        except Exception as exc:  # noqa: BLE001 - CUDA's, cuSPARSE's or Triton's refusal under capture
            text = (str(first_error(exc)).strip().splitlines() or [type(first_error(exc)).__name__])[0]
            raise GridGnnError(f"--cuda-graph: this step could not be recorded on this GPU ({text}); train without "
                               "--cuda-graph") from None
        return graph, out, seen.read + seen.not_made(launched)


def first_error(exc: BaseException) -> BaseException:
    """The exception ``exc`` arose from: its explicit cause, or the one it was raised while handling (a capture's
    end reports only that an earlier operation invalidated it), back to the first; not past a ``from None``."""
    seen = {id(exc)}
    while True:
        earlier = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
        if earlier is None or id(earlier) in seen:
            return exc
        seen.add(id(earlier))
        exc = earlier


class HostGraphs:
    """Recording on the host (``GRIDGNN_DEVICE_PATHS=host``, a test mode): :class:`HostGraph`."""

    warming = staticmethod(contextlib.nullcontext)

    @staticmethod
    def capture(fn, pool=None):
        graph = HostGraph()
        with graph:
            out = fn()
        return graph, out, graph.read


#: operations that read a tensor's data into a host value (a number, a boolean)
_TO_HOST = ("_local_scalar_dense", "equal", "is_nonzero", "allclose")
#: operations whose output is sized by the data
_DATA_SIZED = ("nonzero", "masked_select", "_unique", "_unique2", "unique_consecutive", "unique_dim",
               "unique_dim_consecutive", "bincount", "coalesce", "_coalesce")


def _reads_back(func, args, kwargs) -> bool:
    """An operation a capture cannot hold: one that reads data into a host value (:data:`_TO_HOST`: ``.item()``,
    ``torch.equal`` …) or sizes its output by the data (:data:`_DATA_SIZED`, a boolean mask's index,
    ``repeat_interleave`` without its ``output_size``). (What reads a host tensor without an operation — ``.cpu()``,
    ``.numpy()``, ``.tolist()`` on the host — cannot be seen here; on a GPU they are copies a capture refuses.)"""
    name = func.overloadpacket.__name__
    if name in _TO_HOST or name in _DATA_SIZED:
        return True
    if name == "repeat_interleave":
        return func is torch.ops.aten.repeat_interleave.Tensor and kwargs.get("output_size") is None
    if name in ("index", "index_put", "index_put_", "_index_put_impl_"):  # a boolean mask among the indices
        indices = args[1] if len(args) > 1 else kwargs.get("indices", ())
        return any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in indices or ())
    return False


class HostGraph(Capture):
    r"""The host's stand-in for a CUDA graph: the operations dispatched while it is entered are recorded with their
    tensors (kept alive) and :meth:`replay` runs them again in order on the same tensors, each writing its result
    into the tensors it returned when recorded. Like a capture (whose kernels then read and write fixed addresses,
    with the scalars they were launched with), recording refuses, with a :class:`GridGnnError` naming the operation:

    * an operation that reads data into a host value or sizes its output by the data (:func:`_reads_back`);
    * a tensor that enters from the host: one that existed neither before the recording nor as an output of a
      recorded operation (made from host data: a replay would read what the recording read);
    * an operation that writes into a tensor made before the recording (a replay would write it again each epoch,
      where the recording, unlike a capture, has already run it once).

    Unlike a capture, the recording runs the operations (a replay then runs them again), and it keeps every tensor
    it read alive (a graph keeps addresses: what it reads from outside is held by :class:`GraphedStep`)."""

    def __init__(self):
        super().__init__()
        self.ops: list = []
        gc.collect()
        with warnings.catch_warnings():  # (the isinstance test touches deprecated module attributes)
            warnings.simplefilter("ignore")
            self.before = {ptr for t in gc.get_objects() if isinstance(t, torch.Tensor) and t.device.type == "cpu"
                           for _, ptr in _storages(t)}

    def dispatched(self, func, args, kwargs):
        name = str(func.overloadpacket).removeprefix("aten.")
        for _, ptr in _storages((args, kwargs)):
            if ptr not in self.before and ptr not in self.made:
                raise GridGnnError(f"--cuda-graph: the step's {name} reads a tensor made from host data during the "
                                   "step; a CUDA graph would read the same data at every replay")
        schema = func._schema.arguments
        written = [a for s, a in zip(schema, args) if s.alias_info is not None and s.alias_info.is_write]
        written += [kwargs[s.name] for s in schema if s.name in kwargs and s.alias_info is not None
                    and s.alias_info.is_write]
        for _, ptr in _storages(written):
            if ptr in self.before:
                raise GridGnnError(f"--cuda-graph: the step's {name} writes a tensor made before the step; a "
                                   "CUDA graph would write it again at every replay")
        if _reads_back(func, args, kwargs):
            raise GridGnnError(f"--cuda-graph: the step reads a value back ({name}); a CUDA graph cannot hold it")
        out = func(*args, **kwargs)
        for _, ptr in _storages(out):  # (an address freed since the recording began is the step's own now)
            self.before.discard(ptr)
        self.ops.append((func, args, kwargs, out))
        return out

    def replay(self) -> None:
        """Every recorded operation again, in order, its results written into the tensors it returned."""
        with torch.no_grad():
            for func, args, kwargs, out in self.ops:
                for (mine, ptr), (now, at) in zip(_storages(out), _storages(func(*args, **kwargs))):
                    if at != ptr:  # (a view or an in-place result is already where it belongs)
                        mine.copy_(now)
