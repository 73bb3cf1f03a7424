r"""The graph a run trains on, checked before any collective: loaded (a graph handed over from Python, or ``--data``),
its features normalized as ``--feature-norm`` says, the widths a model reads settled from the data (edge
features, relation types), and a graph no model can train on (or a trained model cannot run on) refused in one
line, on every rank alike."""
from __future__ import annotations

import inspect

import numpy as np

from ..errors import GridGnnError
from ..graph.graph import SplitFacts, require_nonnegative_weights
from ..graph.loaders import degree_features, normalize_features
from ..graph.pipeline import typed_layout
from ..graph.spec import load_graph
from ..nn import resolve_model
from .config import TrainConfig


def with_feature_norm(graph, cfg: TrainConfig, *, owned: bool = False):
    """``graph`` with its features normalized as ``--feature-norm`` says (``auto``: the model's choice, else the
    data's convention, :meth:`~gridgnn.train.config.TrainConfig.feature_norm_for`): in place when this rank loaded
    it (``owned``), else in a copy (a graph handed over from Python is left as it was)."""
    how = cfg.feature_norm_for(graph.meta)
    if how == "none" or graph.x is None:
        return graph
    x = np.asarray(graph.x)
    if owned and np.issubdtype(x.dtype, np.floating) and x.flags.writeable:
        normalize_features(graph.x, how, in_place=True)
        return graph
    return graph.with_(x=normalize_features(graph.x, how))


def check_trained_types(cfg, types) -> None:
    """Inference of a model trained on a typed graph: ``types`` (this graph's layout) in the training run's order."""
    trained_types = getattr(cfg, "trained_types", None)
    if None not in (trained_types, types) and types != trained_types:  # (tensors with edge_type name no types)
        raise GridGnnError(f"the model was trained on vertex types {trained_types['vertices']} (feature columns from "
                           f"{trained_types['columns']}) and relations {trained_types['relations']} in that order; "
                           f"this graph has {types['vertices']} (from {types['columns']}) and {types['relations']}: "
                           "build it with the types in the training run's order")


def planned_graph(cfg: TrainConfig, given=None):
    """The graph a plan prices (``gridgnn plan``, ``simulate``, ``--algo auto``; ``given``: a graph in memory instead
    of ``cfg.data``), refused as training refuses it — negative weights, and for node classification no features or
    labels — so that no plan is made (nor a traceback met pricing a loss) for data the run would refuse."""
    if getattr(cfg, "task", "node") == "node":
        return checked_graph(cfg, given, 1)
    graph = load_graph(cfg.data if given is None else given, seed=cfg.seed)
    require_nonnegative_weights(graph)
    return graph


def data_fingerprint(cfg: TrainConfig, graph) -> dict | None:
    """The graph's :meth:`~gridgnn.graph.graph.Graph.fingerprint` (before its features are normalized) where a
    checkpoint is written or read (``--checkpoint-every``, ``--resume``), else ``None``: hashing a large graph's
    arrays costs a pass over them."""
    if getattr(cfg, "resume", None) is None and not getattr(cfg, "checkpoint_every", 0):
        return None
    return graph.fingerprint()


def check_data(n: int, num_features: int, num_classes: int, n_train: int, blocks: int) -> None:
    """A graph a model can be trained on: features, labels of at least 2 classes, training vertices, enough
    vertices for the layout's blocks."""
    if num_features < 1:
        raise GridGnnError("the graph has no node features")
    if num_classes < 2:
        raise GridGnnError(f"node classification needs labels of at least 2 classes; this graph's labels have "
                           f"{'none' if num_classes < 1 else 'one'}")
    if n_train < 1:
        raise GridGnnError("the graph has no labelled training nodes")
    if n < blocks:
        raise GridGnnError(f"cannot split {n} vertices into {blocks} vertex blocks")


def check_inference_data(n: int, num_features: int, dims: list[int], blocks: int, *, degree: bool = False,
                          trained: str | None = None) -> None:
    """A graph a trained model on ``dims`` can run on: features of its input width, no labels needed. ``degree``:
    the graph came without features (it holds gridgnn's degree features); ``trained``: the model's record of its
    input features (``"degree"``, ``"given"``, ``None``: not recorded)."""
    if trained == "degree" and not degree:
        raise GridGnnError(f"the graph has {num_features} node features of its own; the model was trained on degree "
                           "features (the 3 columns gridgnn computes for a graph without x): give the graph without "
                           "node features")
    if degree and (trained == "given" or (trained is None and num_features != dims[0])):
        raise GridGnnError(f"the graph has no node features (x); the model was trained on {dims[0]} of its own")
    if num_features != dims[0]:
        raise GridGnnError(f"the graph has {num_features} node features; the model was trained on {dims[0]}")
    if n < blocks:
        raise GridGnnError(f"cannot split {n} vertices into {blocks} vertex blocks")


def check_splits(cfg: TrainConfig, facts: SplitFacts) -> None:
    """The training, validation and test vertices are three sets: a vertex in two of them is refused (a test
    accuracy over training vertices would be reported as if it were held out), as the OGB loader refuses
    overlapping split files; ``--early-stop`` needs labelled validation vertices to watch (without, it never
    stopped and ``--keep best`` kept the last epoch, without a word). ``facts``: :meth:`SplitFacts.of` a graph in
    memory, or a sharded dataset's ``split_facts``."""
    if cfg.early_stop and not facts.labelled_val:
        raise GridGnnError(f"--early-stop {cfg.early_stop} watches the validation accuracy; the graph has no "
                           "labelled validation vertices (leave --early-stop out)")
    for (a, b), (count, first) in facts.overlaps.items():
        raise GridGnnError(f"the graph's {a} and {b} masks share {count} vertices (e.g. vertex {first}); a vertex "
                           "belongs to one split")


