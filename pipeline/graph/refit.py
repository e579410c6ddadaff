"""Refit on all the data (AutoGluon's refit_full): each model's best trial fitted once more on
train + validation, for the mean number of rounds or epochs its fold models early-stopped at.

One model instead of a bag of k: k times fewer models to predict with. Its validation score is
not defined (it learnt from the validation rows), so the leaderboard shows its test score only.
The fits are fit tasks of the plan (M(level, {}) in pipeline.graph.stacking: planned with their model's
resources and devices, admitted and run by the backend like any fit, cached by key); the refit node
(pipeline.graph.nodes.refit) turns their results into predictors and rows, and the refits' ensemble keeps
the bagged ensemble's weights. With stacking every level is refit: level l's refit learns from every
row with the features its bag learnt from (each row's from the level-(l-1) fold model that did not
learn it), and predicts from the level-(l-1) refits' predictions.
"""

from __future__ import annotations

import logging
from typing import Optional

import numpy as np

from pipeline import metrics as metrics_module
from pipeline.ensemble import BaggedPredictor, EnsemblePredictor, StackedPredictor, blend
from pipeline.graph.nodes.context import ensemble_seconds, leaderboard_row, rows_per_second, seconds_of
from pipeline.graph.plan import Plan
from pipeline.graph.stacking import level_name

SUFFIX = "_refit"
log = logging.getLogger(__name__)


def refit_all(refits: dict, best: dict, predictors: dict, data, plan: Plan, schema,
              ensemble_preds: Optional[dict] = None, stand_ins: Optional[dict] = None) -> list[dict]:
    """The predictors and leaderboard rows of the refit fits `refits` ((model kind, level) -> fold
    result; `best`: each level name's best bag), and of the ensemble over the refits with the bagged
    ensemble's weights (`_refits_ensemble`; `stand_ins`: the bags that may stand in for a member's refit);
    adds the predictors to `predictors` and the refits' ensemble's test predictions to `ensemble_preds`."""
    problem, y_test, num_test = data.problem_type, data.y[data.test_idx], len(data.test_idx)
    kinds = [a.model for a in plan.allocations]
    rows, test_preds, test_seconds = [], {}, {}
    for (kind, level), result in refits.items():
        name = level_name(kind, level)
        if level == 1:
            predictor = BaggedPredictor(name + SUFFIX, [result.model], problem, data.classes, schema)
        else:
            chain = [[(k, refits[(k, lower)].model) for k in kinds] for lower in range(1, level)]
            predictor = StackedPredictor(name + SUFFIX, [result.model], problem, data.classes, schema, [chain])
        predictor.threshold = getattr(predictors.get(name), "threshold", None)  # its bag's, from out of fold
        predictors[predictor.name] = predictor
        test_preds[name] = result.test_pred
        # per refit it predicts with: its own, and above level 1 every level below, predicted first
        test_seconds[name] = {(kind, level): result.test_predict_seconds,
                              **{(k, lower): refits[(k, lower)].test_predict_seconds
                                 for lower in range(1, level) for k in kinds}}
        seconds = seconds_of(test_seconds[name])
        on_gpu = result.device != "cpu"  # cuda:N, or opencl:N (...) for LightGBM's OpenCL learner
        device = "GPU " + plan.hardware.visible_devices(sorted(result.gpu_ids)) if on_gpu else "cpu"
        rows.append(_row(predictor.name, metrics_module.score_all(problem, y_test, result.test_pred),
                         result.fit_seconds, result.predict_seconds, rows_per_second(num_test, seconds), device,
                         best[name].trial, {**result.model.params}, level))
    bagged = predictors.get("ensemble")
    if isinstance(bagged, EnsemblePredictor):
        row = _refits_ensemble(bagged, predictors, test_preds, test_seconds, stand_ins, data, ensemble_preds,
                               max(lvl for _, lvl in refits) + 1 if refits else 2)
        rows.extend([row] if row is not None else [])
    return rows


