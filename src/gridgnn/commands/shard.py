r"""Command-line front ends: ``gridgnn shard`` and the permutation report of ``gridgnn partition``.

Paper: Ranjan et al., *Plexus*, §5.1 (double permutation) and §5.4 (parallel data loading).

``gridgnn shard --data SPEC --blocks RxC --method M --seed S --out DIR``
    loads the graph, computes the permutations of method ``M`` (:data:`~gridgnn.partition.permute.METHODS`)
    for :math:`R \times C` blocks, and writes the sharded dataset directory ``DIR``
    (:func:`~gridgnn.graph.sharded.write_sharded`: :math:`\hat M^{rc} = P_r \hat M P_c^\mathsf{T}` and, for
    two distinct permutations, :math:`\hat M^{cr} = P_c \hat M P_r^\mathsf{T}`, as :math:`R \times C` block
    files, plus chunked node arrays). Prints a short summary with ``nnz_max_over_mean``.

``gridgnn partition --data SPEC --method M --blocks RxC [--seed S] [--out FILE]`` (``M`` a permutation method)
    computes the permutations and their balance, without writing a dataset (:func:`run_perm_report`). With
    ``--out FILE`` it writes

    * ``FILE.json`` — ``method``, ``blocks`` ``[R, C]``, ``n``, ``nnz``, ``seed``, ``seconds`` (time of the
      permutation), ``nnz_max_over_mean`` (over the blocks of both matrix versions that training multiplies,
      :func:`~gridgnn.partition.permute.nnz_max_over_mean_used`), ``nnz_max_over_mean_rc``,
      ``nnz_max_over_mean_cr``, ``nnz_max_over_mean_original`` (identity order, for reference),
      ``max_block_nnz``, ``mean_block_nnz``, ``versions``, ``matrix`` and the names of the files below;
    * ``FILE.perm_r.npy`` and ``FILE.perm_c.npy`` — the two permutations (``int64[n]``, ``perm[new] = old``;
      equal for ``identity`` and ``single-perm``);
    * ``FILE`` — the row block of every vertex under ``perm_r`` (one integer per line, original order), the
      partition-file format of ``gridgnn partition``, so the row bands can also drive the 1D algorithms.

Balance is measured on the matrix that is multiplied, :math:`\hat M = D^{-1/2}(M+I)D^{-1/2}` (with
self-loops).
"""
from __future__ import annotations

import operator

import argparse
import json
import math
import os
import re
import shutil
import time
from pathlib import Path

import numpy as np

from ..train.config import checked_seed
from ..errors import GridGnnError
from ..partition.layout import even_bounds
from ..graph.safe_io import available_memory
from ..graph.spec import parse_spec
from ..graph.sharded import foreign_entry
from ..graph.stream import BYTES_PER_VERTEX, StreamedEdgeList
from ..partition.permute import (METHODS, SIZE_ONLY_METHODS, balance_report, make_permutations, permutations_of_size,
                                 size_only_versions)
from ..graph.files import OutLock, atomic_write, make_out_dir, os_error_in, remove_empty_dirs, write_error

__all__ = ["shard", "parse_blocks", "add_shard_arguments", "run_shard_command", "add_perm_report_arguments",
           "run_perm_report", "perm_report"]

_DATA_HELP = ("synthetic:sbm?n=&classes=&avg_degree=&features= | synthetic:rmat?scale=&edge_factor= | "
              "planetoid:DIR | ogb:DIR | edgelist:FILE | mtx:FILE | npz:FILE")


def _whole(p):
    """An item of a ``blocks`` pair as :func:`parse_blocks` reads it: a string, or an integer (not a bool)."""
    if isinstance(p, str):
        return p
    try:
        return None if isinstance(p, bool) else operator.index(p)
    except TypeError:
        return None


def parse_blocks(text) -> tuple[int, int]:
    """``"8x8"`` (also ``8X8``, ``8,8``, ``8*8``, or one number ``8`` for 8×8, or a pair) → ``(R, C)``.

    Raises:
        GridGnnError: anything else, or a count below 1.
    """
    if isinstance(text, (tuple, list)):  # (Python) two whole numbers: 2.9 or True is no count of blocks
        parts = [_whole(p) for p in text]
    else:
        s = str(text).strip().lower()
        for sep in (",", "*"):
            s = s.replace(sep, "x")
        parts = s.split("x")
        if len(parts) == 1:
            parts = parts * 2
    try:
        if len(parts) != 2:
            raise ValueError
        R, C = (int(p) for p in parts)
    except (TypeError, ValueError):
        raise GridGnnError(f"--blocks must look like RxC (e.g. 8x8), got {text!r}") from None
    if R < 1 or C < 1:
        raise GridGnnError(f"--blocks {R}x{C}: both counts must be at least 1")
    return R, C


