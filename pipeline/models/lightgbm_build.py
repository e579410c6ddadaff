"""Which GPU learner this LightGBM can use on this machine: its CUDA learner, its OpenCL learner on an
OpenCL *GPU* device, or neither.

The PyPI wheel carries only the OpenCL learner (`device_type=gpu`); the CUDA learner
(`device_type=cuda`), which LightGBM's maintainers recommend on NVIDIA cards, needs a build from
source with `USE_CUDA=ON` (`make install-gpu`). No API tells how the library was built, but its file
does: a learner left out of the build leaves its error message in lib_lightgbm.so ("CUDA Tree Learner
was not enabled in this build", "GPU Tree Learner ..." for OpenCL), which `built_learners` reads
without loading or running anything. Planning answers from that and from the NVIDIA driver's presence
(no libcuda: no at once), so a dry run opens no CUDA context.

Where a device must really work (`cuda_unavailable_reason`, and the engine's check before real fits),
a short child process trains one round on 64 rows with `device_type=cuda`
(`pipeline.models.lightgbm_gpu.probe`): the CUDA context it opens (hundreds of MiB on the device, most
of a second) dies with the child. Where the library's file cannot be read, planning asks the child too.

The OpenCL check only lists devices (ctypes, no context): PoCL's CPU device is an OpenCL device but
not a GPU, and LightGBM's OpenCL learner on it is slower than its CPU learner. A platform may list
both (PoCL with its CUDA backend: a CPU and the NVIDIA card), and LightGBM's `gpu_device_id` counts
all of a platform's devices, so `opencl_choice` names the GPU's index among them. Where several
platforms have the GPU, its vendor's own (NVIDIA's ICD beside PoCL's CUDA backend) is taken first.
The devices are listed through the loader LightGBM itself calls: the PyPI wheel links Khronos's ICD
loader in, which may see other platforms, or the same in another order, than the system's
libOpenCL.so.1 (on an H200 box the system's loader listed NVIDIA's platform second and LightGBM's saw
PoCL's CPU alone, so the index named from the system's listing trained on the CPU).
"""

from __future__ import annotations

import ctypes
import functools
import logging
import mmap
import os
from pathlib import Path
from typing import NamedTuple, Optional, Sequence

log = logging.getLogger(__name__)

NOT_BUILT = "was not enabled in this build"  # LightGBM's message when a learner was not compiled in
MARKERS = {"cuda": "CUDA Tree Learner " + NOT_BUILT, "gpu": "GPU Tree Learner " + NOT_BUILT}
CL_DEVICE_TYPE_CPU, CL_DEVICE_TYPE_GPU, CL_DEVICE_TYPE_ALL = 1 << 1, 1 << 2, 0xFFFFFFFF
CL_DEVICE_TYPE, CL_DEVICE_NAME, CL_DEVICE_VENDOR, CL_PLATFORM_VENDOR = 0x1000, 0x102B, 0x102C, 0x0903
ICD_FOLDER = Path("/etc/OpenCL/vendors")  # where the ICD loaders find the drivers, unless OCL_ICD_VENDORS


class OpenCLDevice(NamedTuple):
    type: int  # CL_DEVICE_TYPE's bits
    name: str
    vendor: str


def lightgbm_gpu_learner() -> Optional[str]:
    """The GPU learner to use here: 'cuda' (the CUDA build, on NVIDIA), else 'gpu' (OpenCL, when this build
    has its OpenCL learner and an OpenCL platform it sees has a GPU device), else None (the CPU learner)."""
    if lightgbm_cuda_available():
        return "cuda"
    built = built_learners(_library_file())
    if (built is None or built["gpu"]) and opencl_gpu_platforms():
        return "gpu"
    return None


@functools.lru_cache(maxsize=1)
def lightgbm_cuda_available() -> bool:
    """Whether this LightGBM has its CUDA learner and this machine an NVIDIA driver, for planning: from
    the library's file, with no child process unless the file cannot be read (see the module's doc)."""
    if not _nvidia_driver():
        return False
    built = built_learners(_library_file())
    if built is None:
        return cuda_unavailable_reason() is None
    return built["cuda"]


@functools.lru_cache(maxsize=1)
def cuda_unavailable_reason() -> Optional[str]:
    """Why LightGBM's CUDA learner cannot train here, or None when one round in a child process trained."""
    if not _nvidia_driver():
        return "no NVIDIA driver (libcuda.so.1 does not load)"
    library = _library_file()
    built = built_learners(library)
    if built is not None and not built["cuda"]:
        return f"{MARKERS['cuda']} ({library})"
    from pipeline.models.lightgbm_gpu import probe

    return probe({"device_type": "cuda"}, {})


