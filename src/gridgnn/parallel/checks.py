r"""What each family of layouts lets a layer do, as data that a model's trace checks (DESIGN rule 5: a layer
of your own equals its serial run or is refused before training, never silently different).

A :class:`LayoutRules` object describes one configuration (an ``--algo``, its mesh axes, one or two vertex
orders). For the trace (:mod:`gridgnn.parallel.trace`) it answers:

* the layout of the layer-0 input and of every primitive's output, given its operands' layouts — or a
  :class:`LayoutError` naming the primitive, the layer and both layouts;
* which mesh axes hold *different* parts of a node or edge tensor (:meth:`LayoutRules.split_axes`): a parameter
  that enters a raw torch operation on that tensor gets a gradient that is partial over those axes, of which the
  trainer already sums ``grad_axes``; the rest is summed where the model reads the parameter
  (:meth:`gridgnn.nn.Model.param`);
* which axis splits a node tensor's feature columns (raw operations that mix columns are then not local);
* after the trace, whether the engine runs every call on the layouts the trace saw (:meth:`LayoutRules.check_calls`:
  Plexus fixes one layout per layer from the model's program).

=============  ===================================================  ============================================
family         node tensor                                          edge tensor
=============  ===================================================  ============================================
block-row      rows split over the block axis (``p`` or ``row``),   split over every axis (1.5D: a row's edges are
               every column, replicated over ``rep``                spread over the ``c`` replicas)
SUMMA          rows ``B(i, k)`` split over ``row`` (and ``fiber``), split over every axis (panels of a process
               every column, replicated over ``col``                row, fiber layers)
Plexus         ``(r, q)``: rows over ``r``, columns over ``q``,     the shard ``A[V^t, V^r]``: split over ``t`` and
               replicated over the third axis ``t``                 ``r``, replicated over ``q``
=============  ===================================================  ============================================
"""
from __future__ import annotations

from abc import ABC, abstractmethod

from ..errors import GridGnnError
from ..partition.layout import (SCATTER_PRIMITIVES, EdgeLayout, PlexusNodeLayout, RowLayout, layer_orders,
                                layer_version, plexus_layouts, plexus_program)

#: primitives of the plan (``plan.X(layer, ...)``) and of a layer's graph (``plan.graph(layer).X(...)``)
PLAN_PRIMITIVES = ("linear", "add_bias", "head_scores", "head_mean", "normalize_rows", "scale")
GRAPH_PRIMITIVES = ("spmm", "spmm_select", "sddmm_add", "sddmm_dot", "edge_softmax", "row_sum", "at_destinations")


def qualified(name: str) -> str:
    """A primitive as a layer calls it: ``plan.linear``, ``g.spmm``."""
    return f"{'plan' if name in PLAN_PRIMITIVES else 'g'}.{name}"


class LayoutError(GridGnnError):
    """A model asks for something its algorithm's layouts cannot give equal to serial."""


class LayoutRules(ABC):
    """The layouts of one configuration (see the module docstring); one subclass per family."""

    algo = "serial"
    grad_axes: tuple[str, ...] = ()
    #: the layout shards the parameters of kind ``"w"`` and ``"b"`` for ``plan.linear`` / ``plan.add_bias``
    #: (a raw torch operation on one of them is refused)
    shards_parameters = False

    @abstractmethod
    def input(self):
        """The layout of the layer-0 input."""

    @abstractmethod
    def after(self, prim: str, layer: int, *layouts):
        """The output layout of ``prim`` in ``layer`` given its node operands' layouts (primitives that return
        edge tensors return :meth:`edges`)."""

    @abstractmethod
    def edges(self, layer: int) -> EdgeLayout:
        """The layout of layer ``layer``'s edge tensors."""

    def col_axis(self, layout) -> str | None:
        """The axis splitting a node tensor's feature columns (``None``: every column is local)."""
        return None

    def split_axes(self, layout) -> tuple[str, ...]:
        """Axes along which ranks hold different parts of a tensor of ``layout``."""
        if isinstance(layout, EdgeLayout):
            return layout.axes
        return tuple(layout.rows)

    def same(self, a, b) -> bool:
        """Whether two node layouts put every element on the same rank (equal layouts)."""
        return a == b

    def check_calls(self, calls: list) -> None:
        """After the trace: refuse a call that the engine would run on another layout than the trace saw.
        ``calls``: ``(name, layer, operand layouts)`` in call order."""

    def check_primitive(self, name: str, layer: int) -> None:
        """A primitive called on edge values alone (``row_sum``), which no node layout rule sees: refuse it where the
        layouts have no rule for it."""

    def refuse(self, message: str):
        raise LayoutError(f"{self.algo}: {message}")


