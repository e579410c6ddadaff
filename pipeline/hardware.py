"""The run's total resources: detected from this machine, or a declared `+hardware=NAME` profile."""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Optional

from pipeline import accelerators
from pipeline.accelerators import cuda
from pipeline.errors import HardwareError
from pipeline.quantities import cpu_count, fmt, gpu_amount
from pipeline.resources import Resources, select_devices

if TYPE_CHECKING:
    from pipeline.config import HardwareConf

log = logging.getLogger(__name__)

SIMULATE_ENV = "PIPELINE_SIMULATE_GPUS"  # tests: pretend this many CUDA devices exist
SLOT_CPUS_ENV = "PIPELINE_SLOT_CPUS"  # set by the GPU-aware launcher: this job's CPU share
SLOT_GPUS_ENV = "PIPELINE_SLOT_GPUS"  # ... and its GPU share of the devices CUDA_VISIBLE_DEVICES shows


@dataclass(frozen=True)
class Machine:
    """What this machine has: CPUs, and the CUDA devices this process may see."""

    num_cpus: int
    gpu_tokens: tuple[str, ...] = ()  # CUDA_VISIBLE_DEVICES token of each visible device
    gpu_names: tuple[str, ...] = ()
    gpu_memory: tuple[int, ...] = ()  # bytes
    simulated: bool = False
    gpu_share: Optional[Fraction] = None  # a launcher slot's share of the visible devices (e.g. 0.5)

    @property
    def num_gpus(self) -> int:
        return len(self.gpu_tokens)

    @property
    def gpu_capacity(self) -> Fraction:
        """GPUs this process may use: its slot's share, or every visible device."""
        return self.gpu_share if self.gpu_share is not None else Fraction(self.num_gpus)


@dataclass(frozen=True)
class Hardware:
    """The total a run may use; device ids index this machine's visible CUDA devices."""

    num_cpus: int
    num_gpus: Fraction
    devices: tuple[int, ...]
    source: str  # "detected" or the declared profile's name
    tokens: tuple[str, ...] = ()  # CUDA_VISIBLE_DEVICES token for each id in `devices`
    names: tuple[str, ...] = field(default=(), compare=False)
    planned_only: bool = False  # declared larger than this machine (dry_run)

    @property
    def total(self) -> Resources:
        return Resources(self.num_cpus, self.num_gpus)

    def capacities(self) -> dict[int, Fraction]:
        """GPU capacity per device: 1 each, or the share when the whole run has less than one GPU."""
        cap = min(Fraction(1), self.num_gpus)
        return {d: cap for d in self.devices}

    def visible_devices(self, ids) -> str:
        """The CUDA_VISIBLE_DEVICES value that shows a worker exactly these devices."""
        return ",".join(self._tokens(ids))

    def worker_env(self, ids) -> dict[str, str]:
        """The environment of a worker process that sees exactly these devices (no ids: none)."""
        return cuda.child_env(self._tokens(ids))

    def _tokens(self, ids) -> tuple[str, ...]:
        lookup = dict(zip(self.devices, self.tokens))
        return tuple(lookup.get(i, str(i)) for i in ids)

    def to_json(self) -> dict:
        return {
            "num_cpus": self.num_cpus,
            "num_gpus": float(self.num_gpus),
            "devices": list(self.devices),
            "source": self.source,
            "gpu_names": list(self.names),
            "planned_only": self.planned_only,
        }

    def __str__(self) -> str:
        ids = ",".join(map(str, self.devices)) or "-"
        return f"{self.num_cpus} CPU / {fmt(self.num_gpus)} GPU (devices {ids}; {self.source})"


def detect() -> Machine:
    """CPU count (affinity-aware) and visible CUDA devices, without importing torch.

    A job started by the GPU-aware launcher sees only its slot: CUDA_VISIBLE_DEVICES names its
    devices, PIPELINE_SLOT_CPUS and PIPELINE_SLOT_GPUS its CPU count and GPU share. Inside a SLURM
    job, what SLURM gave it: see `slurm_cpus_per_task` and `visible_devices_env`.
    """
    cuda.pin_order()  # before anything in this process starts CUDA: its ordinals follow NVML's order
    machine = _detect_devices()
    cpus, share = job_cpus(machine.num_cpus), None
    if os.environ.get(SLOT_GPUS_ENV):
        share = min(gpu_amount(float(os.environ[SLOT_GPUS_ENV]), SLOT_GPUS_ENV), Fraction(machine.num_gpus))
    return Machine(cpus, machine.gpu_tokens, machine.gpu_names, machine.gpu_memory, machine.simulated, share)


def job_cpus(machine_cpus: Optional[int] = None) -> int:
    """The CPUs this job may use: the machine's (its affinity, where not given), within a SLURM job's and
    a launcher slot's CPUs. No GPU is looked for."""
    cpus = affinity_cpus() if machine_cpus is None else machine_cpus
    slurm_cpus = slurm_cpus_per_task()
    if slurm_cpus is not None:
        cpus = min(cpus, slurm_cpus)
    if os.environ.get(SLOT_CPUS_ENV):
        cpus = min(cpus, cpu_count(int(os.environ[SLOT_CPUS_ENV]), SLOT_CPUS_ENV))
    return cpus


