r"""``summary.json``: one schema for every task and batch source (:data:`SUMMARY_KEYS`, in order), of which a run's
summary holds the keys that apply to it (:func:`summary_keys`: the common ones, its task's — node classification's
accuracies or link prediction's metrics — and its batch source's — the full graph's layout or the minibatches'),
built by :func:`run_summary` from what every loop has — the epoch records, every rank's per-phase communication,
the config — plus the loop's own values. A value is ``null`` where the run has none: the accuracy of an empty
split, a model option the model does not take, no narrowed wire (``comm_wire``), a run that was not resumed.

Bytes are *moved* bytes: per collective the larger of the totals received and sent over all ranks (the receivers'
for a broadcast, the senders' for its adjoint, a reduce; equal for all-reduce, all-gather, all-to-allv), per epoch,
as whole numbers when every epoch moved the same bytes.
"""
from __future__ import annotations

import statistics
from collections import defaultdict

#: Every key a summary may hold, in order (a run's summary: those of :func:`summary_keys`). ``algo`` is
#: ``"minibatch"`` for a sampled run (its grid is the P/c x c grid of the sampler). ``input_pipeline`` is the record
#: ``model.pt`` holds (:mod:`gridgnn.graph.pipeline`: the feature normalization the
#: run resolved, degree features, the default split, the duplicate-edge rule); ``feature_norm`` the resolved one.
SUMMARY_KEYS = (
    # accuracy (at the best validation epoch) and time
    "test_acc", "val_acc", "best_epoch", "train_acc", "final_loss", "epoch_time_median_s", "eval_time_median_s",
    # the parameters handed on (model.pt, --save-logits, the Python API's model): --keep, and whose epoch they are
    "keep", "model_epoch",
    # link prediction (--task link; a node-classification summary has none): at the best validation AUC's epoch
    "task", "test_auc", "val_auc", "test_hits", "val_hits", "hits_k", "test_mrr", "val_mrr", "negatives",
    "link_split", "decoder",
    # communication per epoch
    "comm_bytes_per_epoch", "comm_sent_bytes_per_epoch", "max_rank_send_bytes_per_epoch",
    "max_rank_recv_bytes_per_epoch", "setup_comm_bytes", "nnz_max_over_mean", "comm_wire",
    # minibatches (a full-graph summary has none; it has setup_comm_bytes ... comm_wire and the memory estimate)
    "minibatches_per_epoch", "minibatches_per_s", "sampling_s", "fetch_s", "compute_s", "sampling_bytes_per_epoch",
    "fetch_bytes_per_epoch", "sampler", "fanout", "eval_fanout", "batch_size", "eval_batch_size", "bulk",
    "sample_graph",
    # the run
    "algo", "grid", "nproc", "grid_axes", "blocked_aggregation", "replication", "partition", "seed", "model",
    "heads", "aggr", "layers", "hidden", "epochs", "epochs_trained", "early_stop", "feature_norm", "dtype", "data",
    "n", "nnz", "estimated_peak_memory_bytes", "peak_memory_bytes", "devices", "wall_time_s", "startup_s", "checkpoint_every",
    "resumed_from_epoch", "input_pipeline", "config",
)


#: The keys only a task's summaries hold (the rest of :data:`SUMMARY_KEYS` is common but for :data:`SOURCE_KEYS`).
TASK_KEYS = {"node": ("test_acc", "val_acc", "train_acc"),
             "link": ("test_auc", "val_auc", "test_hits", "val_hits", "hits_k", "test_mrr", "val_mrr", "negatives",
                      "link_split", "decoder")}
#: The keys only a batch source's summaries hold: the full graph laid out on the ranks, or sampled minibatches.
SOURCE_KEYS = {"full-graph": ("setup_comm_bytes", "nnz_max_over_mean", "comm_wire", "estimated_peak_memory_bytes"),
               "minibatch": ("minibatches_per_epoch", "minibatches_per_s", "sampling_s", "fetch_s", "compute_s",
                             "sampling_bytes_per_epoch", "fetch_bytes_per_epoch", "sampler", "fanout", "eval_fanout",
                             "batch_size", "eval_batch_size", "bulk", "sample_graph")}


def summary_keys(task: str, source: str) -> tuple[str, ...]:
    """The keys of the summary of a ``task`` run on batch ``source`` (``full-graph`` or ``minibatch``), in order."""
    other = {k for t, ks in TASK_KEYS.items() if t != task for k in ks} | \
        {k for s, ks in SOURCE_KEYS.items() if s != source for k in ks}
    return tuple(k for k in SUMMARY_KEYS if k not in other)


def count(x: float) -> int | float:
    """A per-epoch mean of bytes or calls: an ``int`` when it is whole (every epoch moved the same bytes), else the
    ``float``."""
    r = round(x)
    return int(r) if abs(x - r) <= 1e-9 * max(1.0, abs(x)) else float(x)


def validation_score(r: dict):
    """What an epoch is chosen by: the validation accuracy (node classification) or, for link prediction, the
    validation metric its record names (``select``: the AUC, or OGB's Hits@K or MRR on a dataset's own split)."""
    return r.get("val_acc") if r.get("val_acc") is not None else r.get(r.get("select", "val_auc"))


def best_epoch(records: list[dict]) -> int:
    """The first epoch of the highest validation accuracy (link prediction: AUC; the last epoch when no split is
    validated)."""
    best, best_val = len(records) - 1, None
    for i, r in enumerate(records):
        v = validation_score(r)
        if v is not None and (best_val is None or v > best_val):
            best, best_val = i, v
    return best


