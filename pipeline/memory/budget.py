"""Memory as a planned resource: capacities, per-fit reservations, and the caps they put on the plan.

The box's RAM (declared `hardware.memory_gb`, else what is available now) less what the driver
holds is shared by the fits that run at once; each GPU's memory (`hardware.gpu_memory_gb`, else
NVML's total) by the fits packed onto it. A fit reserves its estimate, or the `memory_gb` /
`gpu_memory_gb` its level states (an estimate above a stated limit is an error). Folds and
trials in parallel are capped so that a wave fits; a GPU share is raised until the fits that
share a device fit in its memory; a fit that fits nowhere is a typed error before anything starts.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Callable, Optional

from pipeline.errors import ConfigError, HardwareError, ResourceError
from pipeline.memory.estimates import GiB, MiB, Estimate
from pipeline.memory.shape import DataShape
from pipeline.quantities import fmt
from pipeline.resources import Allocation, over_level

DRIVER_BYTES = 450 * MiB  # the driver process: engine, MLflow client, progress display
# beside it, twice the table: the driver's prepared data, and the data file's pages the workers map


def gb(n: float) -> str:
    return f"{n / GiB:.2f} GiB" if n < 10 * GiB else f"{n / GiB:.1f} GiB"


def _gb_value(value: Any, key: str) -> Optional[int]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ConfigError(f"{key}={value!r} must be a positive number of GiB (such as 16 or 0.5), or null")
    return int(value * GiB)


@dataclass(frozen=True)
class MemoryRequest:
    """A level's stated memory: RAM and memory per GPU, in bytes; None where unstated."""

    memory: Optional[int] = None
    gpu_memory: Optional[int] = None
    memory_key: str = ""
    gpu_key: str = ""

    @classmethod
    def parse(cls, memory_gb: Any, gpu_memory_gb: Any, prefix: str) -> "MemoryRequest":
        mk, gk = f"{prefix}.memory_gb", f"{prefix}.gpu_memory_gb"
        return cls(_gb_value(memory_gb, mk), _gb_value(gpu_memory_gb, gk), mk, gk)

    def over(self, base: "MemoryRequest") -> "MemoryRequest":
        """This request with its unset fields taken from `base` (a model's resources over parallelism.fit)."""
        return over_level(self, base, (("memory", "memory_key"), ("gpu_memory", "gpu_key")))


@dataclass(frozen=True)
class Capacity:
    """RAM of the box and memory of each of its GPUs, and where each figure comes from."""

    ram: Optional[int]
    ram_source: str
    gpu: Optional[int]  # the smallest device's memory, None when unknown
    gpu_source: str
    driver: int = DRIVER_BYTES

    @property
    def ram_for_fits(self) -> Optional[int]:
        return None if self.ram is None else self.ram - self.driver

    def to_json(self) -> dict:
        mb = lambda n: None if n is None else round(n / MiB, 1)  # noqa: E731
        return {"ram_mb": mb(self.ram), "ram_source": self.ram_source, "driver_mb": mb(self.driver),
                "ram_for_fits_mb": mb(self.ram_for_fits), "gpu_mb": mb(self.gpu), "gpu_source": self.gpu_source}


def system_ram() -> tuple[int, int]:
    """(total, available) bytes: Linux's /proc/meminfo, as psutil reads it, without importing psutil (a
    fiftieth of a second of every run's start); psutil elsewhere."""
    try:
        with open("/proc/meminfo") as fh:
            kib = {key: int(rest.split()[0]) for key, _, rest in (line.partition(":") for line in fh)
                   if key in ("MemTotal", "MemAvailable")}
        return kib["MemTotal"] * 1024, kib["MemAvailable"] * 1024
    except (OSError, KeyError, ValueError, IndexError):
        import psutil

        vm = psutil.virtual_memory()
        return vm.total, vm.available


def detect_ram() -> tuple[int, int]:
    """(total, available) bytes of RAM, within a cgroup's limit when the process has one."""
    total, available = system_ram()
    for path, usage_path in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                             ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        try:
            with open(path) as fh:
                limit = fh.read().strip()
            if limit == "max" or int(limit) >= total:
                continue
            with open(usage_path) as fh:
                used = int(fh.read().strip())
            total, available = int(limit), min(available, max(0, int(limit) - used))
        except (OSError, ValueError):
            continue
        break
    return total, available


