"""Where the jobs of a `hydra/launcher=gpu` sweep run: slots of GPUs (or shares of one) and CPUs.

A slot's variables (CUDA_VISIBLE_DEVICES, PIPELINE_SLOT_CPUS/GPUS) are the environment of the
worker process that runs the slot's jobs, from its first instruction, so nothing a job imports
(torch, xgboost, lightgbm) sees another device; `pipeline.hardware.detect()` reads them back as
the job's hardware.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Optional

from hydra_plugins.pipeline_gpu_launcher._errors import LauncherConfigError
from hydra_plugins.pipeline_gpu_launcher.config import GpuLauncherConf
from pipeline.hardware import SLOT_CPUS_ENV, SLOT_GPUS_ENV, Machine
from pipeline.quantities import fmt
from pipeline.resources import DevicePool, Resources

ZERO = Fraction(0)


@dataclass(frozen=True)
class Slot:
    """Where one job runs: device ids (of this machine's visible devices), its GPU share and CPUs."""

    index: int
    device_ids: tuple[int, ...]
    tokens: tuple[str, ...]  # the devices' CUDA_VISIBLE_DEVICES tokens
    num_gpus: Fraction
    num_cpus: int

    def env(self) -> dict[str, Optional[str]]:
        """The variables a job process starts with; None removes a variable."""
        from pipeline.accelerators.cuda import child_env

        return {
            **child_env(self.tokens),  # CUDA_VISIBLE_DEVICES and the PCI bus order the tokens are in
            SLOT_CPUS_ENV: str(self.num_cpus),
            SLOT_GPUS_ENV: fmt(self.num_gpus) if self.tokens else None,
        }

    def describe(self) -> str:
        if not self.tokens:
            gpus = "no GPU"
        elif self.num_gpus < 1:
            gpus = f"GPU {self.tokens[0]} ({fmt(self.num_gpus)} of it)"
        else:
            gpus = f"GPU{'s' if len(self.tokens) > 1 else ''} {','.join(self.tokens)}"
        return f"slot {self.index}: {gpus}, {self.num_cpus} CPU{'s' if self.num_cpus != 1 else ''}"


def plan_slots(settings: GpuLauncherConf, machine: Machine, num_jobs: int) -> tuple[list[Slot], list[str]]:
    """The slots for a batch of `num_jobs` jobs, and warnings for the log.

    GPU shares go to idle devices first and share one only when all are busy (0.5 each on 4
    devices: 0, 1, 2, 3, 0, 1, 2, 3); whole numbers take whole free devices.
    """
    settings.check()
    notes: list[str] = []
    ids = _device_ids(settings, machine)
    if settings.gpus > 0 and not ids:
        notes.append(
            f"no CUDA device is visible: jobs run on CPU slots and hydra.launcher.gpus_per_job="
            f"{fmt(settings.gpus)} is not used (set it to 0 to run on CPUs on purpose)"
        )
    need = settings.gpus if ids else ZERO
    if need > len(ids):
        raise LauncherConfigError(
            f"hydra.launcher.gpus_per_job={fmt(need)} but the jobs may use {len(ids)} device(s) "
            f"{list(ids)}; give at most {len(ids)} or a share such as 0.5"
            + (", or list more hydra.launcher.devices" if settings.devices is not None else "")
        )
    if settings.cpus_per_job is not None and settings.cpus_per_job > machine.num_cpus:
        raise LauncherConfigError(
            f"hydra.launcher.cpus_per_job={settings.cpus_per_job} but this machine has {machine.num_cpus} "
            f"CPUs; give at most {machine.num_cpus}, or null to divide them among the jobs"
        )
    if num_jobs < 1:
        return [], notes
    limit = num_jobs if settings.n_jobs is None else min(num_jobs, settings.n_jobs)
    if need == 0 and settings.n_jobs is None:
        limit = min(limit, max(1, machine.num_cpus // (settings.cpus_per_job or 1)))
    if settings.cpus_per_job is None:  # each job at least one CPU of its own: no more jobs at once than CPUs
        limit = min(limit, machine.num_cpus)
    capacity = min(Fraction(1), machine.gpu_capacity) if ids else ZERO
    pool = DevicePool(0, {i: capacity for i in ids})
    placements = []
    while len(placements) < limit:
        placed = pool.try_allocate(Resources(0, need))
        if placed is None:
            break
        placements.append(placed)
    if not placements:
        raise LauncherConfigError(
            f"hydra.launcher.gpus_per_job={fmt(need)} does not fit on the devices {list(ids)} "
            f"(each offers {fmt(capacity)} GPU); lower it"
        )
    cpus = settings.cpus_per_job or max(1, machine.num_cpus // len(placements))
    if cpus * len(placements) > machine.num_cpus:
        notes.append(
            f"{len(placements)} jobs at once with {cpus} CPU(s) each ask for {cpus * len(placements)} CPUs "
            f"but this machine has {machine.num_cpus}: they share them (set hydra.launcher.n_jobs to run "
            "fewer at once)"
        )
    slots = [
        Slot(n, tuple(d for d, _ in placed), tuple(machine.gpu_tokens[d] for d, _ in placed),
             sum((s for _, s in placed), ZERO), cpus)
        for n, placed in enumerate(placements)
    ]
    return slots, notes


def check_machine(settings: GpuLauncherConf) -> None:
    """Raise now, before any job starts, when the options do not fit this machine."""
    from pipeline.hardware import detect

    plan_slots(settings, detect(), 1)


def _device_ids(settings: GpuLauncherConf, machine: Machine) -> list[int]:
    visible = machine.num_gpus
    if settings.devices is None:
        return list(range(visible)) if settings.gpus > 0 else []
    bad = [i for i in settings.devices if i >= visible]
    if bad:
        have = f"ids 0-{visible - 1}" if visible else "no CUDA device"
        raise LauncherConfigError(
            f"hydra.launcher.devices={list(settings.devices)}: device {bad[0]} is out of range; this machine "
            f"shows {visible} CUDA device(s) ({have}); give ids from that range or null for all"
        )
    return list(settings.devices)
