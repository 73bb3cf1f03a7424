r"""Wire precision: node rows and partial sums may cross the wire in a narrower floating type than they are held in.

``--comm-dtype bfloat16|float16`` (Python: ``comm_dtype=``) sends the node data of the forward, backward and
evaluation passes in that type; ``auto`` starts in bfloat16 and keeps a guard on it (:class:`WirePolicy`). What is
*never* narrowed: weights and their gradients, edge values broadcast with a sparse panel, indices and keys, the
loss, the ``max``/``min`` reductions (the selecting semirings compare the reduced value with their own), and
everything outside the ``fwd``/``bwd``/``eval`` phases. The engines say which transfers carry node data (a
schedule record's ``exact`` flag; ``wire=True`` on a direct call), :class:`~gridgnn.distributed.comm.Comm`
narrows those, and the byte models price the same records at the narrower element size.

Rounding rule (what a rank computes with):

* a value is rounded to the wire type when it crosses the wire; what a rank keeps of its own (its piece of an
  all-gather, all-to-all or reduce-scatter, the root's block of a broadcast) is not;
* every reduction adds in the tensor's own type (float32 or float64), never in the wire type: a sum is an
  all-to-all of the pieces and a local sum (``reduce``: the pieces' sums then gathered onto the root), not a bf16 ring;
* the result of an all-reduce is rounded once for every member (the owner of a piece included), so replicated
  results stay identical on every rank.

The ``auto`` guard. Every ``check_every`` steps one step runs each narrowed collective a second time in the
other precision on the same inputs (recorded under phase ``probe``, the guard's own cost), and measures the
relative error ``‖low − exact‖ / ‖exact‖`` of what the members receive. After that step the ranks agree on the
largest error of each *site* — ``"<phase>.<collective>@<axis>"``, a key every member of a collective shares — and
a site whose error exceeds ``tolerance`` keeps the exact type for the rest of the run (a decision is never
reversed, so the run cannot oscillate). The decisions and errors go to ``metrics.jsonl`` (``wire`` of the epochs
that probed) and ``summary.json`` (``comm_wire``).
"""
from __future__ import annotations

import math

import torch

from ..errors import GridGnnError

#: ``--comm-dtype`` values → the wire type (``None``: the training dtype; ``auto``: bfloat16 under the guard)
WIRE_TYPES = {"float64": torch.float64, "float32": torch.float32, "bfloat16": torch.bfloat16,
              "float16": torch.float16, "auto": torch.bfloat16}

#: the phases whose node data may be narrowed
WIRE_PHASES = ("fwd", "bwd", "eval")


def wire_element_bytes(comm_dtype: str | None, train_dtype: str) -> int:
    """Bytes per element of narrowed node data (the training dtype's when nothing is narrowed)."""
    train = WIRE_TYPES[train_dtype].itemsize
    if comm_dtype in (None, "", train_dtype):
        return train
    return min(train, WIRE_TYPES[comm_dtype].itemsize)


def check_comm_dtype(comm_dtype: str | None, train_dtype: str) -> None:
    """Refuse a wire type the run cannot use: unknown, or wider than the training dtype."""
    if comm_dtype in (None, ""):
        return
    if comm_dtype not in WIRE_TYPES:
        raise GridGnnError(f"--comm-dtype must be one of {', '.join(WIRE_TYPES)}, got {comm_dtype!r}")
    if WIRE_TYPES[comm_dtype].itemsize > WIRE_TYPES[train_dtype].itemsize:
        raise GridGnnError(f"--comm-dtype {comm_dtype} is wider than --dtype {train_dtype}: the wire can only carry "
                           f"the node data in the training dtype or a narrower one")


