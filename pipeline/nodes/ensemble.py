"""The ensemble node: each model's best trial as a bagged predictor with its leaderboard row, and,
with two models or more, their weighted ensemble (Caruana selection on the out-of-fold predictions)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from pipeline.nodes import NodeKind, register
from pipeline.nodes.context import leaderboard_row, rows_per_second


@dataclass
class Board:
    """Leaderboard rows and the predictors they score; evaluation concatenates its inputs' boards."""

    rows: list[dict]
    predictors: dict  # name -> BaggedPredictor | EnsemblePredictor
    best: dict = field(default_factory=dict)  # model -> its best TrialResult
    schema: object = None  # FeatureSchema the predictors type their input with


@register
class EnsembleNode(NodeKind):
    name = "ensemble"
    partial_inputs = True  # the models with a complete trial, when a time limit cut the others

    def run(self, task, inputs, ctx) -> Board:
        from pipeline import metrics as metrics_module
        from pipeline.ensemble import BaggedPredictor, FeatureSchema

        data, metric, tracker = ctx.data, ctx.metric, ctx.require_outputs(task).tracker
        problem = data.problem_type
        models = list(dict.fromkeys(inputs[i].model for i in task.depends_on if i in inputs))
        best = {name: ctx.outcome.best(name, metric) for name in models}
        schema = FeatureSchema.of(data.X, data.raw_dtypes, data.label, ctx.outputs.unseen_categories)
        rows, predictors = [], {}
        for name, trial in best.items():
            val_scores = metrics_module.score_all(problem, data.y[trial.held_out], trial.val_pred)
            test_scores = metrics_module.score_all(problem, data.y[data.test_idx], trial.test_pred)
            rows.append(_row(name, trial, val_scores, test_scores, ctx.plan, len(data.test_idx)))
            predictors[name] = BaggedPredictor(name, [f.model for f in trial.folds], problem, data.classes, schema)
            _log_model_metrics(tracker, name, val_scores, test_scores, trial)
        if len(best) >= 2:
            rows.append(_ensemble(best, data, metric, problem, predictors, tracker))
        rows.sort(key=lambda r: metric.loss_of(r[f"val_{metric.name}"]))  # NaN last
        return Board(rows, predictors, best, schema)

    def describe(self, tasks, plan) -> str:
        names = [a.model for a in plan.allocations]
        if len(names) >= 2:
            return f"ensemble: the best trial of each model, and the weighted ensemble of the {len(names)} models"
        return f"ensemble: the best trial of {names[0]}" if names else "ensemble: no model"


def _row(name: str, trial, val: dict, test: dict, plan, test_rows: int) -> dict:
    devices = sorted({d for f in trial.folds for d in f.gpu_ids if f.device != "cpu"})
    device = "GPU " + plan.hardware.visible_devices(devices) if devices else "cpu"
    return leaderboard_row(name, val, test, fit_seconds=trial.fit_seconds, predict_seconds=trial.predict_seconds,
                           test_rows_per_s=rows_per_second(test_rows, trial.test_predict_seconds),
                           device=device, num_folds=len(trial.folds), best_trial=trial.trial, params=trial.params,
                           reused_folds=sum(bool(f.cached) for f in trial.folds))


def _ensemble(best: dict, data, metric, problem: str, predictors: dict, tracker) -> dict:
    import numpy as np

    from pipeline import metrics as metrics_module
    from pipeline.ensemble import EnsemblePredictor, blend, ensemble_selection

    trials = list(best.values())
    held = trials[0].held_out
    if any(not np.array_equal(t.held_out, held) for t in trials):
        raise RuntimeError("models were validated on different rows; cannot ensemble them")
    t0 = time.perf_counter()
    weights = ensemble_selection([t.val_pred for t in trials], data.y[held], metric, names=list(best))
    seconds = time.perf_counter() - t0
    val_pred = blend([t.val_pred for t in trials], weights)
    test_pred = blend([t.test_pred for t in trials], weights)
    val_scores = metrics_module.score_all(problem, data.y[held], val_pred)
    test_scores = metrics_module.score_all(problem, data.y[data.test_idx], test_pred)
    names = list(best)
    predictors["ensemble"] = EnsemblePredictor("ensemble", [predictors[n] for n in names], list(map(float, weights)),
                                               problem, data.classes)
    tracker.log_metrics({f"ensemble/val_{k}": v for k, v in val_scores.items()}
                        | {f"ensemble/test_{k}": v for k, v in test_scores.items()}
                        | {f"ensemble/weight/{n}": float(w) for n, w in zip(names, weights)})
    member_seconds = [t.test_predict_seconds for t in trials]  # it predicts with every member, then blends
    test_seconds = None if None in member_seconds else sum(member_seconds)
    return leaderboard_row("ensemble", val_scores, test_scores, fit_seconds=seconds, predict_seconds=0.0,
                           test_rows_per_s=rows_per_second(len(data.test_idx), test_seconds), device="cpu",
                           num_folds=len(trials[0].folds), best_trial="-", params=dict(zip(names, map(float, weights))))


def _log_model_metrics(tracker, name: str, val: dict, test: dict, trial) -> None:
    import numpy as np

    values = {f"{name}/val_{k}": v for k, v in val.items()}
    values.update({f"{name}/test_{k}": v for k, v in test.items()})
    values.update({f"{name}/fit_seconds": trial.fit_seconds, f"{name}/predict_seconds": trial.predict_seconds})
    fold0 = trial.folds[0].model
    for attr in ("oom_backoffs_", "batch_size_", "best_epoch_", "best_iteration_"):
        if hasattr(fold0, attr):
            values[f"{name}/{attr.rstrip('_')}"] = float(np.mean([getattr(f.model, attr) for f in trial.folds]))
    tracker.log_metrics(values)
    for k, fold in enumerate(trial.folds):
        prefix = name if len(trial.folds) == 1 else f"{name}/fold{k}"
        tracker.log_history(prefix, fold.model.history_)
