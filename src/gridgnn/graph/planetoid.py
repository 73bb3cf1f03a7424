r"""Reading the Planetoid raw files (``ind.<name>.*``) without running code from them.

The files are Python 2 pickles. :func:`pickle.load` would call any global a file names (a crafted
``ind.cora.graph`` can run ``os.system``), so they are read by :class:`PlanetoidUnpickler`, whose
:meth:`~PlanetoidUnpickler.find_class` admits only these names, and none of them is the real class:

===========================================================  ==========================================
global in the file                                           what the unpickler gives
===========================================================  ==========================================
``numpy.core.multiarray._reconstruct``,                      a placeholder that records the array state
``numpy._core.multiarray._reconstruct``                      (only ``_reconstruct(ndarray, (0,), b'b')``)
``numpy.ndarray``                                            a marker passed to ``_reconstruct``
``numpy.dtype``                                              a placeholder for a plain numeric dtype
                                                             (``b1``, ``i1``–``i8``, ``u1``–``u8``,
                                                             ``f2``–``f8``; ``O8`` inside ``lil`` rows)
``numpy.core.multiarray.scalar``,                            a Python ``int``/``float`` from the bytes
``numpy._core.multiarray.scalar``
``numpy.core.numeric._frombuffer``,                          the array placeholder, filled from the bytes
``numpy._core.numeric._frombuffer``                          (pickle protocol 5)
``scipy.sparse.{csr,csc,coo,lil}.*_matrix`` (also            a placeholder that records the state dict
``scipy.sparse._csr`` ..., ``scipy.sparse`` and ``*_array``)
``copy_reg._reconstructor`` / ``copyreg._reconstructor``     only ``(placeholder, object, None)``
``collections.defaultdict``                                  a plain ``dict`` (factory ``list`` only)
``__builtin__``/``builtins``: ``list dict set frozenset``    the builtin
``tuple int float bool object``
``_codecs.encode``                                           only with ``latin1`` (Python 3 bytes)
===========================================================  ==========================================

Anything else raises :class:`~gridgnn.errors.GridGnnError` naming the file and the refused global, before
it is called. The arrays and matrices are then rebuilt by this module from the recorded state after
checking dtypes, shapes and byte counts, so no NumPy or SciPy code runs on unchecked state. Before
unpickling, every opcode is scanned with :func:`pickletools.genops` on the bytes in memory: declared string
lengths must fit the file and memo indices must be below the file size (the C unpickler allocates memo
tables and byte strings of the declared size before reading them). Persistent ids, extension codes,
out-of-band buffers and the old ``INST``/``OBJ`` opcodes are refused.

:func:`read_planetoid_arrays` then reproduces ``torch_geometric.io.read_planetoid_data`` (PyG 2.x) for Cora,
CiteSeer and PubMed: ``x = [allx; tx]``, ``y = argmax [ally; ty]`` with the test rows put in the order of
``ind.<name>.test.index``, zero rows for test ids missing from ``tx`` (CiteSeer's isolated nodes), 20 nodes
per class for training (the rows of ``y``), the next 500 for validation (fewer if the graph ends first, where
PyG fails), the test ids for test, and the
edges of the adjacency dict without self-loops and duplicates, sorted by (destination, source).
"""
from __future__ import annotations

import io
import pickle
import pickletools
import warnings
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from ..errors import GridGnnError
from .safe_io import ISOLATED_SLACK, PARSE_ERRORS, check_alloc, check_vertex_count, regular_file, short

__all__ = ["PlanetoidUnpickler", "load_pickle", "read_planetoid_arrays", "PARTS"]

#: The eight raw files of a Planetoid dataset, in the order PyG reads them.
PARTS = ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")

_ALLOWED_DTYPES = {"b1", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "f2", "f4", "f8", "O8", "O4"}
_REFUSED_OPS = {"PERSID", "BINPERSID", "EXT1", "EXT2", "EXT4", "NEXT_BUFFER", "READONLY_BUFFER", "INST",
                "OBJ"}
_MEMO_OPS = {"PUT", "BINPUT", "LONG_BINPUT", "GET", "BINGET", "LONG_BINGET"}


class _Refused(Exception):
    """A pickle that does something a Planetoid file never does (turned into a GridGnnError by the caller)."""


