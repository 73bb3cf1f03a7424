r"""Link prediction (``--task link``), full-graph on every algorithm and equal to serial training.

The edges are split once (:func:`gridgnn.graph.links.link_split`, PyG ``RandomLinkSplit`` semantics): the encoder
(any model; its last layer's output is the vertex embedding ``Z``) runs over the training graph, laid out by the
algorithm as for node classification; the validation pairs are scored on it and the test pairs on the test graph
(training and validation edges) on the same vertex layout. A pair ``(u, v)`` scores ``⟨z_u, z_v⟩``.

Which rank scores what: the positives of a split are cut into ``P`` contiguous slices, rank ``r`` scores slice
``r`` and the ``K`` negatives of each of its positives (:func:`~gridgnn.graph.links.negative_pairs` draws any
slice alike: keyed by seed, split, epoch, positive and draw), fetching the endpoints' rows from their holders
(:mod:`gridgnn.parallel.pairs`). The loss is binary cross-entropy summed over a rank's pairs and divided by the
number of pairs of all ranks, so the ranks' losses add up to the serial mean and the gradients to the serial ones.
The metrics (AUC, OGB's Hits@K and MRR) are computed from every rank's scores, gathered (phase ``metrics``).
"""
from __future__ import annotations


import numpy as np
import torch
import torch.nn.functional as F

from ..errors import GridGnnError
from ..graph.links import LinkSplit, auc, given_split, hits_at, hits_per_positive, link_split, mrr, negative_pairs
from ..graph.pipeline import console_lines
from ..graph.spec import load_graph
from ..nn.decoders import make_decoder
from ..parallel.pairs import RowDirectory, fetch_rows
from ..parallel.source import InMemorySource
from .loop import fmt
from .rank_layout import build_rank
from .startup import StartupClock
from .step import allreduce_grads
from .data_checks import unlabelled, with_feature_norm
from .graphed import GraphedStep
from .rank_setup import build_model, setup_rank


def slice_bounds(count: int, parts: int, part: int) -> tuple[int, int]:
    """Part ``part`` of ``parts`` contiguous, near-equal slices of ``count`` items."""
    return count * part // parts, count * (part + 1) // parts


def split_pieces(split: LinkSplit, name: str, spans: list[tuple[int, int]], k: int):
    """Split ``name``'s pairs cut into pieces: ``spans`` of its positives (contiguous, in order, covering them) and
    the span of the negatives that go with each — ``K`` per positive, positive-major, for keyed negatives (``k``) or
    a dataset's ``K`` per positive; a dataset's negatives scored against every positive cut in as many near-equal
    spans. Returns the negatives' spans and the negatives per positive (``None``: against every positive)."""
    given = getattr(split, f"{name}_neg")
    per = k if given is None else split.neg_per_positive
    if per is None:
        return [slice_bounds(given.shape[1], len(spans), t) for t in range(len(spans))], None
    return [(a * per, b * per) for a, b in spans], per


