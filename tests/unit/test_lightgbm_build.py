"""Which GPU learner LightGBM gets: the CUDA probe's answers, its cache, and OpenCL GPU platforms."""

import pytest

import pipeline.models.lightgbm_build as build
import pipeline.models.lightgbm_gpu as lightgbm_gpu

CACHED = (build.lightgbm_cuda_available, build.cuda_unavailable_reason, build.opencl_gpu_platforms)
NOT_BUILT = "CUDA Tree Learner was not enabled in this build. Please recompile with CMake option -DUSE_CUDA=1"


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """Empty in-process caches, the engine's cache in scratch, and a record of the probes started."""
    monkeypatch.setenv("PIPELINE_CACHE_DIR", str(tmp_path))
    for cached in CACHED:
        cached.cache_clear()
    probes = []
    yield probes
    for cached in CACHED:
        cached.cache_clear()


def answer(monkeypatch, probes, reply):
    def probe(params, env):
        probes.append(params["device_type"])
        return reply

    monkeypatch.setattr(lightgbm_gpu, "probe", probe)


def test_without_an_nvidia_driver_no_probe_starts(monkeypatch, fresh):
    monkeypatch.setattr(build, "_nvidia_driver", lambda: False)
    answer(monkeypatch, fresh, None)
    assert build.lightgbm_cuda_available() is False
    assert "libcuda" in build.cuda_unavailable_reason()
    assert fresh == []


def test_a_cuda_build_that_trains_is_the_first_choice(monkeypatch, fresh):
    monkeypatch.setattr(build, "_nvidia_driver", lambda: True)
    monkeypatch.setattr(build, "opencl_gpu_platforms", lambda: (0,))
    answer(monkeypatch, fresh, None)
    assert build.lightgbm_cuda_available() is True
    assert build.lightgbm_gpu_learner() == "cuda"
    assert build.lightgbm_cuda_available() is True
    assert fresh == ["cuda"]  # asked once, in a child process


def test_a_build_without_cuda_is_remembered_across_processes(monkeypatch, fresh):
    monkeypatch.setattr(build, "_nvidia_driver", lambda: True)
    answer(monkeypatch, fresh, NOT_BUILT)
    assert build.lightgbm_cuda_available() is False
    build.lightgbm_cuda_available.cache_clear()
    build.cuda_unavailable_reason.cache_clear()  # as a new process would start
    assert build.cuda_unavailable_reason() == NOT_BUILT
    assert fresh == ["cuda"]


def test_a_device_error_is_not_remembered(monkeypatch, fresh):
    """A CUDA build that failed on this machine (a busy or absent device) is asked again next time."""
    monkeypatch.setattr(build, "_nvidia_driver", lambda: True)
    answer(monkeypatch, fresh, "[CUDA] no CUDA-capable device is detected")
    assert build.lightgbm_cuda_available() is False
    build.cuda_unavailable_reason.cache_clear()
    build.cuda_unavailable_reason()
    assert fresh == ["cuda", "cuda"]


@pytest.mark.parametrize("platforms,learner", [((1,), "gpu"), ((), None)])
def test_without_cuda_the_opencl_learner_needs_an_opencl_gpu(monkeypatch, fresh, platforms, learner):
    monkeypatch.setattr(build, "lightgbm_cuda_available", lambda: False)
    monkeypatch.setattr(build, "opencl_gpu_platforms", lambda: platforms)
    assert build.lightgbm_gpu_learner() == learner


def test_pocl_cpu_device_is_not_an_opencl_gpu(fresh):
    """PoCL lists a CPU device: an OpenCL device LightGBM can train on, but no GPU."""
    import ctypes

    try:
        ctypes.CDLL("libOpenCL.so.1")
    except OSError:
        pytest.skip("no OpenCL loader (libOpenCL.so.1); install ocl-icd-libopencl1 and pocl-opencl-icd")
    from pathlib import Path

    vendors = Path("/etc/OpenCL/vendors")
    if not vendors.is_dir() or [p.name for p in vendors.iterdir()] != ["pocl.icd"]:
        pytest.skip("this check needs PoCL as the only OpenCL runtime")
    assert build.opencl_gpu_platforms() == ()