def capacity(declared, hardware, machine, shape: Optional[DataShape], *, dry_run: bool) -> Capacity:
    """The run's memory capacities: a declared profile's figures (a HardwareConf), checked against
    this machine, or what this machine has. `hardware` and `machine` are pipeline.hardware values."""
    total, available = detect_ram()
    ram_gb = declared.memory_gb if declared is not None else None
    gpu_gb = declared.gpu_memory_gb if declared is not None else None
    ram = _gb_value(ram_gb, "hardware.memory_gb")
    if ram is not None:
        if ram > total and not dry_run:
            raise HardwareError(
                f"hardware.memory_gb={ram_gb:g} but this machine has {gb(total)} of RAM; "
                "declare at most that, or add dry_run=true to plan for a larger box"
            )
        ram_source = f"hardware.memory_gb={ram_gb:g}"
    elif hardware.planned_only:
        ram_source = "unknown: set hardware.memory_gb for the declared box"
    else:
        ram, ram_source = available, f"detected: {gb(available)} available of {gb(total)}"
    gpu = _gb_value(gpu_gb, "hardware.gpu_memory_gb")
    known = [m for i, m in enumerate(machine.gpu_memory) if i in hardware.devices and m > 0]
    if gpu is not None:
        if known and gpu > min(known) and not dry_run and not hardware.planned_only:
            raise HardwareError(
                f"hardware.gpu_memory_gb={gpu_gb:g} but the smallest of this run's GPUs has {gb(min(known))}; "
                "declare at most that, or add dry_run=true to plan for a larger box"
            )
        gpu_source = f"hardware.gpu_memory_gb={gpu_gb:g}"
    elif known and not hardware.planned_only and len(known) == len(hardware.devices):
        gpu, gpu_source = min(known), f"detected: {gb(min(known))} per device"
    else:
        gpu_source = "unknown: set hardware.gpu_memory_gb" if hardware.devices else "no GPU"
    driver = DRIVER_BYTES + (2 * shape.table_bytes if shape is not None else 0)
    return Capacity(ram, ram_source, gpu, gpu_source, driver)


@dataclass(frozen=True)
class ModelMemory:
    """One model's memory in the plan: its estimate, what each fit reserves, and what memory capped."""

    estimate: Estimate  # a fit at level 1
    ram: int  # reserved per fit, beyond the prepared table all fits share
    gpu: int  # reserved on each device of a fit
    limited: tuple[str, ...] = ()
    above: Optional[Estimate] = None  # a fit above level 1, with the stacked columns (None: no stacking)

    def at(self, level: int) -> Estimate:
        """The estimate of a fit at this stacking level."""
        return self.above if level > 1 and self.above is not None else self.estimate

    def to_json(self) -> dict:
        out = {"estimate": self.estimate.to_json(), "reserved_ram_mb": round(self.ram / MiB, 1),
               "reserved_gpu_mb": round(self.gpu / MiB, 1), "limited_by_memory": list(self.limited)}
        if self.above is not None:
            out["estimate_above_level_1"] = self.above.to_json()
        return out


@dataclass(frozen=True)
class Advice:
    """What a user can change when a fit does not fit, for the error message."""

    max_rows: Callable[[int, bool], Optional[int]]  # (bytes available, on GPU) -> rows that would fit
    model_hint: str = ""  # "model.nn.params.batch_size", "model.lightgbm.params.max_bin=63"


