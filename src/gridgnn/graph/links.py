r"""The pieces of link prediction that do not depend on a layout: the edge split, keyed negative pairs and the
ranking metrics (issue 26; the training task that composes them with the encoders and a decoder comes next).

* :func:`link_split` splits a graph's edges into training, validation and test positives with PyG
  ``RandomLinkSplit`` semantics: an undirected graph is split by its undirected edges (each pair once, both
  directions leave together), ``int(fraction · E)`` edges for validation and for test, the rest for training;
  validation and test edges leave the message-passing graph (the validation graph is the training graph; the
  test graph adds the validation edges back, as PyG's ``test_data``). The sizes and these properties are PyG's;
  which edges go where is a keyed shuffle of the seed (not torch's generator), and a self-loop of the data is one
  entry of the message-passing graphs where PyG's undirected split lists it twice.
* :func:`negative_pairs` draws ``K`` negative pairs per positive by keyed hashing of (seed, split, epoch,
  positive, draw): the same pairs on every rank, algorithm and process count, whichever rank draws them.
* :func:`auc`, :func:`hits_at`, :func:`mrr`: ROC AUC (ties count half), OGB's Hits@K (a positive counts when it
  scores above the K-th best negative) and OGB's MRR (each positive ranked among its own negatives, ties at the
  mean of the optimistic and pessimistic rank).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import GridGnnError
from ..ops.hashing import chain
from .graph import Graph

#: draws of a negative pair while it is an edge or a self-loop; each fails with probability ``q`` (the share of the
#: ordered pairs that are edges or self-loops), refused above :data:`MAX_NEGATIVE_DENSITY`: at most 2⁻⁶⁴ per pair
NEGATIVE_ATTEMPTS = 64
#: the largest share of edges and self-loops among a graph's ordered pairs that negatives are drawn from
MAX_NEGATIVE_DENSITY = 0.5
_SPLIT_TAG = {"train": 1, "val": 2, "test": 3}


@dataclass
class LinkSplit:
    """A graph's edges split for link prediction.

    Attributes:
        train_graph: the message-passing graph of training and validation: the training edges only (both
            directions of an undirected edge), the node data of the input.
        test_graph: the message-passing graph of the test: training and validation edges.
        train, val, test: ``int64[2, E_s]`` positive pairs ``(source, destination)`` (an undirected edge once,
            as ``source ≤ destination``).
    """

    train_graph: Graph
    test_graph: Graph
    train: np.ndarray
    val: np.ndarray
    test: np.ndarray
    #: a dataset's own fixed negatives of validation and test (OGB's ``edge_neg``: ``int64[2, M]``, scored against
    #: every positive; ``target_node_neg``: ``int64[2, m·K]``, ``K`` per positive, positive-major), else ``None``
    #: (keyed negatives, :func:`negative_pairs`)
    val_neg: np.ndarray | None = None
    test_neg: np.ndarray | None = None
    #: ``K`` when the given negatives are ``K`` per positive (they then rank each positive: MRR), else ``None``
    neg_per_positive: int | None = None


@dataclass
class GivenLinkSplit:
    """A dataset's own link split (OGB ``ogbl-*``: ``split/<name>/{train,valid,test}.pt``), kept in
    ``Graph.meta["link_split"]`` by the loader: the positives of each split (``int64[2, E_s]``) and the fixed
    negatives of validation and test (see :class:`LinkSplit`). The graph's edges are the training edges."""

    train: np.ndarray
    val: np.ndarray
    test: np.ndarray
    val_neg: np.ndarray
    test_neg: np.ndarray
    neg_per_positive: int | None = None


def given_split(graph: Graph, given: GivenLinkSplit) -> LinkSplit:
    """The :class:`LinkSplit` of a dataset's own split: the graph (its training edges) passes messages for training,
    validation and test alike (OGB's protocol; ogbl-collab's optional use of the validation edges at test time is
    not taken)."""
    return LinkSplit(train_graph=graph, test_graph=graph, train=given.train, val=given.val, test=given.test,
                     val_neg=given.val_neg, test_neg=given.test_neg, neg_per_positive=given.neg_per_positive)


def _edges_once(graph: Graph) -> np.ndarray:
    """``int64[2, E]``: the graph's edges ``(source, destination)``, an undirected one once (``source ≤ dest``)."""
    src, dst = graph.edge_index()
    if not graph.directed:
        keep = src <= dst
        src, dst = src[keep], dst[keep]
    return np.stack([src, dst])


