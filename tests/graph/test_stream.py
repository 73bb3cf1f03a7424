"""``gridgnn shard`` in passes (issue 45): an edge list (or a generated R-MAT graph) that does not fit the memory
budget is sharded a piece of text (of generated edges), a band of rows and a block at a time, and the dataset is bit for bit the one the in-memory path writes (every array
of every file, and meta.json but for the zip files' hashes); its peak memory stays within the budget; what it cannot
do is refused in one line."""
import json
import shutil
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from gridgnn.cli import main
from gridgnn.commands import shard as shard_cmd
from gridgnn.commands.shard import parse_size, shard
from gridgnn.errors import GridGnnError
from gridgnn.graph import stream
from gridgnn.graph.sharded import ShardedDataset


def edge_list(path: Path, *, n: int, m: int, seed: int, weighted: bool, loops: bool = True, crlf: bool = False,
              trailing_newline: bool = True, offset: int = 0, cr: bool = False) -> Path:
    """A text edge list with a comment, a header, duplicate edges, self-loops and isolated vertices."""
    r = np.random.default_rng(seed)
    src, dst = r.integers(0, n - 3, m) + offset, r.integers(0, n - 3, m) + offset  # the last 3 ids: no edge
    src[:5], dst[:5] = src[5:10], dst[5:10]  # duplicates
    if loops:
        src[10:14] = dst[10:14]
    lines = ["# generated", "src,dst" + (",w" if weighted else "")]
    for k, (a, b) in enumerate(zip(src, dst)):
        lines.append(f"{a} {b} {r.integers(1, 4) if weighted and k % 3 else 1}" if weighted else f"{a}\t{b}")
        if k % 50 == 7:
            lines.append("% a comment between edges")
    end = "\r\n" if crlf else "\r" if cr else "\n"
    text = end.join(lines) + (end if trailing_newline else "")
    path.write_bytes(text.encode())
    return path


def contents(folder) -> tuple[dict, dict]:
    """Every array of every file, and meta.json without the checksums (a zip file records when it was written)."""
    folder, out = Path(folder), {}
    for f in sorted(folder.rglob("*.np[yz]")):
        rel = str(f.relative_to(folder))
        if f.suffix == ".npz":
            with np.load(f) as z:
                out.update({f"{rel}:{k}": z[k] for k in z.files})
        else:
            out[rel] = np.load(f)
    meta = json.loads((folder / "meta.json").read_text())
    meta.pop("checksums")
    return out, meta


def assert_same(a, b) -> None:
    (xa, ma), (xb, mb) = contents(a), contents(b)
    assert xa.keys() == xb.keys()
    for k in xa:
        assert xa[k].dtype == xb[k].dtype and np.array_equal(xa[k], xb[k]), k
    assert ma == mb


@pytest.fixture
def passes(monkeypatch):
    """Make a small file take the streamed path with many pieces of text, bands and blocks (the constants that size
    them, scaled down), and count the pieces and bands it used."""
    monkeypatch.setattr(shard_cmd, "IN_MEMORY_BYTES_PER_TEXT_BYTE", 1 << 22)
    monkeypatch.setattr(stream, "MIN_PIECE_BYTES", 200)
    monkeypatch.setattr(stream, "TEXT_BYTES_PER_BYTE", 1 << 20)  # 1 MiB budget: pieces of the smallest size
    monkeypatch.setattr(stream, "BAND_BYTES_PER_ENTRY", 1 << 14)  # 1 MiB budget: about 64 entries per band
    monkeypatch.setattr(stream, "BLOCK_BYTES_PER_ENTRY", 8)
    seen = {"bands": 0}
    bands = stream.StreamedEdgeList._bands

    def counted(self, transposed):
        b = bands(self, transposed)
        seen["bands"] = b.size - 1
        return b
    monkeypatch.setattr(stream.StreamedEdgeList, "_bands", counted)
    return seen


