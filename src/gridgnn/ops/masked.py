"""Inverted-dropout scaling by a given boolean mask, as an autograd Function that keeps only the mask (1 byte per
element) for its backward — or nothing, where the mask can be drawn again (``redraw``: a keyed hash drawn by a kernel
that allocates the mask alone): the backward then draws it anew, and no layer's mask stays alive between its forward
and its backward. The masks themselves (keyed hashes) are drawn in :mod:`gridgnn.nn.dropout`.

What an operation after the dropout saves of its output (a ``linear`` saves its input for the weight's gradient, an
aggregation its edge values) is not kept either, within :func:`recomputing` (every :class:`gridgnn.nn.Model` call
runs in it): autograd keeps the dropout's input and mask instead, and the backward recomputes the scaled tensor
from them (the same bits). The input is often kept anyway (a ReLU saves its output) and the mask, where it is not
drawn again, for the dropout's own backward, so a GCN layer keeps one ``n × f`` tensor (and a boolean mask) where it
kept two tensors and a mask.
"""
from __future__ import annotations

import contextlib
import threading
import weakref

import torch

from . import kernels, triton_kernels
from .device_paths import device_paths
from .owned import owned, read_alone


def scale_masked(x: torch.Tensor, mask: torch.Tensor, q: float, *, in_place: bool = False) -> torch.Tensor:
    """``x / q`` where ``mask`` (bool, same shape), else 0: the bits of ``x * mask / q`` (no autograd); written over
    ``x`` with ``in_place`` (``x`` contiguous)."""
    if kernels.fused(x):
        return kernels.masked_scale(x, mask, q, out=x if in_place else None)  # one pass
    return (x.div_(q) if in_place else x.div(q)).mul_(mask)


class MaskedScale(torch.autograd.Function):
    """``x ⊙ mask / q`` keeping only the boolean mask for the backward (the same bits as
    ``x * mask.to(x.dtype) / q``: a kept entry is ``x / q``); with ``redraw`` (a callable that returns the same
    mask again), keeping nothing: the backward draws the mask again. The backward scales the gradient it receives in
    place where it is :func:`~gridgnn.ops.owned.owned`."""

    @staticmethod
    def forward(ctx, x, mask, q, redraw=None):
        ctx.q, ctx.redraw = q, redraw
        if redraw is None:
            ctx.save_for_backward(mask)
        return scale_masked(x, mask, q)

    @staticmethod
    def backward(ctx, dy):
        mine = owned(dy)  # (a statement of its own: see owned)
        mask = ctx.saved_tensors[0] if ctx.redraw is None else ctx.redraw()
        return scale_masked(dy, mask, ctx.q, in_place=mine), None, None, None


#: outputs of :func:`dropped` that are alive: their storage's address → (a weak reference to the output, its input
#: detached (what a recomputation reads), the mask or what draws it again, ``q``, the output's and the input's
#: versions when the dropout ran, the input itself — with its place in autograd's graph, which the output's own graph
#: holds as long as the output lives — for a product that saves it, :func:`recipe_in_blocks`); an entry leaves with
#: its output
_DROPPED: dict = {}


