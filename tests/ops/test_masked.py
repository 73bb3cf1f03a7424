"""Dropout outputs kept as their input and mask (gridgnn.ops.masked.recomputing): the backward recomputes them bit
for bit, the outputs themselves are freed, and what cannot be recomputed is kept as before or refused."""
import contextlib
import gc
import weakref

import pytest
import torch

from gridgnn.graph import gcn_normalize
from gridgnn.nn import resolve_model
from gridgnn.ops import masked
from gridgnn.ops.masked import MaskedScale, Recomputed, dropped, recomputing
from gridgnn.parallel.blockrow import build_serial

from ..parallel.conftest import random_graph


def _chain(x, a, w, mask, scale):
    """relu(x a) dropped, then multiplied by w: the linear saves the dropout's output."""
    return (scale(torch.relu(x @ a), mask, 0.7) @ w).square().sum()


def _leaves(dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(40, 6, generator=gen, dtype=dtype, requires_grad=True)
    a = torch.randn(6, 9, generator=gen, dtype=dtype, requires_grad=True)
    w = torch.randn(9, 3, generator=gen, dtype=dtype, requires_grad=True)
    mask = torch.rand(40, 9, generator=gen) < 0.7
    return x, a, w, mask


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_recomputed_gradients_equal_the_saved_ones_bit_for_bit(dtype):
    x, a, w, mask = _leaves(dtype)
    _chain(x, a, w, mask, MaskedScale.apply).backward()
    want = [t.grad.clone() for t in (x, a, w)]
    for t in (x, a, w):
        t.grad = None
    kept = []
    with recomputing(observe=kept.append):
        loss = _chain(x, a, w, mask, dropped)
    assert any(isinstance(k, Recomputed) for k in kept)  # the linear's input was kept as its recipe
    loss.backward()
    for t, ref in zip((x, a, w), want):
        assert torch.equal(t.grad, ref)


def test_the_dropout_output_is_freed_while_the_graph_lives():
    x, a, w, mask = _leaves(torch.float64)
    for inside, alive in ((False, True), (True, False)):
        ctx = recomputing() if inside else torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t)
        with ctx:
            y = dropped(torch.relu(x @ a), mask, 0.7)
            loss = (y @ w).sum()
        ref = weakref.ref(y)
        del y
        gc.collect()
        assert (ref() is not None) == alive  # outside, mm's saved input keeps it; inside, nothing does
        loss.backward()


def test_an_input_modified_in_place_after_the_save_is_refused():
    x, a, w, mask = _leaves(torch.float64)
    with recomputing():
        r = (x @ a).exp()  # (exp saves its output too: its backward would refuse after ours)
        loss = (dropped(r, mask, 0.7) @ w).sum()
    r.mul_(2)
    with pytest.raises(RuntimeError, match="modified in place"):
        loss.backward()


def _kept_as_it_is(run, w):
    """``run(scale)`` with the plain dropout and within recomputing: nothing recomputed, ``w``'s gradient the same."""
    run(MaskedScale.apply).backward()
    want = w.grad.clone()
    w.grad = None
    kept = []
    with recomputing(observe=kept.append):
        loss = run(dropped)
    assert not any(isinstance(k, Recomputed) for k in kept)
    loss.backward()
    assert torch.equal(w.grad, want)


def test_an_output_modified_in_place_before_the_save_is_kept_as_it_is():
    x, a, w, mask = _leaves(torch.float64)

    def run(scale):
        y = scale(torch.relu(x @ a), mask, 0.7)
        y.mul_(1.5)
        return (y @ w).square().sum()

    _kept_as_it_is(run, w)


@pytest.mark.parametrize("name,kw", [("gcn", {}), ("gat", {"heads": 2}), ("sage", {}),
                                     ("gatv2", {"heads": 2, "attn_dropout": 0.3})])
def test_a_model_call_recomputes_and_equals_its_plain_forward(name, kw):
    """``model(x, plan)`` (within recomputing) and ``model.forward(x, plan)`` (no hooks): the same logits and
    gradients bit for bit, with dropout on the features and on the attention coefficients (GATv2's)."""
    g = random_graph(37, 120, directed=False, seed=3)
    plan = build_serial(gcn_normalize(g))
    x = torch.from_numpy(g.x).double()
    grads, kept = [], []
    for call in ("__call__", "forward"):
        model = resolve_model(name)([g.num_features, 8, 5, 3], dropout=0.4, seed=2, dtype=torch.float64, **kw)
        model.train()
        with _observing(kept) if call == "__call__" else contextlib.nullcontext():
            out = getattr(model, call)(x, plan)
        out.square().sum().backward()
        grads.append([out.detach()] + [p.grad for p in model.parameters()])
    assert any(isinstance(k, Recomputed) for k in kept)  # the model call did recompute
    for mine, ref in zip(*grads):
        assert torch.equal(mine, ref)
    kept.clear()
    model.eval()  # no dropout: nothing to recompute, no hooks entered
    with _observing(kept):
        model(x, plan).sum().backward()
    assert kept == []


@contextlib.contextmanager
def _observing(kept: list):
    """See what autograd keeps within a model call's own recomputing (no context entered here)."""
    observers = masked._LOCAL.__dict__.setdefault("observers", [])
    observe = kept.append
    observers.append(observe)
    try:
        yield
    finally:
        observers.remove(observe)


def test_a_forward_without_backward_leaves_nothing_alive():
    """Outputs an operation saves of itself (a ReLU's) are kept detached: no reference cycle keeps a graph alive
    where no backward frees it (an exception between forward and backward, a forward for inference with autograd
    on)."""
    x, a, w, mask = _leaves(torch.float64)
    with recomputing():
        r = torch.relu(x @ a)
        loss = (dropped(r, mask, 0.7) @ w).sum()
    ref = weakref.ref(r)
    del r, loss
    gc.collect()
    assert ref() is None


