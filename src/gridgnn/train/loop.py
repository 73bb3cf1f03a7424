r"""What every training loop shares (the full graph, :mod:`~gridgnn.train.full_graph`, and sampled minibatches,
:mod:`~gridgnn.train.minibatch`, are its two batch sources, each running a task): :class:`RunLoop` runs the epochs — each epoch's record
into ``metrics.jsonl``, checkpoints when due, the console, the per-epoch callbacks and ``--early-stop`` — and writes
the outputs after the last epoch in their crash-safe order (``logits.npy``, ``model.pt``, the plots, ``summary.json``
last), holding ``--out`` until the last is written.
"""
from __future__ import annotations

import contextlib
import os
import sys

from ..errors import GridGnnError, interrupt_signal
import torch

from .checkpoint import CHECKPOINT, check_keep, full_parameters, save_checkpoint, sliced_parameters
from .console import Console
from .model_file import MODEL_FILE, TrainOutput, write_model_file
from .optim import set_rate
from ..graph.files import OutLock, make_out_dir, remove_empty_dirs, write_json
from .outputs import (OUTPUTS, MetricsLog, TensorBoardLog, clear_outputs, incomplete, kept_note, previous_outputs,
                      write_kept, write_logits, write_metrics_csv)
from .summary import best_epoch, interrupted_summary, model_epoch, stops_early, validation_score


def fmt(v, spec: str) -> str:
    """``v`` formatted, ``n/a`` for the accuracy of an empty split."""
    return "n/a" if v is None else format(v, spec)


def compiling(r: dict) -> str:
    """``"; of it 812 ms compiling kernels"`` for an epoch whose training step compiled (or loaded) numba kernels,
    else ``""``."""
    s = r.get("compile_time_s") or 0.0
    return f"; of it {s * 1e3:.0f} ms compiling kernels" if s >= 0.0005 else ""


def run_title(cfg, summary: dict) -> str:
    """What a run's plots are titled with: model, data, algorithm, grid and P."""
    grid = "x".join(str(v) for v in summary.get("grid") or [1])
    return f"{cfg.model} on {summary.get('data')}: {cfg.sampler or cfg.algo} grid {grid}, P={summary.get('nproc')}"


