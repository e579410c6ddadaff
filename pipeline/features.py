"""Features made from columns by their role, fitted on the training rows and applied the same way to
every later input (the test rows, `pipeline.predict`, the logged pyfunc).

`id`, `constant` and `dropped` columns are left out; a `datetime` column becomes its year, month, day,
day of the week, hour where the training values have one, and elapsed seconds (skrub's `ToDatetime`
and `DatetimeEncoder`); a `text` column becomes a bounded number of components of its character
n-grams (skrub's `StringEncoder`: tf-idf, then a truncated SVD). skrub is imported only where a table
has such columns.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from pipeline.roles import Roles

TEXT_COMPONENTS = 16  # features per text column
TEXT_FIT_ROWS = 100_000  # training rows the text encoder learns from, at most


@dataclass
class FeatureMaker:
    """The raw columns a model reads, and the fitted encoders that turn them into its features."""

    inputs: list[str]  # raw columns needed, in the table's order
    left_out: list[str] = field(default_factory=list)
    dates: dict = field(default_factory=dict)  # column -> (ToDatetime, DatetimeEncoder), fitted
    texts: dict = field(default_factory=dict)  # column -> StringEncoder, fitted

    @property
    def changes(self) -> bool:
        return bool(self.left_out or self.dates or self.texts)

    @property
    def raw_text(self) -> set[str]:
        """Raw columns read as text (dates and free text), whatever their values look like."""
        return set(self.dates) | set(self.texts)

    @classmethod
    def fit(cls, X: pd.DataFrame, roles: Roles, fit_rows: np.ndarray) -> "FeatureMaker":
        left_out = [c for c in X.columns if c in roles.left_out]
        inputs = [c for c in X.columns if c not in left_out]
        maker = cls(inputs, left_out)
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

        if not (self.dates or self.texts):
            return X[self.inputs] if self.left_out else X
        parts = []
        for column in self.inputs:
            if column in self.dates:
                parts.append(_dates(X[column], *self.dates[column]))
            elif column in self.texts:
                parts.append(_text(X[column], self.texts[column]))
            else:
                parts.append(X[[column]])
        return pd.concat(parts, axis=1)


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
