# `make run`: install into .venv and run the embedded default job. `make test`: install and run the tests.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp

.PHONY: install install-gpu lightgbm-cuda-wheel device-kit bytecode run test test-gpu bench docs clean

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

# LightGBM with its CUDA learner (device_type=cuda), built from the sdist of the version installed; the
# PyPI wheel carries only the OpenCL learner. With nvcc on the PATH (a system CUDA toolkit), pip builds it
# with that; without, CUDA's compiler, headers and static runtime come from PyPI
# (pipeline.models.lightgbm_cuda_wheel): a C++ compiler and an NVIDIA driver (580+ for CUDA 13.0) suffice.
# The build links NCCL (libnccl.so.2, through nvidia/nccl/lib): the one of nvidia-nccl-cu12 (XGBoost's) serves
# where present, as NCCL's C API is the same; else nvidia-nccl-cu13 is installed (both packages write the same
# files, so one never goes beside the other). LIGHTGBM_SDIST=path/to/lightgbm-X.tar.gz
# builds from a local sdist; CUDA_ARCHITECTURES (default 90: H100/H200) picks the GPUs' architectures.
LIGHTGBM_VERSION = $(shell $(PY) -c "import importlib.metadata as m; print(m.version('lightgbm'))" 2>/dev/null)
CUDA_ARCHITECTURES ?= 90
LIGHTGBM_CUDA_DIR := build/lightgbm-cuda
install-gpu: install
	@if command -v nvcc >/dev/null; then \
		command -v cmake >/dev/null || { echo "install-gpu: cmake not found"; exit 1; }; \
		$(PY) -m pip install --force-reinstall --no-deps --no-binary lightgbm \
			--config-settings=cmake.define.USE_CUDA=ON \
			--config-settings=cmake.define.CMAKE_CUDA_ARCHITECTURES="$(CUDA_ARCHITECTURES)" \
			$(if $(LIGHTGBM_SDIST),$(LIGHTGBM_SDIST),lightgbm==$(LIGHTGBM_VERSION)); \
	else \
		echo "install-gpu: no nvcc on the PATH: CUDA's compiler from PyPI"; \
		{ ls $(LIGHTGBM_CUDA_DIR)/lightgbm-$(LIGHTGBM_VERSION)-*.whl >/dev/null 2>&1 || \
			$(PY) -m pipeline.models.lightgbm_cuda_wheel --out $(LIGHTGBM_CUDA_DIR) \
				--architectures "$(CUDA_ARCHITECTURES)" $(if $(LIGHTGBM_SDIST),--sdist $(LIGHTGBM_SDIST),); } && \
		{ $(PY) -c "import nvidia.nccl" 2>/dev/null || $(PY) -m pip install --quiet nvidia-nccl-cu13; } && \
		$(PY) -m pip install --force-reinstall --no-deps $(LIGHTGBM_CUDA_DIR)/lightgbm-$(LIGHTGBM_VERSION)-*.whl; \
	fi
	$(PY) -c "from pipeline.models.lightgbm_build import cuda_unavailable_reason as r; print('LightGBM CUDA learner:', r() or 'available')"

# The CUDA build as a wheel, with CUDA's compiler from PyPI (no GPU needed): `make install-gpu` and the
# GPU proof kit install it. Built once per LightGBM version.
lightgbm-cuda-wheel: install
	@ls $(LIGHTGBM_CUDA_DIR)/lightgbm-$(LIGHTGBM_VERSION)-*.whl >/dev/null 2>&1 || \
		$(PY) -m pipeline.models.lightgbm_cuda_wheel --out $(LIGHTGBM_CUDA_DIR) --architectures "$(CUDA_ARCHITECTURES)" \
			$(if $(LIGHTGBM_SDIST),--sdist $(LIGHTGBM_SDIST),)

# The GPU proof kit (docs/gpu_kit.md): .device/ holds the project, the wheels a GPU box lacks and the
# LightGBM CUDA build, in calls of at most 60 MiB; .device/MANIFEST.txt says which command carries what.
device-kit: lightgbm-cuda-wheel
	$(PY) -m bench.device.kit --lightgbm-cuda $$(ls $(LIGHTGBM_CUDA_DIR)/lightgbm-$(LIGHTGBM_VERSION)-*.whl | head -1)

run: install
	$(PY) -m pipeline $(ARGS)

# Two pytest-xdist workers: in one process the suite used 0.9 of the two CPUs, waiting on processes,
# servers and sockets (26.5 min; two workers 17.9 min, three no quicker; since, two 890 s and three 865 s,
# which is not worth the time-limited tests' runs sharing the CPUs three ways). Each worker takes whole
# files, so a file's fixtures are built once. TEST_WORKERS= runs it in one process.
TEST_WORKERS ?= -n 2 --dist loadfile

test: install
	$(PY) -m pytest $(TEST_WORKERS) $(PYTEST_ARGS)

test-gpu: install
	$(PY) -m pytest -m gpu $(PYTEST_ARGS)

bench: install
	$(PY) -m bench $(ARGS)

docs: install
	$(PY) -m bench.report

clean:
	rm -rf $(VENV) outputs/runs outputs/multirun outputs/mlflow.db outputs/mlartifacts
