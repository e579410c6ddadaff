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
