"""The composition root: config -> hardware -> allocation -> plan -> execution -> ensemble -> tracking.

`run(cfg)` is the Hydra task. It returns the best validation score (or the values `objectives` lists),
so sweepers can optimise it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Union

from omegaconf import DictConfig

from pipeline.checks import Checked, check, check_after_loading, check_environment, chosen_by
from pipeline.errors import ConfigError, Interrupted
from pipeline.lean_imports import for_run as lean_imports_for_run
from pipeline.graph.plan import EVALUATE, Plan
from pipeline.objectives import inner_fit_seconds, job_return
from pipeline.planning.planner import make_plan, placed  # noqa: F401  (make_plan: importable from here too)
from pipeline.settings import Settings, read_settings
from pipeline.run_folder import make_run_folder
from pipeline.runtime import Runtime  # noqa: F401  (importable from here too)

log = logging.getLogger("pipeline")


def run(cfg: DictConfig, runtime: Optional[Runtime] = None) -> Union[None, float, list[float]]:
    """Settings, check, plan, then execute (unless `dry_run`) and report.

    Nothing starts before the checks pass (pipeline.config_checks, pipeline.checks), in a dry run too: no
    worker, forkserver, thread pool, tracker process or Ray connection (the executor's look at a cluster's
    nodes is a connection it closes again, and every fit is checked against those nodes).
    """
    from pipeline.run_clock import run_started

    started = run_started()
    runtime = runtime or Runtime.from_hydra()
    runtime = dataclasses.replace(runtime, started=runtime.started or started)
    # read once, every config value checked once (pipeline.config_checks)
    settings = read_settings(cfg, runtime.choices)
    lean_imports_for_run(settings.lean_imports)
    from pipeline.planning.budget import search_for_budget
    from pipeline.planning.busy_box import cap_threads_on_busy_box

    settings = search_for_budget(settings, runtime.choices, runtime.launch_dir)
    settings = cap_threads_on_busy_box(settings)
    components = Components.resolve(settings)
    checked = check(settings, runtime.launch_dir)  # the data, the metric, the models' params: before any work
    make_run_folder(runtime.run_dir)  # checked (by Hydra's callback too, before Hydra wrote into it), made
    plan, models = plan_run(settings, runtime, components)
    show_plan(settings, plan, runtime, checked)
    if settings.conf.dry_run:
        from pipeline import report

        report.console.print(f"dry run: plan written to {runtime.run_dir / 'plan.json'}; nothing was fitted")
        return None
    result = execute(settings, plan, models, runtime, components, checked)
    if settings.conf.time_limit_s is not None:
        from pipeline import report

        report.console.print(report.run_time_line(settings.conf.time_limit_s, runtime.started), highlight=False)
        _keep_tail(settings, plan, runtime)
    return result


def plan_run(settings: Settings, runtime: Runtime, components: "Components") -> tuple[Plan, tuple]:
    """The plan, for the machine the fits run on (a cluster the executor looks at, else this one), checked
    against that cluster's nodes and each GPU library where its first fit runs; and the models, each on
    the device the plan chose (their library params follow it)."""
    cluster = components.cluster(settings)
    on_cluster = cluster is not None
    plan = make_plan(settings.plan_input(runtime.launch_dir, cluster.machine if on_cluster else None, on_cluster))
    if on_cluster:
        cluster.check(plan)
    models = placed(settings.models, plan)
    check_environment(models, plan, on_cluster=on_cluster)
    return plan, models


def show_plan(settings: Settings, plan: Plan, runtime: Runtime, checked: Checked) -> None:
    """The plan on the console and in plan.json; the columns' roles, where known, in schema.json."""
    from pipeline import report

    report.print_plan(plan)
    if settings.conf.data.class_weight != "none":
        from pipeline.class_weights import plan_line

        report.console.print(plan_line(settings.conf.data.class_weight), highlight=False)
    if checked.roles is not None:
        report.print_roles(checked.roles)
        from pipeline.data import write_schema

        write_schema(runtime.run_dir / "schema.json", checked.roles)
    if settings.conf.time_limit_s is not None or settings.conf.fit_time_limit_s is not None:
        conf = settings.conf
        report.console.print(report.time_limit_line(conf.time_limit_s, conf.fit_time_limit_s, conf.refit))
    plan.write(runtime.run_dir / "plan.json")


