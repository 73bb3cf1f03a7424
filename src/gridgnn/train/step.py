r"""One training step and one evaluation, shared by the trainer and the fidelity harness."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch



@dataclass
class LocalData:
    r"""This rank's blocks, as its plan lays them out.

    Attributes:
        x: the layer-0 input block (rows ``plan.in_rows(0)``, columns ``plan.in_cols(0, f)``).
        y: labels (−1 = none) and masks (name → bool) of the logits rows ``node_ids = plan.out_rows()``.
        n_train: global number of training nodes (loss normalizer).
    """

    x: torch.Tensor
    y: torch.Tensor
    masks: dict
    node_ids: np.ndarray
    n_train: int


def allreduce_grads(model: torch.nn.Module, comm, axis) -> None:
    """Sum parameter gradients over ``axis`` (one flat all-reduce, phase ``grad``)."""
    params = [p for p in model.parameters() if p.grad is not None]
    if not axis or not params or comm.grid.world_size == 1 or comm.grid.size(axis) == 1:
        return
    flat = torch.cat([p.grad.reshape(-1) for p in params])
    with comm.phase("grad"):
        comm.all_reduce(flat, axis)
    off = 0
    for p in params:
        k = p.grad.numel()
        p.grad.copy_(flat[off:off + k].view_as(p.grad))
        off += k


def forward_backward(model, plan, comm, data: LocalData, *, epoch: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Forward (phase ``fwd``), backward (``bwd``) and gradient reduction (``grad``); returns the local loss
    summand and the logits. The caller steps the optimizer."""
    model.train()
    model.epoch = epoch
    with comm.phase("fwd"):
        logits = model(data.x, plan)
        loss = plan.loss(logits, data.y, data.masks["train"], data.n_train)
    with comm.phase("bwd"):
        loss.backward()
    allreduce_grads(model, comm, plan.grad_axes)
    return loss.detach(), logits.detach()


@torch.no_grad()
def evaluate(model, plan, comm, data: LocalData) -> tuple[torch.Tensor, torch.Tensor]:
    """Eval-mode forward (phase ``eval``); returns logits and the local counts
    ``[correct_train, n_train, correct_val, n_val, correct_test, n_test]`` (not yet reduced; each row is
    counted on ``plan.copies`` ranks)."""
    model.eval()
    with comm.phase("eval"):
        logits = model(data.x, plan)
        pred = plan.predict(logits)
    counts = []
    for name in ("train", "val", "test"):
        m = data.masks[name]
        counts += [(pred[m] == data.y[m]).sum().item(), int(m.sum().item())]
    return logits, torch.tensor(counts, dtype=torch.float64)
