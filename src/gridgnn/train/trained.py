r"""A trained model you can use: :class:`TrainedModel` (what :func:`gridgnn.train` returns with the summary, and
what :func:`load` reads back from a run folder), full-graph inference on any graph with
:meth:`TrainedModel.predict` — on one process or distributed, on any algorithm — and the PyG module of a built-in
model (:meth:`TrainedModel.to_pyg`).

.. code-block:: python

    import gridgnn

    result = gridgnn.train(model="gat", heads=8, hidden=8, algo="1d-sa", nproc=4, out="runs/gat")
    logits = result.predict("synthetic:sbm?n=5000&features=16&classes=4", algo="2d", nproc=4)
    model = gridgnn.load("runs/gat")           # the same model, from its run folder
    pyg = model.to_pyg()                       # a torch_geometric.nn.Sequential of GATConv layers
"""
from __future__ import annotations


import numpy as np
import torch

from ..errors import GridGnnError
from ..graph.saved import as_pairs
from ..nn import MODELS, resolve_model
from ..parallel import one_process
from .launching import TrainingFailed, api_failure, failed_launch, launch_checked, require_one_process
from .rank_setup import build_model, predict_worker


def pair_scores(z: np.ndarray, pairs, decoder) -> np.ndarray:
    """The ``decoder``'s scores (:mod:`gridgnn.nn.decoders`) of each pair of ``pairs`` (``int[2, m]`` or
    ``int[m, 2]``) over the embeddings ``z``."""
    pairs = as_pairs(pairs)
    if pairs.size and (pairs.min() < 0 or pairs.max() >= z.shape[0]):
        raise GridGnnError(f"pairs name vertices outside 0..{z.shape[0] - 1} of the graph")
    zt = torch.from_numpy(np.ascontiguousarray(z))
    with torch.no_grad():
        return decoder(zt[torch.from_numpy(pairs[0])], zt[torch.from_numpy(pairs[1])]).numpy()


