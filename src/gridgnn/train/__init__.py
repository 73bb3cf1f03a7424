r"""Training: the config (:mod:`.config`), the one training loop (:mod:`.worker`) over a task on a batch source —
the full graph (:mod:`.full_graph`) or sampled minibatches (:mod:`.minibatch`) —, outputs and checkpoints, and the
Python entry point (:mod:`.api`).

The package itself is callable: ``gridgnn.train(config, graph=None, **options)`` is
:func:`gridgnn.train.api.train` — train and return the summary on rank 0.
"""
import sys
import types


class _CallablePackage(types.ModuleType):
    def __call__(self, config=None, *, graph=None, **options):
        from .api import train

        return train(config, graph=graph, **options)


sys.modules[__name__].__class__ = _CallablePackage
