"""Scheduler events to the progress display and to MLflow (a child run per HPO trial)."""

from __future__ import annotations

from pipeline.nodes.context import TrialResult
from pipeline.plan import Task


class RunHooks:
    """Advances the model's progress bar per fit; logs each finished trial when an HPO search runs."""

    def __init__(self, progress, tracker, metric, log_trials: bool):
        self.progress, self.tracker, self.metric, self.log_trials = progress, tracker, metric, log_trials

    def on_task_start(self, task: Task) -> None:
        pass

    def on_task_end(self, task: Task, result) -> None:
        self.progress.advance(task.model)

    def on_trial_end(self, trial: TrialResult) -> None:
        if not self.log_trials:
            return
        self.tracker.log_trial(
            f"{trial.model} trial {trial.trial}",
            trial.params,
            {f"val_{self.metric.name}": trial.score, "fit_seconds": trial.fit_seconds},
            {"pipeline.model": trial.model, "pipeline.trial": trial.trial, "pipeline.pruned": trial.pruned},
        )
