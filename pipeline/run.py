"""The composition root: config -> hardware -> allocation -> plan -> execution -> ensemble -> tracking.

`run(cfg)` is the Hydra task. It returns the best validation score (or the values `objectives` lists),
so sweepers can optimise it.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

from omegaconf import DictConfig

from pipeline import hardware as hw
from pipeline.errors import Interrupted
from pipeline.levels import ineffective_bag
from pipeline.plan import Plan, build_plan
from pipeline.resources import allocate, fmt
from pipeline.settings import Settings, read_settings

log = logging.getLogger("pipeline")


@dataclass(frozen=True)
class Runtime:
    """Where a job runs: its Hydra output directory, the launch directory, its overrides."""

    run_dir: Path
    launch_dir: Path
    overrides: str = ""
    job_num: Optional[int] = None

    @classmethod
    def from_hydra(cls) -> "Runtime":
        from hydra.core.hydra_config import HydraConfig

        h = HydraConfig.get()
        num = h.job.get("num") if h.mode.name == "MULTIRUN" else None
        # The run's name: what was overridden, not where it is logged.
        from pipeline.redact import redact_override

        shown = [redact_override(o) for o in h.overrides.task if not o.lstrip("+~").startswith(("tracking.", "hydra."))]
        return cls(Path(h.runtime.output_dir), Path(h.runtime.cwd), ",".join(sorted(shown)), num)


def run(cfg: DictConfig, runtime: Optional[Runtime] = None) -> Union[None, float, list[float]]:
    settings = read_settings(cfg)
    runtime = runtime or Runtime.from_hydra()
    runtime.run_dir.mkdir(parents=True, exist_ok=True)
    plan = make_plan(settings, runtime.launch_dir)
    from pipeline import report

    report.print_plan(plan)
    plan.write(runtime.run_dir / "plan.json")
    if settings.dry_run:
        for spec in settings.models:
            if not spec.cls.probe_imports_library:  # library probes cost seconds: they run when fitting starts
                spec.cls.check_params(spec.name, spec.params, _problem_hint(settings))
        report.console.print(f"dry run: plan written to {runtime.run_dir / 'plan.json'}; nothing was fitted")
        return None
    return execute(settings, plan, runtime)


def make_plan(settings: Settings, base_dir: Optional[Path] = None) -> Plan:
    """Validate the resource hierarchy and the memory of every model and build the execution graph."""
    from pipeline.memory.planner import MemoryPlanner

    machine = _machine(settings)
    hardware = hw.resolve(settings.hardware, machine, dry_run=settings.dry_run)
    for message in ineffective_bag(settings.bag.num_cpus, settings.bag.num_gpus, settings.num_folds):
        log.warning(message)
    memory = MemoryPlanner(settings, hardware, machine, base_dir or Path.cwd(), on_cluster=_on_cluster(settings))
    allocations = []
    for spec in settings.models:
        _warn_overridden(settings, spec)
        needs = spec.cls.needs(spec.name, spec.params)

        def allocate_for(fit_request, warn=log.warning):
            return allocate(
                hardware.total, settings.bag, fit_request, needs,
                num_folds=settings.num_folds, num_trials=settings.hpo.trials_for(spec.name, spec.search_space),
                sequential=settings.sequential,
                gpu_capacities=list(hardware.capacities().values()), warn=warn,
            )

        fit_request = spec.resources.over(settings.fit)
        allocation = allocate_for(fit_request)
        check = getattr(spec.cls, "check_placement", None)
        if check is not None:
            check(spec.name, spec.params, allocation.fit)
        # GPU memory may raise a fit's share: the same request with that share, already warned about
        raised = lambda share, r=fit_request: allocate_for(  # noqa: E731
            dataclasses.replace(r, num_gpus=share, gpus_key=r.gpus_key or "parallelism.fit.num_gpus"), warn=None)
        allocations.append(memory.plan(spec, allocation, raised))
    return build_plan(hardware, allocations, memory.summary)


def _warn_overridden(settings: Settings, spec) -> None:
    """A model's own resources win over parallelism.fit; say so when both are set and differ."""
    for field in ("num_cpus", "num_gpus"):
        mine, theirs = getattr(spec.resources, field), getattr(settings.fit, field)
        if mine is not None and theirs is not None and mine != theirs:
            log.warning("model.%s.resources.%s=%s overrides parallelism.fit.%s=%s for model %s",
                        spec.name, field, fmt(mine), field, fmt(theirs), spec.name)


def first_fit_env(plan: Plan, model: str) -> dict[str, str]:
    """The environment a worker of the model's first fit gets: a library probe runs there, not in the driver."""
    from pipeline.devices import child_env

    first = next(t for t in plan.fit_tasks if t.model == model)
    return child_env(plan.hardware.visible_devices(first.device_ids).split(",") if first.device_ids else ())


def _on_cluster(settings: Settings) -> bool:
    return settings.executor.name == "ray" and bool(settings.executor.address)


def _machine(settings: Settings) -> hw.Machine:
    """This machine, or the Ray cluster the run joins: the plan's total is what the fits run on."""
    if _on_cluster(settings):
        from pipeline.executors.ray import cluster_machine

        return cluster_machine(settings.executor.address, settings.executor.ray_init)
    return hw.detect()


def _problem_hint(settings: Settings) -> Optional[str]:
    return None if settings.data.problem_type == "auto" else settings.data.problem_type


