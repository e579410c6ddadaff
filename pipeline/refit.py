"""Refit on all the data (AutoGluon's refit_full): each model's best trial fitted once more on
train + validation, for the mean number of rounds or epochs its fold models early-stopped at.

One model instead of a bag of k: k times fewer models to predict with. Its validation score is
not defined (it learnt from the validation rows), so the leaderboard shows its test score only.
The refit node (pipeline.nodes.refit) runs in the driver after the ensemble node (whose weights the refitted ensemble
keeps), one model at a time, each with the resources of one of its model's fits (CPU count and
devices, as planned).
"""

from __future__ import annotations

import time
from fractions import Fraction

import numpy as np

from pipeline import metrics as metrics_module
from pipeline.ensemble import BaggedPredictor, EnsemblePredictor, blend
from pipeline.devices import local_ordinals
from pipeline.executors.tasks import task_seed
from pipeline.metrics import Metric
from pipeline.models.base import FitContext, Placement
from pipeline.nodes.context import TrialResult, leaderboard_row, rows_per_second
from pipeline.plan import Plan

SUFFIX = "_refit"


def placement_for(plan: Plan, model: str) -> Placement:
    """The resources of the model's first planned fit: its CPU count and its GPUs (by id, as
    in-process fits use them)."""
    task = next(t for t in plan.fit_tasks if t.model == model)
    share = sum(task.gpu_shares, Fraction(0))
    local = local_ordinals(task.device_ids, sees_only_its_devices=False)
    return Placement(task.resources.num_cpus, task.device_ids, local, share)


def refit_model(name: str, trial: TrialResult, data, metric: Metric, placement: Placement, seed: int):
    """The best trial's model fitted on train + validation, where `placement` puts it."""
    fitted = [f.model for f in trial.folds]
    model = fitted[0].clone(fitted[0].refit_params(fitted))
    ctx = FitContext(
        problem_type=data.problem_type, num_classes=data.num_classes, placement=placement,
        seed=task_seed(seed, name, trial.trial, -1), eval_metric=metric.name,
    )
    rows = data.fit_idx(True)
    # The validation rows are inside the training rows now: they only feed the learning curve.
    model.fit(data.X.iloc[rows], data.y[rows], data.X.iloc[data.val_idx], data.y[data.val_idx], ctx)
    return model


def refit_all(best: dict[str, TrialResult], predictors: dict, data, metric: Metric, plan: Plan, seed: int,
              schema) -> list[dict]:
    """Refit every model (and the ensemble over the refits, with the bagged ensemble's weights);
    adds their predictors to `predictors` and returns their leaderboard rows."""
    problem, y_test, X_test = data.problem_type, data.y[data.test_idx], data.X.iloc[data.test_idx]
    rows, test_preds, test_seconds = [], {}, {}
    for name, trial in best.items():
        placement = placement_for(plan, name)
        model = refit_model(name, trial, data, metric, placement, seed)
        predictor = BaggedPredictor(name + SUFFIX, [model], problem, data.classes, schema)
        predictors[predictor.name] = predictor
        start = time.perf_counter()
        test_preds[name] = predictor.predict_typed(X_test)
        seconds = test_seconds[name] = time.perf_counter() - start
        on_gpu = model.device_ != "cpu"  # cuda:N, or opencl:N (...) for LightGBM's OpenCL learner
        device = "GPU " + plan.hardware.visible_devices(placement.gpu_ids) if on_gpu else "cpu"
        rows.append(_row(predictor.name, metrics_module.score_all(problem, y_test, test_preds[name]),
                         model.fit_seconds_, seconds, rows_per_second(len(X_test), seconds), device, trial.trial,
                         {**model.params}))
    bagged = predictors.get("ensemble")
    if isinstance(bagged, EnsemblePredictor):
        members = [predictors[m.name + SUFFIX] for m in bagged.members]
        predictors["ensemble" + SUFFIX] = EnsemblePredictor("ensemble" + SUFFIX, members, bagged.weights, problem,
                                                            data.classes)
        pred = blend([test_preds[m.name] for m in bagged.members], np.asarray(bagged.weights))
        weights = dict(zip((m.name for m in members), bagged.weights))
        seconds = sum(test_seconds[m.name] for m in bagged.members)
        rows.append(_row("ensemble" + SUFFIX, metrics_module.score_all(problem, y_test, pred), 0.0, 0.0,
                         rows_per_second(len(X_test), seconds), "cpu", "-", weights))
    return rows


def _row(name: str, test: dict, fit_seconds: float, predict_seconds: float, rows_per_s, device: str, trial,
         params: dict) -> dict:
    """A refit has no validation rows of its own: its validation scores are NaN."""
    return leaderboard_row(name, {k: float("nan") for k in test}, test, fit_seconds=fit_seconds,
                           predict_seconds=predict_seconds, test_rows_per_s=rows_per_s, device=device, num_folds=1,
                           best_trial=trial, params=params)
