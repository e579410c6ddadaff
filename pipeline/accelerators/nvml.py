"""NVIDIA's management library: the devices it lists and this process's memory on them.

NVML numbers devices in PCI bus order, the order the plan's device ids follow; where nvidia-ml-py or
the driver is missing, `nvidia-smi` lists them instead. Nothing here imports torch.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Any, Optional

from pipeline.accelerators.base import ListedProcessMemory

def nvml_devices() -> list[tuple[str, str, int]]:
    """(UUID, name, memory bytes) of each device NVML lists; [] without nvidia-ml-py or a driver."""
    try:
        import pynvml
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except Exception:  # no driver: NVMLError_LibraryNotFound and friends
        return []
    try:
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(handle)
            uuid = pynvml.nvmlDeviceGetUUID(handle)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle).total
            out.append((_text(uuid), _text(name), int(memory)))
        return out
    finally:
        pynvml.nvmlShutdown()


def nvidia_smi_devices() -> list[tuple[str, str, int]]:
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        text = subprocess.run(
            ["nvidia-smi", "--query-gpu=uuid,name,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout
    except (subprocess.SubprocessError, OSError):
        return []
    rows = [r.split(", ") for r in text.strip().splitlines() if r.strip()]
    return [(r[0], r[1], int(float(r[2])) * 2**20) for r in rows if len(r) == 3]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlProcess(ListedProcessMemory):
    """This process's memory on its most used GPU, as NVML reports it (None where NVML is absent)."""

    def __init__(self, nvml, handles):
        self.nvml, self.handles, self.pid = nvml, handles, os.getpid()

    @classmethod
    def open(cls) -> Optional["NvmlProcess"]:
        try:
            import pynvml

            pynvml.nvmlInit()
        except Exception:  # no nvidia-ml-py, or no driver
            return None
        try:
            handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        except Exception:
            pynvml.nvmlShutdown()
            return None
        return cls(pynvml, handles)

    def _processes(self, handle):
        return ((p.pid, p.usedGpuMemory or 0) for p in self.nvml.nvmlDeviceGetComputeRunningProcesses(handle))

    def close(self) -> None:
        try:
            self.nvml.nvmlShutdown()
        except Exception:
            pass