def plan_model(
    allocation: Allocation,
    estimate: Estimate,
    limits: MemoryRequest,
    bag: MemoryRequest,
    cap: Capacity,
    reallocate: Callable[[Fraction], Allocation],
    advice: Advice,
    above: Optional[Estimate] = None,
) -> Allocation:
    """The allocation with its fits' memory reserved and its parallelism capped to fit memory. `above`
    estimates a fit above level 1 (stacking), the widest: what each fit reserves is planned from it."""
    name = allocation.model
    on_gpu = allocation.fit.num_gpus > 0
    first, estimate = estimate, above or estimate
    # The prepared table is counted once, in the driver's part of the capacity: the driver holds it
    # and the workers map one data file (pipeline.executors.datafile), so a fit reserves the rest.
    ram = _reserve(name, estimate.ram, limits.memory, limits.memory_key, "RAM", advice, False)
    ram -= min(estimate.parts.get("table", 0), ram)
    gpu = _reserve(name, estimate.gpu, limits.gpu_memory, limits.gpu_key, "GPU memory", advice, True) if on_gpu else 0
    notes = []
    ram_room = cap.ram_for_fits
    if ram_room is not None and ram > ram_room:
        raise ResourceError(
            f"model '{name}': one fit needs about {gb(ram)} of RAM besides the prepared data ({_parts(estimate)}) "
            f"but {cap.ram_source} "
            f"leaves {gb(max(ram_room, 0))} for fits after the driver's {gb(cap.driver)}; "
            + _what_to_change(advice, max(ram_room, 0), False, "a box with more memory (hardware.memory_gb, "
                              "another +hardware profile)")
        )
    if bag.memory is not None and ram > bag.memory:
        raise ResourceError(
            f"model '{name}': one fit needs about {gb(ram)} of RAM but {bag.memory_key}={bag.memory / GiB:g} "
            f"holds all of a bag's folds; raise {bag.memory_key}, or " + _what_to_change(advice, bag.memory, False, "")
        )
    # gpu == 0: a model given a GPU share that runs on the CPU (warned about when allocated) holds no GPU memory
    if on_gpu and cap.gpu is not None and gpu > 0:
        if gpu > cap.gpu:
            raise ResourceError(
                f"model '{name}': one fit needs about {gb(gpu)} on each of its GPUs but {cap.gpu_source} "
                f"gives {gb(cap.gpu)}; " + _what_to_change(advice, cap.gpu, True, "GPUs with more memory "
                                                             "(hardware.gpu_memory_gb, another +hardware profile)")
            )
        share = allocation.fit.num_gpus
        per_device = cap.gpu // gpu
        if share < 1 and per_device < 1 / share:
            raised = Fraction(1, int(per_device))
            before = allocation
            try:
                allocation = reallocate(raised)
            except ResourceError as exc:
                raise ResourceError(
                    f"model '{name}': {int(per_device)} fit(s) of {gb(gpu)} fit in a device's {gb(cap.gpu)} "
                    f"({cap.gpu_source}), so a fit needs a share of {fmt(raised)} GPU, not {fmt(share)}; {exc}"
                ) from None
            notes.append(
                f"GPU memory: {int(per_device)} fit(s) of about {gb(gpu)} fit in {gb(cap.gpu)} per device, "
                f"so each fit takes {fmt(raised)} GPU instead of {fmt(share)} "
                f"({before.folds_parallel * before.trials_parallel} -> "
                f"{allocation.folds_parallel * allocation.trials_parallel} fits at once)"
            )
    folds, trials = allocation.folds_parallel, allocation.trials_parallel
    if bag.memory is not None and folds * ram > bag.memory:
        folds = max(1, bag.memory // ram)
        notes.append(f"{bag.memory_key}={bag.memory / GiB:g}: {folds} fold(s) of about {gb(ram)} at once")
    if ram_room is not None and folds * trials * ram > ram_room:
        most = max(1, ram_room // ram)
        folds = min(folds, most)
        trials = max(1, min(trials, most // folds))
        notes.append(
            f"RAM: {gb(ram_room)} for fits ({cap.ram_source}) holds {most} fit(s) of about {gb(ram)} besides "
            f"the data they share: "
            f"{folds * trials} at once instead of {allocation.folds_parallel * allocation.trials_parallel}"
        )
    memory = ModelMemory(first, ram, gpu, tuple(notes), above)
    return dataclasses.replace(allocation, folds_parallel=folds, trials_parallel=trials, memory=memory)


def _reserve(name: str, estimate: int, stated: Optional[int], key: str, what: str, advice: Advice, on_gpu: bool) -> int:
    if stated is None:
        return estimate
    if estimate > stated:
        raise ResourceError(
            f"model '{name}': one fit needs about {gb(estimate)} of {what} but {key}={stated / GiB:g} allows "
            f"{gb(stated)}; raise {key}, or " + _what_to_change(advice, stated, on_gpu, "")
        )
    return stated


def _parts(estimate: Estimate) -> str:
    top = sorted(((k, v) for k, v in estimate.parts.items() if k != "table"), key=lambda kv: -kv[1])[:3]
    return ", ".join(f"{k} {gb(v)}" for k, v in top)


def _what_to_change(advice: Advice, room: int, on_gpu: bool, bigger: str) -> str:
    options = []
    rows = advice.max_rows(room, on_gpu)
    if rows:
        options.append(f"data.max_rows={rows}")
    else:
        options.append("fewer rows (data.max_rows)")
    if advice.model_hint:
        options.append(advice.model_hint)
    if bigger:
        options.append(f"plan for {bigger}")
    return "set " + ", or ".join(options)


@dataclass(frozen=True)
class MemoryPlan:
    """The memory section of a plan: the data's shape as planned, and the capacities."""

    shape: Optional[DataShape]
    capacity: Optional[Capacity]
    note: str = ""

    @property
    def ram_for_fits(self) -> Optional[int]:
        return self.capacity.ram_for_fits if self.capacity is not None else None

    def to_json(self) -> dict:
        return {"data_shape": self.shape.to_json() if self.shape else None,
                "capacity": self.capacity.to_json() if self.capacity else None, "note": self.note}
