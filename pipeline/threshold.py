"""The decision threshold of a binary classifier, chosen on its out-of-fold predictions for a label metric.

At 0.5 a model of a rare class predicts the common one everywhere (balanced accuracy 0.50); the
threshold that maximises the label metric on the rows each model did not learn from is used instead by
every predictor (`pipeline.predict`, the pyfunc) and stated in the leaderboard. The label metric is
`eval_metric` where it is one (accuracy, balanced accuracy, F1), else balanced accuracy.
"""

from __future__ import annotations

import logging

import numpy as np

from pipeline.metrics import LABEL_METRICS

log = logging.getLogger(__name__)

CANDIDATES = 256  # thresholds tried: quantiles of the positive class's predicted probability


def label_metric(eval_metric: str) -> str:
    return eval_metric if eval_metric in LABEL_METRICS else "balanced_accuracy"


def one_hot(positive: np.ndarray, threshold: float) -> np.ndarray:
    """Two-column 'probabilities' whose argmax is the label at the threshold (for the metrics' functions)."""
    hit = (positive >= threshold).astype(np.float64)
    return np.column_stack([1 - hit, hit])


def choose(y: np.ndarray, proba: np.ndarray, metric: str) -> float:
    """The threshold on proba[:, 1] with the best out-of-fold `metric` (0.5 among ties, then the nearest)."""
    positive = np.asarray(proba, dtype=np.float64)[:, 1]
    if not np.isfinite(positive).all():  # a model that predicted NaN: its scores say so, not its threshold
        return 0.5
    candidates = np.unique(np.concatenate([[0.5], np.quantile(positive, np.linspace(0, 1, CANDIDATES))]))
    values = scores_at(np.asarray(y) == 1, positive, candidates, metric)
    best = np.flatnonzero(values >= values.max() - 1e-12)
    return float(candidates[best[np.argmin(np.abs(candidates[best] - 0.5))]])


def scores_at(is_positive: np.ndarray, positive: np.ndarray, thresholds: np.ndarray, metric: str) -> np.ndarray:
    """`metric` (one of LABEL_METRICS, as pipeline.metrics computes it) of the labels `positive >= t` for
    each threshold t: from the sorted scores of each class, so n log n whatever the thresholds' count
    (a metric call per threshold took 12 s on 2 million rows)."""
    pos, neg = np.sort(positive[is_positive]), np.sort(positive[~is_positive])
    n_pos, n_neg = len(pos), len(neg)
    tp = n_pos - np.searchsorted(pos, thresholds, side="left")  # positives at or above t
    fp = n_neg - np.searchsorted(neg, thresholds, side="left")
    tn = n_neg - fp
    if metric == "accuracy":
        return (tp + tn) / max(1, n_pos + n_neg)
    if metric == "balanced_accuracy":  # the recalls of the classes present
        recalls = [r for r, n in ((tp / max(1, n_pos), n_pos), (tn / max(1, n_neg), n_neg)) if n]
        return np.mean(recalls, axis=0) if recalls else np.full(len(thresholds), np.nan)
    if metric == "f1":
        denominator = tp + fp + n_pos
        return np.where(denominator > 0, 2.0 * tp / np.maximum(denominator, 1), 0.0)
    raise ValueError(f"no threshold for {metric!r}; label metrics: {', '.join(LABEL_METRICS)}")


def warn_one_class(name: str, positive: np.ndarray, threshold: float, classes) -> None:
    """A warning when a model predicts one class for every test row."""
    hits = int((positive >= threshold).sum())
    if hits in (0, len(positive)) and len(positive):
        only = classes[1] if hits else classes[0]
        log.warning("%s predicts %r for all %d test rows (threshold %.3f): it has not learnt to tell the "
                    "classes apart; try class weights (data.class_weight=balanced)",
                    name, only, len(positive), threshold)
