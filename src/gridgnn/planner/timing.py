r"""The time model: a training step's time from the simulator's per-rank volumes and local work and a machine
profile (:class:`Profile`, from ``gridgnn calibrate`` or a documented preset).

Per rank :math:`r` (the CAGNET §IV α–β costs, priced per collective and grid axis as Plexus §4.2 places axes):

.. math::

    T^{comp}_r = \sum_u \kappa_u\, W_{u,r} \qquad
    T^{comm}_r = \sum_{(c,\,a)} \alpha_{c}(g_a)\, m_{c,a,r} + \beta_{c}(g_a, s_a)\, \max(\text{sent}, \text{recv})_{c,a,r}

with the local work :math:`W_{u,r}` in the units of :data:`~gridgnn.planner.primitives.WORK_UNITS` (edge ×
column products, dense multiply-adds, node elements written, kernel calls) priced by the profile's kernel
coefficients :math:`\kappa_u` for the threads a rank gets; :math:`m` the messages (collective calls) and the bytes of
collective :math:`c` along axis :math:`a` of :math:`g_a` members and rank stride :math:`s_a`. An axis whose
members sit on several nodes (``ranks_per_node``: :math:`s_a g_a >` ranks per node) is priced with the
inter-node link, its bandwidth shared by the :math:`\min(\text{ranks per node}, s_a)` groups that cross the
node's links at once (Plexus' :math:`\beta_Z`). Ranks that share CPU cores (``cores > 0``) cannot compute faster
than the cores allow, and a collective measured on :math:`g` processes runs
:math:`\max(1, Pt/C) / \max(1, g t/C)` times slower among :math:`P` ranks on :math:`C` cores (the other groups
run on the same cores, :meth:`Profile.core_sharing`):

.. math::

    T = \theta_{comp} \max\Big(\max_r T^{comp}_r,\; \frac{t}{C}\max_{\text{node}}\sum_{r \in \text{node}}
        T^{comp}_r\Big) + \theta_{comm} \max_r T^{comm}_r + \theta_0

(:math:`t` threads per rank, :math:`C` cores of a node, shared by its ``ranks_per_node`` ranks; one device per rank:
the first term alone). The coefficients
:math:`\theta` are 1, 1, 0 until :func:`fit_profile` fits them by least squares to measured runs
(``gridgnn calibrate``: to the short training runs it makes itself, or with ``--fit`` to runs given), which
absorbs what the microbenchmarks miss (overlap, the optimizer, Python).
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field

import numpy as np

from ..errors import GridGnnError
from .primitives import WORK_UNITS

COLLECTIVES = ("allreduce", "bcast", "bcast_sparse", "reduce", "allgather", "reducescatter", "alltoallv")
PROFILE_VERSION = 1
#: what a profile's ``fit`` holds: the time model's factors and constant, and (``gridgnn calibrate --fit``) the runs
#: it was fitted to and its relative errors on them
FIT_KEYS = ("comp", "comm", "const_s", "runs", "median_rel_err", "max_rel_err")


@dataclass
class Profile:
    r"""A machine's costs.

    Attributes:
        name (str): what it describes (``measured on …`` or a preset's name).
        device (str): ``cpu`` or ``cuda``.
        cores (int): CPU cores the ranks of one node share (0: every rank has its own device).
        ranks_per_node (int): ranks per node (0: every rank on one node).
        kernels (dict): ``{threads: {unit: seconds per unit}}`` (units :data:`WORK_UNITS`; ``threads`` as a string).
        collectives (dict): measured ``{collective: {members: [alpha_s, beta_s_per_byte]}}`` (members as a
            string); a group size not listed takes the nearest one's β and scales α by :func:`latency_steps`; a
            collective not listed falls back to ``links``.
        links (dict): ``{"intra": {"alpha_s", "bandwidth_Bps"}, "inter": {...}}``: per-step latency and per-rank
            bandwidth of a link (``inter``: of the node's network injection, shared by the groups crossing it).
        fit (dict): ``{"comp": θ, "comm": θ, "const_s": θ₀}`` and what the fit measured (:func:`fit_profile`).
        sources (dict): where each number comes from.
    """

    name: str
    device: str = "cpu"
    cores: int = 0
    ranks_per_node: int = 0
    kernels: dict = field(default_factory=dict)
    collectives: dict = field(default_factory=dict)
    links: dict = field(default_factory=dict)
    fit: dict = field(default_factory=lambda: {"comp": 1.0, "comm": 1.0, "const_s": 0.0})
    sources: dict = field(default_factory=dict)
    version: int = PROFILE_VERSION

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, obj: dict, where: str = "profile") -> "Profile":
        if not isinstance(obj, dict) or "name" not in obj or "kernels" not in obj:
            raise GridGnnError(f"{where} is not a gridgnn profile (write one with gridgnn calibrate)")
        if obj.get("version") != PROFILE_VERSION:
            raise GridGnnError(f"{where} is a profile of version {obj.get('version')}; this gridgnn reads version "
                               f"{PROFILE_VERSION} (run gridgnn calibrate again)")
        known = {f for f in cls.__dataclass_fields__}
        unknown = sorted(str(k) for k in obj if k not in known)
        if unknown:  # (a misspelt key left its prices to defaults without a word)
            raise GridGnnError(f"{where}: unknown key {unknown[0]!r} (a profile holds {', '.join(sorted(known))})")
        try:
            prof = cls(**{k: v for k, v in obj.items() if k in known})
        except TypeError as exc:
            raise GridGnnError(f"{where}: {exc}") from None
        prof._check(where)
        return prof

    def _check(self, where: str) -> None:
        """Every number where the model reads one: a profile from a file is checked before it is used."""
        def bad(what: str):
            raise GridGnnError(f"{where}: {what} (write the profile with gridgnn calibrate)")

        def number(v, positive=False) -> bool:
            return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and \
                (v > 0 if positive else v >= 0)

        def count(v) -> bool:
            return isinstance(v, int) and not isinstance(v, bool) and v >= 0

        def size_key(k, least=1) -> bool:  # a count as its decimal (the prices look "2" up, not "02")
            return isinstance(k, str) and k.isascii() and k.isdigit() and k == str(int(k)) and int(k) >= least

        if not isinstance(self.name, str) or self.device not in ("cpu", "cuda"):
            bad("name must be a string and device cpu or cuda")
        if not (count(self.cores) and count(self.ranks_per_node)):
            bad("cores and ranks_per_node must be integers >= 0")
        if not isinstance(self.kernels, dict) or not self.kernels:
            bad("kernels must map thread counts to coefficients")
        for t, k in self.kernels.items():
            if not size_key(t) or not isinstance(k, dict) or not all(u in WORK_UNITS and number(v)
                                                                     for u, v in k.items()):
                bad(f"kernels[{t!r}] must map the units {', '.join(WORK_UNITS)} to seconds >= 0")
            if not all(u in k for u in ("flop", "elem", "launch")) or not ("edge" in k or "nnz" in k):
                bad(f"kernels[{t!r}] prices no {'/'.join(u for u in ('flop', 'elem', 'launch') if u not in k) or 'edge'}"
                    " (a unit left out would cost nothing)")
        if not isinstance(self.collectives, dict):
            bad("collectives must map collectives to group sizes")
        for c, table in self.collectives.items():
            if c not in COLLECTIVES or not isinstance(table, dict) or not table or not all(
                    size_key(g, least=2) and isinstance(ab, list) and len(ab) == 2 and all(number(x) for x in ab)
                    for g, ab in table.items()):
                bad(f"collectives[{c!r}] must map group sizes >= 2 to [alpha_s, beta_s_per_byte] >= 0")
        if not isinstance(self.links, dict):
            bad("links must map intra/inter to their latency and bandwidth")
        for kind, link in self.links.items():
            if kind not in ("intra", "inter") or not isinstance(link, dict) or not number(link.get("alpha_s")) \
                    or not number(link.get("bandwidth_Bps"), positive=True):
                bad(f"links[{kind!r}] needs alpha_s >= 0 and bandwidth_Bps > 0")
        if not isinstance(self.fit, dict) or not all(number(self.fit.get(k, 0.0)) for k in ("comp", "comm", "const_s")):
            bad("fit must hold comp, comm and const_s >= 0")
        for k, v in self.fit.items():  # (what plan and --algo auto print and write into their JSON)
            if k not in FIT_KEYS or not (count(v) if k == "runs" else number(v)):
                bad(f"fit[{k!r}] must be one of {', '.join(FIT_KEYS)}: a number >= 0 (runs: an integer)")

    # ------------------------------------------------------------------ prices
    def kernel(self, threads: int) -> dict:
        """The kernel coefficients measured with the nearest thread count."""
        avail = sorted(int(t) for t in self.kernels)
        best = min(avail, key=lambda t: (abs(math.log2(t) - math.log2(max(1, threads))), t))
        return self.kernels[str(best)]

    def core_sharing(self, world: int, members: int, threads: int = 1) -> float:
        """How much slower a collective of ``members`` ranks runs inside a job of ``world`` ranks than it was
        measured (alone, ``members`` processes): on CPU cores shared by more ranks than cores, the concurrent
        groups of the other ranks share the cores too. 1 when every rank has its own device."""
        if self.cores <= 0:
            return 1.0
        node = self.node_ranks(world)
        return max(1.0, node * threads / self.cores) / max(1.0, min(members, node) * threads / self.cores)

    def node_ranks(self, world: int) -> int:
        """How many of ``world`` ranks share one node's cores and memory (ranks fill the nodes in order)."""
        return min(self.ranks_per_node, world) if self.ranks_per_node > 0 else world

    def node_total(self, per_rank) -> float:
        """The largest sum of ``per_rank`` values over the ranks of one node."""
        v = np.asarray(per_rank, dtype=np.float64)
        if v.size == 0:
            return 0.0
        k = self.node_ranks(v.size)
        return float(np.add.reduceat(v, np.arange(0, v.size, k)).max())

    def spans_nodes(self, members: int, stride: int) -> bool:
        return self.ranks_per_node > 0 and stride * members > self.ranks_per_node

    def collective_time(self, coll: str, members: int, stride: int, nbytes: np.ndarray,
                        calls: np.ndarray) -> np.ndarray:
        """Seconds of ``calls`` calls moving ``nbytes`` (per rank, the larger of sent and received) of
        collective ``coll`` on an axis of ``members`` ranks, ``stride`` apart."""
        table = self.collectives.get(coll) or self.collectives.get("bcast" if coll == "bcast_sparse" else "")
        if table and not self.spans_nodes(members, stride):
            sizes = sorted(int(g) for g in table)
            ref = min(sizes, key=lambda g: (abs(math.log2(g) - math.log2(members)), g))
            alpha, beta = table[str(ref)]
            alpha = alpha * latency_steps(coll, members) / latency_steps(coll, ref)
            return alpha * calls + beta * nbytes
        kind = "inter" if self.spans_nodes(members, stride) else "intra"
        link = self.links.get(kind) or self.links.get("intra")
        if not link:
            raise GridGnnError(f"profile {self.name!r} has no cost for {coll} on {members} ranks")
        bw = link["bandwidth_Bps"]
        if kind == "inter":
            bw /= min(self.ranks_per_node, stride)
        return link["alpha_s"] * latency_steps(coll, members) * calls + nbytes / bw


def latency_steps(coll: str, members: int) -> int:
    """Message steps of one collective on ``members`` ranks: a tree's ``⌈log₂ g⌉`` for a broadcast or reduce, the
    ring's or the pairwise exchange's ``g − 1`` for the others (Thakur and Gropp's algorithms)."""
    if members <= 1:
        return 0
    if coll in ("bcast", "bcast_sparse", "reduce"):
        return max(1, math.ceil(math.log2(members)))
    return members - 1


def load_profile(path: str | None) -> Profile:
    """A profile file (``gridgnn calibrate --out``), a preset's name (:data:`PRESETS`), or ``None``: the
    built-in profile of this machine class (:data:`PRESETS` ``"local-cpu"``)."""
    if path is None:
        return preset("local-cpu")
    if path in PRESETS:
        return preset(path)
    if not os.path.isfile(path):
        raise GridGnnError(f"--profile {path!r} is neither a file nor a preset ({', '.join(PRESETS)})")
    from ..graph.saved import read_document

    return Profile.from_json(read_document(path, "a machine profile", kind="json", max_bytes=1 << 22), path)


#: the collectives of the stage (panel) loops that ``--overlap`` starts early or finishes late: the broadcasts of
#: the blocks (and SUMMA's panels) and the reduces of the pushes, forward and backward
OVERLAPPED = {("fwd", "bcast"), ("fwd", "bcast_sparse"), ("bwd", "bcast"), ("bwd", "bcast_sparse"),
              ("bwd", "reduce")}
#: the sparsity-aware halo's all-to-allv (fetch forward, push backward), overlapped with the block's own product
HALO = {("fwd", "alltoallv"), ("bwd", "alltoallv")}


def predict_step(profile: Profile, detail: dict, axes: dict, work: dict, world: int, threads: int,
                 overlap: bool = False, *, own_share=None, grad_buckets: int = 1, grad_narrow: bool = False) -> dict:
    r"""The predicted time of one training step.

    Args:
        detail: the simulator's volumes by axis, ``{(phase, collective, axis): (sent[P], recv[P], calls[P])}``.
        axes: ``{axis: (members, stride)}`` of the layout
            (:meth:`~gridgnn.planner.primitives.BlockRowVolume.axis_group`).
        work: per-rank local work ``{unit: array[P]}`` (:func:`~gridgnn.planner.primitives.step_work`).
        world: ``P``; threads: torch threads per rank.
        overlap: ``--overlap``: the stage loops' transfers (:data:`OVERLAPPED`) run while their products compute,
            so each rank's communication time loses :math:`\min(\sum_a T^{stage}_{a,r} (1 - 1/g_a),\;
            T^{prod}_r)` — a stage costs the larger of its transfer and its product, and the first transfer of a
            loop over the :math:`g_a` members of axis :math:`a` (about :math:`g_a` stages) is not hidden;
            :math:`T^{prod}_r`: the priced ``edge`` and ``nnz`` work (the sparse products). The sparsity-aware
            all-to-allv (:data:`HALO`) travels while the block's own rows compute: it loses
            :math:`\min(T^{halo}_r, s_r T^{prod}_r)`, :math:`s_r` = ``own_share[r]``, the share of the rank's
            nonzeros in its own block. The gradient all-reduce of ``grad_buckets`` :math:`b` buckets runs during the
            backward but for its last bucket, on its first axis only (SUMMA's fiber sums after it), and narrowed
            (``grad_narrow``) only its all-to-all half: it loses :math:`\min(T^{grad,1}_r (1 - 1/b)\,h,\;
            \tfrac23 T^{comp}_r)`, :math:`h = \tfrac12` narrowed, else 1 (the backward is about two thirds of the
            compute). All that is hidden is at most :math:`T^{comp}_r`. An estimate of what overlap can hide at best,
            not fitted to measurements.

    Returns ``{"time_s", "comp_s", "comm_s", "comp_rank_s": [P], "comm_rank_s": [P], "comm_by_phase_s": {..},
    "hidden_rank_s": [P]}`` (``comp_s`` and ``comm_s`` before the fitted coefficients; ``comm_s`` after what
    overlap hides).
    """
    kappa = dict(profile.kernel(threads))
    kappa.setdefault("cast", kappa.get("elem", 0.0))  # a profile calibrated before casts were: an element written
    comp = sum(kappa.get(u, 0.0) * np.asarray(work.get(u, 0.0), dtype=np.float64) for u in WORK_UNITS)
    comm = np.zeros(world)
    staged, halo, grad = np.zeros(world), np.zeros(world), np.zeros(world)
    by_phase: dict = {}
    for (phase, coll, axis), (sent, recv, calls) in sorted(detail.items()):
        members, stride = axes[axis]
        t = profile.collective_time(coll, members, stride, np.maximum(sent, recv), calls)
        t = t * profile.core_sharing(world, members, threads)
        comm += t
        if (phase, coll) in OVERLAPPED and members > 1:
            staged += t * (1.0 - 1.0 / members)
        elif (phase, coll) in HALO and members > 1:
            halo += t
        elif (phase, coll) == ("grad", "allreduce") and axis in ("fetch", "row"):  # the buckets' first axis
            grad += t * (1.0 - 1.0 / max(int(grad_buckets), 1)) * (0.5 if grad_narrow else 1.0)
        key = f"{phase}.{coll}"
        by_phase[key] = by_phase.get(key, 0.0) + float(t.max())
    hidden = np.zeros(world)
    if overlap:
        prod = sum(kappa.get(u, 0.0) * np.asarray(work[u], dtype=np.float64) for u in ("edge", "nnz"))
        share = np.zeros(world) if own_share is None else np.asarray(own_share, dtype=np.float64)
        hidden = np.minimum(staged, prod) + np.minimum(halo, share * prod) + np.minimum(grad, comp * 2.0 / 3.0)
        hidden = np.minimum(hidden, comp)
        comm = comm - hidden
    comp_s = float(comp.max()) if world else 0.0
    if profile.cores > 0:  # the ranks of a node share its cores
        comp_s = max(comp_s, profile.node_total(comp) * threads / profile.cores)
    comm_s = float(comm.max()) if world else 0.0
    fit = profile.fit
    time_s = fit.get("comp", 1.0) * comp_s + fit.get("comm", 1.0) * comm_s + fit.get("const_s", 0.0)
    return {"time_s": time_s, "comp_s": comp_s, "comm_s": comm_s, "comp_rank_s": comp.tolist(),
            "comm_rank_s": comm.tolist(), "comm_by_phase_s": by_phase, "hidden_rank_s": hidden.tolist()}


def fit_profile(profile: Profile, rows: list[tuple[float, float, float]]) -> dict:
    r"""Fit :math:`\theta` by non-negative least squares to ``rows`` of ``(comp_s, comm_s, measured_s)`` (the
    unfitted model terms of measured runs); relative residuals are what is minimized (each row divided by its
    measured time, so a fast configuration counts as much as a slow one). Sets ``profile.fit`` and returns it
    with the fit's median and largest relative error and the number of runs."""
    from scipy.optimize import nnls

    if len(rows) < 3:
        raise GridGnnError(f"need at least 3 measured runs to fit the time model, got {len(rows)}")
    a = np.array([[c, m, 1.0] for c, m, _ in rows], dtype=np.float64)
    y = np.array([t for _, _, t in rows], dtype=np.float64)
    if (y <= 0).any():
        raise GridGnnError("a measured epoch time is not positive")
    distinct = len({(c, m) for c, m, _ in rows})
    if distinct < 3 or not (a[:, 1] > 0).any():  # (θ was then whatever fitted a constant: every plan a tie)
        raise GridGnnError(f"the {len(rows)} runs are {distinct} distinct configuration(s)"
                           f"{'' if (a[:, 1] > 0).any() else ', none of them communicating (one process)'}: a fit "
                           "tells compute from communication with at least 3 configurations that differ in both "
                           "(several algorithms and process counts)")
    theta, _ = nnls(a / y[:, None], np.ones_like(y))
    pred = a @ theta
    rel = np.abs(pred - y) / y
    profile.fit = {"comp": float(theta[0]), "comm": float(theta[1]), "const_s": float(theta[2]), "runs": len(rows),
                   "median_rel_err": float(np.median(rel)), "max_rel_err": float(rel.max())}
    return profile.fit


# ---------------------------------------------------------------------------------------------------- presets
def preset(name: str) -> Profile:
    """A documented profile (:data:`PRESETS`)."""
    if name not in PRESETS:
        raise GridGnnError(f"unknown profile preset {name!r}; choose one of {', '.join(PRESETS)}")
    return Profile.from_json(json.loads(json.dumps(PRESETS[name])), name)


_A100_HBM = 1.555e12  # B/s, A100 40 GB (NVIDIA A100 datasheet)
_A100_FP32 = 19.5e12  # flop/s peak (Plexus §5, NVIDIA datasheet)
_MI250X_GCD_HBM = 1.6e12  # B/s per GCD: 3.2 TB/s per MI250X, two GCDs (AMD MI250X datasheet)
_MI250X_GCD_FP32 = 47.9e12 / 2  # flop/s per GCD (Plexus §5: 47.9 TFLOPS per MI250X)


def _gpu_kernels(hbm: float, fp32: float, launch: float) -> dict:
    # a sparse product reads an index, a value and a gathered element per edge and column and writes ~1: ≈ 16 B
    # a cast reads 4 B and writes 2 B (or the other way round)
    return {"1": {"edge": 16.0 / hbm, "flop": 2.0 / fp32, "elem": 12.0 / hbm, "cast": 6.0 / hbm, "launch": launch}}


#: Documented profiles. Numbers are vendors' and centres' published peaks, not measurements: a prediction with
#: them ranks configurations; absolute times are optimistic (the kernels reach a fraction of peak).
PRESETS = {
    "local-cpu": {  # this project's 2-core development machine class: gridgnn calibrate, then --fit to 66 runs
        "name": "local-cpu (2 cores, gloo on loopback; measured with gridgnn calibrate)", "device": "cpu",
        "cores": 2, "ranks_per_node": 0, "version": PROFILE_VERSION,
        "kernels": {
            "1": {"edge": 1.09e-10, "nnz": 3.8e-09, "flop": 2.88e-11, "elem": 1.45e-09, "cast": 3.82e-10,
                  "launch": 0.000126},
            "2": {"edge": 5.4e-11, "nnz": 2.06e-09, "flop": 1.58e-11, "elem": 8.89e-10, "cast": 2.04e-10,
                  "launch": 0.000125}
        },
        "collectives": {
            "allreduce": {"2": [0.000614, 6.18e-10], "4": [0.00535, 9e-10], "8": [0.023, 0.0]},
            "bcast": {"2": [0.000203, 2.29e-10], "4": [0.000734, 6.09e-10], "8": [0.00251, 1.4e-09]},
            "reduce": {"2": [0.000375, 3.89e-10], "4": [0.00387, 1.13e-09], "8": [0.0123, 1.14e-09]},
            "allgather": {"2": [0.00046, 1.62e-09], "4": [0.00456, 1.51e-09], "8": [0.0135, 1.29e-09]},
            "reducescatter": {"2": [0.000347, 1.82e-09], "4": [0.00198, 2.36e-09], "8": [0.00461, 3.16e-09]},
            "alltoallv": {"2": [0.000304, 1.44e-09], "4": [0.00156, 1.86e-09], "8": [0.00599, 1.56e-09]}
        },
        "links": {"intra": {"alpha_s": 0.000203, "bandwidth_Bps": 4370000000.0}},
        "fit": {"comp": 2.36, "comm": 1.02, "const_s": 0.024,
                "runs": 66, "median_rel_err": 0.0909, "max_rel_err": 0.402},
        "sources": {"kernels": "gridgnn calibrate on the 2-core development machine (docs/planner.md; cast: "
                               "measured by a later calibrate, when the unit was added)",
                    "collectives": "gridgnn calibrate: gloo on loopback, groups of 2, 4, 8 processes",
                    "fit": "gridgnn calibrate --fit on the 66 runs of benchmarks/bench_planner.py (docs/planner.md)"},
    },
    "perlmutter-a100": {
        "name": "Perlmutter-like GPU node: 4x A100 40 GB, NVLink 3, 4x Slingshot 11", "device": "cuda", "cores": 0,
        "ranks_per_node": 4, "version": PROFILE_VERSION,
        "kernels": _gpu_kernels(_A100_HBM, _A100_FP32, 1.0e-5),
        "collectives": {},
        "links": {"intra": {"alpha_s": 1.0e-5, "bandwidth_Bps": 100e9},
                  "inter": {"alpha_s": 2.0e-5, "bandwidth_Bps": 100e9}},
        "fit": {"comp": 1.0, "comm": 1.0, "const_s": 0.0},
        "sources": {
            "kernels": "A100 40 GB: 1,555 GB/s HBM2 and 19.5 TFLOPS FP32 (NVIDIA A100 datasheet; Plexus §5); "
                       "launch 10 µs: PyTorch eager per-op overhead, an order of magnitude",
            "intra": "NVLink 3: 4 links of 25 GB/s per direction between each pair of A100s of a node "
                     "(NERSC Perlmutter architecture documentation)",
            "inter": "4 Slingshot 11 NICs of 25 GB/s injection per node (Plexus §5), shared by the ranks that "
                     "cross nodes at once (Plexus §4.2)",
            "latency": "α: order-of-magnitude NCCL ring step latencies, not measured"},
    },
    "frontier-mi250x": {
        "name": "Frontier-like node: 4x MI250X (8 GCDs), Infinity Fabric, 4x Slingshot 11", "device": "cuda",
        "cores": 0, "ranks_per_node": 8, "version": PROFILE_VERSION,
        "kernels": _gpu_kernels(_MI250X_GCD_HBM, _MI250X_GCD_FP32, 1.5e-5),
        "collectives": {},
        "links": {"intra": {"alpha_s": 1.5e-5, "bandwidth_Bps": 50e9},
                  "inter": {"alpha_s": 2.5e-5, "bandwidth_Bps": 100e9}},
        "fit": {"comp": 1.0, "comm": 1.0, "const_s": 0.0},
        "sources": {
            "kernels": "MI250X: 47.9 TFLOPS FP32 (Plexus §5) and 3.2 TB/s HBM2E per GPU, two GCDs per GPU "
                       "(AMD MI250X datasheet)",
            "intra": "Infinity Fabric between GCDs of different MI250X: 50 GB/s per direction (OLCF Frontier user "
                     "guide; 200 GB/s between the two GCDs of one MI250X, not modelled)",
            "inter": "4 Slingshot 11 NICs of 25 GB/s per node (Plexus §5; OLCF Frontier user guide)",
            "latency": "α: order-of-magnitude RCCL ring step latencies, not measured"},
    },
}
