"""Turn a typed table into the network's inputs: standardized numbers and category codes."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd


@dataclass
class TabularEncoder:
    """Fitted on training rows: numeric medians/means/stds and each categorical column's categories.

    Code 0 of a categorical column is 'missing or unseen', so embeddings have cardinality + 1 rows.
    """

    numeric: list[str] = field(default_factory=list)
    categorical: list[str] = field(default_factory=list)
    medians_: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.float32))
    means_: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.float32))
    stds_: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.float32))
    categories_: list[list] = field(default_factory=list)

    def fit(self, X: pd.DataFrame) -> "TabularEncoder":
        self.numeric = [c for c in X.columns if not isinstance(X[c].dtype, pd.CategoricalDtype)]
        self.categorical = [c for c in X.columns if isinstance(X[c].dtype, pd.CategoricalDtype)]
        num = X[self.numeric].to_numpy(dtype=np.float32, na_value=np.nan) if self.numeric else np.empty((len(X), 0), np.float32)
        with np.errstate(all="ignore"):
            self.medians_ = np.nan_to_num(np.nanmedian(num, axis=0)).astype(np.float32) if num.size else np.empty(0, np.float32)
            filled = np.where(np.isnan(num), self.medians_, num)
            self.means_ = filled.mean(axis=0).astype(np.float32) if num.size else np.empty(0, np.float32)
            std = filled.std(axis=0) if num.size else np.empty(0)
        self.stds_ = np.where(std > 1e-12, std, 1.0).astype(np.float32)
        self.categories_ = [list(X[c].cat.categories) for c in self.categorical]
        return self

    @property
    def cardinalities(self) -> list[int]:
        return [len(c) + 1 for c in self.categories_]

    def transform(self, X: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
        if self.numeric:
            num = X[self.numeric].to_numpy(dtype=np.float32, na_value=np.nan)
            num = np.where(np.isnan(num), self.medians_, num)
            num = (num - self.means_) / self.stds_
        else:
            num = np.empty((len(X), 0), dtype=np.float32)
        cat = np.empty((len(X), len(self.categorical)), dtype=np.int64)
        for j, (column, categories) in enumerate(zip(self.categorical, self.categories_)):
            values = X[column]
            if list(values.cat.categories) != categories:
                values = values.cat.set_categories(categories)
            cat[:, j] = values.cat.codes.to_numpy() + 1  # -1 (missing/unseen) -> 0
        return np.ascontiguousarray(num, dtype=np.float32), cat
