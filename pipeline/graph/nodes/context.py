"""What the graph's nodes share while a plan runs: the run's inputs, its growing outcome, and
where the evaluation writes. The composition root fills it with typed values; no node reads config."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional, Protocol

from pipeline.graph.plan import Plan, Task
from pipeline.graph.retention import Retention

if TYPE_CHECKING:
    from pipeline.metrics import Metric


@dataclass
class TrialResult:
    """One trial of one model: its bagged out-of-fold (or holdout) and test predictions."""

    model: str
    trial: int
    params: dict
    folds: list  # FoldResult, in fold order
    held_out: Any  # np.ndarray of row indices
    val_pred: Any
    test_pred: Any
    score: float  # under the run's choice metric (`GraphContext.search_metric`), as the search was told
    pruned: bool = False
    level: int = 1  # its stacking level; `model` is the level's name (lightgbm_l2)
    released: bool = False  # its fold models let go (graph.retention): no choice takes it
    eval_score: Optional[float] = None  # under the eval metric where `score` is under another (None: `score`)

    @property
    def fit_seconds(self) -> float:
        return sum(f.fit_seconds for f in self.folds)

    @property
    def predict_seconds(self) -> float:
        return sum(f.predict_seconds for f in self.folds)

    @property
    def test_predict_seconds(self) -> Optional[float]:
        """What its bagged predictor took to score the test rows: its fold models, one after the
        other, as the fits timed them; None if a fold's time is unknown."""
        seconds = [getattr(f, "test_predict_seconds", None) for f in self.folds]
        return None if any(s is None for s in seconds) else sum(seconds)


@dataclass
class Outcome:
    """What a run produced: each bagged trial, the fits' timeline, and every node's result by task id."""

    trials: dict[tuple[str, int], TrialResult] = field(default_factory=dict)
    timeline: list[dict] = field(default_factory=list)
    results: dict[str, Any] = field(default_factory=dict)

    def best(self, model: str, metric: Metric) -> TrialResult:
        mine = [t for (m, _), t in self.trials.items() if m == model and not t.released]
        candidates = [t for t in mine if not t.pruned] or mine
        best = candidates[0]
        for t in candidates[1:]:
            if metric.better(t.score, best.score):
                best = t
        return best


class Hooks(Protocol):
    def on_task_start(self, task: Task) -> None: ...

    def on_task_end(self, task: Task, result) -> None: ...

    def on_trial_end(self, result: TrialResult) -> None: ...

    # optional: on_tasks_cut(tasks), the tasks one cut of the time limit took before they finished;
    # on_fits_dropped(model, count), the fits of trials never made (the search ended before them);
    # on_node_end(task, result), a driver node's result (the root's pipeline.outputs writes and logs them)


@dataclass
class GraphContext:
    """The inputs every node may read, and the run's outcome, which nodes add to."""

    plan: Plan
    data: Any  # TabularData
    metric: Metric
    seed: int
    trials: Any  # hpo.TrialSource
    store: Any  # store.ResultStore
    prototypes: dict  # model name -> unfitted TabularModel
    pruning: bool = False
    hooks: Optional[Hooks] = None
    unseen_categories: str = "missing"  # data.unseen_categories, carried by every saved predictor
    class_weight: str = "none"  # data.class_weight, for every fit
    data_ref: Any = None  # executors.tasks.DataRef, set when the backend has prepared the data
    deadline: Optional[float] = None  # time.time() the fits must end by (time_limit_s); None: no limit
    outcome: Outcome = field(default_factory=Outcome)
    rungs: dict[tuple[str, int], Any] = field(default_factory=dict)  # (model, fold) -> round_pruning.RungTable
    retention: Retention = field(default_factory=Retention)  # which trials keep their fold models
    standing: Any = None  # graph.first_trials.LeadStanding under a budget whose first bags may end short
    thread_cap: Any = None  # planning.busy_box.ThreadCap: a fit's threads while others keep CPUs busy

    def fit_threads(self, task, shares) -> int:
        """The threads a fit starts with: its planned CPUs, fewer on CPUs others have taken since the plan
        (a fit on GPUs keeps its host threads)."""
        cpus = task.resources.num_cpus
        return self.thread_cap.threads(task.model, cpus) if self.thread_cap and not shares else cpus

    @property
    def search_metric(self) -> Metric:
        """What the search ranks trials and folds by, each model's best trial is chosen on and every trial's
        `score` is (`metrics.choice_metric`): the eval metric, or the log loss under accuracy."""
        from pipeline.metrics import choice_metric

        return choice_metric(self.metric)

    def rung_table(self, model: str, fold: int):
        from pipeline.graph.round_pruning import RungTable

        return self.rungs.setdefault((model, fold), RungTable())

    def rung_thresholds(self, model: str, fold: int) -> tuple:
        table = self.rungs.get((model, fold))
        return table.thresholds() if table is not None else ()


def leaderboard_row(name: str, val: dict, test: dict, *, fit_seconds: float, predict_seconds: float,
                    test_rows_per_s: Optional[float], device: str, num_folds: int, best_trial, params: dict,
                    reused_folds: int = 0, level: int = 1) -> dict:
    """One row of the leaderboard (a model, the ensemble or a refit), its columns in the leaderboard's order;
    `reused_folds`: how many of its fits were taken from an earlier run rather than fitted; `level`: its
    stacking level (the weighted ensemble's is the level above its members', as AutoGluon counts)."""
    import json

    row = {"model": name, "level": level}
    row.update({f"val_{k}": v for k, v in val.items()})
    row.update({f"test_{k}": v for k, v in test.items()})
    row.update(fit_seconds=fit_seconds, predict_seconds=predict_seconds, predict_rows_per_s=test_rows_per_s,
               device=device, num_folds=num_folds, reused_folds=reused_folds, best_trial=best_trial,
               params=json.dumps(params, default=str))
    return row


def rows_per_second(rows: int, seconds: Optional[float]) -> Optional[float]:
    """Throughput of a predictor that scored `rows` in `seconds` (AutoGluon's pred_time_test, as a
    rate); None when the time is unknown or too short to read."""
    return rows / seconds if seconds else None


def seconds_of(parts: dict) -> Optional[float]:
    """The seconds of a predictor's test predictions, from its parts (each bag it predicts with, its
    own and, stacked, each lower level's); None when a part's time is unknown."""
    return None if None in parts.values() else sum(parts.values())


def ensemble_seconds(member_parts: list, weights) -> Optional[float]:
    """An ensemble's test seconds: each member of nonzero weight's own, and each lower level's bags
    once between them (pipeline.ensemble: stacked members share those predictions)."""
    return seconds_of({part: s for parts, w in zip(member_parts, weights) if w > 0 for part, s in parts.items()})
