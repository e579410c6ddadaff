"""Apple silicon's GPU through Metal Performance Shaders: the network only, untested on hardware.

torch trains on it as device `mps` (`torch.backends.mps`); neither XGBoost nor LightGBM has an MPS
build, so a GBM cannot be placed here. One device, sharing the machine's memory: no visibility
variable, no free-memory figure (the batch search sizes itself from the RAM), and the driver's
allocation for this process as its memory.
"""

from __future__ import annotations

import platform
import sys
from typing import Optional

from pipeline.accelerators.base import Accelerator, Device, ProcessMemory
from pipeline.accelerators.cpu import total_ram


def is_apple_silicon() -> bool:
    return platform.system() == "Darwin" and platform.machine() == "arm64"


class MpsProcess(ProcessMemory):
    """The Metal driver's allocation for this process, once torch is loaded in it."""

    def used(self, seen_on: Optional[set] = None) -> int:
        torch = sys.modules.get("torch")
        if torch is None or not torch.backends.mps.is_available():
            return 0
        used = int(torch.mps.driver_allocated_memory())
        if used and seen_on is not None:
            seen_on.add(0)
        return used


class MPSAccelerator(Accelerator):
    name = "mps"
    label = "MPS"
    torch_type = "mps"
    plan_device = "cuda"  # a GPU fit in the plan; the process's torch device is "mps"

    def detect(self) -> tuple[Device, ...]:
        if not is_apple_silicon():
            return ()
        return (Device("0", "Apple silicon GPU (MPS)", total_ram() or 0),)

    def torch_device(self, local, rank: int = 0) -> str:
        return "mps" if local else "cpu"

    def memory_probe(self) -> Optional[ProcessMemory]:
        return MpsProcess() if is_apple_silicon() else None

    def synchronize(self, device) -> None:
        import torch

        torch.mps.synchronize()

    def empty_cache(self, device) -> None:
        import torch

        torch.mps.empty_cache()

    def rng_state(self, device):
        import torch

        return torch.mps.get_rng_state()

    def set_rng_state(self, state, device) -> None:
        import torch

        if state is not None:
            torch.mps.set_rng_state(state)