def execute(settings: Settings, plan: Plan, runtime: Runtime) -> Union[float, list[float]]:
    """Fit the plan. The executor starts first (workers spawn and import their libraries, Ray
    connects) so that its start-up overlaps loading the data and opening the MLflow store."""
    from pipeline.signals import StopSignals
    from pipeline.store import RunDirectoryLock

    with RunDirectoryLock(runtime.run_dir), StopSignals() as signals, make_backend(settings, plan, runtime) as backend:
        try:
            backend.start(plan)
            return _execute(settings, plan, runtime, backend, signals)
        finally:
            signals.clean_up()


def make_backend(settings: Settings, plan: Plan, runtime: Runtime):
    from pipeline.executors import make_backend as make

    ex = settings.executor
    preload = tuple(dict.fromkeys(m for spec in settings.models for m in spec.cls.library_modules))
    # A time limit needs fits that can be stopped: worker processes, not the driver.
    in_process = "never" if ex.task_timeout_s is not None and ex.in_process == "auto" else ex.in_process
    return make(ex.name, plan, runtime.run_dir, in_process=in_process, address=ex.address,
                ray_init=ex.ray_init, preload=preload)


def _execute(settings: Settings, plan: Plan, runtime: Runtime, backend, signals) -> Union[float, list[float]]:
    from pipeline import data as data_module
    from pipeline import metrics
    from pipeline.store import write_state

    tracker = make_tracker(settings, runtime)
    tracker.connect() if tracker.enabled else None  # the tracker's process opens the store while data loads
    try:
        data = data_module.load(settings.data, runtime.launch_dir)
        metric = metrics.resolve(settings.eval_metric, data.problem_type)
        for spec in settings.models:
            spec.cls.check_params(spec.name, spec.params, data.problem_type)
            # The GPU build check probes this process's library; on a cluster the fits run elsewhere.
            needs_gpu = spec.cls.needs(spec.name, spec.params).requires_gpu
            if needs_gpu and not plan.hardware.planned_only and not _on_cluster(settings):
                spec.cls.check_environment(spec.name, spec.params, first_fit_env(plan, spec.name))
    except BaseException:
        tracker.end("FAILED")  # no run was started: this only stops the tracker's process
        raise
    status = "FAILED"
    try:
        tracker.start(run_name(settings, runtime), settings.params, run_tags(settings, plan, runtime))
        write_state(runtime.run_dir, status="RUNNING", mlflow_run_id=tracker.run_id, started=time.time())
        tracker.log_artifact(runtime.run_dir / "plan.json")
        from pipeline.tracking_datasets import locations, summarize

        tracker.log_datasets(summarize(data), locations(settings.data, runtime.launch_dir))
        _log_config(settings, runtime, tracker)
        from pipeline.evaluation import evaluate, fit_all

        outcome = fit_all(settings, plan, data, metric, runtime, tracker, backend)
        rows = evaluate(settings, plan, data, metric, outcome, runtime, tracker)
        status = "FINISHED"
        from pipeline.objectives import job_return

        return job_return(settings.objectives, rows, metric.name)
    except Interrupted:
        status = "KILLED"
        raise
    finally:
        signals.clean_up()
        write_state(runtime.run_dir, status=status, ended=time.time())
        tracker.end(status)
        if tracker.failure is not None and status == "FINISHED":
            from pipeline.errors import TrackingError

            raise TrackingError(
                f"the run finished and its results are in {runtime.run_dir}, but MLflow tracking failed: "
                f"{tracker.failure}"
            )


def make_tracker(settings: Settings, runtime: Runtime):
    from pipeline import tracking

    t = settings.tracking
    if t.backend == "none":
        return tracking.NullTracker()
    uri = t.uri or tracking.default_uri(runtime.launch_dir)
    local = not tracking.is_remote(uri)
    artifact_root = runtime.launch_dir / "outputs" / "mlartifacts" if local else None
    from pipeline.tracker_process import TrackerProcess

    return TrackerProcess(tracking.MlflowTracker(uri, t.experiment, artifact_root=artifact_root, timeout_s=t.timeout_s,
                                                 system_metrics=t.system_metrics, log_models=t.log_models,
                                                 system_metrics_interval_s=t.system_metrics_interval_s,
                                                 model_libraries=tuple(dict.fromkeys(
                                                     m for spec in settings.models for m in spec.cls.library_modules))))


def run_name(settings: Settings, runtime: Runtime) -> str:
    if settings.tracking.run_name:
        return settings.tracking.run_name
    return runtime.overrides or "default"


def run_tags(settings: Settings, plan: Plan, runtime: Runtime) -> dict:
    from pipeline.redact import redact

    gpu_ids = sorted({t for task in plan.fit_tasks for t in task.device_ids})
    physical = plan.hardware.visible_devices(gpu_ids) if gpu_ids else ""
    tags = {
        "pipeline.run_dir": str(runtime.run_dir),
        "pipeline.hardware": str(plan.hardware),
        "pipeline.gpu_ids": physical or "none",
        "pipeline.models": ",".join(a.model for a in plan.allocations),
        "pipeline.overrides": runtime.overrides,
        **redact(settings.tracking.tags),
    }
    if runtime.job_num is not None:
        tags["pipeline.job_num"] = str(runtime.job_num)
    return tags


def _log_config(settings: Settings, runtime: Runtime, tracker) -> None:
    from pipeline.store import atomic_write_bytes

    path = runtime.run_dir / "config.yaml"
    atomic_write_bytes(path, settings.config_yaml.encode())
    tracker.log_artifact(path)