# ---------------------------------------------------------------------------------------------- placeholders
class _NdarrayMarker:
    """Stands for ``numpy.ndarray`` as the class argument of ``_reconstruct``."""

    def __setstate__(self, state) -> None:  # a BUILD on the class itself fails (unbound call) instead of
        raise _Refused("state set on numpy.ndarray")  # setting class attributes


class _Callable:
    """An admitted function: callable, but a BUILD opcode on it cannot set attributes (no ``__dict__``)."""

    __slots__ = ("fn",)

    def __init__(self, fn) -> None:
        self.fn = fn

    def __call__(self, *args, **kwargs):
        return self.fn(*args, **kwargs)

    def __setstate__(self, state) -> None:
        raise _Refused(f"state set on the function {self.fn.__name__}")


class _ArrayState:
    """An ndarray under construction: ``__setstate__`` records ``(shape, dtype, fortran, raw)``."""

    state = None

    def __setstate__(self, state) -> None:
        if self.state is not None:
            raise _Refused("an array state is set twice")
        if not isinstance(state, tuple) or len(state) not in (4, 5):
            raise _Refused(f"unexpected ndarray state {short(state)}")
        if len(state) == 5:
            state = state[1:]
        self._set(*state)

    def _set(self, shape, dtype, fortran, raw) -> None:
        if not isinstance(shape, tuple) or len(shape) > 8 or not all(type(s) is int and s >= 0 for s in shape):
            raise _Refused(f"invalid array shape {short(shape)}")
        if not isinstance(dtype, _DtypeState):
            raise _Refused(f"array dtype is {type(dtype).__name__}, not a numpy dtype")
        if not isinstance(fortran, (bool, int)):
            raise _Refused(f"invalid fortran flag {short(fortran)}")
        self.state = (shape, dtype.resolve(), bool(fortran), raw)

    def array(self, what: str) -> np.ndarray:
        r"""The numeric array (object arrays are refused here; see :meth:`object_rows`)."""
        if self.state is None:
            raise _Refused(f"{what}: array without data")
        shape, dtype, fortran, raw = self.state
        if dtype.hasobject:
            raise _Refused(f"{what}: object array where numbers are expected")
        if isinstance(raw, str):
            raw = raw.encode("latin1")
        if not isinstance(raw, (bytes, bytearray)):
            raise _Refused(f"{what}: array data is {type(raw).__name__}, not bytes")
        count = 1
        for s in shape:
            count *= s
        if count * dtype.itemsize != len(raw):
            raise _Refused(f"{what}: shape {shape} of {dtype} needs {count * dtype.itemsize} bytes, the file "
                           f"holds {len(raw)}")
        arr = np.frombuffer(bytes(raw), dtype=dtype).reshape(shape, order="F" if fortran else "C")
        return np.ascontiguousarray(arr.astype(dtype.newbyteorder("=")))

    def object_rows(self, what: str) -> list:
        r"""The elements of a 1-D object array (rows of a ``lil`` matrix)."""
        if self.state is None:
            raise _Refused(f"{what}: array without data")
        shape, dtype, _, raw = self.state
        if not dtype.hasobject or len(shape) != 1 or not isinstance(raw, list) or len(raw) != shape[0]:
            raise _Refused(f"{what}: expected a 1-D object array of lists")
        return raw


