r"""Link prediction on sampled minibatches (``--task link --sampler sage|ladies``): the task the minibatch loop
(:mod:`gridgnn.train.minibatch`) runs for ``--task link``, equal to the full-graph link model
(:mod:`gridgnn.train.link`) when every neighbour is sampled.

* **split**: the edges are split as for full-graph link prediction (:func:`~gridgnn.train.link.split_for_run`);
  the encoder trains on the training graph and the validation pairs are scored on it, the test pairs on the test
  graph (training and validation edges), each sampled on its own graph from the same feature blocks.
* **training minibatches**: the training positives in a keyed random order of (seed, epoch), cut into minibatches
  of ``--batch-size`` positives (PyG's ``LinkNeighborLoader`` counts its batches so); each positive brings its
  ``--negatives`` ``K`` negatives, keyed by (seed, epoch, positive, draw) as the full-graph run draws them
  (:func:`~gridgnn.graph.links.negatives_of`). A minibatch's output vertices are its pairs' endpoints; the sampler
  samples their neighbourhoods on the training graph.
* **loss**: binary cross-entropy summed over a step's pairs of every rank and divided by their number: a step is
  one optimizer update on the union of the step's minibatches, and with one step per epoch (a batch of every
  positive) the full-graph step.
* **evaluation**: every split's positives in chunks of ``--eval-batch-size`` with their negatives (the same pairs as
  the full-graph run's), sampled with ``--eval-fanout`` (default every neighbour: exact); the scores go to every rank
  (phase ``metrics``) and the metrics are computed from all of them in the split's order.
"""
from __future__ import annotations

from collections import defaultdict

import dataclasses

import numpy as np
import torch

from ..graph.links import negatives_of
from ..graph.pipeline import pipeline_record
from ..nn.decoders import make_decoder
from ..sampling import minibatches
from .link import (LinkReport, link_dims, link_input_notes, link_loss, link_metric_fields, piece_pairs,
                   selected_metric, split_for_run, split_metrics, split_pieces)
from .data_checks import check_inference_data, unlabelled, with_feature_norm


class _Endpoints:
    """The minibatches of pairs of one pass, as the pipeline indexes them: the output vertices of minibatch ``t``
    (its pairs' sorted endpoints), its pairs drawn (``pairs_of(t)`` → ``(positives, negatives)``) where it is first
    indexed — when it is sampled — and kept for its scoring (:meth:`pairs`)."""

    def __init__(self, count: int, pairs_of):
        self.count, self.pairs_of, self.drawn = count, pairs_of, {}

    def __len__(self) -> int:
        return self.count

    def pairs(self, t: int) -> tuple[np.ndarray, np.ndarray]:
        if t not in self.drawn:
            self.drawn[t] = self.pairs_of(t)
        return self.drawn[t]

    def __getitem__(self, t: int) -> np.ndarray:
        return np.unique(np.concatenate(self.pairs(t), axis=1))


def rows_of(plan, pairs: np.ndarray) -> torch.Tensor:
    """The rows of a minibatch's outputs (``plan.out_rows()``) that hold each endpoint of ``pairs``."""
    out = np.asarray(plan.out_rows())
    order = np.argsort(out, kind="stable")
    return torch.from_numpy(order[np.searchsorted(out[order], pairs)])


