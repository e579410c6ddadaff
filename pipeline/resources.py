"""Resource values, Lightning's `devices` grammar, what an allocation holds and GPU packing (the allocation
itself is pipeline.planning.allocation).

Levels, as AutoGluon defines them: the hardware total (predictor) >= one bagged model (all its
folds, `parallelism.bag`) >= one base-model fit (`parallelism.fit`, or a model's own
`resources`). GPU amounts are exact fractions, so packing 0.25 + 0.25 + 0.5 fills a device to
exactly 1.0.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Iterable, Optional, Sequence

from pipeline.errors import ConfigError
from pipeline.quantities import ZERO, cpu_count, fmt, gpu_amount


@dataclass(frozen=True)
class Resources:
    """CPUs and GPUs held by one unit of work."""

    num_cpus: int
    num_gpus: Fraction = ZERO

    def __mul__(self, n: int) -> "Resources":
        return Resources(self.num_cpus * n, self.num_gpus * n)

    __rmul__ = __mul__

    def __add__(self, other: "Resources") -> "Resources":
        return Resources(self.num_cpus + other.num_cpus, self.num_gpus + other.num_gpus)

    def to_json(self) -> dict:
        return {"num_cpus": self.num_cpus, "num_gpus": float(self.num_gpus)}

    def __str__(self) -> str:
        return f"{self.num_cpus} CPU / {fmt(self.num_gpus)} GPU"


@dataclass(frozen=True)
class Request:
    """A level's request; None means derive it from the level above."""

    num_cpus: Optional[int] = None
    num_gpus: Optional[Fraction] = None
    cpus_key: str = ""
    gpus_key: str = ""

    @classmethod
    def parse(cls, num_cpus: Any, num_gpus: Any, prefix: str) -> "Request":
        cpus_key, gpus_key = f"{prefix}.num_cpus", f"{prefix}.num_gpus"
        return cls(
            None if num_cpus is None else cpu_count(num_cpus, cpus_key),
            None if num_gpus is None else gpu_amount(num_gpus, gpus_key),
            cpus_key,
            gpus_key,
        )

    def over(self, base: "Request") -> "Request":
        """This request with its unset fields taken from `base` (a model's resources over parallelism.fit)."""
        return over_level(self, base, (("num_cpus", "cpus_key"), ("num_gpus", "gpus_key")))


def over_level(mine, base, fields: Iterable[tuple[str, str]]):
    """`mine` (a level's request) with each unset value, and the config key it came from, taken from
    `base`: the key of a value is what an error about it names."""
    taken = {}
    for value, key in fields:
        if getattr(mine, value) is None:
            taken.update({value: getattr(base, value), key: getattr(base, key)})
    return dataclasses.replace(mine, **taken)


# --------------------------------------------------------------------------- devices grammar


def parse_devices(devices: Any, key: str = "hardware.devices") -> Optional[list[int] | int]:
    """Lightning's `devices` grammar: returns a count (int, -1 for all) or a list of ids.

    3 / "3" -> 3 (the first three); -1 / "-1" -> -1 (all); [1, 3] / "1, 3" -> [1, 3];
    "2," -> [2] (GPU index 2, unlike "2", which means two GPUs); None / 0 / "0" -> 0.
    """
    if devices is None:
        return None
    if isinstance(devices, bool):
        raise ConfigError(f"{key}={devices!r}: devices must be an int, a string or a list of ints, not a bool")
    if isinstance(devices, int):
        if devices < -1:
            raise ConfigError(f"{key}={devices}: give a count >= 0, -1 for all devices, or a list of ids")
        return devices
    if isinstance(devices, str):
        text = devices.strip()
        if text in ("", "[]"):
            return 0
        if "," in text:
            tokens = [t.strip() for t in text.strip("[]").split(",") if t.strip()]
            try:
                return _unique([int(t) for t in tokens], devices, key)
            except ValueError:
                raise ConfigError(f"{key}={devices!r}: ids in a string must be integers, as in '0, 2'") from None
        try:
            return parse_devices(int(text), key)
        except ValueError:
            raise ConfigError(f"{key}={devices!r}: expected a count ('2'), '-1' or ids ('1, 3' or '2,')") from None
    if isinstance(devices, Sequence) or hasattr(devices, "__iter__"):
        ids = list(devices)
        if any(isinstance(i, bool) or not isinstance(i, int) for i in ids):
            raise ConfigError(f"{key}={ids!r}: a device list holds integer ids only, as in [1, 3]")
        if any(i < 0 for i in ids):
            raise ConfigError(f"{key}={ids!r}: device ids are >= 0")
        return _unique(ids, devices, key)
    raise ConfigError(f"{key}={devices!r}: devices must be an int, a string or a list of ints")


def _unique(ids: list[int], raw: Any, key: str) -> list[int]:
    if len(set(ids)) != len(ids):
        dup = sorted({i for i in ids if ids.count(i) > 1})
        raise ConfigError(f"{key}={raw!r}: device ids must be unique; {dup} appears more than once")
    return ids


