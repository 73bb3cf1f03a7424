"""The memory guard reads a training step as a timeline: the saved tensors still held at each moment (the backward
of each primitive call), that moment's buffers and workspace; the peak is the moment whose sum is largest."""
from __future__ import annotations

import itertools
import math
from types import SimpleNamespace

import pytest
import torch

from gridgnn.parallel.footprint import Ledger, backward_of
from gridgnn.train.rank_layout import gcn_trace, model_trace

from ._measure import gcn_estimate, model_builder


def _brute_force(saved, cands, untagged, moments):
    """The largest ``held + buffers + workspace`` over ``moments`` (``(horizon, label)``), each component at a
    moment the largest of its candidates there and of those given at no moment."""
    best = None
    for m in moments:
        held = sum(b for pos, b in saved if pos <= m[0])
        peaks = [max([b for (c, at), b in cands.items() if c == comp and at == m] + [untagged.get(comp, 0)])
                 for comp in ("buffers", "workspace")]
        total = held + sum(peaks)
        if best is None or total > best[0]:
            best = (total, held, *peaks)
    return best


@pytest.mark.parametrize("seed", range(6))
def test_the_peak_is_the_moment_whose_held_tensors_buffers_and_workspace_add_up_to_the_most(seed):
    g = torch.Generator().manual_seed(seed)

    def draw(hi):
        return int(torch.randint(1, hi, (1,), generator=g))

    acc = Ledger()
    acc.add("adjacency", 1000)
    saved = [(draw(8), draw(500)) for _ in range(6)]
    for pos, b in saved:
        acc.saved(b, pos)
    moments = [(h, f"call {h - 1} backward") for h in range(1, 9)]
    cands, untagged = {}, {}
    for comp, m in itertools.product(("buffers", "workspace"), moments):
        if draw(3) == 1:
            b = draw(900)
            cands[(comp, m)] = max(cands.get((comp, m), 0), b)
            acc.cand(comp, b, f"{comp} at {m[1]}", at=[m])
    untagged["buffers"] = draw(100)
    acc.cand("buffers", untagged["buffers"], "at every moment")
    comps, what = acc.pick(("dev", "host"))
    total, held, buffers, workspace = _brute_force(saved, cands, untagged,
                                                   [(math.inf, "the end of the forward")] + moments)
    assert (comps["activations"], comps["buffers"], comps["workspace"]) == (held, buffers, workspace)
    assert comps["adjacency"] == 1000 and acc.sums["dev"]["activations"] == sum(b for _, b in saved)
    assert sum(comps.values()) == 1000 + total
    if what["moment"] != "the end of the forward":  # the moment named is one whose candidates were counted
        h = next(m[0] for m in moments if m[1] == what["moment"])
        assert held == sum(b for pos, b in saved if pos <= h)


def test_a_candidate_given_at_no_moment_counts_at_every_one_and_copies_keep_the_moments():
    acc = Ledger()
    acc.saved(100, 1)
    acc.saved(10, 5)
    acc.cand("workspace", 50, "every moment")
    acc.cand("buffers", 70, "call 0", at=[(1, "call 0 backward")])
    acc.cand("buffers", 5, "empty list: every moment", at=[])
    comps, what = acc.copy().pick(("dev",))
    # call 0's backward: 100 + 70 + 50 = 220 > the end of the forward: 110 + 5 + 50 = 165
    assert (comps["activations"], comps["buffers"], comps["workspace"], what["moment"]) == \
        (100, 70, 50, "call 0 backward")


