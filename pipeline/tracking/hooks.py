"""Tracking as a subscriber of the run's events: what the composition root announces (the run starts, an
artifact is written, the data is loaded, the fits are done, the time budget's summary, the run ends)
this hook sends to the tracker. The root calls no tracker method to record anything; it builds the
tracker, connects it and, where no run was started, stops it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

if TYPE_CHECKING:
    from pipeline.settings import Settings


@dataclass(frozen=True)
class RunStart:
    """The run's MLflow identity: its name, its parameters worth comparing, its tags and the experiment's
    shared view."""

    name: str
    params: dict
    tags: dict
    view: Any


class TrackingHooks:
    """The run's events, sent to `tracker` (a NullTracker when tracking=none); `on_run_id` is told the
    MLflow run's id once the fits are done (the run's state file keeps it)."""

    def __init__(self, tracker, on_run_id: Optional[Callable[[str], None]] = None):
        self.tracker, self.on_run_id = tracker, on_run_id

    def on_run_start(self, start: RunStart) -> None:
        # not waited for: the tracker's process starts the MLflow run while this one fits
        self.tracker.start(start.name, start.params, start.tags)
        self.tracker.share_view(start.view)

    def on_artifact(self, path: Path) -> None:
        self.tracker.log_artifact(path)

    def on_data(self, data, source, launch_dir: Path) -> None:
        """`source`: the run's pipeline.data_sources.DataSource, which the data was read from."""
        from pipeline.tracking.datasets import locations, summarize

        self.tracker.log_datasets(summarize(data), locations(source, launch_dir))

    def on_fits_done(self) -> None:
        if self.tracker.enabled and self.on_run_id is not None:
            self.on_run_id(self.tracker.run_id)  # waits for the start, if need be

    def on_time_budget(self, summary) -> None:
        self.tracker.set_tags({"pipeline.time_limit": summary.line()})
        self.tracker.log_metrics({"time_limit/trials_not_run": float(summary.trials_not_run),
                                  "time_limit/trials_dropped": float(summary.trials_dropped),
                                  "time_limit/fits_not_run": float(summary.fits_not_run),
                                  "time_limit/fits_stopped": float(summary.fits_stopped)})

    def on_run_end(self, status: str, run_dir: Path) -> None:
        """End the MLflow run; after a finished one, its links on the console, and a TrackingError when
        tracking failed along the way (the results are in `run_dir` all the same)."""
        self.tracker.end(status)
        if status != "FINISHED":
            return
        from pipeline import report

        for line in self.tracker.closing_lines():
            report.console.print(line, soft_wrap=True, highlight=False)
        if self.tracker.failure is not None:
            from pipeline.errors import TrackingError

            raise TrackingError(
                f"the run finished and its results are in {run_dir}, but MLflow tracking failed: "
                f"{self.tracker.failure}"
            )


def run_start(settings: Settings, plan, runtime, metric, kinds: dict[str, str], command: str) -> RunStart:
    """The run's MLflow identity: its name, the parameters worth comparing, its tags, the shared view
    (`plan`: the run's pipeline.graph.plan.Plan; `runtime`: the root's pipeline.run.Runtime; `command`: the
    user's, secrets masked)."""
    from pipeline.tracking.naming import comparable_params
    from pipeline.tracking.view import view_state

    conf = settings.conf
    params = comparable_params(settings.params, [s.name for s in settings.models], kinds,
                               conf.hpo.searches, settings.source.kind, runtime.swept)
    shown = ["model", *(k for k in runtime.swept if k in params and k != "model")]
    return RunStart(run_name(settings, runtime), params, run_tags(settings, plan, runtime, command),
                    view_state(metric.name, metric.greater_is_better, shown))


def run_name(settings: Settings, runtime) -> str:
    """tracking.run_name, else what varies: a sweep job's swept values, short; a single run's models; masked."""
    from pipeline.redact import redact_text
    from pipeline.tracking import naming

    if settings.conf.tracking.run_name:
        return redact_text(settings.conf.tracking.run_name)
    if runtime.sweep_dir is not None:
        return redact_text(naming.job_name(runtime.overrides, runtime.swept))
    return redact_text(naming.single_name([s.name for s in settings.models], runtime.overrides))


def run_tags(settings: Settings, plan, runtime, command: str) -> dict:
    from pipeline.redact import redact

    gpu_ids = sorted({t for task in plan.fit_tasks for t in task.device_ids})
    physical = plan.hardware.visible_devices(gpu_ids) if gpu_ids else ""
    tags = {
        "pipeline.run_dir": str(runtime.run_dir),
        "pipeline.hardware": str(plan.hardware),
        "pipeline.gpu_ids": physical or "none",
        "pipeline.models": ",".join(a.model for a in plan.allocations),
        "pipeline.overrides": " ".join(runtime.overrides),
        # MLflow's Source: the user's command, not the tracker process that creates the run
        "mlflow.source.name": command,
        "mlflow.source.type": "LOCAL",
        **redact(settings.conf.tracking.tags),
    }
    if runtime.job_num is not None:
        tags["pipeline.job_num"] = str(runtime.job_num)
    return tags