@functools.lru_cache(maxsize=8)
def built_learners(library: Optional[Path]) -> Optional[dict[str, bool]]:
    """Which GPU learners ('cuda', 'gpu') the library file was built with; None when it cannot be read."""
    if library is None:
        return None
    try:
        with open(library, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return {learner: data.find(marker.encode()) < 0 for learner, marker in MARKERS.items()}
    except (OSError, ValueError) as exc:  # ValueError: an empty file cannot be mapped
        log.debug("could not read %s (%s)", library, exc)
        return None


def opencl_choice(platforms: Sequence[Sequence[int]], ordinal: int = 0, prefer: Sequence[int] = ()) -> dict:
    """`gpu_platform_id` and `gpu_device_id` of the `ordinal`-th GPU device of the first platform that has
    one, given each platform's device types in LightGBM's order, the platforms `prefer` names first;
    {} when there is no such device."""
    for platform in [*prefer, *(i for i in range(len(platforms)) if i not in prefer)]:
        types = platforms[platform]
        gpus = [index for index, kind in enumerate(types) if kind & CL_DEVICE_TYPE_GPU]
        if gpus:
            if ordinal >= len(gpus):
                return {}
            return {"gpu_platform_id": platform, "gpu_device_id": gpus[ordinal]}
    return {}


def opencl_gpu_device(ordinal: int = 0) -> dict:
    """`opencl_choice` on this machine's OpenCL devices, a GPU vendor's own platform first."""
    platforms = opencl_devices()
    return opencl_choice([[d.type for d in devices] for devices in platforms], ordinal,
                         own_platforms(platforms, opencl_platform_vendors()))


def own_platforms(platforms: Sequence[Sequence[OpenCLDevice]], vendors: Sequence[str]) -> tuple[int, ...]:
    """The platforms whose vendor made a GPU they list: the GPU's own driver, not a portable runtime
    (PoCL's vendor is "The pocl project" whatever devices it drives)."""
    return tuple(i for i, (devices, vendor) in enumerate(zip(platforms, vendors))
                 if vendor and any(d.type & CL_DEVICE_TYPE_GPU and d.vendor == vendor for d in devices))


def unregistered_nvidia_opencl() -> Optional[str]:
    """NVIDIA's OpenCL driver where the dynamic linker finds it but no ICD file in the folder the loaders
    read (OCL_ICD_VENDORS, else /etc/OpenCL/vendors) names it; else None. (A container image may carry the
    driver's libraries without its nvidia.icd: the H200 box of 2026-11-27.)"""
    import ctypes.util

    found = ctypes.util.find_library("nvidia-opencl")
    if found is None:
        return None
    return None if any("nvidia-opencl" in library for library in icd_files().values()) else found


def icd_files() -> dict[str, str]:
    """Each registered ICD file and the library it names, from the folder the loaders read
    (OCL_ICD_VENDORS, else /etc/OpenCL/vendors); {} where it cannot be read."""
    folder = Path(os.environ.get("OCL_ICD_VENDORS") or ICD_FOLDER)
    try:
        return {p.name: p.read_text(errors="replace").strip() for p in sorted(folder.glob("*.icd"))}
    except OSError:
        return {}


def opencl_platform_vendors() -> tuple[str, ...]:
    """Each OpenCL platform's vendor, in the order LightGBM numbers them; () without an OpenCL loader."""
    return tuple(vendor for vendor, _ in opencl_platforms())


def opencl_gpu_platforms() -> tuple[int, ...]:
    """The indices of the OpenCL platforms with a GPU device, in the order LightGBM numbers them
    (`gpu_platform_id`); () without an OpenCL loader or GPU."""
    return tuple(i for i, devices in enumerate(opencl_devices())
                 if any(d.type & CL_DEVICE_TYPE_GPU for d in devices))


def opencl_gpu_names() -> frozenset[str]:
    """The names of this machine's OpenCL GPU devices."""
    return frozenset(d.name for devices in opencl_devices() for d in devices if d.type & CL_DEVICE_TYPE_GPU)


def opencl_devices() -> tuple[tuple[OpenCLDevice, ...], ...]:
    """Each OpenCL platform's devices of every type, in the order LightGBM numbers them (`gpu_platform_id`,
    then `gpu_device_id`: boost::compute's `platform.devices()`); () without an OpenCL loader."""
    return tuple(devices for _, devices in opencl_platforms())


@functools.lru_cache(maxsize=1)
def opencl_platforms() -> tuple[tuple[str, tuple[OpenCLDevice, ...]], ...]:
    """(vendor, devices of every type) of each OpenCL platform, listed once per process in LightGBM's
    order; () without an OpenCL loader."""
    cl = opencl_library()
    if cl is None:
        return ()
    return tuple((info_text(cl.clGetPlatformInfo, platform, CL_PLATFORM_VENDOR),
                  tuple(device_info(cl, device) for device in devices))
                 for platform, devices in opencl_handles(cl))


def opencl_library() -> Optional[ctypes.CDLL]:
    """The OpenCL ICD loader LightGBM's OpenCL learner calls (the one linked into its library, where it
    has one; else the system's libOpenCL.so.1) with the signatures of the calls made here; None where
    neither loads."""
    library = _library_file()
    return (loader(library) if library is not None else None) or loader(None)


def loader(path: Optional[Path]) -> Optional[ctypes.CDLL]:
    """The OpenCL entry points of `path` (a library that exports them: lib_lightgbm.so of a build with
    its OpenCL learner), or of the system's libOpenCL.so.1 for None; None where it has none."""
    try:
        cl = ctypes.CDLL(str(path) if path is not None else "libOpenCL.so.1")
    except OSError:
        return None
    if not hasattr(cl, "clGetPlatformIDs"):
        return None
    u32, ptr, size = ctypes.c_uint32, ctypes.c_void_p, ctypes.c_size_t
    cl.clGetPlatformIDs.argtypes = [u32, ctypes.POINTER(ptr), ctypes.POINTER(u32)]
    cl.clGetPlatformInfo.argtypes = [ptr, u32, size, ptr, ctypes.POINTER(size)]
    cl.clGetDeviceIDs.argtypes = [ptr, ctypes.c_uint64, u32, ctypes.POINTER(ptr), ctypes.POINTER(u32)]
    cl.clGetDeviceInfo.argtypes = [ptr, u32, size, ptr, ctypes.POINTER(size)]
    for function in (cl.clGetPlatformIDs, cl.clGetPlatformInfo, cl.clGetDeviceIDs, cl.clGetDeviceInfo):
        function.restype = ctypes.c_int32
    return cl


def opencl_handles(cl: ctypes.CDLL) -> list[tuple[int, tuple[int, ...]]]:
    """(platform, its devices of every type) handles in the loader's order; a platform with no device keeps
    its index with none; [] without a platform."""
    u32, ptr = ctypes.c_uint32, ctypes.c_void_p
    count = u32(0)
    if cl.clGetPlatformIDs(0, None, ctypes.byref(count)) != 0 or count.value == 0:
        return []
    platforms = (ptr * count.value)()
    if cl.clGetPlatformIDs(count.value, platforms, None) != 0:
        return []
    found = []
    for platform in platforms:
        n = u32(0)
        devices = ()
        if cl.clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 0, None, ctypes.byref(n)) == 0 and n.value:
            handles = (ptr * n.value)()
            if cl.clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, n.value, handles, None) == 0:
                devices = tuple(handles)
        found.append((platform, devices))
    return found


