r"""The built-in models as PyG modules (``to_pyg`` of :class:`~gridgnn.nn.GCN`, :class:`~gridgnn.nn.GAT`,
:class:`~gridgnn.nn.AGNN`, :class:`~gridgnn.nn.SAGE`, :class:`~gridgnn.nn.GINE`, :class:`~gridgnn.nn.GATv2`): a
``torch_geometric.nn.Sequential`` of PyG layers holding the model's full parameters, called ``m(x, edge_index)``
(GCN: ``m(x, edge_index, edge_weight)``, ``None`` for an unweighted graph; GINE, GATv2: ``m(x, edge_index,
edge_attr)``), in eval mode. It pickles with ``torch.save`` and loads with plain PyG
(``torch.load(path, weights_only=False)``: a pickled module, so load only files you trust).

A trained model's export (:meth:`gridgnn.TrainedModel.to_pyg`, ``gridgnn export --to pyg``) is a
:class:`PygExport`: that ``Sequential`` (``.net``) behind the model's input pipeline (feature normalization,
degree features, duplicate edges merged), called ``m(x, edge_index)`` with optional ``edge_weight=``,
``edge_attr=``, ``edge_type=``, so a user's own copy of a graph gives :meth:`~gridgnn.TrainedModel.predict`'s
logits. Unpickling it needs gridgnn importable (its class lives here); ``.net`` alone needs PyG only.
"""
from __future__ import annotations

import torch


def sequential(signature: str, layers: list):
    """``torch_geometric.nn.Sequential(signature, layers)`` in eval mode, without gradients."""
    from torch_geometric.nn import Sequential

    model = Sequential(signature, layers)
    for p in model.parameters():
        p.requires_grad_(False)
    return model.eval()