CASES = [  # directed, weighted, method, blocks, normalize, extra SPEC parameters, file options
    (None, False, "double-perm", "3x2", True, "", {}),
    ("0", True, "double-perm", "2x3", True, "", {"crlf": True}),
    ("1", True, "single-perm", "4x4", True, "", {"trailing_newline": False}),
    ("0", False, "identity", "1x1", True, "&num_nodes=130", {}),
    (None, True, "double-perm", "3x3", False, "", {}),
    ("1", False, "double-perm", "2x2", True, "&relabel=1", {"offset": 10 ** 12}),
    (None, False, "double-perm", "2x2", True, "", {"cr": True}),  # old Mac line ends: pieces cut at a lone \r
]


@pytest.mark.parametrize("directed,weighted,method,blocks,normalize,extra,opts", CASES)
def test_streamed_dataset_is_the_in_memory_one_bit_for_bit(tmp_path, passes, directed, weighted, method, blocks,
                                                           normalize, extra, opts):
    f = edge_list(tmp_path / "g.txt", n=120, m=700, seed=len(extra) + 3 * bool(weighted), weighted=weighted, **opts)
    spec = f"edgelist:{f}" + (f"?directed={directed}" if directed else "?") + extra
    spec = spec.replace("?&", "?").rstrip("?")
    kw = dict(blocks=blocks, method=method, seed=3, normalize=normalize, node_chunks=3)
    mem = shard(spec, str(tmp_path / "mem"), **kw, memory_budget=1 << 40)
    assert not mem["streamed"]
    got = shard(spec, str(tmp_path / "passes"), **kw, memory_budget="1M")
    assert got["streamed"] and passes["bands"] >= 8
    assert_same(tmp_path / "mem", tmp_path / "passes")
    # the file's own ids (relabel) are not in a sharded dataset: both paths say so (shard prints a note)
    assert mem["original_ids_not_written"] is got["original_ids_not_written"] is ("relabel" in extra)
    ShardedDataset(tmp_path / "passes")  # and the reader takes it (every checksum matches its file)
    assert not any(p.name.startswith(".passes") for p in tmp_path.iterdir())  # the scratch folder is gone


def matrix_market(path: Path, *, n: int, m: int, seed: int, field: str, symmetry: str, crlf: bool = False) -> Path:
    """A Matrix Market coordinate file with comments (between entries too), duplicate entries, diagonal entries and
    isolated vertices; a symmetric file lists its lower triangle."""
    r = np.random.default_rng(seed)
    i, j = r.integers(1, n - 2, m), r.integers(1, n - 2, m)  # the last 3 vertices: no entry
    i[:5], j[:5] = i[5:10], j[5:10]  # duplicates
    if symmetry == "skew-symmetric":
        i, j = np.maximum(i, j) + 1, np.minimum(i, j)  # strictly lower
    elif symmetry == "symmetric":
        i, j = np.maximum(i, j), np.minimum(i, j)
        j[10:14] = i[10:14]  # diagonal entries
    lines = [f"%%MatrixMarket matrix coordinate {field} {symmetry}", "% generated", "%", f"{n} {n} {m}"]
    for k, (a, b) in enumerate(zip(i, j)):
        v = "" if field == "pattern" else f" {r.integers(1, 4)}" if field == "integer" else f" {r.random():.6f}"
        lines.append(f"{a} {b}{v}")
        if k % 60 == 11:
            lines.append("% a comment between entries")
    end = "\r\n" if crlf else "\n"
    path.write_bytes((end.join(lines) + end).encode())
    return path


MTX_CASES = [  # field, symmetry, method, blocks, extra SPEC parameters, file options
    ("pattern", "symmetric", "double-perm", "3x2", "", {}),
    ("real", "general", "single-perm", "2x3", "", {"crlf": True}),
    ("integer", "symmetric", "identity", "4x4", "?relabel=1", {}),
    ("real", "symmetric", "double-perm", "2x2", "?num_nodes=130", {}),
]