def _add_common(parser: argparse.ArgumentParser, out_help: str, out_required: bool) -> None:
    parser.add_argument("--data", default=None, metavar="SPEC", help=_DATA_HELP)
    parser.add_argument("--blocks", default="8x8", metavar="RxC", help="R row blocks × C column blocks "
                                                                      "(default 8x8)")
    parser.add_argument("--method", default="double-perm", choices=METHODS,
                        help="vertex permutation (default double-perm, Plexus §5.1; balanced-perm balances the "
                             "nnz of row and column bands greedily)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the permutations and synthetic graphs")
    parser.add_argument("--out", required=out_required, default=None, metavar="DIR" if out_required else "FILE",
                        help=out_help)


def add_shard_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Options of ``gridgnn shard`` (see the module docstring)."""
    _add_common(parser, "output directory of the sharded dataset", out_required=True)
    parser.add_argument("--node-chunks", type=int, default=None, metavar="K",
                        help="chunks of the node arrays (default min(R*C, ceil(n/1024)))")
    parser.add_argument("--no-normalize", action="store_true",
                        help="store M as given instead of the GCN matrix D^-1/2 (M+I) D^-1/2")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace the sharded dataset already in --out (once the new one is complete)")
    parser.add_argument("--memory-budget", default=None, metavar="SIZE",
                        help="memory this command may use (e.g. 2G, 512M; default what the machine has free): a text "
                             "edge list, Matrix Market file or generated R-MAT graph (edgelist:FILE, mtx:FILE, "
                             "synthetic:rmat?...) that would not fit is sharded in passes within it, giving the same "
                             "dataset")
    return parser


_SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mb": 1 << 20,
               "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30, "t": 1 << 40, "tb": 1 << 40,
               "tib": 1 << 40}


def parse_size(text) -> int:
    """``"2G"``, ``"512M"``, ``"1.5GiB"``, ``"100000"`` (bytes) → bytes (powers of 1024).

    Raises:
        GridGnnError: anything else, or a size below 1 MiB.
    """
    if isinstance(text, (int, np.integer)) and not isinstance(text, bool):
        value = int(text)
    else:
        m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*", str(text))
        unit = m.group(2).lower() if m else None
        if m is None or unit not in _SIZE_UNITS:
            raise GridGnnError(f"--memory-budget must be a size such as 2G, 512M or a number of bytes, got {text!r}")
        value = float(m.group(1)) * _SIZE_UNITS[unit]
        if not math.isfinite(value) or value > 1 << 62:
            raise GridGnnError(f"--memory-budget {text!r} is larger than any machine's memory")
        value = int(value)
    if value < 1 << 20:
        raise GridGnnError(f"--memory-budget {text!r} is below 1 MiB")
    return value


def _check_shard_out(out: str, overwrite: bool) -> None:
    """``gridgnn shard --out DIR``: a new folder, an empty one, or (with ``--overwrite``) a sharded dataset —
    never a folder of other files, which the replacement would delete. Checked before anything is created, and
    again once :func:`shard` holds the folder's lock (its ``.gridgnn.lock`` does not count as a file)."""
    p = Path(out)
    if Path.cwd().resolve().is_relative_to(p.resolve()):  # (the folder is written aside and swapped in)
        raise GridGnnError(f"--out {out} is the working directory or holds it, which writing the dataset replaces; "
                           "give a folder beside it or inside it")
    if p.absolute().parent.is_dir():
        _clean_stale(p.absolute())  # first: a dataset a killed run moved aside is back, and --overwrite applies to it
    if p.is_symlink():
        raise GridGnnError(f"--out {out} is a symbolic link; give the folder it points to")
    if p.exists() and not p.is_dir():
        raise GridGnnError(f"--out {out} exists and is not a directory")
    if not p.is_dir() or all(q.name == OutLock.NAME for q in p.iterdir()):
        return
    if not (p / "meta.json").is_file():
        raise GridGnnError(f"--out {out} holds files and no sharded dataset (no meta.json); choose an empty or "
                           "new folder")
    foreign = foreign_entry(p, ignore=(OutLock.NAME,))
    if foreign is not None:
        raise GridGnnError(f"--out {out} holds {foreign}, which is not part of a sharded dataset (replacing the "
                           "folder would delete it); choose an empty or new folder")
    if not overwrite:
        raise GridGnnError(f"--out {out} already holds a sharded dataset; add --overwrite (Python: overwrite=True) "
                           "to replace it, or choose another --out")


