"""``benchmarks/gpu_checks.sh``, the one prepared script for a lent GPU machine (minutes a session rarely gets): what
can be checked without a GPU, so that a lease is not spent on a script that no longer fits the code — the script
parses, every test file it names exists and collects its ``gpu`` tests, every benchmark it calls takes the flags it
passes and knows the models it asks for, and a step past its limit still reports what it met."""
import json
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_checks.sh"


def steps() -> dict[str, list[str]]:
    """Each ``step NAME LIMIT COMMAND...`` line's command, its variables as the script sets them."""
    env = {"$PYTEST": "PYTEST", "$PY": "PY", "${PROFILES:+--profile \"$PROFILES\"}": "--profile DIR", "$CORA": "CORA",
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
    assert list(steps()) == ["staged", "pytest_kernels", "epochs_gpu", "pytest_device", "cora_gcn"]


def test_what_it_writes_comes_back_from_a_lent_machine():
    """A lent machine gives back 8 files at most: a log per step, the environment's and one file of profiles."""
    named = set(re.findall(r'"\$LOG/([\w.$]+)"', SCRIPT.read_text()))
    assert named == {"$name.log", "env.log", "profiles.txt", "cora_gcn.log"}, named
    assert len({f"{name}.log" for name in steps()} | named - {"$name.log"}) <= 8


def test_every_test_file_it_names_exists_and_collects_its_gpu_tests():
    ran = []
    for name in ("staged", "pytest_kernels", "pytest_device"):
        words = steps()[name]
        assert words[0] == "PYTEST"
        files = [w for w in words[1:] if w.endswith(".py")]
        assert files and all((ROOT / f).is_file() for f in files), files
        k = ["-k", words[words.index("-k") + 1]] if "-k" in words else []
        run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-o", "addopts=",
                              "--collect-only", "-q", "-m", "gpu", *k, *files], cwd=ROOT, capture_output=True,
                             text=True, timeout=300)
        assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
        collected = [ln for ln in run.stdout.splitlines() if "::" in ln]
        assert len(collected) >= (1 if name == "staged" else 10), run.stdout[-2000:]
        if name != "staged":  # every file it names has GPU tests the step runs
            assert {ln.split("::")[0] for ln in collected} == set(files)
        ran += collected
    assert len(ran) == len(set(ran)), "a GPU test runs in two steps"


def test_a_step_past_its_limit_still_reports_the_failures_it_met(tmp_path):
    """The step interrupts its command as Ctrl-C does: the script's own pytest command, stopped in a test that would
    outlast the step, still prints the failure it met before (its name and its assertion) and the tests that passed
    — run as a background job of a shell without job control, which starts its commands with SIGINT ignored (timeout
    gives its command SIGINT's default); a step with less of the budget left than the shortest step is skipped, and
    says so."""
    (tmp_path / "test_tiny.py").write_text(
        "import time\nimport pytest\n\n\n@pytest.mark.gpu\ndef test_a_fails():\n    assert 1 + 1 == 3, 'arithmetic'\n"
        "\n\n@pytest.mark.gpu\ndef test_b_passes():\n    pass\n\n\n@pytest.mark.gpu\ndef test_c_hangs():\n"
        "    time.sleep(120)\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    gpu: a GPU test\n")
    logs = tmp_path / "logs"
    logs.mkdir()
    script = (f"GPU_CHECKS_STEP_ONLY=1 SHORTEST_S=2 PYTHON={shlex.quote(sys.executable)} BUDGET_S=60 "
              f"source {shlex.quote(str(SCRIPT))} - {shlex.quote(str(logs))}; "
              f"cd {shlex.quote(str(tmp_path))}; (step cut 15 $PYTEST test_tiny.py) & wait; END=$(date +%s); "
              "step late 30 true")
    t = time.monotonic()
    run = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=120)
    assert time.monotonic() - t < 60, "the step was not stopped at its limit"
    log = (logs / "cut.log").read_text()
    assert "test_a_fails" in log and "arithmetic" in log, log  # the failure met before the interrupt, with its cause
    assert "1 failed, 1 passed" in log and "KeyboardInterrupt" in log, log
    assert "=== cut exit 124" in run.stdout, run.stdout  # timeout's status: the step was cut
    assert "late skipped" in (logs / "late.log").read_text()


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


def test_the_epochs_table_prints_each_row_as_its_run_ends(monkeypatch, capsys):
    """bench_local's epochs on a GPU print a row as soon as its ratios are known — PyG's once its last run is done,
    each gridgnn run's when it ends — so that a step interrupted keeps the rows it finished; a run past its time is
    a failed row and the next runs, unless it printed its result before (its profile past the time); a Triton kernel
    that could not run is named in its row."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import bench_local
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    printed_before = {}

    def run(cmd, **kw):
        impl = cmd[cmd.index("--worker") + 1]
        printed_before[impl] = capsys.readouterr().out
        print(printed_before[impl], end="")  # (given back: the table stays whole)
        if impl == "gridgnn-graphed":
            raise subprocess.TimeoutExpired(cmd, kw["timeout"])
        ms = {"pyg": 10.0, "pyg-csr": 5.0}.get(impl, 4.0)
        result = {"epoch_ms": ms, "peak_bytes": 2**30, "training_bytes": 2**29, "reserved_bytes": 2**30,
                  "kernels_off": ["attend_fwd"] if impl == "gridgnn" else []}
        if impl == "gridgnn-graphed-lean":  # its result printed, then its profile past the worker's time
            raise subprocess.TimeoutExpired(cmd, kw["timeout"], output=("RESULT " + json.dumps(result)).encode())
        return subprocess.CompletedProcess(cmd, 0, stdout="RESULT " + json.dumps(result), stderr="")

    monkeypatch.setattr(bench_local.subprocess, "run", run)
    bench_local.epochs_section("spec", 1, 0, ["gcn"], device="cuda")
    out = capsys.readouterr().out
    assert "PyG (edge_index)" not in printed_before["pyg-csr"]  # (PyG's rows wait for PyG's best)
    assert "| gcn | PyG (edge_index) | 10.0 | 2.00 |" in printed_before["gridgnn"]
    assert "| gcn | gridgnn serial — Triton off: attend_fwd | 4.0 | 0.80 |" in printed_before["gridgnn-graphed"]
    assert f"| gcn | gridgnn-graphed | failed: no result within {bench_local.WORKER_S} s |" in out
    assert "| gcn | gridgnn serial, --cuda-graph --layer-order lean | 4.0 | 0.80 |" in out

    def pyg_alone(cmd, **kw):  # every run past the first PyG one fails: its row is still printed, at the end
        if cmd[cmd.index("--worker") + 1] != "pyg":
            raise subprocess.TimeoutExpired(cmd, kw["timeout"])
        return run(cmd, **kw)

    monkeypatch.setattr(bench_local.subprocess, "run", pyg_alone)
    bench_local.epochs_section("spec", 1, 0, ["gcn"], device="cuda")
    out = capsys.readouterr().out
    assert out.count("failed: no result") == 4 and "| gcn | PyG (edge_index) | 10.0 | 1.00 |" in out, out
