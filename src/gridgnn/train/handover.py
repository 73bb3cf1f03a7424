r"""A graph reaches spawned ranks as shards, not as P whole copies: a graph handed over from Python, and the graph
of a ``--data`` SPEC, which the launching process loads (or generates) once for all its ranks
(:func:`gridgnn.train.launching.launch_checked`; a ``sharded:`` dataset the ranks read themselves, and link prediction,
which splits the edges of the graph itself, still loads the SPEC on every rank).

``gridgnn.train(graph=g, algo="2d", nproc=P)`` (and ``TrainedModel.predict(g, nproc=P)``) spawns ``P`` processes on
this machine. Pickling ``g`` into each of them would hold ``P + 1`` copies of the whole graph, although every
distributed algorithm reads only blocks of it. Instead, the launching process checks the graph once, computes the
vertex order of ``--partition`` once (a graph partitioner runs once, as it does on rank 0 otherwise), and writes
the graph as a sharded dataset (:func:`~gridgnn.graph.sharded.write_sharded`, Plexus §5.4) into a temporary
folder; each rank receives a :class:`GraphShards` (the folder, the graph's name, the row blocks' bounds and the
file's vertex ids) and reads only its blocks and node rows, exactly as with ``--data sharded:DIR``. The folder is
removed when the ranks are done, whatever their outcome. A graph with edge features also hands each rank its edge
table whole (the structure and ``edge_attr``, no node data): sharded datasets do not hold edge features.

Every source gives a rank the same blocks of the same matrix :math:`\hat M` in the same vertex order
(:mod:`gridgnn.parallel.source`), so a run is bit for bit the run with the graph in memory.
"""
from __future__ import annotations

import contextlib
import shutil
import os
from dataclasses import dataclass

import numpy as np

from ..distributed.launch import private_tempdir
from ..errors import GridGnnError
from ..graph import Graph
from ..graph.sharded import write_sharded
from .config import TrainConfig
from .data_checks import checked_graph, data_fingerprint, in_memory_name, settle_edge_dim
from .rank_layout import layout_blocks, vertex_blocks, vertex_orders


@dataclass(frozen=True)
class GraphShards:
    """What a spawned rank receives instead of a graph in memory: where its shards are and what to call it."""

    path: str  # the sharded dataset the launching process wrote
    name: str  # the summary's data: in-memory:NAME
    bounds: list | None  # the block-row algorithms' row blocks (new ids), None for the 2D/3D/Plexus layouts
    original_ids: np.ndarray | None  # the file's id of each vertex (``?relabel=1``)
    node_types: dict | None = None  # the vertex types' names and id ranges (a HeteroData)
    edges: object = None  # a graph with edge features: its structure and edge_attr (no node data), for each rank
    fingerprint: dict | None = None  # the graph's as loaded (data_checks.data_fingerprint), for a checkpoint


@contextlib.contextmanager
def handed_over(cfg: TrainConfig, graph, *, dims: list[int] | None = None, name: str | None = None):
    r"""Yields what spawned ranks of ``cfg`` receive for ``graph``: ``None`` stays ``None`` (the ranks load
    ``cfg.data`` themselves); a graph in memory becomes a :class:`GraphShards` written now and removed on exit.
    ``dims``: inference of a model on these widths (the graph needs no labels); ``name``: what the summary calls
    the data (default ``in-memory:NAME``; the ``--data`` SPEC the launcher loaded it from). Bad input raises
    :class:`~gridgnn.errors.GridGnnError` here, before any rank starts."""
    if graph is None:
        yield None
        return

    world = cfg.nproc
    shape = cfg.mesh_shape(world)
    graph = checked_graph(cfg, graph, vertex_blocks(cfg.algo, world, cfg.replication, shape), dims=dims)
    fingerprint = data_fingerprint(cfg, graph)
    settle_edge_dim(cfg, graph.edge_dim, edges_note=graph.meta.get("edge_features_dropped"),
                    relations=graph.num_relations)  # before any rank
    perm_r, perm_c, rows = vertex_orders(graph, cfg.algo, world, replication=cfg.replication, shape=shape,
                                         method=cfg.partition, seed=cfg.seed)
    if rows is not None:  # the files cut like the row blocks' count (their bounds travel with the handle)
        blocks, bounds = (rows.parts, rows.parts), [int(b) for b in rows.bounds]
    else:
        blocks, bounds = layout_blocks(cfg.algo, tuple(shape)), None

    base = private_tempdir()  # marked: a later launch sweeps it if this process is killed outright
    folder = os.path.join(base, "graph")
    os.mkdir(folder, 0o700)
    try:
        with _terminate_cleanly():
            try:
                write_sharded(graph, folder, perm_r=perm_r, perm_c=perm_c, blocks=blocks,
                              partition_name=cfg.partition, normalize=True, seed=cfg.seed)
            except (OSError, GridGnnError) as exc:
                cause = exc if isinstance(exc, OSError) else getattr(exc, "os_error", None)  # meta.json's writer
                if cause is None:
                    raise
                raise GridGnnError(f"cannot write the graph's shards for the spawned ranks to {folder}: "
                                   f"{cause.strerror or cause} (set TMPDIR to a folder with room)") from None
        edges = None
        attr = graph.edge_attr if cfg.edge_dim else None
        counts = graph.edge_type_counts if cfg.relations else None
        if attr is not None or counts is not None:  # shards hold no edge features nor relation types: a model
            # that reads them gets the edge table whole on each rank

            edges = Graph(indptr=graph.indptr, indices=graph.indices, n=graph.n, directed=graph.directed,
                          values=graph.values if attr is not None else None,  # (loop_fill reads which are 0)
                          edge_attr=attr, edge_type_counts=counts, name=graph.name)
        handle = GraphShards(path=folder, name=name or in_memory_name(graph), bounds=bounds, original_ids=graph.original_ids,
                             node_types=graph.node_types, edges=edges, fingerprint=fingerprint)
        del graph, perm_r, perm_c, rows  # a graph converted here is not held while the ranks run
        yield handle
    finally:
        shutil.rmtree(base, ignore_errors=True)


@contextlib.contextmanager
def _terminate_cleanly():
    """While the shards are written (the longest part for a big graph), SIGTERM or SIGHUP (the terminal closed)
    ends this process through its ``finally`` clauses, so the half-written folder is removed, rather than at once
    (the default); the launcher installs its own handlers once the ranks start. A handler the program set itself,
    or a signal ignored (``nohup``), is left alone."""
    import signal
    import sys
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    taken = [sig for sig in (signal.SIGTERM, getattr(signal, "SIGHUP", None))
             if sig is not None and signal.getsignal(sig) is signal.SIG_DFL]

    def terminated(signum, frame):  # noqa: ARG001 - signal handler signature
        print(f"gridgnn: interrupted ({signal.Signals(signum).name}) while writing the graph's shards for the ranks; "
              "none started", file=sys.stderr, flush=True)
        raise SystemExit(128 + signum)

    for sig in taken:
        signal.signal(sig, terminated)
    try:
        yield
    finally:
        for sig in taken:
            signal.signal(sig, signal.SIG_DFL)