class BlockRowRules(LayoutRules):
    r"""``serial``, ``1d``, ``1d-sa``, ``1.5d``, ``1.5d-sa``: one node layout for every tensor (all primitives
    keep it), one edge layout for every layer."""

    def __init__(self, algo: str, block_axis: str | None, rep_axis: str | None = None):
        self.algo = algo
        self.grad_axes = (block_axis,) if block_axis else ()
        self.node = RowLayout(self.grad_axes, (rep_axis,) if rep_axis else ())
        self._edges = EdgeLayout("the graph", self.grad_axes + ((rep_axis,) if rep_axis else ()))

    def input(self):
        return self.node

    def after(self, prim, layer, *layouts):
        return self.edges(layer) if prim.startswith("sddmm") else self.node

    def edges(self, layer):
        return self._edges


class SummaRules(LayoutRules):
    r"""``2d``/``3d``: node tensors hold rows ``B(i, k)`` with every column, replicated over the process columns;
    layer ``l`` multiplies matrix version ``rc`` (even ``l``) or ``cr`` (odd ``l``, double permutation only),
    whose rows are in the output order and columns in the input order."""

    def __init__(self, algo: str, axes: tuple[str, ...], double: bool):
        self.algo, self.double = algo, double
        row, col = axes[0], axes[1]
        fiber = axes[2] if len(axes) == 3 else None
        self.rows = (row,) + ((fiber,) if fiber else ())
        self.col = col
        self.grad_axes = self.rows
        self.all_axes = tuple(axes)

    def layout(self, order: str) -> RowLayout:
        return RowLayout(self.rows, (self.col,), order)

    def orders(self, layer: int) -> tuple[str, str]:
        """``(input order, output order)`` of layer ``layer``'s graph."""
        return layer_orders(layer, self.double)

    def input(self):
        return self.layout("c")

    def edges(self, layer):
        version = layer_version(layer, self.double)
        return EdgeLayout(f"matrix version {version}", self.all_axes)

    def after(self, prim, layer, *layouts):
        o_in, o_out = self.orders(layer)
        if prim in ("spmm", "spmm_select", "sddmm_add", "sddmm_dot", "at_destinations"):
            src = layouts[-1]
            if src.order != o_in:
                self.refuse(f"layer {layer}: g.{prim} reads sources laid out as ({src}), but layer {layer}'s "
                            f"graph reads them in vertex order {o_in} (a double permutation alternates the orders)")
            if prim.startswith("sddmm") and layouts[0].order != o_out:
                self.refuse(f"layer {layer}: g.{prim} reads destination values laid out as ({layouts[0]}), but a "
                            f"double permutation puts layer {layer}'s destinations in vertex order {o_out}: it needs "
                            "one vertex order per layer; use --partition random or identity, or --algo plexus")
            if prim == "at_destinations" and o_in != o_out:
                self.refuse(f"layer {layer}: g.at_destinations moves rows between the two vertex orders of a double "
                            f"permutation, which {self.algo} does not do; use --partition random or --algo plexus")
            return self.edges(layer) if prim.startswith("sddmm") else self.layout(o_out)
        return layouts[0]  # linear and the column reductions: local, the layout stays