def select_devices(devices: Any, num_gpus: Fraction, available: int, key: str = "hardware.devices") -> list[int]:
    """The device ids a run may use, checked against num_gpus and the `available` device count."""
    needed = math.ceil(num_gpus)
    parsed = parse_devices(devices, key)
    if parsed is None:
        ids = list(range(needed))
    elif isinstance(parsed, int):
        ids = list(range(available)) if parsed == -1 else list(range(parsed))
    else:
        ids = parsed
    hint = " ('2' means two GPUs; '2,' means GPU index 2)" if isinstance(devices, str) else ""
    out_of_range = [i for i in ids if i >= available]
    if out_of_range:
        have = f"ids 0-{available - 1}" if available else "no GPU"
        raise ConfigError(
            f"{key}={devices!r}: device {out_of_range[0]} is out of range; the box has {available} GPU(s) ({have}){hint}"
        )
    if len(ids) != needed:
        raise ConfigError(
            f"{key}={devices!r} selects {len(ids)} GPU(s) {ids} but hardware.num_gpus={fmt(num_gpus)} "
            f"needs {needed}; set both to agree{hint}"
        )
    return ids


# --------------------------------------------------------------------------- allocation


@dataclass(frozen=True)
class ModelNeeds:
    """What a model's own parameters say about devices."""

    name: str
    wants_gpu: bool  # its params ask for a GPU (device=cuda, device_type=gpu) or may use one (auto)
    requires_gpu: bool  # its params cannot run without one
    max_gpus_per_fit: Optional[int]  # 1 for GBMs; None: any whole number (networks: DDP)
    gpu_param: str = ""  # the parameter that asks, for messages: "params.device=cuda"
    library: str = ""
    serial_share: float = 0.3  # of a fit's one-thread time that more threads do not shorten (pipeline.planning.payoff)
    gpu_fit_cpus: int = 1  # CPU threads a fit on a GPU holds when no level sets them (the model's own figure)
    gpu_packing: bool = True  # derived fractional GPU shares may share a device (pipeline.fit_cost's packing)
    packing_reason: str = ""  # why not, when they may not


@dataclass(frozen=True)
class Allocation:
    """The resources of one model's trials and folds, as the plan reserves them."""

    model: str
    num_folds: int
    num_trials: int
    bag: Resources
    fit: Resources
    folds_parallel: int
    trials_parallel: int
    memory: Any = None  # pipeline.memory.budget.ModelMemory, once memory is planned
    parallel_reason: str = ""  # why this many folds run at once, when the engine chose it
    device: str = "cpu"  # cpu | cuda: where the model fits (pipeline.planning.device_choice)
    device_reason: str = ""
    packing_reason: str = ""  # why its derived GPU shares do not share a device, when packing would lose

    @property
    def reservation(self) -> Resources:
        """What one trial holds while its folds run: folds_parallel x fit."""
        return self.fit * self.folds_parallel

    @property
    def used(self) -> Resources:
        return self.reservation * self.trials_parallel


def gpu_slots(share: Fraction, capacities: Sequence[Fraction]) -> int:
    """How many fits of `share` GPUs pack onto devices with these free capacities."""
    if share <= 0:
        return 10**9
    if share >= 1:
        return sum(1 for c in capacities if c >= 1) // int(share)
    return sum(int(c // share) for c in capacities)


# --------------------------------------------------------------------------- packing


class DevicePool:
    """Free CPUs and per-device GPU capacity. A share of a device goes to the device with the most room
    left (lowest id first), so fits spread over idle devices and share one only when they outnumber them."""

    def __init__(self, num_cpus: int, capacities: dict[int, Fraction]):
        self.num_cpus = num_cpus
        self.free_cpus = num_cpus
        self.capacity = dict(capacities)
        self.free = dict(capacities)

    def try_allocate(self, need: Resources) -> Optional[tuple[tuple[int, Fraction], ...]]:
        """Reserve `need`; returns ((device id, share), ...) or None when it does not fit now."""
        if need.num_cpus > self.free_cpus:
            return None
        shares = self._place(need.num_gpus)
        if shares is None:
            return None
        self.free_cpus -= need.num_cpus
        for device, share in shares:
            self.free[device] -= share
        return shares

    def release(self, need: Resources, shares: Iterable[tuple[int, Fraction]]) -> None:
        self.free_cpus += need.num_cpus
        for device, share in shares:
            self.free[device] += share

    def _place(self, gpus: Fraction) -> Optional[tuple[tuple[int, Fraction], ...]]:
        if gpus == 0:
            return ()
        if gpus < 1:  # the device with the most room: idle devices first, shared only when all are busy
            fits = [d for d, free in self.free.items() if free >= gpus]
            if not fits:
                return None
            return ((max(fits, key=lambda d: (self.free[d], -d)), gpus),)
        whole = [d for d, free in self.free.items() if free == self.capacity[d] and free >= 1]
        if len(whole) < gpus:
            return None
        return tuple((d, Fraction(1)) for d in whole[: int(gpus)])

    @property
    def idle(self) -> bool:
        return self.free_cpus == self.num_cpus and self.free == self.capacity
