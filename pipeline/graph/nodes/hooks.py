"""Scheduler events to the progress display and to MLflow (a child run per HPO trial)."""

from __future__ import annotations

from typing import Callable, Optional

from pipeline.graph.nodes.context import TrialResult
from pipeline.graph.plan import Task


class RunHooks:
    """Advances the model's progress bar per fit; logs each finished trial when an HPO search runs;
    after each fit, hands the MLflow run's id to `on_run_id` once the tracker has started that run
    (a run that could not start stops the fits there, with the tracker's TrackingError)."""

    def __init__(self, progress, tracker, metric, log_trials: bool,
                 on_run_id: Optional[Callable[[str], None]] = None):
        self.progress, self.tracker, self.metric, self.log_trials = progress, tracker, metric, log_trials
        self.on_run_id, self.run_id = on_run_id, None

    def on_task_start(self, task: Task) -> None:
        pass

    def on_task_end(self, task: Task, result) -> None:
        self.progress.advance(task.model)
        if self.run_id is None and self.tracker.enabled:
            self.run_id = self.tracker.poll()
            if self.run_id is not None and self.on_run_id is not None:
                self.on_run_id(self.run_id)

    def on_task_cut(self, task: Task) -> None:
        """The time limit cut a task before it finished: a fit leaves its model's progress bar."""
        if task.kind == "fit":
            self.progress.drop(task.model)

    def on_trial_end(self, trial: TrialResult) -> None:
        if not self.log_trials:
            return
        self.tracker.log_trial(
            f"{trial.model} trial {trial.trial}",
            trial.params,
            {f"val_{self.metric.name}": trial.score, "fit_seconds": trial.fit_seconds},
            {"pipeline.model": trial.model, "pipeline.trial": trial.trial, "pipeline.pruned": trial.pruned},
        )