def test_a_gcn_trace_records_where_each_tensor_was_saved():
    """GCN 3 × 8 (equal widths: layer 0 aggregates first, the later layers multiply first): layer 0's linear saves
    M̂X during call 1; the ReLU after add_bias (call 2) its output and the next dropout its mask (recorded as a
    mask, whatever the tracing host does: a device that draws it again does not keep it); layer 1 saves nothing
    until its ReLU (and mask) after call 5; the loss's log-softmax after the last call (9 forward calls)."""
    tr = gcn_trace((8, 8, 8, 3), "1d-sa")
    names = [c.name for c in tr.calls if c.name != "param_grad"]
    assert names == ["spmm", "linear", "add_bias", "linear", "spmm", "add_bias", "linear", "spmm", "add_bias"]
    assert [(s.layer, s.kind, s.itemsize, s.pos, s.mask) for s in tr.saved] == [
        (0, "node", 0, 2, ""), (0, "node", 0, 3, ""), (0, "node", 1, 3, "node"), (1, "node", 0, 6, ""),
        (1, "node", 1, 6, "node"), (2, "loss", 0, 9, "")]
    # the dropout outputs of layers 1 and 2 are recomputed by their linear's backward (calls 3 and 6)
    assert [(l, kind, pos) for l, kind, _, pos in tr.recomputed] == [(1, "node", 4), (2, "node", 7)]
    # a tensor is held during the backward of the call that saved it (or of the last call before the raw operation
    # that did) and freed before the backward of the call before that one
    ctx = SimpleNamespace(trace=tr)
    for t in tr.saved:
        assert backward_of(ctx, t.pos - 1)[0] >= t.pos
        assert t.pos < 2 or backward_of(ctx, t.pos - 2)[0] < t.pos


@pytest.mark.parametrize("model, dims", [("gcn", (8, 5, 9, 3)), ("gat", (8, 4, 3)), ("sage+max", (8, 6, 3))])
def test_a_trace_records_every_mask_whatever_the_tracing_host_draws(model, dims, monkeypatch):
    """The dropout masks a trace records (``SavedTensor.mask``: the memory model leaves out those the device it
    estimates draws again) are the same where the host draws masks again (numba) and where it keeps them
    (``GRIDGNN_KERNELS=torch``): every mask where the dropout keeps it — also a widening layer's, which aggregates
    first and whose dropped input no later operation saves — and GAT's attention masks as edge masks."""
    def records():
        tr = model_trace(list(dims), model_builder(model, list(dims), 0.5, torch.float64), "1d-sa")
        return [(s.layer, s.kind, s.cols, s.itemsize, s.pos, s.mask) for s in tr.saved]

    redrawing = records()
    monkeypatch.setenv("GRIDGNN_KERNELS", "torch")
    assert records() == redrawing
    masks = [r for r in redrawing if r[5]]
    assert {r[5] for r in masks} == ({"node", "edge"} if model == "gat" else {"node"})
    assert all(r[3] == 1 and r[1] == r[5] for r in masks)  # one byte per element, of the kind it is
    assert len([r for r in masks if r[5] == "node"]) == len(dims) - 1  # one per layer's input


PERSISTENT = ("runtime", "graph", "adjacency", "features", "parameters")


@pytest.mark.parametrize("model,algo,shape", [("gcn", "1d-sa", (4,)), ("gcn", "2d", (2, 2)),
                                              ("gcn", "plexus", (2, 2, 1)), ("gat", "1d", (4,)),
                                              ("gat", "2d", (2, 2)), ("sage", "plexus", (2, 2, 1)),
                                              ("gat", "1.5d", (1, 4)),
                                              ("gcn", "serial", (1,))])
def test_the_timeline_lies_between_the_end_of_the_forward_and_the_sum_of_every_peak(model, algo, shape):
    """Every tensor the forward saved is still held when the backward starts, with the temporaries of the last
    call's backward: the peak is at least the persistent parts and every saved tensor; and at most the sum the
    estimate used to add (every saved tensor with the largest buffers and workspace of any moment). The peak
    moment is the backward of one of the trace's calls."""
    dims = [64, 128, 128, 8]
    tr = gcn_trace(tuple(dims), algo) if model == "gcn" else \
        model_trace(dims, model_builder(model, dims, 0.5, torch.float64), algo)
    est = gcn_estimate(algo, shape, 20_000, 200_000, dims, trace=tr, source="sharded")
    labels = {f"layer {c.layer} {c.name} backward (call {k})" for k, c in enumerate(tr.calls)}
    for r in est.ranks:
        persistent = sum(r.per_component[k] for k in PERSISTENT)
        assert r.moment in labels, r.moment
        assert persistent + r.saved_activations < r.total, r
        assert r.total <= persistent + r.saved_activations + r.largest["buffers"] + r.largest["workspace"], r
