r"""A model's *trace*, and the layout check that runs with it.

The trace is one training step (forward, loss, backward) of the model on a 3-vertex serial graph, with the plan
replaced by a :class:`TracePlan` that records every primitive the model calls (name, layer, widths, which inputs
need a gradient): the byte, work and time models sum it, and Plexus lays out its tensors after it. It does not
depend on the graph or on P.

While it runs, every node and edge tensor carries the *layout* it will have on the algorithm being traced
(:mod:`gridgnn.parallel.checks`), and a :class:`~torch.overrides.TorchFunctionMode` watches the raw torch
operations of the model between the primitives. Refused, with one line naming the operation, the layer and the
layouts (:class:`~gridgnn.parallel.checks.LayoutError`), before any process trains:

* a primitive whose operands are not on the layout the algorithm runs it on (GATv2's ``n × K·F`` operands of
  ``sddmm_add`` on Plexus, a ``linear`` reading another ``linear``'s output on Plexus);
* an elementwise operation on tensors of two different layouts (a skip term ``spmm(h) + h`` where ``spmm``
  moves the rows: use ``g.at_destinations(h)``), or on a node tensor and an edge tensor;
* an operation that mixes the rows of a node or edge tensor (``h.sum(0)``, ``h.T @ h``, row indexing) when its rows
  are split over ranks, or the feature columns of a node tensor whose columns are split (Plexus);
* a per-column tensor broadcast over split columns (use ``plan.add_bias`` / ``plan.scale``), raw random ops
  (dropout: use ``Model.input_dropout``);
* a parameter whose gradient would be partial in a way the trainer does not sum (used in a primitive and in a
  raw operation on another layout, on node and on edge tensors, or read without ``Model.param``).

A parameter used in raw operations on one kind of tensor gets its gradient summed over the axes that split that
tensor beyond the trainer's ``grad_axes`` (an attention vector dotted with edge features on 1.5D: over
``rep``): :attr:`Trace.raw_grad_axes`, applied by :meth:`gridgnn.nn.Model.param` and counted by the byte models
(a ``param_grad`` call).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from ..ops import masked
from ..partition.layout import EdgeLayout
from .base import Plan, stacked_linears
from .checks import LayoutRules, qualified
from .program import PrimitiveCall
from .registry import layout_rules


@dataclass(frozen=True)
class SavedTensor:
    """A tensor autograd keeps for the backward of the traced step (what the memory model scales to a rank's
    block): a node tensor (``kind="node"``, laid out as ``layout``), an edge tensor (``"edge"``, of layer
    ``layer``'s graph), a selecting semiring's winners (``"winners"``: the edge each row and column's extremum came
    by, ``int64``, laid out as the selection's output; SUMMA holds them on its panels' rows and column block), a
    tensor of the loss with a row per labelled vertex (``"loss"``: the log-softmax of the
    labelled logits rows) or a tensor of none of these (``"other"``, ``cols`` = its elements); ``cols`` = elements
    per row;
    ``itemsize`` = 0 for the training dtype (floating point), else the bytes of its elements (a boolean mask: 1);
    ``pos`` = how many primitive calls the forward had made when it was saved (a call's own saves and those of the
    raw operations after it: the call's index + 1), so that the backward of call ``k`` still holds those of
    positions up to ``k + 1``; ``mask`` = ``"node"`` or ``"edge"`` for a keyed dropout mask, which a device whose
    kernel draws such masks does not keep (:func:`gridgnn.ops.masked.redraws`: the memory model asks it for the
    device it estimates), else ``""``."""

    layer: int
    kind: str
    cols: int
    itemsize: int = 0
    layout: object = None
    pos: int = 0
    mask: str = ""


@dataclass
class Trace:
    """What a trace found: the primitive calls (with a ``param_grad`` call per entry of ``raw_grad_axes``), the
    number of parameters and of parameter tensors, ``raw_grad_axes`` ``{(name, layer): axes}`` and the tensors
    autograd saved (:class:`SavedTensor`, one per storage)."""

    calls: list
    nparams: int
    raw_grad_axes: dict = field(default_factory=dict)
    saved: list = field(default_factory=list)
    ntensors: int = 0
    edge_dim: int = 0  # width of the edge features the model reads (its ``edge_dim``; 0: none)
    relations: int = 0  # relation types the model reads (its ``num_relations``; 0: none)
    param_sizes: tuple = ()  # elements of each trained parameter tensor, in model order (the gradient buckets)
    edge_ids: bool = False  # the model asked for the edges' original ids (keyed edge randomness, edge data)
    off_diagonal: bool = False  # and for the self-loop mask made of them (``g.off_diagonal``: GraphSAGE)
    #: per forward ``linear`` call whose input autograd saved as a tensor of its own, or as a dropout's input and
    #: mask: ``{call index: indices in saved of what that added}`` (an engine that gathers that input saves the
    #: gathered copy instead)
    linear_inputs: dict = field(default_factory=dict)
    #: ``(layer, "node" or "edge", columns, position)`` of each saved dropout output that autograd kept as the
    #: dropout's input and mask (:func:`gridgnn.ops.masked.recomputing`): the backward of the call that saved it
    #: (index ``position - 1``, as :attr:`SavedTensor.pos`) recomputes it, a temporary — drawing its mask again, a
    #: temporary too, where the device draws it again instead of keeping it (:func:`gridgnn.ops.masked.redraws`)
    recomputed: tuple = ()


# ---------------------------------------------------------------------------------------------------- raw ops
_REFLECTED = {"radd", "rsub", "rmul", "rtruediv", "rdiv", "rpow", "rmatmul", "rfloordiv", "rmod", "rand", "ror", "rxor",
              "rlshift", "rrshift"}
_INPLACE_DUNDER = {"iadd", "isub", "imul", "itruediv", "idiv", "ipow", "imatmul", "ifloordiv", "iand", "ior", "ixor",
                   "ilshift", "irshift", "imod"}
#: queries and metadata: no data flows
_IGNORED = {"get", "set", "size", "dim", "ndimension", "numel", "nelement", "item", "tolist", "is_floating_point",
            "element_size", "len", "repr", "format", "data_ptr", "bool", "is_contiguous", "stride", "storage_offset",
            "requires_grad", "retain_grad", "register_hook", "numpy", "cpu", "cuda", "backward", "has_names",
            "is_complex", "type", "is_leaf", "grad_fn", "shape", "device", "dtype", "hash", "int",
            "new_zeros", "new_ones", "new_empty", "new_full", "new_tensor", "eq_", "ne_"}
_RANDOM = {"dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout", "bernoulli",
           "rand_like", "randn_like", "randint_like", "multinomial", "normal", "uniform", "exponential", "rrelu",
           "gumbel_softmax"}
_REDUCE = {"sum", "mean", "prod", "amax", "amin", "max", "min", "norm", "logsumexp", "std", "var", "argmax", "argmin",
           "any", "all", "count_nonzero", "softmax", "log_softmax", "softmin", "cumsum", "cumprod", "cummax",
           "cummin", "logcumsumexp", "sort", "argsort", "topk", "median", "nansum", "nanmean", "diff", "normalize",
           "std_mean", "var_mean", "kthvalue"}
#: normalizations within each row (over the trailing feature columns): they mix a row's columns, never rows
_ROW_NORMS = {"layer_norm", "rms_norm", "group_norm", "local_response_norm"}
#: operations that keep every element where it is — each output element reads the input elements at its own index
#: (broadcast scalars and parameters aside): arithmetic, activations, comparisons, copies. Any other operation whose
#: output has its input's shape may still move or mix elements (a batch or instance norm mixes rows, triu reads the
#: indices, flipud reorders rows): it is refused where anything of its input is split (:meth:`_classify`: unknown)
_POINTWISE = {
    "add", "sub", "subtract", "mul", "multiply", "div", "divide", "true_divide", "floor_divide", "floordiv", "neg",
    "negative", "pos", "positive", "pow", "float_power", "reciprocal", "square", "sqrt", "rsqrt", "abs", "absolute",
    "sign", "sgn", "signbit", "fmod", "remainder", "mod", "exp", "exp2", "expm1", "log", "log1p", "log2", "log10",
    "logaddexp", "logaddexp2", "hypot", "copysign", "heaviside", "lerp", "addcmul", "addcdiv", "xlogy", "clamp",
    "clip", "clamp_min", "clamp_max", "maximum", "minimum", "fmax", "fmin", "floor", "ceil", "round", "trunc",
    "frac", "fix", "nan_to_num", "where", "masked_fill", "sin", "cos", "tan", "asin", "acos", "atan", "atan2",
    "arctan2", "arcsin", "arccos", "arctan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "arcsinh",
    "arccosh", "arctanh", "deg2rad", "rad2deg", "erf", "erfc", "erfinv", "lgamma", "digamma", "polygamma", "logit",
    "sigmoid", "i0", "sinc", "relu", "relu6", "leaky_relu", "elu", "selu", "celu", "gelu", "silu", "mish",
    "softplus", "softsign", "hardtanh", "hardsigmoid", "hardswish", "logsigmoid", "tanhshrink", "softshrink",
    "hardshrink", "threshold", "prelu", "eq", "ne", "lt", "le", "gt", "ge", "greater", "less", "greater_equal",
    "less_equal", "not_equal", "isnan", "isinf", "isfinite", "isposinf", "isneginf", "isclose", "logical_and",
    "logical_or", "logical_not", "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "invert",
    "and", "or", "xor", "lshift", "rshift", "clone", "detach", "contiguous", "to", "type_as", "float", "double",
    "half", "bfloat16", "long", "copy", "fill", "zero", "zeros_like", "ones_like", "expit", "ndtr", "ndtri",
    "log_ndtr", "erfcx", "i0e", "i1", "i1e", "xlog1py", "entr", "bessel_j0", "bessel_j1",
    "empty_like", "full_like", "untyped_storage", "view", "view_as", "reshape", "reshape_as", "expand", "expand_as",
    "broadcast_to", "flatten", "unflatten", "alias", "resolve_conj", "resolve_neg", "conj", "real", "identity"}
_DIM_OPS = {"cat", "concat", "concatenate", "stack", "index_select", "gather", "scatter", "scatter_add", "index_add",
            "index_copy", "index_fill", "narrow", "split", "chunk", "select", "unbind", "roll", "flip",
            "repeat_interleave", "tensor_split"}
_MATMUL = {"matmul", "mm", "bmm", "einsum", "linear", "bilinear", "inner", "outer", "tensordot", "addmm", "dot",
           "mv", "baddbmm", "chain_matmul"}
_DIM_DEFAULT0 = {"cat", "concat", "concatenate", "stack", "split", "chunk", "unbind", "tensor_split"}


def _op_name(func) -> str:
    name = getattr(func, "__name__", "") or ""
    if name.startswith("__") and name.endswith("__"):
        core = name[2:-2]
        if core in _REFLECTED or core in _INPLACE_DUNDER:
            core = core[1:]
        return {"truediv": "div", "getitem": "getitem", "setitem": "setitem"}.get(core, core)
    if name.endswith("_") and not name.endswith("__"):
        name = name[:-1]
    return name.removeprefix("special_")  # torch.special.expit arrives as special_expit


def _flat(obj, out: list) -> list:
    if isinstance(obj, torch.Tensor):
        out.append(obj)
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            _flat(o, out)
    elif isinstance(obj, dict):
        for o in obj.values():
            _flat(o, out)
    return out


def _dim(args, kwargs, pos: int = 1, key: str = "dim", default=None):
    d = kwargs.get(key, args[pos] if len(args) > pos and not isinstance(args[pos], torch.Tensor) else default)
    return d


def _touches_rows(d, ndim: int) -> bool:
    """Whether the dimension(s) ``d`` of a tensor with ``ndim`` dims include its rows (dim 0); ``None``: all."""
    if d is None:
        return True
    dims = d if isinstance(d, (list, tuple)) else (d,)
    return any(isinstance(x, int) and (x == 0 or x == -ndim) for x in dims) or any(
        isinstance(x, str) for x in dims)


class _Checker(TorchFunctionMode):
    """Propagates layouts through the model's raw torch operations and refuses what is not local (see the module
    docstring)."""

    def __init__(self, tracer: "_Tracer"):
        super().__init__()
        self.t = tracer

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if self.t.paused:
            return out
        name = _op_name(func)
        if name in _IGNORED:
            return out
        self.t.raw(name, args, kwargs, out)
        return out


class _Tracer:
    """Layouts of the trace's tensors, the parameters they derive from, and the primitive calls."""

    def __init__(self, rules: LayoutRules, params: dict):
        self.rules = rules
        self.params = params  # id(Parameter) → (name, layer, kind)
        self.layout: dict = {}  # id(tensor) → (tensor, layout)
        self.derived: dict = {}  # id(tensor) → (tensor, frozenset of (param id, read by Model.param))
        self.uses: dict = {}  # param id → list of (layout or "primitive", bare, op)
        self.calls: list = []  # (name, layer, operand layouts)
        self.paused = False
        self.layer = 0
        self.current_output = None  # the output layout of the primitive running now (what its saves lie as)
        self.saved_log = None  # the step's _SavedLog (what autograd saved so far)
        self.linear_inputs: dict = {}  # index of a logged linear call → indices of what keeping its input saved

    def saved_count(self) -> int:
        """How many tensors autograd has saved so far in the traced step."""
        return 0 if self.saved_log is None else len(self.saved_log.kept)

    def linear_returned(self, at: int, h, start: int) -> None:
        """The logged ``linear`` call ``at`` on the node tensor ``h`` has returned: note what keeping ``h`` saved,
        if anything (of what was saved since ``start``: one saved earlier by another operation is that one's): ``h``'s
        storage, or what a dropout's output kept as its recipe added (its input or mask, where nothing else kept
        them)."""
        log = self.saved_log
        if log is None:
            return
        ptr = h.untyped_storage().data_ptr()
        added = [j for j in range(start, len(log.kept)) if log.kept[j][0].untyped_storage().data_ptr() == ptr]
        added += [j for pos, of, new in log.recipes if pos >= start and of == ptr for j in new]
        if added:
            self.linear_inputs[at] = tuple(added)

    # ------------------------------------------------------------------ bookkeeping
    @contextlib.contextmanager
    def pause(self):
        old, self.paused = self.paused, True
        try:
            yield
        finally:
            self.paused = old

    def tag(self, t, layout):
        if isinstance(t, torch.Tensor):
            self.layout[id(t)] = (t, layout)
        return t

    def layout_of(self, t):
        hit = self.layout.get(id(t))
        return hit[1] if hit is not None and hit[0] is t else None

    def param_reads(self, t) -> frozenset:
        if isinstance(t, nn.Parameter) and id(t) in self.params:
            return frozenset({(id(t), True)})
        hit = self.derived.get(id(t))
        return hit[1] if hit is not None and hit[0] is t else frozenset()

    def via_param(self, p: torch.Tensor) -> torch.Tensor:
        """What :meth:`Model.param` hands the model during the trace: ``p``, marked as read through it."""
        with self.pause():
            v = p.view_as(p)
        self.derived[id(v)] = (v, frozenset({(id(p), False)}))
        return v

    def _use(self, reads, layout, op):
        for pid, bare in reads:
            self.uses.setdefault(pid, []).append((layout, bare, op))

    # ------------------------------------------------------------------ primitives
    def primitive(self, name: str, layer: int, node_operands, others=(), *, edge_operands=()):
        """Check a primitive's operands and return its output layout (``others``: parameter operands)."""
        self.layer = layer
        lays = []
        for t in node_operands:
            lay = self.layout_of(t)
            if lay is None:
                self.rules.refuse(f"layer {layer}: {qualified(name)} got a tensor that no primitive produced (node "
                                  "tensors come from the layer's input and the plan's primitives)")
            if isinstance(lay, EdgeLayout):
                self.rules.refuse(f"layer {layer}: {qualified(name)} takes node tensors, got an edge tensor ({lay})")
            lays.append(lay)
        for t in edge_operands:
            lay = self.layout_of(t)
            want = self.rules.edges(layer)
            if lay is not None and not isinstance(lay, EdgeLayout):
                self.rules.refuse(f"layer {layer}: g.{name} takes edge values, got a node tensor ({lay})")
            if isinstance(lay, EdgeLayout) and lay.graph != want.graph:
                self.rules.refuse(f"layer {layer}: g.{name} takes edge values of {want.graph}, got those of "
                                  f"{lay.graph}")
            self._use(self.param_reads(t), "primitive", name)
        for t in others:
            self._use(self.param_reads(t), "primitive", name)
        self.calls.append((name, layer, lays))
        return self.rules.after(name, layer, *lays) if lays else self.rules.edges(layer)

    # ------------------------------------------------------------------ raw operations
    def raw(self, name, args, kwargs, out):
        ins = _flat(args, []) + _flat(kwargs, [])
        outs = _flat(out, [])
        tagged = [(t, self.layout_of(t)) for t in ins]
        tagged = [(t, lay) for t, lay in tagged if lay is not None]
        reads = frozenset().union(*(self.param_reads(t) for t in ins)) if ins else frozenset()
        if not tagged:
            if reads:
                for o in outs:
                    self.derived[id(o)] = (o, reads | self.param_reads(o))
            return
        rules, layer = self.rules, self.layer
        first_t, first = tagged[0]
        kinds = {isinstance(lay, EdgeLayout) for _, lay in tagged}
        what = "an edge tensor" if isinstance(first, EdgeLayout) else "a node tensor"
        if len(kinds) > 1:
            node = next(lay for _, lay in tagged if not isinstance(lay, EdgeLayout))
            edge = next(lay for _, lay in tagged if isinstance(lay, EdgeLayout))
            rules.refuse(f"layer {layer}: torch {name} combines a node tensor ({node}) with an edge tensor ({edge}); "
                         "node values reach the edges through g.sddmm_add / g.sddmm_dot")
        for _, lay in tagged[1:]:
            same = lay == first if isinstance(lay, EdgeLayout) else rules.same(lay, first)
            if not same:
                hint = "" if isinstance(lay, EdgeLayout) else (
                    " — compute both from the same primitive's output, or add a skip term to an aggregation as "
                    "g.spmm(e, h) + g.at_destinations(h) with the very tensor h that the spmm reads: "
                    "g.at_destinations moves only a tensor laid out as an spmm input, so a tensor laid out "
                    "otherwise (the layer's input, another primitive's output) needs a plan.linear first")
                rules.refuse(f"layer {layer}: torch {name} combines tensors laid out as ({first}) and ({lay}){hint}")
        harmless = False
        if name == "dropout":  # F.dropout(input, p, training): the identity when p = 0 or not training
            p = kwargs.get("p", args[1] if len(args) > 1 else 0.5)
            training = kwargs.get("train", kwargs.get("training", args[2] if len(args) > 2 else True))
            harmless = p == 0 or training is False
        elif name == "rrelu":  # F.rrelu(input, lower, upper, training): a fixed leaky slope when not training
            harmless = kwargs.get("training", args[3] if len(args) > 3 else False) is False
        if name in _RANDOM and not harmless:
            rules.refuse(f"layer {layer}: torch {name} draws random numbers on {what}: each rank would draw its own; "
                         "use Model.input_dropout (node features) or a keyed mask (gridgnn.nn.dropout.edge_keep_mask)")
        kind = "elementwise" if harmless else self._classify(name, args, kwargs, first_t, outs, tagged)
        if kind == "unknown":
            split = rules.split_axes(first) or (() if isinstance(first, EdgeLayout) else rules.col_axis(first))
            if split:
                rules.refuse(f"layer {layer}: torch {name} is not an operation gridgnn knows to keep every element "
                             f"in place, and {what} ({first}) is split over ranks, so it may mix rows or columns "
                             "that other ranks hold; aggregate with g.spmm, reduce with the plan's primitives, or "
                             "use --algo serial (an elementwise operation missing from gridgnn's list is a bug to "
                             "report)")
        elif kind == "rows":
            if rules.split_axes(first):
                rules.refuse(f"layer {layer}: torch {name} mixes the rows of {what} ({first}), whose rows are split "
                             "over ranks; aggregate over the graph with g.spmm, or reduce per-node values with the "
                             "plan's primitives")
        elif isinstance(first, EdgeLayout):
            pass  # every column of an edge tensor is local
        elif kind == "cols" and rules.col_axis(first):
            rules.refuse(f"layer {layer}: torch {name} mixes the feature columns of a node tensor ({first}), which "
                         f"{rules.algo} splits over {rules.col_axis(first)}; use the plan's column reductions "
                         "(head_scores, head_mean, normalize_rows, linear) or an algorithm that keeps whole rows")
        elif kind == "elementwise" and rules.col_axis(first):
            for t in ins:
                if self.layout_of(t) is None and t.dim() >= 1 and t.shape[-1] > 1 \
                        and tuple(t.shape) != tuple(first_t.shape):
                    rules.refuse(f"layer {layer}: torch {name} broadcasts a {tuple(t.shape)} tensor over the columns "
                                 f"of a node tensor ({first}), which {rules.algo} splits over {rules.col_axis(first)}; "
                                 "add a bias with plan.add_bias, scale by a scalar with plan.scale")
        if reads:
            self._use(reads, first, name)
        for o in outs:
            if o.dim() >= 1 and o.shape[0] == first_t.shape[0]:
                self.tag(o, first)

    @staticmethod
    def _classify(name, args, kwargs, first_t, outs, tagged) -> str:
        """``"elementwise"``, ``"cols"`` (rows kept, columns mixed), ``"rows"`` (rows mixed) or ``"unknown"`` (the
        shape kept by an operation not known to be pointwise: it may mix rows or columns)."""
        nd = first_t.dim()
        if name in _MATMUL:  # X W keeps the rows of X and mixes its columns; a tagged right operand mixes rows
            if name in ("matmul", "mm", "bmm", "mv", "linear", "addmm") and len(args) > 1:
                left, right = (args[1], args[2]) if name == "addmm" else (args[0], args[1])
                if any(t is left for t, _ in tagged) and not any(t is right for t, _ in tagged):
                    return "cols"
            return "rows"
        if name in ("max", "min") and len(args) > 1 and isinstance(args[1], torch.Tensor):
            return "elementwise"  # torch.max(a, b)
        if name in _REDUCE:
            d = _dim(args, kwargs)
            if name == "normalize":
                d = kwargs.get("dim", args[2] if len(args) > 2 else 1)
            return "rows" if _touches_rows(d, nd) else "cols"
        if name in _DIM_OPS:
            default = 0 if name in _DIM_DEFAULT0 else None
            pos = 2 if name in ("split", "chunk", "roll", "repeat_interleave", "tensor_split") else 1
            d = kwargs.get("dim", kwargs.get("dims", args[pos] if len(args) > pos and
                                             not isinstance(args[pos], torch.Tensor) else default))
            return "rows" if _touches_rows(d, nd) else "cols"
        if name in ("t", "T", "mT", "adjoint"):
            return "rows"
        if name in ("transpose", "swapaxes", "swapdims", "movedim", "moveaxis"):
            return "rows" if _touches_rows(list(args[1:3]), nd) else "cols"
        if name == "permute":
            dims = args[1:] if len(args) > 1 and isinstance(args[1], int) else (args[1] if len(args) > 1 else ())
            return "rows" if not dims or dims[0] != 0 else "cols"
        if name in ("getitem", "setitem"):
            if not any(t is args[0] for t, _ in tagged):
                return "rows"  # a node/edge tensor used as an index
            idx = args[1] if len(args) > 1 else None
            head = idx[0] if isinstance(idx, tuple) and idx else idx
            if isinstance(head, slice) and head == slice(None):
                return "cols"
            if head is Ellipsis:
                return "cols" if isinstance(idx, tuple) and len(idx) > 1 else "elementwise"
            return "rows"
        if name in ("unsqueeze", "squeeze"):
            d = _dim(args, kwargs)
            return "rows" if d is not None and _touches_rows(d, nd + (name == "unsqueeze")) else "elementwise"
        if name in _ROW_NORMS:  # over the trailing normalized_shape (layer/rms norm) or the channels of each row
            shape = args[1] if name in ("layer_norm", "rms_norm") and len(args) > 1 else \
                kwargs.get("normalized_shape", ())
            return "rows" if len(tuple(shape) if not isinstance(shape, int) else (shape,)) >= nd else "cols"
        shaped = [o for o in outs if isinstance(o, torch.Tensor)]
        if all(tuple(o.shape) == tuple(first_t.shape) for o in shaped):
            return "elementwise" if name in _POINTWISE else "unknown"
        if all(o.dim() >= 1 and o.shape[0] == first_t.shape[0] for o in shaped):
            return "cols"
        return "rows"

    # ------------------------------------------------------------------ after the step
    def finish(self, model) -> tuple[dict, list]:
        """``raw_grad_axes`` and the ``param_grad`` calls; refuses the parameters whose gradient the trainer could
        not make whole."""
        rules = self.rules
        rules.check_calls(self.calls)
        axes_of, calls = {}, []
        entries = {id(p): (name, layer, shape, kind) for name, layer, p, shape, kind in model.parameter_entries()}
        for pid, uses in self.uses.items():
            name, layer, shape, kind = entries[pid]
            raw = [(lay, bare, op) for lay, bare, op in uses if lay != "primitive"]
            if not raw:
                continue
            label = f"parameter {name} of layer {layer}"
            if rules.shards_parameters and kind in ("w", "b"):
                rules.refuse(f"{label} is a '{kind}' parameter, which {rules.algo} shards for plan.linear / plan.add_bias, "
                             f"but torch {raw[0][2]} reads it directly; give it another kind (held whole) or use it "
                             "through those primitives")
            need = {tuple(a for a in rules.split_axes(lay) if a not in rules.grad_axes) for lay, _, _ in raw}
            extra = sorted(need, key=len)[-1]
            if len(need) > 1:
                lays = " and ".join(f"({lay})" for lay in dict.fromkeys(lay for lay, _, _ in raw))
                rules.refuse(f"{label} enters raw torch operations on tensors laid out as {lays}, whose gradients "
                             "are partial over different axes; use it on one kind of tensor")
            if not extra:
                continue
            if any(lay == "primitive" for lay, _, _ in uses):
                rules.refuse(f"{label} is used by a primitive and in raw torch {raw[0][2]} on a tensor laid out as "
                             f"({raw[0][0]}), whose gradient is partial over {', '.join(extra)}; use it in one way")
            if any(bare for _, bare, _ in raw):
                rules.refuse(f"{label} enters raw torch {raw[0][2]} on a tensor laid out as ({raw[0][0]}), so its "
                             f"gradient is partial over {', '.join(extra)}: read it with self.param('{name}', "
                             f"{layer}), which sums it there")
            axes_of[(name, layer)] = extra
            calls.append(PrimitiveCall("param_grad", layer, int(np.prod(shape)), 0, (True,), axes=extra))
        return axes_of, calls


# ---------------------------------------------------------------------------------------------------- the plan
def _fresh(out, inputs):
    """``out``, or a view of it when the serial engine returned an input as is (the output has its own layout)."""
    return out.view_as(out) if any(out is x for x in inputs) else out


class _TraceGraph:
    """The primitives of ``plan.graph(layer)`` during a trace (recorded, layout-checked, run serially)."""

    #: a trace records :func:`~gridgnn.parallel.attention.attend` as its composition, whose bytes the fused
    #: kernels equal (tested), so the byte models need no entry of their own for it
    fused_attention = None

    def __init__(self, inner, layer: int, plan: "TracePlan"):
        self._inner, self._layer, self._plan = inner, layer, plan

    def __getattr__(self, name):
        raise AttributeError(f"plan.graph(layer).{name} is not one of the primitives a layer may call "
                             "(see gridgnn.nn.base)")

    @property
    def nnz(self) -> int:
        return self._inner.nnz

    @property
    def edge_features(self) -> torch.Tensor:
        return self._edge_tensor(lambda: self._inner.edge_features)

    @property
    def input_edges(self) -> torch.Tensor:
        return self._edge_tensor(lambda: self._inner.input_edges)

    @property
    def off_diagonal(self) -> torch.Tensor:
        return self._edge_tensor(lambda: self._inner.off_diagonal)

    @property
    def relation_values(self) -> torch.Tensor:
        return self._edge_tensor(lambda: self._inner.relation_values)

    def _edge_tensor(self, get) -> torch.Tensor:
        """An edge tensor of the graph, tagged as laid out like the edges (every column local)."""
        t = self._plan.tracer
        with t.pause():
            v = get()
            v = v.view_as(v)
        return t.tag(v, t.rules.edges(self._layer))

    @property
    def gcn_values(self) -> torch.Tensor:
        return self._edge_tensor(lambda: self._inner.gcn_values)

    def edge_ids(self):
        return self._inner.edge_ids()

    def edge_rows(self):
        return self._inner.edge_rows()

    def _run(self, name, width, heads, node, edge=(), *, others=(), fn, out_kind="node", log=True, **extra):
        t = self._plan.tracer
        lay = t.primitive(name, self._layer, node, others, edge_operands=[e for e in edge if e is not None])
        if log:
            inputs = [x for x in (*edge, *node) if x is not None]
            self._plan.calls.append(PrimitiveCall(name, self._layer, int(width), int(heads),
                                                  tuple(bool(x.requires_grad) for x in inputs), **extra))
        previous, t.current_output = t.current_output, lay if out_kind == "node" else None
        try:
            with t.pause():
                out = _fresh(fn(), node)
        finally:
            t.current_output = previous
        return t.tag(out, lay if out_kind == "node" else t.rules.edges(self._layer))

    def spmm(self, values, x, semiring: str = "sum", mask=None):
        if semiring != "sum" or mask is not None or values is None:  # composed: its primitives are logged
            from .aggregate import aggregate

            t = self._plan.tracer
            lay = t.primitive("spmm", self._layer, [x], edge_operands=[v for v in (values, mask) if v is not None])
            with t.pause():
                for v in (values, mask):
                    if v is not None:
                        t.tag(v, t.rules.edges(self._layer))
                out = aggregate(self, values, x, semiring, mask)
            return t.tag(out, lay)
        return self._run("spmm", x.shape[1], 1 if values.dim() == 1 else values.shape[1], [x], [values],
                         fn=lambda: self._inner.spmm(values, x))

    def spmm_select(self, values, x, semiring: str, mask=None):
        grads = (values is not None and bool(values.requires_grad), bool(x.requires_grad))
        self._plan.calls.append(PrimitiveCall("spmm_select", self._layer, int(x.shape[1]), int(values is not None),
                                              grads, masked=mask is not None))
        return self._run("spmm_select", 0, 0, [x], [values, mask], log=False,
                         fn=lambda: self._inner.spmm_select(values, x, semiring, mask))

    def row_sum(self, e):
        self._plan.calls.append(PrimitiveCall("row_sum", self._layer, 1, 1, (bool(e.requires_grad),)))
        t = self._plan.tracer
        t.rules.check_primitive("row_sum", self._layer)
        with t.pause():
            return self._inner.row_sum(e)

    def sddmm_add(self, s_dst, s_src):
        if s_dst.shape[1:] != s_src.shape[1:]:
            self._plan.tracer.rules.refuse(f"layer {self._layer}: g.sddmm_add needs operands of one width, got "
                                           f"{tuple(s_dst.shape[1:])} and {tuple(s_src.shape[1:])}")
        return self._run("sddmm_add", s_src.shape[1], s_src.shape[1], [s_dst, s_src],
                         fn=lambda: self._inner.sddmm_add(s_dst, s_src), out_kind="edge")

    def sddmm_dot(self, x_dst, x_src, heads: int = 1):
        if x_dst.shape[1] != x_src.shape[1] or x_src.shape[1] % heads:
            self._plan.tracer.rules.refuse(f"layer {self._layer}: g.sddmm_dot needs two operands of one width "
                                           f"divisible by heads={heads}, got {x_dst.shape[1]} and {x_src.shape[1]}")
        return self._run("sddmm_dot", x_src.shape[1], heads, [x_dst, x_src],
                         fn=lambda: self._inner.sddmm_dot(x_dst, x_src, heads), out_kind="edge")

    def edge_softmax(self, e):
        k = e.shape[1] if e.dim() > 1 else 1
        return self._run("edge_softmax", k, k, [], [e], fn=lambda: self._inner.edge_softmax(e), out_kind="edge")

    def at_destinations(self, x):
        return self._run("at_destinations", x.shape[1], 0, [x], fn=lambda: self._inner.at_destinations(x))


class TracePlan:
    """Stands for the plan of the algorithm being traced: runs the serial plan, records every primitive the model
    calls through ``graph(l)`` and the plan itself, in call order, and checks their layouts. ``traits``: the
    modelled plan's :attr:`~gridgnn.parallel.base.Plan.TRAITS`, shown to the model instead of the serial plan's
    (SAGE aggregates its root term on Plexus). Only the plan's public interface is offered."""

    source = None

    def __init__(self, plan, traits: dict | None = None, rules: LayoutRules | None = None):
        self._plan = plan
        self.name = rules.algo if rules is not None else plan.name
        # the modelled plan's traits; any not given, those of the plan it runs (serial's)
        for k, v in {**{k: getattr(plan, k) for k in Plan.TRAITS}, **(traits or {})}.items():
            setattr(self, k, v)
        self.calls: list[PrimitiveCall] = []
        self.tracer = _Tracer(rules or layout_rules("serial"), {})

    def linears(self, layer: int, h, ws):
        return stacked_linears(self, layer, h, ws)

    def param_slice(self, layer: int, kind: str, shape=None):
        return self._plan.param_slice(layer, kind, shape)

    def param_view(self, name: str, layer: int, p):
        return self.tracer.via_param(p)

    def in_rows(self, layer: int):
        return self._plan.in_rows(layer)

    def in_cols(self, layer: int, f: int):
        return self._plan.in_cols(layer, f)

    def out_rows(self):
        return self._plan.out_rows()

    def out_cols(self, c):
        return self._plan.out_cols(c)

    def graph(self, layer: int):
        return _TraceGraph(self._plan.graph(layer), layer, self)

    def _run(self, name, layer, width, heads, h, *params, fn, out_width=0):
        t = self.tracer
        lay = t.primitive(name, layer, [h], params)
        at, start = len(self.calls), t.saved_count()
        self.calls.append(PrimitiveCall(name, layer, int(width), int(heads),
                                        tuple(bool(x.requires_grad) for x in (h, *params)), int(out_width)))
        with t.pause():
            out = _fresh(fn(), (h,))
        if name == "linear":
            t.linear_returned(at, h, start)
        return t.tag(out, lay)

    def linear(self, layer: int, h, w):
        return self._run("linear", layer, w.shape[0], 0, h, w, out_width=w.shape[1],
                         fn=lambda: self._plan.linear(layer, h, w))

    def add_bias(self, layer: int, h, b):
        return self._run("add_bias", layer, h.shape[1], 0, h, b, fn=lambda: self._plan.add_bias(layer, h, b))

    def head_scores(self, layer: int, x, att):
        return self._run("head_scores", layer, x.shape[1], att.shape[0], x, att,
                         fn=lambda: self._plan.head_scores(layer, x, att))

    def head_mean(self, layer: int, h, heads: int, width: int):
        return self._run("head_mean", layer, width, heads, h, fn=lambda: self._plan.head_mean(layer, h, heads, width))

    def normalize_rows(self, layer: int, h):
        return self._run("normalize_rows", layer, h.shape[1], 0, h, fn=lambda: self._plan.normalize_rows(layer, h))

    def scale(self, layer: int, h, s):
        return self._run("scale", layer, h.shape[1], 0, h, s, fn=lambda: self._plan.scale(layer, h, s))


def trace_graph(f0: int):
    """A 3-vertex path with ``f0`` features: enough to run any model once."""
    from ..graph import Graph

    x = np.arange(3 * f0, dtype=np.float64).reshape(3, f0) / (3 * f0)
    return Graph.from_edges([0, 1], [1, 2], 3, directed=False, x=x, y=np.array([0, 1, 0]),
                            train_mask=np.ones(3, bool), val_mask=np.ones(3, bool), test_mask=np.ones(3, bool))


def trace(build_model, f0: int, traits: dict | None = None, rules: LayoutRules | None = None) -> Trace:
    """Run ``build_model(plan)`` once (forward, loss, backward) on a tiny serial plan in float64, checking its
    layouts against ``rules`` (default: serial's); see the module docstring. ``build_model`` gets the plan (for
    parameter slices); ``traits``: those of the algorithm modelled (``Algorithm.traits``)."""
    from ..graph import gcn_normalize
    from ..ops.loss import masked_cross_entropy
    from .blockrow import build_serial

    g = trace_graph(f0)
    plan = TracePlan(build_serial(gcn_normalize(g)), traits, rules)
    model = build_model(plan)
    model.train()
    tracer = plan.tracer
    tracer.params = {id(p): (name, layer, kind) for name, layer, p, _, kind in model.parameter_entries()}
    x = tracer.tag(torch.from_numpy(g.x), tracer.rules.input())
    held, _ = plan._plan.dgraph.held()
    edge_dim = int(getattr(model, "edge_dim", 0) or 0)
    if edge_dim:  # a model that reads edge features declares their width (``edge_dim``): the tiny graph has them
        dgraph = plan._plan.dgraph
        dgraph.edge_table = g.with_(edge_attr=np.linspace(-1.0, 1.0, g.nnz * edge_dim).reshape(g.nnz, edge_dim))
        held = held + list(dgraph._edge_data())
    relations = int(getattr(model, "num_relations", 0) or 0)
    if relations:  # a model that reads relation types declares how many (``num_relations``): the tiny graph has them
        dgraph = plan._plan.dgraph
        table = dgraph.edge_table if dgraph.edge_table is not None else g
        counts = (np.arange(g.nnz * relations).reshape(g.nnz, relations) % 3 == 0).astype(np.int32)
        counts[np.arange(g.nnz), np.arange(g.nnz) % relations] = 1  # every stored edge in some relation
        dgraph.edge_table = table.with_(edge_type_counts=counts)
        held = held + [dgraph.relation_values]
    labelled = torch.arange(3)  # the training rows' positions: a rank's own tensor, held before the step
    kept = _SavedLog(tracer, [x, labelled, *model.parameters(), *held], n=g.n, nnz=plan._plan.dgraph.nnz,
                     calls=plan.calls)
    tracer.saved_log = kept
    with masked.recomputing(observe=kept.pack), masked.keeping_masks(kept.masks):  # (the model's own call nests
        # recomputing, and keeps the observer)
        with _Checker(tracer):
            out = model(x, plan)
        tracer.layer = plan.calls[-1].layer if plan.calls else 0  # the loss belongs to the last layer
        kept.in_loss = True
        loss = masked_cross_entropy(out, torch.from_numpy(g.y), labelled, 3)
    saved = kept.records()  # after the forward: the outputs of raw operations are tagged once they return
    loss.backward()
    axes, grad_calls = tracer.finish(model)
    params = list(model.parameters())
    return Trace(plan.calls + grad_calls, sum(p.numel() for p in params), axes, saved, len(params), edge_dim,
                 relations, tuple(p.numel() for p in params if p.requires_grad), plan._plan.dgraph.edge_ids_built,
                 linear_inputs=dict(tracer.linear_inputs), off_diagonal=plan._plan.dgraph.off_diagonal_built,
                 recomputed=tuple(kept.recomputed))


class _SavedLog:
    """What autograd saves during the traced forward (a saved-tensor hook): one :class:`SavedTensor` per storage
    that is not the input, a parameter or the graph's own; a node tensor with no layout of its own (a dropout
    mask) takes that of the node tensor saved before it."""

    def __init__(self, tracer: _Tracer, constants, *, n: int, nnz: int, calls: list):
        self.t, self.n, self.nnz, self.calls = tracer, n, nnz, calls
        self.seen = {c.untyped_storage().data_ptr() for c in constants}
        self.kept: list = []
        self.recomputed: list = []  # (layer, "node" or "edge", columns, position) of each dropout output kept as its
        # recipe
        self.masks: set = set()  # the storage address of each dropout mask (masked.keeping_masks)
        self.recipes: list = []  # (len(kept) before, the output's storage address, what it added to kept) of each
        self.in_loss = False  # set once the model's forward has returned: what is saved next is the loss's

    def pack(self, t):
        if isinstance(t, masked.Recomputed):  # a dropout's output kept as its input and mask
            rows = max(1, t.x.shape[0]) if t.x.dim() else 1
            kind = "edge" if t.x.dim() and t.x.shape[0] == self.nnz else "node"
            self.recomputed.append((self.t.layer, kind, t.x.numel() // rows, len(self.calls)))
            first = len(self.kept)
            self.pack(t.x)
            # the mask (kept within the trace, masked.keeping_masks; usually packed already, by the dropout itself)
            # lies as the input does
            lay = self.t.layout_of(t.x)
            if lay is not None and self.t.layout_of(t.mask) is None:
                self.t.tag(t.mask, lay)
            self.pack(t.mask)
            self.recipes.append((first, t.of, tuple(range(first, len(self.kept)))))
            return t
        winners = t.dim() == 2 and t.shape[0] == self.n and not (t.is_floating_point() or t.dtype == torch.bool)
        if t.dim() == 0 or t.layout != torch.strided or not (t.is_floating_point() or t.dtype == torch.bool
                                                             or winners):
            return t  # scalars, sparse index structures and integer indices are the graph's, not activations
        if winners and self.t.layout_of(t) is None and self.t.current_output is not None:
            self.t.tag(t, self.t.current_output)  # (the step's own: a selection's winning edges, as its output lies)
        ptr = t.untyped_storage().data_ptr()
        if ptr not in self.seen:
            self.seen.add(ptr)
            self.kept.append((t, self.t.layer, self.in_loss, len(self.calls)))
        return t

    def records(self) -> list[SavedTensor]:
        by_storage = {}
        for u, lay in self.t.layout.values():
            by_storage.setdefault(u.untyped_storage().data_ptr(), lay)
        out, last = [], None
        for t, layer, in_loss, pos in self.kept:
            store = t.untyped_storage()
            elements = store.nbytes() // t.element_size()
            itemsize = 0 if t.is_floating_point() else t.element_size()
            lay = by_storage.get(store.data_ptr())
            mask = store.data_ptr() in self.masks  # a dropout mask: SavedTensor.mask names its kind
            if lay is None and self.t.param_reads(t):  # made of parameters alone (weights side by side): no rows
                out.append(SavedTensor(layer, "other", elements, itemsize, pos=pos))
            elif itemsize > 1:  # an integer node tensor: a selecting semiring's winning edge per row and column
                out.append(SavedTensor(layer, "winners", elements // self.n, itemsize, lay, pos))
            elif in_loss and lay is None and t.shape[0] == self.n:  # a row per labelled vertex (all 3 are)
                out.append(SavedTensor(layer, "loss", elements // self.n, itemsize, pos=pos))
            elif isinstance(lay, EdgeLayout) or lay is None and t.shape[0] == self.nnz:
                out.append(SavedTensor(layer, "edge", elements // self.nnz, itemsize, lay, pos,
                                       "edge" if mask else ""))
            elif lay is not None or t.shape[0] == self.n or t.dim() == 2 and t.shape[1] == self.n:
                last = lay or last
                out.append(SavedTensor(layer, "node", elements // self.n, itemsize, lay or last, pos,
                                       "node" if mask else ""))
            else:
                out.append(SavedTensor(layer, "other", elements, itemsize, pos=pos))
        return out


def trace_model(build_model, f0: int, traits: dict | None = None, rules: LayoutRules | None = None
                ) -> tuple[list[PrimitiveCall], int]:
    """``(calls, number of parameters)`` of :func:`trace`."""
    t = trace(build_model, f0, traits, rules)
    return t.calls, t.nparams