class RunLoop:
    r"""The epochs and the outputs of one run on this rank.

    Args:
        cfg: the run's :class:`~gridgnn.train.config.TrainConfig`.
        comm, plan, model, opt: what a checkpoint and ``model.pt`` unshard (``plan``: the parameters' layout).
        dims, info: the model's widths; the graph's ``n``, ``nnz`` (a checkpoint records them).
        ckpt: the ``--resume`` checkpoint (its epoch records start the history) or ``None``.
        console: the run's :class:`~gridgnn.train.console.Console`.
        line: an epoch record → its console line.
        callbacks: called on rank 0 with each epoch's record.
        replicated: parameters outside the model that every rank holds whole (link prediction's MLP decoder),
            ``{name: [parameters]}``: a checkpoint holds them and their optimizer state under ``name``.
    """

    def __init__(self, cfg, *, comm, plan, model, opt, dims, info, ckpt, console: Console, line, callbacks=(),
                 replicated=None):
        self.replicated = dict(replicated or {})
        self.cfg, self.comm, self.plan, self.model, self.opt = cfg, comm, plan, model, opt
        self.dims, self.info, self.console, self.line, self.callbacks = dims, info, console, line, tuple(callbacks)
        self.lead = comm.grid.global_rank == 0
        self.start = 0 if ckpt is None else ckpt["epoch"]
        self.history = [] if ckpt is None else [dict(r) for r in ckpt["records"]]  # every epoch's record
        #: ``--keep best``: this rank's copy of the parameters after the best epoch so far, ``{parameter: value}``
        #: (``None`` with ``--keep last``, and until an epoch is trained or resumed)
        self.kept = None
        if cfg.keep == "best" and ckpt is not None:
            self._resume_kept(ckpt)
        # --out is created now, after the set-up; nothing between this and `run` (which releases it) can fail
        self.files = _RunFiles(cfg, self.history) if self.lead and cfg.out else None

    def run(self, step) -> None:
        """Train ``step(epoch) -> record`` for each epoch left (every rank alike)."""
        cfg = self.cfg
        with _recording(self.files, self.console, self._keep_interrupted):
            for epoch in range(self.start, cfg.epochs):
                lr = set_rate(self.opt, cfg, epoch)
                rec = {**step(epoch), "lr": lr}
                self.history.append(rec)
                if cfg.keep == "best" and best_epoch(self.history) == epoch:  # (every rank alike: the metrics
                    self._keep_now()  # are all-reduced)
                if self.files is not None:
                    self.files.append(rec)
                stop = stops_early(self.history, cfg.early_stop)
                if cfg.out and cfg.checkpoint_every and ((epoch + 1) % cfg.checkpoint_every == 0
                                                         or epoch == cfg.epochs - 1 or stop):
                    save_checkpoint(self.comm, self.plan, self.model, self.opt,
                                    path=os.path.join(cfg.out, CHECKPOINT), config=cfg.to_dict(), dims=self.dims,
                                    info=self.info, epoch=epoch + 1, records=self.history,
                                    best_epoch=best_epoch(self.history), replicated=self.replicated,
                                    kept=self.kept)
                self.console.epoch_done(epoch, rec, self.line(rec))
                self._after_epoch(stop)
                if stop:
                    break
            self._hand_on_kept()

    def _keep_interrupted(self, why: str) -> None:
        """Interrupted by ``why`` (a signal's name), in this process: ``--out`` keeps the epochs finished
        (:meth:`_RunFiles.keep`), with a line on stdout."""
        cfg = self.cfg
        ckpt = CHECKPOINT if os.path.isfile(os.path.join(cfg.out, CHECKPOINT)) else None
        if self.files.keep(self.history, lambda: interrupted_summary(cfg, self.history, why, ckpt)) \
                and not cfg.quiet:
            self.console.write(kept_note(cfg.out, len(self.history), ckpt, cfg.checkpoint_every))

    def _keep_now(self) -> None:
        """``--keep best``: this epoch is the best so far; its parameters overwrite the kept copy (one copy held)."""
        if self.kept is None:
            self.kept = {p: p.detach().clone() for p in self._kept_parameters()}
            return
        with torch.no_grad():
            for p, value in self.kept.items():
                value.copy_(p)

    def _kept_parameters(self) -> list:
        """What ``--keep best`` copies: the model's parameters and those held outside it (``replicated``)."""
        return [e[2] for e in self.model.parameter_entries()] + [p for ps in self.replicated.values() for p in ps]

    def _resume_kept(self, ckpt) -> None:
        """``--keep best`` on resume: the checkpoint's best parameters as this rank holds them (its last epoch's
        where that epoch is the best). A checkpoint that was written with ``--keep last`` after a better epoch
        has lost that epoch's parameters: refused, rather than handing on other parameters than the summary's."""
        check_keep(ckpt, self.cfg.keep, CHECKPOINT)  # (refused before any rank started: config_from_flags)
        if "best_params" in ckpt:
            self.kept = sliced_parameters(self.model, self.plan, ckpt["best_params"], self.dims, self.replicated)
        else:  # the restored parameters are the best epoch's
            self._keep_now()

    def _hand_on_kept(self) -> None:
        """After the epochs: with ``--keep best`` the model takes the best epoch's parameters back (what model.pt,
        ``--save-logits`` and the Python API's model then hold; the optimizer's state stays the last epoch's)."""
        if self.kept is None or model_epoch(self.cfg.keep, self.history) == len(self.history) - 1:
            return
        with torch.no_grad():
            for p, value in self.kept.items():
                p.copy_(value)


    def _after_epoch(self, stop: bool) -> None:
        rec = self.history[-1]
        if self.lead:
            for callback in self.callbacks:
                try:
                    callback(dict(rec))
                except Exception as exc:  # noqa: BLE001 - the user's code: one line, every rank ends
                    raise GridGnnError(f"the callback {getattr(callback, '__name__', type(callback).__name__)} "
                                       f"failed after epoch {rec['epoch']}: {type(exc).__name__}: {exc}") from None
        if stop:
            best = best_epoch(self.history)
            what = "AUC" if self.cfg.task == "link" else "accuracy"
            self.console.write(f"early stop after epoch {rec['epoch']}: the validation {what} has not improved "
                               f"for {self.cfg.early_stop} epochs (best "
                               f"{fmt(validation_score(self.history[best]), '.4f')} at epoch {best})")

    @contextlib.contextmanager
    def outputs(self):
        """Around everything after the last epoch: ``--out`` stays held until the last output is written (or this
        fails)."""
        try:
            yield
        finally:
            if self.files is not None:
                self.files.close()

    def parameters(self, keep_model: bool) -> dict | None:
        """Collective: the full parameters on rank 0 (``None`` elsewhere) where they are needed (``model.pt``, or the
        Python API's model)."""
        return full_parameters(self.comm, self.plan, self.model, self.dims) if self.cfg.out or keep_model else None

    def write(self, summary: dict, params: dict | None, *, logits=None, original_ids=None, node_types=None,
              everyone=None) -> None:
        """Rank 0's outputs in order: ``metrics.csv``, ``logits.npy``, ``model.pt``, ``breakdown.png`` (when ``everyone`` has the
        ranks' timings), ``curves.png`` and, last, ``summary.json`` (a ``summary.json`` without ``interrupted`` marks a complete run)."""
        out = self.cfg.out
        if not out:
            return
        try:
            self._write(out, summary, params, logits, original_ids, node_types, everyone)
        except GridGnnError as exc:  # a full disk: the line names the file, what was written and what is missing
            planned = ["metrics.csv"] + (["logits.npy"] if logits is not None else []) + [MODEL_FILE] + \
                (["breakdown.png"] if everyone is not None else []) + ["curves.png", "summary.json"]
            raise incomplete(out, planned, exc) from None

    def _write(self, out, summary, params, logits, original_ids, node_types, everyone) -> None:
        from .report import breakdown_plot, curves_plot

        write_metrics_csv(os.path.join(out, "metrics.csv"), self.history)
        if logits is not None:
            write_logits(out, logits, original_ids, node_types)
        write_model_file(os.path.join(out, MODEL_FILE), self.cfg.to_dict(), self.dims, params,
                         model_epoch(self.cfg.keep, self.history) + 1,  # epochs the parameters saw
                         input_pipeline=self.info.get("input_pipeline"))
        title = run_title(self.cfg, summary)
        if everyone is not None:
            breakdown_plot(everyone, os.path.join(out, "breakdown.png"), title=title)
        curves_plot(self.history, os.path.join(out, "curves.png"), title=title)
        write_json(os.path.join(out, "summary.json"), summary)

    def result(self, summary: dict, params: dict | None, keep_model: bool):
        """What the worker returns on rank 0: the summary, or with ``keep_model`` the summary and the model."""
        return TrainOutput(summary, self.dims, params) if keep_model else summary


