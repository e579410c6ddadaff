# `make run`: install into .venv and run the embedded default job. `make test`: install and run the tests.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp

.PHONY: install run test test-gpu bench docs clean

install: $(STAMP)

# torch first, pinned: on a CPU-only machine this picks the local CPU build instead of several GB of CUDA
# packages; on a GPU machine it is the CUDA build. pyproject keeps a range (torch>=2.4) for users.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[test,ray]'
	touch $(STAMP)

run: install
	$(PY) -m pipeline $(ARGS)

test: install
	$(PY) -m pytest $(PYTEST_ARGS)

test-gpu: install
	$(PY) -m pytest -m gpu $(PYTEST_ARGS)

bench: install
	$(PY) -m bench $(ARGS)

docs: install
	$(PY) -m bench.report

clean:
	rm -rf $(VENV) outputs/runs outputs/multirun outputs/mlflow.db outputs/mlartifacts
