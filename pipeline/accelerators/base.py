"""What every accelerator answers, in the shape of Lightning Fabric's `Accelerator`.

One subclass per kind of hardware (cpu, cuda, rocm, mps), each in its own module, registered in
`pipeline.accelerators`. Detection reads the driver's management library (NVML, AMD SMI) or the
platform, never torch, so planning stays light; the torch methods run inside a fit, where torch is
loaded anyway, and take the `torch.device` the fit trains on.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar, Iterable, Mapping, Optional, Sequence


@dataclass(frozen=True)
class Device:
    """One device a machine lists: its visibility token (index or UUID), name and memory in bytes."""

    token: str
    name: str
    memory: int


class ProcessMemory(ABC):
    """This process's memory on its devices, as the driver reports it (its context included)."""

    @abstractmethod
    def used(self, seen_on: Optional[set] = None) -> int:
        """Bytes on the device this process uses most; each device index it is on joins `seen_on`."""

    def close(self) -> None:
        """Release the driver's library."""


class ListedProcessMemory(ProcessMemory):
    """A driver whose library lists each device's processes (NVML, AMD SMI): `_processes` reads one
    device's list, `used` picks out this process."""

    handles: list  # the library's device handles, in device order
    pid: int  # this process

    @abstractmethod
    def _processes(self, handle) -> Iterable[tuple[int, int]]:
        """(pid, bytes) of each process on the device `handle`; raises where the library cannot tell."""

    def used(self, seen_on: Optional[set] = None) -> int:
        most = 0
        for index, handle in enumerate(self.handles):
            try:
                processes = list(self._processes(handle))
            except Exception:  # a device the library cannot read: nothing of ours seen there
                continue
            for pid, used in processes:
                if pid == self.pid and used:
                    most = max(most, int(used))
                    if seen_on is not None:
                        seen_on.add(index)
        return most


class Accelerator(ABC):
    """One kind of hardware: how to find it, show it to a process, measure it and name it to libraries."""

    name: ClassVar[str]  # the value of `model.<name>.device`
    label: ClassVar[str]  # how messages name its devices ("CUDA", "ROCm", "MPS")
    torch_type: ClassVar[str]  # torch's device type for it ("cpu", "cuda", "mps")
    plan_device: ClassVar[str]  # what the plan records for a fit on it: "cpu", or "cuda" for a GPU fit
    visible_vars: ClassVar[tuple[str, ...]] = ()  # variables that restrict the devices a process sees
    fp16: ClassVar[bool] = False  # float16 autocast with a gradient scaler
    fused_optimizer: ClassVar[bool] = False  # torch's fused AdamW runs on it

    # ------------------------------------------------------------------ the machine
    @abstractmethod
    def detect(self) -> tuple[Device, ...]:
        """The devices this machine lists (none: absent), in the order the plan numbers them."""

    def is_available(self) -> bool:
        return bool(self.detect())

    def parse_devices(self, value: Optional[str]) -> Optional[tuple[str, ...]]:
        """The tokens of a visibility variable's value (None: unset, every device visible)."""
        if value is None:
            return None
        return tuple(t.strip() for t in value.split(",") if t.strip())

    def visible_tokens(self, environ: Mapping[str, str] = os.environ) -> Optional[tuple[str, ...]]:
        """The tokens this process's environment restricts it to (None: every device)."""
        for var in self.visible_vars:
            if environ.get(var) is not None:
                return self.parse_devices(environ[var])
        return None

    def visible_env(self, tokens: Sequence[str]) -> dict[str, str]:
        """The environment that shows a child process exactly these devices."""
        return {var: ",".join(tokens) for var in self.visible_vars[:1]}

    def memory_probe(self) -> Optional[ProcessMemory]:
        """A reader of this process's device memory; None where the driver's library is absent."""
        return None

    # ------------------------------------------------------------------ names given to libraries
    def torch_device(self, local: Sequence[int], rank: int = 0) -> str:
        """torch's device of one rank of a fit: its own device among the fit's ordinals."""
        return f"{self.torch_type}:{local[rank]}" if local else "cpu"

    # ------------------------------------------------------------------ inside a torch fit
    def setup_device(self, device) -> None:
        """Make `device` this process's current device."""

    def synchronize(self, device) -> None:
        """Wait for the device's queued work (so that a timer measures it)."""

    def reset_peak_memory(self, device) -> None:
        """Start counting the allocator's peak afresh."""

    def peak_memory(self, device) -> Optional[int]:
        """The allocator's peak bytes since the last reset; None where the device has no such figure."""
        return None

    def free_memory(self, device) -> Optional[int]:
        """Bytes free on the device; None where the device shares the machine's RAM."""
        return None

    def empty_cache(self, device) -> None:
        """Return the allocator's cached blocks to the driver."""

    def rng_state(self, device):
        """The device's random generator state (None: it has none of its own)."""
        return None

    def set_rng_state(self, state, device) -> None:
        """Restore a state `rng_state` returned."""

    def ddp_device_ids(self, device) -> Optional[list[int]]:
        """DistributedDataParallel's `device_ids` for a rank on `device`."""
        return None

    def torch_peaks(self) -> Optional[int]:
        """The largest allocator peak over this process's devices, where torch started them; else None."""
        return None

    def reset_torch_peaks(self) -> None:
        """Reset the allocator peaks of every device torch started in this process."""