class _DtypeState:
    """A dtype under construction: ``numpy.dtype(name, align, copy)`` then ``__setstate__``."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.order = "="

    def __setstate__(self, state) -> None:
        if not isinstance(state, tuple) or len(state) < 8 or state[0] not in (3, 4):
            raise _Refused(f"unexpected dtype state {short(state)}")
        order, subarray, names, fields = state[1], state[2], state[3], state[4]
        if order not in ("<", ">", "|", "=") or subarray is not None or names is not None or fields is not None:
            raise _Refused(f"dtype state {short(state)} is not a plain numeric dtype")
        self.order = order

    def resolve(self) -> np.dtype:
        dt = np.dtype(self.name)
        return dt.newbyteorder(self.order) if self.order in "<>" and dt.itemsize > 1 and not dt.hasobject else dt


class _SparseState:
    """A scipy.sparse matrix under construction: ``__setstate__`` records the instance dict."""

    fmt = "?"
    state = None

    def __new__(cls, *args, **kwargs):
        if args or kwargs:
            raise _Refused(f"sparse matrix built with arguments {short(args)}")
        return object.__new__(cls)

    def __setstate__(self, state) -> None:
        if isinstance(state, tuple) and len(state) == 2 and state[1] is None:
            state = state[0]  # (dict, slots) form
        if not isinstance(state, dict) or self.state is not None:
            raise _Refused(f"unexpected sparse matrix state {short(state)}")
        self.state = state


_SPARSE_CLASSES = {fmt: type(f"_{fmt.capitalize()}State", (_SparseState,), {"fmt": fmt})
                   for fmt in ("csr", "csc", "coo", "lil")}


def _reconstruct(cls, shape, typecode):
    if cls is not _NdarrayMarker or shape != (0,) or typecode not in (b"b", "b"):
        raise _Refused(f"_reconstruct{short((cls, shape, typecode), 80)} is not how numpy pickles an array")
    return _ArrayState()


def _frombuffer(buf, dtype, shape, order):
    if not isinstance(buf, (bytes, bytearray)) or order not in ("C", "F"):
        raise _Refused(f"_frombuffer of {type(buf).__name__} in order {short(order)}")
    arr = _ArrayState()
    arr._set(shape, dtype, order == "F", bytes(buf))
    return arr


def _dtype(name, align=0, copy=1):
    if not isinstance(name, str) or name not in _ALLOWED_DTYPES or align not in (0, False) \
            or copy not in (0, 1, True, False):
        raise _Refused(f"dtype {short(name)} is not a plain numeric dtype")
    return _DtypeState(name)


def _scalar(dtype, raw=None):
    if not isinstance(dtype, _DtypeState):
        raise _Refused("scalar without a numpy dtype")
    dt = dtype.resolve()
    if dt.hasobject:
        raise _Refused("object scalar")
    if isinstance(raw, str):
        raw = raw.encode("latin1")
    if not isinstance(raw, bytes) or len(raw) != dt.itemsize:
        raise _Refused(f"scalar of {dt} with {short(raw)}")
    return np.frombuffer(raw, dtype=dt)[0].item()


def _copyreg_reconstructor(cls, base, state):
    if not (isinstance(cls, type) and issubclass(cls, _SparseState)) or base is not object or state is not None:
        raise _Refused(f"copyreg._reconstructor{short((cls, base, state), 80)} is not a sparse matrix")
    return cls.__new__(cls)


def _defaultdict(factory=None, *args):
    if args or factory not in (None, list):
        raise _Refused(f"defaultdict{short((factory, *args))} is not an adjacency dict")
    return {}


def _codecs_encode(obj, encoding="utf-8", errors="strict"):
    if not isinstance(obj, str) or encoding not in ("latin1", "latin-1") or errors != "strict":
        raise _Refused(f"_codecs.encode with encoding {short(encoding)}")
    return obj.encode("latin1")


def _allowed_globals() -> dict:
    table = {}
    for mod in ("numpy.core.multiarray", "numpy._core.multiarray"):
        table[(mod, "_reconstruct")] = _Callable(_reconstruct)
        table[(mod, "scalar")] = _Callable(_scalar)
    for mod in ("numpy.core.numeric", "numpy._core.numeric"):
        table[(mod, "_frombuffer")] = _Callable(_frombuffer)
    table[("numpy", "ndarray")] = _NdarrayMarker
    table[("numpy", "dtype")] = _Callable(_dtype)
    for fmt, cls in _SPARSE_CLASSES.items():
        for mod in ("scipy.sparse", f"scipy.sparse.{fmt}", f"scipy.sparse._{fmt}"):
            table[(mod, f"{fmt}_matrix")] = cls
            table[(mod, f"{fmt}_array")] = cls
    for mod in ("copy_reg", "copyreg"):
        table[(mod, "_reconstructor")] = _Callable(_copyreg_reconstructor)
    table[("collections", "defaultdict")] = _Callable(_defaultdict)
    for mod in ("__builtin__", "builtins"):
        for name, obj in (("list", list), ("dict", dict), ("set", set), ("frozenset", frozenset),
                          ("tuple", tuple), ("int", int), ("float", float), ("bool", bool), ("object", object)):
            table[(mod, name)] = obj
    table[("_codecs", "encode")] = _Callable(_codecs_encode)
    return table


_GLOBALS = _allowed_globals()


class PlanetoidUnpickler(pickle.Unpickler):
    r"""An unpickler that resolves only the globals of the module docstring's table.

    Args:
        file: a binary file object (read from memory: see :func:`load_pickle`).
        path: the file name, for messages.
    """

    def __init__(self, file, path) -> None:
        super().__init__(file, encoding="latin1", fix_imports=False)
        self.path = path

    def find_class(self, module: str, name: str):
        obj = _GLOBALS.get((module, name))
        if obj is None:
            raise GridGnnError(f"{self.path}: refused to load: the pickle asks for the global "
                               f"{short(f'{module}.{name}', 100)}, which a Planetoid file does "
                               f"not need (only numpy arrays, scipy.sparse matrices, defaultdict and builtins "
                               f"are admitted); no code from the file was run")
        return obj

    def persistent_load(self, pid):
        raise GridGnnError(f"{self.path}: refused to load: the pickle uses persistent ids")


def _scan(data: bytes, path) -> None:
    """Opcode scan on the in-memory bytes (sizes, memo indices, refused opcodes)."""
    limit = len(data)
    for op, arg, pos in pickletools.genops(data):
        if op.name in _REFUSED_OPS:
            raise _Refused(f"opcode {op.name} at byte {pos} is not used by Planetoid files")
        if op.name in _MEMO_OPS and (not isinstance(arg, int) or arg < 0 or arg > limit):
            raise _Refused(f"memo index {short(arg)} at byte {pos} is beyond the file size")
        if op.name == "PROTO" and not 0 <= arg <= pickle.HIGHEST_PROTOCOL:
            raise _Refused(f"unknown pickle protocol {arg}")


def load_pickle(path):
    r"""Unpickle one ``ind.<name>.*`` file with :class:`PlanetoidUnpickler` (after the opcode scan).

    Returns:
        The object; arrays and sparse matrices are still placeholders (``_ArrayState``/``_SparseState``),
        the adjacency a plain ``dict``.

    Raises:
        GridGnnError: a refused global or opcode, or a malformed pickle, naming the file.
    """
    p, _ = regular_file(path, "Planetoid file")
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise GridGnnError(f"{p}: cannot read Planetoid file: {exc.strerror or exc}") from None
    if not data:
        raise GridGnnError(f"{p}: cannot read Planetoid file: the file is empty")
    try:
        with warnings.catch_warnings():  # e.g. invalid escapes in a protocol-0 string: an error below, not a warning
            warnings.simplefilter("ignore")
            _scan(data, p)
            return PlanetoidUnpickler(io.BytesIO(data), p).load()
    except GridGnnError:
        raise
    except _Refused as exc:
        raise GridGnnError(f"{p}: refused to load: {exc}") from None
    except (pickle.UnpicklingError, RecursionError, MemoryError, AttributeError, *PARSE_ERRORS) as exc:
        text = str(exc).replace("\n", " ")[:160]
        raise GridGnnError(f"{p}: cannot read Planetoid file (not a valid pickle): {type(exc).__name__}: "
                           f"{text}") from None


# ---------------------------------------------------------------------------------------------- conversion
def _index_array(arr: np.ndarray, what: str) -> np.ndarray:
    if arr.ndim != 1 or (arr.size and not np.issubdtype(arr.dtype, np.integer)):
        raise _Refused(f"{what} must be a 1-D integer array, got {arr.dtype} of shape {arr.shape}")
    if arr.size and np.issubdtype(arr.dtype, np.unsignedinteger) and arr.max() > np.iinfo(np.int64).max:
        raise _Refused(f"{what} holds {int(arr.max())}, beyond 64-bit ids")
    return arr.astype(np.int64)


def _matrix(obj, what: str) -> sp.coo_matrix | np.ndarray:
    r"""A checked matrix from a placeholder: COO for sparse inputs, the ndarray for dense ones."""
    if isinstance(obj, _ArrayState):
        arr = obj.array(what)
        if arr.ndim != 2:
            raise _Refused(f"{what} must be 2-D, got shape {arr.shape}")
        if not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
            raise _Refused(f"{what} has dtype {arr.dtype}")
        return arr
    if not isinstance(obj, _SparseState) or obj.state is None:
        raise _Refused(f"{what} is a {type(obj).__name__}, not a matrix")
    st = obj.state
    shape = st.get("_shape", st.get("shape"))
    if (not isinstance(shape, tuple) or len(shape) != 2
            or not all(type(s) is int and 0 <= s <= np.iinfo(np.int64).max for s in shape)):
        raise _Refused(f"{what} has invalid shape {short(shape)}")
    rows, cols = shape
    fmt = obj.fmt

    def arr(key):
        val = st.get(key)
        if not isinstance(val, _ArrayState):
            raise _Refused(f"{what} ({fmt}) lacks array {key!r}")
        return val

    if fmt in ("csr", "csc"):
        major, minor = (rows, cols) if fmt == "csr" else (cols, rows)
        indptr = _index_array(arr("indptr").array(what), f"{what} indptr")
        indices = _index_array(arr("indices").array(what), f"{what} indices")
        data = arr("data").array(what)
        if indptr.size != major + 1 or indptr[0] != 0 or np.any(np.diff(indptr) < 0) \
                or indptr[-1] != indices.size or data.shape != indices.shape:
            raise _Refused(f"{what} is not a valid {fmt.upper()} matrix of shape {shape} "
                           f"({indptr.size} row pointers, {indices.size} indices, {data.size} values)")
        if indices.size and (indices.min() < 0 or indices.max() >= minor):
            raise _Refused(f"{what} has a column index out of range 0..{minor - 1}")
        row = np.repeat(np.arange(major, dtype=np.int64), np.diff(indptr))
        row, col = (row, indices) if fmt == "csr" else (indices, row)
    elif fmt == "coo":
        coords = st.get("coords")  # scipy >= 1.13 stores (row, col) as 'coords', older versions 'row' and 'col'
        if coords is not None:
            if not isinstance(coords, tuple) or len(coords) != 2 or \
                    not all(isinstance(c, _ArrayState) for c in coords):
                raise _Refused(f"{what} (coo) has malformed coords")
            row_s, col_s = coords
        else:
            row_s, col_s = arr("row"), arr("col")
        row = _index_array(row_s.array(what), f"{what} row")
        col = _index_array(col_s.array(what), f"{what} col")
        data = arr("data").array(what)
        if row.shape != col.shape or data.shape != row.shape:
            raise _Refused(f"{what} has {row.size} rows, {col.size} columns and {data.size} values")
    else:  # lil
        rws = arr("rows").object_rows(what)
        vals = arr("data").object_rows(what)
        if len(rws) != rows or len(vals) != rows:
            raise _Refused(f"{what} (lil) has {len(rws)} row lists for {rows} rows")
        row_l, col_l, val_l = [], [], []
        for i, (r, v) in enumerate(zip(rws, vals)):
            if not isinstance(r, list) or not isinstance(v, list) or len(r) != len(v):
                raise _Refused(f"{what} (lil) row {i} is malformed")
            if not all(type(c) is int for c in r) or not all(type(x) in (int, float) for x in v):
                raise _Refused(f"{what} (lil) row {i} holds non-numbers")
            row_l.append(np.full(len(r), i, dtype=np.int64))
            col_l.append(np.asarray(r, dtype=np.int64) if r else np.zeros(0, np.int64))
            val_l.append(np.asarray(v, dtype=np.float64) if v else np.zeros(0))
        row = np.concatenate(row_l) if row_l else np.zeros(0, np.int64)
        col = np.concatenate(col_l) if col_l else np.zeros(0, np.int64)
        data = np.concatenate(val_l) if val_l else np.zeros(0)
    if row.size and (row.min() < 0 or row.max() >= rows or col.min() < 0 or col.max() >= cols):
        raise _Refused(f"{what} has an entry outside its shape {shape}")
    if not (np.issubdtype(data.dtype, np.number) or data.dtype == bool) or data.ndim != 1:
        raise _Refused(f"{what} has values of dtype {data.dtype}")
    # COO: nothing is allocated per row or column (a crafted shape may be huge; _dense checks before densifying)
    return sp.coo_matrix((data.astype(np.float64), (row, col)), shape=(rows, cols))


def _dense(obj, what: str, path) -> np.ndarray:
    """``float32`` dense matrix (``todense`` of PyG), after a memory check."""
    m = _matrix(obj, what)
    rows, cols = m.shape
    check_alloc(rows * cols * 4, f"{path}: dense {what} ({rows}×{cols})")
    out = m.toarray() if sp.issparse(m) else np.asarray(m)
    out = out.astype(np.float32)
    if not np.all(np.isfinite(out)):
        raise _Refused(f"{what} contains NaN or inf")
    return out


def _read_test_index(path) -> np.ndarray:
    p, size = regular_file(path, "Planetoid file")
    try:
        text = p.read_bytes().decode("ascii")
    except UnicodeDecodeError:
        raise GridGnnError(f"{p}: test index is not ASCII text (one vertex id per line)") from None
    except OSError as exc:
        raise GridGnnError(f"{p}: cannot read Planetoid file: {exc.strerror or exc}") from None
    toks = text.split()
    if not toks:
        raise GridGnnError(f"{p}: test index holds no vertex id")
    for k, t in enumerate(toks):
        body = t[1:] if t[:1] in "+-" else t
        if not body.isdigit() or len(body) > 18:
            raise GridGnnError(f"{p}: test index entry {k + 1} {short(t)} is not a vertex id")
    ids = np.array([int(t) for t in toks], dtype=np.int64)
    if ids.min() < 0:
        raise GridGnnError(f"{p}: test index holds the negative id {int(ids.min())}")
    return ids


def read_planetoid_arrays(directory, prefix: str) -> dict:
    r"""Read ``directory/ind.<prefix>.*`` into the arrays of ``torch_geometric.io.read_planetoid_data``.

    Args:
        directory: the folder.
        prefix: the dataset name as spelled in the file names (``cora``, ``citeseer``, ``pubmed``).

    Returns:
        ``dict`` with ``x`` ``float32[n, f]`` (not normalized), ``y`` ``int64[n]``, ``edge_index``
        ``int64[2, E]`` (row 0 = key of the adjacency dict, row 1 = neighbour; no self-loops or duplicates;
        sorted by row 1, then row 0) and ``train_mask``/``val_mask``/``test_mask`` ``bool[n]``.

    Raises:
        GridGnnError: a refused pickle, a malformed file or sizes that do not fit together, naming the file.
    """
    d = Path(directory)
    if prefix.lower().startswith("nell"):
        raise GridGnnError(f"{d}: NELL is not supported (its features are a sparse matrix far too large to "
                           f"hold dense); Cora, CiteSeer and PubMed are")
    files = {part: d / f"ind.{prefix}.{part}" for part in PARTS}
    objs = {}
    for part in ("tx", "allx", "ty", "ally", "y", "x", "graph"):
        objs[part] = load_pickle(files[part])
    test_index = _read_test_index(files["test.index"])

    def fail(part, msg):
        return GridGnnError(f"{files[part]}: {msg}")

    shapes = {}
    for part in ("x", "tx", "allx", "y", "ty", "ally"):
        try:
            shapes[part] = _matrix(objs[part], part).shape
        except _Refused as exc:
            raise fail(part, str(exc)) from None
    graph = objs["graph"]
    if not isinstance(graph, dict):
        raise fail("graph", f"expected an adjacency dict, got {type(graph).__name__}")

    # sizes, checked before anything dense is allocated
    nallx, f = shapes["allx"]
    ntx = shapes["tx"][0]
    c = shapes["ally"][1]
    if shapes["tx"][1] != f:
        raise fail("tx", f"has {shapes['tx'][1]} feature columns, allx has {f}")
    if shapes["ally"][0] != nallx:
        raise fail("ally", f"has {shapes['ally'][0]} rows, allx has {nallx}")
    if shapes["ty"] != (ntx, c):
        raise fail("ty", f"has shape {shapes['ty']}, expected ({ntx}, {c}) from tx and ally")
    ntrain = shapes["y"][0]
    if shapes["y"][1] != c:
        raise fail("y", f"has {shapes['y'][1]} classes, ally has {c}")
    if c < 1:
        raise fail("ally", "has no class column")
    if np.unique(test_index).size != test_index.size:
        raise fail("test.index", "lists a vertex twice")
    tmin, tmax = int(test_index.min()), int(test_index.max())
    span = tmax - tmin + 1  # test rows after padding the ids missing from tx with zero rows
    if span < ntx:
        raise fail("test.index", f"lists {test_index.size} distinct ids in a range of {span}, but tx has {ntx} rows")
    if test_index.size != ntx:
        raise fail("test.index", f"lists {test_index.size} test vertices, tx has {ntx} rows")
    if tmin != nallx:  # the test vertices follow allx's rows (PyG places tx there alike, and would misplace it too)
        raise fail("test.index", f"its smallest id is {tmin}, but the test vertices follow the {nallx} rows of allx "
                                 f"(ids {nallx}..): tx's rows would land on other vertices")
    n = nallx + span
    keys, nbrs = [], []
    for key, value in graph.items():
        if type(key) is not int or not isinstance(value, (list, tuple)):
            raise fail("graph", f"entry {short(key)}: {short(value)} is not 'vertex id: list of ids'")
        keys.append(key)
        nbrs.append(value)
    flat = [u for v in nbrs for u in v]
    if not all(type(u) is int for u in flat):
        raise fail("graph", "holds a neighbour that is not an integer vertex id")
    try:
        key_arr = np.fromiter(keys, dtype=np.int64, count=len(keys))
        col = np.fromiter(flat, dtype=np.int64, count=len(flat))
    except OverflowError:
        raise fail("graph", "holds a vertex id that does not fit 64 bits") from None
    counts = np.fromiter((len(v) for v in nbrs), dtype=np.int64, count=len(nbrs))
    if (key_arr.size and key_arr.min() < 0) or (col.size and col.min() < 0):
        raise fail("graph", f"holds the negative vertex id {int(min(key_arr.min(initial=0), col.min(initial=0)))}")
    ids_max = int(max(key_arr.max(initial=-1), col.max(initial=-1)))
    if n > max(key_arr.size, ids_max + 1):
        raise fail("test.index", f"test ids {tmin}..{tmax} give {n} vertices ({nallx} of allx + {span}), more "
                                 f"than the {max(key_arr.size, ids_max + 1)} of the adjacency dict")
    if n > 2 * (key_arr.size + col.size) + ISOLATED_SLACK:
        raise fail("graph", f"{n} vertices for {key_arr.size} adjacency lists of {col.size} neighbours in all: "
                            f"implausibly many isolated vertices")
    if tmax >= n:
        raise fail("test.index", f"test id {tmax} is out of range for {n} vertices")
    if ids_max >= n:
        raise fail("graph", f"vertex id {ids_max} is out of range for {n} vertices")
    if ntrain > n:
        raise fail("y", f"{ntrain} training rows for {n} vertices")
    check_vertex_count(n, str(d))
    check_alloc(n * f * 4 * 2, f"{d}: dense features ({n}×{f})")

    try:
        allx = _dense(objs["allx"], "allx", files["allx"])
        tx = _dense(objs["tx"], "tx", files["tx"])
        ally = _dense(objs["ally"], "ally", files["ally"])
        ty = _dense(objs["ty"], "ty", files["ty"])
        _dense(objs["x"], "x", files["x"])  # read and checked like PyG, not used
        _dense(objs["y"], "y", files["y"])
    except _Refused as exc:
        raise GridGnnError(f"{d}: {exc}") from None

    sorted_test = np.sort(test_index)
    tx_ext = np.zeros((span, f), dtype=np.float32)
    tx_ext[sorted_test - tmin] = tx
    ty_ext = np.zeros((span, c), dtype=np.float32)
    ty_ext[sorted_test - tmin] = ty
    x = np.concatenate([allx, tx_ext], axis=0)
    x[test_index] = x[sorted_test]
    y = np.concatenate([ally, ty_ext], axis=0).argmax(axis=1).astype(np.int64)
    y[test_index] = y[sorted_test]

    train_mask = np.zeros(n, dtype=bool)
    train_mask[:ntrain] = True
    val_mask = np.zeros(n, dtype=bool)
    val_mask[ntrain:ntrain + 500] = True  # PyG fails when fewer than 500 vertices follow; here val gets fewer
    test_mask = np.zeros(n, dtype=bool)
    test_mask[test_index] = True

    row = np.repeat(key_arr, counts)
    keep = row != col
    row, col = row[keep], col[keep]
    order = np.lexsort((row, col))  # sorted by (col, row), duplicates merged: PyG coalesce(sort_by_row=False)
    row, col = row[order], col[order]
    first = np.ones(row.size, dtype=bool)
    first[1:] = (row[1:] != row[:-1]) | (col[1:] != col[:-1])
    edge_index = np.stack([row[first], col[first]])
    return dict(x=x, y=y, edge_index=edge_index, train_mask=train_mask, val_mask=val_mask, test_mask=test_mask)
