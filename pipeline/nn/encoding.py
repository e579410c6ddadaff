"""Turn a typed table into the network's inputs: scaled numbers and category codes.

The numbers of the rows asked for are copied once, into the float32 matrix the network trains or
predicts from, and filled and scaled there in place: no float64 copy, no frame of the rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Optional

import numpy as np
import pandas as pd

CHUNK_ROWS = 65_536  # rows gathered or reduced at a time: temporaries stay this small
MEDIAN_ROWS = 200_000  # training rows, evenly spaced, a missing value's fill (the median) is taken from
QUANTILES = 1_000  # at most this many quantiles per column under scaling="quantile" (scikit-learn's default)
QUANTILE_BOUND = 1e-7  # the lowest and highest ranks: numbers map into about +-5.2 standard deviations


@dataclass
class TabularEncoder:
    """Fitted on training rows: numeric medians (of at most MEDIAN_ROWS of them), means and stds,
    and each categorical column's categories.

    scaling="quantile" first maps each number to the normal quantile of its rank among the same
    (sampled) training rows, as scikit-learn's QuantileTransformer(output_distribution="normal") does:
    a skewed column or one with outliers reaches the network evenly spread.
    Code 0 of a categorical column is 'missing or unseen', so embeddings have cardinality + 1 rows.
    """

    scaling: str = "standard"  # standard | quantile (pipeline.nn.options.NUMERIC_SCALINGS)
    numeric: list[str] = field(default_factory=list)
    categorical: list[str] = field(default_factory=list)
    medians_: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.float32))
    means_: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.float32))
    stds_: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.float32))
    categories_: list[list] = field(default_factory=list)

    def fit(self, X: pd.DataFrame, rows: Optional[np.ndarray] = None) -> "TabularEncoder":
        self.fit_transform(X, rows)
        return self

    def fit_transform(self, X: pd.DataFrame, rows: Optional[np.ndarray] = None) -> tuple[np.ndarray, np.ndarray]:
        """Fit on the rows of X at positions `rows` (all rows: None) and return them transformed."""
        self.numeric = [c for c in X.columns if not isinstance(X[c].dtype, pd.CategoricalDtype)]
        self.categorical = [c for c in X.columns if isinstance(X[c].dtype, pd.CategoricalDtype)]
        self.categories_ = [list(X[c].cat.categories) for c in self.categorical]
        num = _numbers(X, self.numeric, rows)
        sample = num[:: max(1, len(num) // MEDIAN_ROWS)]
        with np.errstate(all="ignore"):
            self.medians_ = (np.nan_to_num(np.nanmedian(sample, axis=0)).astype(np.float32) if num.size
                             else np.empty(0, np.float32))
        _fill(num, self.medians_)
        if self.scaling == "quantile":
            self.quantiles_ = _column_quantiles(sample)  # a view of num: its missing values filled now
            _to_normal(num, self.quantiles_)
        self.means_ = num.mean(axis=0, dtype=np.float64).astype(np.float32) if num.size else np.empty(0, np.float32)
        std = _std(num, self.means_)
        self.stds_ = np.where(std > 1e-12, std, 1.0).astype(np.float32)
        _standardize(num, self.means_, self.stds_)
        return num, self._codes(X, rows)

    @property
    def cardinalities(self) -> list[int]:
        return [len(c) + 1 for c in self.categories_]

    def transform(self, X: pd.DataFrame, rows: Optional[np.ndarray] = None) -> tuple[np.ndarray, np.ndarray]:
        """(numbers, codes) of the rows of X at positions `rows` (all rows: None), C-contiguous."""
        num = _numbers(X, self.numeric, rows)
        _fill(num, self.medians_)
        if self.scaling == "quantile":
            _to_normal(num, self.quantiles_)
        _standardize(num, self.means_, self.stds_)
        return num, self._codes(X, rows)

    def _codes(self, X: pd.DataFrame, rows: Optional[np.ndarray]) -> np.ndarray:
        n = len(X) if rows is None else len(rows)
        cat = np.empty((n, len(self.categorical)), dtype=np.int64)
        for j, (column, categories) in enumerate(zip(self.categorical, self.categories_)):
            values = X[column]
            if list(values.cat.categories) != categories:
                values = values.cat.set_categories(categories)
            codes = values.cat.codes.to_numpy()
            cat[:, j] = (codes if rows is None else codes[rows]) + 1  # -1 (missing/unseen) -> 0
        return cat


def _numbers(X: pd.DataFrame, columns: list[str], rows: Optional[np.ndarray]) -> np.ndarray:
    """A new C-contiguous float32 matrix of those columns and rows: the one copy the network's inputs
    need, gathered a chunk of rows at a time from the table's block (a view when it is float32)."""
    n = len(X) if rows is None else len(rows)
    if not columns:
        return np.empty((n, 0), dtype=np.float32)
    values = X[columns].to_numpy(dtype=np.float32, na_value=np.nan)
    if rows is None:
        return np.array(values, dtype=np.float32, order="C")
    out = np.empty((n, len(columns)), dtype=np.float32)
    for start in range(0, n, CHUNK_ROWS):
        out[start:start + CHUNK_ROWS] = values[rows[start:start + CHUNK_ROWS]]
    return out


def _fill(num: np.ndarray, medians: np.ndarray) -> None:
    """Missing numbers to their column's training median, in place."""
    for start in range(0, len(num), CHUNK_ROWS):
        part = num[start:start + CHUNK_ROWS]
        missing = np.isnan(part)
        if missing.any():
            np.copyto(part, np.broadcast_to(medians, part.shape), where=missing)


def _column_quantiles(sample: np.ndarray) -> np.ndarray:
    """(levels, columns): each column's quantiles at evenly spaced levels, at most QUANTILES of them."""
    if not sample.size:
        return np.empty((0, sample.shape[1]), dtype=np.float64)
    levels = np.linspace(0.0, 1.0, max(2, min(QUANTILES, len(sample))))
    return np.quantile(sample, levels, axis=0)


def _to_normal(num: np.ndarray, quantiles: np.ndarray) -> None:
    """Each number to the normal quantile of its rank in `quantiles`, in place. A value repeated across
    levels (a discrete column) takes the middle of its levels' range, as interpolating upwards and
    downwards and averaging gives; values beyond the training range take the end levels."""
    if not len(quantiles):
        return
    levels = np.clip(np.linspace(0.0, 1.0, len(quantiles)), QUANTILE_BOUND, 1 - QUANTILE_BOUND)
    normal = np.array([NormalDist().inv_cdf(level) for level in levels])
    for j in range(num.shape[1]):
        up = quantiles[:, j]
        ties = bool((np.diff(up) <= 0).any())  # without, one interpolation gives the same: half the time
        for start in range(0, len(num), CHUNK_ROWS):
            values = num[start:start + CHUNK_ROWS, j]
            if ties:
                values[:] = 0.5 * (np.interp(values, up, normal) - np.interp(-values, -up[::-1], -normal[::-1]))
            else:
                values[:] = np.interp(values, up, normal)


def _std(num: np.ndarray, means: np.ndarray) -> np.ndarray:
    """Each column's standard deviation around `means`, summed in float64 a chunk of rows at a time."""
    squares = np.zeros(num.shape[1], dtype=np.float64)
    for start in range(0, len(num), CHUNK_ROWS):
        deviation = num[start:start + CHUNK_ROWS] - means
        squares += np.einsum("ij,ij->j", deviation, deviation, dtype=np.float64)
    return np.sqrt(squares / max(len(num), 1))


def _standardize(num: np.ndarray, means: np.ndarray, stds: np.ndarray) -> None:
    num -= means
    num /= stds
