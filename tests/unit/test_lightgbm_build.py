"""Which GPU learner LightGBM gets: its library file's build, the CUDA probe, a fit's OpenCL device."""

import ctypes
import json
import subprocess
import sys
import logging
from pathlib import Path

import pytest

import pipeline.models.lightgbm as lightgbm_model
import pipeline.models.lightgbm_build as build
import pipeline.models.lightgbm_gpu as lightgbm_gpu
from pipeline.models import LightGBMModel

CACHED = (build.lightgbm_cuda_available, build.cuda_unavailable_reason, build.built_learners,
          build.opencl_platforms)
CPU, GPU = build.CL_DEVICE_TYPE_CPU, build.CL_DEVICE_TYPE_GPU
PYPI = (build.MARKERS["cuda"],)  # PyPI's wheel: the OpenCL learner, no CUDA learner
CUDA_BUILD = (build.MARKERS["gpu"],)  # make install-gpu: the CUDA learner, no OpenCL learner


@pytest.fixture
def fresh():
    """Empty in-process caches, and a record of the probes started."""
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


def library(path: Path, markers) -> Path:
    """A stand-in for lib_lightgbm.so holding LightGBM's "not enabled in this build" messages `markers`."""
    body = b"\x7fELF" + b"\0" * 4096
    for marker in markers:
        body += marker.encode() + b". Please recompile with CMake option\0" + b"\0" * 512
    path.write_bytes(body)
    return path


@pytest.fixture
def driver_and(monkeypatch, tmp_path, fresh):
    """An NVIDIA driver, and this LightGBM's library file built as `markers` say (None: no file found)."""

    def setup(markers, reply=None):
        monkeypatch.setattr(build, "_nvidia_driver", lambda: True)
        found = None if markers is None else library(tmp_path / "lib_lightgbm.so", markers)
        monkeypatch.setattr(build, "_library_file", lambda: found)
        answer(monkeypatch, fresh, reply)
        return found

    return setup


def test_without_an_nvidia_driver_no_probe_starts(monkeypatch, fresh):
    monkeypatch.setattr(build, "_nvidia_driver", lambda: False)
    answer(monkeypatch, fresh, None)
    assert build.lightgbm_cuda_available() is False
    assert "libcuda" in build.cuda_unavailable_reason()
    assert fresh == []


def test_planning_on_a_cuda_build_starts_no_probe(driver_and, fresh, monkeypatch):
    """A dry run opens no CUDA context: the CUDA learner is chosen from the library file alone."""
    driver_and(CUDA_BUILD)
    monkeypatch.setattr(build, "opencl_gpu_platforms", lambda: (0,))
    assert build.lightgbm_cuda_available() is True
    assert build.lightgbm_gpu_learner() == "cuda"
    assert LightGBMModel.on_device({}, "cuda")["device_type"] == "cuda"
    assert LightGBMModel.cost_learners({})[1] == "lightgbm/cuda"
    assert fresh == []


def test_whether_the_cuda_learner_trains_is_asked_of_a_child_process(driver_and, fresh):
    driver_and(CUDA_BUILD, reply="[CUDA] no CUDA-capable device is detected")
    assert build.cuda_unavailable_reason() == "[CUDA] no CUDA-capable device is detected"
    assert fresh == ["cuda"]


def test_a_build_without_cuda_answers_from_its_file_without_a_probe(driver_and, fresh):
    found = driver_and(PYPI)
    assert build.lightgbm_cuda_available() is False
    assert LightGBMModel.on_device({}, "cuda")["device_type"] == "gpu"
    assert LightGBMModel.cost_learners({})[1] == "lightgbm/opencl"
    reason = build.cuda_unavailable_reason()
    assert build.NOT_BUILT in reason and str(found) in reason
    assert fresh == []


