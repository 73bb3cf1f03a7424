r"""The public way to write a model: subclass :class:`Model`, create parameters with :meth:`Model.add_parameter`,
compose the forward pass from the plan's primitives, and register it with :func:`register_model` (or name it
by import path, ``--model package.module:Class``).

A model written this way runs on every algorithm (``serial``, ``1d``, ``1d-sa``, ``1.5d``, ``1.5d-sa``, ``2d``,
``3d``, ``plexus``) with no distributed code of its own: the *plan* it receives in ``forward(x, plan)`` is the
algorithm on this rank, and every primitive it offers moves what its layout needs. The primitives, per layer
``l`` (``g = plan.graph(l)``):

=========================================  ================================================================
call                                        what it computes (global view; each rank holds its local block)
=========================================  ================================================================
``plan.linear(l, H, W)``                    :math:`HW` (``W`` this rank's :meth:`~Model.add_parameter` slice)
``plan.linears(l, H, [W1, W2])``            :math:`HW_1, HW_2` (one product by the weights side by side where it can)
``plan.add_bias(l, H, b)``                  :math:`H + b`
``plan.head_scores(l, X, a)``               :math:`s_{v,h} = \sum_f X_{v,h,f}\, a_{h,f}` (``a``: ``K × F``)
``plan.head_mean(l, H, K, width)``          the mean of ``K`` heads
``plan.normalize_rows(l, H)``               rows divided by their L2 norm
``plan.scale(l, H, s)``                     :math:`sH` for a scalar parameter ``s``
``g.sddmm_add(s_dst, s_src)``               :math:`e_{uv,h} = s^{dst}_{u,h} + s^{src}_{v,h}` (an edge tensor)
``g.sddmm_dot(X_dst, X_src, K)``            :math:`e_{uv,h} = \langle X^{dst}_{u,h}, X^{src}_{v,h}\rangle`
``g.edge_softmax(e)``                       softmax of ``e`` over each destination's edges
``g.spmm(e, X, semiring="sum")``            :math:`Y_u = \bigoplus_v e_{uv} \otimes X_v` (``sum``, ``mean``,
                                            ``max``, ``min``; ``e``: ``nnz``, ``nnz × K`` or ``None``)
``g.at_destinations(X)``                    ``X`` laid out like ``g.spmm``'s output (a skip term ``spmm(h) + h``)
``g.gcn_values``                            the edge values of :math:`\hat M = D^{-1/2}(A+I)D^{-1/2}`
=========================================  ================================================================

Edge tensors (``nnz_local`` or ``nnz_local × K``) are laid out like ``g.gcn_values`` on every algorithm, and all
their columns are local: elementwise operations, ``reshape`` across heads, ``e @ W`` need no care. Node tensors
change layout with the algorithm (Plexus splits their feature columns and moves them with every ``linear`` and
``spmm``), so what mixes a node tensor's columns goes through the plan's column reductions above, and a skip term
added to an aggregation through ``g.at_destinations``. Parameters are read with :meth:`Model.param` (it sums the
gradient of a parameter used in raw operations on edge tensors where the edges are split). Before training, the
model's trace (:mod:`gridgnn.parallel.trace`) checks all of this on the layouts of the chosen algorithm and refuses,
with one line, what would not equal serial (docs/custom-layer.md, "The rules").
Dropout on a layer's input: :meth:`Model.input_dropout` (keyed by global ids, so every algorithm and P drop the
same entries). The byte models of :mod:`gridgnn.planner.primitives` read the same trace, so a new model gets exact
communication accounting for free.
"""
from __future__ import annotations

import contextlib
import inspect
import math
from dataclasses import dataclass

import torch
from torch import nn

from ..errors import GridGnnError
from ..ops.masked import outer_hooks, recomputing
from ..plugins import import_object, is_import_path  # noqa: F401  (is_import_path: importable from here too)
from .dropout import hashed_dropout
from .orders import require_destination_scores

#: The registry ``--model`` reads: ``{name: model class}`` (the built-in models register in ``gridgnn.nn``).
MODELS: dict[str, type] = {}

#: The trainer's model options a model may accept as keyword arguments (``--heads``, ``--attn-dropout``,
#: ``--aggr``, ``--bases``, ``--layer-order``); the built-in models take the ones that apply to them.
TRAINER_OPTIONS = ("heads", "attn_dropout", "aggr", "bases", "layer_order")

#: ``--layer-order``: which side of a linear layer (GCN's, GraphSAGE's mean or sum) its full-graph aggregation takes
#: (:meth:`Model.multiplies_first`)
LAYER_ORDERS = ("auto", "lean")