def dropped(x: torch.Tensor, mask: torch.Tensor, q: float, redraw=None) -> torch.Tensor:
    """:class:`MaskedScale` whose output, where an operation saves it within :func:`recomputing`, autograd keeps
    as ``x`` and ``mask`` (:class:`Recomputed`); ``redraw`` (a callable returning ``mask``'s bits again, a keyed
    hash's): neither the dropout nor a recomputed output keeps the mask, each draws it again in the backward."""
    if torch.is_grad_enabled() and x.requires_grad:
        read_alone()  # (what an owned gradient counts, read once per process: ops.owned)
    y = MaskedScale.apply(x, mask, q, redraw)
    masks = getattr(_LOCAL, "masks", None)
    if masks is not None and redraw is None:  # (a trace's record of which saved tensors are dropout masks)
        masks.add(mask.untyped_storage().data_ptr())
    # within recomputing only (elsewhere the registry would keep the input while the output lives); a dropped input
    # that needs no gradient too; not an input that is a view of a larger buffer, which keeping would cost more
    if getattr(_LOCAL, "depth", 0) and torch.is_grad_enabled() and y.layout == torch.strided and y.numel() \
            and x.untyped_storage().nbytes() <= y.untyped_storage().nbytes():
        key = y.untyped_storage().data_ptr()

        def forget(ref, key=key):
            if _DROPPED.get(key, (None,))[0] is ref:  # (not the entry of a later output at the same address)
                _DROPPED.pop(key, None)

        _DROPPED[key] = (weakref.ref(y, forget), x.detach(), mask if redraw is None else redraw, q, y._version,
                         x._version, x)
    return y


def redraws(device, kernel: str = "node_mask") -> bool:
    """Whether a keyed mask on ``device`` is drawn again in the backward instead of kept: where a kernel draws it
    allocating the mask alone (numba on the host; on a GPU the Triton kernel ``kernel``, ``"node_mask"`` or
    ``"edge_mask"``) — drawing it costs one pass over a byte per element, keeping it holds every layer's mask from its
    forward to its backward. (The NumPy and torch ``int64`` references hash through temporaries of 8 bytes per
    element: their masks are kept.) The memory model asks it for the device it estimates
    (:func:`gridgnn.parallel.footprint.mask_redrawn`); within :func:`keeping_masks` (a trace) every mask is kept."""
    if getattr(_LOCAL, "masks", None) is not None:
        return False
    if not device_paths(device):
        return kernels.enabled()
    return triton_kernels.usable(device) and triton_kernels.on(kernel)


#: what a backward that would recompute a dropout's output from an input changed since says
CHANGED_INPUT = ("a dropout's input was modified in place after an operation saved the dropout's output: its backward "
                 "cannot recompute it (modify a copy)")


class Recomputed:
    """What autograd keeps of a saved output of :func:`dropped`: the dropout's input (unchanged since the dropout,
    ``version``) and mask (a boolean tensor, or the callable that draws it again: :attr:`redrawn`); :meth:`tensor`
    recomputes the output."""

    __slots__ = ("x", "mask", "q", "version", "of", "source")

    def __init__(self, x: torch.Tensor, mask: torch.Tensor, q: float, version: int, of: int,
                 source: torch.Tensor | None = None):
        self.x, self.mask, self.q, self.version = x, mask, q, version
        self.of = of  # the address of the output's storage (what a trace matches it by)
        self.source = x if source is None else source  # the input with its autograd history (x is detached)

    def tensor(self) -> torch.Tensor:
        if self.x._version != self.version:
            raise RuntimeError(CHANGED_INPUT)
        return scale_masked(self.x, self.mask() if self.redrawn else self.mask, self.q)

    @property
    def redrawn(self) -> bool:
        """The mask is drawn again where it is needed (not kept)."""
        return not isinstance(self.mask, torch.Tensor)


#: a product's input that is a dropout's output kept as its recipe and holds more elements than this is recomputed
#: for the weight's gradient ``hᵀ ∂Y`` this many elements (whole rows) at a time, never all at once
#: (:func:`recipe_in_blocks`)
RECOMPUTE_BLOCK = 1 << 22


