"""Every code block of the documentation runs as written (docs/*.md except the benchmark record, and the README's
quick start).

Conventions of the pages:

* a ``bash`` block is a list of commands (``\\`` continues a line; ``#`` starts a comment); each runs from a
  scratch folder that holds ``examples/`` (a link to the repository's), so ``--out runs/x`` stays out of the
  repository; ``gridgnn``, ``python`` and ``torchrun`` are this environment's; ``../shared/`` means the workplace's shared data
  (a page that needs it is skipped, with a message, where it is absent). A command expected to fail ends with
  ``# exit N``; it must exit with N and print one ``gridgnn: error:`` line.
* the ``python`` blocks of a page run in order as one script (``__name__ == "__main__"``) in that folder;
* other languages (``text``, ``toml`` ...) are shown, not run; a ``toml`` block preceded by a line
  ``<!-- file: NAME -->`` is written to NAME first.
"""
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared"
PAGES = sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "benchmarks.md")
FENCE = re.compile(r"(?:<!-- file: (?P<file>[\w./-]+) -->\s*\n)?```(?P<lang>[\w-]*)\n(?P<body>.*?)```", re.S)


def blocks(text: str) -> list[tuple[str, str, str | None]]:
    return [(m["lang"], m["body"], m["file"]) for m in FENCE.finditer(text)]


def readme_quick_start() -> str:
    text = (ROOT / "README.md").read_text()
    m = re.search(r"## Quick start\n(.*?)\n## ", text, re.S)
    assert m, "README.md has a '## Quick start' section"
    return m.group(1)


def commands(body: str) -> list[tuple[list[str], int]]:
    out, buf = [], ""
    for line in body.splitlines():
        buf += line.rstrip()
        if buf.endswith("\\"):
            buf = buf[:-1] + " "
            continue
        cmd, buf = buf.strip(), ""
        if not cmd or cmd.startswith("#"):
            continue
        expect = 0
        m = re.search(r"#\s*exit (\d+)\s*$", cmd)
        if m:
            expect = int(m.group(1))
        argv = shlex.split(cmd, comments=True)
        out.append((argv, expect))
    return out


_BATCH = """
import contextlib, io, json, sys
from gridgnn.cli import main
out = []
for argv in json.loads(sys.argv[1]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    out.append([code, err.getvalue()])
print("RESULTS " + json.dumps(out))
"""


def _run_gridgnn_batch(batch: list[tuple[list[str], int]], cwd: Path, env: dict) -> None:
    """Consecutive ``gridgnn`` commands in one interpreter (``gridgnn.cli.main``, what the console script calls):
    the start-up of Python and torch is paid once per batch."""
    import json

    r = subprocess.run([sys.executable, "-c", _BATCH, json.dumps([argv[1:] for argv, _ in batch])], cwd=cwd,
                       capture_output=True, text=True, timeout=1800, env=env)
    line = next((ln for ln in r.stdout.splitlines() if ln.startswith("RESULTS ")), None)
    assert line is not None, f"the batch did not finish:\n{r.stdout[-1500:]}\n{r.stderr[-3000:]}"
    for (argv, expect), (code, err) in zip(batch, json.loads(line[8:])):
        shown = " ".join(argv)
        assert code == expect, f"{shown}: exit {code}\n{err[-3000:]}\n{r.stderr[-3000:]}"
        if expect:
            errors = [ln for ln in err.splitlines() if ln.strip()]
            assert len(errors) == 1 and errors[0].startswith("gridgnn: error:"), (shown, err)


def run_page(text: str, tmp_path: Path) -> None:
    if "../shared/" in text and not SHARED.is_dir():
        pytest.skip(f"needs {SHARED} (the workplace's shared data)")
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    env.pop("RANK", None)
    env.pop("WORLD_SIZE", None)
    python, batch = [], []
    for lang, body, file in blocks(text):
        body = body.replace("../shared/", f"{SHARED}/")
        if file is not None:
            if batch:
                _run_gridgnn_batch(batch, tmp_path, env)
                batch = []
            (tmp_path / file).write_text(body)
        elif lang == "python":
            python.append(body)
        elif lang == "bash":
            for argv, expect in commands(body):
                tool = argv[0]
                assert tool in ("gridgnn", "python", "torchrun"), f"a bash block runs gridgnn, python or torchrun, " \
                                                                  f"not {tool!r}"
                if tool == "gridgnn" and argv[1:2] != ["--version"]:
                    batch.append((argv, expect))
                    continue
                if batch:
                    _run_gridgnn_batch(batch, tmp_path, env)
                    batch = []
                exe = {"gridgnn": [sys.executable, "-m", "gridgnn"], "python": [sys.executable],
                       "torchrun": [os.path.join(os.path.dirname(sys.executable), "torchrun")]}[tool]
                r = subprocess.run(exe + argv[1:], cwd=tmp_path, capture_output=True, text=True, timeout=900,
                                   env=env)
                shown = " ".join(argv)
                assert r.returncode == expect, f"{shown}: exit {r.returncode}\n{r.stdout[-1500:]}\n{r.stderr[-3000:]}"
                if expect:
                    errors = [ln for ln in r.stderr.splitlines() if ln.strip()]
                    assert len(errors) == 1 and errors[0].startswith("gridgnn: error:"), (shown, r.stderr)
    if batch:
        _run_gridgnn_batch(batch, tmp_path, env)
    if python:
        script = tmp_path / "page_code.py"
        script.write_text("\n\n".join(python).replace("../shared/", f"{SHARED}/"))
        r = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True,
                           timeout=900, env=env)
        assert r.returncode == 0, f"python blocks: exit {r.returncode}\n{r.stdout[-1500:]}\n{r.stderr[-3000:]}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_page_code_runs(page, tmp_path):
    text = page.read_text()
    assert blocks(text) or page.name == "README.md", f"{page.name} shows no code"
    run_page(text, tmp_path)


def test_readme_quick_start_runs(tmp_path):
    run_page(readme_quick_start(), tmp_path)


def test_every_page_is_reachable_from_the_readme():
    readme = (ROOT / "README.md").read_text()
    for page in PAGES + [ROOT / "docs" / "benchmarks.md"]:
        assert f"docs/{page.name}" in readme, f"README.md does not link docs/{page.name}"


def test_commands_parser():
    body = "gridgnn train --epochs 2 \\\n    --nproc 2   # a comment\n# only a comment\ngridgnn train --bad  # exit 2\n"
    assert commands(body) == [(["gridgnn", "train", "--epochs", "2", "--nproc", "2"], 0),
                              (["gridgnn", "train", "--bad"], 2)]
