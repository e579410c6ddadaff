"""What the box's drivers offer, for the record beside its figures: the OpenCL platforms and their devices
in the order LightGBM numbers them (`gpu_platform_id`, `gpu_device_id`), the ICD files that register
them, and nvidia-smi's persistence and compute modes. Standard library only.

`python -m bench.device.box_info` prints it as one JSON object; `bench.device.calls` runs it in a child
process (an OpenCL driver that hangs or crashes then costs the call nothing but this record).
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
from pathlib import Path

CL_PLATFORM_VERSION, CL_PLATFORM_NAME, CL_PLATFORM_VENDOR = 0x0901, 0x0902, 0x0903
CL_DEVICE_TYPE, CL_DEVICE_NAME, CL_DEVICE_VENDOR, CL_DRIVER_VERSION = 0x1000, 0x102B, 0x102C, 0x102D
CL_DEVICE_TYPE_ALL = 0xFFFFFFFF
DEVICE_TYPES = {1: "default", 2: "cpu", 4: "gpu", 8: "accelerator", 16: "custom"}
ICD_FOLDER = Path("/etc/OpenCL/vendors")
SMI_KEYS = ("Driver Version", "CUDA Version", "Product Name", "Persistence Mode", "Compute Mode")


def _kinds(bits: int) -> str:
    return "+".join(name for bit, name in DEVICE_TYPES.items() if bits & bit) or f"0x{bits:x}"


def opencl_platforms() -> list[dict] | str:
    """[{index, name, vendor, version, devices: [{index, name, vendor, type, driver}]}], or why none."""
    try:
        cl = ctypes.CDLL("libOpenCL.so.1")
    except OSError as exc:
        return f"no OpenCL loader: {exc}"
    u32, ptr, size = ctypes.c_uint32, ctypes.c_void_p, ctypes.c_size_t
    cl.clGetPlatformIDs.argtypes = [u32, ctypes.POINTER(ptr), ctypes.POINTER(u32)]
    cl.clGetPlatformInfo.argtypes = [ptr, u32, size, ptr, ctypes.POINTER(size)]
    cl.clGetDeviceIDs.argtypes = [ptr, ctypes.c_uint64, u32, ctypes.POINTER(ptr), ctypes.POINTER(u32)]
    cl.clGetDeviceInfo.argtypes = [ptr, u32, size, ptr, ctypes.POINTER(size)]
    for function in (cl.clGetPlatformIDs, cl.clGetPlatformInfo, cl.clGetDeviceIDs, cl.clGetDeviceInfo):
        function.restype = ctypes.c_int32

    def text(getter, handle, key: int) -> str:
        n = size(0)
        if getter(handle, key, 0, None, ctypes.byref(n)) != 0 or n.value == 0:
            return ""
        buffer = ctypes.create_string_buffer(n.value)
        if getter(handle, key, n.value, buffer, None) != 0:
            return ""
        return buffer.value.decode(errors="replace").strip()

    count = u32(0)
    code = cl.clGetPlatformIDs(0, None, ctypes.byref(count))
    if code != 0 or count.value == 0:
        return f"no OpenCL platform (clGetPlatformIDs: {code}, {count.value} platforms)"
    platforms = (ptr * count.value)()
    cl.clGetPlatformIDs(count.value, platforms, None)
    out = []
    for index, platform in enumerate(platforms):
        devices = []
        n = u32(0)
        if cl.clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 0, None, ctypes.byref(n)) == 0 and n.value:
            handles = (ptr * n.value)()
            cl.clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, n.value, handles, None)
            for number, device in enumerate(handles):
                kind = ctypes.c_uint64(0)
                cl.clGetDeviceInfo(device, CL_DEVICE_TYPE, ctypes.sizeof(kind), ctypes.byref(kind), None)
                devices.append({
                    "index": number,
                    "name": text(cl.clGetDeviceInfo, device, CL_DEVICE_NAME),
                    "vendor": text(cl.clGetDeviceInfo, device, CL_DEVICE_VENDOR),
                    "type": _kinds(kind.value),
                    "driver": text(cl.clGetDeviceInfo, device, CL_DRIVER_VERSION),
                })
        out.append({
            "index": index,
            "name": text(cl.clGetPlatformInfo, platform, CL_PLATFORM_NAME),
            "vendor": text(cl.clGetPlatformInfo, platform, CL_PLATFORM_VENDOR),
            "version": text(cl.clGetPlatformInfo, platform, CL_PLATFORM_VERSION),
            "devices": devices,
        })
    return out


def icd_files() -> dict[str, str]:
    """Each registered ICD file and the library it names (OCL_ICD_VENDORS overrides the folder)."""
    folder = Path(os.environ.get("OCL_ICD_VENDORS", ICD_FOLDER))
    try:
        return {p.name: p.read_text(errors="replace").strip() for p in sorted(folder.glob("*.icd"))}
    except OSError:
        return {}


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


def gather() -> dict:
    return {"opencl_platforms": opencl_platforms(), "opencl_icd_files": icd_files(),
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