def _refits_ensemble(bagged, predictors: dict, test_preds: dict, test_seconds: dict,
                     stand_ins: Optional[dict], data, ensemble_preds: Optional[dict],
                     level: int) -> Optional[dict]:
    """The refits' ensemble, the bagged ensemble's weights over each member's refit, and its row; with
    `stand_ins` (hpo=auto: each model's bagged trial by name) a member whose refit the time limit cut is in
    it as its bag, and at least one refit must be: on diamonds at 30 s LightGBM's refit ended and XGBoost's
    did not, and the run had no blend; without, every member needs its refit. None where it cannot be made
    (said in the log)."""
    problem, num_test = data.problem_type, len(data.test_idx)
    missing = [m.name for m in bagged.members if m.name + SUFFIX not in predictors]
    if missing and (stand_ins is None or len(missing) == len(bagged.members)
                    or any(n not in stand_ins for n in missing)):
        log.warning("no ensemble%s: %s, in the ensemble, had no refit (the time limit cut it)", SUFFIX,
                    ", ".join(missing))
        return None
    test_preds, test_seconds = dict(test_preds), dict(test_seconds)  # the refits', and the stand-ins'
    for name in missing:
        log.warning("ensemble%s: %s stands in with its bag: the time limit cut its refit", SUFFIX, name)
        test_preds[name] = stand_ins[name].test_pred
        test_seconds[name] = {name: stand_ins[name].test_predict_seconds}
    members = [predictors.get(m.name + SUFFIX, m) for m in bagged.members]
    ensemble = EnsemblePredictor("ensemble" + SUFFIX, members, bagged.weights, problem, data.classes)
    ensemble.threshold = bagged.threshold
    predictors[ensemble.name] = ensemble
    pred = blend([test_preds[m.name] for m in bagged.members], np.asarray(bagged.weights))
    if ensemble_preds is not None:
        ensemble_preds[ensemble.name] = pred
    weights = dict(zip((m.name for m in members), bagged.weights))
    seconds = ensemble_seconds([test_seconds[m.name] for m in bagged.members], bagged.weights)
    return _row(ensemble.name, metrics_module.score_all(problem, data.y[data.test_idx], pred), 0.0, 0.0,
                rows_per_second(num_test, seconds), "cpu", "-", weights, level)


BLEND = "ensemble_blend"  # pipeline.objectives.BLEND names it too


def blend_row(test_preds: dict, rows: list[dict], predictors: dict, data) -> Optional[dict]:
    """Under hpo=auto, `BLEND`: the mean of the bagged ensemble's and the refits' ensemble's predictions
    (`test_preds` on the test rows, `rows` their leaderboard rows), added to `predictors`, and its leaderboard
    row; None where either ensemble is missing. Each fold model missed a fifth of the rows and the refits
    missed none, but a refit's length is its bag's mean, not one it chose: the mean of the two kept most of
    the refits' gain and little of their loss (docs/time_budget.md)."""
    names = ("ensemble", "ensemble" + SUFFIX)
    if any(n not in test_preds or n not in predictors for n in names):
        return None
    members = [predictors[n] for n in names]
    predictor = EnsemblePredictor(BLEND, members, [0.5, 0.5], data.problem_type, data.classes)
    predictor.threshold = members[0].threshold
    predictors[BLEND] = predictor
    num_test = len(data.test_idx)
    pred = blend([test_preds[n] for n in names], np.asarray([0.5, 0.5]))
    by_name = {r["model"]: r for r in rows}
    rates = [by_name.get(n, {}).get("predict_rows_per_s") for n in names]
    seconds = sum(num_test / r for r in rates) if all(rates) else None
    return _row(BLEND, metrics_module.score_all(data.problem_type, data.y[data.test_idx], pred), 0.0, 0.0,
                rows_per_second(num_test, seconds), "cpu", "-", {n: 0.5 for n in names},
                by_name["ensemble" + SUFFIX]["level"])  # made with its predictions, so always there


def _row(name: str, test: dict, fit_seconds: float, predict_seconds: float, rows_per_s, device: str, trial,
         params: dict, level: int) -> dict:
    """A refit has no validation rows of its own: its validation scores are NaN."""
    return leaderboard_row(name, {k: float("nan") for k in test}, test, fit_seconds=fit_seconds,
                           predict_seconds=predict_seconds, test_rows_per_s=rows_per_s, device=device, num_folds=1,
                           best_trial=trial, params=params, level=level)
