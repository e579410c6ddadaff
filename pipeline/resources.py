"""Resource values, Lightning's `devices` grammar, the three-level allocation and GPU packing.

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

from pipeline.errors import ConfigError, ResourceError
from pipeline.levels import derived_gpu_share
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
    serial_share: float = 0.3  # of a fit's one-thread time that more threads do not shorten (pipeline.payoff)
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
    device: str = "cpu"  # cpu | cuda: where the model fits (pipeline.device_choice)
    device_reason: str = ""
    packing_reason: str = ""  # why its derived GPU shares do not share a device, when packing would lose

    @property
    def reservation(self) -> Resources:
        """What one trial holds while its folds run: folds_parallel x fit."""
        return self.fit * self.folds_parallel

    @property
    def used(self) -> Resources:
        return self.reservation * self.trials_parallel


def allocate(
    total: Resources,
    bag_request: Request,
    fit_request: Request,
    needs: ModelNeeds,
    *,
    num_folds: int,
    num_trials: int,
    sequential: bool = False,
    gpu_capacities: Sequence[Fraction] = (),
    warn=None,
    alongside: bool = False,
) -> Allocation:
    """Check total >= bag >= fit for one model and derive the unset levels (`alongside`: other models of
    the run fit several folds at once on the CPUs, see pipeline.payoff).

    Folds in parallel = min(k, bag.cpus // fit.cpus, bag.gpus // fit.gpus); a trial reserves
    folds_parallel x fit; trials in parallel = min(trials, total // reservation), per resource
    (GPU shares counted as they pack onto `gpu_capacities`, one entry per device).
    """
    if num_folds < 0:
        raise ConfigError(f"parallelism.num_folds={num_folds} must be >= 0 (0 or 1: one holdout fit)")
    if num_trials < 1:
        raise ConfigError(f"hpo.num_trials={num_trials} must be >= 1")
    folds = max(1, num_folds)
    bagging = num_folds >= 2
    total_keys = ("hardware.num_cpus", "hardware.num_gpus")

    if needs.requires_gpu and total.num_gpus == 0:
        raise ResourceError(
            f"model '{needs.name}' asks for a GPU ({needs.gpu_param}) but its fit has 0 GPUs (hardware.num_gpus=0); "
            "run it on a box with GPUs, or configure it for the CPU"
        )
    _check_within(bag_request, total, total_keys)
    bag = Resources(
        bag_request.num_cpus if bagging and bag_request.num_cpus is not None else total.num_cpus,
        bag_request.num_gpus if bagging and bag_request.num_gpus is not None else total.num_gpus,
    )
    bag_keys = (
        bag_request.cpus_key if bagging and bag_request.num_cpus is not None else total_keys[0],
        bag_request.gpus_key if bagging and bag_request.num_gpus is not None else total_keys[1],
    )
    _check_within(fit_request, bag, bag_keys)

    # Jobs sharing the level a fit is derived from: the bag's folds, or every trial's folds.
    def jobs(bag_set: bool) -> int:
        return 1 if sequential else (folds if bag_set else folds * num_trials)

    bag_cpus_set = bagging and bag_request.num_cpus is not None
    bag_gpus_set = bagging and bag_request.num_gpus is not None
    fit_cpus = fit_request.num_cpus
    if fit_cpus is None:
        fit_cpus = max(1, bag.num_cpus // jobs(bag_cpus_set))
    fit_gpus = fit_request.num_gpus
    packing_reason = ""
    if fit_gpus is None:
        fit_gpus = ZERO
        if needs.wants_gpu and bag.num_gpus > 0:
            concurrent = min(jobs(bag_gpus_set), bag.num_cpus // fit_cpus)
            fit_gpus = derived_gpu_share(bag.num_gpus, concurrent)
            if fit_gpus < 1 and not needs.gpu_packing:  # one fit per device: the others wait their turn
                fit_gpus, packing_reason = min(Fraction(1), bag.num_gpus), needs.packing_reason
    if fit_request.num_cpus is None and fit_gpus > 0:
        # a GPU fit holds only the threads its host side uses; the rest stay for fits on the CPUs beside it
        fit_cpus = min(fit_cpus, needs.gpu_fit_cpus)
    fit = Resources(fit_cpus, fit_gpus)
    _check_model_devices(needs, fit, fit_request, f"{bag_keys[1]}={fmt(bag.num_gpus)}", warn)

    choice = None
    if bagging and not sequential and num_trials == 1 and fit_request.num_cpus is None and fit.num_gpus == 0:
        from pipeline.payoff import folds_at_once

        choice = folds_at_once(folds, bag.num_cpus, needs.serial_share, alongside)  # threads vs folds at once
        fit = Resources(choice.fit_cpus, fit.num_gpus)
    if sequential:
        folds_parallel = trials_parallel = 1
    else:
        folds_parallel = choice.folds_parallel if choice else min(folds, bag.num_cpus // fit.num_cpus)
        if fit.num_gpus > 0:
            folds_parallel = min(folds_parallel, int(bag.num_gpus // fit.num_gpus))
            if gpu_capacities:  # as shares pack onto devices: three 0.75 shares on three GPUs, not four
                folds_parallel = min(folds_parallel, gpu_slots(fit.num_gpus, gpu_capacities))
        reservation = fit * max(1, folds_parallel)
        trials_parallel = min(num_trials, total.num_cpus // reservation.num_cpus)
        if fit.num_gpus > 0 and folds_parallel > 0:
            slots = gpu_slots(fit.num_gpus, gpu_capacities) if gpu_capacities else int(total.num_gpus // fit.num_gpus)
            trials_parallel = min(trials_parallel, slots // folds_parallel)
    if folds_parallel < 1 or trials_parallel < 1:
        if fit_request.num_gpus is not None:
            fix = f"lower {fit_request.gpus_key}={fmt(fit.num_gpus)}"
        else:
            fix = f"its GPU share was derived from {bag_keys[1]}={fmt(bag.num_gpus)}; set parallelism.fit.num_gpus"
        raise ResourceError(
            f"model '{needs.name}': a fit of {fit} does not fit on the devices of the box "
            f"({fmt(total.num_gpus)} GPU); {fix}"
        )
    return Allocation(needs.name, folds, num_trials, bag, fit, folds_parallel, trials_parallel,
                      parallel_reason=choice.reason if choice else "", packing_reason=packing_reason)


def cpus_beside_gpu_fits(total_cpus: int, allocations: Iterable[Allocation]) -> int:
    """The CPUs left for models fitting on the CPUs while every GPU model's fits run at once: the
    total less the threads those fits hold (0 or less: none left, the CPU fits wait for them)."""
    return total_cpus - sum(a.used.num_cpus for a in allocations if a.fit.num_gpus > 0)


def _check_within(request: Request, parent: Resources, parent_keys: tuple[str, str]) -> None:
    if request.num_cpus is not None and request.num_cpus > parent.num_cpus:
        raise ResourceError(
            f"{request.cpus_key}={request.num_cpus} exceeds {parent_keys[0]}={parent.num_cpus}; "
            "each level must fit in the one above (hardware >= bag >= fit)"
        )
    if request.num_gpus is not None and request.num_gpus > parent.num_gpus:
        raise ResourceError(
            f"{request.gpus_key}={fmt(request.num_gpus)} exceeds {parent_keys[1]}={fmt(parent.num_gpus)}; "
            "each level must fit in the one above (hardware >= bag >= fit)"
        )


def _check_model_devices(needs: ModelNeeds, fit: Resources, request: Request, derived_from: str, warn) -> None:
    """`derived_from`: the level setting a derived fit share comes from, as key=value."""
    name = needs.name
    gpus_key = request.gpus_key or f"model.{name}.resources.num_gpus"
    if needs.requires_gpu and fit.num_gpus == 0:
        where = f"{gpus_key}={fmt(fit.num_gpus)}" if request.num_gpus is not None else derived_from
        raise ResourceError(
            f"model '{name}' asks for a GPU ({needs.gpu_param}) but its fit has 0 GPUs ({where}); "
            f"give it one with model.{name}.resources.num_gpus=1 on a box with GPUs (+hardware=1gpu), "
            f"or run it on the CPU"
        )
    if not needs.wants_gpu and fit.num_gpus > 0:
        if warn is not None:
            warn(
                f"model '{name}' is configured for the CPU ({needs.gpu_param}) but {gpus_key}="
                f"{fmt(fit.num_gpus)} gives it GPUs, which will sit idle"
            )
    if needs.max_gpus_per_fit is not None and fit.num_gpus > needs.max_gpus_per_fit:
        raise ResourceError(
            f"{gpus_key}={fmt(fit.num_gpus)}: a {needs.library or name} fit uses at most "
            f"{needs.max_gpus_per_fit} GPU; give it 1 (or a share such as 0.5). Only networks "
            "train one model across several GPUs (DDP)"
        )


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
