"""A model that records, for the leakage tests of stacking, whose labels it learnt from.

Every fit gets an id and predicts that id for every row, so a model above it can read, from the value
of each of its stacked feature columns, which model produced that feature. `LEARNT[id]` holds the
rows whose labels a fit learnt from (its training rows, and those of every model whose predictions
it learnt from, transitively) and the rows whose labels are in the features of its validation rows.
"""

from __future__ import annotations

import itertools

import numpy as np

from tests.fault_models import _Constant

LEARNT: dict[int, dict[str, frozenset]] = {}
_IDS = itertools.count(1)


def _sources(X) -> set:
    """The rows whose labels the stacked features of X carry (every row must have them)."""
    rows: set = set()
    for column in (c for c in X.columns if c.startswith("stack_")):
        values = X[column].to_numpy()
        if np.isnan(values).any():
            raise AssertionError(f"stacked column {column} lacks a value for {int(np.isnan(values).sum())} row(s)")
        for producer in np.unique(values):
            rows |= LEARNT[int(producer)]["learnt"]
    return rows


class ProvenanceModel(_Constant):
    """Predicts its own id; records its label provenance in LEARNT."""

    def _fit(self, X, y, X_val, y_val, ctx):
        super()._fit(X, y, X_val, y_val, ctx)
        self.id_ = next(_IDS)
        self.columns_ = list(X.columns)
        LEARNT[self.id_] = {"learnt": frozenset(X.index) | frozenset(_sources(X)),
                            "val_features": frozenset(_sources(X_val)),
                            "columns": tuple(c for c in X.columns if c.startswith("stack_"))}

    def _predict(self, X):
        if list(X.columns) != self.columns_:  # a predictor must feed it the columns it learnt from
            raise AssertionError(f"model {self.id_} learnt from {self.columns_}, asked to predict from {list(X.columns)}")
        return np.full(len(X), float(self.id_))
