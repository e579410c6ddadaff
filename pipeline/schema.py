"""The training schema a predictor carries: which columns it reads and how raw input is typed.

New data goes through the same typing as the training rows (numbers to float32, categories fixed
from the training rows), and every mismatch a user can cause is a DataError naming the column.
"""

from __future__ import annotations

import difflib
import logging
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import pandas as pd

from pipeline.errors import DataError

log = logging.getLogger(__name__)


def category_text(values: pd.Series) -> pd.Series:
    """A column's values as the text its categories are named by, the same at training and prediction:
    booleans as 'True'/'False', surrounding whitespace stripped, whole numbers without a decimal part
    ('1.0' and 1.0 as '1'). Each distinct value is normalised once."""
    text = values.astype(str) if pd.api.types.is_bool_dtype(values) else values.astype("string")
    codes, uniques = pd.factorize(text)
    if len(uniques) == 0:
        return text
    names = pd.Series(uniques, dtype="string").str.strip().str.replace(WHOLE, r"\1", regex=True)
    if names.equals(pd.Series(uniques, dtype="string")):
        return text
    out = names.to_numpy(dtype=object)[codes]
    out[codes < 0] = pd.NA
    return pd.Series(out, index=values.index, dtype="string", name=values.name)


WHOLE = r"^(-?\d+)\.0+$"  # a whole number written with a decimal part


def encode(text: pd.Series, categories: list[str], factorized: Optional[tuple] = None) -> pd.Categorical:
    """`text` as a Categorical of `categories`; a value outside them becomes missing (code -1).

    Each distinct value is looked up once (factorize, then the few uniques), which is several
    times faster than pandas' value-by-value path and keeps the result the same. `factorized`:
    `pd.factorize(text)`, when the caller has it already.
    """
    codes, uniques = factorized if factorized is not None else pd.factorize(text)
    where = pd.Index(categories, dtype=object).get_indexer(np.asarray(uniques, dtype=object))
    mapped = np.full(len(codes), -1, dtype=np.int64)
    present = codes >= 0
    mapped[present] = where[codes[present]]
    return pd.Categorical.from_codes(mapped, categories=categories)


@dataclass
class FeatureSchema:
    """The columns a predictor expects, their categories, and the training rule for unseen ones."""

    columns: list[str]
    categories: dict[str, list] = field(default_factory=dict)
    raw_dtypes: dict[str, str] = field(default_factory=dict)  # numeric columns as read, for model signatures
    label: Optional[str] = None
    unseen_categories: str = "missing"  # missing | error, as data.unseen_categories at training
    features: Optional[object] = None  # pipeline.features.FeatureMaker: raw columns -> `columns` (None: same)

    @classmethod
    def of(cls, X: pd.DataFrame, raw_dtypes: Optional[dict] = None, label: Optional[str] = None,
           unseen_categories: str = "missing", features=None) -> "FeatureSchema":
        cats = {c: list(X[c].cat.categories) for c in X.columns if isinstance(X[c].dtype, pd.CategoricalDtype)}
        return cls(list(X.columns), cats, dict(raw_dtypes or {}), label, unseen_categories, features)

    @property
    def numeric(self) -> list[str]:
        return [c for c in self.columns if c not in self.categories]

    @property
    def maker(self):
        return getattr(self, "features", None)  # predictors pickled before features existed have none

    @property
    def input_columns(self) -> list[str]:
        """The raw columns an input must hold (the features' sources)."""
        return list(self.maker.inputs) if self.maker is not None else self.columns

    @property
    def input_text(self) -> set[str]:
        """Raw columns read as text: the categories, dates, free text and numbers written as text."""
        return set(self.categories) | (self.maker.raw_text if self.maker is not None else set())

    @property
    def input_numeric(self) -> set[str]:
        return set(self.input_columns) & set(self.numeric) - self.input_text

    def check_columns(self, columns, source: str = "the input") -> None:
        """A DataError naming the first training column the input lacks (and the input's closest name)."""
        present = [str(c) for c in columns]
        missing = [c for c in self.input_columns if c not in present]
        if not missing:
            return
        extra = [c for c in present if c not in self.input_columns and c != self.label]
        near = difflib.get_close_matches(missing[0], extra, n=1, cutoff=0.6)
        hint = f" (the input has {near[0]!r}: misspelt?)" if near else ""
        more = f" (and {len(missing) - 1} more: {', '.join(missing[1:4])})" if len(missing) > 1 else ""
        raise DataError(
            f"{source} lacks the column {missing[0]!r}{hint}{more}; the model was trained on: "
            f"{', '.join(self.input_columns)}"
        )

    def apply(self, frame: pd.DataFrame, source: str = "the input",
              tally: Optional["Tally"] = None) -> pd.DataFrame:
        """The input typed as the training rows were. Unseen categories follow the training rule: an error,
        or missing values; infinite numbers are missing values. Both are counted into `tally` when given
        (a file read in chunks says them once, added up), else logged."""
        self.check_columns(frame.columns, source)
        if self.maker is not None:
            frame = self.maker.transform(frame)
        out = {}
        for c in self.columns:
            if c in self.categories:
                out[c] = self._categories(c, frame[c], source, tally)
            else:
                out[c] = _numbers(c, frame[c], source, tally)
        return pd.DataFrame(out, columns=self.columns, index=frame.index)

    def _categories(self, column: str, values: pd.Series, source: str, tally: Optional["Tally"]):
        categories = self.categories[column]
        if isinstance(values.dtype, pd.CategoricalDtype) and list(values.cat.categories) == categories:
            return values
        text = category_text(values)
        typed = encode(text, categories)
        new = np.asarray(text.notna()) & (typed.codes == -1)
        if new.any():
            examples = sorted(set(text[new].astype(str)))[:3]
            message = (f"column {column!r} of {source}: {int(new.sum())} row(s) hold categories never seen in "
                       f"training ({', '.join(map(repr, examples))})")
            if self.unseen_categories == "error":
                raise DataError(message + "; the model was trained with data.unseen_categories=error")
            if tally is None:
                log.warning("%s; treated as missing values", message)
            else:
                count, seen = tally.unseen.get(column, (0, []))
                tally.unseen[column] = (count + int(new.sum()), sorted(set(seen) | set(examples))[:3])
        return typed


