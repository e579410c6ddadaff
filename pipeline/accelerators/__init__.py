"""The accelerators a fit may run on, in one registry: cpu, cuda, rocm, mps.

`model.<name>.device` is `auto` or a registered name, checked here against what the model's
library can run on. Each accelerator (pipeline.accelerators.base.Accelerator) finds its devices,
shows a process its share of them, reads a process's device memory, and names its devices to torch
and the GBM libraries. Adding one is a module with its subclass and a line in `REGISTRY`.

The plan records a fit as `cpu` or `cuda`: a GPU fit, on whichever GPU accelerator the machine has
(ROCm's libraries take CUDA's device names; on MPS torch's device is `mps`).
"""

from __future__ import annotations

import functools
import logging
from typing import Optional, Sequence

from pipeline.accelerators.base import Accelerator, Device, ProcessMemory
from pipeline.accelerators.cpu import CPUAccelerator
from pipeline.accelerators.cuda import CUDAAccelerator, devices_used, local_ordinals
from pipeline.accelerators.mps import MPSAccelerator
from pipeline.accelerators.rocm import ROCmAccelerator, is_rocm_torch
from pipeline.errors import ConfigError

__all__ = ["Accelerator", "Device", "ProcessMemory", "REGISTRY", "DEVICE_CHOICES", "PLAN_DEVICES", "get",
           "check_device", "detect_gpus", "machine_gpu", "for_torch", "torch_device", "memory_probe",
           "torch_peaks", "reset_torch_peaks", "local_ordinals", "devices_used"]

log = logging.getLogger(__name__)

REGISTRY: dict[str, Accelerator] = {
    a.name: a for a in (CPUAccelerator(), CUDAAccelerator(), ROCmAccelerator(), MPSAccelerator())
}
DEVICE_CHOICES = ("auto", *REGISTRY)  # the values of model.<name>.device
PLAN_DEVICES = ("auto", *dict.fromkeys(a.plan_device for a in REGISTRY.values()))  # auto, cpu, cuda
CUDA = REGISTRY["cuda"]


def get(name: str) -> Accelerator:
    return REGISTRY[name]


def gpus() -> tuple[Accelerator, ...]:
    """The accelerators a GPU fit may run on, in the order detection tries them."""
    return tuple(a for a in REGISTRY.values() if a.plan_device != "cpu")


def check_device(value, key: str, profile=None) -> str:
    """`value` of `key` (model.<name>.device), lower-cased, as the plan records it: auto, cpu or cuda.

    A ConfigError names the key, the value and what is valid for an unknown name, or for an
    accelerator the model kind's `profile` (pipeline.models.profile.ModelProfile) has no build for.
    `auto` for a kind the machine's GPU accelerator cannot run stays on the CPU, and says so. A kind
    that does not state its accelerators (a class of yours) may be placed on any.
    """
    device = str(value).strip().lower()
    if device not in DEVICE_CHOICES:
        raise ConfigError(f"{key}={value!r} is not a device; use one of {', '.join(DEVICE_CHOICES)}")
    builds = getattr(profile, "accelerators", None)
    library = getattr(profile, "library", "") or "this model"
    able = [n for n in REGISTRY if builds is None or n in builds]
    if device == "auto":
        for gpu in gpus():  # only the accelerators the kind cannot run on are looked for
            if builds is not None and gpu.name not in builds and gpu.is_available():
                log.warning("%s=auto: %s has no %s build, so it runs on the CPU", key, library, gpu.label)
                return "cpu"
        return device
    if device not in able:
        raise ConfigError(f"{key}={device}: {library} has no build that runs on {REGISTRY[device].label}; "
                          f"use one of auto, {', '.join(able)}")
    planned = REGISTRY[device].plan_device
    if planned != device:
        log.info("%s=%s: planned as a GPU fit (%s in the plan) on this machine's %s devices", key, device,
                 planned, REGISTRY[device].label)
    return planned


def detect_gpus() -> tuple[Accelerator, tuple[Device, ...]]:
    """The first GPU accelerator that finds devices on this machine, and its devices; CUDA and none
    where none does (the engine then hides CUDA devices from its children, as on any machine)."""
    for accelerator in gpus():
        found = accelerator.detect()
        if found:
            return accelerator, found
    return CUDA, ()


@functools.lru_cache(maxsize=1)
def machine_gpu() -> Accelerator:
    """This machine's GPU accelerator (CUDA where it has none), detected once per process."""
    return detect_gpus()[0]


def for_torch(device) -> Accelerator:
    """The accelerator of a torch.device: a ROCm build of torch calls its HIP devices `cuda`."""
    if device.type == "cuda":
        return REGISTRY["rocm"] if is_rocm_torch() else CUDA
    return next((a for a in REGISTRY.values() if a.torch_type == device.type), REGISTRY["cpu"])


def torch_device(local: Sequence[int], rank: int = 0) -> str:
    """torch's device of one rank of a fit on this machine's ordinals `local` (none: the CPU)."""
    return machine_gpu().torch_device(local, rank) if local else "cpu"


def _by_torch_type() -> tuple[Accelerator, ...]:
    """One GPU accelerator per torch device type (ROCm's torch calls are CUDA's)."""
    return tuple({a.torch_type: a for a in reversed(gpus())}.values())


def reset_torch_peaks() -> None:
    """Reset the allocator peaks of the devices torch started in this process (none: nothing)."""
    for accelerator in _by_torch_type():
        accelerator.reset_torch_peaks()


def torch_peaks() -> Optional[int]:
    """The largest allocator peak over the devices torch started in this process (None: it started none)."""
    peaks = [p for p in (a.torch_peaks() for a in _by_torch_type()) if p is not None]
    return max(peaks) if peaks else None


def memory_probe() -> Optional[ProcessMemory]:
    """A reader of this process's memory on this machine's GPUs; None where no driver answers."""
    for accelerator in gpus():
        probe = accelerator.memory_probe()
        if probe is not None:
            return probe
    return None
