r"""gridgnn: communication-avoiding distributed GNN training on ``torch.distributed``.

The public surface (everything else is internal and may change between versions):

* training: :class:`TrainConfig` (or built from its sections, ``TrainConfig.from_sections(DataOptions(...),
  OptimizerOptions(...), ...)``), :class:`Trainer`, ``gridgnn.train(config)`` (``gridgnn.train.api``), which
  returns the summary with the trained model; :func:`load` reads a run's model back (:class:`TrainedModel`:
  ``predict`` on any graph and algorithm, ``to_pyg``);
* data: :func:`load_graph` (a data SPEC, a PyG ``Data`` or a :class:`Graph` in, a :class:`Graph` out), :class:`Graph`;
* models: :class:`Model`, :func:`register_model` and the built-in models in :mod:`gridgnn.nn`; the primitives a
  model composes are the methods of the *plan* it receives (see :mod:`gridgnn.nn.base`);
* partitioning: :func:`partition_graph` (``gridgnn.partition``); :func:`shard` writes a sharded dataset
  (``data="sharded:DIR"``: each rank reads only its blocks);
* errors: :class:`GridGnnError` (bad input or configuration), :class:`TrainingFailed` (a spawned job failed).

Rooms (dependencies point downward): ``cli``/``train`` → ``nn`` → ``sampling``/``planner`` → ``parallel`` →
``partition`` → ``ops``/``graph`` → ``distributed``.
"""
from .errors import GridGnnError

from ._version import __version__

_LAZY = {
    "TrainConfig": ("gridgnn.train.config", "TrainConfig"),
    **{name: ("gridgnn.train.config", name) for name in ("DataOptions", "TaskOptions", "ParallelOptions",
                                                          "OptimizerOptions", "SamplingOptions", "RunOptions")},
    "Trainer": ("gridgnn.train.api", "Trainer"),
    "TrainingFailed": ("gridgnn.train.launching", "TrainingFailed"),
    "load_graph": ("gridgnn.graph.spec", "load_graph"),
    "Graph": ("gridgnn.graph.graph", "Graph"),
    "Model": ("gridgnn.nn.base", "Model"),
    "register_model": ("gridgnn.nn.base", "register_model"),
    "partition_graph": ("gridgnn.partition.partitioners", "partition_graph"),
    "shard": ("gridgnn.commands.shard", "shard"),
    "load": ("gridgnn.train.trained", "load"),
    "TrainedModel": ("gridgnn.train.trained", "TrainedModel"),
}
_SUBPACKAGES = ("nn", "graph", "parallel", "partition", "planner", "sampling", "distributed", "ops")

__all__ = ["GridGnnError", "__version__", "train", *_LAZY]

from . import train  # noqa: E402 - the package is callable: gridgnn.train(config) trains (gridgnn.train.api)


def __getattr__(name: str):  # imported on first use: ``import gridgnn`` and ``gridgnn --version`` stay light
    if name in _SUBPACKAGES:  # import gridgnn; gridgnn.nn.GCN works
        import importlib

        return importlib.import_module(f"gridgnn.{name}")
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'gridgnn' has no attribute {name!r}")