def _with_edges(graph: Graph, pairs: np.ndarray) -> Graph:
    """``graph``'s node data on the edges ``pairs`` (both directions when undirected); edge weights dropped."""
    src, dst = pairs
    if not graph.directed:
        loops = src == dst
        src, dst = np.concatenate([src, dst[~loops]]), np.concatenate([dst, src[~loops]])
    g = Graph.from_edges(src, dst, graph.n, directed=True, x=graph.x, y=graph.y, train_mask=graph.train_mask,
                         val_mask=graph.val_mask, test_mask=graph.test_mask, name=graph.name,
                         original_ids=graph.original_ids, meta=dict(graph.meta))  # the loader's notes (input pipeline)
    g.directed = graph.directed
    return g


def link_split(graph: Graph, val: float = 0.05, test: float = 0.1, *, seed: int = 0) -> LinkSplit:
    """Split ``graph``'s edges (see the module docstring); the order of the edges is a keyed shuffle of ``seed``."""
    if not (0 <= val < 1 and 0 <= test < 1 and val + test < 1):
        raise GridGnnError(f"link split fractions val={val:g}, test={test:g}: each in [0, 1) and together below 1")
    if graph.edge_attr is not None:
        raise GridGnnError("link prediction on a graph with edge features is not supported yet")
    if graph.edge_type_counts is not None:
        raise GridGnnError("link prediction on a graph with relation types (edge_type) is not supported yet (the "
                           "split does not carry them)")
    if graph.values is not None:
        raise GridGnnError("link prediction on a weighted graph is not supported yet (the split does not carry the "
                           "edge weights)")
    pairs = _edges_once(graph)
    e = pairs.shape[1]
    n_val, n_test = int(val * e), int(test * e)
    for name, frac, count in (("validation", val, n_val), ("test", test, n_test)):
        if frac > 0 and count == 0:  # (a split asked for and silently empty: no metric, no best epoch)
            least = math.ceil(1e4 / e) / 1e4  # four decimals, rounded up: int(least · e) >= 1
            raise GridGnnError(f"the {name} fraction {frac:g} of the graph's {e} edges is no edge (give at least "
                               f"{least:g}, or 0 for no {name} edges)")
    if e - n_val - n_test < 1:
        raise GridGnnError(f"the graph has {e} edges: nothing left to train on after {n_val} validation and "
                           f"{n_test} test edges")
    order = np.argsort(chain(int(seed), 0x4C494E4B, np.arange(e, dtype=np.uint64)), kind="stable")  # "LINK"
    v, t, tr = order[:n_val], order[n_val:n_val + n_test], order[n_val + n_test:]
    v, t, tr = np.sort(v), np.sort(t), np.sort(tr)
    train_graph = _with_edges(graph, pairs[:, tr])
    test_graph = _with_edges(graph, pairs[:, np.sort(np.concatenate([tr, v]))])
    if graph.meta.get("features") == "degree":  # the loader's degrees counted the held-out edges: recount them on
        from .loaders import degree_features  # the training edges, for both graphs (no test edge leaks in)

        x = degree_features(train_graph.indptr, train_graph.indices, train_graph.n)
        train_graph.x = test_graph.x = x
    return LinkSplit(train_graph=train_graph, test_graph=test_graph, train=pairs[:, tr], val=pairs[:, v],
                     test=pairs[:, t])


def negative_pairs(graph: Graph, count: int, k: int = 1, *, seed: int = 0, split: str = "train",
                   epoch: int = 0, first: int = 0) -> np.ndarray:
    r"""``int64[2, count · k]``: ``k`` negative pairs ``(source, destination)`` for each of the positives
    ``first … first + count − 1`` of ``split`` (:func:`negatives_of` those positives)."""
    return negatives_of(graph, np.arange(first, first + count, dtype=np.int64), k, seed=seed, split=split,
                        epoch=epoch)


