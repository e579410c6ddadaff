"""A fit's measured peak memory, and the run's comparison of estimates with peaks.

RAM: the process's peak resident set (Linux's VmHWM, reset through /proc/self/clear_refs when
the fit starts, so a reused worker reports this fit's peak), sampled with psutil where that
reset is not available. GPU: torch's allocator peak when the fit used torch on CUDA, and
NVML's figure for this process (its CUDA context included), sampled while the fit runs.
"""

from __future__ import annotations

import sys
import threading
from typing import Optional


SAMPLE_SECONDS = 0.2
STATUS = "/proc/self/status"


def _hwm() -> Optional[int]:
    try:
        with open(STATUS) as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _reset_hwm() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def _rss() -> int:
    import psutil

    return psutil.Process().memory_info().rss


class PeakMemory:
    """`with PeakMemory(gpu=True) as peak: ...` then `peak.ram`, `peak.gpu` (bytes), and `peak.gpu_devices`:
    the NVML indices of the devices NVML saw this process use (the plan's device ids)."""

    def __init__(self, gpu: bool = False):
        self.watch_gpu = gpu
        self.ram = 0
        self.gpu = 0
        self.gpu_devices: set[int] = set()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._exact_ram = False
        self._nvml = None

    def __enter__(self) -> "PeakMemory":
        self._exact_ram = _reset_hwm() and _hwm() is not None
        if not self._exact_ram:
            self.ram = _rss()
        if self.watch_gpu:
            self._nvml = _NvmlProcess.open()
            torch = sys.modules.get("torch")
            if torch is not None and torch.cuda.is_initialized():
                for i in range(torch.cuda.device_count()):
                    torch.cuda.reset_peak_memory_stats(i)
        if not self._exact_ram or self._nvml is not None:
            self._thread = threading.Thread(target=self._sample, name="peak-memory", daemon=True)
            self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(SAMPLE_SECONDS):
            self._sample_once()

    def _sample_once(self) -> None:
        if not self._exact_ram:
            self.ram = max(self.ram, _rss())
        if self._nvml is not None:
            self.gpu = max(self.gpu, self._nvml.used(self.gpu_devices))

    def __exit__(self, *exc) -> None:
        self._sample_once()
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._exact_ram:
            self.ram = _hwm() or 0
        if self._nvml is not None:
            self._nvml.close()
        torch = sys.modules.get("torch") if self.watch_gpu else None
        if torch is not None and torch.cuda.is_initialized():
            allocated = max((torch.cuda.max_memory_allocated(i) for i in range(torch.cuda.device_count())), default=0)
            self.gpu = max(self.gpu, allocated)


class _NvmlProcess:
    """This process's memory on its most used GPU, as NVML reports it (None where NVML is absent)."""

    def __init__(self, nvml, handles):
        import os

        self.nvml, self.handles, self.pid = nvml, handles, os.getpid()

    @classmethod
    def open(cls) -> Optional["_NvmlProcess"]:
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

    def used(self, seen_on: Optional[set] = None) -> int:
        """This process's memory on its most used device; the index of each device it is on joins `seen_on`."""
        most = 0
        for index, handle in enumerate(self.handles):
            try:
                processes = self.nvml.nvmlDeviceGetComputeRunningProcesses(handle)
            except Exception:
                continue
            for p in processes:
                if p.pid == self.pid and p.usedGpuMemory:
                    most = max(most, int(p.usedGpuMemory))
                    if seen_on is not None:
                        seen_on.add(index)
        return most

    def close(self) -> None:
        try:
            self.nvml.nvmlShutdown()
        except Exception:
            pass