@dataclass(frozen=True)
class Components:
    """The run's executor and tracker, resolved from `_target_` (imported, within allowed_targets) while
    the config is checked (pipeline.config_checks), and built only once every check has passed."""

    executor: Callable
    tracker: Callable

    @classmethod
    def resolve(cls, settings: Settings) -> "Components":
        return cls(settings.executor, settings.tracker)

    def kinds(self, settings: Settings) -> dict[str, str]:
        """The searcher's and the executor's kinds (`tpe`, `local`; a user's by its `_target_`), for the
        run's parameters."""
        from pipeline.targets import kind_of

        conf = settings.conf
        return {"hpo": kind_of(conf.hpo.make_searcher(), conf.hpo._target_),
                "executor": kind_of(self.executor, conf.executor._target_)}

    def build_tracker(self, settings: Settings, runtime: Runtime):
        conf = settings.conf.tracking
        tracker = self.tracker(conf=conf, launch_dir=runtime.launch_dir, sweep_dir=runtime.sweep_dir)
        from pipeline.tracking import NullTracker

        missing = [m for m in vars(NullTracker) if not m.startswith("_") and not hasattr(tracker, m)]
        if missing:
            raise ConfigError(f"tracking._target_={conf._target_!r} built a {type(tracker).__name__}, "
                              f"which lacks {', '.join(missing)}; subclass pipeline.tracking.NullTracker")
        return tracker

    def build_backend(self, settings: Settings, plan: Plan, runtime: Runtime):
        from pipeline.graph.backend import Backend

        conf = settings.conf.executor
        backend = self.executor(conf=conf, plan=plan, run_dir=runtime.run_dir, preload=settings.worker_modules)
        if not isinstance(backend, Backend):
            raise ConfigError(f"executor._target_={conf._target_!r} built a {type(backend).__name__}, "
                              "not a pipeline.graph.backend.Backend")
        return backend

    def cluster(self, settings: Settings):
        """The cluster the fits run on, as the executor looked at it (its totals, and `check(plan)` of every
        fit against its nodes), when the executor has one (`cluster` attribute); else None: this machine."""
        look = getattr(self.executor, "cluster", None)
        return look(settings.conf.executor) if look is not None else None

    def on_cluster(self, settings: Settings) -> bool:
        """Whether the fits run on a cluster's nodes, not this machine, without looking at it."""
        joins = getattr(self.executor, "joins_cluster", None)
        return bool(joins is not None and joins(settings.conf.executor))


def execute(settings: Settings, plan: Plan, models: tuple, runtime: Runtime, components: Components,
            checked: Checked) -> Union[float, list[float]]:
    """Fit the plan, once the data is loaded and checked."""
    from pipeline.signals import StopSignals
    from pipeline.store import RunDirectoryLock

    with RunDirectoryLock(runtime.run_dir), StopSignals() as signals:
        try:
            return _execute(settings, plan, models, runtime, components, checked, signals)
        finally:
            signals.clean_up()


def _execute(settings: Settings, plan: Plan, models: tuple, runtime: Runtime, components: Components,
             checked: Checked, signals):
    """The data loads and is checked; only then does the tracker connect (a tracker service may be
    started, which outlives the run) and the executor start (workers spawn, Ray connects), while the
    tracker's host opens the store and starts the MLflow run."""
    tracker = components.build_tracker(settings, runtime)
    data, metric = load_data(settings, runtime, checked)  # its checks fail before anything starts in the background
    from pipeline.rare_classes import say_rare_classes

    say_rare_classes(data, max((a.num_folds for a in plan.allocations), default=1))
    tracker.connect() if tracker.enabled else None  # a tracking server's health is checked here, at once
    with contextlib.ExitStack() as stack:
        try:
            backend = stack.enter_context(components.build_backend(settings, plan, runtime))
            backend.start(plan)
        except BaseException:
            tracker.end("FAILED")  # no run was started: this only stops the tracker's process
            raise
        return _fit(settings, plan, models, runtime, data, metric, tracker, backend, signals,
                    components.kinds(settings))


def load_data(settings: Settings, runtime: Runtime, checked: Checked = Checked()):
    """The data and its metric (checked now where the problem type was not known before loading)."""
    from pipeline import data as data_module

    data = data_module.load(settings.conf.data, runtime.launch_dir, checked.roles, settings.source)
    if data.roles is not None:
        if checked.roles is None:  # inferred from the loaded rows
            from pipeline import report

            report.print_roles(data.roles)
        data_module.write_schema(runtime.run_dir / "schema.json", data)
    metric = chosen_by(check_after_loading(settings, checked, data.problem_type), data,
                       settings.conf.parallelism.num_folds)
    if settings.conf.data.class_weight != "none":
        from pipeline import class_weights, report

        line = class_weights.weights_line(data.y[data.train_idx], data.classes)
        report.console.print(line, highlight=False)
    return data, metric


