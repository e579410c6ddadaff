"""What the box's drivers offer, for the record beside its figures: the OpenCL platforms and their devices
in the order LightGBM numbers them (`gpu_platform_id`, `gpu_device_id`), the ICD files that register
them, and nvidia-smi's persistence and compute modes; the listing is the engine's
(pipeline.models.lightgbm_build), with the platforms' and drivers' names beside it.

`python -m bench.device.box_info` prints it as one JSON object; `bench.device.calls` runs it in a child
process (an OpenCL driver that hangs or crashes then costs the call nothing but this record).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

CL_PLATFORM_VERSION, CL_PLATFORM_NAME, CL_PLATFORM_VENDOR = 0x0901, 0x0902, 0x0903
CL_DRIVER_VERSION = 0x102D
DEVICE_TYPES = {1: "default", 2: "cpu", 4: "gpu", 8: "accelerator", 16: "custom"}
SMI_KEYS = ("Driver Version", "CUDA Version", "Product Name", "Persistence Mode", "Compute Mode")


def _kinds(bits: int) -> str:
    return "+".join(name for bit, name in DEVICE_TYPES.items() if bits & bit) or f"0x{bits:x}"


def opencl_platforms(cl=None) -> list[dict] | str:
    """[{index, name, vendor, version, devices: [{index, name, vendor, type, driver}]}] as the loader `cl`
    lists them (default: the system's libOpenCL.so.1), or why none."""
    from pipeline.models.lightgbm_build import device_info, info_text, loader, opencl_handles

    cl = cl or loader(None)
    if cl is None:
        return "no OpenCL loader (libOpenCL.so.1)"
    handles = opencl_handles(cl)
    if not handles:
        return "no OpenCL platform (the loader lists none)"
    out = []
    for index, (platform, devices) in enumerate(handles):
        listed = []
        for number, device in enumerate(devices):
            info = device_info(cl, device)
            listed.append({
                "index": number,
                "name": info.name,
                "vendor": info.vendor,
                "type": _kinds(info.type),
                "driver": info_text(cl.clGetDeviceInfo, device, CL_DRIVER_VERSION),
            })
        out.append({
            "index": index,
            "name": info_text(cl.clGetPlatformInfo, platform, CL_PLATFORM_NAME),
            "vendor": info_text(cl.clGetPlatformInfo, platform, CL_PLATFORM_VENDOR),
            "version": info_text(cl.clGetPlatformInfo, platform, CL_PLATFORM_VERSION),
            "devices": listed,
        })
    return out


def nvidia_smi() -> list[dict] | str:
    """Per GPU, the lines of `nvidia-smi -q` named in SMI_KEYS (the first of each), or why none."""
    try:
        proc = subprocess.run(["nvidia-smi", "-q"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"nvidia-smi: {exc}"
    if proc.returncode != 0:
        return f"nvidia-smi -q exited {proc.returncode}: {(proc.stdout + proc.stderr).strip()[-300:]}"
    common, gpus = {}, []
    for line in proc.stdout.splitlines():
        if line.startswith("GPU "):
            gpus.append({"bus_id": line[4:].strip()})
        key, sep, value = line.partition(":")
        key = key.strip()
        if sep and key in SMI_KEYS:
            into = gpus[-1] if gpus else common
            into.setdefault(key, value.strip())
    return [{**common, **gpu} for gpu in gpus] or [common]


def lightgbm_opencl_library() -> Path | None:
    """lib_lightgbm.so of the build with the OpenCL learner: the kit's PyPI build (KIT_SITE_OPENCL) where
    installed, else the importable one."""
    from pipeline.models.lightgbm_build import _library_file

    site = os.environ.get("KIT_SITE_OPENCL")
    kit = Path(site) / "lightgbm" / "lib" / "lib_lightgbm.so" if site else None
    return kit if kit is not None and kit.exists() else _library_file()


def lightgbm_view() -> list[dict] | str:
    """The platforms as LightGBM's OpenCL learner lists them: the PyPI wheel links its own ICD loader in,
    which may list other platforms, or the same in another order, than the system's."""
    from pipeline.models.lightgbm_build import loader

    library = lightgbm_opencl_library()
    cl = loader(library) if library is not None else None
    if cl is None:
        return f"this LightGBM ({library}) has no OpenCL loader of its own"
    return opencl_platforms(cl)


def loaded_opencl_files() -> list[str]:
    """The OpenCL libraries mapped into this process after the listings (which loader, which drivers)."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return []
    return sorted({line.split()[-1] for line in maps.splitlines()
                   if "/" in line and ("opencl" in line.lower() or "pocl" in line.lower())})


def opencl_libraries() -> list[str]:
    """What the dynamic linker's cache holds of OpenCL (the loaders, NVIDIA's libnvidia-opencl)."""
    try:
        proc = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.strip() for line in proc.stdout.splitlines() if "opencl" in line.lower()]


def gather() -> dict:
    from pipeline.models.lightgbm_build import icd_files

    return {"opencl_platforms": opencl_platforms(), "opencl_platforms_lightgbm": lightgbm_view(),
            "opencl_icd_files": icd_files(), "opencl_files_loaded": loaded_opencl_files(),
            "opencl_libraries": opencl_libraries(),
            "opencl_env": {k: v for k, v in os.environ.items() if k.startswith("OCL_")},
            "nvidia_smi": nvidia_smi()}


def in_a_child(python: str = sys.executable, timeout: float = 60) -> dict:
    """gather() in a child process; a failure is recorded as the record."""
    try:
        proc = subprocess.run([python, "-m", "bench.device.box_info"], capture_output=True, text=True,
                              timeout=timeout)
        if proc.returncode == 0:
            return json.loads(proc.stdout)
        return {"error": f"exited {proc.returncode}: {proc.stderr.strip()[-400:]}"}
    except (OSError, ValueError, subprocess.TimeoutExpired) as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}


if __name__ == "__main__":
    print(json.dumps(gather()))