def device_info(cl, device) -> OpenCLDevice:
    """A device handle's type bits, name and vendor (`cl`: opencl_library())."""
    kind = ctypes.c_uint64(0)
    if cl.clGetDeviceInfo(device, CL_DEVICE_TYPE, ctypes.sizeof(kind), ctypes.byref(kind), None) != 0:
        kind.value = 0
    return OpenCLDevice(kind.value, info_text(cl.clGetDeviceInfo, device, CL_DEVICE_NAME),
                        info_text(cl.clGetDeviceInfo, device, CL_DEVICE_VENDOR))


def info_text(getter, handle, key: int) -> str:
    """A text property of a platform or device (`getter`: clGetPlatformInfo or clGetDeviceInfo); "" if none."""
    size = ctypes.c_size_t(0)
    if getter(handle, key, 0, None, ctypes.byref(size)) != 0 or size.value == 0:
        return ""
    buffer = ctypes.create_string_buffer(size.value)
    if getter(handle, key, size.value, buffer, None) != 0:
        return ""
    return buffer.value.decode(errors="replace").strip()


def _nvidia_driver() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")  # loading the driver's library opens no context
    except OSError:
        return False
    return True


def _library_file() -> Optional[Path]:
    """This LightGBM's lib_lightgbm.so, without importing lightgbm; None when it is not found."""
    from pipeline.models import native

    try:
        return Path(native._libpath("lightgbm")._find_lib_path()[0])
    except Exception:  # noqa: BLE001 - an unknown layout, or no LightGBM
        return None
