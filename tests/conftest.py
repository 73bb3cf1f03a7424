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