def test_an_unreadable_library_file_falls_back_to_the_probe(driver_and, fresh):
    driver_and(None, reply=None)
    assert build.lightgbm_cuda_available() is True
    assert build.lightgbm_cuda_available() is True
    assert fresh == ["cuda"]  # asked once, in a child process


@pytest.mark.parametrize("markers,built", [
    (PYPI, {"cuda": False, "gpu": True}),
    (CUDA_BUILD, {"cuda": True, "gpu": False}),
    (PYPI + CUDA_BUILD, {"cuda": False, "gpu": False}),
    ((), {"cuda": True, "gpu": True}),
])
def test_the_scan_reads_the_learners_a_library_file_was_built_with(tmp_path, fresh, markers, built):
    assert build.built_learners(library(tmp_path / "lib_lightgbm.so", markers)) == built


def test_a_missing_or_empty_library_file_is_unknown(tmp_path, fresh):
    (tmp_path / "empty.so").write_bytes(b"")
    assert build.built_learners(tmp_path / "empty.so") is None
    assert build.built_learners(tmp_path / "absent.so") is None
    assert build.built_learners(None) is None


def test_the_installed_pypi_lightgbm_has_the_opencl_learner_and_not_the_cuda_one(fresh):
    found = build._library_file()
    assert found is not None and found.name == "lib_lightgbm.so"
    assert build.built_learners(found) == {"cuda": False, "gpu": True}


@pytest.mark.parametrize("platforms,learner", [((1,), "gpu"), ((), None)])
def test_without_cuda_the_opencl_learner_needs_an_opencl_gpu(monkeypatch, fresh, platforms, learner):
    monkeypatch.setattr(build, "lightgbm_cuda_available", lambda: False)
    monkeypatch.setattr(build, "opencl_gpu_platforms", lambda: platforms)
    assert build.lightgbm_gpu_learner() == learner


def test_a_cuda_build_without_a_driver_offers_no_opencl_learner(monkeypatch, tmp_path, fresh):
    """make install-gpu's build has no OpenCL learner: an OpenCL GPU does not make device_type=gpu usable."""
    monkeypatch.setattr(build, "lightgbm_cuda_available", lambda: False)
    monkeypatch.setattr(build, "opencl_gpu_platforms", lambda: (0,))
    monkeypatch.setattr(build, "_library_file", lambda: library(tmp_path / "lib_lightgbm.so", CUDA_BUILD))
    assert build.lightgbm_gpu_learner() is None


def test_opencl_devices_are_listed_through_the_loader_lightgbm_calls(monkeypatch, tmp_path, fresh):
    """The PyPI wheel links Khronos's ICD loader in, which may list other platforms, or in another order,
    than the system's libOpenCL.so.1: the platform and device indices must be those LightGBM will read."""
    def name(cl):
        return cl._name if cl is not None else None

    assert name(build.opencl_library()) == str(build._library_file())  # the PyPI build exports the calls
    system = name(build.loader(None))  # libOpenCL.so.1, or None where it is not installed
    no_loader = library(tmp_path / "lib_lightgbm.so", CUDA_BUILD)  # no OpenCL entry points (not even an ELF)
    monkeypatch.setattr(build, "_library_file", lambda: no_loader)
    assert build.loader(no_loader) is None
    assert name(build.opencl_library()) == system
    monkeypatch.setattr(build, "_library_file", lambda: None)
    assert name(build.opencl_library()) == system


@pytest.mark.parametrize("platforms,ordinal,chosen", [
    ([(CPU, GPU)], 0, (0, 1)),  # PoCL with its CUDA backend on the H200 box: the GPU is device 1
    ([(CPU,), (GPU, GPU)], 1, (1, 1)),
    ([(), (CPU | GPU, CPU, GPU)], 1, (1, 2)),
    ([(GPU,), (GPU, GPU)], 0, (0, 0)),  # the first platform with a GPU
    ([(CPU,)], 0, None),
    ([], 0, None),
    ([(CPU, GPU)], 1, None),  # no second GPU on that platform
])
def test_the_opencl_learner_takes_the_fits_gpu_among_all_its_platforms_devices(platforms, ordinal, chosen):
    expected = {} if chosen is None else {"gpu_platform_id": chosen[0], "gpu_device_id": chosen[1]}
    assert build.opencl_choice(platforms, ordinal) == expected