class LinkSamples(LinkReport):
    r"""``--task link`` on sampled minibatches: the task interface of
    :class:`~gridgnn.train.minibatch.NodeSamples`. ``loaded``: the graph as loaded (its edges are what the
    validation and test negatives avoid; no rank keeps its features beyond its own block once started)."""

    task = "link"

    def __init__(self, cfg, loaded, world: int, *, owned: bool, data: str):
        self.cfg = cfg
        split, self.own = split_for_run(cfg, loaded)
        self.full = loaded.with_(x=None)
        self.full_meta = loaded.meta
        self.summary_size = (loaded.n, loaded.nnz)  # the graph as loaded, as a full-graph link run reports it
        train = split.train_graph
        self.dims = link_dims(cfg, train.num_features)
        check_inference_data(train.n, train.num_features, self.dims, world // cfg.replication,
                             degree=train.meta.get("features") == "degree")
        # the split's graphs share the features (the loaded ones, or the training edges' degrees): normalized once
        self.graph = with_feature_norm(unlabelled(train), cfg, owned=owned)
        self.test_graph = unlabelled(split.test_graph).with_(x=self.graph.x)
        self.split = dataclasses.replace(split, train_graph=train.with_(x=None),
                                         test_graph=split.test_graph.with_(x=None))
        self.info = {"n": train.n, "nnz": train.nnz, "f": train.num_features, "classes": self.dims[-1],
                     "data": data, "input_pipeline": pipeline_record(train.meta, cfg.feature_norm_for(train.meta))}
        self.input_notes = link_input_notes(train.meta)
        self.k = cfg.model_negatives
        self.select = selected_metric(self.split, self.own)
        self.parameters, self.replicated = [], {}
        self.evaluation = {name: self._pieces(name) for name in ("val", "test")}

    def start(self, comm, pipe, model) -> None:
        """After the process group: the test graph's pipeline on this rank's feature block, the decoder; from now on
        no graph of the task holds features."""
        cfg = self.cfg
        self.comm, self.pipe, self.model = comm, pipe, model
        self.test_pipe = pipe.on(self.test_graph)
        self.decoder = make_decoder(cfg.model_decoder, self.dims[-1], seed=cfg.seed, dtype=pipe.dtype).to(pipe.device)
        self.parameters = list(self.decoder.parameters())
        self.replicated = {"decoder": self.parameters} if self.parameters else {}
        self.graph, self.test_graph = self.graph.with_(x=None), self.test_graph.with_(x=None)

    # ------------------------------------------------------------------------------------------- training
    def train_batches(self, epoch: int):
        """The epoch's minibatches of training positives in a keyed order (their endpoints, their pairs drawn as
        they are sampled) and the pairs each scores."""
        positives = np.arange(self.split.train.shape[1], dtype=np.int64)
        order = minibatches(positives, self.cfg.model_batch_size, seed=self.cfg.seed, epoch=epoch)

        def pairs_of(t):
            return self.split.train[:, order[t]], negatives_of(self.split.train_graph, order[t], self.k,
                                                                seed=self.cfg.seed, split="train", epoch=epoch)

        self.batches = _Endpoints(len(order), pairs_of)
        return self.batches, [len(b) * (1 + self.k) for b in order]

    def num_train_batches(self) -> int:
        return -(-self.split.train.shape[1] // self.cfg.model_batch_size)

    def train_loss(self, out, plan, t: int, epoch: int):
        """Binary cross-entropy summed over minibatch ``t``'s pairs (no accuracy), and their number."""
        sp, sn = self._scores(out, plan, *self.batches.pairs(t))
        return link_loss(sp, sn, 1), None, len(sp) + len(sn)

    def _scores(self, out, plan, pos: np.ndarray, neg: np.ndarray):
        rows = rows_of(plan, np.concatenate([pos, neg], axis=1)).to(out.device)
        s = self.decoder(out[rows[0]], out[rows[1]])
        return s[:pos.shape[1]], s[pos.shape[1]:]

    def train_metrics(self, correct, targets) -> dict:
        return {"train_acc": None, "val_acc": None, "test_acc": None}

    # ----------------------------------------------------------------------------------------- evaluation
    def _pieces(self, name: str):
        """Split ``name`` in chunks of ``--eval-batch-size`` positives with their negatives
        (:func:`~gridgnn.train.link.split_pieces`): the chunks (their pairs kept once drawn: a rank draws the same
        chunks every epoch), each chunk's number of pairs, and the negatives per positive."""
        e = getattr(self.split, name).shape[1]
        size = self.cfg.model_eval_batch_size
        spans = [(a, min(a + size, e)) for a in range(0, e, size)]
        nspans, per = split_pieces(self.split, name, spans, self.k)
        chunks = _Endpoints(len(spans), lambda t: piece_pairs(self.split, self.full, name, spans[t], nspans[t],
                                                                self.k, self.cfg.seed))
        return chunks, [(b - a) + (d - c) for (a, b), (c, d) in zip(spans, nspans)], [b - a for a, b in spans], per

    def evaluate(self, epoch: int):
        """Every split's pairs scored (phase ``eval``), the scores of all ranks gathered on every rank (``metrics``),
        and the split's AUC, Hits@K and MRR; nothing for the loop to sum."""
        got = {name: self._split_metrics(name, pipe, epoch) for name, pipe in (("val", self.pipe),
                                                                                ("test", self.test_pipe))}
        metrics = {**link_metric_fields(got), "select": self.select}
        return [], lambda vec: metrics

    def _split_metrics(self, name: str, pipe, epoch: int) -> dict:
        chunks, sizes, positives, per = self.evaluation[name]
        mine = []

        def score(plan, x, t, n_step, step):
            if plan is None:
                return
            self.model.eval()
            with torch.no_grad():
                mine.append(torch.cat(self._scores(self.model(x, plan), plan, *chunks.pairs(t))))

        steps = pipe.run(chunks, fanouts=pipe.eval_fanouts, epoch=epoch, step0=0, step_fn=score,
                         stats=defaultdict(float), fetch_phase="eval", sizes=sizes)
        scored = self._gathered(steps, sizes, mine)
        pos = np.concatenate([s[:m] for s, m in zip(scored, positives)]) if scored else np.zeros(0)
        neg = np.concatenate([s[m:] for s, m in zip(scored, positives)]) if scored else np.zeros(0)
        return split_metrics(pos, neg, per_positive=per, own=self.split.neg_per_positive is not None,
                             hits_k=self.cfg.model_hits_k)

    def _gathered(self, steps, sizes, mine) -> list[np.ndarray]:
        """Each chunk's scores (positives first), from the ranks that scored them in the pass's ``steps``."""
        if not sizes:
            return []
        comm, world = self.comm, self.comm.grid.world_size
        scored_by = [[t for _, _, ids in steps if ids[r] >= 0 for t in (ids[r],)] for r in range(world)]
        local = (torch.cat(mine) if mine else torch.zeros(0)).double().reshape(-1, 1)
        if world > 1:
            with comm.phase("metrics"):
                blocks = comm.all_gather_rows(local.to(comm.wire_device()), tuple(comm.grid.names),
                                              rows=[sum(sizes[t] for t in ts) for ts in scored_by])
        else:
            blocks = [local]
        out = [None] * len(sizes)
        for ts, block in zip(scored_by, blocks):
            block = block.reshape(-1).cpu().numpy()
            at = 0
            for t in ts:
                out[t] = block[at:at + sizes[t]]
                at += sizes[t]
        return out