@dataclass
class Tally:
    """What typing a file's chunks changed, added up over them and said once at the end (`say`): per column,
    the rows of categories never seen in training (with up to three of them) and the infinite values."""

    unseen: dict = field(default_factory=dict)  # column -> (rows, examples)
    infinite: dict = field(default_factory=dict)  # column -> rows

    def say(self, source: str) -> None:
        for column, (count, examples) in self.unseen.items():
            log.warning("column %r: %d row(s) hold categories never seen in training (%s); treated as missing "
                        "values", column, count, ", ".join(map(repr, examples)))
        if self.infinite:
            _say_infinite(source, self.infinite)


def _numbers(column: str, values: pd.Series, source: str, tally: Optional[Tally] = None) -> np.ndarray:
    if pd.api.types.is_numeric_dtype(values) and not isinstance(values.dtype, pd.CategoricalDtype):
        with np.errstate(over="ignore"):  # a number past float32's range: infinite, then missing, said
            return finite(values.to_numpy(dtype=np.float32, na_value=np.nan), [column], source, tally)
    parsed = pd.to_numeric(values.astype(object), errors="coerce")
    bad = values.notna() & parsed.isna()
    if bad.any():
        examples = ", ".join(repr(v) for v in pd.unique(values[bad].astype(str))[:3])
        raise DataError(
            f"column {column!r} of {source} is numeric in training but {int(bad.sum())} row(s) hold values "
            f"that are not numbers ({examples})"
        )
    with np.errstate(over="ignore"):
        return finite(parsed.to_numpy(dtype=np.float32, na_value=np.nan), [column], source, tally)


CHUNK_ROWS = 1 << 20  # rows checked at once: the mask's memory stays small whatever the table


def finite(values: np.ndarray, columns: list[str], source: str, tally: Optional[Tally] = None) -> np.ndarray:
    """`values` (float32, one column or rows x `columns`) with infinite values, and numbers past float32's
    range, as missing values, said once per call naming each column and its count (or counted into `tally`):
    LightGBM's and XGBoost's fits refuse them and a network's scaling turns them into NaN losses, while every
    model here reads a missing value. The array is copied only where it holds one."""
    block = values.reshape(len(values), -1)
    counts = np.zeros(block.shape[1], dtype=np.int64)
    for start in range(0, len(block), CHUNK_ROWS):
        counts += np.isinf(block[start:start + CHUNK_ROWS]).sum(axis=0)
    if not counts.any():
        return values
    values = values.copy()
    values[np.isinf(values)] = np.nan
    if tally is not None:
        for column, n in zip(columns, counts):
            if n:
                tally.infinite[column] = tally.infinite.get(column, 0) + int(n)
        return values
    _say_infinite(source, {c: int(n) for c, n in zip(columns, counts) if n})
    return values


def _say_infinite(source: str, counts: dict) -> None:
    """The warning for infinite values read as missing values: each column (name -> rows) and its count."""
    named = ", ".join(f"{c!r} ({n} row(s))" for c, n in counts.items())
    log.warning("%s: infinite values (or numbers beyond float32's range) in %s read as missing values; "
                "replace them in the table to choose otherwise", source, named)