class TrainedModel:
    r"""A trained model: its full parameters (on the CPU, in the run's dtype) and the config that trained it.

    Args:
        config (dict): the training run's config (``summary.json``'s ``config``; model, options, dtype, seed).
        dims (list[int]): the layer widths ``[f_0, ..., f_L]`` (input features, hidden widths, classes).
        params (dict): ``{name: [full tensor of each layer]}`` (the ``model.pt`` layout).
        summary (dict, optional): the run's summary, when known.
    """

    def __init__(self, config: dict, dims: list[int], params: dict, *, summary: dict | None = None,
                 epoch: int | None = None):
        self.config, self.dims, self.params, self.summary = dict(config), list(dims), params, summary
        if "input_pipeline" not in self.config and isinstance((summary or {}).get("input_pipeline"), dict):
            from ..graph.pipeline import check_record  # gridgnn.train's record: in its summary, checked alike

            self.config["input_pipeline"] = dict(check_record(summary["input_pipeline"], "the run's summary.json"))
        if epoch is None and summary is not None:  # epochs its weights saw: up to the one they were kept from
            epoch = summary["model_epoch"] + 1 if summary.get("model_epoch") is not None else summary.get("epochs_trained")
        self.epoch = epoch
        self._module = None

    def __repr__(self) -> str:
        return f"TrainedModel(model={self.config.get('model')!r}, dims={self.dims}, dtype={self.config.get('dtype')!r})"

    # ------------------------------------------------------------------ the model itself
    @property
    def input_pipeline(self) -> dict | None:
        """What training did to the data before the first layer (:mod:`gridgnn.graph.pipeline`: the feature
        normalization, degree features, the duplicate-edge rule), applied again to any graph this model is given;
        ``None`` for a model file written before the record existed (its ``feature_norm`` as written is used,
        ``auto`` resolved on the data, as then)."""
        rec = self.config.get("input_pipeline")
        return dict(rec) if isinstance(rec, dict) else None

    def _train_config(self, **changes):
        from .config import TrainConfig, inference_fields

        inherited = inference_fields()  # what builds the model (and the seed of a random vertex order)
        kw = {k: v for k, v in self.config.items() if k in inherited}
        rec = self.input_pipeline
        as_loaded = rec is None and kw.get("feature_norm", "none") == "none"
        if rec is not None:  # the normalization the run resolved, whatever the data's convention
            kw["feature_norm"] = rec["feature_norm"]
        elif as_loaded:  # written before the record: features "as loaded", which included the loader's
            kw["feature_norm"] = "auto"  # convention (planetoid: row); auto gives it
        # inference runs no dropout: its trace and memory guard see none (a model of the user's own that calls
        # F.dropout is then harmless to its layouts, as in eval mode)
        cfg = TrainConfig(**{**kw, "quiet": True, "dropout": 0.0, **changes})
        if as_loaded and cfg.model_feature_norm != "none":
            cfg.feature_norm = "none"  # VA's old "none": the model's own choice is not the old behaviour
        cfg.trained_features = None if rec is None else rec["features"]  # checked against the graph's (inference)
        cfg.trained_types = None if rec is None else rec.get("types")  # a heterogeneous graph's order, checked too
        cfg.trained_symmetrized = bool(rec and rec.get("symmetrize"))  # a directed graph gets its reverse edges
        return cfg

    @property
    def dtype(self) -> torch.dtype:
        return torch.float64 if self.config.get("dtype") == "float64" else torch.float32

    @property
    def module(self) -> torch.nn.Module:
        """The model as one serial ``torch.nn.Module`` with the trained parameters, in eval mode (its
        ``forward(x, plan)`` runs on a plan; :meth:`__call__` and :meth:`predict` build the plan for you)."""
        if self._module is None:
            from .checkpoint import WHOLE, load_parameters

            resolve_model(self.config.get("model", "gcn"))
            model = build_model(self._train_config(), self.dims, None, self.dtype)
            load_parameters(model, WHOLE, self.params, self.dims)
            self._module = model.eval()
        return self._module

    def state_dict(self) -> dict:
        """The serial module's ``state_dict`` (full tensors); a link-prediction model's also holds its decoder's,
        under ``decoder.`` (an MLP decoder is trained with the encoder: without it the pairs' scores are lost)."""
        out = self.module.state_dict()
        if self.config.get("task", "node") == "link":
            out.update((f"decoder.{k}", v) for k, v in self.decoder.state_dict().items())
        return out

    def to_pyg(self) -> torch.nn.Module:
        """The model as a PyG module with the trained weights: a :class:`~gridgnn.nn.pyg_export.PygExport` that
        applies the model's input pipeline (:attr:`input_pipeline`: the feature normalization, degree features
        for ``x=None``, duplicate edges merged) and then its ``torch_geometric.nn.Sequential`` of ``GCNConv`` /
        ``GATConv`` / ``AGNNConv`` / ``SAGEConv`` / ... layers (``.net``), called as a PyG model is:
        ``m(x, edge_index)``, with ``edge_weight=`` / ``edge_attr=`` / ``edge_type=`` where the model reads them.
        Its logits equal :meth:`predict`'s on the same graph; a link-prediction model's are the embeddings, and
        its ``.decoder`` scores pairs of them as :meth:`score` does. A model without a PyG equivalent (VA, a model of
        your own without ``to_pyg``) is refused: use :attr:`module` or :meth:`state_dict`."""
        from ..nn.pyg_export import PygExport

        module = self.module
        if not hasattr(module, "to_pyg"):
            raise GridGnnError(f"--model {self.config.get('model')} has no PyG equivalent to export to; its "
                               "parameters are in model.pt (gridgnn.load(RUN).state_dict())")
        rec = self.input_pipeline
        norm = rec["feature_norm"] if rec is not None else self._train_config().model_feature_norm
        export = PygExport(module.to_pyg(), feature_norm=norm,
                           degree_features=rec is not None and rec["features"] == "degree",
                           symmetrize=bool(rec and rec.get("symmetrize")),
                           data_self_loops=getattr(module, "reads_data_self_loops", True),
                           edge_dim=getattr(module, "edge_dim", None))
        if self.config.get("task", "node") == "link":  # the embeddings' pair scores: export.decoder(z[u], z[v])
            export.decoder = self.decoder
        return export

    # ------------------------------------------------------------------ inference
    def predict(self, data=None, *, algo: str = "serial", nproc: int | None = None, grid=None,
                replication: int = 1, partition: str = "random", blocked_aggregation: int = 0,
                device: str = "auto", timeout_s: float = 600.0, classes: bool = False) -> np.ndarray | None:
        r"""Full-graph inference of every vertex of a graph: the logits (``n × classes``, in the run's dtype) in
        the graph's vertex order, or the predicted class of each vertex (``classes=True``).

        Args:
            data (str | torch_geometric.data.Data | Graph, optional): any graph whose features have the width the
                model was trained on (a data SPEC, as ``--data``; labels are not needed). Its features are
                normalized as the training run's were (``feature_norm``). (default: the embedded SBM)
            algo, nproc, grid, replication, partition, blocked_aggregation, device, timeout_s: where the
                inference runs, as for :func:`gridgnn.train` (``nproc`` processes spawned here, or this rank of a
                torchrun/srun job). Every algorithm gives the same logits (to float tolerance).
            classes (bool): return class ids (``int64``) instead of logits.

        Returns ``None`` on the ranks other than 0 of a torchrun/srun job.
        """
        if classes and self.config.get("task", "node") == "link":
            raise GridGnnError("classes=True picks a class per vertex; a link-prediction model's outputs are "
                               "embeddings (score pairs with score())")
        out = self._api_predict(data, algo=algo, nproc=nproc, grid=grid, replication=replication, partition=partition,
                            blocked_aggregation=blocked_aggregation, device=device, timeout_s=timeout_s)
        if out is None:
            return None
        logits = out[0]
        return logits.argmax(axis=1).astype(np.int64) if classes else logits

    def score(self, pairs, data=None, **where) -> np.ndarray | None:
        r"""Link prediction: the score :math:`\langle z_u, z_v \rangle` of each pair ``(u, v)`` — the logit of its
        being an edge — from the embeddings of every vertex of a graph (:meth:`predict`'s, on any algorithm).

        Args:
            pairs: ``int[2, m]`` (PyG's ``edge_label_index``: sources, then destinations) or ``int[m, 2]``, vertex
                ids in the graph's order.
            data: the graph (as :meth:`predict`; default: the embedded SBM); ``where``: :meth:`predict`'s
                ``algo``, ``nproc``, ``grid``, ... .

        Returns ``float[m]`` in the run's dtype (``None`` on the ranks other than 0 of a torchrun/srun job).
        """
        if self.config.get("task", "node") != "link":
            raise GridGnnError("score() rates pairs with a link-prediction model (trained with task='link'); this "
                               "model classifies vertices: use predict()")
        as_pairs(pairs)  # the pairs' shape, before any work
        out = self._api_predict(data, **where)
        return None if out is None else pair_scores(out[0], pairs, self.decoder)

    @property
    def decoder(self) -> torch.nn.Module:
        """A link-prediction model's pair decoder (``--decoder``) with its trained parameters."""
        from ..nn.decoders import make_decoder

        name = self.config.get("decoder") or "dot"
        dec = make_decoder(name, self.dims[-1], dtype=self.dtype)
        if name != "dot":
            with torch.no_grad():
                for p, t in zip(dec.parameters(), self.params["decoder"]):
                    p.copy_(t)
        return dec.eval()

    def _api_predict(self, data, **where):
        """:meth:`_predict` for the Python API: a spawned inference stopped by Ctrl-C raises ``KeyboardInterrupt``."""
        try:
            return self._predict(data, **where)
        except TrainingFailed as exc:
            raise api_failure(exc) from None

    def _predict(self, data, *, algo="serial", nproc=None, grid=None, replication=1, partition="random",
                 blocked_aggregation=0, device="auto", timeout_s=600.0):
        """``(logits, original ids or None)`` on rank 0 (``None`` elsewhere)."""
        from ..distributed.launch import env_context

        if isinstance(grid, (list, tuple)):
            grid = ",".join(str(v) for v in grid)
        spec = data if isinstance(data, str) or data is None else None
        graph = None if isinstance(data, str) or data is None else data
        env = env_context(device)
        if nproc is None:
            nproc = env.world_size if env is not None else 1
        cfg = self._train_config(data=spec, algo=algo, nproc=nproc, grid=grid, replication=replication,
                                 partition=partition, blocked_aggregation=blocked_aggregation, device=device,
                                 timeout_s=timeout_s)
        if cfg.algo == "auto":
            raise GridGnnError("predict runs a chosen algorithm; --algo auto plans training runs")
        cfg.validate()
        if one_process(cfg.algo):
            require_one_process(env)
            return predict_worker(None, cfg, graph, self.dims, self.params)
        try:
            return launch_checked(predict_worker, cfg, graph, self.dims, self.params, dims=self.dims)[0]
        except SystemExit as exc:  # the launcher has printed every rank's message
            raise failed_launch(exc, "inference") from None

    def __call__(self, x, edge_index, edge_weight=None, edge_attr=None, edge_type=None, *,
                 num_nodes: int | None = None) -> torch.Tensor:
        r"""PyG's habit: the logits of ``x`` (``n × f_0``) on the graph of ``edge_index`` (``2 × E``, PyG's
        ``[source, target]``), serially, through the model's input pipeline (:attr:`input_pipeline`; ``x=None``
        for a model trained on degree features, with ``num_nodes`` when the last vertices have no edge);
        ``edge_weight``: optional weights of the edges; ``edge_attr``: their features (``E × d``, for a model
        that reads them); ``edge_type``: their relation types (``E``, for a model that reads them, such as
        ``rgcn``: the graph has the model's relation count)."""
        from torch_geometric.data import Data

        edge_index = torch.as_tensor(edge_index).cpu()
        if x is None:
            n = num_nodes if num_nodes is not None else int(edge_index.max()) + 1 if edge_index.numel() else 0
            data = Data(edge_index=edge_index, num_nodes=n)
        else:
            x = torch.as_tensor(x)
            data = Data(x=x.detach().cpu(), edge_index=edge_index, num_nodes=x.shape[0])
        if edge_weight is not None:
            data.edge_weight = torch.as_tensor(edge_weight).detach().cpu()
        if edge_attr is not None:
            data.edge_attr = torch.as_tensor(edge_attr).detach().cpu()
        if edge_type is not None:  # a typed graph of the model's relation count (from_pyg refuses weights with it)
            data.edge_type = torch.as_tensor(edge_type).detach().cpu()
            if self.config.get("relations") is not None:
                data.num_relations = int(self.config["relations"])
        return torch.from_numpy(self.predict(data))

    def save(self, path: str) -> None:
        """Write the model as ``model.pt`` (readable by :func:`load`)."""
        from .model_file import write_model_file

        write_model_file(path, self.config, self.dims, self.params, int(self.epoch or 0))


