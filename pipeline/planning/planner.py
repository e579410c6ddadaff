"""The planner: from a PlanInput (pipeline.planning.inputs, built by the root from the settings) to the
Plan. Each model's device (pipeline.planning.device_choice), its allocation (total >= bag >= fit,
pipeline.planning.allocation), the memory plan (pipeline.planning.memory) and the execution graph
(pipeline.graph.plan: the trial shape of each model and the count of its trials).
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Callable

from pipeline import hardware as hw
from pipeline.checks import check_gpu_models
from pipeline.graph.plan import Plan, build_plan
from pipeline.levels import ineffective_bag
from pipeline.planning.allocation import allocate, cpus_beside_gpu_fits
from pipeline.planning.device_choice import DeviceChoice, model_device
from pipeline.planning.inputs import Levels, ModelInput, PlanInput
from pipeline.planning.memory import MemoryPlanner
from pipeline.quantities import fmt
from pipeline.resources import Allocation, Request, Resources

log = logging.getLogger("pipeline")


@dataclass(frozen=True)
class _Placed:
    """A model on its device, allocated on the whole box (before the models beside it are known)."""

    spec: object  # a pipeline.settings.ModelSpec on its device
    choice: DeviceChoice
    request: Request  # its fit's request: its own resources over parallelism.fit
    allocate: Callable[..., Allocation]  # allocate(request, warn=..., total=..., alongside=...)
    allocation: Allocation


def make_plan(given: PlanInput) -> Plan:
    """Validate the resource hierarchy and the memory of every model and build the execution graph for
    `given.machine` (this machine, or a Ray cluster's totals)."""
    levels = given.levels
    hardware = hw.resolve(given.declared, given.machine, dry_run=given.dry_run)
    for message in ineffective_bag(levels.bag.num_cpus, levels.bag.num_gpus, levels.num_folds):
        log.warning(message)
    check_gpu_models([m.spec for m in given.models], hardware)
    memory = MemoryPlanner(given, hardware)
    fit_shape = memory.fit_shape(memory.shape) if memory.shape is not None else None
    placed = [_place(model, levels, hardware, fit_shape) for model in given.models]
    # the GPU models' fits hold their few threads; a CPU model takes the rest, at the same time
    beside = cpus_beside_gpu_fits(hardware.total.num_cpus, [p.allocation for p in placed])
    parallel_on_cpus = {p.spec.name for p in placed
                        if p.allocation.fit.num_gpus == 0 and p.allocation.folds_parallel > 1}
    allocations = []
    for p in placed:
        allocation = _beside_others(p, levels, hardware, beside, parallel_on_cpus - {p.spec.name})
        check = getattr(p.spec.cls, "check_placement", None)
        if check is not None:
            check(p.spec.name, p.spec.params, allocation.fit)
        # GPU memory may raise a fit's share: the same request with that share, already warned about
        gpus_key = p.request.gpus_key or "parallelism.fit.num_gpus"
        raised = lambda share, p=p, key=gpus_key: p.allocate(  # noqa: E731
            dataclasses.replace(p.request, num_gpus=share, gpus_key=key), warn=None)
        allocation = memory.plan(p.spec, allocation, raised)
        allocation = dataclasses.replace(allocation, device=p.choice.device, device_reason=p.choice.reason)
        allocations.append(allocation)
    return build_plan(hardware, allocations, memory.summary, evaluate=True, refit=given.refit,
                      stack_levels=given.stack_levels)


def _place(model: ModelInput, levels: Levels, hardware, fit_shape) -> _Placed:
    """The model's device (chosen, for auto, on its estimated fit times) and its allocation on the box."""
    spec = model.spec
    _warn_overridden(spec, levels.fit)
    gpu_capacities = list(hardware.capacities().values())

    def allocate_for(request: Request, needs, warn=log.warning, total: Resources = hardware.total,
                     alongside: bool = False) -> Allocation:
        return allocate(total, levels.bag, request, needs, num_folds=levels.num_folds,
                        num_trials=model.num_trials, sequential=levels.sequential,
                        gpu_capacities=gpu_capacities, warn=warn, alongside=alongside,
                        fit_cpus_most=levels.fit_cpus_most)

    request = spec.resources.over(levels.fit)
    on_cpu = lambda needs: allocate_for(request, needs, None)  # noqa: E731  (the threads a CPU fit gets)
    choice = model_device(spec, hardware, fit_shape, on_cpu, log.warning)
    spec = spec.on(choice.device)
    needs = spec.cls.needs(spec.name, spec.params)
    if spec.conf.device == "auto" and spec.cls.explicit_device(spec.all_params) is None:
        needs = dataclasses.replace(needs, gpu_param=f"model.{spec.name}.device=auto chose {choice.reason}")

    def again(request: Request, **kwargs) -> Allocation:
        return allocate_for(request, needs, **kwargs)

    return _Placed(spec, choice, request, again, again(request))


def _beside_others(p: _Placed, levels: Levels, hardware, beside: int, others_on_cpus: set) -> Allocation:
    """The model's allocation once the others are known: a CPU model takes the CPUs the GPU models' fits
    leave; where other models' folds run at once on the CPUs, their workers are started, and they take
    the CPUs a partial wave of this model's would leave (pipeline.planning.payoff)."""
    allocation, total = p.allocation, hardware.total
    alongside = bool(others_on_cpus) and bool(allocation.parallel_reason)
    wanted = max(p.request.num_cpus or 0, levels.bag.num_cpus or 0)
    on_cpus = allocation.fit.num_gpus == 0 and not levels.sequential
    if on_cpus and 0 < beside < total.num_cpus and wanted <= beside:
        return p.allocate(p.request, warn=None, total=Resources(beside, total.num_gpus), alongside=alongside)
    if alongside:
        return p.allocate(p.request, warn=None, alongside=True)
    return allocation


def _warn_overridden(spec, fit: Request) -> None:
    """A model's own resources win over parallelism.fit; say so when both are set and differ."""
    for field in ("num_cpus", "num_gpus"):
        mine, theirs = getattr(spec.resources, field), getattr(fit, field)
        if mine is not None and theirs is not None and mine != theirs:
            log.warning("model.%s.resources.%s=%s overrides parallelism.fit.%s=%s for model %s",
                        spec.name, field, fmt(mine), field, fmt(theirs), spec.name)


def placed(models: tuple, plan: Plan) -> tuple:
    """The configured models (pipeline.settings.ModelSpec) each on the device the plan chose for it: their
    library params follow the device."""
    devices = {a.model: a.device for a in plan.allocations}
    return tuple(m.on(devices[m.name]) if m.name in devices else m for m in models)
