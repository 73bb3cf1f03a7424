r"""What a task reports, whatever its batch source (the full graph, :mod:`~gridgnn.train.full_graph`, or sampled
minibatches, :mod:`~gridgnn.train.minibatch`): its part of an epoch's console line, its summary fields and its
last line. Node classification's is :class:`NodeReport`; link prediction's is
:class:`~gridgnn.train.link.LinkReport`."""
from __future__ import annotations

from .loop import fmt


class NodeReport:
    """Node classification: the loss and the three accuracies."""

    def line(self, r: dict) -> str:
        """The task's part of an epoch's console line (the worker adds its source's numbers)."""
        return (f"loss {r['loss']:.4f} | train {fmt(r['train_acc'], '.3f')} "
                f"val {fmt(r['val_acc'], '.3f')} test {fmt(r['test_acc'], '.3f')}")

    def summary_fields(self) -> dict:
        return {}

    def final(self, summary: dict) -> str:
        return (f"final: test_acc={fmt(summary['test_acc'], '.4f')} val_acc={fmt(summary['val_acc'], '.4f')} "
                f"(best epoch {summary['best_epoch']})")