class TrainResult(dict):
    r"""What :func:`gridgnn.train` returns: the summary (this dict: ``result["test_acc"]``, as ``summary.json``)
    and the trained model (:attr:`model`, a :class:`TrainedModel`; :meth:`predict` is the model's)."""

    def __init__(self, summary: dict, model: TrainedModel):
        super().__init__(summary)
        self.model = model

    @property
    def summary(self) -> dict:
        return dict(self)

    def predict(self, data=None, **options):
        """:meth:`TrainedModel.predict` of the trained model."""
        return self.model.predict(data, **options)


def load(run: str, *, model: str | None = None) -> TrainedModel:
    r"""The trained model of a run folder (``gridgnn train --out RUN``: its ``model.pt``, and ``summary.json``
    when there), or of a ``model.pt`` file.

    Args:
        run (str): the run folder or its ``model.pt``.
        model (str, optional): the model's import path (``package.module:Class``) when it is a model of your
            own: gridgnn imports code only on your word, never on a file's.
    """
    import os

    from .model_file import read_model_file

    if model is not None:
        resolve_model(model)
    obj = read_model_file(run)
    if model is not None and MODELS.get(obj["config"].get("model")) is not resolve_model(model):
        raise GridGnnError(f"--model {model} names another model than the run's ({obj['config'].get('model')}, "
                           f"{run}): give the run's, or leave --model out for a built-in one")
    summary = None
    folder = run if os.path.isdir(run) else os.path.dirname(run) or "."
    path = os.path.join(folder, "summary.json")
    if os.path.lexists(path):
        from ..graph.safe_io import DataFileError
        from ..graph.saved import read_document

        try:
            summary = read_document(path, "a run summary", kind="json")
        except DataFileError:
            summary = None  # the model file is what inference needs; a damaged summary is not
        if not isinstance(summary, dict):
            summary = None
    return TrainedModel(obj["config"], obj["dims"], obj["params"], summary=summary, epoch=obj["epoch"])
