"""Features made from columns by their role, fitted on the training rows and applied the same way to
every later input (the test rows, `pipeline.predict`, the logged pyfunc).

`id`, `constant` and `dropped` columns are left out; a `numeric` column of numbers written as text
('$12,500', '45%': `pipeline.number_text`) is read as numbers, a value not written the column's way
missing and said; a `datetime` column becomes its year, month, day,
day of the week, hour where the training values have one, and elapsed seconds (skrub's `ToDatetime`
and `DatetimeEncoder`); a `text` column becomes a bounded number of components of its character
n-grams (skrub's `StringEncoder`: tf-idf, then a truncated SVD). skrub is imported only where a table
has such columns.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pipeline import number_text

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from pipeline.roles import Roles

log = logging.getLogger(__name__)

TEXT_COMPONENTS = 16  # features per text column
TEXT_FIT_ROWS = 100_000  # training rows the text encoder learns from, at most


@dataclass
class FeatureMaker:
    """The raw columns a model reads, and the fitted encoders that turn them into its features."""

    inputs: list[str]  # raw columns needed, in the table's order
    left_out: list[str] = field(default_factory=list)
    dates: dict = field(default_factory=dict)  # column -> (ToDatetime, DatetimeEncoder), fitted
    texts: dict = field(default_factory=dict)  # column -> StringEncoder, fitted
    numbers: dict = field(default_factory=dict)  # column -> number_text.NumberFormat

    @property
    def written_numbers(self) -> dict:
        return getattr(self, "numbers", {})  # makers pickled before numbers written as text have none

    @property
    def changes(self) -> bool:
        return bool(self.left_out or self.dates or self.texts or self.written_numbers)

    @property
    def raw_text(self) -> set[str]:
        """Raw columns read as text (dates, free text, numbers written as text), whatever their values look
        like."""
        return set(self.dates) | set(self.texts) | set(self.written_numbers)

    @classmethod
    def fit(cls, X: pd.DataFrame, roles: Roles, fit_rows: np.ndarray) -> "FeatureMaker":
        from pipeline.roles import sample_of

        left_out = [c for c in X.columns if c in roles.left_out]
        inputs = [c for c in X.columns if c not in left_out]
        maker = cls(inputs, left_out)
        for column in roles.of("numeric"):
            if column in X.columns and _is_text(X[column]):
                sample = sample_of(X[column].iloc[fit_rows])  # the way of writing, from a bounded sample
                written = number_text.detect(sample, number_text.MIN_SHARE)
                if written is not None:
                    maker.numbers[column] = written
        for column in roles.of("datetime"):
            if column in X.columns:
                maker.dates[column] = _fit_dates(X[column].iloc[fit_rows], column)
        for column in roles.of("text"):
            if column in X.columns:
                maker.texts[column] = _fit_text(X[column].iloc[fit_rows], column)
        return maker

    def transform(self, X: pd.DataFrame) -> pd.DataFrame:
        """X's input columns, each date and text column replaced in place by its features."""
        import pandas as pd

        if not (self.dates or self.texts or self.written_numbers):
            return X[self.inputs] if self.left_out else X
        parts = []
        for column in self.inputs:
            if column in self.written_numbers:
                parts.append(_written_numbers(X[column], self.written_numbers[column]))
            elif column in self.dates:
                parts.append(_dates(X[column], *self.dates[column]))
            elif column in self.texts:
                parts.append(_text(X[column], self.texts[column]))
            else:
                parts.append(X[[column]])
        return pd.concat(parts, axis=1)


def _is_text(values: pd.Series) -> bool:
    import pandas as pd

    return not (pd.api.types.is_numeric_dtype(values) or isinstance(values.dtype, pd.CategoricalDtype))


def _written_numbers(values: pd.Series, written) -> pd.DataFrame:
    import pandas as pd

    numbers, unread = number_text.read(values, written)
    if len(unread):
        count = int(pd.Series(values.astype(object)).isin(set(unread)).sum())
        log.warning("column %r: %d row(s) not written as its numbers are (%s; %s): read as missing values",
                    values.name, count, ", ".join(repr(v) for v in unread[:3]), written.describe())
    return pd.DataFrame({values.name: numbers}, index=values.index)


def _as_dates(values: pd.Series, column: str):
    import pandas as pd

    values = values.rename(column)
    if pd.api.types.is_datetime64_any_dtype(values):
        return values
    return values.astype("string").astype(object).where(values.notna(), None)


def _fit_dates(values: pd.Series, column: str):
    from skrub import DatetimeEncoder, ToDatetime

    parse = ToDatetime()
    parsed = parse.fit_transform(_as_dates(values, column))
    encoder = DatetimeEncoder(add_weekday=True, add_total_seconds=True)
    encoder.fit(parsed)
    return parse, encoder


def _dates(values: pd.Series, parse, encoder) -> pd.DataFrame:
    import numpy as np

    parsed = parse.transform(_as_dates(values, values.name))
    out = encoder.transform(parsed)
    out.index = values.index
    return out.astype(np.float32)


def _text_values(values: pd.Series, column: str) -> pd.Series:
    return values.astype("string").fillna("").astype(object).rename(column)


def _fit_text(values: pd.Series, column: str):
    from skrub import StringEncoder

    values = _text_values(values, column)
    if len(values) > TEXT_FIT_ROWS:
        values = values.sample(n=TEXT_FIT_ROWS, random_state=0)
    distinct = values.nunique()
    encoder = StringEncoder(n_components=max(1, min(TEXT_COMPONENTS, distinct - 1)), random_state=0)
    encoder.fit(values)
    return encoder


def _text(values: pd.Series, encoder) -> pd.DataFrame:
    import numpy as np

    out = encoder.transform(_text_values(values, values.name))
    out.index = values.index
    return out.astype(np.float32)