def _side_name(target: Path, kind: str, pid: int | None = None) -> str:
    """The hidden folder beside ``target`` that a shard of this host writes (``kind`` ``tmp``) or moves the previous
    dataset to (``old``): ``.NAME.KIND-HOST-PID`` (the host: on a shared file system a PID means nothing elsewhere)."""
    import os
    import socket

    return f".{target.name}.{kind}-{socket.gethostname()}-{os.getpid() if pid is None else pid}"


def _clean_stale(target: Path) -> None:
    """What a killed ``gridgnn shard`` of this host (SIGKILL: no clean-up of its own) left beside ``target``: its
    half-written ``tmp`` folder is removed, and an ``old`` one caught between its two renames is put back in place
    when ``target`` is missing (else removed). Folders of a process of this host still running, and any other host's,
    are left alone; this process's own PID is stale here (it has written nothing yet)."""
    import os
    import shutil

    from ..distributed.launch import process_alive

    for kind in ("tmp", "old", "scratch"):
        prefix = _side_name(target, kind, pid=0)[:-1]  # ".NAME.KIND-HOST-"
        for p in sorted(target.parent.iterdir()):
            pid = p.name[len(prefix):]
            if not p.name.startswith(prefix) or not pid.isdigit() or \
                    (int(pid) != os.getpid() and process_alive(int(pid))):
                continue
            try:
                if kind == "old" and not os.path.lexists(target):
                    os.replace(p, target)  # an interrupted swap: the previous dataset back
                else:
                    shutil.rmtree(p)
            except FileNotFoundError:
                continue  # another shard cleaned it first
            except OSError as exc:
                raise GridGnnError(f"cannot clean {p} (left by a killed gridgnn shard): {exc.strerror or exc}") \
                    from None


def _write_replacing(out: str, write, lock=None) -> dict:
    """``write(folder)`` into a new hidden folder beside ``out``, then put it in ``out``'s place (the previous
    dataset is removed only once the new one is complete; a failure leaves ``out`` as it was). ``lock``: the
    :class:`~gridgnn.graph.files.OutLock` of ``out``, released once the new folder is in place (its file went
    with the previous folder, so releasing it there cannot remove the lock of a run that has locked the new one)."""
    import os
    import shutil

    target = Path(out).absolute()
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / _side_name(target, "tmp")
    old = target.parent / _side_name(target, "old")
    try:
        meta = write(tmp)
        if target.exists():
            os.replace(target, old)
        os.replace(tmp, target)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if old.exists() and not target.exists():
            os.replace(old, target)
        if isinstance(exc, GridGnnError):  # a write of gridgnn.graph.files (meta.json) keeps its OSError
            cause = getattr(exc, "os_error", None)
        else:
            cause = os_error_in(exc) if isinstance(exc, Exception) else None
        if cause is not None:  # a full disk, a folder that refuses files: one line naming the dataset
            where = os.path.relpath(cause.filename, tmp) if isinstance(cause.filename, str) else ""
            if where.startswith(".."):  # a file outside the new dataset: a streamed shard's scratch file
                where = str(cause.filename)
            named = f" ({where})" if where else ""
            raise write_error(f"the sharded dataset {out}{named}", cause) from None
        raise
    if lock is not None:
        lock.path = str(old / os.path.basename(lock.path))
        lock.release()
    shutil.rmtree(old, ignore_errors=True)
    return meta