@dataclass(frozen=True)
class Option:
    r"""A trainer option a model takes (``--heads``, ``--attn-dropout``, ``--aggr``), declared in the model's
    :attr:`Model.OPTIONS`: its type, its default and the values it admits, checked before anything starts.

    Args:
        kind (type): ``int``, ``float`` or ``str``.
        default: the value when the flag is not given (``None``: the constructor's own default, e.g. GAT's
            ``attn_dropout`` follows ``--dropout``).
        low, high: the closed range of a number (``high_open``: ``high`` itself excluded).
        choices (tuple): the values a string may take.
        help (str): what it means (the flag's help names the models that take it).
    """

    kind: type
    default: object = None
    low: float | None = None
    high: float | None = None
    high_open: bool = False
    choices: tuple = ()
    help: str = ""
    low_open: bool = False
    unit: str = ""  # what the number counts, after the range in messages ("seconds")

    def check(self, flag: str, value) -> None:
        """Refuse a value of the wrong type or out of range, with one line naming ``flag``."""
        if self.kind is str:
            if not isinstance(value, str):
                raise GridGnnError(f"{flag} must be a string, got {value!r}")
        elif isinstance(value, bool) or not isinstance(value, (int, float) if self.kind is float else int):
            raise GridGnnError(f"{flag} must be {'a number' if self.kind is float else 'an integer'}, got {value!r}")
        if self.choices and value not in self.choices:
            raise GridGnnError(f"{flag} {value!r} is not available; choose one of {', '.join(self.choices)}")
        if self.kind is not str:
            low_bad = self.low is not None and (value <= self.low if self.low_open else value < self.low)
            high_bad = self.high is not None and (value >= self.high if self.high_open else value > self.high)
            if (isinstance(value, float) and not math.isfinite(value)) or low_bad or high_bad:
                raise GridGnnError(f"{flag} must be {self.bound_text()}{' ' + self.unit if self.unit else ''}, "
                                   f"got {value}")

    def _num(self, v) -> str:
        return str(v) if isinstance(v, int) else f"{v:g}"

    def bound_text(self) -> str:
        """``in [1, 1024]``, ``in (0, 1e+06]``, ``>= 1``: the admitted values as messages and ``--help`` say them."""
        if self.choices:
            return "one of " + ", ".join(self.choices)
        if self.high is None:
            return f"{'>' if self.low_open else '>='} {self._num(self.low)}" if self.low is not None else "a number"
        lo = "-inf" if self.low is None else self._num(self.low)
        return f"in {'(' if self.low_open or self.low is None else '['}{lo}, {self._num(self.high)}" \
               f"{')' if self.high_open else ']'}"

    def range_text(self) -> str:
        return " | ".join(self.choices) if self.choices else self.bound_text().removeprefix("in ")


#: ``--layer-order`` as the models whose linear layers may take either order declare it (GCN, GraphSAGE)
LAYER_ORDER_OPTION = Option(str, "auto", choices=LAYER_ORDERS,
                            help="a first layer of equal widths aggregates first (auto) or multiplies first (lean: "
                                 "less memory, one spmm more in the backward; docs/models.md)")


def declared_options(cls) -> dict:
    """``{name: Option}`` a model class declares (a model whose ``OPTIONS`` is a tuple of names — the older form —
    declares none: it receives exactly the flags given)."""
    options = getattr(cls, "OPTIONS", ())
    return dict(options) if isinstance(options, dict) else {}


class parameter_group:
    """A read-only model attribute listing every parameter :meth:`Model.add_parameter` registered under the
    attribute's name, in layer order (``weights = parameter_group()`` makes ``model.weights[l]`` work)."""

    def __set_name__(self, owner, name: str) -> None:
        self.name = name

    def __get__(self, obj, owner=None):
        return self if obj is None else obj.parameters_named(self.name)

    def __set__(self, obj, value) -> None:
        raise AttributeError(f"{self.name} lists the parameters registered by add_parameter; it cannot be assigned")


_SHAPES_ONLY = [False]  # set while parameter_shapes builds a model: values are meta tensors (nothing allocated)


@contextlib.contextmanager
def _shapes_only():
    _SHAPES_ONLY.append(True)
    try:
        yield
    finally:
        _SHAPES_ONLY.pop()


