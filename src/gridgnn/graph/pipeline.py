r"""The input pipeline of a trained model: what training did to the data before the first layer, recorded in
``model.pt`` (and ``summary.json``'s ``input_pipeline``) and applied again by ``predict``, ``score``,
``TrainedModel.__call__`` and the PyG export to any graph they are given, so a user's own copy of a graph gives
the numbers of the run.

The record is a small JSON dict (:func:`pipeline_record`):

==================  ===================================================================================
``version``         ``1``
``feature_norm``    ``"none"``, ``"row"`` (each row divided by its sum) or ``"l2"`` (unit L2 norm): the
                    ``--feature-norm`` the run resolved (``auto``: the model's choice, else the data's
                    convention, e.g. ``row`` for ``planetoid:``)
``features``        ``"given"`` (the graph's ``x``) or ``"degree"`` (no ``x``: the 3 columns of
                    :func:`~gridgnn.graph.loaders.degree_features`, computed from the graph)
``duplicate_edges`` ``"merge"``: an edge given more than once is one edge (one per source, destination and
                    relation); given weights add up (PyG ``coalesce(reduce="sum")``)
``self_loops``      ``"model"``: the layers add them as their PyG twins do (GCN: the missing ones)
``symmetrize``      ``true`` when the run's loader added the reverse edges (``?directed=0``, ``planetoid:``,
                    a symmetric Matrix Market file): inference adds them to a directed graph too (the larger
                    weight of a pair), the export as well; ``false``: the edges are used as given
``split``           ``"given"`` or the default split used (``"random 60/20/20 (seed S)"``; training only)
``types``           a heterogeneous graph's layout, where the run had one: ``{"vertices": [type, ...],
                    "columns": [first feature column of each], "relations": ["src__rel__dst", ...]}`` in the
                    order that numbered them (vertex ids, feature columns, relation ids): inference refuses a graph
                    whose order differs (its typed weights would read other types' features and relations)
==================  ===================================================================================

A model file without the record (written before it existed) keeps the old behaviour: its ``--feature-norm`` as
written, ``auto`` resolved on the data.
"""
from __future__ import annotations

from ..errors import GridGnnError

#: the version of the record
PIPELINE_VERSION = 1
#: the resolved feature normalizations (``--feature-norm`` without ``auto``)
RESOLVED_NORMS = ("none", "row", "l2")
#: what a data source may declare as its conventional normalization (``Graph.meta["feature_norm"]``)
CONVENTIONS = ("row", "l2")


def data_convention(meta) -> str | None:
    """The feature normalization a data source declares as its convention (``planetoid:``: ``row``), or ``None``."""
    value = (meta or {}).get("feature_norm") if isinstance(meta, dict) else None
    return value if value in CONVENTIONS else None


def resolve_feature_norm(setting: str, model_default: str, meta) -> str:
    """``--feature-norm`` as a run on data with ``meta`` uses it: a given ``none``/``row``/``l2`` as given;
    ``auto`` is the model's choice when it makes one (VA: ``l2``), else the data's convention, else ``none``."""
    if setting != "auto":
        return setting
    if model_default not in (None, "none"):
        return model_default
    return data_convention(meta) or "none"


def pipeline_record(meta, feature_norm: str) -> dict:
    """The record of a run on a graph with ``meta`` whose features were normalized with ``feature_norm``."""
    meta = meta if isinstance(meta, dict) else {}
    record = {"version": PIPELINE_VERSION, "feature_norm": feature_norm,
              "features": "degree" if meta.get("features") == "degree" else "given",
              "duplicate_edges": "merge", "self_loops": "model", "symmetrize": bool(meta.get("symmetrized")),
              "split": str(meta.get("split_default") or "given")}
    types = typed_layout(meta)
    if types is not None:
        record["types"] = types
    return record


def typed_layout(meta) -> dict | None:
    """The ``types`` of a heterogeneous graph's ``meta`` (:mod:`gridgnn.graph.hetero`), ``None`` for another."""
    meta = meta if isinstance(meta, dict) else {}
    if not isinstance(meta.get("vertex_types"), list):
        return None
    return {"vertices": list(meta["vertex_types"]), "columns": [int(c) for c in meta.get("feature_columns", [])],
            "relations": list(meta.get("relations", []))}


def _is_layout(types) -> bool:
    return isinstance(types, dict) and set(types) == {"vertices", "columns", "relations"} \
        and all(isinstance(v, list) for v in types.values()) \
        and all(isinstance(t, str) for t in types["vertices"] + types["relations"]) \
        and all(type(c) is int for c in types["columns"])


def check_record(record, where: str) -> dict:
    """A record read from a model file (one line naming ``where`` when it is not one)."""
    if not isinstance(record, dict) or record.get("version") != PIPELINE_VERSION \
            or record.get("feature_norm") not in RESOLVED_NORMS or record.get("features") not in ("given", "degree") \
            or record.get("duplicate_edges") != "merge" or record.get("self_loops", "model") != "model" \
            or not isinstance(record.get("symmetrize", False), bool) or not isinstance(record.get("split", ""), str) \
            or ("types" in record and not _is_layout(record["types"])) \
            or set(record) - set(pipeline_record({}, "none")) - {"types"}:  # a step it does not know it would skip
        raise GridGnnError(f"{where} is damaged: its input_pipeline record {str(record)[:120]!r} is not one this "
                           f"gridgnn reads (version {PIPELINE_VERSION})")
    return record


def console_lines(meta) -> list[str]:
    """The silent choices a loader made for this graph, one console line each (degree features, a default split,
    merged duplicate edges, a normalization by convention)."""
    meta = meta if isinstance(meta, dict) else {}
    lines = []
    if meta.get("features") == "degree":
        lines.append("input: the graph has no node features (x): training on 3 degree features "
                     "[1, log(1 + in-degree), log(1 + out-degree)]")
    if meta.get("split_default"):
        lines.append(f"input: the graph has no train/val/test masks: using a {meta['split_default']} split of the "
                     "labelled vertices")
    merged = meta.get("duplicate_edges_merged")
    if merged:
        lines.append(f"input: {merged} duplicate edges merged (an edge given more than once counts once; given "
                     "weights add up)")
    return lines