def recompute_rows(columns: int) -> int:
    """The rows of a block of :data:`RECOMPUTE_BLOCK` elements of a matrix of ``columns`` (one row at least)."""
    return max(1, RECOMPUTE_BLOCK // max(1, columns))


def recipe_in_blocks(t: torch.Tensor | None) -> Recomputed | None:
    """``t``'s :class:`Recomputed` where ``t`` is a matrix of more than :data:`RECOMPUTE_BLOCK` elements that an
    operation saving it now would keep as its input and mask (within :func:`recomputing`, no other saved-tensor hooks
    in force), told to the observers (a trace) as saving it would (saving its parts then tells them those, which
    they have seen); else None. The caller (a product's forward, :func:`gridgnn.ops.lean_backward.keep_input`) saves
    the recipe's input (:attr:`Recomputed.source`) and kept mask itself, and its backward sums ``hᵀ ∂Y`` over
    :class:`RowBlocks`. (Where the input is itself a dropout's output, saving it keeps it as its own recipe: it is
    recomputed too.)"""
    if t is None or t.dim() != 2 or t.numel() <= RECOMPUTE_BLOCK or not getattr(_LOCAL, "depth", 0) \
            or outer_hooks():
        return None
    recipe = _recipe(t)
    if recipe is not None:
        for observe in getattr(_LOCAL, "observers", ()):
            observe(recipe)
    return recipe


class RowBlocks:
    """A dropout's output ``x ⊙ mask / q`` (``mask``: a boolean tensor) that is never made whole: :meth:`t_matmul`
    recomputes it :data:`RECOMPUTE_BLOCK` elements (whole rows) at a time; :meth:`whole` makes it, for a backward that
    builds a graph (its blocks would not reach ``x``'s history)."""

    __slots__ = ("x", "mask", "q")

    def __init__(self, x: torch.Tensor, mask: torch.Tensor, q: float):
        self.x, self.mask, self.q = x, mask, q

    def t_matmul(self, dy: torch.Tensor, by_columns: bool = False) -> torch.Tensor:
        """``hᵀ dy`` summed block by block in row order (rounding apart from one product); ``by_columns``: as
        ``(dyᵀ h)ᵀ``, torch's formula for a weight laid out by columns."""
        x, rows = self.x, recompute_rows(self.x.shape[1])
        out = dy.new_zeros((dy.shape[1], x.shape[1]) if by_columns else (x.shape[1], dy.shape[1])) \
            if x.shape[0] == 0 else None
        for r0 in range(0, x.shape[0], rows):
            h, d = scale_masked(x[r0:r0 + rows], self.mask[r0:r0 + rows], self.q), dy[r0:r0 + rows]
            a, b = (d.t(), h) if by_columns else (h.t(), d)
            out = a @ b if out is None else out.addmm_(a, b)
            del h, a, b  # (the block and its transposed view: the next block is made after this one goes)
        return out.t() if by_columns else out

    def whole(self) -> torch.Tensor:
        """The output, recomputed whole through :class:`MaskedScale` (differentiable where ``x`` carries its
        history)."""
        return MaskedScale.apply(self.x, self.mask, self.q, None)


def _recipe(t: torch.Tensor):
    """``t``'s :class:`Recomputed` when ``t`` is an alive output of :func:`dropped` (or an alias of the same
    geometry) and neither it nor the dropout's input changed since the dropout, else None."""
    if t.layout != torch.strided or not _DROPPED:
        return None
    at = t.untyped_storage().data_ptr()
    entry = _DROPPED.get(at)
    if entry is None:
        return None
    y, x = entry[0](), entry[1]
    if y is None or y._version != entry[4] or x._version != entry[5] or t.device != y.device \
            or t.dtype != y.dtype or t.shape != y.shape or t.stride() != y.stride() \
            or t.storage_offset() != y.storage_offset():
        return None
    # (the input with its history for an output that records it; a detached alias of the output reaches none)
    return Recomputed(x, entry[2], entry[3], entry[5], at, entry[6] if t.requires_grad else x)


#: per thread: ``observers`` (callables that see what autograd keeps, within recomputing(observe=...)) and ``depth``
#: (how many recomputing contexts are open)
_LOCAL = threading.local()
#: whether this torch can say which saved-tensor hooks are in force (:func:`outer_hooks`); where it cannot, no model
#: call recomputes, and neither does a trace (no output is registered), so that the memory model counts alike
_TELLS = hasattr(torch._C._autograd, "_top_saved_tensors_default_hooks")


def name_a_change(t: torch.Tensor) -> None:
    """The operation running saves ``t``, a dropout's input, to recompute the dropout's output from it (a product's
    weight gradient by blocks: :func:`gridgnn.ops.lean_backward.keep_input`): where ``t`` is changed in place before
    the backward, the backward refuses it with :data:`CHANGED_INPUT`, not autograd's words. Held weakly until
    :func:`_pack` meets ``t`` (autograd packs what a function saved as it returns)."""
    _LOCAL.named = weakref.ref(t)


def _pack(t):
    recipe = _recipe(t)
    for observe in getattr(_LOCAL, "observers", ()):
        observe(t if recipe is None else recipe)
    named = getattr(_LOCAL, "named", None)
    words = None
    if named is not None and named() is t:  # (consumed by its save, kept as a recipe too: no later save meets it)
        _LOCAL.named, words = None, CHANGED_INPUT
    if recipe is not None:
        return recipe
    # a tensor of its own is kept detached (an output kept with its own grad_fn would be a reference cycle that no
    # garbage collection frees, where no backward runs) with its version, for autograd's in-place check
    return t.detach(), t._version, words


def _unpack(kept):
    if isinstance(kept, Recomputed):
        return kept.tensor()
    t, version, words = kept
    if t._version != version:
        raise RuntimeError(words or f"one of the variables needed for gradient computation has been modified by an "
                           f"inplace operation: it is at version {t._version}, it was saved at version {version}")
    return t


def outer_hooks() -> bool:
    """Whether saved-tensor hooks other than :func:`recomputing`'s are in force (``torch.utils.checkpoint``,
    ``save_on_cpu``, a user's): a model call then leaves them in charge."""
    auto = torch._C._autograd
    enabled = getattr(auto, "_saved_tensors_hooks_is_enabled", None)
    if enabled is not None and not enabled():  # (torch.func transforms: no hooks may be entered)
        return True
    top = getattr(auto, "_top_saved_tensors_default_hooks", None)
    if not _TELLS or top is None:  # (a torch that cannot say: leave whatever may be in force alone)
        return True
    try:
        hooks = top(False)
    except TypeError:
        hooks = top()
    return hooks is not None and hooks[0] is not _pack


@contextlib.contextmanager
def keeping_masks(masks: set):
    """Within (a model's trace, in this thread): every keyed dropout mask kept by the dropout, not drawn again
    (:func:`redraws` answers False), and the storage address of each mask :func:`dropped` applies added to
    ``masks`` — so that the trace records every mask where a device that keeps it holds it, flagged, whatever the
    tracing host would do, and the memory model leaves out those its device draws again."""
    before = getattr(_LOCAL, "masks", None)
    _LOCAL.masks = masks
    try:
        yield masks
    finally:
        _LOCAL.masks = before


@contextlib.contextmanager
def recomputing(observe=None):
    """Within: an output of :func:`dropped` that an operation saves is kept as its input and mask and recomputed
    in the backward; every other saved tensor is kept as autograd keeps it (with its in-place check). Unlike a
    saved output, a recomputed one refuses a change of the dropout's input after the save (even where nothing else
    saved the input) and does not see a change of the output itself after the save (its gradient is then the one of
    the output as it was saved).
    ``observe(kept)`` (a trace's record) sees every tensor or :class:`Recomputed` autograd keeps within, in this
    thread, nested contexts included."""
    observers = getattr(_LOCAL, "observers", None)
    if observers is None:
        observers = _LOCAL.observers = []
    if observe is not None:
        observers.append(observe)
    _LOCAL.depth = getattr(_LOCAL, "depth", 0) + _TELLS
    try:
        with torch.autograd.graph.saved_tensors_hooks(_pack, _unpack):
            yield
    finally:
        _LOCAL.depth -= _TELLS
        _LOCAL.named = None  # (a name no save met within: none outside takes it)
        if observe is not None:
            observers.remove(observe)
