"""A fold the budget stopped far short, left out of its bag.

A model's first trial may end with folds the budget stopped (at the deadline, or at their share of the
first trials' time: graph.first_trials). Such a fold usually learnt most of what it would have, but on a
box that slowed after the shares were set one can stop a booster after a few rounds: it predicts about
the label's mean. Kept, it scores only its own held-out rows, while the bag's test predictions average it
with the others: on Snmesp at time_limit_s=30, with other processes starting mid-run, LightGBM's and
XGBoost's bags held such folds, their out-of-fold RMSE looked like the others' and the ensemble that used
them scored 0.103 on the test rows against 0.064 for its held-out rows.

Worse: where a default model's bag kept fewer folds, the ensemble chooses its weights on the rows every
member predicted (graph.nodes.ensemble), which no stopped fold held out there, so nothing saw it.

A stopped fold is measured against the weakest fold of its bag that ended on its own, two ways: how far it
got from a constant prediction (the label's mean, or the classes' shares) on its own rows, and its error
(1 - score for a maximised metric such as ROC AUC, else the loss, as the trials' time shares read it). It is
left out of the bag (as a fold that never ended is), and the run says so, where it made under `KEEP` of the
weakest whole fold's gain over the constant, or its error is over `ERROR_TIMES` that fold's."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

log = logging.getLogger(__name__)

KEEP = 0.75  # a stopped fold stays where it made at least this share of its weakest whole fold's gain
ERROR_TIMES = 1.5  # ... and its error is at most this many times that fold's (fold to fold, a model's errors
# differ by the rows' difficulty: a bound as loose leaves out only a fold stopped well short of its end)


@dataclass(frozen=True)
class FarShort:
    """A stopped fold left out: its gain over a constant prediction on its rows, and the reference's."""

    task_id: str
    score: float  # on its held-out rows
    gain: float
    reference: float

    def line(self, metric: str) -> str:
        return (f"{self.task_id} left out of its bag: the budget stopped it far short ({metric} "
                f"{self.score:.4g} on its held-out rows, {self.gain:.3g} better than a constant prediction, "
                f"where the weakest of the bag's folds that ended was {self.reference:.3g} better)")


def far_short(folds: list, y: np.ndarray, metric) -> list[FarShort]:
    """The folds of `folds` (fit results with held-out rows and predictions) the budget stopped and that
    gained over a constant prediction under KEEP of what the weakest whole fold gained; none where no fold
    ended on its own or a gain is undefined (ROC AUC on rows of one class)."""
    whole = [f for f in folds if not getattr(f, "stopped_by_budget", False)]
    stopped = [f for f in folds if getattr(f, "stopped_by_budget", False)]
    if not whole or not stopped or any(f.held_out is None or f.val_pred is None for f in folds):
        return []
    constant = _constant(y[np.concatenate([f.held_out for f in folds])], folds[0].val_pred)
    scores = {id(f): metric(y[f.held_out], f.val_pred) for f in folds}
    gains = {id(f): _gain(f, scores[id(f)], y, constant, metric) for f in folds}
    if any(v != v for v in [*gains.values(), *scores.values()]):
        return []
    reference = min(gains[id(f)] for f in whole)
    if reference <= 0:  # the whole folds learnt nothing either: nothing to measure against
        return []
    worst = max(metric.error(scores[id(f)]) for f in whole)
    return [FarShort(getattr(f, "task_id", "?"), scores[id(f)], gains[id(f)], reference) for f in stopped
            if gains[id(f)] < KEEP * reference or metric.error(scores[id(f)]) > ERROR_TIMES * worst]


def _constant(y: np.ndarray, like: np.ndarray) -> np.ndarray:
    """One row of the constant prediction: the labels' mean, or each class's share."""
    if np.ndim(like) == 1:
        return np.array([float(np.mean(y))])
    shares = np.bincount(y.astype(np.int64), minlength=like.shape[1]).astype(np.float64)
    return shares / shares.sum()


def _gain(fold, score: float, y: np.ndarray, constant: np.ndarray, metric) -> float:
    """How much lower the fold's loss (its `score` on its held-out rows) is than the constant prediction's."""
    rows = y[fold.held_out]
    base = np.repeat(constant[None, :], len(rows), axis=0) if np.ndim(fold.val_pred) == 2 else \
        np.full(len(rows), constant[0])
    return metric.loss(rows, base) - metric.loss_of(score)
