"""Planning: from the settings and the machine to the Plan. Each model's device, its allocation (total >=
bag >= fit, pipeline.resources), the memory plan (pipeline.memory.planner) and the execution graph
(pipeline.graph.plan: the trial shape of each model and the count of its trials).
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Optional

from pipeline import hardware as hw
from pipeline.checks import check_gpu_models
from pipeline.graph.plan import Plan, build_plan
from pipeline.levels import ineffective_bag
from pipeline.quantities import fmt
from pipeline.resources import Resources, allocate, cpus_beside_gpu_fits
from pipeline.settings import Settings

log = logging.getLogger("pipeline")


def make_plan(settings: Settings, base_dir: Optional[Path] = None, machine: Optional[hw.Machine] = None) -> Plan:
    """Validate the resource hierarchy and the memory of every model and build the execution graph, for
    `machine` (a Ray cluster's, from the root's look at it), else this machine."""
    from pipeline.device_choice import model_device
    from pipeline.memory.planner import MemoryPlanner

    machine = machine or hw.detect()
    conf, par = settings.conf, settings.conf.parallelism
    hardware = hw.resolve(conf.hardware, machine, dry_run=conf.dry_run)
    for message in ineffective_bag(par.bag.request.num_cpus, par.bag.request.num_gpus, par.num_folds):
        log.warning(message)
    check_gpu_models(settings, hardware)
    memory = MemoryPlanner(settings, hardware, machine, base_dir or Path.cwd(), on_cluster=on_cluster(settings))
    allocations = []
    gpu_capacities = list(hardware.capacities().values())
    fit_shape = memory.fit_shape(memory.shape) if memory.shape is not None else None
    models = []
    for spec in settings.models:
        _warn_overridden(settings, spec)
        num_trials = conf.hpo.trials_for(spec.name, spec.search_space)

        def allocate_for(fit_request, needs, warn=log.warning, num_trials=num_trials, total=hardware.total,
                         alongside=False):
            return allocate(
                total, par.bag.request, fit_request, needs, num_folds=par.num_folds, num_trials=num_trials,
                sequential=par.sequential, gpu_capacities=gpu_capacities, warn=warn, alongside=alongside,
            )

        fit_request = spec.resources.over(par.fit.request)
        choice = model_device(spec, hardware, fit_shape, lambda needs, r=fit_request, a=allocate_for: a(r, needs, None),
                              log.warning)
        spec = spec.on(choice.device)
        needs = spec.cls.needs(spec.name, spec.params)
        models.append((spec, needs, choice, allocate_for, fit_request, allocate_for(fit_request, needs)))
    beside = cpus_beside_gpu_fits(hardware.total.num_cpus, [m[-1] for m in models])
    parallel_on_cpus = {m[0].name for m in models if m[-1].fit.num_gpus == 0 and m[-1].folds_parallel > 1}
    for spec, needs, choice, allocate_for, fit_request, allocation in models:
        # other models' folds run at once on the CPUs: their workers are started, and they take the CPUs a
        # partial wave of this model's would leave (pipeline.payoff)
        alongside = bool(parallel_on_cpus - {spec.name}) and bool(allocation.parallel_reason)
        if allocation.fit.num_gpus == 0 and 0 < beside < hardware.total.num_cpus and not par.sequential \
                and max(fit_request.num_cpus or 0, par.bag.request.num_cpus or 0) <= beside:
            # the GPU models' fits hold their few threads; this CPU model takes the rest, at the same time
            allocation = allocate_for(fit_request, needs, warn=None, total=Resources(beside, hardware.total.num_gpus),
                                      alongside=alongside)
        elif alongside:
            allocation = allocate_for(fit_request, needs, warn=None, alongside=True)
        check = getattr(spec.cls, "check_placement", None)
        if check is not None:
            check(spec.name, spec.params, allocation.fit)
        # GPU memory may raise a fit's share: the same request with that share, already warned about
        raised = lambda share, r=fit_request, needs=needs, a=allocate_for: a(  # noqa: E731
            dataclasses.replace(r, num_gpus=share, gpus_key=r.gpus_key or "parallelism.fit.num_gpus"), needs, None)
        allocation = memory.plan(spec, allocation, raised)
        allocations.append(dataclasses.replace(allocation, device=choice.device, device_reason=choice.reason))
    return build_plan(hardware, allocations, memory.summary, evaluate=True, refit=conf.refit,
                      stack_levels=conf.stack_levels)


def _warn_overridden(settings: Settings, spec) -> None:
    """A model's own resources win over parallelism.fit; say so when both are set and differ."""
    for field in ("num_cpus", "num_gpus"):
        mine, theirs = getattr(spec.resources, field), getattr(settings.conf.parallelism.fit.request, field)
        if mine is not None and theirs is not None and mine != theirs:
            log.warning("model.%s.resources.%s=%s overrides parallelism.fit.%s=%s for model %s",
                        spec.name, field, fmt(mine), field, fmt(theirs), spec.name)


def on_cluster(settings: Settings) -> bool:
    """The fits run on the Ray cluster at executor.address, not on this machine: the executor is of
    kind `ray` (pipeline.executors.ray_backend)."""
    from pipeline.targets import resolve

    ex = settings.conf.executor
    executor = resolve("executor._target_", ex._target_, settings.allowed_targets)
    return getattr(executor, "kind", None) == "ray" and bool(ex.address)
