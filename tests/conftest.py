import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
CORA = SHARED / "data" / "planetoid" / "cora"


@pytest.fixture(scope="session")
def cora_dir():
    if not CORA.is_dir():
        pytest.skip("Planetoid Cora not found at ../shared/data/planetoid/cora (relative to the repo)")
    return CORA


def pytest_configure(config):
    os.environ.setdefault("OMP_NUM_THREADS", "1")


def pytest_itemcollected(item):
    """Under ``pytest -n N --dist loadgroup`` (``make test``): the tests of a module that share a module fixture run
    on one worker (the fixture, often a spawned group, then runs once), and in ``tests/parallel`` the tests of one P
    (one spawned group per P, shared by its modules through ``tests/parallel/conftest.py``'s ``dist_results``); its
    tests without a P share one more group. Every other test is a group of its own, so that a module of many
    independent tests (the docs' pages) spreads over the workers instead of queueing on one."""
    path = Path(str(item.fspath)).resolve().relative_to(REPO)
    info = getattr(item, "_fixtureinfo", None)
    shares = info is None or any(d.scope == "module" for defs in info.name2fixturedefs.values() for d in defs)
    group = str(path) if shares else item.nodeid
    if path.parts[:2] == ("tests", "parallel"):
        params = getattr(getattr(item, "callspec", None), "params", {})
        group = "tests/parallel" + (f"/P{params['dist_results']}" if "dist_results" in params else "")
    item.add_marker(pytest.mark.xdist_group(group))


def pytest_report_header(config):
    """What a long run of dots means: the suite's size and time, and why the first dots take a while."""
    return ("gridgnn: about 1700 tests, 14-15 minutes on 2 cores with `make test`; tests/parallel first starts one "
            "group of ranks per P (1, 2, 4, 8) and runs every fidelity case in it, so its dots come in bursts")