class WirePolicy:
    r"""Which collectives a rank narrows, and the ``auto`` guard's measurements.

    Args:
        low (torch.dtype): the narrow wire type.
        guard (bool): ``auto``: probe every ``check_every`` steps and keep the exact type where the error
            exceeds ``tolerance``. (default: ``False``)
        check_every (int): steps between probes (the first step probes). (default: ``50``)
        tolerance (float): the largest relative error a site may show and stay narrow. (default: ``1e-2``)
    """

    def __init__(self, low: torch.dtype, *, guard: bool = False, check_every: int = 50, tolerance: float = 1e-2):
        self.low, self.guard = low, bool(guard)
        self.check_every, self.tolerance = max(1, int(check_every)), float(tolerance)
        self.exact: set[str] = set()  # sites kept in the exact type (decided by the guard)
        self.worst: dict[str, float] = {}  # site → largest error any probe measured
        self.probing = False
        self._overflow: str | None = None  # float16: the first value beyond its range, where (the trainer stops)
        self._watched: list = []  # the casts not yet read: (overflowed, peak, where) as device scalars
        self._started = False  # the run's first step probes (a resumed run's on another layout too: resume)
        self._errors: dict[str, float] = {}  # this probe's errors on this rank

    #: casts watched before they are read all at once (a bound for a loop that never reads :attr:`overflow`)
    WATCHED = 256

    def watch(self, exact: torch.Tensor, narrowed: torch.Tensor, where: str) -> None:
        """Watch a cast to float16 for values beyond its range (``narrowed`` not all finite where ``exact`` is):
        two device scalars, read with the others when :attr:`overflow` is (at the step's end: a read per
        collective would wait for the device every time); ``where`` names the collective, ``{peak}`` the value."""
        if self._overflow is None:
            peak = exact.detach().abs().amax() if exact.numel() else exact.new_zeros(())
            self._watched.append((~torch.isfinite(narrowed).all() & torch.isfinite(peak), peak, where))
            if len(self._watched) >= self.WATCHED:
                self._read_watched()

    def _read_watched(self) -> None:
        """Read what is watched (one transfer from the device) and keep the first overflow's words."""
        if self._watched:
            hits = torch.stack([f for f, _, _ in self._watched]).cpu().nonzero()
            if hits.numel():
                _, peak, where = self._watched[int(hits[0])]
                self._overflow = where.format(peak=f"{float(peak):.4g}")
            self._watched.clear()

    @property
    def overflow(self) -> str | None:
        """Where the first watched cast went beyond float16's range, or ``None`` (reads what is watched: once)."""
        if self._overflow is None:
            self._read_watched()
        return self._overflow

    def narrows(self, tensor: torch.Tensor) -> bool:
        """Whether ``tensor`` is wider than the wire type (only floating data is ever narrowed)."""
        return tensor.is_floating_point() and tensor.element_size() > self.low.itemsize

    def begin_step(self, step: int) -> None:
        """Start step ``step`` (0-based, counted over the run): a probe when the guard is on and it is due (every
        ``check_every`` steps, and the first step this process runs, unless it goes on from a checkpoint
        of the same layout: :meth:`resume`)."""
        self.probing = self.guard and (step % self.check_every == 0 or not self._started)
        self._started = True
        self._errors = {}

    def observe(self, site: str, low: torch.Tensor, exact: torch.Tensor) -> None:
        """Record the relative error of ``low`` against ``exact`` at ``site`` (the largest of the step)."""
        ex = exact.double()
        den = float(torch.linalg.vector_norm(ex))
        num = float(torch.linalg.vector_norm(low.double() - ex))
        err = num / den if den > 0 else (0.0 if num == 0 else math.inf)
        if not math.isfinite(err):
            err = math.inf
        self._errors[site] = max(self._errors.get(site, 0.0), err)

    def settle(self, comm) -> dict | None:
        """After a probe step: agree with every rank on each site's largest error (metadata, 0 bytes), keep the
        exact type where it exceeds the tolerance; returns ``{site: {"error", "wire"}}`` (``None``: no probe)."""
        if not self.probing:
            return None
        self.probing = False
        with comm.phase("probe"):
            every = comm.all_gather_json({k: (v if math.isfinite(v) else "inf") for k, v in self._errors.items()},
                                         comm.grid.names)
        merged: dict[str, float] = {}
        for errs in every:
            for site, v in errs.items():
                v = math.inf if v == "inf" else float(v)
                merged[site] = max(merged.get(site, 0.0), v)
        report = {}
        for site in sorted(merged):
            err = merged[site]
            self.worst[site] = max(self.worst.get(site, 0.0), err)
            if err > self.tolerance:
                self.exact.add(site)
            report[site] = {"error": err if math.isfinite(err) else "inf", "wire": self.dtype_name(site)}
        return report

    def resume(self, records: list[dict], *, same_layout: bool) -> None:
        """Go on from a checkpoint's epoch ``records`` (their ``wire``: the reports of :meth:`settle`): the sites
        kept exact stay exact and their errors count, as in the run not interrupted. ``same_layout``: the run goes
        on with the checkpoint's algorithm and process grid, whose sites those are, so the next probe is when it is
        due (else the first step probes the new layout's sites)."""
        for rec in records:
            for site, report in (rec.get("wire") or {}).items():
                err = math.inf if report["error"] == "inf" else float(report["error"])
                self.worst[site] = max(self.worst.get(site, 0.0), err)
                if report["wire"] == "exact":
                    self.exact.add(site)
        self._started = bool(same_layout)

    def dtype_name(self, site: str) -> str:
        return "exact" if site in self.exact else str(self.low).removeprefix("torch.")

    def summary(self) -> dict:
        """What ``summary.json`` reports: the wire type, and per site the decision and the largest error."""
        return {"low": str(self.low).removeprefix("torch."), "guard": self.guard, "tolerance": self.tolerance,
                "check_every": self.check_every,
                "sites": {s: {"wire": self.dtype_name(s), "max_error": e if math.isfinite(e) else "inf"}
                          for s, e in sorted(self.worst.items())},
                "kept_exact": sorted(self.exact)}
