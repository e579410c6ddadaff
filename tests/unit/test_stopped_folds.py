"""A fold the budget stopped far short, left out of its bag (pipeline.graph.stopped_folds)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from pipeline.graph.stopped_folds import KEEP, far_short
from pipeline.metrics import METRICS

ROWS = 1000


def _fold(k: int, pred, stopped: bool):
    held_out = np.arange(k, ROWS, 5)
    return SimpleNamespace(task_id=f"fit/m/t0/f{k}", held_out=held_out, val_pred=pred(held_out),
                           stopped_by_budget=stopped)


def test_a_stopped_regression_fold_near_the_mean_is_left_out_and_one_that_learnt_stays():
    rng = np.random.default_rng(0)
    y = rng.normal(7.0, 1.4, ROWS)
    close = lambda rows: y[rows] + rng.normal(0, 0.07, len(rows))  # noqa: E731 - what whole folds reach
    folds = [_fold(0, close, False), _fold(1, close, False),
             _fold(2, lambda rows: 7.0 + 0.3 * (y[rows] - 7.0), True),  # a few rounds: 30% of the way
             _fold(3, lambda rows: y[rows] + rng.normal(0, 0.09, len(rows)), True),  # stopped late: stays
             _fold(4, lambda rows: y[rows] + rng.normal(0, 0.3, len(rows)), True)]  # 98% of the gain, 4x the
    # error
    short = far_short(folds, y, METRICS["rmse"])
    assert [s.task_id for s in short] == ["fit/m/t0/f2", "fit/m/t0/f4"]
    assert short[0].gain < KEEP * short[0].reference
    assert short[0].line("rmse").startswith("fit/m/t0/f2 left out of its bag: the budget stopped it far short "
                                            "(rmse 0.9")


def test_a_stopped_classification_fold_that_ranks_nothing_is_left_out():
    rng = np.random.default_rng(1)
    y = rng.integers(0, 2, ROWS)
    def good(rows):
        p = np.clip(y[rows] * 0.6 + rng.uniform(0, 0.4, len(rows)), 0, 1)
        return np.column_stack([1 - p, p])

    flat = lambda rows: np.full((len(rows), 2), 0.5)  # noqa: E731
    folds = [_fold(0, good, False), _fold(1, flat, True)]
    assert [s.task_id for s in far_short(folds, y, METRICS["roc_auc"])] == ["fit/m/t0/f1"]
    assert [s.task_id for s in far_short(folds, y, METRICS["accuracy"])] == ["fit/m/t0/f1"]


def test_nothing_is_left_out_without_a_whole_fold_to_measure_against_or_with_an_undefined_score():
    y = np.tile([0, 1], ROWS // 2)
    flat = lambda rows: np.full((len(rows), 2), 0.5)  # noqa: E731
    right = lambda rows: np.column_stack([1 - y[rows], y[rows]]).astype(float)  # noqa: E731
    assert far_short([_fold(0, flat, True), _fold(1, flat, True)], y, METRICS["roc_auc"]) == []
    assert far_short([_fold(0, right, False), _fold(1, right, False)], y, METRICS["roc_auc"]) == []
    one_class = np.zeros(ROWS, dtype=int)  # ROC AUC undefined on every fold: nothing judged
    assert far_short([_fold(0, right, False), _fold(1, flat, True)], one_class, METRICS["roc_auc"]) == []
