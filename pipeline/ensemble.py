"""Greedy weighted ensemble selection (Caruana et al., 2004), as AutoGluon's WeightedEnsemble does,
and the predictors a run hands to users: a bagged model, a stacked level's bag (each fold model fed
by its fold's chain of lower levels) and the weighted ensemble of them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np
import pandas as pd

from pipeline.errors import ModelOutputError
from pipeline.metrics import Metric
from pipeline.schema import FeatureSchema
from pipeline.graph.stacking import as_columns, column_names, join


def ensemble_selection(preds: list[np.ndarray], y: np.ndarray, metric: Metric, size: int = 25,
                       names: Sequence[str] = ()) -> np.ndarray:
    """Weights over `preds`: add, with replacement, the member that most improves the average;
    keep the best prefix of the trajectory, so the result never scores below the best member.

    A member whose predictions score NaN (it predicts NaN) is never picked; when every member
    does, there is no ensemble to build: ModelOutputError names them.
    """
    if not preds:
        raise ValueError("ensemble_selection needs at least one prediction")
    names = list(names) or [f"member {i}" for i in range(len(preds))]
    counts = np.zeros(len(preds), dtype=np.int64)
    current = np.zeros_like(preds[0], dtype=np.float64)
    best_loss, best_counts = np.inf, None
    for step in range(size):
        losses = np.array([metric.loss(y, (current * step + p) / (step + 1)) for p in preds], dtype=np.float64)
        losses[np.isnan(losses)] = np.inf
        if step == 0 and not np.isfinite(losses).any():
            raise ModelOutputError(
                f"no ensemble can be built: the validation {metric.name} of every model is NaN or infinite "
                f"({', '.join(names)}); their predictions hold NaN or infinite values"
            )
        j = int(np.argmin(losses))
        counts[j] += 1
        current = (current * step + preds[j]) / (step + 1)
        if losses[j] < best_loss - 1e-12:
            best_loss, best_counts = losses[j], counts.copy()
    return best_counts / best_counts.sum()


def gain_noise(y: np.ndarray, ours: np.ndarray, other: np.ndarray, metric: Metric, rounds: int = 100,
               max_rows: int = 10_000, seed: int = 0) -> float:
    """One standard error of (other's loss - ours) over the rows, by a paired bootstrap: the gain the rows'
    sampling alone would show. Past `max_rows` rows it resamples a seeded draw of that many and scales the
    error by sqrt(draw / rows), as an error of a mean shrinks."""
    rng = np.random.default_rng(seed)
    n = len(y)
    pick = np.sort(rng.choice(n, max_rows, replace=False)) if n > max_rows else np.arange(n)
    m = len(pick)
    gains = []
    for _ in range(rounds):
        rows = pick[rng.integers(0, m, m)]
        gains.append(metric.loss(y[rows], other[rows]) - metric.loss(y[rows], ours[rows]))
    gains = np.asarray(gains, dtype=np.float64)
    gains = gains[np.isfinite(gains)]
    return float(gains.std() * np.sqrt(m / n)) if len(gains) > 1 else 0.0


def clear_gain(y: np.ndarray, ours: np.ndarray, other: np.ndarray,
               metric: Metric) -> tuple[bool, float, float]:
    """(whether `ours` beats `other` on the rows by more than one standard error of the gain, the gain in
    loss, that standard error): Breiman's one-standard-error rule. A choice among many candidates made on
    these rows fits some of their noise, and a gain within it does not carry to new rows."""
    gain = metric.loss(y, other) - metric.loss(y, ours)
    noise = gain_noise(y, ours, other, metric)
    return bool(gain > noise), float(gain), noise


def blend(preds: list[np.ndarray], weights: np.ndarray) -> np.ndarray:
    return sum(w * p for w, p in zip(weights, preds) if w > 0)


class OnRawInput:
    """A predictor users call on raw rows: typed by its schema, then its `predict_typed`."""

    threshold = None  # binary: the positive class from this probability on (None: the likelier)

    def predict_proba(self, frame: pd.DataFrame) -> np.ndarray:
        return self.predict_typed(self.schema.apply(frame))

    def predict(self, frame: pd.DataFrame) -> np.ndarray:
        return labels(self, self.predict_proba(frame))


@dataclass
class BaggedPredictor(OnRawInput):
    """One model's fold models; predicts their average on raw input."""

    name: str
    models: list
    problem_type: str
    classes: Optional[list]
    schema: FeatureSchema

    def predict_typed(self, X: pd.DataFrame, shared: Optional[dict] = None) -> np.ndarray:
        """predict_proba on rows already typed by the schema (`shared`: see StackedPredictor)."""
        return np.mean([m.predict_proba(X) for m in self.models], axis=0)

    def place(self, device: str, num_cpus: int) -> None:
        """Predict on this device ('cpu', 'cuda:0') with this many threads."""
        for m in self.models:
            m.place(device, num_cpus)

    @property
    def libraries(self) -> set[tuple[str, ...]]:
        """The distributions predicting needs (each: its name, then other builds of it; ModelProfile)."""
        maker = self.schema.maker  # dates and free text: skrub's encoders
        encoded = maker is not None and (maker.dates or maker.texts)
        made = {("skrub",), ("scikit-learn",)} if encoded else set()
        return {d for m in self.models for d in type(m).profile.distributions} | made


@dataclass
class StackedPredictor(BaggedPredictor):
    """A stacked level's bag (pipeline.graph.stacking): fold model k predicts on the original features plus
    the columns fold k's chain of lower levels predicts. `layers[k]` is that chain: per level below, from
    level 1 up, the (model kind, fold model) pairs whose predictions feed the next level."""

    layers: list = field(default_factory=list)

    def predict_typed(self, X: pd.DataFrame, shared: Optional[dict] = None) -> np.ndarray:
        """`shared` keeps the lower levels' columns for the other stacked bags of one ensemble's
        prediction on the same rows: their fold k chains the same fold models."""
        shared = {} if shared is None else shared
        return np.mean([top.predict_proba(self._features(X, chain, shared))
                        for top, chain in zip(self.models, self.layers)], axis=0)

    def _features(self, X: pd.DataFrame, chain: list, shared: dict) -> pd.DataFrame:
        features, num_classes, key = X, len(self.classes or ()), ()
        for level, layer in enumerate(chain, start=1):
            key += tuple(id(m) for _, m in layer)  # the fold models these columns come from, up to this level
            if key not in shared:
                names = [n for kind, _ in layer for n in column_names(level, kind, self.problem_type, num_classes)]
                values = np.concatenate([as_columns(m.predict_proba(features), self.problem_type) for _, m in layer],
                                        axis=1)
                shared[key] = join(X, names, values)
            features = shared[key]
        return features

    def place(self, device: str, num_cpus: int) -> None:
        for m in self._lower():
            m.place(device, num_cpus)
        super().place(device, num_cpus)

    @property
    def libraries(self) -> set[tuple[str, ...]]:
        return super().libraries | {d for m in self._lower() for d in type(m).profile.distributions}

    def _lower(self) -> list:
        return [m for chain in self.layers for layer in chain for _, m in layer]


@dataclass
class EnsemblePredictor(OnRawInput):
    """The weighted blend of bagged predictors."""

    name: str
    members: list[BaggedPredictor]
    weights: list[float]
    problem_type: str
    classes: Optional[list]

    def predict_typed(self, X: pd.DataFrame, shared: Optional[dict] = None) -> np.ndarray:
        """The members share the training schema: the input is typed once; stacked members predict
        each lower level's columns once between them."""
        used = [(m, w) for m, w in zip(self.members, self.weights) if w > 0]
        shared = {} if shared is None else shared
        return blend([m.predict_typed(X, shared) for m, _ in used], np.asarray([w for _, w in used]))

    @property
    def schema(self) -> FeatureSchema:
        return self.members[0].schema

    def place(self, device: str, num_cpus: int) -> None:
        for m in self.members:
            m.place(device, num_cpus)

    @property
    def libraries(self) -> set[tuple[str, ...]]:
        return set().union(*(m.libraries for m, w in zip(self.members, self.weights) if w > 0))


def labels(predictor, pred: np.ndarray) -> np.ndarray:
    """A predictor's labels (values, for regression) from its predictions: a binary classifier's at its
    threshold (chosen on out-of-fold predictions; pipeline.threshold), else the likeliest class."""
    if predictor.problem_type == "regression":
        return pred
    threshold = getattr(predictor, "threshold", None)  # predictors pickled before thresholds have none
    if threshold is not None and pred.shape[1] == 2:
        return np.asarray(predictor.classes, dtype=object)[(pred[:, 1] >= threshold).astype(np.int64)]
    return np.asarray(predictor.classes, dtype=object)[np.argmax(pred, axis=1)]
