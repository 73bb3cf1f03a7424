r"""Max-send-volume refinement of a vertex partition (the ``balanced`` partitioner).

Papers: Mukhopadhyay et al., *Sparsity-Aware Communication for Distributed GNN Training*, ICPP'24, §5 and
§7.1.1 — the time of the sparsity-aware all-to-allv is set by the busiest sender, and METIS leaves it sending
1.7–2.7× the average (Table 2), so the paper partitions with Graph-VB, which lowers the total *and* the
maximum send volume. This module is a refinement in the spirit of Graph-VB (Acer, Selvitopi & Aykanat, 2016)
and UMPa (Deveci, Kaya, Uçar & Çatalyürek, JPDC 2015): it starts from a low-total-volume partition (METIS)
and moves boundary vertices to lower the maximum send volume per part, then the maximum receive volume.

**Model** (column-net hypergraph of :math:`M`, rows = destinations): net :math:`j` has the pins
:math:`\{i : M_{ij} \ne 0\} \cup \{j\}` and is owned by ``part[j]``. With :math:`c_{j,p}` = pins of net
:math:`j` in part :math:`p` and :math:`\lambda_j = |\{p : c_{j,p} > 0\}|`, the owner of net :math:`j` sends
row :math:`j` of :math:`H` to the :math:`\lambda_j - 1` other parts that hold a pin, so

.. math::

    \mathrm{send}[q] = \sum_{j:\,\mathrm{part}[j] = q} (\lambda_j - 1), \qquad
    \mathrm{recv}[p] = |\{ j : \mathrm{part}[j] \ne p,\ c_{j,p} > 0 \}|,

exactly :func:`gridgnn.partition.quality.volume_matrix`.

**Moves.** Moving vertex :math:`v` from part :math:`a` to part :math:`b` changes (i) its own net: the owner
becomes :math:`b`, :math:`\lambda_v' = \lambda_v - [c_{v,a} = 1] + [c_{v,b} = 0]`; (ii) every other net
:math:`j` with :math:`M_{vj} \ne 0`: if :math:`c_{j,a} = 1` the owner of :math:`j` stops sending to :math:`a`,
if :math:`c_{j,b} = 0` it starts sending to :math:`b`. The per-part Δsend / Δrecv of a move are therefore
computed from the kept counts :math:`c_{j,p}` in :math:`O(\deg v)`.

**Objective.** Moves are ranked by the decrease of the potential

.. math::

    \Phi = w_s \sum_p \Big(\frac{\mathrm{send}[p]}{S}\Big)^k
         + w_r \sum_p \Big(\frac{\mathrm{recv}[p]}{R}\Big)^k + w_t \cdot \mathrm{total},

(:math:`S, R` = the maxima at the start of the pass, :math:`k = 8`), a smooth stand-in for "the maximum
first": unloading a part at the maximum is worth far more than loading a part below it, and :math:`w_t` (the
marginal value of one row at a part of mean load) keeps moves that buy a little balance with a lot of volume
out. A *send* phase
(:math:`w_s = 1, w_r = 0.3`) is followed by a *receive* phase (:math:`w_s = 0.3, w_r = 1`). Every accepted move
must (hard constraints) keep every part's send ≤ the current maximum send and every part's receive ≤ the
current maximum receive (so neither maximum ever increases), keep the total volume ≤ ``max_total``
(default 1.05 × the start's), keep every part's weight ≤ ``max_load``, and leave its source part non-empty.

**Passes** (greedy, FM-style locking): vertices are visited hottest part first (parts by decreasing send, or
receive in the receive phase), in a seeded random order within a part; each is moved at most once per pass
(then locked) to the candidate part with the largest exact potential decrease among the ``max_targets``
candidates that a linearized gain ranks best (candidates = parts holding a neighbour). The next pass visits
only the vertices next to a moved one. A phase ends when a pass moves nothing or three passes gained less than
0.1 %. Deterministic for a seed.

Cost: :math:`O(n K)` memory for the counts (int32), and per pass :math:`O(\sum_v \deg(v) \cdot \mathrm{cand}(v))`.
The kernels are compiled with numba when it is installed (strongly recommended: ~100× faster); without it
the same code runs as plain Python.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..errors import GridGnnError

try:  # numba is optional; it is imported only when a refinement runs (see _kernels)
    import importlib.util as _ilu

    HAVE_NUMBA = _ilu.find_spec("numba") is not None
except (ImportError, ValueError):  # pragma: no cover
    HAVE_NUMBA = False

__all__ = ["refine_max_volume", "HAVE_NUMBA", "MAX_COUNT_ENTRIES"]

#: Largest n × K accepted (the dense int32 table of per-net part counts, 4 bytes per entry: 4 GiB).
MAX_COUNT_ENTRIES = 1 << 30


# ------------------------------------------------------------------------------------------------ kernels
def _init_counts(n, K, net_ptr, net_pins, part):
    cnt = np.zeros(n * K, np.int32)
    lam = np.zeros(n, np.int32)
    for j in range(n):
        base = j * K
        for t in range(net_ptr[j], net_ptr[j + 1]):
            x = base + part[net_pins[t]]
            if cnt[x] == 0:
                lam[j] += 1
            cnt[x] += 1
    return cnt, lam


def _volumes(n, K, part, cnt):
    send = np.zeros(K, np.int64)
    recv = np.zeros(K, np.int64)
    for j in range(n):
        o = part[j]
        base = j * K
        for p in range(K):
            if p != o and cnt[base + p] > 0:
                send[o] += 1
                recv[p] += 1
    return send, recv


def _pow(x, k):
    r = 1.0
    for _ in range(k):
        r *= x
    return r


def _refine_pass(K, part, w, vptr, vnets, cptr, cpins, cnt, lam, send, recv, load, count, state,
                 order, locked, nxt, cap, budget, k, ws, wr, wt, inv_s, inv_r, maxt):
    """One greedy pass over ``order``; returns the number of moves. ``state[0]`` is the total volume."""
    dsend = np.zeros(K, np.int64)
    drecv = np.zeros(K, np.int64)
    touched = np.zeros(K, np.int64)
    mark = np.zeros(K, np.uint8)
    cand = np.zeros(K, np.int64)
    candmark = np.zeros(K, np.uint8)
    score = np.zeros(K, np.float64)
    zcount = np.zeros(K, np.int64)
    dphi_s = np.zeros(K, np.float64)   # marginal potential of one more sent row, per part
    dphi_r = np.zeros(K, np.float64)
    for p in range(K):
        dphi_s[p] = ws * k * _pow(send[p] * inv_s, k - 1) * inv_s
        dphi_r[p] = wr * k * _pow(recv[p] * inv_r, k - 1) * inv_r
    smax = send.max()
    rmax = recv.max()
    moves = 0
    for idx in range(order.size):
        v = order[idx]
        if locked[v]:
            continue
        a = part[v]
        if count[a] <= 1:
            continue
        vbase = v * K
        # interior vertex (own net inside a, no net of v would lose its last pin in a): a move cannot help
        saving = lam[v] > 1
        if not saving:
            for t in range(vptr[v], vptr[v + 1]):
                j = vnets[t]
                if j != v and cnt[j * K + a] == 1:
                    saving = True
                    break
        if not saving:
            continue
        # candidate parts: those holding a pin of net v or owning a net of v, with room for v
        nc = 0
        for p in range(K):
            if p != a and cnt[vbase + p] > 0 and load[p] + w[v] <= cap:
                candmark[p] = 1
                cand[nc] = p
                nc += 1
        for t in range(vptr[v], vptr[v + 1]):
            p = part[vnets[t]]
            if p != a and candmark[p] == 0 and load[p] + w[v] <= cap:
                candmark[p] = 1
                cand[nc] = p
                nc += 1
        if nc == 0:
            continue
        # linearized cost of the b-side of each candidate (rows that start to be sent to b)
        for ci in range(nc):
            score[ci] = 0.0
            zcount[ci] = 0
        # (high-degree vertices: a strided sample of at most ~128 nets, rescaled)
        deg = vptr[v + 1] - vptr[v]
        stride = 1 if deg <= 128 else deg // 128
        for t in range(vptr[v], vptr[v + 1], stride):
            j = vnets[t]
            if j == v:
                continue
            jb = j * K
            c = (dphi_s[part[j]] + wt) * stride
            for ci in range(nc):
                if cnt[jb + cand[ci]] == 0:
                    score[ci] += c
                    zcount[ci] += stride
        for ci in range(nc):
            b = cand[ci]
            own = lam[v] - (1 if cnt[vbase + a] == 1 else 0) + (1 if cnt[vbase + b] == 0 else 0) - 1
            score[ci] += zcount[ci] * dphi_r[b] + own * (dphi_s[b] + wt)
            candmark[b] = 0
        # keep the maxt best-ranked candidates (selection, ties: lower part id)
        if nc > maxt:
            for s in range(maxt):
                bi = s
                for ci in range(s + 1, nc):
                    if score[ci] < score[bi] or (score[ci] == score[bi] and cand[ci] < cand[bi]):
                        bi = ci
                tmp = cand[s]
                cand[s] = cand[bi]
                cand[bi] = tmp
                tmpf = score[s]
                score[s] = score[bi]
                score[bi] = tmpf
            nc = maxt
        # exact evaluation of the kept candidates
        best_gain = 1e-12
        best_b = -1
        for ci in range(nc):
            b = cand[ci]
            nt = 0
            mark[a] = 1
            touched[nt] = a
            nt += 1
            if mark[b] == 0:
                mark[b] = 1
                touched[nt] = b
                nt += 1
            newlam = lam[v] - (1 if cnt[vbase + a] == 1 else 0) + (1 if cnt[vbase + b] == 0 else 0)
            dsend[a] -= lam[v] - 1
            dsend[b] += newlam - 1
            if cnt[vbase + a] >= 2:
                drecv[a] += 1
            if cnt[vbase + b] > 0:
                drecv[b] -= 1
            for t in range(vptr[v], vptr[v + 1]):
                j = vnets[t]
                if j == v:
                    continue
                o = part[j]
                jb = j * K
                if cnt[jb + a] == 1:
                    if mark[o] == 0:
                        mark[o] = 1
                        touched[nt] = o
                        nt += 1
                    dsend[o] -= 1
                    drecv[a] -= 1
                if cnt[jb + b] == 0:
                    if mark[o] == 0:
                        mark[o] = 1
                        touched[nt] = o
                        nt += 1
                    dsend[o] += 1
                    drecv[b] += 1
            dtot = 0
            ok = True
            g = 0.0
            for ti in range(nt):
                p = touched[ti]
                dtot += dsend[p]
                ns = send[p] + dsend[p]
                nr = recv[p] + drecv[p]
                if dsend[p] > 0 and ns > smax:
                    ok = False
                if drecv[p] > 0 and nr > rmax:
                    ok = False
                if dsend[p] != 0:
                    g += ws * (_pow(send[p] * inv_s, k) - _pow(ns * inv_s, k))
                if drecv[p] != 0:
                    g += wr * (_pow(recv[p] * inv_r, k) - _pow(nr * inv_r, k))
            for ti in range(nt):
                p = touched[ti]
                dsend[p] = 0
                drecv[p] = 0
                mark[p] = 0
            if state[0] + dtot > budget:
                ok = False
            g -= wt * dtot
            if ok and g > best_gain:
                best_gain = g
                best_b = b
        if best_b < 0:
            continue
        # apply v: a -> b
        b = best_b
        send[a] -= lam[v] - 1
        dt = -(lam[v] - 1)
        if cnt[vbase + a] >= 2:
            recv[a] += 1
        if cnt[vbase + b] > 0:
            recv[b] -= 1
        for t in range(vptr[v], vptr[v + 1]):
            j = vnets[t]
            if j == v:
                continue
            o = part[j]
            jb = j * K
            if cnt[jb + a] == 1:
                send[o] -= 1
                recv[a] -= 1
                lam[j] -= 1
                dt -= 1
            cnt[jb + a] -= 1
            if cnt[jb + b] == 0:
                send[o] += 1
                recv[b] += 1
                lam[j] += 1
                dt += 1
            cnt[jb + b] += 1
        if cnt[vbase + a] == 1:
            lam[v] -= 1
        cnt[vbase + a] -= 1
        if cnt[vbase + b] == 0:
            lam[v] += 1
        cnt[vbase + b] += 1
        send[b] += lam[v] - 1
        dt += lam[v] - 1
        state[0] += dt
        part[v] = b
        load[a] -= w[v]
        load[b] += w[v]
        count[a] -= 1
        count[b] += 1
        locked[v] = 1
        moves += 1
        # refresh the marginals of the parts whose volumes changed and the running maxima
        for p in range(K):
            dphi_s[p] = ws * k * _pow(send[p] * inv_s, k - 1) * inv_s
            dphi_r[p] = wr * k * _pow(recv[p] * inv_r, k - 1) * inv_r
        smax = send.max()
        rmax = recv.max()
        # neighbours of v are revisited in the next pass
        nxt[v] = 1
        for t in range(vptr[v], vptr[v + 1]):
            nxt[vnets[t]] = 1
        for t in range(cptr[v], cptr[v + 1]):
            nxt[cpins[t]] = 1
    return moves


_KERNELS: dict = {}


def _kernels() -> dict:
    """The kernels, compiled with numba (cached on disk) when it is installed, else plain Python."""
    if not _KERNELS:
        fns = {"init_counts": _init_counts, "volumes": _volumes, "refine_pass": _refine_pass}
        if HAVE_NUMBA:
            from numba import njit

            pow_jit = njit(cache=True, nogil=True)(_pow)
            globals()["_pow"] = pow_jit  # the compiled kernels resolve the helper from the module globals
            fns = {name: njit(cache=True, nogil=True)(fn) for name, fn in fns.items()}
        _KERNELS.update(fns)
    return _KERNELS


# ------------------------------------------------------------------------------------------------ driver
def _structures(mat: sp.csr_matrix):
    n = mat.shape[0]
    pat = sp.csr_matrix((np.ones(mat.indices.size, dtype=np.int8), mat.indices, mat.indptr), shape=(n, n))
    pat.sum_duplicates()
    pat.sort_indices()
    nets = (pat.T + sp.identity(n, dtype=np.int8, format="csr")).tocsr()
    nets.sum_duplicates()
    nets.sort_indices()
    return (pat.indptr.astype(np.int64), pat.indices.astype(np.int64),
            nets.indptr.astype(np.int64), nets.indices.astype(np.int64))


def refine_max_volume(mat, part, parts: int, *, weights=None, max_load: int | None = None,
                      max_total: int | None = None, volume_slack: float = 0.05, seed: int = 0,
                      max_passes: int = 60, phases: tuple[str, ...] = ("send", "recv"), exponent: int = 8,
                      max_targets: int = 8, tol: float = 1e-3, volume_weight: float = 1.0,
                      cross_weight: float = 0.3, jit: bool = True) -> tuple[np.ndarray, dict]:
    r"""Lower the maximum send (then receive) volume per part of ``part`` by moving boundary vertices.

    See the module docstring for the model, the potential and the passes.

    Args:
        mat: aggregation matrix :math:`M` (SciPy sparse or :class:`~gridgnn.graph.Graph`, rows = destinations).
        part: ``int[n]`` starting vertex → part map (original order, all parts non-empty).
        parts: number of parts :math:`K`.
        weights: ``int[n]`` vertex weights for the balance bound, default nnz of the row + 1.
        max_load: largest allowed part weight, default ``max(1.05 × mean, start's max, heaviest vertex)``.
        max_total: largest allowed total volume (rows), default ``(1 + volume_slack) ×`` the start's.
        volume_slack: see ``max_total`` (default 0.05).
        seed: seed of the visiting order.
        max_passes: passes per phase at most (default 60).
        phases: ``"send"`` and/or ``"recv"`` phases, in order (default both).
        exponent: :math:`k` of the potential (default 8).
        max_targets: candidate parts evaluated exactly per vertex (default 8).
        tol: a phase stops when three passes lowered neither its maximum nor the total by this fraction.
        volume_weight: multiplier of :math:`w_t` (default 1).
        cross_weight: weight of the other volume's potential in each phase (default 0.3).
        jit: run the numba-compiled kernels when numba is installed (default); ``False`` runs the same code as
            plain Python (slow; for tests and debugging).

    Returns:
        ``(part, info)``: the refined ``int64[n]`` map (a new array) and a dict with ``start`` / ``final``
        (``total``, ``max_send``, ``max_recv``, ``max_load``), ``passes`` and ``moves``.

    Guarantees: the maximum send and the maximum receive volume never increase, the total volume stays
    ≤ ``max_total``, every part's weight stays ≤ ``max(max_load, start's)``, and no part becomes empty.
    """
    from .quality import as_csr

    mat = as_csr(mat)
    n = mat.shape[0]
    K = int(parts)
    part = np.array(part, dtype=np.int64).reshape(-1)
    if part.size != n:
        raise GridGnnError(f"partition has {part.size} entries for a graph with {n} vertices")
    if n and (part.min() < 0 or part.max() >= K):
        raise GridGnnError(f"partition names parts outside 0..{K - 1}")
    if n * K > MAX_COUNT_ENTRIES:
        raise GridGnnError(f"balanced refinement keeps an n×K table of net counts: {n}×{K} entries exceed "
                           f"{MAX_COUNT_ENTRIES}; use fewer parts or another method")
    for ph in phases:
        if ph not in ("send", "recv"):
            raise GridGnnError(f"unknown refinement phase {ph!r} (use 'send' and/or 'recv')")
    if weights is None:
        weights = np.diff(mat.indptr).astype(np.int64) + 1
    w = np.ascontiguousarray(weights, dtype=np.int64)
    kern = _kernels() if jit else {"init_counts": _init_counts, "volumes": _volumes, "refine_pass": _refine_pass}
    vptr, vnets, cptr, cpins = _structures(mat)
    cnt, lam = kern["init_counts"](n, K, cptr, cpins, part)
    send, recv = kern["volumes"](n, K, part, cnt)
    load = np.bincount(part, weights=w, minlength=K).astype(np.int64)
    count = np.bincount(part, minlength=K).astype(np.int64)
    total0 = int(send.sum())
    mean_w = float(w.sum()) / K
    if max_load is None:
        max_load = max(int(np.floor((1.0 + 0.05) * mean_w)), int(w.max(initial=0)))
    cap = max(int(max_load), int(load.max()))
    budget = int(np.floor((1.0 + volume_slack) * total0)) if max_total is None else max(int(max_total), total0)
    state = np.array([total0], dtype=np.int64)
    start = dict(total=total0, max_send=int(send.max()), max_recv=int(recv.max()), max_load=int(load.max()))
    rng = np.random.default_rng(seed)
    passes = moves_total = 0
    k = int(exponent)
    if K > 1 and total0 > 0:
        for ph in phases:
            active = np.ones(n, dtype=np.uint8)
            hist: list[tuple[int, int]] = []
            for _ in range(int(max_passes)):
                cand = np.flatnonzero(active)
                if cand.size == 0:
                    break
                order = rng.permutation(cand)
                hot = send if ph == "send" else recv
                order = order[np.argsort(-hot[part[order]], kind="stable")]
                smax, rmax = max(int(send.max()), 1), max(int(recv.max()), 1)
                mean = max(float(send.mean()), 1.0)
                if ph == "send":
                    ws, wr, ref = 1.0, float(cross_weight), smax
                else:
                    ws, wr, ref = float(cross_weight), 1.0, rmax
                # marginal potential of a row at a part of mean load
                wt = float(volume_weight) * k / ref * (mean / ref) ** (k - 1)
                locked = np.zeros(n, dtype=np.uint8)
                nxt = np.zeros(n, dtype=np.uint8)
                moved = kern["refine_pass"](K, part, w, vptr, vnets, cptr, cpins, cnt, lam, send, recv, load,
                                            count, state, order, locked, nxt, cap, budget, k, ws, wr, wt,
                                            1.0 / smax, 1.0 / rmax, int(max_targets))
                passes += 1
                moves_total += int(moved)
                active = nxt
                key = (int(send.max()) if ph == "send" else int(recv.max()), int(state[0]))
                hist.append(key)
                if moved == 0:
                    break
                if (len(hist) > 3 and hist[-1][0] > (1 - tol) * hist[-4][0]
                        and hist[-1][1] > (1 - tol) * hist[-4][1]):
                    break
    final = dict(total=int(state[0]), max_send=int(send.max()), max_recv=int(recv.max()),
                 max_load=int(load.max()))
    return part, dict(start=start, final=final, passes=passes, moves=moves_total, numba=bool(jit and HAVE_NUMBA),
                      max_load_bound=int(cap), max_total_bound=int(budget))