def register_model(name: str):
    r"""Class decorator: make a model available as ``--model name`` and ``TrainConfig(model=name)``.

    Args:
        name (str): lower-case letters, digits, ``-`` and ``_``; must not be taken by another class.
    """
    if not isinstance(name, str) or not name or not all(c.isalnum() or c in "-_" for c in name) \
            or name != name.lower():
        raise ValueError(f"a model name is lower-case letters, digits, '-' and '_', got {name!r}")

    def deco(cls):
        old = MODELS.get(name)
        if old is not None and (_module(old), old.__qualname__) != (_module(cls), cls.__qualname__):
            raise ValueError(f"--model {name} is already registered by {old.__module__}.{old.__qualname__}")
        MODELS[name] = cls
        cls.model_name = name
        return cls

    return deco


def _module(cls) -> str:
    """A class's module, a script's ``__main__`` and its spawned ranks' ``__mp_main__`` being the same."""
    return "__main__" if cls.__module__ == "__mp_main__" else cls.__module__


def resolve_model(name: str) -> type:
    r"""The model class ``--model name`` means: a registered name, or ``package.module:Class`` (the module is
    imported, with the working directory on ``sys.path`` as for ``python -m``; the class must derive from
    :class:`Model` or provide the same protocol: ``from_options``, ``parameter_shapes``, ``parameter_entries``).
    Only names the user gave (command line, ``TrainConfig``, a ``--config`` file) are resolved: a checkpoint
    naming an import path is understood only once the command line has named it too (no code runs from data).

    Raises:
        GridGnnError: an unknown name, a module that cannot be imported, or an attribute that is not a model.
    """
    if not isinstance(name, str):
        raise GridGnnError(f"--model must be a name, got {name!r}")
    if name in MODELS:
        return MODELS[name]
    if not is_import_path(name):
        raise GridGnnError(f"--model {name!r} is not available; available: {', '.join(MODELS)} "
                           "(or a class by import path, package.module:Class)")
    obj = import_object("--model", name)
    attr = name.partition(":")[2]
    if not (inspect.isclass(obj) and issubclass(obj, nn.Module)
            and all(hasattr(obj, a) for a in ("from_options", "parameter_shapes", "parameter_entries"))):
        raise GridGnnError(f"--model {name}: {attr} is not a gridgnn model (subclass gridgnn.nn.Model)")
    MODELS[name] = obj  # imported once on the user's word; a checkpoint naming it is then understood
    return obj


def model_options(cls) -> tuple[str, ...]:
    """Which of :data:`TRAINER_OPTIONS` the model class accepts (its ``OPTIONS``: names, or names → :class:`Option`)."""
    return tuple(getattr(cls, "OPTIONS", ()))