POCL, NVIDIA = "The pocl project", "NVIDIA Corporation"
H200 = build.OpenCLDevice(GPU, "NVIDIA H200", NVIDIA)
POCL_CPU = build.OpenCLDevice(CPU, "cpu-sapphirerapids-Intel(R) Xeon(R)", "GenuineIntel")


@pytest.mark.parametrize("platforms,vendors,own,chosen", [
    (((POCL_CPU, H200), (H200,)), (POCL, NVIDIA), (1,), (1, 0)),  # NVIDIA's ICD beside PoCL's CUDA backend
    (((H200,), (POCL_CPU, H200)), (NVIDIA, POCL), (0,), (0, 0)),
    (((POCL_CPU, H200),), (POCL,), (), (0, 1)),  # PoCL alone: its CUDA device all the same
    (((POCL_CPU,),), (POCL,), (), None),
    (((POCL_CPU, H200), (H200,)), (POCL, ""), (), (0, 1)),  # a vendor not read: LightGBM's order
])
def test_a_gpus_own_opencl_platform_goes_before_a_portable_one(monkeypatch, platforms, vendors, own, chosen):
    assert build.own_platforms(platforms, vendors) == own
    monkeypatch.setattr(build, "opencl_devices", lambda: platforms)
    monkeypatch.setattr(build, "opencl_platform_vendors", lambda: vendors)
    expected = {} if chosen is None else {"gpu_platform_id": chosen[0], "gpu_device_id": chosen[1]}
    assert build.opencl_gpu_device(0) == expected


def opencl_box(monkeypatch):
    """The H200 box's OpenCL: one platform (PoCL's) listing a CPU device before the NVIDIA card."""
    monkeypatch.setattr(build, "opencl_devices", lambda: ((POCL_CPU, H200),))
    monkeypatch.setattr(build, "opencl_platform_vendors", lambda: (POCL,))


def test_the_gpu_check_probes_the_chosen_opencl_device(monkeypatch):
    opencl_box(monkeypatch)
    probed = []
    monkeypatch.setattr(lightgbm_model, "probe", lambda params, env: probed.append(params))
    LightGBMModel.check_environment("lightgbm", {"device_type": "gpu", "gpu_device_id": 3})
    LightGBMModel.check_environment("lightgbm", {"device_type": "gpu", "gpu_platform_id": 2})
    assert [(p["gpu_platform_id"], p["gpu_device_id"]) for p in probed] == [(0, 1), (2, 0)]
    assert lightgbm_gpu.probe_params(probed[0])["gpu_device_id"] == 1
    assert lightgbm_gpu.probe_params({"device_type": "cuda"})["gpu_device_id"] == 0


class Trained(Exception):
    pass


@pytest.mark.parametrize("params,chosen", [
    ({"device_type": "gpu"}, (0, 1)),
    ({"device_type": "gpu", "gpu_platform_id": 2}, (2, 0)),  # the user's platform, the fit's ordinal
    ({"device_type": "cuda"}, (None, 0)),
])
def test_a_fit_takes_the_chosen_opencl_device(monkeypatch, params, chosen):
    import lightgbm as lgb
    import numpy as np
    import pandas as pd

    from pipeline.models import FitContext, Placement

    opencl_box(monkeypatch)

    def train(params, *args, **kwargs):
        raise Trained(params)

    monkeypatch.setattr(lgb, "train", train)
    X = pd.DataFrame({"a": np.arange(40.0), "b": np.arange(40.0) % 3})
    y = (X["a"] > 20).to_numpy().astype(int)
    ctx = FitContext("binary", 2, Placement(1, gpu_ids=(5,), local_gpus=(0,)), seed=0)
    with pytest.raises(Trained) as trained:
        LightGBMModel(params, "lightgbm").fit(X, y, X, y, ctx)
    used = trained.value.args[0]
    assert (used.get("gpu_platform_id"), used["gpu_device_id"]) == chosen


