# `make run`: install into .venv and run the embedded default job. `make test`: install and run the tests.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp

.PHONY: install install-gpu bytecode run test test-gpu bench docs clean

install: $(STAMP) bytecode

# The engine's own modules, byte-compiled: an editable install leaves them as source, and where
# PYTHONDONTWRITEBYTECODE is set (many container images) every process would compile them again
# (0.06 s of a dry run). Up-to-date files are skipped; a stale one is recompiled in memory, never used.
# The bench's AutoGluon environment (bench/.venv-autogluon) is not ours to compile.
bytecode: $(STAMP)
	$(PY) -m compileall -q -x '/\.venv' pipeline plugins bench

# torch first, pinned: on a CPU-only machine this picks the local CPU build instead of several GB of CUDA
# packages; on a GPU machine it is the CUDA build. pyproject keeps a range (torch>=2.4) for users.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[test,ray]'
	touch $(STAMP)

# LightGBM with its CUDA learner (device_type=cuda), built from the sdist of the version installed:
# needs nvcc (CUDA toolkit), CMake and a C++ compiler; ninja speeds it up. The PyPI wheel carries
# only the OpenCL learner. LIGHTGBM_SDIST=path/to/lightgbm-X.tar.gz builds from a local sdist.
LIGHTGBM_VERSION = $(shell $(PY) -c "import importlib.metadata as m; print(m.version('lightgbm'))" 2>/dev/null)
install-gpu: install
	@command -v nvcc >/dev/null || { echo "install-gpu: nvcc not found (install the CUDA toolkit, or put it on PATH)"; exit 1; }
	@command -v cmake >/dev/null || { echo "install-gpu: cmake not found"; exit 1; }
	$(PY) -m pip install --force-reinstall --no-deps --no-binary lightgbm \
		--config-settings=cmake.define.USE_CUDA=ON \
		$(if $(LIGHTGBM_SDIST),$(LIGHTGBM_SDIST),lightgbm==$(LIGHTGBM_VERSION))
	$(PY) -c "from pipeline.models.lightgbm_build import cuda_unavailable_reason as r; print('LightGBM CUDA learner:', r() or 'available')"

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