def set_linear(lin, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
    """A ``Linear`` (PyG's or torch's: ``weight`` is ``out × in``) set to ``x @ weight + bias`` of a model whose
    weights are ``in × out``."""
    with torch.no_grad():
        lin.weight.copy_(weight.detach().T)
        if bias is not None:
            lin.bias.copy_(bias.detach())


def check_whole(model) -> None:
    """``to_pyg`` reads full parameters: the serial model (``plan=None``), e.g. :attr:`gridgnn.TrainedModel.module`."""
    if any(p.shape != tuple(shape) for _, _, p, shape, _ in model.parameter_entries()):
        raise ValueError("to_pyg needs the model's full parameters (a model built with plan=None)")


class PygExport(torch.nn.Module):
    r"""A trained model's PyG export: its input pipeline (:mod:`gridgnn.graph.pipeline`), then ``net``, the
    ``torch_geometric.nn.Sequential`` of its layers.

    Called as a PyG model is: ``m(x, edge_index)``, and ``edge_weight=`` (GCN), ``edge_attr=`` (GINE, GATv2),
    ``edge_type=`` (R-GCN) where the model reads them (positionally too, third). Before the layers it

    * merges duplicate edges as gridgnn does (one edge per source, destination and relation; given weights
      added: PyG ``coalesce(reduce="sum")``); edges that carry features must not repeat (gridgnn drops the
      features of such a graph);
    * adds the reverse of every edge when the run's loader did (``symmetrize``: ``planetoid:``, ``?directed=0``;
      the larger weight of a pair in both directions, as gridgnn's ``Graph.from_edges(directed=False)``);
    * computes the 3 degree features ``[1, log(1 + in-degree), log(1 + out-degree)]`` for ``x=None`` when the model
      was trained on them (give ``num_nodes=`` if the last vertices have no edge);
    * reads ``x`` in ``float32``, as gridgnn's loaders hold features, and normalizes its rows as training did
      (``feature_norm``: ``none``, ``row``, ``l2``; in float64, back to ``float32``);
    * leaves out the edges whose ``edge_weight`` is 0 (gridgnn's normalized matrix stores none: a model that reads
      no weights, GAT or SAGE, does not see them either; give ``edge_weight=`` to any model for this; a self-loop
      of weight 0 stays for GCN, which keeps it as PyG does — GAT, GATv2 and AGNN, whose PyG layers re-add every
      self-loop, differ there) and, for a model that aggregates no self-loop of the data (``data_self_loops=False``: SAGE, whose
      PyG layer would), the self-loops;
    * ignores ``edge_type`` for a model that reads none (it would merge duplicates per relation);
    * refuses (``ValueError``) what gridgnn's readers refuse: vertex or relation ids out of range, a weight, type or
      feature row missing for some edge, negative or non-finite weights, non-finite edge features.

    Args:
        net: the PyG ``Sequential``.
        feature_norm (str): ``"none"``, ``"row"`` or ``"l2"``. (default ``"none"``)
        degree_features (bool): the model was trained on degree features. (default ``False``)
        symmetrize (bool): the model was trained on a symmetrized graph. (default ``False``)
        data_self_loops (bool): the model's layers read a self-loop of the data. (default ``True``)
        edge_dim (int, optional): width of the edge features the layers read (GINE, GATv2; ``0``: none, a given
            ``edge_attr`` is ignored as gridgnn's ``--edge-dim 0`` does; ``None``: not known, ``edge_attr`` is
            passed on as given). (default ``None``)
    """

    def __init__(self, net, *, feature_norm: str = "none", degree_features: bool = False, symmetrize: bool = False,
                 data_self_loops: bool = True, edge_dim: int | None = None):
        super().__init__()
        if feature_norm not in ("none", "row", "l2"):
            raise ValueError(f"feature_norm must be none, row or l2, got {feature_norm!r}")
        self.net, self.feature_norm, self.degree_features = net, feature_norm, bool(degree_features)
        self.symmetrize, self.data_self_loops = bool(symmetrize), bool(data_self_loops)
        self.edge_dim = None if edge_dim is None else int(edge_dim)
        sig = getattr(getattr(net, "signature", None), "param_dict", None)
        self.args = list(sig) if sig else ["x", "edge_index"]
        self.eval()

    def extra_repr(self) -> str:
        return (f"feature_norm={self.feature_norm!r}, degree_features={self.degree_features}, "
                f"symmetrize={self.symmetrize}, data_self_loops={self.data_self_loops}")

    def forward(self, x, edge_index, edge=None, *, edge_weight=None, edge_attr=None, edge_type=None,
                num_nodes: int | None = None):
        edge_index = torch.as_tensor(edge_index)
        if edge_index.dtype.is_floating_point or edge_index.dtype in (torch.bool, torch.complex64,
                                                                      torch.complex128):
            raise ValueError(f"edge_index has dtype {edge_index.dtype}; it must hold integer vertex ids (torch.long)")
        edge_index = edge_index.long()
        third = self.args[2] if len(self.args) > 2 else None
        given = {"edge_weight": edge_weight, "edge_attr": edge_attr, "edge_type": edge_type}
        if edge is not None:
            if third is None:
                raise ValueError("this model takes no third argument (x, edge_index only)")
            given[third] = edge
        width = getattr(self, "edge_dim", None)  # (an export pickled before it was recorded: passed on as given)
        if "edge_attr" not in self.args:
            given["edge_attr"] = None  # (a model that reads none: a generic data.edge_attr is not checked nor used)
        elif width == 0:
            given["edge_attr"] = None  # (the layers read none: PyG's would fail on an assert)
        elif width is not None:
            attr = None if given["edge_attr"] is None else torch.as_tensor(given["edge_attr"])
            if attr is not None and width == 1 and attr.dim() == 1:  # [E], as gridgnn reads it
                attr = attr.reshape(-1, 1)
            if attr is None or attr.dim() != 2 or attr.shape[1] != width:
                raise ValueError(f"this model reads edge features {width} wide: give edge_attr= (edges × {width}), "
                                 f"got {None if attr is None else tuple(attr.shape)}")
            given["edge_attr"] = attr
        if "edge_type" not in self.args:
            given["edge_type"] = None
        elif given["edge_type"] is None:  # (PyG's RGCNConv would fail on an assert)
            raise ValueError("this model reads relation types: give edge_type= (one relation id per edge)")
        n = int(x.shape[0]) if x is not None else num_nodes if num_nodes is not None else \
            int(edge_index.max()) + 1 if edge_index.numel() else 0
        relations = max((int(getattr(m, "num_relations", 0)) for m in self.net.modules()), default=0)
        given = self._checked(edge_index, given, n, relations)
        edge_index, given = self._merged(edge_index, given, n)
        if self.symmetrize:
            edge_index, given = self._symmetrized(edge_index, given, n)
        if x is None:
            if not self.degree_features:
                raise ValueError("x is None, but the model was trained on node features of its own")
            x = self._degrees(edge_index, n)
        edge_index, given = self._read(edge_index, given)
        x = self._normalized(torch.as_tensor(x).to(torch.float32))  # gridgnn's loaders hold features in float32
        param = next(self.net.parameters(), None)
        if param is not None:  # gridgnn reads features, edge features and weights in the run's dtype too
            x = x.to(param.dtype)
            given = {k: (v if v is None or k == "edge_type" else torch.as_tensor(v).to(param.dtype))
                     for k, v in given.items()}
        extra = [given[a] for a in self.args[2:]]
        return self.net(x, edge_index, *extra)

    @staticmethod
    def _checked(edge_index, given: dict, n: int, relations: int = 0) -> dict:
        """What gridgnn's readers refuse is refused here too, in one line, rather than read into other logits: edge
        ids outside ``0..n-1``, one weight, type or feature row per edge missing, weights that are negative or not
        finite (training refuses them: the normalization divides by weighted degrees), edge features that are not
        finite, relation ids that are negative, not integers or (``relations`` > 0) not below ``relations``."""
        if edge_index.dim() != 2 or edge_index.shape[0] != 2:
            raise ValueError(f"edge_index must be 2 × edges, got shape {tuple(edge_index.shape)}")
        if edge_index.numel() and (int(edge_index.min()) < 0 or int(edge_index.max()) >= n):
            bad = edge_index[(edge_index < 0) | (edge_index >= n)][0]
            raise ValueError(f"edge_index holds vertex id {int(bad)}, out of range for {n} vertices (valid 0..{n - 1}"
                             f"{'' if n else ': give x or num_nodes='})")
        m, out = edge_index.shape[1], dict(given)
        for name, value in given.items():
            if value is None:
                continue
            value = torch.as_tensor(value)
            if value.dim() == 0 or value.shape[0] != m or (name != "edge_attr" and value.dim() != 1):
                raise ValueError(f"{name} must hold one {'row' if name == 'edge_attr' else 'value'} per edge "
                                 f"({m} edges), got shape {tuple(value.shape)}")
            if name == "edge_type":
                if value.dtype.is_floating_point or value.dtype.is_complex or value.dtype == torch.bool:
                    raise ValueError(f"edge_type has dtype {value.dtype}; it must hold integer relation ids")
                if m and (int(value.min()) < 0 or (relations and int(value.max()) >= relations)):
                    bad = int(value.min()) if int(value.min()) < 0 else int(value.max())
                    valid = f"valid 0..{relations - 1}" if relations else "relation ids are >= 0"
                    raise ValueError(f"edge_type holds relation id {bad}, out of range ({valid})")
            elif not bool(torch.isfinite(value).all()):
                raise ValueError(f"{name} holds values that are not finite (NaN or inf)")
            elif name == "edge_weight" and m and float(value.min()) < 0:
                k = int(torch.argmax((value < 0).to(torch.int8)))
                raise ValueError(f"edge_weight must be non-negative, as training's (the normalization divides by "
                                 f"weighted degrees): edge {int(edge_index[0, k])} -> {int(edge_index[1, k])} has "
                                 f"weight {float(value[k]):g}")
            out[name] = value
        return out

    @staticmethod
    def _merged(edge_index, given: dict, n: int):
        """gridgnn's duplicate-edge rule (no change, and the edges' order kept, when no edge repeats)."""
        kind = given.get("edge_type")
        key = edge_index[1] * max(n, 1) + edge_index[0]
        if kind is not None:
            key = torch.as_tensor(kind).long() * max(n, 1) ** 2 + key
        uniq, inverse = torch.unique(key, return_inverse=True)
        if uniq.numel() == key.numel():
            return edge_index, given
        if given.get("edge_attr") is not None:
            raise ValueError(f"{key.numel() - uniq.numel()} edges are given more than once and edges carry features "
                             "(edge_attr): gridgnn drops the features of such a graph; remove the duplicates")
        first = torch.full((uniq.numel(),), key.numel(), dtype=torch.long)
        first.scatter_reduce_(0, inverse, torch.arange(key.numel()), reduce="amin")
        out = dict(given)
        if kind is not None:
            out["edge_type"] = torch.as_tensor(kind)[first]
        weight = given.get("edge_weight")
        if weight is not None:
            weight = torch.as_tensor(weight)
            out["edge_weight"] = torch.zeros(uniq.numel(), dtype=weight.dtype).index_add_(0, inverse, weight)
        return edge_index[:, first], out

    @staticmethod
    def _symmetrized(edge_index, given: dict, n: int):
        """Every edge in both directions, the larger weight of a pair in both (no change when every edge's reverse
        is there with its weight); the edges in gridgnn's order (by destination, then source)."""
        both = torch.cat([edge_index, edge_index.flip(0)], dim=1)
        key = both[1] * max(n, 1) + both[0]
        uniq, inverse = torch.unique(key, return_inverse=True)
        weight = given.get("edge_weight")
        w = None if weight is None else torch.as_tensor(weight)
        if uniq.numel() == edge_index.shape[1]:  # every reverse present: symmetric unless the weights differ
            if w is None:
                return edge_index, given
            wmax = torch.full((uniq.numel(),), -torch.inf, dtype=w.dtype).scatter_reduce_(
                0, inverse, torch.cat([w, w]), reduce="amax")
            if torch.equal(wmax[inverse[:w.numel()]], w):
                return edge_index, given
        if given.get("edge_attr") is not None or given.get("edge_type") is not None:
            raise ValueError("the model was trained on a symmetrized graph; this one is directed and carries edge "
                             "features or types: give it with both directions of every edge")
        out = dict(given)
        if w is not None:
            out["edge_weight"] = torch.full((uniq.numel(),), -torch.inf, dtype=w.dtype).scatter_reduce_(
                0, inverse, torch.cat([w, w]), reduce="amax")
        return torch.stack([uniq % max(n, 1), uniq // max(n, 1)]), out

    def _read(self, edge_index, given: dict):
        """The edges the layers read: without those of weight 0 and, where the model reads none, the self-loops
        (after the degree features, which count every edge, as gridgnn's)."""
        keep, off = None, edge_index[0] != edge_index[1]
        if given.get("edge_weight") is not None:  # (a self-loop of weight 0 stays for GCN, which keeps it as PyG's)
            keep = torch.as_tensor(given["edge_weight"]) != 0
            if "edge_weight" in self.args:
                keep = keep | ~off
        if not self.data_self_loops:
            keep = off if keep is None else keep & off
        if keep is None or bool(keep.all()):
            return edge_index, given
        out = {k: (None if v is None else torch.as_tensor(v)[keep]) for k, v in given.items()}
        return edge_index[:, keep], out

    @staticmethod
    def _degrees(edge_index, n: int) -> torch.Tensor:
        """``[1, log(1 + in-degree), log(1 + out-degree)]`` (:func:`gridgnn.graph.loaders.degree_features`): the
        degrees of the vertex pairs, a pair joined by several relations counted once, as the loader counts them."""
        width = max(n, 1)
        pairs = torch.unique(edge_index[1].long() * width + edge_index[0].long())
        indeg = torch.bincount(pairs // width, minlength=n).double()
        outdeg = torch.bincount(pairs % width, minlength=n).double()
        return torch.stack([torch.ones(n, dtype=torch.float64), torch.log1p(indeg), torch.log1p(outdeg)],
                           dim=1).float()

    def _normalized(self, x: torch.Tensor) -> torch.Tensor:
        if self.feature_norm == "none":
            return x
        xd = x.double()
        norm = xd.sum(dim=1) if self.feature_norm == "row" else xd.pow(2).sum(dim=1).sqrt()
        ok = norm != 0 if self.feature_norm == "row" else norm > 0
        inv = torch.where(ok, 1.0 / torch.where(ok, norm, torch.ones_like(norm)), torch.zeros_like(norm))
        return (xd * inv[:, None]).to(x.dtype)