def stops_early(history: list[dict], patience: int) -> bool:
    """``--early-stop PATIENCE``: the validation accuracy has not improved for ``patience`` epochs (the best epoch
    is the first of the highest accuracy, as the summary's; a run without validated vertices never stops). Every
    rank decides alike: the accuracies are all-reduced."""
    if not patience or not any(validation_score(r) is not None for r in history):
        return False
    return len(history) - 1 - best_epoch(history) >= patience


def model_epoch(keep: str, records: list[dict]) -> int:
    """The epoch whose parameters a run hands on: the best validation epoch (``--keep best``) or the last."""
    return best_epoch(records) if keep == "best" else len(records) - 1


def traffic(everyone: list[dict], phases=None) -> dict:
    """Per-epoch communication from every rank's ``phases`` (``{key: {"sent", "recv", ...}}``; ``phases``: the
    phase names counted, ``None``: all): moved bytes per phase and in total, sent bytes, and the busiest rank's."""
    moved_recv, moved_sent = defaultdict(float), defaultdict(float)
    per_rank_send, per_rank_recv = [], []
    for er in everyone:
        sent = recv = 0.0
        for k, v in er["phases"].items():
            if phases is None or k.split(".")[0] in phases:
                moved_recv[k] += v["recv"]
                moved_sent[k] += v["sent"]
                sent += v["sent"]
                recv += v["recv"]
        per_rank_send.append(sent)
        per_rank_recv.append(recv)
    by_phase = {k: max(moved_recv[k], moved_sent[k]) for k in moved_recv}
    return {
        "comm_bytes_per_epoch": {"total": count(sum(by_phase.values())),
                                 "by_phase": {k: count(v) for k, v in sorted(by_phase.items())}},
        "comm_sent_bytes_per_epoch": {"total": count(sum(moved_sent.values())),
                                      "by_phase": {k: count(v) for k, v in sorted(moved_sent.items())}},
        "max_rank_send_bytes_per_epoch": count(max(per_rank_send, default=0.0)),
        "max_rank_recv_bytes_per_epoch": count(max(per_rank_recv, default=0.0)),
    }


def run_summary(cfg, history: list[dict], everyone: list[dict], *, mesh, data: str, n: int, nnz: int, wall: float,
                resumed_from: int | None, **specific) -> dict:
    """The summary of a run on the process grid ``mesh``: the metrics at the best epoch of ``history`` (every epoch's
    record, a checkpoint's included), the run's config and size, ``everyone``'s peak memory, and the loop's
    ``specific`` values (its times, its traffic, ...); the keys of :func:`summary_keys` for its task and batch source,
    in order (a key outside :data:`SUMMARY_KEYS`, or one of its keys that no value was given for, is an error)."""
    best = best_epoch(history)
    metrics = [k for k in TASK_KEYS[cfg.task] if k.startswith(("train_", "val_", "test_"))]
    values = {
        **{k: history[best].get(k) for k in metrics}, "best_epoch": best,
        "keep": cfg.keep, "model_epoch": model_epoch(cfg.keep, history),
        "final_loss": history[-1]["loss"], "task": cfg.task,
        "nproc": mesh.world_size, "grid_axes": list(mesh.names), "seed": cfg.seed, "model": cfg.model,
        "heads": cfg.model_heads, "aggr": cfg.model_aggr, "layers": cfg.layers, "hidden": cfg.hidden,
        "epochs": cfg.epochs, "epochs_trained": len(history), "early_stop": cfg.early_stop,
        "feature_norm": cfg.model_feature_norm, "dtype": cfg.dtype, "data": data, "n": n, "nnz": nnz,
        "peak_memory_bytes": [er["peak_memory_bytes"] for er in everyone],
        "devices": [er["device"] for er in everyone], "wall_time_s": wall,
        "checkpoint_every": cfg.checkpoint_every, "resumed_from_epoch": resumed_from, "input_pipeline": None,
        "config": cfg.to_dict(),  # the resolved config: gridgnn train --config DIR/summary.json reruns the run
    }
    if cfg.task == "link":  # (a dataset's own split: the loop gives its link_split)
        values.update(hits_k=cfg.model_hits_k, negatives=cfg.model_negatives,
                      link_split=list(cfg.model_link_split), decoder=cfg.model_decoder)
    keys = summary_keys(cfg.task, "minibatch" if cfg.sampler is not None else "full-graph")
    foreign = sorted(set(specific) - set(keys))
    if foreign:  # a loop's value that its task and batch source do not report: a schema out of step with the loop
        raise KeyError(f"summary keys outside this run's schema ({cfg.task}, "
                       f"{'minibatch' if cfg.sampler is not None else 'full-graph'}): {foreign}")
    values.update(specific)
    missing = [k for k in keys if k not in values]
    if missing:
        raise KeyError(f"summary keys without a value: {missing}")
    return {k: values[k] for k in keys}


def interrupted_summary(cfg, records: list[dict], signal: str, checkpoint: str | None) -> dict:
    """``summary.json`` of a run that ``signal`` interrupted after the epochs of ``records`` (a resumed run's
    inherited ones included): ``interrupted`` (the signal), the epochs planned and trained, the metrics at the best
    epoch so far, the last loss, its ``checkpoint`` (the file name, where ``--checkpoint-every`` wrote one; else
    ``None``) and the config. It has no ``model.pt``: the run stopped before its outputs."""
    best = best_epoch(records)
    metrics = {k: v for k, v in records[best].items()
               if k.startswith(("train_", "val_", "test_")) and not k.endswith("_s") and v is not None}
    return {"interrupted": signal, "task": cfg.task, "epochs": cfg.epochs, "epochs_trained": len(records),
            "best_epoch": best, **metrics, "final_loss": records[-1].get("loss"), "checkpoint": checkpoint,
            "config": cfg.to_dict()}


def median_of(records: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in records)