class PlexusRules(LayoutRules):
    r"""Plexus: each ``linear`` moves a node tensor's columns and each ``spmm`` its rows to the third axis
    (:class:`~gridgnn.partition.layout.PlexusNodeLayout`); ``head_scores`` gives per-node scores with every
    column. The engine fixes one layout per layer from the model's program (:func:`plexus_layouts`), which
    :meth:`check_calls` compares with what the trace saw."""

    algo = "plexus"
    shards_parameters = True

    def __init__(self, double: bool, scatter: bool = False):
        self.double, self.scatter = double, bool(scatter)
        self.algo = "plexus-rs" if scatter else "plexus"
        self.layouts = None

    def input(self):
        return PlexusNodeLayout("x", "y", "c", split=True, scatter=self.scatter)

    def col_axis(self, layout):
        return layout.cols

    def split_axes(self, layout):
        if isinstance(layout, EdgeLayout):  # the layer's shard is known once the program is (check_calls)
            return self.edges(layout.layer).axes if self.layouts is not None else layout.axes
        split = (layout.third,) if layout.split else ()  # the layer-0 input's rows are cut over the third axis too
        return tuple(a for a in (layout.rows, layout.cols) if a) + split

    def same(self, a, b):
        if self.double or not (isinstance(a, PlexusNodeLayout) and isinstance(b, PlexusNodeLayout)):
            return a == b
        return (a.rows, a.cols, a.split, a.scatter) == (b.rows, b.cols, b.split, b.scatter)  # "r" and "c" agree

    def edges(self, layer):
        if self.layouts is None or self.layouts[layer].graph is None:
            return EdgeLayout(f"layer {layer}'s adjacency shard", (), layer)
        g = self.layouts[layer].graph
        return EdgeLayout(f"layer {layer}'s adjacency shard", (g.third, g.rows), layer)

    def after(self, prim, layer, *layouts):
        x = layouts[-1] if layouts else None
        self.check_primitive(prim, layer)
        if prim == "linear":
            if x.cols is None:
                self.refuse(f"layer {layer}: plan.linear reads per-node scores ({x}); it multiplies node features "
                            f"split by columns")
            return x.after_linear()
        if prim in ("spmm", "spmm_select", "at_destinations"):
            return x.after_spmm()
        if prim == "head_scores":
            return PlexusNodeLayout(x.rows, None, x.order)
        if prim.startswith("sddmm"):
            return self.edges(layer)
        return x  # add_bias, head_mean, normalize_rows, scale: the layout stays

    def finish(self, calls: list) -> None:
        """Fix the engine's layouts from the program of ``calls`` (name, layer, ...) as :class:`PlexusPlan` will."""
        layers = 1 + max((c[1] for c in calls), default=0)
        self.layouts = plexus_layouts([plexus_program([c[0] for c in calls if c[1] == l]) for l in range(layers)],
                                      scatter=self.scatter)

    def expected(self, name: str, layer: int):
        """The layout the engine runs ``name`` of ``layer`` on (its node operand), or ``None`` when the layer has
        no such layout."""
        L = self.layouts[layer]
        if name == "linear":
            return L.linear
        if name in ("spmm", "spmm_select", "sddmm_dot", "normalize_rows", "scale", "at_destinations"):
            return L.graph
        if name == "sddmm_add":
            return None if L.graph is None else PlexusNodeLayout(L.graph.rows, None, L.graph.order)
        if name == "head_scores":
            return None if L.linear is None else L.linear.after_linear()
        if name in ("add_bias", "head_mean"):
            return L.output
        return "any"

    def check_primitive(self, name: str, layer: int) -> None:
        if self.scatter and name not in SCATTER_PRIMITIVES:
            self.refuse(f"layer {layer}: --algo plexus-rs lays out {', '.join(SCATTER_PRIMITIVES)} (GCN-like models), "
                        f"not {qualified(name)}; use --algo plexus")

    def check_calls(self, calls):
        self.finish(calls)
        for name, layer, layouts in calls:
            want = self.expected(name, layer)
            if want == "any":
                continue
            for got in layouts:
                if want is not None and self.same(got, want):
                    continue
                hint = ""
                if name == "sddmm_add" and got.cols is not None:
                    hint = ("; sddmm_add on plexus takes per-node scores held with every column (plan.head_scores' "
                            "output), not node features split by columns")
                elif name == "linear":
                    hint = ("; plexus runs every linear of a layer on one layout, so a linear reading another "
                            "linear's output (an MLP inside a layer) is refused: put the second linear in the next "
                            "layer or use another algorithm")
                elif want is None:
                    hint = f"; layer {layer} calls no primitive that lays it out"
                lay = "no layout" if want is None else f"({want})"
                self.refuse(f"layer {layer}: {qualified(name)} reads a node tensor laid out as ({got}), but plexus "
                            f"runs layer {layer}'s {name} on {lay}{hint}")
