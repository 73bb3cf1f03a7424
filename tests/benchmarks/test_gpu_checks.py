"""``benchmarks/gpu_checks.sh``, the one prepared script for a lent GPU machine (minutes a session rarely gets): what
can be checked without a GPU, so that a lease is not spent on a script that no longer fits the code — the script
parses, every test file it names exists and collects its ``gpu`` tests, every benchmark it calls takes the flags it
passes and knows the models it asks for."""
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_checks.sh"


def steps() -> dict[str, list[str]]:
    """Each ``step NAME LIMIT COMMAND...`` line's command, its variables as the script sets them."""
    env = {"$PYTEST": "PYTEST", "$PY": "PY", "${PROFILE_DIR:+--profile \"$PROFILE_DIR\"}": "", "$CORA": "CORA",
           "$P": "2"}
    out = {}
    for line in SCRIPT.read_text().splitlines():
        line = line.split("&& ", 1)[-1] if line.startswith("[") else line
        if not line.startswith("step "):
            continue
        for k in sorted(env, key=len, reverse=True):
            line = line.replace(k, env[k])
        words = shlex.split(line)
        out[words[1]] = words[3:]
    return out


def test_the_script_parses_and_has_its_steps():
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0
    assert list(steps()) == ["staged", "pytest_gpu", "epochs_gpu", "cora_gcn"]


def test_every_test_file_it_names_exists_and_collects_its_gpu_tests():
    for name in ("staged", "pytest_gpu"):
        words = steps()[name]
        assert words[0] == "PYTEST"
        files = [w for w in words[1:] if w.endswith(".py")]
        assert files and all((ROOT / f).is_file() for f in files), files
        k = words[words.index("-k") + 1]
        run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-o", "addopts=",
                              "--collect-only", "-q", "-m", "gpu", "-k", k, *files], cwd=ROOT, capture_output=True,
                             text=True, timeout=300)
        assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
        collected = [ln for ln in run.stdout.splitlines() if "::" in ln]
        assert len(collected) >= (1 if name == "staged" else 20), run.stdout[-2000:]
        if name == "pytest_gpu":  # every file it names has GPU tests the step runs
            assert {ln.split("::")[0] for ln in collected} == set(files)


def test_the_benchmarks_it_calls_take_its_flags():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import bench_local
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    for name, script in (("epochs_gpu", "bench_local.py"), ("cora_gcn", "cora_accuracy.py")):
        words = steps()[name]
        assert words[0] == "PY" and words[1] == f"benchmarks/{script}"
        flags = {w for w in words[2:] if w.startswith("--")}
        usage = subprocess.run([sys.executable, str(ROOT / words[1]), "--help"], capture_output=True, text=True,
                               timeout=120)
        assert usage.returncode == 0 and all(f in usage.stdout for f in flags), (flags, usage.stdout)
    models = steps()["epochs_gpu"]
    assert set(models[models.index("--models") + 1].split(",")) <= set(bench_local.GPU_RUNS)