@pytest.mark.parametrize("field,symmetry,method,blocks,extra,opts", MTX_CASES)
def test_a_streamed_matrix_market_file_is_the_in_memory_dataset_bit_for_bit(tmp_path, passes, field, symmetry,
                                                                             method, blocks, extra, opts):
    f = matrix_market(tmp_path / "g.mtx", n=130, m=600, seed=len(extra), field=field, symmetry=symmetry, **opts)
    spec = f"mtx:{f}{extra}"
    kw = dict(blocks=blocks, method=method, seed=5, node_chunks=3)
    mem = shard(spec, str(tmp_path / "mem"), **kw, memory_budget=1 << 40)
    got = shard(spec, str(tmp_path / "passes"), **kw, memory_budget="1M")
    assert not mem["streamed"] and got["streamed"] and passes["bands"] >= 8
    assert_same(tmp_path / "mem", tmp_path / "passes")
    ShardedDataset(tmp_path / "passes")


def test_a_skew_symmetric_file_is_refused_alike(tmp_path, passes):
    """Its mirrored entries are negative weights, which the GCN normalization refuses, naming the same entry."""
    f = matrix_market(tmp_path / "g.mtx", n=60, m=200, seed=3, field="real", symmetry="skew-symmetric")
    with pytest.raises(GridGnnError) as mem:
        shard(f"mtx:{f}", str(tmp_path / "a"), blocks="2x2", memory_budget=1 << 40)
    with pytest.raises(GridGnnError) as streamed:
        shard(f"mtx:{f}", str(tmp_path / "b"), blocks="2x2", memory_budget="1M")
    assert str(streamed.value) == str(mem.value) and "negative" in str(mem.value)


@pytest.mark.parametrize("line,entries", [("17 x9 0.5", 300), ("17 999 0.5", 300), ("17 3 nan", 300),
                                          (None, 301), (None, 299)])
def test_a_malformed_matrix_market_file_names_the_same_line(tmp_path, passes, line, entries):
    f = matrix_market(tmp_path / "g.mtx", n=60, m=300, seed=1, field="real", symmetry="general")
    lines = f.read_text().splitlines()
    lines[3] = f"60 60 {entries}"
    if line is not None:
        lines[250] = line
    f.write_text("\n".join(lines) + "\n")
    with pytest.raises(GridGnnError) as mem:
        shard(f"mtx:{f}", str(tmp_path / "a"), blocks="2x2", memory_budget=1 << 40)
    with pytest.raises(GridGnnError) as streamed:
        shard(f"mtx:{f}", str(tmp_path / "b"), blocks="2x2", memory_budget="1M")
    assert str(streamed.value) == str(mem.value)
    assert ("line 251" in str(mem.value)) == (line is not None), str(mem.value)


def test_errors_name_the_same_line_as_the_in_memory_loader(tmp_path, passes):
    f = edge_list(tmp_path / "g.txt", n=60, m=300, seed=1, weighted=False)
    lines = f.read_text().splitlines()
    lines[250] = "17 x9"
    f.write_text("\n".join(lines) + "\n")
    with pytest.raises(GridGnnError) as mem:
        shard(f"edgelist:{f}", str(tmp_path / "a"), blocks="2x2", memory_budget=1 << 40)
    with pytest.raises(GridGnnError) as streamed:
        shard(f"edgelist:{f}", str(tmp_path / "b"), blocks="2x2", memory_budget="1M")
    assert str(streamed.value) == str(mem.value) and "line 251" in str(mem.value)
    assert not (tmp_path / "b").exists() and not any(p.name.startswith(".b.") for p in tmp_path.iterdir())


