"""The epoch-time breakdown plot: per rank, local compute vs each collective (median epoch)."""
from __future__ import annotations

import statistics

from .outputs import atomic_write


def breakdown_plot(everyone: list[dict], path: str, *, title: str = "") -> None:
    """Stacked bars, one per rank: compute and the seconds per epoch of every training collective; written to
    ``path`` atomically (PNG whatever the name)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = sorted({k for er in everyone for k in er["phases"] if k.split(".")[0] in ("fwd", "bwd", "grad")})
    ranks = [er["rank"] for er in everyone]
    fig, ax = plt.subplots(figsize=(max(4.0, 0.6 * len(ranks) + 3), 3.6))
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
    ax.set_title(title or "epoch time breakdown")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    try:
        with atomic_write(path) as fh:  # a temporary name, then renamed: never a half-written PNG
            fig.savefig(fh, format="png", dpi=110)
    finally:
        plt.close(fig)
