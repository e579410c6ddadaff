"""Allocation: one model's resources, total >= bag >= fit checked level by level and the unset levels derived
(AutoGluon's hierarchy, never clamped: a violation is a typed error naming the key, its value and the limit)."""

from __future__ import annotations

from fractions import Fraction
from typing import Iterable, Optional, Sequence

from pipeline.errors import ConfigError, ResourceError
from pipeline.levels import derived_gpu_share
from pipeline.quantities import ZERO, fmt
from pipeline.resources import Allocation, ModelNeeds, Request, Resources, gpu_slots


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
    fit_cpus_most: Optional[int] = None,
) -> Allocation:
    """Check total >= bag >= fit for one model and derive the unset levels (`alongside`: other models of
    the run fit several folds at once on the CPUs, see pipeline.planning.payoff; `fit_cpus_most`: no
    derived fit above this many CPUs, on a machine others keep busy, see pipeline.planning.busy_box).

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
    if fit_request.num_cpus is None and fit_cpus_most is not None:
        fit_cpus = min(fit_cpus, fit_cpus_most)
    fit = Resources(fit_cpus, fit_gpus)
    _check_model_devices(needs, fit, fit_request, f"{bag_keys[1]}={fmt(bag.num_gpus)}", warn)

    choice = None
    if bagging and not sequential and num_trials == 1 and fit_request.num_cpus is None and fit.num_gpus == 0:
        from pipeline.planning.payoff import folds_at_once

        choice = folds_at_once(folds, bag.num_cpus, needs.serial_share, alongside)  # threads vs folds at once
        if fit_cpus_most is not None and choice.fit_cpus > fit_cpus_most:
            choice = None  # more threads than a busy machine leaves: the capped fits, as many at once as fit
        else:
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