def test_what_passes_cannot_do_is_refused_in_one_line(tmp_path, passes):
    f = edge_list(tmp_path / "g.txt", n=60, m=300, seed=2, weighted=False)
    with pytest.raises(GridGnnError, match="the balanced-perm permutation reads the matrix"):
        shard(f"edgelist:{f}", str(tmp_path / "a"), blocks="2x2", method="balanced-perm", memory_budget="1M")
    with pytest.raises(GridGnnError, match="holds no edge features"):
        shard(f"edgelist:{f}?edge_features=1", str(tmp_path / "a"), blocks="2x2", memory_budget="1M")
    edges = stream.StreamedEdgeList(f, tmp_path / "s", memory_budget=1000)
    with pytest.raises(GridGnnError, match=f"cannot hold the {edges.n} vertices"):
        edges.write_sharded(tmp_path / "x", perm_r=np.arange(edges.n), perm_c=np.arange(edges.n), blocks=(2, 2),
                            partition_name="identity", seed=0)
    edges.budget = stream.BYTES_PER_VERTEX * edges.n + 600  # the vertices fit, a quarter of the matrix does not
    with pytest.raises(GridGnnError, match=r"the 2x2 blocks of this graph would hold about \d+ entries each"):
        edges.write_sharded(tmp_path / "x", perm_r=np.arange(edges.n), perm_c=np.arange(edges.n), blocks=(2, 2),
                            partition_name="identity", seed=0)
    edges.close()
    for bad in ("2Q", "-1G", "", "0.5K", "9" * 400):
        with pytest.raises(GridGnnError, match="--memory-budget"):
            parse_size(bad)
    assert parse_size("1.5G") == 3 << 29 and parse_size("512M") == 1 << 29 and parse_size(1 << 21) == 1 << 21


def test_without_a_budget_what_passes_cannot_do_is_read_in_memory(tmp_path, passes):
    """A file the passes would take (here: any, the in-memory estimate patched up) with balanced-perm and no
    --memory-budget is read in memory, as before the passes existed; with a budget it is refused before parsing."""
    f = edge_list(tmp_path / "g.txt", n=60, m=300, seed=3, weighted=False)
    meta = shard(f"edgelist:{f}", str(tmp_path / "a"), blocks="2x2", method="balanced-perm")
    assert meta["streamed"] is False and meta["method"] == "balanced-perm"


@pytest.mark.parametrize("fmt", ["edgelist", "mtx"])
def test_peak_memory_stays_within_the_budget(tmp_path, fmt):
    """Unpatched constants: a graph whose in-memory path needs several times the budget is sharded within it
    (tracemalloc counts every NumPy and SciPy array and every Python object)."""
    r = np.random.default_rng(5)
    n, m = 20000, 150000
    src, dst = r.integers(0, n, m), r.integers(0, n, m)
    f = tmp_path / "big.txt"
    head = f"%%MatrixMarket matrix coordinate pattern symmetric\n{n} {n} {m}\n" if fmt == "mtx" else ""
    f.write_text(head + "\n".join(f"{a + (fmt == 'mtx')} {b + (fmt == 'mtx')}" for a, b in zip(src, dst)) + "\n")
    budget = 8 << 20
    assert f.stat().st_size * shard_cmd.IN_MEMORY_BYTES_PER_TEXT_BYTE > 4 * budget
    tracemalloc.start()
    try:
        meta = shard(f"edgelist:{f}?directed=0" if fmt == "edgelist" else f"mtx:{f}", str(tmp_path / "ds"),
                     blocks="4x4", memory_budget=budget)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert meta["streamed"] and meta["nnz"] > 2 * m * 0.95
    assert peak <= budget, peak


def test_the_command_line_says_it_sharded_in_passes(tmp_path, passes, capsys):
    f = edge_list(tmp_path / "g.txt", n=80, m=400, seed=4, weighted=True)
    assert main(["shard", "--data", f"edgelist:{f}?directed=0", "--blocks", "2x2", "--out", str(tmp_path / "ds"),
                 "--memory-budget", "1M"]) == 0
    assert "in passes" in capsys.readouterr().out
    shutil.rmtree(tmp_path / "ds")


