r"""The data SPEC grammar of the command line: one string names a graph source.

.. code-block:: text

    synthetic:sbm?n=4000&classes=8&avg_degree=10&features=32   (also p_in_ratio=, noise=, degree_exponent=,
                                                                train_per_class=, edge_features=)
    synthetic:rmat?scale=12&edge_factor=16                     (also features=, classes=)
    synthetic:typed-sbm?n=3000&types=3&relations=4             vertex and relation types (also classes=,
                                                                avg_degree=, features=, p_in=, noise=,
                                                                train_per_class=), see gridgnn.graph.hetero
    planetoid:DIR          directory with ind.<name>.* raw files (Cora, CiteSeer, PubMed)
    ogb:DIR                OGB node-property dataset, raw layout (raw/*.csv.gz, split/NAME/); parameters
                           split=NAME, directed=0|1 (default 0: reverse edges added), see :mod:`~gridgnn.graph.ogb`
    edgelist:FILE          text edge list; parameters directed=0|1, num_nodes=N, relabel=0|1, edge_features=0|1
                           (the columns after src dst are edge features)
    mtx:FILE               Matrix Market file; parameters num_nodes=N, relabel=0|1
    npz:FILE               .npz CSR archive (rows = destinations), see :func:`~gridgnn.graph.loaders.load_npz`

``num_nodes=N`` confirms a vertex count that the file alone makes implausible (more than
``2 * edges + 1,000,000``, e.g. one id ``999999999999``; see :mod:`gridgnn.graph.loaders`), ``relabel=1``
compacts the ids that occur to ``0..k-1`` and keeps the file's ids in ``Graph.original_ids``.

Parameters follow ``?`` as ``key=value`` pairs joined by ``&``; omitted parameters take the generator's
defaults. Relative paths are relative to the current directory. ``None`` or an empty string means
:data:`DEFAULT_SPEC`.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from ..errors import GridGnnError
from .graph import Graph
from .loaders import from_pyg, load_edgelist, load_mtx, load_npz, load_planetoid
from .ogb import load_ogb
from .hetero import from_hetero, typed_sbm_graph
from .synthetic import rmat_graph, sbm_graph

__all__ = ["DEFAULT_SPEC", "SCHEMES", "load_graph", "parse_spec", "spec_sizes"]

#: The graph used when no ``--data`` is given: small enough that a 2-layer GCN (hidden 16) trains 100 epochs in
#: seconds on 2 CPU cores, homophilous enough that it reaches about 0.85 test accuracy (chance 0.125, a
#: feature-only MLP about 0.35).
DEFAULT_SPEC = "synthetic:sbm?n=4000&classes=8&avg_degree=10&features=32"

SCHEMES = ("synthetic:sbm", "synthetic:rmat", "synthetic:typed-sbm", "planetoid", "ogb", "edgelist", "mtx", "npz")


def _int(v: str) -> int:
    return int(v)


def _float(v: str) -> float:
    return float(v)


def _str(v: str) -> str:
    return v


def _bool01(v: str) -> bool:
    if v.lower() in ("1", "true", "yes"):
        return True
    if v.lower() in ("0", "false", "no"):
        return False
    raise ValueError(v)


_TYPE_NAMES = {_int: "an integer", _float: "a number", _bool01: "0 or 1", _str: "a name"}

# parameters accepted by each scheme: name -> converter
_PARAMS: dict[str, dict[str, Callable[[str], object]]] = {
    "synthetic:sbm": dict(n=_int, classes=_int, avg_degree=_float, features=_int, p_in_ratio=_float,
                          noise=_float, degree_exponent=_float, train_per_class=_int, edge_features=_int),
    "synthetic:rmat": dict(scale=_int, edge_factor=_int, features=_int, classes=_int),
    "synthetic:typed-sbm": dict(n=_int, classes=_int, types=_int, relations=_int, avg_degree=_float, features=_int,
                                p_in=_float, noise=_float, train_per_class=_int),
    "planetoid": {},
    "ogb": dict(split=_str, directed=_bool01),
    "edgelist": dict(directed=_bool01, num_nodes=_int, relabel=_bool01, edge_features=_bool01),
    "mtx": dict(num_nodes=_int, relabel=_bool01),
    "npz": {},
}


def sharded_dir(spec) -> str | None:
    """The folder a ``sharded:DIR`` SPEC names (``~`` expanded; the scheme in any case, spaces around it as
    :func:`parse_spec` allows), or ``None`` for any other SPEC: the one test of whether data is a sharded dataset."""
    if not isinstance(spec, str):
        return None
    head, sep, rest = spec.strip().partition(":")
    return os.path.expanduser(rest) if sep and head.lower() == "sharded" else None


def spec_key(spec):
    """What ``spec`` names, for comparing two: its scheme, path (absolute, from the working directory) and
    parameters in any order and spacing (``sharded:DIR`` its folder; a value that does not parse, or is no string,
    as it is)."""
    if not isinstance(spec, str):
        return spec
    if sharded_dir(spec) is not None:
        return "sharded", _absolute(sharded_dir(spec)), []
    try:
        scheme, path, params = parse_spec(spec)
    except GridGnnError:
        return spec
    return scheme, None if path is None else _absolute(path), sorted(params.items())


def _absolute(path: str) -> str:
    """A SPEC's path as the loaders read it (``~`` expanded), absolute from the working directory."""
    return os.path.abspath(os.path.expanduser(path))


