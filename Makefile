# Two entry points: `make run` and `make test`. Both create .venv when missing and install gridgnn into it.
# TORCH_SPEC is overridable: `make test TORCH_SPEC="torch>=2.5"` on a machine with another torch build.
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
PY := $(VENV)/bin/python
STAMP := $(VENV)/.gridgnn-installed
RUN_ARGS ?= --epochs 100 --nproc 2 --algo 1d-sa --out runs/default
# pytest workers: two keep a 2-core machine busy while one waits on its spawned ranks
TEST_WORKERS ?= 2

.PHONY: run test install clean bench

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(PY) pyproject.toml
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e ".[test,partition,log]"
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(VENV)/bin/gridgnn train $(RUN_ARGS)

test: $(STAMP)
	$(PY) -m ruff check src tests benchmarks examples
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup tests

bench: $(STAMP)
	$(PY) benchmarks/bench_gcn.py

clean:
	rm -rf $(VENV) runs
