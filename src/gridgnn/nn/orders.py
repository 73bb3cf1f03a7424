"""What an attention model asks of the plan's vertex orders."""
from __future__ import annotations

from ..errors import GridGnnError


def require_destination_scores(plan, model: str) -> None:
    """Refuse a plan on which ``sddmm`` cannot read per-node values of the destinations: a double permutation puts a
    vertex's destination row on another rank than its features, and only Plexus gathers it across the orders."""
    if plan is not None and getattr(getattr(plan, "source", None), "double", False) \
            and not plan.scores_across_orders:
        raise GridGnnError(f"--model {model} on {plan.name} needs one vertex order per layer: a double permutation "
                           "puts a vertex's destination score on another rank than its features (double-perm "
                           "and balanced-perm do); use --partition random or identity, or --algo plexus")