def affinity_cpus() -> int:
    """The CPUs this process may run on (its affinity; elsewhere than Linux, the machine's)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _detect_devices() -> Machine:
    cpus = affinity_cpus()
    simulated = os.environ.get(SIMULATE_ENV)
    if simulated:
        n = int(simulated)
        tokens = tuple(map(str, range(n)))
        visible = visible_devices_env()
        if visible is not None:
            tokens = tuple(t for t in visible if t in tokens)
        return Machine(cpus, tokens, ("simulated",) * len(tokens), (0,) * len(tokens), simulated=True)
    accelerator, found = accelerators.detect_gpus()
    gpus = [(d.token, d.name, d.memory) for d in found]
    # Read only where there are GPUs: SLURM sets CUDA_VISIBLE_DEVICES=NoDevFiles for a job without any.
    visible = visible_devices_env(accelerator) if gpus else None
    if visible is None:
        return Machine(
            cpus, tuple(str(i) for i in range(len(gpus))), tuple(g[1] for g in gpus), tuple(g[2] for g in gpus)
        )
    kept = []
    for token in visible:
        if cuda.token_kind(token) == "mig":  # NVML lists parent GPUs only; the instance is one device
            kept.append((token, "MIG instance", 0))
            continue
        index = cuda.match_token(token, [g[0] for g in gpus])
        if index is None:
            var = next((v for v in accelerator.visible_vars if os.environ.get(v) is not None), cuda.VISIBLE)
            lister = "NVML" if accelerator.name == "cuda" else accelerator.label
            uuids = ", ".join(g[0] for g in gpus)
            raise HardwareError(
                f"{var}={os.environ.get(var)}: {token!r} names no GPU of this machine "
                f"({lister} lists {len(gpus)}: indices 0-{len(gpus) - 1}, UUIDs {uuids})"
            )
        kept.append((token, gpus[index][1], gpus[index][2]))
    return Machine(cpus, tuple(t for t, _, _ in kept), tuple(n for _, n, _ in kept), tuple(m for _, _, m in kept))


def slurm_cpus_per_task() -> Optional[int]:
    """Inside a SLURM job, the CPUs it was given: SLURM_CPUS_PER_TASK, or SLURM_CPUS_ON_NODE when the
    job asked for none per task (without task binding the process's affinity still shows the whole
    node); None outside a SLURM job."""
    if not os.environ.get("SLURM_JOB_ID"):
        return None
    for key in ("SLURM_CPUS_PER_TASK", "SLURM_CPUS_ON_NODE"):
        value = os.environ.get(key, "").strip()
        if value:
            try:
                return cpu_count(int(value), key)
            except ValueError:
                raise HardwareError(f"{key}={value!r} is not a CPU count; this SLURM job's environment is "
                                    "unusual: unset it or give a whole number") from None
    return None


def visible_devices_env(accelerator: Optional[accelerators.Accelerator] = None) -> Optional[tuple[str, ...]]:
    """The device tokens this process may use: its accelerator's visibility variable (CUDA_VISIBLE_DEVICES);
    inside a SLURM job that set none, the node's GPUs the job was given (SLURM_JOB_GPUS, e.g. "1,3").
    None: every device."""
    accelerator = accelerator or accelerators.CUDA
    unset = all(os.environ.get(v) is None for v in accelerator.visible_vars)
    if unset and os.environ.get("SLURM_JOB_ID") and os.environ.get("SLURM_JOB_GPUS"):
        return accelerator.parse_devices(os.environ["SLURM_JOB_GPUS"])
    return accelerator.visible_tokens()


def resolve(declared: Optional[HardwareConf], machine: Machine, *, dry_run: bool) -> Hardware:
    """The run's hardware: the machine when nothing is declared, else the checked declaration.

    A declared box larger than this machine is an error, except under dry_run, which plans for it.
    """
    if declared is None:
        ids = tuple(range(machine.num_gpus))
        source = "launcher slot" if machine.gpu_share is not None else "detected"
        return Hardware(machine.num_cpus, machine.gpu_capacity, ids, source, machine.gpu_tokens, machine.gpu_names)

    name = declared.name or "custom"
    cpus_value = declared.num_cpus
    num_cpus = machine.num_cpus if cpus_value is None else cpu_count(cpus_value, "hardware.num_cpus")
    num_gpus = gpu_amount(declared.num_gpus or 0, "hardware.num_gpus")
    needed = math.ceil(num_gpus)
    profile = f"+hardware={name}" if name != "custom" else "the declared hardware"
    too_big = []
    if num_cpus > machine.num_cpus:
        too_big.append(f"hardware.num_cpus={num_cpus} but this machine has {machine.num_cpus} CPUs")
    if num_gpus > machine.gpu_capacity:
        has = f"{machine.num_gpus} CUDA device(s)" if machine.num_gpus else "no CUDA device"
        too_big.append(f"hardware.num_gpus={fmt(num_gpus)} but this machine has {has}")
    if too_big and not dry_run:
        raise HardwareError(
            f"{profile} is larger than this machine: {'; '.join(too_big)}. "
            "To plan for that box without fitting anything, add dry_run=true"
        )
    planned_only = bool(too_big)
    if planned_only and cpus_value is None:
        log.warning(
            "hardware.num_cpus is unset: planning %s with this machine's %d CPUs; set hardware.num_cpus to the "
            "CPU count of the box you plan for", profile, num_cpus,
        )
    available = max(needed, machine.num_gpus) if planned_only else machine.num_gpus
    ids = tuple(select_devices(declared.devices, num_gpus, available))
    if planned_only:
        tokens = tuple(str(i) for i in ids)
    else:
        tokens = tuple(machine.gpu_tokens[i] for i in ids)
    names = tuple(machine.gpu_names[i] for i in ids if i < len(machine.gpu_names))
    return Hardware(num_cpus, num_gpus, ids, name, tokens, names, planned_only)
