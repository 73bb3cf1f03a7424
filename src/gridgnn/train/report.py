"""A run's plots: the epoch-time breakdown (per rank, local compute vs each collective, median epoch) and the
learning curves (loss and accuracies per epoch).

Drawn on matplotlib's :class:`~matplotlib.figure.Figure` alone, never through ``pyplot``: a run inside a user's
session leaves its plotting backend and its open figures as they were (no ``matplotlib.use``, no global figure)."""
from __future__ import annotations

import statistics

from matplotlib.figure import Figure

from ..graph.files import atomic_write


def breakdown_plot(everyone: list[dict], path: str, *, title: str = "") -> None:
    """Stacked bars, one per rank: compute and the seconds per epoch of every training collective; written to
    ``path`` atomically (PNG whatever the name)."""
    keys = sorted({k for er in everyone for k in er["phases"] if k.split(".")[0] in ("fwd", "bwd", "grad")})
    ranks = [er["rank"] for er in everyone]
    fig = Figure(figsize=(max(4.0, 0.6 * len(ranks) + 3), 3.6))
    ax = fig.subplots()
    bottom = [0.0] * len(ranks)
    compute = [statistics.median(er["compute_times"]) * 1e3 for er in everyone]
    ax.bar(ranks, compute, label="local compute", color="#4c72b0")
    bottom = compute
    colors = ["#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c", "#ccb974"]
    for i, k in enumerate(keys):
        vals = [er["phases"].get(k, {}).get("seconds", 0.0) * 1e3 for er in everyone]
        ax.bar(ranks, vals, bottom=bottom, label=k, color=colors[i % len(colors)])
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_xlabel("rank")
    ax.set_ylabel("ms per epoch")
    ax.set_xticks(ranks)
    ax.set_title(title or "epoch time breakdown", fontsize=9)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    _save(fig, path)


def curves_plot(history: list[dict], path: str, *, title: str = "") -> None:
    """The training loss (left axis) and the train / val / test accuracy (right axis) of every epoch record
    (``metrics.jsonl``'s lines, a resumed run's earlier epochs included); written to ``path`` atomically."""
    epochs = [r["epoch"] for r in history]
    fig = Figure(figsize=(6.4, 3.6))
    ax = fig.subplots()
    ax.plot(epochs, [r["loss"] for r in history], color="#4c72b0", label="training loss")
    ax.set_xlabel("epoch")
    ax.set_ylabel("loss")
    acc = ax.twinx()
    link = any(r.get("val_auc") is not None or r.get("test_auc") is not None for r in history)
    metric, label = ("auc", "AUC") if link else ("acc", "accuracy")  # link prediction: its AUC
    for name, color in (("train", "#55a868"), ("val", "#dd8452"), ("test", "#c44e52")):
        values = [r.get(f"{name}_{metric}") for r in history]
        if any(v is not None for v in values):  # an empty split has no accuracy
            acc.plot(epochs, [float("nan") if v is None else v for v in values], color=color, label=f"{name} {label}")
    acc.set_ylabel(label)
    acc.set_ylim(0.0, 1.0)
    lines = ax.get_legend_handles_labels()
    more = acc.get_legend_handles_labels()
    ax.legend(lines[0] + more[0], lines[1] + more[1], fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=4)
    ax.set_title(title or "learning curves", fontsize=9)
    fig.tight_layout()
    _save(fig, path)


def _save(fig: Figure, path: str) -> None:
    with atomic_write(path) as fh:  # a temporary name, then renamed: never a half-written PNG
        fig.savefig(fh, format="png", dpi=110)
