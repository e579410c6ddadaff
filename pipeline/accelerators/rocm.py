"""AMD GPUs through ROCm (HIP): written from AMD's and PyTorch's documentation, untested on hardware.

A ROCm build of torch reports its HIP devices as `cuda` devices (`torch.version.hip` is set), so
the torch calls are CUDA's. The GBM libraries run here through AMD's builds: XGBoost built with
`USE_HIP` (AMD's `amd_xgboost` wheels) takes `device="cuda"`, LightGBM's ROCm port (`amd_lightgbm`,
built with `USE_ROCM`) its CUDA learner, and LightGBM's OpenCL learner runs on ROCm's OpenCL.
Devices are found through AMD SMI's Python module (`amdsmi`), else the `rocm-smi` command; a
process is shown its devices through `HIP_VISIBLE_DEVICES` (ROCm also honours
`ROCR_VISIBLE_DEVICES` and, for CUDA compatibility, `CUDA_VISIBLE_DEVICES`, which it reads too).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from typing import Optional, Sequence

from pipeline.accelerators.base import Accelerator, Device, ListedProcessMemory, ProcessMemory
from pipeline.accelerators.cuda import CUDAAccelerator

VISIBLE = "HIP_VISIBLE_DEVICES"


def is_rocm_torch() -> bool:
    """Whether the torch this process imported is a ROCm build (never imports torch itself)."""
    torch = sys.modules.get("torch")
    return bool(torch is not None and getattr(getattr(torch, "version", None), "hip", None))


def amdsmi_devices() -> list[tuple[str, str, int]]:
    """(UUID, name, VRAM bytes) of each GPU AMD SMI lists; [] without the module or a driver."""
    try:
        import amdsmi
    except ImportError:
        return []
    try:
        amdsmi.amdsmi_init()
    except Exception:
        return []
    try:
        out = []
        for handle in amdsmi.amdsmi_get_processor_handles():
            name = amdsmi.amdsmi_get_gpu_asic_info(handle).get("market_name", "AMD GPU")
            uuid = amdsmi.amdsmi_get_gpu_device_uuid(handle)
            memory = amdsmi.amdsmi_get_gpu_memory_total(handle, amdsmi.AmdSmiMemoryType.VRAM)
            out.append((str(uuid), str(name), int(memory)))
        return out
    except Exception:
        return []
    finally:
        amdsmi.amdsmi_shut_down()


def rocm_smi_devices() -> list[tuple[str, str, int]]:
    """The same from `rocm-smi --json` (cards in index order)."""
    if shutil.which("rocm-smi") is None:
        return []
    try:
        text = subprocess.run(
            ["rocm-smi", "--showproductname", "--showmeminfo", "vram", "--showuniqueid", "--json"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout
        cards = json.loads(text)
    except (subprocess.SubprocessError, OSError, ValueError):
        return []
    out = []
    for key in sorted((k for k in cards if k.startswith("card")), key=lambda k: int(k[4:] or 0)):
        card = cards[key]
        memory = card.get("VRAM Total Memory (B)", 0)
        name = card.get("Card Series") or card.get("Card series") or "AMD GPU"
        out.append((str(card.get("Unique ID", key)), str(name), int(memory)))
    return out


class AmdSmiProcess(ListedProcessMemory):
    """This process's VRAM on its most used GPU, as AMD SMI reports it."""

    def __init__(self, amdsmi, handles):
        self.amdsmi, self.handles, self.pid = amdsmi, handles, os.getpid()

    @classmethod
    def open(cls) -> Optional["AmdSmiProcess"]:
        try:
            import amdsmi

            amdsmi.amdsmi_init()
        except Exception:
            return None
        try:
            return cls(amdsmi, list(amdsmi.amdsmi_get_processor_handles()))
        except Exception:
            amdsmi.amdsmi_shut_down()
            return None

    def _processes(self, handle):
        for p in self.amdsmi.amdsmi_get_gpu_process_list(handle):
            # AMD SMI 6.x lists process handles to look up; 7.x lists the processes' dicts
            info = p if isinstance(p, dict) else self.amdsmi.amdsmi_get_gpu_process_info(handle, p)
            yield info.get("pid"), int((info.get("memory_usage") or {}).get("vram_mem") or 0)

    def close(self) -> None:
        try:
            self.amdsmi.amdsmi_shut_down()
        except Exception:
            pass


class ROCmAccelerator(CUDAAccelerator):
    name = "rocm"
    label = "ROCm"
    visible_vars = ("ROCR_VISIBLE_DEVICES", VISIBLE, "CUDA_VISIBLE_DEVICES")

    def detect(self) -> tuple[Device, ...]:
        return tuple(Device(*g) for g in amdsmi_devices() or rocm_smi_devices())

    def parse_devices(self, value: Optional[str]) -> Optional[tuple[str, ...]]:
        return Accelerator.parse_devices(self, value)

    def visible_env(self, tokens: Sequence[str]) -> dict[str, str]:
        return {VISIBLE: ",".join(tokens)}

    def memory_probe(self) -> Optional[ProcessMemory]:
        return AmdSmiProcess.open()