def absolute_spec(spec):
    """``spec`` with its path made absolute (from the working directory), as a record that is read from another
    folder must name it (a checkpoint resumed elsewhere reads the same file); a synthetic SPEC, one that does not
    parse, or no string, as it is."""
    if not isinstance(spec, str) or not isinstance(spec_key(spec), tuple) or spec_key(spec)[1] is None:
        return spec
    head, _, rest = spec.strip().partition(":")
    path, qsep, query = rest.rpartition("?") if head.lower() != "sharded" else (rest, "", "")
    if not qsep:
        path, query = rest, ""
    return f"{head}:{_absolute(path)}{qsep}{query}"


def parse_spec(spec: str) -> tuple[str, str | None, dict]:
    r"""Split a SPEC into ``(scheme, path, params)``.

    Args:
        spec: e.g. ``"synthetic:sbm?n=1000&classes=4"`` or ``"edgelist:data/g.txt?directed=1"``.

    Returns:
        ``scheme`` (one of :data:`SCHEMES`), ``path`` (``None`` for synthetic schemes) and the converted
        parameters.

    Raises:
        GridGnnError: unknown scheme, missing path, unknown, repeated or malformed parameter.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise GridGnnError(f"empty data spec; valid schemes: {', '.join(SCHEMES)}")
    spec = spec.strip()
    head, sep, rest = spec.partition(":")
    if not sep:
        raise GridGnnError(f"data spec {spec!r} has no scheme; expected SCHEME:..., valid schemes: "
                           f"{', '.join(SCHEMES)}")
    head = head.lower()
    if head == "synthetic":
        gen, _, query = rest.partition("?")
        scheme = f"synthetic:{gen.lower()}"
        if scheme not in _PARAMS:
            raise GridGnnError(f"unknown synthetic generator {gen!r} in {spec!r}; valid: sbm, rmat, typed-sbm")
        path = None
    elif head in _PARAMS:
        scheme = head
        path, qsep, query = rest.rpartition("?")
        if not qsep:
            path, query = rest, ""
        if not path:
            raise GridGnnError(f"data spec {spec!r} names no path; expected {scheme}:PATH")
    elif head == "sharded":
        raise GridGnnError(f"{spec!r} is a sharded dataset, which training and inference ranks read block by block "
                           "(--data sharded:DIR, data='sharded:DIR'); it is not loaded as one graph: give the SPEC "
                           "it was sharded from")
    else:
        raise GridGnnError(f"unknown data scheme {head!r} in {spec!r}; valid schemes: {', '.join(SCHEMES)}")
    allowed = _PARAMS[scheme]
    params: dict = {}
    for item in query.split("&") if query else []:
        key, eq, value = item.partition("=")
        valid = ", ".join(allowed) or "none"
        if key not in allowed:
            raise GridGnnError(f"unknown parameter {key!r} for {scheme} in {spec!r}; valid parameters: {valid}")
        if not eq or value == "":
            raise GridGnnError(f"parameter {key!r} of {scheme} has no value in {spec!r} (write {key}=VALUE)")
        if key in params:
            raise GridGnnError(f"parameter {key!r} given twice in {spec!r}")
        conv = allowed[key]
        try:
            params[key] = conv(value)
        except ValueError:
            raise GridGnnError(f"parameter {key}={value!r} of {scheme} must be {_TYPE_NAMES[conv]}") from None
    return scheme, path, params


def _synthetic_params(spec: str | None) -> tuple[str, dict] | None:
    """``(scheme, parameters with the generator's defaults filled in)`` of a synthetic SPEC, else ``None``."""
    import inspect

    if spec is None or (isinstance(spec, str) and not spec.strip()):
        spec = DEFAULT_SPEC
    try:
        scheme, _, params = parse_spec(spec)
    except GridGnnError:
        return None
    gen = {"synthetic:sbm": sbm_graph, "synthetic:rmat": rmat_graph}.get(scheme)
    if gen is None:
        return None
    full = {k: v.default for k, v in inspect.signature(gen).parameters.items() if v.default is not v.empty}
    return scheme, {**full, **params}


def spec_sizes(spec: str | None) -> tuple[int, int] | None:
    r"""``(vertices, peak bytes of generating the graph)`` that a synthetic SPEC fixes without generating it
    (``synthetic:sbm``: ``n``; ``synthetic:rmat``: ``2**scale``; the peak from
    :func:`~gridgnn.graph.synthetic.sbm_generation_bytes` / ``rmat_generation_bytes``); ``None`` for files and
    for parameters the generator would refuse (:func:`load_graph` reports those)."""
    from .synthetic import rmat_generation_bytes, sbm_generation_bytes

    got = _synthetic_params(spec)
    if got is None:
        return None
    scheme, p = got
    try:
        if scheme == "synthetic:sbm":
            n, d, f = int(p["n"]), float(p["avg_degree"]), int(p["features"])
            if n < 1 or f < 1 or not 0 < d < float("inf"):
                return None
            return n, sbm_generation_bytes(n, d, f)
        scale, ef, f = int(p["scale"]), int(p["edge_factor"]), int(p["features"])
        if not (1 <= scale <= 30 and ef >= 1 and f >= 1):
            return None
        return 1 << scale, rmat_generation_bytes(scale, ef, f)
    except (KeyError, TypeError, ValueError, OverflowError):
        return None


def load_graph(spec=None, *, seed: int = 0) -> Graph:
    r"""Load or generate the graph named by a data SPEC (see the module docstring), or convert one in memory.

    Args:
        spec (str | torch_geometric.data.Data | torch_geometric.data.HeteroData | Graph, optional): the SPEC
            string (``None`` or ``""``: :data:`DEFAULT_SPEC`); a PyG ``Data`` (``edge_index``, optional ``x``,
            ``y``, masks, ``edge_weight``, ``edge_attr``, ``edge_type``; see :func:`~gridgnn.graph.loaders.from_pyg`);
            a PyG ``HeteroData`` (:func:`~gridgnn.graph.hetero.from_hetero`: vertex and relation types); or a
            :class:`Graph`, returned as is.
        seed (int, optional): seed of synthetic generators and of default random splits. (default: ``0``)

    Returns:
        The :class:`Graph` (``n`` vertices, CSR adjacency with rows = destinations, ``x`` ``n × f``, ``y``,
        masks), with ``meta["spec"]`` set to the spec string.

    Raises:
        GridGnnError: a bad spec (message lists the valid choices) or bad input data.
    """
    if isinstance(spec, Graph):
        return spec
    if spec is not None and not isinstance(spec, str):
        if hasattr(spec, "node_types") and hasattr(spec, "edge_types") and hasattr(spec, "metadata"):
            from .loaders import apply_defaults

            return apply_defaults(from_hetero(spec), seed=seed)
        if hasattr(spec, "edge_index"):
            return from_pyg(spec, seed=seed)
        raise GridGnnError(f"load_graph takes a data SPEC string, a PyG Data or HeteroData or a Graph, got {type(spec).__name__}")
    if spec is None or (isinstance(spec, str) and not spec.strip()):
        spec = DEFAULT_SPEC
    scheme, path, params = parse_spec(spec)
    if scheme == "synthetic:sbm":
        g = sbm_graph(seed=seed, **params)
    elif scheme == "synthetic:rmat":
        if "scale" not in params:
            raise GridGnnError(f"synthetic:rmat needs scale= (log2 of the vertex count), e.g. "
                               f"synthetic:rmat?scale=12&edge_factor=16; got {spec!r}")
        g = rmat_graph(seed=seed, **params)
    elif scheme == "synthetic:typed-sbm":
        g = typed_sbm_graph(seed=seed, **params)
    else:
        p = Path(path).expanduser()
        if scheme == "planetoid":
            g = load_planetoid(p, seed=seed)
        elif scheme == "ogb":
            g = load_ogb(p, split=params.get("split"), directed=params.get("directed", False), seed=seed)
        elif scheme == "edgelist":
            g = load_edgelist(p, params.get("directed"), num_nodes=params.get("num_nodes"),
                              relabel=params.get("relabel", False), seed=seed,
                              edge_features=params.get("edge_features", False))
        elif scheme == "mtx":
            g = load_mtx(p, num_nodes=params.get("num_nodes"), relabel=params.get("relabel", False), seed=seed)
        else:
            g = load_npz(p, seed=seed)
    g.meta["spec"] = spec
    return g
