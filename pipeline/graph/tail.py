"""What a run does after its last fit, in seconds: the part of a whole-run time limit
(`time_limit_s`, pipeline.graph.time_budget) kept back from the fits.

The tail: with refit=true each model's best trial fitted once more on every row (a fit of the model
on num_folds / (num_folds - 1) times its fold's rows: its measured fit time scaled so, on the places
the CPUs give); the ensemble's weights; each model's predictor, the leaderboard and the run's files
written; with tracking, the MLflow run logged; the workers stopped (none where the fits ran in the
driver) and the process's exit. The costs other than the refits are the figures measured on the 2-core
box (docs/time_budget.md), per run and per model; each run's state.json keeps the reserve beside the
tail it took, to check them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

WRITE_S = 0.8  # the ensemble's weights, leaderboard, timeline, memory and state files
PER_MODEL_S = 0.3  # a model's predictor saved (its fold models pickled) and its leaderboard row
TRACKING_S = 3.0  # MLflow: the run's params, metrics and artifacts, and the ensemble logged as a model
EXIT_S = 1.5  # the workers stopped (a Ray connection closed), the interpreter's exit
IN_DRIVER_EXIT_S = 0.3  # the interpreter's exit where the fits ran in the driver: no worker to stop


@dataclass(frozen=True)
class TailEstimate:
    """The tail's seconds for the run's models: (name, num_folds, CPUs per fit) each."""

    models: tuple[tuple[str, int, int], ...]
    cpus: int
    refit: bool = False
    tracking: bool = False
    fit_seconds: Callable[[str], Optional[float]] = lambda model: None  # a model's measured seconds per fit
    workers: bool = True  # False: the fits run in the driver (executor.in_process=always)

    def __call__(self) -> float:
        exit_s = EXIT_S if self.workers else IN_DRIVER_EXIT_S
        seconds = WRITE_S + exit_s + PER_MODEL_S * len(self.models) + (TRACKING_S if self.tracking else 0.0)
        if self.refit:
            refits = [(self.fit_seconds(m) or 0.0) * folds / max(1, folds - 1) for m, folds, _ in self.models]
            places = max(1, self.cpus // max(1, max((c for _, _, c in self.models), default=1)))
            seconds += max(max(refits, default=0.0), sum(refits) / places)
        return seconds