def _fit(settings: Settings, plan: Plan, models: tuple, runtime: Runtime, data, metric, tracker, backend,
         signals, kinds: dict[str, str]) -> Union[float, list[float]]:
    """Fit the graph, announcing the run's events to its subscribers: the console, the run's state file
    (pipeline.outputs.RunRecord) and the tracker (pipeline.tracking.hooks)."""
    from pipeline.outputs import HookList, RunRecord
    from pipeline.report import ConsoleHooks
    from pipeline.tracking.hooks import TrackingHooks, run_start

    record, status = RunRecord(runtime.run_dir), "FAILED"
    events = HookList(ConsoleHooks(), record, TrackingHooks(tracker, on_run_id=record.run_id))
    try:
        events.on_run_start(run_start(settings, plan, runtime, metric, kinds, user_command()))
        events.on_artifact(runtime.run_dir / "plan.json")
        if (runtime.run_dir / "schema.json").exists():
            events.on_artifact(runtime.run_dir / "schema.json")
        events.on_data(data, settings.source, runtime.launch_dir)
        events.on_artifact(_write_config(settings, runtime))
        rows, inner = run_graph(settings, plan, models, data, metric, runtime, tracker, backend, record, events)
        events.on_fits_done()
        status = "FINISHED"
        return job_return(settings.conf.objectives, rows, metric.name, inner)
    except Interrupted:
        status = "KILLED"
        raise
    finally:
        signals.clean_up()
        events.on_run_end(status, runtime.run_dir)


def run_graph(settings: Settings, plan: Plan, models: tuple, data, metric, runtime: Runtime, tracker, backend,
              record, events) -> tuple[list[dict], dict[int, float]]:
    """Wire the scheduler (result store, trial source, progress and tracking hooks, the run's outputs)
    and run every task of the plan; returns the leaderboard rows, best first, and `inner_fit_seconds`."""
    from pipeline.graph.scheduler import Scheduler
    from pipeline.hpo import TrialSource
    from pipeline.metrics import choice_metric
    from pipeline.outputs import HookList, OutputHooks, RunHooks, RunOutputs
    from pipeline.planning.busy_box import thread_cap
    from pipeline.report import FitProgress
    from pipeline.store import ResultStore, prior_trials, resume_sources

    sources = resume_sources(settings.resume, runtime.run_dir, runtime.launch_dir / "outputs")
    told = choice_metric(metric)  # what each trial's score is told in: the log loss under accuracy
    if told is not metric and settings.conf.hpo.searches:
        log.info("hpo: trials scored, searched and ranked by the held-out rows' %s, not their %s, which "
                 "reads only each row's likeliest class (the leaderboard scores both)", told.name, metric.name)
    trials = TrialSource(
        settings.conf.hpo,
        {s.name: s.search_space for s in settings.models},
        {s.name: s.params for s in models},
        "maximize" if told.greater_is_better else "minimize",
        store_dir=runtime.run_dir / "trials",
        prior=prior_trials([*sources, runtime.run_dir]),  # this directory's own trials win
        portfolios={s.name: s.cls.profile.portfolio for s in settings.models},
        default_models=tuple(s.name for s in settings.models if not s.added),
    )
    outputs = RunOutputs(runtime.run_dir, tracker, settings.conf.tracking.register_model,
                         settings.conf.tracking.register_alias)
    ex = settings.conf.executor
    store = ResultStore(runtime.run_dir, sources)
    budget = _budget(settings, plan, runtime)
    with FitProgress(plan) as progress:
        scheduler = Scheduler(
            plan, backend, store, trials,
            {s.name: s.prototype() for s in models}, data, metric,
            seed=settings.conf.seed, max_retries=ex.max_retries, task_timeout_s=ex.task_timeout_s,
            hooks=HookList(RunHooks(progress, tracker, metric, settings.conf.hpo.searches, on_run_id=record.run_id),
                           OutputHooks(outputs, plan, data, metric, lambda: scheduler.ctx.outcome)),
            pruning=settings.conf.hpo.pruning, unseen_categories=settings.conf.data.unseen_categories, budget=budget,
            class_weight=settings.conf.data.class_weight,
        )
        scheduler.ctx.thread_cap = thread_cap(settings)
        try:
            outcome = scheduler.run()
        finally:
            store.flush()  # the fits finished before an error or a signal stopped it, for a resumed run
    trials.flush()
    from pipeline.store import reuse_summary

    said = reuse_summary(store.reused, plan.num_fits, runtime.run_dir)
    if said is not None:
        from pipeline import report

        report.console.print(said, highlight=False)
    if budget is not None:  # what the limit cut: said, kept in run_state.json and logged by the subscribers
        from pipeline.graph.time_budget import check_finished

        summary = scheduler.budget_summary()
        events.on_time_budget(summary)
        check_finished(summary)
    return outcome.results[EVALUATE].rows, inner_fit_seconds(plan.fit_tasks, outcome.results)


