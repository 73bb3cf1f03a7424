r"""A primitive's *program*: the records of its family's schedule it runs, in order, forward and backward.

A family file writes, once per primitive, which records a call runs (:class:`Step`: the phase, the record maker's
name, the :class:`~gridgnn.distributed.accounting.Transfer` records, the width of a row and whether the wire may
narrow it). Two readers take the same list:

* the engine's autograd functions run it — each collective asks :meth:`Program.take` for its step by name, in
  the program's order, and :meth:`Program.done` checks that a phase ran every step it lists, so an engine whose
  order of steps differs from its program's (or that skips one) fails on the first call, on every rank. Where a
  step's records are run by the engine's own loop (a block-row stage sweep, SUMMA's panels) the engine takes the
  step by name and its loop runs the same schedule's records; the generic ``edge_softmax`` and ``row_sum`` (one
  code for every family, through the graph's ``row_all``), the fused attention kernels and Plexus' input gather of
  a ``sddmm_dot`` that precedes its ``spmm`` run outside a program (the models read those programs only);
* the planner's byte, time and memory models sum it (:meth:`Step.row_bytes` prices a row at the training
  element size), so the bytes a model predicts are the bytes of the records the engine ran.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch

#: Primitives that move nothing on a layout whose node tensors hold every feature column (block-row, SUMMA): the
#: weight is replicated, so ``linear`` is local (its gradient is summed with the others after the step)
LOCAL_ON_WHOLE_ROWS = ("linear", "add_bias", "head_scores", "head_mean", "normalize_rows", "scale", "at_destinations")

#: bytes of one element of each unit a step's rows are counted in (``elem``: the training dtype, given by the caller)
UNIT_BYTES = {"key": 8, "byte": 1}


class Step(NamedTuple):
    """One collective of a primitive's program: ``phase`` (``"fwd"`` / ``"bwd"``), ``name`` (what the engine asks
    for: the schedule's record maker), ``made`` (its :class:`~gridgnn.distributed.accounting.Transfer` records, one
    or a list, or a function that makes them when :attr:`records` is first read: a planner pricing thousands of
    ranks reads the sum of some records without building them), ``cols`` (elements per row of the records, in
    ``unit``: ``"elem"`` the training dtype, ``"key"`` int64, ``"byte"`` one byte) and ``exact`` (never narrowed on
    the wire: a ``max``/``min``, keys)."""

    phase: str
    name: str
    made: object
    cols: float
    unit: str = "elem"
    exact: bool = False

    @property
    def records(self):
        """The records the step runs, in order (a sequence: read it, do not change it)."""
        made = self.made() if callable(self.made) else self.made
        return made if isinstance(made, list) else (made,)

    def row_bytes(self, elem_bytes: int) -> float:
        """Bytes of one row of the records, at ``elem_bytes`` per training element."""
        return self.cols * (elem_bytes if self.unit == "elem" else UNIT_BYTES[self.unit])


class Program:
    """The steps of one primitive call (see the module docstring); built by a family's ``program`` function with
    :meth:`fwd` and :meth:`bwd`, run by its engine with :meth:`take` and :meth:`done`."""

    __slots__ = ("steps", "_next")

    def __init__(self):
        self.steps: list[Step] = []
        self._next = {"fwd": 0, "bwd": 0}

    def add(self, phase: str, name: str, records, cols: float, unit: str = "elem", exact: bool = False) -> None:
        """Add a step; ``records``: one :class:`~gridgnn.distributed.accounting.Transfer`, a list of them, or a
        function that makes them."""
        self.steps.append(Step(phase, name, records, cols, unit, exact))  # (a tuple: a planner makes millions)

    def fwd(self, name: str, records, cols: float, unit: str = "elem", exact: bool = False) -> None:
        self.add("fwd", name, records, cols, unit, exact)

    def bwd(self, name: str, records, cols: float, unit: str = "elem", exact: bool = False) -> None:
        self.add("bwd", name, records, cols, unit, exact)

    def phase(self, phase: str) -> list[Step]:
        return [s for s in self.steps if s.phase == phase]

    # ------------------------------------------------------------------ the engine's side
    def take(self, phase: str, name: str):
        """The records of ``phase``'s next step, which must be ``name`` (the engine's next collective)."""
        steps = self.phase(phase)
        k = self._next[phase]
        if k >= len(steps) or steps[k].name != name:
            said = steps[k].name if k < len(steps) else "nothing more"
            raise RuntimeError(f"the engine ran {name!r} ({phase}) where its program says {said!r}: the engine and "
                               "the family's program disagree")
        self._next[phase] = k + 1
        return steps[k].records

    def take_one(self, phase: str, name: str):
        """:meth:`take` of a step of one record."""
        (rec,) = self.take(phase, name)
        return rec

    def done(self, phase: str) -> None:
        """Check that the engine ran every step of ``phase``; the phase may then run again from its first step
        (a backward through a retained graph, ``gradcheck``)."""
        left = self.phase(phase)[self._next[phase]:]
        if left:
            raise RuntimeError(f"the engine skipped {', '.join(s.name for s in left)} ({phase}) of its program")
        self._next[phase] = 0


def needs_grad(*inputs) -> tuple[bool, ...]:
    """Which of an autograd function's ``inputs`` it will give a gradient (its ``ctx.needs_input_grad``): the
    ``grads`` of the call an engine builds its program for."""
    on = torch.is_grad_enabled()
    return tuple(bool(on and t is not None and t.requires_grad) for t in inputs)


@dataclass(frozen=True)
class PrimitiveCall:
    """One primitive of a traced step: ``width`` = columns of the node tensor it fetches (heads for the
    score primitives; the input width of a ``linear``, the full width of a ``head_scores`` / ``head_mean``
    input; the parameter's size for ``param_grad``), ``heads`` = columns of its edge values (heads of
    ``head_scores`` / ``head_mean``), ``grads`` = which inputs need a gradient, ``out_width`` = the output width
    of a ``linear``, ``axes`` = the mesh axes a ``param_grad`` all-reduce runs over."""

    name: str
    layer: int
    width: int
    heads: int
    grads: tuple[bool, ...]
    out_width: int = 0
    masked: bool = False  # spmm_select: an edge mask travels with the pattern (heads: 1 with edge values, else 0)
    axes: tuple[str, ...] = ()