def test_an_opencl_fit_on_a_device_that_is_no_gpu_is_said(monkeypatch, caplog):
    opencl_box(monkeypatch)
    with caplog.at_level(logging.WARNING):
        lightgbm_model._warn_unless_a_gpu("lightgbm", "NVIDIA H200", "NVIDIA Corporation")
        assert caplog.messages == []
        lightgbm_model._warn_unless_a_gpu("lightgbm", "cpu-sapphirerapids-Intel(R) Xeon(R)", "GenuineIntel")
    assert caplog.messages == ["model lightgbm: LightGBM's OpenCL learner ran on "
                               "cpu-sapphirerapids-Intel(R) Xeon(R) (GenuineIntel), not a GPU"]


def test_a_cpu_device_beside_an_unregistered_nvidia_opencl_driver_says_how_to_register_it(
        monkeypatch, tmp_path, caplog):
    import ctypes.util

    opencl_box(monkeypatch)
    monkeypatch.setattr(ctypes.util, "find_library",
                        lambda name: "libnvidia-opencl.so.1" if name == "nvidia-opencl" else None)
    monkeypatch.setenv("OCL_ICD_VENDORS", str(tmp_path))
    (tmp_path / "pocl.icd").write_text("libpocl.so.2\n")
    assert build.unregistered_nvidia_opencl() == "libnvidia-opencl.so.1"
    with caplog.at_level(logging.WARNING):
        lightgbm_model._warn_unless_a_gpu("lightgbm", "cpu-skylake-avx512-Intel(R) Xeon(R)", "GenuineIntel")
    (message,) = caplog.messages
    assert "not a GPU; NVIDIA's OpenCL driver (libnvidia-opencl.so.1) is installed but no ICD file" in message
    assert "/etc/OpenCL/vendors/nvidia.icd" in message and "OCL_ICD_VENDORS" in message
    (tmp_path / "nvidia.icd").write_text("libnvidia-opencl.so.1\n")
    assert build.unregistered_nvidia_opencl() is None


def test_opencl_lists_pocls_cpu_device_as_a_cpu(fresh):
    """PoCL lists a CPU device: an OpenCL device LightGBM can train on, but no GPU."""
    try:
        ctypes.CDLL("libOpenCL.so.1")
    except OSError:
        pytest.skip("no OpenCL loader (libOpenCL.so.1); install ocl-icd-libopencl1 and pocl-opencl-icd")
    vendors = Path("/etc/OpenCL/vendors")
    icds = sorted(p.name for p in vendors.iterdir()) if vendors.is_dir() else []
    if "pocl.icd" not in icds:
        pytest.skip("this check needs PoCL's OpenCL runtime (pocl-opencl-icd)")
    # in a fresh process: the OpenCL loader and PoCL set themselves up once per process, and earlier tests of
    # this session may have reached them under an environment of their own
    code = ("import json; from pipeline.models import lightgbm_build as b; "
            "print(json.dumps([[list(d) for d in p] for p in b.opencl_devices()] + "
            "[list(b.opencl_gpu_platforms()), b.opencl_gpu_device(0), list(b.opencl_platform_vendors())]))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=Path(build.__file__).parents[2])
    *platforms, gpu_platforms, chosen, vendors = json.loads(proc.stdout.strip().splitlines()[-1])
    devices = [build.OpenCLDevice(*d) for platform in platforms for d in platform]
    assert any(d.type & CPU and not d.type & GPU and d.name and d.vendor for d in devices), (devices, proc.stderr)
    if icds == ["pocl.icd"]:
        assert gpu_platforms == [] and chosen == {} and vendors == [POCL]
