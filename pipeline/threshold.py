"""The decision threshold of a binary classifier, chosen on its out-of-fold predictions for a label metric.

At 0.5 a model of a rare class predicts the common one everywhere (balanced accuracy 0.50); the
threshold that maximises the label metric on the rows each model did not learn from is used instead by
every predictor (`pipeline.predict`, the pyfunc) and stated in the leaderboard. The label metric is
`eval_metric` where it is one (accuracy, balanced accuracy, F1), else balanced accuracy.
"""

from __future__ import annotations

import logging

import numpy as np

log = logging.getLogger(__name__)

LABEL_METRICS = ("accuracy", "balanced_accuracy", "f1")
CANDIDATES = 256  # thresholds tried: quantiles of the positive class's predicted probability


def label_metric(eval_metric: str) -> str:
    return eval_metric if eval_metric in LABEL_METRICS else "balanced_accuracy"


def one_hot(positive: np.ndarray, threshold: float) -> np.ndarray:
    """Two-column 'probabilities' whose argmax is the label at the threshold (for the metrics' functions)."""
    hit = (positive >= threshold).astype(np.float64)
    return np.column_stack([1 - hit, hit])


def choose(y: np.ndarray, proba: np.ndarray, metric: str) -> float:
    """The threshold on proba[:, 1] with the best out-of-fold `metric` (0.5 among ties, then the nearest)."""
    from pipeline import metrics

    score = metrics.METRICS[metric]
    positive = np.asarray(proba, dtype=np.float64)[:, 1]
    if not np.isfinite(positive).all():  # a model that predicted NaN: its scores say so, not its threshold
        return 0.5
    candidates = np.unique(np.concatenate([[0.5], np.quantile(positive, np.linspace(0, 1, CANDIDATES))]))
    values = np.array([score(y, one_hot(positive, t)) for t in candidates])
    best = np.flatnonzero(values >= values.max() - 1e-12)
    return float(candidates[best[np.argmin(np.abs(candidates[best] - 0.5))]])


def warn_one_class(name: str, positive: np.ndarray, threshold: float, classes) -> None:
    """A warning when a model predicts one class for every test row."""
    hits = int((positive >= threshold).sum())
    if hits in (0, len(positive)) and len(positive):
        only = classes[1] if hits else classes[0]
        log.warning("%s predicts %r for all %d test rows (threshold %.3f): it has not learnt to tell the "
                    "classes apart; try class weights (data.class_weight=balanced)",
                    name, only, len(positive), threshold)