def negatives_of(graph: Graph, positives: np.ndarray, k: int = 1, *, seed: int = 0, split: str = "train",
                 epoch: int = 0) -> np.ndarray:
    r"""``int64[2, len(positives) · k]``: ``k`` negative pairs ``(source, destination)`` for each positive of
    ``split`` whose index ``positives`` holds, in that order, drawn uniformly by keyed hashing, redrawn while a pair
    is an edge of ``graph`` or a self-loop (a graph whose edges and self-loops fill more than half of the ordered
    pairs is refused; :data:`NEGATIVE_ATTEMPTS` draws per pair). Pair ``j`` of positive
    ``i`` depends only on (seed, split, epoch, i, j): any rank can draw any positives' pairs, in any order (a
    full-graph rank its slice, a minibatch its shuffled positives)."""
    if split not in _SPLIT_TAG:
        raise GridGnnError(f"split must be one of {', '.join(_SPLIT_TAG)}, got {split!r}")
    n = graph.n
    if graph.nnz + n > MAX_NEGATIVE_DENSITY * n * n:  # (a bound first: each epoch's negatives pass here)
        loops = int(np.count_nonzero(graph.indices == np.repeat(np.arange(n), np.diff(graph.indptr))))
        if graph.nnz - loops + n > MAX_NEGATIVE_DENSITY * n * n:  # (every rank alike: the same graph)
            raise GridGnnError(f"link prediction draws negative pairs among the non-edges, but {graph.nnz - loops} "
                               f"edges and {n} self-loops fill more than half of the {n}² ordered pairs of this graph: "
                               "too dense")
    ids = np.asarray(positives, dtype=np.int64).astype(np.uint64)
    pos = np.repeat(ids, k)
    draw = np.tile(np.arange(k, dtype=np.uint64), ids.size)
    out = np.empty((2, pos.size), dtype=np.int64)
    todo = np.arange(pos.size)
    for attempt in range(NEGATIVE_ATTEMPTS):
        h = chain(int(seed), _SPLIT_TAG[split], int(epoch), pos[todo], draw[todo], attempt)
        a = (h % np.uint64(n)).astype(np.int64)
        b = (chain(h, 1) % np.uint64(n)).astype(np.int64)
        out[0, todo], out[1, todo] = a, b
        todo = todo[graph.find_edges(b, a)[1] | (a == b)]
        if todo.size == 0:
            return out
    raise GridGnnError(f"{todo.size} negative pairs were still edges or self-loops after {NEGATIVE_ATTEMPTS} draws "
                       f"each (the graph is too dense for negatives)")


def auc(pos: np.ndarray, neg: np.ndarray) -> float:
    """ROC AUC of positive scores against negative ones: the probability that a positive outscores a negative,
    ties counted half (Mann–Whitney; ``sklearn.metrics.roc_auc_score`` on labels 1/0)."""
    pos, neg = np.asarray(pos, np.float64).ravel(), np.asarray(neg, np.float64).ravel()
    if pos.size == 0 or neg.size == 0:
        raise GridGnnError("AUC needs positive and negative scores")
    allv = np.concatenate([pos, neg])
    order = np.argsort(allv, kind="stable")
    ranks = np.empty(allv.size, dtype=np.float64)
    sorted_v = allv[order]
    # average ranks of ties (1-based)
    starts = np.flatnonzero(np.concatenate([[True], sorted_v[1:] != sorted_v[:-1]]))
    ends = np.concatenate([starts[1:], [allv.size]])
    avg = (starts + ends - 1) / 2.0 + 1.0
    ranks[order] = np.repeat(avg, ends - starts)
    r_pos = ranks[:pos.size].sum()
    return float((r_pos - pos.size * (pos.size + 1) / 2.0) / (pos.size * neg.size))


def hits_at(pos: np.ndarray, neg: np.ndarray, k: int) -> float:
    """OGB's Hits@K (``ogbl-collab``, ``-ddi``, ``-ppa``): the fraction of positives scoring strictly above the
    ``k``-th highest negative score; ``1.0`` when there are fewer than ``k`` negatives."""
    pos, neg = np.asarray(pos, np.float64).ravel(), np.asarray(neg, np.float64).ravel()
    if pos.size == 0:
        raise GridGnnError("Hits@K needs positive scores")
    if neg.size < k:
        return 1.0
    kth = np.partition(neg, neg.size - k)[neg.size - k]
    return float((pos > kth).mean())


def hits_per_positive(pos: np.ndarray, neg: np.ndarray, k: int) -> float:
    """OGB's Hits@K of ``ogbl-citation2``: ``pos`` ``[m]``, ``neg`` ``[m, K]``; the fraction of positives whose rank
    among their own negatives (as in :func:`mrr`) is at most ``k``."""
    pos = np.asarray(pos, np.float64).reshape(-1, 1)
    neg = np.asarray(neg, np.float64)
    rank = 0.5 * ((neg > pos).sum(axis=1) + (neg >= pos).sum(axis=1)) + 1.0
    return float((rank <= k).mean())


def mrr(pos: np.ndarray, neg: np.ndarray) -> float:
    """OGB's MRR (``ogbl-citation2``): ``pos`` ``[m]``, ``neg`` ``[m, K]`` (each positive's own negatives); each
    positive's rank is the mean of its optimistic (ties above it) and pessimistic rank, plus one."""
    pos = np.asarray(pos, np.float64).reshape(-1, 1)
    neg = np.asarray(neg, np.float64)
    if neg.ndim != 2 or neg.shape[0] != pos.shape[0]:
        raise GridGnnError(f"MRR needs one row of negatives per positive: {pos.shape[0]} positives, negatives of "
                           f"shape {neg.shape}")
    optimistic = (neg > pos).sum(axis=1)
    pessimistic = (neg >= pos).sum(axis=1)
    rank = 0.5 * (optimistic + pessimistic) + 1.0
    return float((1.0 / rank).mean())
