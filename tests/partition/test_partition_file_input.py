"""load_partition_file: every malformed file ends in one GridGnnError naming the file, never another exception."""
import os

import pytest

from gridgnn.errors import GridGnnError
from gridgnn.partition.partitioners import load_partition_file


@pytest.mark.parametrize("content,words", [
    ("0\n" + "1" + "0" * 23 + "\n1\n", ["line 2", "100000000000000000000000", "out of range 0..1"]),
    ("0\n" + "9" * 5000 + "\n1\n", ["line 2", "5000 digits", "out of range"]),
    ("0\n-" + "9" * 30 + "\n1\n", ["line 2", "out of range"]),
    ("0\n-1\n1\n", ["line 2", "part -1 out of range"]),
    ("0\n2\n1\n", ["line 2", "part 2 out of range 0..1"]),
    ("0\n1.0\n1\n", ["line 2", "'1.0' is not an integer"]),
    ("0\n1e3\n1\n", ["line 2", "not an integer"]),
    ("0\n1_0\n1\n", ["line 2", "not an integer"]),
    ("0\n0x1\n1\n", ["line 2", "not an integer"]),
    ("0\n1 1\n1\n", ["line 2", "not an integer"]),
    ("0\n\n1\n", ["line 2", "not an integer"]),
    ("0\n" + "x" * 1000 + "\n1\n", ["line 2", "..."]),
    ("0\n1\n", ["2 lines", "3 vertices"]),
    ("0\n1\n0\n1\n", ["4 lines"]),
    ("0\n0\n0\n", ["leaves part 1 empty"]),
])
def test_bad_partition_files(tmp_path, content, words):
    path = tmp_path / "bad.part"
    path.write_text(content)
    with pytest.raises(GridGnnError) as e:
        load_partition_file(path, 3, 2)
    msg = str(e.value)
    assert "bad.part" in msg and "\n" not in msg and len(msg) < 300, msg
    for w in words:
        assert w in msg, (w, msg)


def test_non_ascii_binary_and_oversized(tmp_path):
    path = tmp_path / "bin.part"
    path.write_bytes(b"0\n\xc2\xb2\n1\n")  # a superscript two: a digit to str.isdigit, not to int()
    with pytest.raises(GridGnnError, match=r"line 2: byte 0xc2 is not ASCII"):
        load_partition_file(path, 3, 2)
    path.write_bytes(bytes(range(256)))
    with pytest.raises(GridGnnError, match="bin.part"):
        load_partition_file(path, 3, 2)
    path.write_bytes(b"0\n" * (2 << 20))
    with pytest.raises(GridGnnError, match="more than .* for 3 vertices"):
        load_partition_file(path, 3, 2)


def test_windows_line_ends_and_trailing_blanks(tmp_path):
    path = tmp_path / "ok.part"
    path.write_bytes(b"1\r\n0\r\n+1\r\n\r\n\n")
    assert load_partition_file(path, 3, 2).part_of_old().tolist() == [1, 0, 1]


def test_directory_and_fifo(tmp_path):
    with pytest.raises(GridGnnError, match="not a regular file"):
        load_partition_file(tmp_path, 3, 2)
    fifo = tmp_path / "p.part"
    os.mkfifo(fifo)
    with pytest.raises(GridGnnError, match="not a regular file"):
        load_partition_file(fifo, 3, 2)