def add_perm_report_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Options of the permutation report (``gridgnn partition --method *-perm --blocks RxC``)."""
    _add_common(parser, "write FILE.json, FILE.perm_r.npy, FILE.perm_c.npy and FILE (row block per vertex)",
                out_required=False)
    return parser


def _load(args):
    from ..graph.spec import load_graph

    return load_graph(getattr(args, "data", None), seed=checked_seed(getattr(args, "seed", 0) or 0))


def perm_report(graph, method: str, blocks, seed: int = 0) -> tuple[np.ndarray, np.ndarray, dict]:
    r"""Permutations of ``method`` for ``blocks`` and their balance on :math:`\hat M`.

    Returns:
        ``(perm_r, perm_c, report)`` where ``report`` holds the keys listed in the module docstring (except the
        file names).
    """
    from ..graph.graph import gcn_normalize

    R, C = parse_blocks(blocks)
    if method not in METHODS:
        raise GridGnnError(f"unknown permutation method {method!r}; valid: {', '.join(METHODS)}")
    _check_blocks_fit(R, C, graph.n)
    mat = gcn_normalize(graph)
    t0 = time.perf_counter()
    perm_r, perm_c = make_permutations(method, mat, R, C, seed)
    seconds = time.perf_counter() - t0
    rep = balance_report(mat, perm_r, perm_c, R, C)
    ident = np.arange(graph.n, dtype=np.int64)
    orig = balance_report(mat, ident, ident, R, C)["nnz_max_over_mean"]
    report = dict(method=method, blocks=[R, C], n=int(graph.n), nnz=int(mat.nnz), seed=int(seed),
                  seconds=seconds, matrix="gcn_normalized (D^-1/2 (M+I) D^-1/2)", **rep,
                  nnz_max_over_mean_original=orig, graph=graph.name)
    return perm_r, perm_c, report


def run_perm_report(args) -> int:
    r"""``gridgnn partition --method M --blocks RxC`` for a permutation method ``M``.

    Args:
        args: an :class:`argparse.Namespace` with ``data``, ``method``, ``blocks`` (``"RxC"`` or a pair),
            ``seed`` and ``out`` (``None``: print only).

    Returns:
        0 (errors raise :class:`~gridgnn.errors.GridGnnError`).
    """
    graph = _load(args)
    method = getattr(args, "method", "double-perm")
    perm_r, perm_c, report = perm_report(graph, method, getattr(args, "blocks", "8x8"),
                                         checked_seed(getattr(args, "seed", 0) or 0))
    R, C = report["blocks"]
    out = getattr(args, "out", None)
    if out:
        from ..partition.partitioners import partition_text
        out = Path(out)
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise GridGnnError(f"cannot write permutation report {out}: {exc.strerror or exc}") from exc
        names = dict(perm_r=out.name + ".perm_r.npy", perm_c=out.name + ".perm_c.npy", partition=out.name)
        for key, perm in (("perm_r", perm_r), ("perm_c", perm_c)):  # each file complete or absent
            with atomic_write(str(out.parent / names[key])) as fh:
                np.save(fh, perm)
        # row block of every vertex under perm_r, original order
        part = np.empty(graph.n, dtype=np.int64)
        part[perm_r] = np.repeat(np.arange(R, dtype=np.int64), np.diff(even_bounds(graph.n, R)))
        with atomic_write(str(out), "w") as fh:
            fh.write(partition_text(part))
        report["files"] = names
        with atomic_write(str(out) + ".json", "w") as fh:
            json.dump(report, fh, indent=1)
    print(f"{method} on {graph.name} (n={graph.n}, nnz of M̂={report['nnz']}), {R}x{C} blocks: "
          f"nnz max/mean {report['nnz_max_over_mean']:.4f} (rc {report['nnz_max_over_mean_rc']:.4f}, "
          f"cr {report['nnz_max_over_mean_cr']:.4f}; original order {report['nnz_max_over_mean_original']:.4f}), "
          f"permutation {report['seconds']:.2f} s" + (f"; wrote {out}.json, {out}.perm_r.npy, {out}.perm_c.npy "
                                                            f"and {out}" if out else ""))
    return 0


#: Peak bytes of the in-memory path per byte of edge-list text (the parsed lines and tokens dominate; measured
#: with tracemalloc: 37 on a file of 600,000 short lines); a Matrix Market file is held to it too (its ``loadtxt``
#: parse costs less: the passes then start somewhat earlier than they must)
IN_MEMORY_BYTES_PER_TEXT_BYTE = 40


#: Bytes the in-memory shard of a generated R-MAT graph holds per generated edge, beside its node data: the
#: generation, the Graph, M̂ and its permuted versions (measured: 7.54 GiB at scale 22, edge factor 16, 64 features —
#: about 100 bytes per edge beside the features)
IN_MEMORY_BYTES_PER_RMAT_EDGE = 112

#: The sources sharded in passes when they do not fit (:class:`~gridgnn.graph.stream.StreamedEdgeList`): the text
#: formats, and R-MAT generated a piece at a time.
STREAMED_SCHEMES = ("edgelist", "mtx", "synthetic:rmat")


def _in_memory_bytes(scheme: str, path, params) -> int | None:
    """What sharding the source in memory would take, roughly (``None``: a file the loader will name the problem of)."""
    if scheme == "synthetic:rmat":
        try:
            scale, sizes = int(params["scale"]), [int(params.get(k, d)) for k, d in (("edge_factor", 16),
                                                                                    ("features", 16))]
        except (TypeError, ValueError, OverflowError):
            return None
        if not 1 <= scale <= 30 or min(sizes) < 1:
            return None  # the generator names the bad parameter, in one line
        n = 1 << scale
        return IN_MEMORY_BYTES_PER_RMAT_EDGE * n * sizes[0] + n * (4 * sizes[1] + BYTES_PER_VERTEX)
    try:
        return os.path.getsize(Path(path).expanduser()) * IN_MEMORY_BYTES_PER_TEXT_BYTE
    except OSError:
        return None


def _check_blocks_fit(R: int, C: int, n: int) -> None:
    """Refuse ``--blocks RxC`` on a graph of fewer than ``max(R, C)`` vertices, in one line."""
    if R > n or C > n:
        raise GridGnnError(f"--blocks {R}x{C} needs at least {max(R, C)} vertices, the graph has {n}")


def _streamable(data):
    """``(scheme, path, params)`` of a SPEC that ``gridgnn shard`` can read in passes (:data:`STREAMED_SCHEMES`,
    ``synthetic:rmat`` with its ``scale``), else ``None`` (read whole: ``--memory-budget`` does not bound it)."""
    if not isinstance(data, str):
        return None
    try:
        scheme, path, params = parse_spec(data)
    except GridGnnError:
        return None  # the loader names the SPEC's problem
    if scheme not in STREAMED_SCHEMES or (scheme == "synthetic:rmat" and "scale" not in params):
        return None
    return scheme, path, params


def _streamed_source(data, budget: int | None, method: str):
    """``(scheme, path, params)`` of an ``edgelist:``, ``mtx:`` or ``synthetic:rmat`` SPEC that does not fit ``budget``
    (default: the memory free now) in memory, and so is sharded in passes; ``None`` for any other data (read in
    memory). What the passes cannot do (``balanced-perm``, edge features) is refused now with a budget given, and read
    in memory without one, as before there were passes (the estimate is rough: such a source may fit, and nothing
    checks that it does)."""
    parsed = _streamable(data)
    if parsed is None:
        return None
    scheme, path, params = parsed
    need = _in_memory_bytes(scheme, path, params)
    if need is None or need <= (available_memory() if budget is None else budget):
        return None
    cannot = (f"the {method} permutation reads the matrix (use one of {', '.join(SIZE_ONLY_METHODS)})"
              if method not in SIZE_ONLY_METHODS else
              "a sharded dataset holds no edge features (drop edge_features=1)" if params.get("edge_features") else None)
    if cannot is None:
        return scheme, path, params
    if budget is None:
        return None
    raise GridGnnError(f"{path or data} does not fit --memory-budget in memory, so it would be sharded in passes, but "
                       f"{cannot}")


def shard(data, out: str, *, blocks="8x8", method: str = "double-perm", seed: int = 0, node_chunks: int | None = None,
          normalize: bool = True, overwrite: bool = False, memory_budget=None) -> dict:
    r"""Write a graph as a sharded dataset folder (what ``gridgnn shard`` does; train on it with
    ``data="sharded:OUT"``, where each rank reads only its blocks, Plexus §5.4).

    .. code-block:: python

        import gridgnn

        meta = gridgnn.shard("synthetic:sbm?n=4000&features=16", "runs/sbm-sh", blocks="2x2", method="double-perm")
        gridgnn.train(data="sharded:runs/sbm-sh", algo="plexus", nproc=4, grid=[2, 2, 1])

    Args:
        data (str | torch_geometric.data.Data | Graph): a data SPEC (as ``--data``) or a graph in memory.
        out (str): the dataset folder: new, empty, or (``overwrite``) a sharded dataset, replaced once the new one
            is complete; a folder of other files is refused.
        blocks (str | tuple): ``"RxC"`` or ``(R, C)``: row × column blocks of the stored matrix. (default: 8×8)
        method (str): the vertex permutation, one of :data:`~gridgnn.partition.permute.METHODS`.
            (default: ``"double-perm"``)
        seed (int): seed of the permutation (and of a synthetic graph). (default: 0)
        node_chunks (int, optional): chunks of the node arrays. (default: ``min(R·C, ceil(n/1024))``)
        normalize (bool): store the GCN matrix :math:`D^{-1/2}(M+I)D^{-1/2}` (training needs it) rather than
            :math:`M`. (default: ``True``)
        overwrite (bool): replace a sharded dataset already in ``out``. (default: ``False``)
        memory_budget (int | str, optional): bytes (or ``"2G"``) this call may use; a text edge list, Matrix
            Market file or generated R-MAT graph (``edgelist:FILE``, ``mtx:FILE``, ``synthetic:rmat?...``) whose
            in-memory path would need more is sharded in passes within it
            (:mod:`gridgnn.graph.stream`: the same dataset, bit for bit). (default: the memory free now)

    Returns:
        The dataset's ``meta.json`` as a dict (sizes, blocks, balance ``nnz_max_over_mean``, files), with
        ``streamed``: whether it was sharded in passes.

    Raises:
        GridGnnError: bad input or an ``out`` that may not be written.
    """
    from ..graph.graph import gcn_normalize
    from ..graph.sharded import write_sharded
    from ..graph.spec import load_graph

    if not out:
        raise GridGnnError("gridgnn shard needs --out DIR (Python: out=)")
    out = str(out)
    for name, value in (("normalize", normalize), ("overwrite", overwrite)):
        if not isinstance(value, bool):
            raise GridGnnError(f"{name} must be True or False, got {value!r}")
    _check_shard_out(out, overwrite)
    R, C = parse_blocks(blocks)
    if method not in METHODS:
        raise GridGnnError(f"unknown permutation method {method!r}; valid: {', '.join(METHODS)}")
    seed = checked_seed(0 if seed is None else seed)
    budget = None if memory_budget is None else parse_size(memory_budget)
    if budget is not None and isinstance(data, str):
        parse_spec(data)  # (a SPEC that does not parse: its own error first)
    if budget is not None and _streamable(data) is None:  # (read whole: the budget would bound nothing)
        raise GridGnnError(f"--memory-budget bounds the data read in passes ({', '.join(STREAMED_SCHEMES)}?scale=); "
                           "this data is read whole in memory: leave --memory-budget out")
    streamed = _streamed_source(data, budget, method)
    # one shard per folder: hold --out (OutLock, as train does) from here until the new dataset is in place
    created = make_out_dir(out)
    try:
        lock = OutLock(out)
    except BaseException:
        remove_empty_dirs(created)
        raise
    done = False
    try:
        _check_shard_out(out, overwrite)  # again, under the lock: another shard may have written meanwhile
        if streamed is not None:
            meta = _shard_streamed(data, streamed, out, R=R, C=C, method=method, seed=seed, node_chunks=node_chunks,
                                   normalize=normalize, budget=budget, lock=lock)
            done = True
            return {"edge_features_not_written": 0, "relations_not_written": 0, **meta, "streamed": True}
        graph = load_graph(data, seed=seed)
        _check_blocks_fit(R, C, graph.n)
        mat = gcn_normalize(graph) if normalize else graph.csr()
        perm_r, perm_c = make_permutations(method, mat, R, C, seed)
        del mat
        meta = _write_replacing(out, lambda folder: write_sharded(
            graph, folder, perm_r=perm_r, perm_c=perm_c, blocks=(R, C), partition_name=method, normalize=normalize,
            seed=seed, node_chunks=node_chunks), lock)
        done = True
    finally:
        lock.release()
        if not done:
            remove_empty_dirs(created)
    return {**meta, "edge_features_not_written": graph.edge_dim, "relations_not_written": graph.num_relations,
            "original_ids_not_written": graph.original_ids is not None, "streamed": False}


def _shard_streamed(data: str, streamed, out: str, *, R: int, C: int, method: str, seed: int, node_chunks,
                    normalize: bool, budget: int | None, lock) -> dict:
    """:func:`shard` of an edge list or Matrix Market file in passes (:class:`~gridgnn.graph.stream.StreamedEdgeList`), its scratch
    folder beside ``out`` (removed whatever happens; a killed run's is swept by the next shard)."""

    scheme, path, params = streamed
    target = Path(out).absolute()
    scratch = target.parent / _side_name(target, "scratch")
    edges = None
    try:
        try:
            room = available_memory() if budget is None else budget
            if scheme == "synthetic:rmat":  # its size known before any edge is generated
                _check_blocks_fit(R, C, 1 << int(params["scale"]))
                edges = StreamedEdgeList.rmat(scratch, memory_budget=room, spec=data, seed=seed,
                                              disk=(target.parent, size_only_versions(method), (R, C)), **params)
            else:
                edges = StreamedEdgeList(Path(path).expanduser(), scratch, memory_budget=room,
                                         directed=params.get("directed"), num_nodes=params.get("num_nodes"),
                                         relabel=params.get("relabel", False), spec=data, fmt=scheme)
        except Exception as exc:  # a full disk, a folder that refuses files: one line naming the scratch folder
            cause = None if isinstance(exc, GridGnnError) else os_error_in(exc)
            if cause is None:
                raise
            raise write_error(f"the scratch files of gridgnn shard ({scratch})", cause) from None
        _check_blocks_fit(R, C, edges.n)
        perm_r, perm_c = permutations_of_size(method, edges.n, seed)
        meta = _write_replacing(out, lambda folder: edges.write_sharded(
            folder, perm_r=perm_r, perm_c=perm_c, blocks=(R, C), partition_name=method, seed=seed,
            normalize=normalize, node_chunks=node_chunks), lock)
        return {**meta, "original_ids_not_written": edges.original_ids is not None}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def run_shard_command(args) -> int:
    r"""``gridgnn shard``: :func:`shard`, then print a summary.

    Args:
        args: an :class:`argparse.Namespace` with ``data``, ``blocks``, ``method``, ``seed``, ``out`` and
            optionally ``node_chunks`` and ``no_normalize``.

    Returns:
        0 (errors raise :class:`~gridgnn.errors.GridGnnError`).
    """
    t0 = time.perf_counter()
    meta = shard(getattr(args, "data", None), getattr(args, "out", None), blocks=getattr(args, "blocks", "8x8"),
                 method=getattr(args, "method", "double-perm"), seed=int(getattr(args, "seed", 0) or 0),
                 node_chunks=getattr(args, "node_chunks", None), normalize=not getattr(args, "no_normalize", False),
                 overwrite=bool(getattr(args, "overwrite", False)),
                 memory_budget=getattr(args, "memory_budget", None))
    seconds = time.perf_counter() - t0
    size = sum(f.stat().st_size for f in Path(args.out).rglob("*") if f.is_file())
    by = meta["nnz_max_over_mean_by_version"]
    per = ", ".join(f"{v} {r:.4f}" for v, r in by.items())
    R, C = meta["blocks"]
    print(f"sharded {meta['name']} (n={meta['n']}, nnz={meta['nnz']}) into {R}x{C} blocks with {meta['method']} "
          f"(seed {meta['seed']}): nnz max/mean {meta['nnz_max_over_mean']:.4f} ({per}); "
          f"{len(meta['versions'])} matrix version(s), {len(meta['node_chunk_bounds']) - 1} node chunk(s), "
          f"{size / 2**20:.1f} MiB in {args.out}, {seconds:.1f} s"
          + (" (in passes: in memory it would not fit the memory budget)" if meta.get("streamed") else ""))
    if meta.get("edge_features_not_written"):
        print(f"note: the graph's edge features ({meta['edge_features_not_written']} wide) are not written: a "
              "sharded dataset holds none (a model that reads them trains on the original --data)")
    if meta.get("relations_not_written"):
        print(f"note: the graph's relation types ({meta['relations_not_written']}) are not written: a sharded "
              "dataset holds none (a model that reads them trains on the original --data)")
    if meta.get("original_ids_not_written"):
        print("note: the file's own vertex ids are not written (vertices are renumbered 0..n-1 in the order of "
              "their ids): outputs of a run on the sharded dataset (--save-logits, predict) have no node_ids.npy; "
              "the original --data writes it")
    return 0
