"""`gridgnn train --model gat`: runs serially and distributed with the same result, records model and heads,
and refuses flag combinations it cannot run with one line."""
import json

import pytest

from ._runs import cli_batch

SMALL = "synthetic:sbm?n=300&classes=3&avg_degree=6&features=8"


def test_gat_trains_and_distributed_equals_serial(tmp_path):
    common = ["--data", SMALL, "--model", "gat", "--heads", 3, "--hidden", 4, "--epochs", 3, "--dtype", "float64",
              "--dropout", 0.3, "--attn-dropout", 0.2, "--quiet", "--save-logits"]
    r, codes = cli_batch([["train", *common, "--out", tmp_path / "s"],
                          ["train", *common, "--algo", "1.5d-sa", "--nproc", 2, "--replication", 2,
                           "--out", tmp_path / "d"],
                          ["train", *common, "--algo", "plexus", "--nproc", 4, "--grid", "2,1,2", "--partition",
                           "double-perm", "--out", tmp_path / "p"]])
    assert codes == [0, 0, 0], r.stderr
    s = json.loads((tmp_path / "s" / "summary.json").read_text())
    d = json.loads((tmp_path / "d" / "summary.json").read_text())
    assert (s["model"], s["heads"], d["model"], d["heads"]) == ("gat", 3, "gat", 3)
    import numpy as np

    a = np.load(tmp_path / "s" / "logits.npy")
    for run in ("d", "p"):
        b = np.load(tmp_path / run / "logits.npy")
        assert np.abs(a - b).max() <= 1e-9 * max(1.0, np.abs(a).max()), run


@pytest.mark.parametrize("argv,words", [
    (["--model", "gat", "--algo", "3d", "--nproc", 2, "--partition", "double-perm"], "one vertex order per layer"),
    (["--heads", 4], "applies to --model gat"),
    (["--model", "gat", "--heads", 0], "--heads"),
    (["--model", "gat", "--attn-dropout", 1.0], "--attn-dropout must be in [0, 1)"),
])
def test_gat_flags_are_checked(tmp_path, argv, words):
    argv = [str(tmp_path / "o") if a == "OUT" else a for a in argv]
    r, codes = cli_batch([["train", "--epochs", 1, "--quiet", *argv]])
    assert codes == [2], r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("gridgnn: error:") and words in lines[0], r.stderr
