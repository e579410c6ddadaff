"""A binary classifier's decision threshold, chosen on out-of-fold predictions for a label metric."""

from __future__ import annotations

import logging

import numpy as np

from pipeline import metrics, threshold
from pipeline.ensemble import EnsemblePredictor, labels


def rare(n=4000, seed=0):
    """6% positives whose predicted probability never reaches 0.5, though it ranks them well."""
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.06).astype(int)
    p1 = np.clip(0.04 + 0.25 * y + rng.normal(0, 0.08, n), 0, 0.45)
    return y, np.column_stack([1 - p1, p1])


def test_a_rare_class_gets_a_threshold_below_one_half_that_beats_it():
    y, proba = rare()
    t = threshold.choose(y, proba, "balanced_accuracy")
    assert t < 0.5
    at_half = metrics.METRICS["balanced_accuracy"](y, proba)
    assert at_half == 0.5  # the argmax: every row the common class
    assert metrics.METRICS["balanced_accuracy"](y, threshold.one_hot(proba[:, 1], t)) > 0.9


def test_balanced_classes_keep_one_half():
    rng = np.random.default_rng(1)
    y = rng.integers(0, 2, 2000)
    p1 = np.where(y == 1, 0.9, 0.1)
    assert threshold.choose(y, np.column_stack([1 - p1, p1]), "accuracy") == 0.5


def test_labels_follow_the_threshold_and_the_label_metric_is_stated():
    predictor = EnsemblePredictor("ensemble", [], [], "binary", ["No", "Yes"])
    proba = np.array([[0.9, 0.1], [0.7, 0.3]])
    assert labels(predictor, proba).tolist() == ["No", "No"]
    predictor.threshold = 0.2
    assert labels(predictor, proba).tolist() == ["No", "Yes"]
    assert threshold.label_metric("roc_auc") == "balanced_accuracy" and threshold.label_metric("f1") == "f1"


def test_a_model_that_predicts_one_class_is_named(caplog):
    with caplog.at_level(logging.WARNING):
        threshold.warn_one_class("xgboost", np.full(50, 0.1), 0.5, ["No", "Yes"])
    assert "xgboost predicts 'No' for all 50 test rows" in caplog.text


def test_every_thresholds_score_equals_the_metric_at_that_threshold():
    """Scores from the sorted classes equal pipeline.metrics' own at each threshold: ties, one class, rare class."""
    rng = np.random.default_rng(3)
    cases = [rare(500, 2), (rng.integers(0, 2, 300), None), (np.ones(40, int), None), (np.zeros(40, int), None)]
    for y, proba in cases:
        if proba is None:
            p1 = np.round(rng.random(len(y)), 1)  # many tied scores
            proba = np.column_stack([1 - p1, p1])
        grid = np.unique(np.r_[0.0, 0.5, 1.0, proba[:, 1], rng.random(20)])
        for name in threshold.LABEL_METRICS:
            fast = threshold.scores_at(y == 1, proba[:, 1], grid, name)
            slow = [metrics.METRICS[name](y, threshold.one_hot(proba[:, 1], t)) for t in grid]
            np.testing.assert_allclose(fast, slow, atol=1e-12, err_msg=name)


def test_choosing_a_threshold_does_not_grow_with_the_candidates_times_the_rows(monkeypatch):
    """A metric call per candidate threshold cost 12 s on 2 million out-of-fold rows: none is made now."""
    y, proba = rare(200_000, 4)
    calls = []
    monkeypatch.setattr(metrics, "METRICS", {k: (lambda *a, _f=m: calls.append(1) or _f(*a))
                                             for k, m in metrics.METRICS.items()})
    assert threshold.choose(y, proba, "balanced_accuracy") < 0.5
    assert calls == []
