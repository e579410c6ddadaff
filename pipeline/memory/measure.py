"""A fit's measured peak memory, and the run's comparison of estimates with peaks.

RAM: the process's peak resident set (Linux's VmHWM, reset through /proc/self/clear_refs when
the fit starts, so a reused worker reports this fit's peak), sampled with psutil where that
reset is not available. GPU: torch's allocator peak when the fit used torch on the GPU, and the
driver's figure for this process (its context included), sampled while the fit runs; both come
from the machine's accelerator (pipeline.accelerators).
"""

from __future__ import annotations

import threading
from typing import Optional

from pipeline import accelerators

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
    the driver's indices of the devices it saw this process use (the plan's device ids)."""

    def __init__(self, gpu: bool = False):
        self.watch_gpu = gpu
        self.ram = 0
        self.gpu = 0
        self.gpu_devices: set[int] = set()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._exact_ram = False
        self._probe: Optional[accelerators.ProcessMemory] = None

    def __enter__(self) -> "PeakMemory":
        self._exact_ram = _reset_hwm() and _hwm() is not None
        if not self._exact_ram:
            self.ram = _rss()
        if self.watch_gpu:
            self._probe = accelerators.memory_probe()
            accelerators.reset_torch_peaks()
        if not self._exact_ram or self._probe is not None:
            self._thread = threading.Thread(target=self._sample, name="peak-memory", daemon=True)
            self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(SAMPLE_SECONDS):
            self._sample_once()

    def _sample_once(self) -> None:
        if not self._exact_ram:
            self.ram = max(self.ram, _rss())
        if self._probe is not None:
            self.gpu = max(self.gpu, self._probe.used(self.gpu_devices))

    def __exit__(self, *exc) -> None:
        self._sample_once()
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._exact_ram:
            self.ram = _hwm() or 0
        if self._probe is not None:
            self._probe.close()
        allocated = accelerators.torch_peaks() if self.watch_gpu else None
        if allocated is not None:
            self.gpu = max(self.gpu, allocated)
