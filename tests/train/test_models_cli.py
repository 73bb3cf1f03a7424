"""`gridgnn train --model agnn | va | sage`: each runs serially and distributed with the same logits, records the
model, and a flag combination it cannot run is one error line."""
import json

import numpy as np
import pytest

from ._runs import cli_batch

SMALL = "synthetic:sbm?n=300&classes=3&avg_degree=6&features=8"
MODELS = {
    "agnn": (["--model", "agnn", "--layers", 4, "--hidden", 5], ["--algo", "plexus", "--nproc", 4, "--grid", "2,1,2",
                                                                  "--partition", "double-perm"]),
    "va": (["--model", "va", "--hidden", 5], ["--algo", "2d", "--nproc", 2, "--grid", "1,2"]),
    "sage": (["--model", "sage", "--aggr", "max", "--hidden", 5], ["--algo", "plexus", "--nproc", 4, "--grid",
                                                                    "1,2,2", "--partition", "double-perm"]),
}


def test_models_train_and_distributed_equals_serial(tmp_path):
    common = ["--data", SMALL, "--epochs", 3, "--dtype", "float64", "--dropout", 0.3, "--quiet", "--save-logits"]
    batch = []
    for name, (model, algo) in MODELS.items():
        batch += [["train", *common, *model, "--out", tmp_path / f"{name}-s"],
                  ["train", *common, *model, *algo, "--out", tmp_path / f"{name}-d"]]
    r, codes = cli_batch(batch)
    assert codes == [0] * len(batch), r.stderr[-3000:]
    for name in MODELS:
        s = json.loads((tmp_path / f"{name}-s" / "summary.json").read_text())
        assert s["model"] == name
        a = np.load(tmp_path / f"{name}-s" / "logits.npy")
        b = np.load(tmp_path / f"{name}-d" / "logits.npy")
        assert np.abs(a - b).max() <= 1e-9 * max(1.0, np.abs(a).max()), name


@pytest.mark.parametrize("argv,words", [
    (["--model", "agnn", "--layers", 2], "--layers >= 3"),
    (["--aggr", "max"], "applies to --model sage"),
    (["--model", "gat", "--layer-order", "lean"], "applies to --model gcn or sage"),
    (["--model", "sage", "--aggr", "max", "--layer-order", "lean"], "applies to --aggr mean or sum"),
    (["--model", "va", "--algo", "2d", "--nproc", 2, "--partition", "double-perm"], "one vertex order per layer"),
])
def test_model_flags_are_checked(argv, words):
    r, codes = cli_batch([["train", "--epochs", 1, "--quiet", *argv]])
    assert codes == [2], r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("gridgnn: error:") and words in lines[0], r.stderr