def piece_pairs(split: LinkSplit, full, name: str, pos_span: tuple[int, int], neg_span: tuple[int, int], k: int,
                seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The positives and negatives of one piece of split ``name`` (:func:`split_pieces`): keyed negatives drawn
    for its positives (avoiding the edges of ``full``), a dataset's sliced."""
    (a, b), (c, d) = pos_span, neg_span
    given = getattr(split, f"{name}_neg")
    neg = negative_pairs(full, b - a, k, seed=seed, split=name, first=a) if given is None else given[:, c:d]
    return getattr(split, name)[:, a:b], neg


def link_dims(cfg, num_features: int) -> list[int]:
    """The encoder's widths: the features, ``--hidden`` per layer but the last, ``--embedding-dim``."""
    return [num_features] + [cfg.hidden] * (cfg.layers - 1) + [cfg.model_embedding_dim]


class LinkPairs:
    r"""The pairs one rank scores and what it knows of all ranks' pairs.

    Args:
        full: the loaded graph (its edges are avoided by the validation and test negatives, as by PyG's split).
        split: its :class:`~gridgnn.graph.links.LinkSplit`.
        negatives: ``K``, negative pairs per positive; ``seed``: keys the negatives.
        world, me: the number of scoring ranks and this one's index.
    """

    def __init__(self, full, split: LinkSplit, *, negatives: int, seed: int, world: int, me: int):
        self.split, self.k, self.seed = split, int(negatives), int(seed)
        self.world, self.me = int(world), int(me)
        self.fixed, self.groups, self._counts = {}, {}, {}
        for name in ("val", "test"):
            e = getattr(split, name).shape[1]
            spans = [slice_bounds(e, world, r) for r in range(world)]
            nspans, self.groups[name] = split_pieces(split, name, spans, self.k)
            self.fixed[name] = piece_pairs(split, full, name, spans[me], nspans[me], self.k, self.seed)
            self._counts[name] = [(b - a, d - c) for (a, b), (c, d) in zip(spans, nspans)]

    def counts(self, name: str) -> list[tuple[int, int]]:
        """Positives and negatives of split ``name`` on each rank."""
        return self._counts[name]

    def train(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """This rank's training positives and their ``K`` fresh negatives of ``epoch``."""
        e = self.split.train.shape[1]
        lo, hi = slice_bounds(e, self.world, self.me)
        neg = negative_pairs(self.split.train_graph, hi - lo, self.k, seed=self.seed, split="train", epoch=epoch,
                             first=lo)
        return self.split.train[:, lo:hi], neg

    def train_wants(self, epoch: int) -> np.ndarray:
        """The vertices whose rows this rank fetches to score its training pairs of ``epoch`` (sorted, unique)."""
        return np.unique(np.concatenate(self.train(epoch), axis=1).reshape(-1))

    @property
    def train_total(self) -> int:
        """Training pairs of all ranks in one epoch (the loss's divisor)."""
        return self.split.train.shape[1] * (1 + self.k)


def local_rows(directory: RowDirectory, pos: np.ndarray, neg: np.ndarray, device) -> torch.Tensor:
    """One process: the rows of the embeddings that hold the endpoints of the pairs ``pos`` then ``neg``
    (``int64[2, m]`` on ``device``)."""
    return torch.from_numpy(directory.my_row[np.concatenate([pos, neg], axis=1)]).to(device)


def scored_rows(z: torch.Tensor, rows: torch.Tensor, decoder, positives: int) -> tuple[torch.Tensor, torch.Tensor]:
    """One process: the ``decoder``'s scores of the pairs whose endpoints are the rows ``rows`` (:func:`local_rows`)
    of ``z``, split into the first ``positives`` and the rest."""
    s = decoder(z[rows[0]], z[rows[1]])
    return s[:positives], s[positives:]


def pair_scores(z: torch.Tensor, directory: RowDirectory, pos: np.ndarray, neg: np.ndarray, decoder, *,
                phase: str = "decode") -> tuple[torch.Tensor, torch.Tensor]:
    """The ``decoder``'s scores of this rank's positive and negative pairs (``int64[2, m]`` each), the endpoints'
    rows fetched from their holders (collective; one process: :func:`scored_rows`)."""
    if directory.world == 1:
        return scored_rows(z, local_rows(directory, pos, neg, z.device), decoder, pos.shape[1])
    pairs = np.concatenate([pos, neg], axis=1)
    want, inv = np.unique(pairs.reshape(-1), return_inverse=True)
    rows = fetch_rows(z, directory, want, phase=phase)
    inv = torch.from_numpy(inv.reshape(2, -1)).to(z.device)
    s = decoder(rows[inv[0]], rows[inv[1]])
    return s[:pos.shape[1]], s[pos.shape[1]:]


def link_loss(pos: torch.Tensor, neg: torch.Tensor, total: int) -> torch.Tensor:
    """Binary cross-entropy with logits of this rank's pairs, summed and divided by ``total`` (all ranks' pairs)."""
    s = torch.cat([pos, neg])
    y = torch.cat([torch.ones_like(pos), torch.zeros_like(neg)])
    return F.binary_cross_entropy_with_logits(s, y, reduction="sum") / total


def link_forward_backward(model, plan, comm, data, directory: RowDirectory, pairs: LinkPairs, decoder, *,
                          epoch: int):
    """One training step of link prediction on this rank (the caller steps the optimizer): the encoder's forward
    (phase ``fwd``), this rank's pairs scored (``decode``), the backward (``bwd``, the rows' gradients sent back in
    ``decode_bwd``) and the gradient sums (``grad``: the encoder's over its gradient axes, the decoder's over every
    rank). Returns the local loss summand and the embeddings."""
    pos, neg = pairs.train(epoch)
    return link_step(model, plan, comm, data, decoder, lambda z: pair_scores(z, directory, pos, neg, decoder),
                     pairs.train_total, epoch=epoch)


def link_step(model, plan, comm, data, decoder, score, total: int, *, epoch):
    """:func:`link_forward_backward` with the pairs scored by ``score(z)`` (``(positives' scores, negatives')``) and
    the loss divided by ``total``; ``epoch`` an int or a 0-d device tensor (``--cuda-graph``)."""
    model.train()
    model.epoch = epoch
    with comm.phase("fwd"):
        z = model(data.x, plan)
    loss = link_loss(*score(z), total)
    with comm.phase("bwd"):
        loss.backward()
    allreduce_grads(model, comm, plan.grad_axes)
    allreduce_grads(decoder, comm, tuple(comm.grid.names))
    return loss.detach(), z.detach()


@torch.no_grad()
def split_scores(model, plan, comm, data, directory: RowDirectory, pairs: LinkPairs, decoder, name: str,
                 rows: torch.Tensor | None = None):
    """Eval-mode scores of this rank's pairs of split ``name`` (phase ``eval``); ``rows``: their
    :func:`local_rows` on one process, made once (``--cuda-graph``)."""
    model.eval()
    with comm.phase("eval"):
        z = model(data.x, plan)
    pos, neg = pairs.fixed[name]
    if rows is not None:
        return scored_rows(z, rows, decoder, pos.shape[1])
    return pair_scores(z, directory, pos, neg, decoder, phase="eval")


def gathered_metrics(comm, pairs: LinkPairs, name: str, pos: torch.Tensor, neg: torch.Tensor, hits_k: int) -> dict:
    """AUC, Hits@K and MRR of split ``name`` from every rank's scores (gathered on every rank, phase
    ``metrics``)."""
    mine = torch.cat([pos, neg]).double().reshape(-1, 1)
    counts = pairs.counts(name)
    if pairs.world > 1:
        with comm.phase("metrics"):
            blocks = comm.all_gather_rows(mine.to(comm.wire_device()), tuple(comm.grid.names),
                                          rows=[a + b for a, b in counts])
    else:
        blocks = [mine]
    all_pos, all_neg = [], []
    for (c, _), b in zip(counts, blocks):
        b = b.reshape(-1).cpu().numpy()
        all_pos.append(b[:c])
        all_neg.append(b[c:])
    return split_metrics(np.concatenate(all_pos), np.concatenate(all_neg), per_positive=pairs.groups[name],
                         own=pairs.split.neg_per_positive is not None, hits_k=hits_k)


def split_metrics(pos: np.ndarray, neg: np.ndarray, *, per_positive: int | None, own: bool, hits_k: int) -> dict:
    """AUC, Hits@K and MRR of a split's scores, ``pos`` of its positives and ``neg`` of its negatives in their
    order (``per_positive``: ``K`` negatives per positive, positive-major; ``None``: every negative against every
    positive, no MRR; ``own``: the dataset's own ``K`` per positive, ogbl-citation2, whose Hits@K ranks a positive
    among its own negatives)."""
    if pos.size == 0 or neg.size == 0:
        return {"auc": None, "hits": None, "mrr": None}
    k = per_positive
    if hits_k >= hits_ceiling(neg.size, k if own else None):  # 1.0 whatever the scores: no metric
        hits = None
    else:
        hits = hits_per_positive(pos, neg.reshape(-1, k), hits_k) if own else hits_at(pos, neg, hits_k)
    return {"auc": auc(pos, neg), "hits": hits, "mrr": None if k is None else mrr(pos, neg.reshape(-1, k))}


def hits_ceiling(negatives: int, own_per_positive: int | None) -> int:
    """The smallest K at which Hits@K is 1.0 whatever the scores: past the split's ``negatives`` (OGB's Hits@K
    over all of them), or past ``K`` for a positive ranked among its own ``K`` negatives (ogbl-citation2; its
    rank is at most ``K + 1``)."""
    return own_per_positive + 1 if own_per_positive is not None else negatives + 1


def check_hits_k(cfg, split: LinkSplit, own: bool) -> None:
    """``--hits-k`` given at or past a validated split's :func:`hits_ceiling` is refused: its Hits@K would be 1.0
    whatever the model (left out, the default's Hits@K of such a split is reported as none — unless Hits@K picks
    the best epoch, on a dataset's own split: then the default is refused too); given where no split holds
    positives, it is refused as measuring nothing."""
    picks = own and selected_metric(split, own) == "val_hits"
    if cfg.hits_k is None and not picks:
        return
    if cfg.hits_k is not None and split.val.shape[1] == 0 and split.test.shape[1] == 0:
        raise GridGnnError(f"--hits-k {cfg.hits_k} measures the validation and test edges; --link-split "
                           f"{cfg.link_split} holds none")
    for name in ("val", "test") if cfg.hits_k is not None else ("val",):
        positives = getattr(split, name).shape[1]
        if positives == 0:
            continue
        given = getattr(split, f"{name}_neg")
        per = split.neg_per_positive if own else None
        negatives = positives * cfg.model_negatives if given is None else given.shape[1]
        ceiling = hits_ceiling(negatives, per)
        if cfg.model_hits_k >= ceiling:
            held = f"ranks each positive among its own {per} negatives" if per is not None else \
                f"holds {negatives} negative pairs"
            what = f"--hits-k {cfg.hits_k}" if cfg.hits_k is not None else \
                f"{cfg.data}'s own split picks the best epoch by Hits@{cfg.model_hits_k} (the default K)"
            raise GridGnnError(f"{what}: the {'validation' if name == 'val' else 'test'} split {held}, so "
                               f"Hits@{cfg.model_hits_k} is 1.0 whatever the scores (give --hits-k {ceiling - 1} "
                               f"or less{'' if own else ', or more --negatives'})")


def split_for_run(cfg, full) -> tuple[LinkSplit, bool]:
    """The edge split a ``--task link`` run trains on: the dataset's own (OGB ogbl-*; ``--link-split`` refused)
    or ``--link-split``'s random one; and whether it is the dataset's own. A ``--hits-k`` it cannot measure is
    refused (:func:`check_hits_k`)."""
    given = full.meta.get("link_split")
    if given is None:
        _, val, test = cfg.model_link_split
        split, own = link_split(full, val, test, seed=cfg.seed), False
    else:
        if cfg.link_split is not None:
            raise GridGnnError(f"--link-split: {cfg.data} holds its own link split "
                               f"(split/{full.meta.get('ogb_split')}); drop --link-split")
        split, own = given_split(full, given), True
    check_hits_k(cfg, split, own)
    return split, own


def selected_metric(split: LinkSplit, own: bool) -> str:
    """The validation metric that picks the best epoch: the AUC for a random split; OGB's for a dataset's own split
    (MRR with negatives per positive, else Hits@K)."""
    if not own:
        return "val_auc"
    return "val_mrr" if split.neg_per_positive is not None else "val_hits"


def link_metric_fields(got: dict) -> dict:
    """An epoch record's link metrics from ``{"val": metrics, "test": metrics}`` (:func:`split_metrics`)."""
    return {f"{name}_{m}": got[name][m] for m in ("auc", "hits", "mrr") for name in ("val", "test")}


def link_input_notes(meta: dict) -> list[str]:
    """The loader's silent choices worth a console line for link prediction (a default split of the labelled
    vertices is not one: link prediction splits the edges)."""
    return console_lines({k: v for k, v in (meta or {}).items() if k != "split_default"})


class LinkReport:
    """Link prediction, whatever its batch source: the loss and the AUCs per epoch, the dataset's own split named in
    the summary (``own``, ``full_meta``: the loaded graph's meta), the test metrics at the best epoch last."""

    def line(self, r: dict) -> str:
        return f"loss {r['loss']:.4f} | AUC val {fmt(r['val_auc'], '.4f')} test {fmt(r['test_auc'], '.4f')}"

    def summary_fields(self) -> dict:
        return own_split_field(self.full_meta, self.own)

    def final(self, summary: dict) -> str:
        return final_metrics(self.cfg, summary)


def own_split_field(meta: dict, own: bool) -> dict:
    """The summary's ``link_split`` of a dataset's own split (``meta``: the loaded graph's; a random split's is the
    config's fractions)."""
    return {"link_split": f"the dataset's: split/{meta.get('ogb_split')}"} if own else {}


def final_metrics(cfg, summary: dict) -> str:
    """The start of a link run's last line: its test metrics at the best epoch."""
    return (f"final: test AUC={fmt(summary['test_auc'], '.4f')} val AUC={fmt(summary['val_auc'], '.4f')} "
            f"Hits@{cfg.model_hits_k}={fmt(summary['test_hits'], '.4f')} MRR={fmt(summary['test_mrr'], '.4f')} "
            f"(best epoch {summary['best_epoch']})")


class LinkTask(LinkReport):
    r"""Link prediction on the whole graph, the task :func:`~gridgnn.train.worker.train_worker` runs for
    ``--task link``: the split (before any collective, on every rank alike), the training graph laid out as node
    classification lays a graph out (:func:`~gridgnn.train.rank_setup.setup_rank`) and the test graph on the same
    vertex layout, the directory of the embeddings' holders, the pairs of this rank and the decoder (its parameters
    held whole on every rank, their gradients summed over all)."""

    def __init__(self, ctx, cfg, graph):
        self.cfg = cfg
        clock = StartupClock.on_rank(ctx)
        full = load_graph(cfg.data if graph is None else graph, seed=cfg.seed)  # every rank alike, before any collective
        self.split, self.own = split_for_run(cfg, full)
        clock.lap("split")
        self.full_meta = full.meta
        dims = link_dims(cfg, full.num_features)
        self.rs = rs = setup_rank(ctx, cfg, self.split.train_graph, dims=dims, clock=clock)
        comm = rs.comm
        test_graph = with_feature_norm(unlabelled(self.split.test_graph), cfg)  # labels are not read
        source = None if rs.source is None else InMemorySource(test_graph, rs.source.perm_r, rs.source.perm_c,
                                                               method=rs.source.method)
        self.plan_t, self.data_t = build_rank(test_graph, cfg.algo, comm, dims, source=source, rows=rs.rows,
                                              dtype=rs.dtype, device=rs.device, block_rows=cfg.blocked_aggregation,
                                              model=lambda p: build_model(cfg, dims, p, torch.float64))
        self.directory = RowDirectory(comm, rs.data.node_ids, rs.plan.out_cols(dims[-1]), dims[-1], full.n)
        # the set-up's bytes: the training graph's plan (setup_rank's log), the test graph's and the directory
        self.setup_bytes = sum(v.sent for v in rs.setup_log.values()) + sum(v.sent for v in comm.log.snapshot().values())
        comm.log.reset()
        self.pairs = LinkPairs(full, self.split, negatives=cfg.model_negatives, seed=cfg.seed,
                               world=self.directory.world, me=self.directory.me)
        clock.lap("build")  # the test graph's plan, the directory, the pairs
        self.decoder = make_decoder(cfg.model_decoder, dims[-1], seed=cfg.seed, dtype=rs.dtype).to(rs.device)
        self.parameters = list(self.decoder.parameters())
        self.replicated = {"decoder": self.parameters} if self.parameters else {}
        # the summary reports the graph as loaded; a checkpoint records the graph the encoder trains on (the split's
        # training graph: --resume checks it)
        self.info = {**rs.info, "data": cfg.data if graph is None else rs.info.get("data"), "nnz": full.nnz,
                     "input_notes": link_input_notes(self.split.train_graph.meta)}
        self.checkpoint_info = {**self.info, "nnz": rs.info["nnz"]}
        self.select = selected_metric(self.split, self.own)
        # --cuda-graph (one process): the fixed pairs' rows made once, the training pairs' rows written into one
        # device tensor before each replay, the step and the evaluation recorded after their eager epochs
        self.fixed_rows = {name: local_rows(self.directory, *self.pairs.fixed[name], rs.device) if cfg.cuda_graph
                           else None for name in ("val", "test")}
        self.graphed = self.train_rows = None
        if cfg.cuda_graph:  # (one process scores every training pair: as many at every epoch)
            positives, total = self.split.train.shape[1], self.pairs.train_total
            self.train_rows = torch.empty((2, total), dtype=torch.int64, device=rs.device)
            self.graphed = GraphedStep(
                lambda e: link_step(rs.model, rs.plan, comm, rs.data, self.decoder,
                                    lambda z: scored_rows(z, self.train_rows, self.decoder, positives), total,
                                    epoch=e)[0],
                [*rs.model.parameters(), *self.parameters], rs.device, evaluation=lambda: self._scores(rs.model))

    def train_step(self, model, epoch: int) -> torch.Tensor:
        rs = self.rs
        if self.graphed is not None:
            self.train_rows.copy_(local_rows(self.directory, *self.pairs.train(epoch), "cpu"))
            return self.graphed(epoch)
        loss, _ = link_forward_backward(model, rs.plan, rs.comm, rs.data, self.directory, self.pairs, self.decoder,
                                        epoch=epoch)
        return loss

    def _scores(self, model) -> dict:
        """``{split: (its positives' scores, its negatives')}`` of this rank: the validation pairs scored on the
        training graph, the test pairs on the test graph."""
        rs = self.rs
        return {name: split_scores(model, p, rs.comm, d, self.directory, self.pairs, self.decoder, name,
                                   rows=self.fixed_rows[name])
                for name, p, d in (("val", rs.plan, rs.data), ("test", self.plan_t, self.data_t))}

    def evaluate(self, model, epoch: int):
        """The validation and test pairs' scores (:meth:`_scores`), their metrics from every rank's scores
        (gathered: nothing left for the loop to sum)."""
        rs = self.rs
        scores = self.graphed.evaluate() if self.graphed is not None else self._scores(model)
        got = {name: gathered_metrics(rs.comm, self.pairs, name, *scores[name], self.cfg.model_hits_k)
               for name in ("val", "test")}
        metrics = {"train_acc": None, "val_acc": None, "test_acc": None, **link_metric_fields(got),
                   "select": self.select}
        return [], lambda vec: (float(vec[0]), metrics, None)

    def logits(self, model):
        """No logits: a link model's outputs are embeddings (``--save-logits`` is refused with ``--task link``)."""
        return None
