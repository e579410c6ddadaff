"""Metrics by problem type. Classification predictions are class-probability matrices (n, classes)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from pipeline.errors import ConfigError, closest

DEFAULT = {"binary": "roc_auc", "multiclass": "accuracy", "regression": "rmse"}


@dataclass(frozen=True)
class Metric:
    name: str
    greater_is_better: bool
    problem_types: tuple[str, ...]
    fn: Callable[[np.ndarray, np.ndarray], float]

    def __call__(self, y_true: np.ndarray, pred: np.ndarray) -> float:
        return float(self.fn(y_true, pred))

    def loss(self, y_true: np.ndarray, pred: np.ndarray) -> float:
        """Lower is better, whatever the metric's direction (for selection and early stopping)."""
        value = self(y_true, pred)
        return -value if self.greater_is_better else value

    def loss_of(self, score: float) -> float:
        """A score as a loss (lower is better); NaN is the worst."""
        if score != score:
            return float("inf")
        return -score if self.greater_is_better else score

    def error(self, score: float) -> float:
        """A score as an error (`error_of`)."""
        return error_of(score, self.greater_is_better)

    def better(self, a: float, b: float) -> bool:
        return a > b if self.greater_is_better else a < b


def error_of(score: float, greater_is_better: bool) -> float:
    """A score as an error, lower better, zero at best: 1 - score for a maximised metric (AUC, accuracy, R2,
    all at most 1), the score itself for a minimised one (RMSE, log loss): relative gaps read on it."""
    return 1.0 - score if greater_is_better else score


def _accuracy(y, p):
    return np.mean(np.argmax(p, axis=1) == y)


def _balanced_accuracy(y, p):
    pred = np.argmax(p, axis=1)
    recalls = [np.mean(pred[y == c] == c) for c in np.unique(y)]
    return float(np.mean(recalls))


def _binary_auc(positive: np.ndarray, score: np.ndarray) -> float:
    """ROC AUC as the Mann-Whitney statistic, ties taking their average rank; NaN (undefined) on rows of one
    class, as a fold's or a split's rows of a rare class may be: NaN is the worst score wherever it is read."""
    order = np.argsort(score, kind="mergesort")
    sorted_score = score[order]
    first = np.flatnonzero(np.r_[True, sorted_score[1:] != sorted_score[:-1]])
    counts = np.diff(np.r_[first, len(sorted_score)])
    ranks = np.repeat(first + (counts + 1) / 2.0, counts)
    pos = positive[order]
    n_pos = int(pos.sum())
    n_neg = len(pos) - n_pos
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def _roc_auc(y, p):
    """Binary ROC AUC; one-vs-rest macro average for several classes (as scikit-learn's 'ovr')."""
    if p.shape[1] == 2:
        return _binary_auc(y == 1, p[:, 1])
    return float(np.mean([_binary_auc(y == c, p[:, c]) for c in range(p.shape[1])]))


def _log_loss(y, p):
    eps = 1e-15
    p = np.clip(p, eps, 1 - eps)
    p = p / p.sum(axis=1, keepdims=True)
    return -np.mean(np.log(p[np.arange(len(y)), y.astype(int)]))


def _f1(y, p):
    """F1 of the positive class (binary), or the macro average over classes."""
    pred = np.argmax(p, axis=1)
    classes = [1] if p.shape[1] == 2 else range(p.shape[1])
    scores = []
    for c in classes:
        tp = np.sum((pred == c) & (y == c))
        denominator = np.sum(pred == c) + np.sum(y == c)
        scores.append(2.0 * tp / denominator if denominator else 0.0)
    return float(np.mean(scores))


def _rmse(y, p):
    return np.sqrt(np.mean((np.asarray(p, dtype=np.float64) - y) ** 2))


def _mae(y, p):
    return np.mean(np.abs(np.asarray(p, dtype=np.float64) - y))


def _r2(y, p):
    ss_res = np.sum((y - np.asarray(p, dtype=np.float64)) ** 2)
    ss_tot = np.sum((y - y.mean()) ** 2)
    return 1.0 - ss_res / ss_tot if ss_tot > 0 else 0.0


CLASSIFICATION = ("binary", "multiclass")
METRICS = {
    m.name: m
    for m in (
        Metric("accuracy", True, CLASSIFICATION, _accuracy),
        Metric("balanced_accuracy", True, CLASSIFICATION, _balanced_accuracy),
        Metric("roc_auc", True, CLASSIFICATION, _roc_auc),
        Metric("log_loss", False, CLASSIFICATION, _log_loss),
        Metric("f1", True, CLASSIFICATION, _f1),
        Metric("rmse", False, ("regression",), _rmse),
        Metric("mae", False, ("regression",), _mae),
        Metric("r2", True, ("regression",), _r2),
    )
}


# Metrics of each row's predicted class alone: a step function of a model's predictions (`choice_metric`),
# and what a binary classifier's threshold is chosen for (`pipeline.threshold`)
LABEL_METRICS = ("accuracy", "balanced_accuracy", "f1")


def choice_metric(metric: Metric) -> Metric:
    """What every choice among fitted models is made on for `metric` (the search's trials, each model's best
    trial, successive halving's folds, the ensemble's weights): the metric itself, or, where it reads only
    each row's predicted class (`LABEL_METRICS`), the log loss of the probabilities. A trial or a weighting
    moves the class of a few rows near a tie and leaves the others' alone, so on a few hundred held-out rows
    many score the same and a choice among them follows those rows' noise; the log loss, a proper score,
    ranks each by how sure it is of every row."""
    return METRICS["log_loss"] if metric.name in LABEL_METRICS else metric


def for_problem(problem_type: str) -> list[Metric]:
    return [m for m in METRICS.values() if problem_type in m.problem_types]


def resolve(name: str, problem_type: str) -> Metric:
    """The eval metric: `auto` picks the problem type's default; others must suit the problem."""
    if name == "auto":
        return METRICS[DEFAULT[problem_type]]
    valid = [m.name for m in for_problem(problem_type)]
    if name not in METRICS or name not in valid:
        raise ConfigError(
            f"eval_metric={name!r} is not a {problem_type} metric{closest(name, valid)}; "
            f"choose one of: auto, {', '.join(valid)}"
        )
    return METRICS[name]


def check_name(name: str) -> None:
    """`name` is auto or a metric of some problem type (which one suits the data is checked once it is known)."""
    if name != "auto" and name not in METRICS:
        raise ConfigError(f"eval_metric={name!r} is not a metric{closest(name, list(METRICS))}; "
                          f"choose one of: auto, {', '.join(METRICS)}")


def score_all(problem_type: str, y: np.ndarray, pred: np.ndarray) -> dict[str, float]:
    """Every metric of the problem type; one undefined on the rows (ROC AUC on one class) is NaN."""
    return {metric.name: metric(y, pred) for metric in for_problem(problem_type)}