def test_a_symmetric_matrix_market_file_is_sized_by_its_entries_once(tmp_path, passes, monkeypatch):
    """Its spilled edges already hold both directions: the blocks' expected size counts them once (not again for
    the reverses an undirected edge list adds), so a budget that holds its blocks is not refused."""
    f = matrix_market(tmp_path / "g.mtx", n=130, m=600, seed=2, field="pattern", symmetry="symmetric")
    room = (1 << 20) - stream.BYTES_PER_VERTEX * 130
    monkeypatch.setattr(stream, "BLOCK_BYTES_PER_ENTRY", room // 1900)  # M̂ has about 1,330 entries; twice: 2,500
    got = shard(f"mtx:{f}", str(tmp_path / "passes"), blocks="1x1", memory_budget="1M")
    assert got["streamed"] and got["matrix_nnz"] < 1900


@pytest.mark.parametrize("spec,method,blocks", [
    ("synthetic:rmat?scale=7&edge_factor=8&features=5&classes=3", "double-perm", "3x2"),
    ("synthetic:rmat?scale=7&edge_factor=4", "single-perm", "2x2"),
])
def test_a_generated_rmat_graph_streams_into_the_in_memory_dataset_bit_for_bit(tmp_path, passes, monkeypatch, spec,
                                                                                 method, blocks):
    """R-MAT generated a piece of the edges at a time (the pieces read where they lie in the generator's stream,
    spilled, merged and symmetrized in bands) is the dataset the in-memory path writes of the whole graph: the
    matrix blocks, the features, labels and masks, meta.json."""
    monkeypatch.setattr(shard_cmd, "IN_MEMORY_BYTES_PER_RMAT_EDGE", 1 << 20)  # every such SPEC: in passes
    monkeypatch.setattr(stream, "BAND_BYTES_PER_ENTRY", 1 << 12)  # a few hundred entries per band
    monkeypatch.setattr(stream.StreamedEdgeList, "_piece_rows", lambda self: 301)  # pieces of 300 edges
    pieces = []
    edges = stream.RmatStream.edges

    def counted(self, e0, e1, perm):
        pieces.append((e0, e1))
        return edges(self, e0, e1, perm)
    monkeypatch.setattr(stream.RmatStream, "edges", counted)
    got = shard(spec, str(tmp_path / "passes"), blocks=blocks, method=method, seed=3, memory_budget="1M")
    assert got["streamed"] and passes["bands"] > 1 and len(pieces) > 1
    assert all(e1 - e0 == 300 for e0, e1 in pieces[:-1])
    ref = shard(spec, str(tmp_path / "memory"), blocks=blocks, method=method, seed=3, memory_budget="1T")
    assert not ref["streamed"]
    assert_same(tmp_path / "passes", tmp_path / "memory")


def test_rmat_pieces_are_the_whole_generation_in_any_size(monkeypatch):
    """The generator's pieces, each read where it lies in the stream, are the whole edge list, whatever their size;
    an odd start (half a 64-bit step) is refused; the graph generated in small pieces of edges and of feature rows
    is the graph generated in large ones."""
    from gridgnn.graph import synthetic
    from gridgnn.graph.synthetic import RmatStream

    whole_graph = synthetic.rmat_graph(9, 4, seed=2, features=6, classes=3)
    monkeypatch.setattr(synthetic, "RMAT_CHUNK_EDGES", 10)
    monkeypatch.setattr(synthetic, "RMAT_FEATURE_ELEMENTS", 25)
    pieces_graph = synthetic.rmat_graph(9, 4, seed=2, features=6, classes=3)
    for f in ("indptr", "indices", "x", "y", "train_mask", "val_mask", "test_mask"):
        assert np.array_equal(getattr(whole_graph, f), getattr(pieces_graph, f)), f

    s = RmatStream(8, 4, seed=9)
    perm, _ = s.permutation()
    whole = s.edges(0, s.m, perm)
    for size in (2, 6, 250, s.m):
        parts = [s.edges(e0, min(s.m, e0 + size), perm) for e0 in range(0, s.m, size)]
        for k in range(2):
            assert np.array_equal(np.concatenate([p[k] for p in parts]), whole[k]), size
    with pytest.raises(ValueError, match="even edge"):
        s.edges(1, 5, perm)


def _bytes_under(folder: Path, skip: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file() and f != skip)


@pytest.mark.parametrize("directed,method,weighted", [(None, "double-perm", False), ("0", "single-perm", True),
                                                      ("1", "double-perm", True)])
def test_the_disk_estimate_bounds_what_the_passes_hold(tmp_path, passes, monkeypatch, directed, method, weighted):
    """:func:`~gridgnn.graph.stream.disk_need` is at least the most bytes the scratch folder and the new dataset
    held at once (measured after every spill and every written block), and within a small factor of it."""
    f = edge_list(tmp_path / "g.txt", n=150, m=900, seed=7, weighted=weighted)
    spec = f"edgelist:{f}" + (f"?directed={directed}" if directed else "")
    peak, needs = [0], []
    for owner, name in ((stream._Buckets, "add"), (stream, "_save_csr"), (stream, "write_block")):
        real = getattr(owner, name)

        def measured(*a, _real=real, **k):
            out = _real(*a, **k)
            peak[0] = max(peak[0], _bytes_under(tmp_path, f))
            return out
        monkeypatch.setattr(owner, name, measured)
    check = stream.check_disk

    def recorded(scratch, out, need, *, held=0):
        needs.append(need)
        return check(scratch, out, need, held=held)
    monkeypatch.setattr(stream, "check_disk", recorded)
    got = shard(spec, str(tmp_path / "ds"), blocks="3x2", method=method, seed=1, memory_budget="1M")
    assert got["streamed"] and len(needs) == 1
    need = needs[0][2]  # the scratch folder and the dataset share tmp_path's disk
    assert peak[0] <= need <= 3 * peak[0], (peak[0], needs[0])


def test_a_disk_too_small_for_the_passes_is_refused_before_them(tmp_path, passes, monkeypatch, capsys):
    """The free disk beside --out cannot hold the scratch files and the dataset: one line, once the file is parsed
    and before the passes that shard it (a generated graph: before any edge is generated), and nothing left
    behind."""
    f = edge_list(tmp_path / "g.txt", n=150, m=900, seed=7, weighted=False)
    real = shutil.disk_usage
    monkeypatch.setattr(stream.shutil, "disk_usage", lambda p: real(p)._replace(free=30_000))
    generated = []
    monkeypatch.setattr(stream.RmatStream, "edges", lambda *a: generated.append(a))
    monkeypatch.setattr(shard_cmd, "IN_MEMORY_BYTES_PER_RMAT_EDGE", 1 << 20)
    bands = []
    monkeypatch.setattr(stream.StreamedEdgeList, "_bands", lambda *a: bands.append(a))
    for spec in (f"edgelist:{f}", "synthetic:rmat?scale=8&edge_factor=8"):
        assert main(["shard", "--data", spec, "--blocks", "2x2", "--out", str(tmp_path / "ds"),
                     "--memory-budget", "1M"]) == 2
        err = capsys.readouterr().err.strip()
        assert "of disk for the scratch files and the dataset" in err and "are free there" in err, err
        assert len(err.splitlines()) == 1
    assert not generated and not bands
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.txt"]


def test_scratch_and_dataset_on_two_disks_are_checked_apart(tmp_path, monkeypatch):
    """Where the scratch folder and the dataset lie on different filesystems, each must hold its own part: the
    scratch's peak (with the edges spilled already counted as its own) and the dataset."""
    (tmp_path / "scratch").mkdir()
    (tmp_path / "out").mkdir()
    monkeypatch.setattr(stream, "_device", lambda folder: 1 if folder.name == "scratch" else 2)
    free, real = {"scratch": 1000, "out": 500}, shutil.disk_usage(tmp_path)
    monkeypatch.setattr(stream.shutil, "disk_usage", lambda f: real._replace(free=free[f.name]))
    stream.check_disk(tmp_path / "scratch", tmp_path / "out", (1200, 500, 1700), held=300)  # each fits on its own
    with pytest.raises(GridGnnError, match=r"for the scratch files in .*scratch, but 1000 B are free there beside "
                                           r"the 100 B of edges spilled already"):
        stream.check_disk(tmp_path / "scratch", tmp_path / "out", (1200, 500, 1700), held=100)
    with pytest.raises(GridGnnError, match=r"for the dataset in .*out, but 500 B are free there: free"):
        stream.check_disk(tmp_path / "scratch", tmp_path / "out", (1200, 501, 1701), held=300)


def test_a_symmetrized_edge_of_weight_zero_or_below_streams_as_in_memory(tmp_path, passes):
    """``directed=0`` keeps an edge given one way with its own weight, zero or negative too, in passes as in memory:
    weights of zero shard alike (the reverse edges kept), a negative one is refused alike."""
    r = np.random.default_rng(5)
    src, dst = r.integers(0, 60, 500), r.integers(0, 60, 500)
    w = np.where(np.arange(500) % 7 == 0, 0, r.integers(1, 4, 500))
    f = tmp_path / "z.txt"
    f.write_text("".join(f"{a} {b} {c}\n" for a, b, c in zip(src, dst, w)))
    kw = dict(blocks="2x2", method="double-perm", seed=3, node_chunks=3)
    mem = shard(f"edgelist:{f}?directed=0", str(tmp_path / "mem"), **kw, memory_budget=1 << 40)
    got = shard(f"edgelist:{f}?directed=0", str(tmp_path / "passes"), **kw, memory_budget="1M")
    pairs = {(int(a), int(b)) for a, b in zip(src, dst)}
    assert got["streamed"] and not mem["streamed"] and mem["nnz"] == len(pairs | {(b, a) for a, b in pairs})
    assert_same(tmp_path / "mem", tmp_path / "passes")
    f.write_text(f.read_text() + "61 62 -1\n")
    for budget in (1 << 40, "1M"):
        with pytest.raises(GridGnnError, match="non-negative"):
            shard(f"edgelist:{f}?directed=0", str(tmp_path / f"neg{budget}"), **kw, memory_budget=budget)


def test_weights_that_overflow_when_merged_are_refused_alike(tmp_path, passes):
    """Finite weights whose duplicate edges add up to inf: the in-memory path refused them, the passes wrote a
    dataset that its reader then called corrupt."""
    f = edge_list(tmp_path / "g.txt", n=60, m=300, seed=1, weighted=True)
    lines = f.read_text().splitlines()
    f.write_text("\n".join(lines + ["3,7,1e308", "3,7,1e308"]) + "\n")
    with pytest.raises(GridGnnError, match="NaN or inf"):
        shard(f"edgelist:{f}", str(tmp_path / "a"), blocks="2x2", memory_budget=1 << 40)
    with pytest.raises(GridGnnError, match="NaN or inf"):
        shard(f"edgelist:{f}", str(tmp_path / "b"), blocks="2x2", memory_budget="1M")
    assert not (tmp_path / "b").exists()


def test_a_budget_on_data_read_whole_is_refused(tmp_path, capsys):
    """``--memory-budget`` bounds the passes over an edge list, a Matrix Market file or an R-MAT SPEC; on data read
    whole (an SBM, an npz, a graph in memory) it bounded nothing, and the dataset was written past it with a note."""
    for data in ("synthetic:sbm?n=3000&features=64", "synthetic:rmat?edge_factor=4"):
        assert main(["shard", "--data", data, "--blocks", "2x2", "--memory-budget", "1M",
                     "--out", str(tmp_path / "ds")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "this data is read whole in memory: leave --memory-budget out" in err[0], err
    assert not (tmp_path / "ds").exists()
    with pytest.raises(GridGnnError, match="unknown data scheme"):  # a SPEC's own error comes first
        shard("nope:x", str(tmp_path / "ds"), blocks="2x2", memory_budget="1M")