@contextlib.contextmanager
def _recording(files, console, keep):
    """The epochs of a run: on success ``metrics.jsonl`` is committed; on a failure the run's files are
    abandoned (see :class:`_RunFiles`); on an interrupt (Ctrl-C, SIGTERM) ``keep(signal)`` keeps the epochs
    finished. The console's bar is closed either way (``files`` may be ``None``)."""
    try:
        yield
        if files is not None:
            files.commit()
    except BaseException as exc:
        why = interrupt_signal(exc)
        if files is not None:
            if why is None:
                files.abandon()
            else:
                keep(why)
        raise
    finally:
        console.close()


class _RunFiles:
    r"""Rank 0's ``--out`` of this run: the folder is created (after the set-up, so a failed set-up leaves
    none), a previous run's outputs are removed where allowed (``--overwrite``, or ``--resume`` of this folder:
    its checkpoint stays until the next one replaces it), and ``metrics.jsonl`` is opened with the inherited
    records. :meth:`abandon` (a failed loop) removes the temporary files and the folders made if still empty."""

    def __init__(self, cfg, history: list[dict]):
        out = cfg.out
        self.created = make_out_dir(out)
        self.lock = None
        try:
            self.lock = OutLock(out)  # before looking for previous outputs: another run may be writing them
            here = cfg.resumes_into_out()
            if not (cfg.overwrite or here):
                old = previous_outputs(out)
                if old:  # appeared since validation
                    raise GridGnnError(f"--out {out} already holds a previous run's outputs ({', '.join(old)}); "
                                       "add --overwrite to replace them, or choose another --out")
            clear_outputs(out, keep=(CHECKPOINT,) if here else ())
            # a run resumed here that writes no checkpoint of its own: the one it read is stale once it finishes
            self.stale_checkpoint = os.path.join(out, CHECKPOINT) if here and not cfg.checkpoint_every else None
            self.metrics = MetricsLog(os.path.join(out, "metrics.jsonl"), history)
            self.events = None
            self.events = TensorBoardLog(out, history) if cfg.log == "tensorboard" else None
        except BaseException:
            if getattr(self, "metrics", None) is not None:
                self.metrics.discard()
            if self.lock is not None:
                self.lock.release()
            remove_empty_dirs(self.created)
            raise

    def append(self, rec: dict) -> None:
        """One epoch's record: a line of ``metrics.jsonl`` (and, with ``--log tensorboard``, its scalars)."""
        self.metrics.append(rec)
        if self.events is not None:
            self.events.append(rec)

    def commit(self) -> None:
        """The loop ended: ``metrics.jsonl`` (and ``tensorboard/``) take their final names, and the checkpoint a run
        resumed here read without writing its own is removed (a later ``--resume`` of the folder would go back to
        it and replace the newer outputs)."""
        self.metrics.commit()
        if self.events is not None:
            self.events.commit()
        if self.stale_checkpoint is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.stale_checkpoint)

    def abandon(self) -> None:
        self.metrics.discard()
        if self.events is not None:
            self.events.discard()
        self._drop_temporaries()
        self.lock.release()
        remove_empty_dirs(self.created)

    def _drop_temporaries(self) -> None:
        """Remove every temporary output name left in the folder, which is still held (no other run writes
        there): a write that a signal cut short between making its temporary file and the code that removes it
        (``graph.files.atomic_write``: the signal raised as the file's ``open`` returns) leaves it behind — what
        the launcher's :func:`~gridgnn.train.outputs.clean_after_ranks` removes after a launch's ranks."""
        with contextlib.suppress(GridGnnError):
            clear_outputs(os.path.dirname(self.metrics.path) or ".", keep=OUTPUTS)

    def keep(self, records: list[dict], summary_of) -> bool:
        """An interrupted loop: the epochs of ``records`` (those finished, a checkpoint's included) become the
        folder's ``metrics.jsonl``, ``metrics.csv`` and ``summary.json`` (``summary_of()``; :func:`write_kept`),
        written while the folder is still held; with none, or where they cannot be written (one line on stderr; a
        second interrupt), the run's files are abandoned. Never raises (the interrupt stays what ends the run).
        Returns whether they were kept."""
        if records:
            self.metrics.close()
            try:
                write_kept(os.path.dirname(self.metrics.path) or ".", records, summary_of())
            except BaseException as exc:  # noqa: BLE001 - a full disk, a second Ctrl-C: the first interrupt ends it
                if isinstance(exc, Exception):
                    print(f"gridgnn: the finished epochs of the interrupted run could not be kept: {exc}",
                          file=sys.stderr, flush=True)
            else:
                self.metrics.discard()
                if self.events is not None:
                    with contextlib.suppress(Exception):  # the events go with the metrics, or not at all
                        self.events.commit()
                    self.events.discard()
                self._drop_temporaries()
                self.lock.release()
                return True
        self.abandon()
        return False

    def close(self) -> None:
        """The run's last output is written (or it failed after its loop): the folder is free again."""
        self.lock.release()
