"""Which GPU learner this LightGBM can use on this machine: its CUDA learner, its OpenCL learner on an
OpenCL *GPU* device, or neither.

The PyPI wheel carries only the OpenCL learner (`device_type=gpu`); the CUDA learner
(`device_type=cuda`), which LightGBM's maintainers recommend on NVIDIA cards, needs a build from
source with `USE_CUDA=ON` (`make install-gpu`). No API tells how the library was built, so the
CUDA check trains one round on 64 rows with `device_type=cuda` in a short child process
(`pipeline.models.lightgbm_gpu.probe`): that answers both "built with CUDA" and "a device works",
in LightGBM's own words, and the CUDA context it opens (hundreds of MiB on the device, most of a
second) dies with the child instead of staying in the driver or a dry run. Without an NVIDIA driver
(no libcuda) the answer is no at once; a build without CUDA is remembered in the engine's cache,
keyed by the library file, so later runs on the same install do not start the child again.

The OpenCL check only lists devices (ctypes, no context): PoCL's CPU device is an OpenCL device but
not a GPU, and LightGBM's OpenCL learner on it is slower than its CPU learner.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import json
import logging
from pathlib import Path
from typing import Optional

log = logging.getLogger(__name__)

NOT_BUILT = "was not enabled in this build"  # LightGBM's message when a learner was not compiled in
CL_DEVICE_TYPE_GPU = 1 << 2


def lightgbm_gpu_learner() -> Optional[str]:
    """The GPU learner to use here: 'cuda' (the CUDA build, on NVIDIA), else 'gpu' (OpenCL, when an
    OpenCL platform has a GPU device), else None (the CPU learner)."""
    if lightgbm_cuda_available():
        return "cuda"
    if opencl_gpu_platforms():
        return "gpu"
    return None


@functools.lru_cache(maxsize=1)
def lightgbm_cuda_available() -> bool:
    """Whether this LightGBM trains with `device_type=cuda` on this machine (see the module's doc)."""
    return cuda_unavailable_reason() is None


@functools.lru_cache(maxsize=1)
def cuda_unavailable_reason() -> Optional[str]:
    """Why LightGBM's CUDA learner cannot train here, or None when it can."""
    if not _nvidia_driver():
        return "no NVIDIA driver (libcuda.so.1 does not load)"
    from pipeline.models import native

    entry = _cache_entry()
    kept = native.read_cached("lightgbm-cuda", entry) if entry is not None else None
    if isinstance(kept, dict) and isinstance(kept.get("reason"), str):
        return kept["reason"]
    from pipeline.models.lightgbm_gpu import probe

    reason = probe({"device_type": "cuda"}, {})
    if reason is not None and NOT_BUILT in reason and entry is not None:  # the build's, not the machine's
        native.keep_cached("lightgbm-cuda", entry, {"reason": reason})
    return reason


@functools.lru_cache(maxsize=1)
def opencl_gpu_platforms() -> tuple[int, ...]:
    """The indices of the OpenCL platforms with a GPU device, in the order LightGBM numbers them
    (`gpu_platform_id`); () without an OpenCL loader or GPU."""
    try:
        cl = ctypes.CDLL("libOpenCL.so.1")
    except OSError:
        return ()
    count = ctypes.c_uint32(0)
    if cl.clGetPlatformIDs(0, None, ctypes.byref(count)) != 0 or count.value == 0:
        return ()
    platforms = (ctypes.c_void_p * count.value)()
    if cl.clGetPlatformIDs(count.value, platforms, None) != 0:
        return ()
    found = []
    for index, platform in enumerate(platforms):
        devices = ctypes.c_uint32(0)
        code = cl.clGetDeviceIDs(ctypes.c_void_p(platform), ctypes.c_uint64(CL_DEVICE_TYPE_GPU), 0, None,
                                 ctypes.byref(devices))
        if code == 0 and devices.value > 0:
            found.append(index)
    return tuple(found)


def _nvidia_driver() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")  # loading the driver's library opens no context
    except OSError:
        return False
    return True


def _cache_entry() -> Optional[str]:
    """The name the answer of this LightGBM library file is kept under; None when the file is not known."""
    from pipeline.models import native

    try:
        library = Path(native._libpath("lightgbm")._find_lib_path()[0])
        stat = library.stat()
    except Exception:  # noqa: BLE001 - an unknown layout, or no LightGBM: no key, so no cache
        return None
    key = json.dumps([str(library), stat.st_size, stat.st_mtime_ns, "device_type=cuda"])
    return f"{hashlib.sha256(key.encode()).hexdigest()}.json"
