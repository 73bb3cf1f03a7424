"""``benchmarks/bench_scale.py`` at a small scale: its code path only (every stage as the command a user runs —
shard, train from the shards, predict — and the table it prints), no timing."""
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]


def test_every_stage_runs_and_the_table_holds_each_measurement(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_scale.py"), "--scale", "8",
                          "--edge-factor", "4", "--features", "8", "--classes", "3", "--nproc", "2", "--algos",
                          "1d-sa", "--hidden", "8", "--layers", "2", "--epochs", "1", "--work", str(tmp_path)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    row = next(line for line in out.stdout.splitlines() if line.startswith("| 1d-sa |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert len(cells) == 8 and "exit" not in row, row
    peaks = cells[7].split(", ")
    assert len(peaks) == 2 and all("(" in p for p in peaks), row  # each rank's peak with the guard's estimate
    stages = next(line for line in out.stdout.splitlines() if line.startswith("1d-sa start-up by stage"))
    assert all(f"{k} " in stages for k in ("spawn", "read", "join", "memory", "build", "model")), stages
    logits = np.load(tmp_path / "predict-1d-sa.npy")
    assert logits.shape == (256, 3) and np.isfinite(logits).all()
    assert (tmp_path / "run-1d-sa" / "summary.json").is_file() and not (tmp_path / "shards-1d-sa").exists()