def test_an_input_modified_in_place_before_the_save_keeps_the_output():
    """The dropout's input changed between the dropout and the save: the output is kept as it is (the plain run's
    gradients), not recomputed from the changed input."""
    x, a, w, mask = _leaves(torch.float64)

    def run(scale):
        h = x @ a  # (nothing saves it: modifying it is legal)
        y = scale(h, mask, 0.7)
        h.mul_(3)
        return (y @ w).square().sum()

    _kept_as_it_is(run, w)


def test_autograd_still_refuses_a_saved_tensor_modified_in_place():
    x, a, _, _ = _leaves(torch.float64)
    with recomputing():
        r = (x @ a).exp()  # exp saves its output
        s = (r * 2).sum()
    r.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        s.backward()


def test_second_derivatives_equal_the_saved_ones():
    x, a, w, mask = _leaves(torch.float64)
    out = []
    for ctx, scale in ((contextlib.nullcontext(), MaskedScale.apply), (recomputing(), dropped)):
        with ctx:
            loss = _chain(x, a, w, mask, scale)
            (gw,) = torch.autograd.grad(loss, w, create_graph=True)  # reads the (recomputed) dropout output
        (gx,) = torch.autograd.grad(gw.square().sum(), x)  # through it
        out.append((gw.detach(), gx))
    assert torch.equal(out[0][0], out[1][0]) and torch.equal(out[0][1], out[1][1])


def test_a_model_call_inside_other_saved_tensor_hooks_leaves_them_in_charge():
    g = random_graph(23, 60, directed=False, seed=5)
    plan = build_serial(gcn_normalize(g))
    model = resolve_model("gcn")([g.num_features, 6, 3], dropout=0.5, seed=1, dtype=torch.float64)
    model.train()
    seen = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: seen.append(t) or t, lambda t: t):
        model(torch.from_numpy(g.x).double(), plan).sum().backward()
    assert seen  # the outer hooks saw what the model saved (a checkpoint, an offload keeps working)


def test_a_mask_drawn_again_gives_the_kept_masks_gradients_and_is_not_kept():
    """``redraw`` given: neither the dropout nor a recomputed output keeps the mask (autograd sees no boolean
    tensor); the backward draws it again, once for the recomputed output and once for the dropout's own gradient,
    and every gradient equals the kept mask's bit for bit (second derivatives too)."""
    x, a, w, mask = _leaves(torch.float64)
    (ref,) = torch.autograd.grad(_chain(x, a, w, mask, MaskedScale.apply), x)
    draws = []

    def redraw():
        draws.append(1)
        return mask.clone()

    kept = []
    with recomputing(observe=kept.append):
        loss = _chain(x, a, w, mask, lambda t, m, q: dropped(t, m, q, redraw))
    assert draws == []  # the forward used the mask it was handed
    assert [k.redrawn for k in kept if isinstance(k, Recomputed)] == [True]
    assert not any(isinstance(k, torch.Tensor) and k.dtype == torch.bool for k in kept)
    (got,) = torch.autograd.grad(loss, x)
    assert len(draws) == 2 and torch.equal(got, ref)
    second = []
    for scale in (MaskedScale.apply, lambda t, m, q: MaskedScale.apply(t, m, q, redraw)):
        (gw,) = torch.autograd.grad(_chain(x, a, w, mask, scale), w, create_graph=True)
        (gx,) = torch.autograd.grad(gw.square().sum(), x)
        second.append(gx)
    assert torch.equal(*second)


@pytest.mark.parametrize("name,kw", [("gcn", {}), ("sage", {}), ("gat", {"heads": 2, "attn_dropout": 0.3}),
                                     ("gatv2", {"heads": 2, "attn_dropout": 0.3})])
def test_a_model_keeps_no_mask_where_a_kernel_draws_them(name, kw, monkeypatch):
    """Where numba draws the dropout masks (:func:`gridgnn.ops.masked.redraws`), a model step keeps no boolean
    tensor — of the node features' masks nor of the attention coefficients' (GAT's through its fused kernels,
    GATv2's through the composition): each is drawn again in the backward from its key — and its logits and
    gradients equal the step that keeps them, bit for bit."""
    import gridgnn.nn.dropout as D

    if not D.redraws("cpu"):
        pytest.skip("numba absent or disabled (GRIDGNN_KERNELS=torch): the masks are kept")
    g = random_graph(37, 120, directed=False, seed=3)
    plan = build_serial(gcn_normalize(g))
    x = torch.from_numpy(g.x).double()
    real, draws, results = D.keep_mask, [], []
    monkeypatch.setattr(D, "keep_mask", lambda *a, **k: (draws.append(1), real(*a, **k))[1])
    for again in (False, True):
        monkeypatch.setattr(D, "redraws", lambda *device_and_kernel, again=again: again)
        model = resolve_model(name)([g.num_features, 8, 8, 3], dropout=0.4, seed=2, dtype=torch.float64, **kw)
        model.train()
        kept = []
        draws.clear()
        with _observing(kept):
            out = model(x, plan)
        forward = len(draws)
        out.square().sum().backward()
        masks = [k for k in kept if isinstance(k, torch.Tensor) and k.dtype == torch.bool]
        masks += [k.mask for k in kept if isinstance(k, Recomputed) and not k.redrawn]
        assert (forward, bool(masks), len(draws) > forward) == (3, not again, again), (again, len(draws))
        results.append([out.detach()] + [p.grad for p in model.parameters()])
    for mine, ref in zip(*results):
        assert torch.equal(mine, ref)