class Model(nn.Module):
    r"""Base class of a GNN composed of the distributed primitives (see the module docstring).

    A subclass creates its parameters in ``__init__`` with :meth:`add_parameter` (full-size initial values from
    :attr:`generator`, so every rank and every algorithm starts from the same weights; each rank keeps its
    slice) and implements ``forward(x, plan)``. Everything the trainer, the checkpoints and the byte models ask
    of a model (:meth:`from_options`, :meth:`parameter_shapes`, :meth:`parameter_entries`, ``epoch``) is here.

    Args:
        dims (list[int]): ``[f_0, f_1, ..., f_L]``: the input width, the hidden widths (``--hidden``), the number
            of classes. ``L = len(dims) - 1`` is ``--layers``.
        dropout (float, optional): drop probability of :meth:`input_dropout`. (default: ``0.5``)
        seed (int, optional): seeds :attr:`generator` and the dropout keys. (default: ``0``)
        dtype (torch.dtype, optional): parameter dtype. (default: ``torch.float32``)
        plan (optional): the plan the model will run on; ``None`` gives the full parameters (serial).

    Class attributes:
        OPTIONS: the trainer options (``"heads"``, ``"attn_dropout"``, ``"aggr"``) ``__init__`` accepts, as
            ``{name: Option(kind, default, range)}`` (checked before a run starts; a tuple of names also works:
            such a model receives exactly the flags given).
        DEFAULT_LAYERS: ``--layers`` when the flag is not given (``2``; AGNN's is ``4``, PyG's Cora example).
        reads_destinations: ``True`` when an ``sddmm`` reads per-node values of the destinations (attention):
            such a model is refused on a double permutation outside Plexus, with a clear message.
        trains_on_samples: ``True`` when every primitive it calls exists on a sampled minibatch
            (:class:`~gridgnn.sampling.plan.MinibatchPlan`): ``--sampler`` may train it.
        FEATURE_NORM: the input-feature normalization ``--feature-norm auto`` gives this model: ``"none"`` (the
            features as loaded) or ``"l2"`` (each vertex's row scaled to unit L2 norm; a model whose scores are
            quadratic in its input, as VA's, needs features of unit scale).
        reads_data_self_loops: ``False`` when the layers aggregate no self-loop of the data (SAGE masks the
            diagonal): the PyG export then leaves them out before its PyG layers, which would aggregate them.
    """

    OPTIONS: tuple[str, ...] | dict = ()
    FEATURE_NORM = "none"
    DEFAULT_LAYERS = 2
    reads_destinations = False
    trains_on_samples = False
    reads_data_self_loops = True
    model_name = None

    def __init__(self, dims: list[int], *, dropout: float = 0.5, seed: int = 0, dtype=torch.float32, plan=None,
                 layer_order: str = "auto"):
        super().__init__()
        if len(dims) < 2:
            raise GridGnnError(f"a model needs at least one layer, got dims {list(dims)}")
        LAYER_ORDER_OPTION.check("--layer-order", layer_order)  # (the option's own check, from Python too)
        self.layer_order = layer_order
        if self.reads_destinations:
            require_destination_scores(plan, self.model_name or type(self).__name__)
        self.dims, self.dropout, self.seed, self.epoch = list(dims), float(dropout), int(seed), 0
        self.generator = torch.Generator().manual_seed(int(seed))
        self._dtype, self._slice = dtype, (plan.param_slice if plan is not None else None)
        self._view = getattr(plan, "param_view", None)
        self._entries: list[tuple] = []

    def __call__(self, *args, **kwargs):
        """``forward`` within :func:`gridgnn.ops.masked.recomputing` while it trains with autograd recording: what an
        operation saves of a dropout's output is kept as the dropout's input and mask and recomputed in the
        backward. Within other saved-tensor hooks (``torch.utils.checkpoint``, ``save_on_cpu``) those stay in
        charge and the outputs are kept."""
        if not (self.training and torch.is_grad_enabled()) or outer_hooks():
            return super().__call__(*args, **kwargs)
        with recomputing():
            return super().__call__(*args, **kwargs)

    # ------------------------------------------------------------------ parameters
    def add_parameter(self, name: str, layer: int, full: torch.Tensor, kind: str = "w") -> nn.Parameter:
        r"""Register this rank's part of a parameter and return it.

        Args:
            name (str): the parameter's name (the same name on several layers is one checkpoint group).
            layer (int): the layer that uses it (on Plexus the layer decides the shard).
            full (torch.Tensor): the full initial value (every rank computes the same one).
            kind (str, optional): ``"w"`` a weight used by ``plan.linear`` (``f_in × f_out``), ``"b"`` a bias used
                by ``plan.add_bias``, anything else (e.g. ``"att"`` for ``head_scores`` vectors, ``"scalar"`` for
                ``plan.scale``): held whole by every rank. (default: ``"w"``)
        """
        if not name.isidentifier():
            raise ValueError(f"a parameter name is an identifier, got {name!r}")
        shape = tuple(full.shape)
        part = full[self._slice(layer, kind, shape)] if self._slice is not None else full
        p = nn.Parameter(part.detach().contiguous().to(self._dtype))
        self.register_parameter(f"{name}_{layer}", p)
        self._entries.append((name, layer, p, shape, kind))
        return p

    def parameters_named(self, name: str) -> list[nn.Parameter]:
        """Every parameter :meth:`add_parameter` registered as ``name``, in creation (layer) order."""
        return [e[2] for e in self._entries if e[0] == name]

    def param(self, name: str, layer: int) -> torch.Tensor:
        """This rank's part of the parameter :meth:`add_parameter` registered as ``name`` for ``layer``. Read
        parameters through it: a parameter that enters raw torch operations on edge tensors (or, on Plexus, on
        node tensors) gets a gradient that is partial over some mesh axes, which the tensor it returns sums
        (:attr:`gridgnn.parallel.base.Plan.raw_grad_axes`); the model's trace refuses a bare read there."""
        p = getattr(self, f"{name}_{layer}")
        return self._view(name, layer, p) if self._view is not None else p

    def glorot(self, rows: int, cols: int) -> torch.Tensor:
        r"""Glorot-uniform values, :math:`U(-a, a)`, :math:`a = \sqrt{6 / (\text{rows} + \text{cols})}`, drawn
        from :attr:`generator` in float64 (PyG's ``glorot``)."""
        if _SHAPES_ONLY[-1]:
            return torch.empty((rows, cols), dtype=torch.float64, device="meta")
        a = math.sqrt(6.0 / (rows + cols))
        return torch.rand((rows, cols), generator=self.generator, dtype=torch.float64) * 2 * a - a

    @staticmethod
    def zeros(*shape: int) -> torch.Tensor:
        return torch.zeros(shape, dtype=torch.float64, device="meta" if _SHAPES_ONLY[-1] else None)

    @staticmethod
    def ones(*shape: int) -> torch.Tensor:
        return torch.ones(shape, dtype=torch.float64, device="meta" if _SHAPES_ONLY[-1] else None)

    def parameter_entries(self) -> list[tuple]:
        """``(name, layer, parameter, full shape, kind)`` of every parameter, in creation order."""
        return list(self._entries)

    @classmethod
    def parameter_shapes(cls, dims: list[int], **options) -> dict:
        """``{name: [full shape of each such parameter, in creation order]}`` of the model on ``dims`` (what a
        checkpoint must hold). The model is built with meta tensors where it draws its values from
        :meth:`glorot`, :meth:`zeros` and :meth:`ones`: shapes of any size cost no memory."""
        try:
            with _shapes_only():
                model = cls.from_options(dims, dtype=torch.float64, **options)
        except GridGnnError:
            raise
        except Exception:  # noqa: BLE001 - a model that reads its values while it builds (.item() ...): real ones
            model = cls.from_options(dims, dtype=torch.float64, **options)
        out: dict = {}
        for name, _, _, shape, _ in model.parameter_entries():
            out.setdefault(name, []).append(shape)
        return out

    @classmethod
    def from_options(cls, dims: list[int], *, plan=None, dtype=torch.float32, seed: int = 0, dropout: float = 0.5,
                     **options) -> "Model":
        """The trainer's constructor: ``options`` holds trainer options (:data:`TRAINER_OPTIONS`: those in
        :attr:`OPTIONS` are passed on) and arguments of the model's own constructor (passed on where it takes
        them); ``None`` means the model's default."""
        accepted = inspect.signature(cls.__init__).parameters
        kw = {k: v for k, v in options.items() if v is not None
              and (k in cls.OPTIONS if k in TRAINER_OPTIONS else k in accepted)}
        return cls(dims, plan=plan, dtype=dtype, seed=seed, dropout=dropout, **kw)

    @property
    def num_layers(self) -> int:
        return len(self.dims) - 1

    # ------------------------------------------------------------------ helpers for forward
    def multiplies_first(self, plan, layer: int) -> bool:
        r"""Whether layer ``layer``'s weighted sum over the neighbours (a linear one: :math:`\hat M H W`, a mean or a
        sum) runs ``linear → spmm`` rather than ``spmm → linear`` — both give the same result:

        * the narrower side (``min(f_in, f_out)`` columns) is aggregated;
        * at equal widths a later layer than the first multiplies first: its input is then the dropout's output,
          which autograd keeps as the ReLU output and the mask it keeps anyway
          (:func:`gridgnn.ops.masked.recomputing`), where aggregating first would have ``linear`` keep the aggregate
          as well. The first layer at equal widths is what :attr:`layer_order` (``--layer-order``) decides:
          ``auto`` aggregates first (its input, the features, needs no gradient, so the backward skips that
          ``spmm`` and what it moves: the faster order) and ``lean`` multiplies first (no ``n × f_in`` aggregate
          kept from the forward to the backward: the order that holds less, for one ``spmm`` of ``f_out`` columns
          more in the backward). (A narrowing layer 0 multiplies first in both, which gives its ``spmm`` a backward
          of ``f_out`` columns: fewer columns moved than aggregating first only where ``2 f_out < f_in``, but no
          ``n × f_in`` aggregate kept);
        * a sampled minibatch (``plan.aggregation_keeps_rows`` false: its input rows, the outputs' and their sampled
          neighbours, outnumber its output rows) aggregates first in both orders: a product after the aggregation
          has the fewer rows, and the aggregate it keeps is the smaller."""
        f_in, f_out = self.dims[layer], self.dims[layer + 1]
        if not plan.aggregation_keeps_rows:
            return False
        return f_out < f_in or f_out == f_in and (layer > 0 or self.layer_order == "lean")

    def input_dropout(self, h: torch.Tensor, plan, layer: int, width: int) -> torch.Tensor:
        r"""Dropout on layer ``layer``'s input (``width`` global columns), keyed by (seed, epoch, layer, global
        node id, feature): the same mask on every algorithm and P; the identity in eval mode."""
        return hashed_dropout(h, self.dropout, plan.in_rows(layer), seed=self.seed, epoch=self.epoch, layer=layer,
                              training=self.training, features=width, cols=plan.in_cols(layer, width))