def in_memory_name(graph) -> str:
    """What a summary calls a graph handed over from Python (``gridgnn train --config`` refuses to rerun it)."""
    return f"in-memory:{getattr(graph, 'name', None) or 'graph'}"


def unlabelled(graph):
    """``graph`` with labels ``−1`` and empty masks where it has none (inference reads no label)."""
    n = graph.n
    changes = {}
    if graph.y is None:
        changes["y"] = np.full(n, -1, dtype=np.int64)
    for name in ("train_mask", "val_mask", "test_mask"):
        if getattr(graph, name) is None:
            changes[name] = np.zeros(n, dtype=bool)
    return graph.with_(**changes) if changes else graph


def settle_edge_dim(cfg: TrainConfig, data_edge_dim: int, *, sharded: bool = False,
                    edges_note: str | None = None, relations: int = 0, dropped: int = 0) -> None:
    """``cfg.edge_dim`` from the data (a model that reads edge features is built for their width); a given width
    that differs from the data's is refused, for a model that takes one; ``0`` leaves them unread, for a model
    that does not require them (``sharded``: a sharded dataset, which holds no edge features; ``dropped``: the
    width of those its source had, which a model that reads them where given is refused to train without unless
    ``--edge-dim 0`` says so)."""
    cls = resolve_model(cfg.model)
    if "num_relations" in inspect.signature(cls.__init__).parameters:
        settle_relations(cfg, cls, relations, sharded=sharded)
    if "edge_dim" not in inspect.signature(cls.__init__).parameters:
        return
    if cfg.edge_dim is None:
        if not data_edge_dim and getattr(cls, "requires_edge_features", False):
            if sharded:
                raise GridGnnError(f"--model {cfg.model} reads edge features; a sharded dataset holds none (give "
                                   "the original --data SPEC)")
            why = "" if edges_note is None else f" ({edges_note})"
            raise GridGnnError(f"--model {cfg.model} reads edge features (edge_attr); the graph carries none{why} "
                               "(a PyG Data's edge_attr, an npz 'edge_attr', synthetic:sbm?edge_features=D)")
        if sharded and dropped and not data_edge_dim:  # (GATv2 trained without them: other logits, no word)
            raise GridGnnError(f"--model {cfg.model} reads edge features where the graph has them; this sharded "
                               f"dataset's source had {dropped}-wide ones, which it does not hold: give the original "
                               "--data SPEC, or --edge-dim 0 to train without them")
        if edges_note is not None and not data_edge_dim:  # a loader dropped the graph's own: likewise
            raise GridGnnError(f"--model {cfg.model} reads edge features where the graph has them; this graph's were "
                               f"dropped ({edges_note}): give them once per edge, or --edge-dim 0 to train without "
                               "them")
        cfg.edge_dim = int(data_edge_dim)
    elif cfg.edge_dim != data_edge_dim and (cfg.edge_dim or getattr(cls, "requires_edge_features", False)):
        raise GridGnnError(f"--model {cfg.model} is built for edge features {cfg.edge_dim} wide; the graph's are "
                           f"{data_edge_dim} wide" if data_edge_dim else
                           f"--model {cfg.model} reads edge features {cfg.edge_dim} wide; the graph carries none")


def settle_relations(cfg: TrainConfig, cls, data_relations: int, *, sharded: bool = False) -> None:
    """``cfg.relations`` from the data (a model that reads relation types is built for their count); a given count
    that differs from the data's is refused."""
    if not data_relations and getattr(cls, "requires_relations", False):
        where = "a sharded dataset holds none (give the original --data SPEC)" if sharded else \
            "the graph carries none (a PyG Data's edge_type, a HeteroData, an npz 'edge_type', synthetic:typed-sbm)"
        raise GridGnnError(f"--model {cfg.model} reads relation types (edge_type); {where}")
    if cfg.relations is None:
        cfg.relations = int(data_relations) or None
    elif cfg.relations != data_relations:
        raise GridGnnError(f"--model {cfg.model} is built for {cfg.relations} relation types; the graph has "
                           f"{data_relations}")


def checked_graph(cfg: TrainConfig, given, blocks: int, *, dims: list[int] | None = None):
    """The graph of ``given`` (a graph in memory) or of ``cfg.data``, checked for training (or, with ``dims``, for
    inference of a model on these widths: then unlabelled where it has no labels), features not yet normalized."""
    graph = load_graph(cfg.data if given is None else given, seed=cfg.seed)
    require_nonnegative_weights(graph)  # on every rank, before anything starts
    if dims is None:
        check_splits(cfg, SplitFacts.of(graph))
        n_train = 0 if graph.y is None or graph.train_mask is None else \
            int((graph.train_mask & (graph.y >= 0)).sum())
        check_data(graph.n, graph.num_features, graph.num_classes, n_train, blocks)
        return graph
    check_inference_data(graph.n, graph.num_features, dims, blocks, degree=graph.meta.get("features") == "degree",
                          trained=getattr(cfg, "trained_features", None))
    check_trained_types(cfg, typed_layout(graph.meta))
    if getattr(cfg, "trained_symmetrized", False) and graph.directed:  # the run's loader added reverse edges
        graph = graph.symmetrized()
        if graph.meta.get("features") == "degree":  # counted on the edges the model reads, as in training
            graph = graph.with_(x=degree_features(graph.indptr, graph.indices, graph.n))
    return unlabelled(graph)