def _budget(settings: Settings, plan: Plan, runtime: Runtime):
    """time_limit_s: the whole run's budget, from its start, less its tail; fit_time_limit_s: the fits'."""
    from pipeline.graph.stack_reserve import StackReserve
    from pipeline.graph.tail import reserved_share
    from pipeline.graph.time_budget import TimeBudget
    from pipeline.run_clock import start_up_cpu_share

    conf = settings.conf
    stacking = StackReserve.of(plan)
    if conf.fit_time_limit_s is not None:
        return TimeBudget(conf.fit_time_limit_s, stacking=stacking)
    if conf.time_limit_s is None:
        return None
    tail = _tail(settings, plan)
    cpu_share = start_up_cpu_share()
    share, runs = reserved_share(tail, cpu_share)
    tail = dataclasses.replace(tail, share=share)
    measured = (f"from the tails of the last {runs} such runs on this machine" if runs
                else "no tail of such a run measured on this machine yet")
    log.info("time_limit_s: %.1f s of the run's tail (its refits apart) reserved: %.0f%% of its fixed bound, "
             "for a start-up that had %.2f of a CPU (%s)", tail.fixed * share, 100 * share, cpu_share, measured)
    budget = TimeBudget(conf.time_limit_s, start=runtime.started, whole_run=True, tail=tail,
                        stacking=stacking)
    object.__setattr__(tail, "fit_seconds", budget.refit_estimate)  # a refit fits its model's best trial
    object.__setattr__(tail, "saved_bytes", budget.model_bytes)
    return budget


def _tail(settings: Settings, plan: Plan):
    from pipeline.graph.tail import TailEstimate, size_decade

    conf = settings.conf
    models = tuple((a.model, a.num_folds, a.fit.num_cpus) for a in plan.allocations)
    tracking = not conf.tracking._target_.endswith("no_tracker")
    shape = plan.memory.shape if plan.memory is not None else None
    return TailEstimate(models, plan.hardware.num_cpus, conf.refit, tracking,
                        workers=conf.executor.in_process != "always",
                        size=size_decade(shape.rows, shape.features) if shape is not None else "unknown")


def _keep_tail(settings: Settings, plan: Plan, runtime: Runtime) -> None:
    """The tail this run took under time_limit_s (its last fit's end to its last line), for the next run's reserve."""
    import time

    from pipeline.graph.tail import keep_measured
    from pipeline.run_clock import start_up_cpu_share
    from pipeline.store import read_state

    ended = ((read_state(runtime.run_dir) or {}).get("time_budget") or {}).get("fits_ended_s")
    if isinstance(ended, (int, float)) and ended > 0:
        keep_measured(_tail(settings, plan), time.time() - runtime.started - ended, start_up_cpu_share())


def user_command(argv: Optional[list[str]] = None) -> str:
    """The command that started this process, secrets masked: `python -m pipeline -m model=a,b seed=0,1`."""
    from pipeline.redact import redact_override

    argv = list(sys.argv if argv is None else argv)
    program = "python -m pipeline" if Path(argv[0]).parts[-2:] == ("pipeline", "__main__.py") else argv[0]
    return " ".join([program, *(redact_override(a) for a in argv[1:])])


def _write_config(settings: Settings, runtime: Runtime) -> Path:
    """The resolved, redacted config in the run folder, for the tracker."""
    from pipeline.store import atomic_write_bytes

    path = runtime.run_dir / "config.yaml"
    atomic_write_bytes(path, settings.config_yaml.encode())
    return path
