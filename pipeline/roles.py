"""Column roles: what each column of the user's table is, inferred from its dtype and a sample of rows.

A role decides what training does with a column: `numeric` and `categorical` columns are features as
they are (categories native to the GBMs), `datetime` and `text` columns become features of their own
(`pipeline.features`), `id`, `constant` and `dropped` columns are left out, and a `leak` suspect (a
column that alone predicts the label almost perfectly) is named before any fit. Each role carries its
reason; `data.column_roles={col: role}` overrides any of them. Nothing here reads more than the sample.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Optional

from pipeline import number_text
from pipeline.errors import ConfigError, DataError

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger(__name__)

ROLES = ("numeric", "categorical", "datetime", "text", "id", "constant", "leak", "dropped")
LEFT_OUT = ("id", "constant", "dropped")  # roles whose columns are no features
LEAK_CHECKS = ("warn", "error", "off")
SAMPLE_ROWS = 10_000  # rows the inference looks at, whatever the table's length
ID_NAME = re.compile(r"(^|[^a-z])(id|ids|identifier|uuid|guid|key)($|[^a-z])|[a-z](Id|ID)$", re.IGNORECASE)
UNNAMED = re.compile(r"^(Unnamed: \d+|)$")
OVERRIDDEN = "set by data.column_roles"
DATE_LIKE = re.compile(r"\d{1,4}[-/.:]\d{1,2}")


@dataclass(frozen=True)
class ColumnRole:
    """One column's role and why."""

    column: str
    role: str
    reason: str
    dtype: str = ""


@dataclass(frozen=True)
class Roles:
    """Every column's role, in the table's order (the label's too)."""

    columns: tuple[ColumnRole, ...]
    label: str
    sample_rows: int = 0

    def of(self, role: str) -> list[str]:
        return [c.column for c in self.columns if c.role == role]

    def get(self, column: str) -> Optional[ColumnRole]:
        return next((c for c in self.columns if c.column == column), None)

    @property
    def left_out(self) -> list[str]:
        return [c.column for c in self.columns if c.role in LEFT_OUT]

    def summary(self) -> list[str]:
        """One line per role present: the role, how many columns, their names (the first few)."""
        lines = []
        for role in ROLES:
            names = self.of(role)
            if names:
                shown = ", ".join(names[:6]) + (f" … (+{len(names) - 6})" if len(names) > 6 else "")
                lines.append(f"{role}: {len(names)} ({shown})")
        return lines

    def to_json(self) -> str:
        return json.dumps({"label": self.label, "sample_rows": self.sample_rows,
                           "columns": [asdict(c) for c in self.columns]}, indent=2)


def check_overrides(column_roles: dict, leak_check: str) -> None:
    """`data.column_roles` and `data.leak_check` values, before any data is read."""
    for column, role in column_roles.items():
        if role not in ROLES:
            raise ConfigError(f"data.column_roles.{column}={role!r} is not a role; valid: {', '.join(ROLES)}")
    if leak_check not in LEAK_CHECKS:
        raise ConfigError(f"data.leak_check={leak_check!r}; valid: {', '.join(LEAK_CHECKS)}")


def sample_of(frame: pd.DataFrame, rows: int = SAMPLE_ROWS, seed: int = 0) -> pd.DataFrame:
    """At most `rows` rows of the frame, drawn by position (a gather of those rows only)."""
    import numpy as np

    n = len(frame)
    if n <= rows:
        return frame
    rng = np.random.default_rng(seed)
    picked = np.unique(rng.integers(0, n, rows + rows // 4))  # O(rows), not a permutation of the table
    while len(picked) < rows:
        picked = np.unique(np.concatenate([picked, rng.integers(0, n, rows)]))
    return frame.iloc[np.sort(rng.choice(picked, rows, replace=False))]


def infer(sample: pd.DataFrame, label: str, problem_type: Optional[str], overrides: dict,
          dropped: tuple = (), categorical: tuple = (), leak_check: str = "warn") -> Roles:
    """Each column's role from the sample (the label's is `label`); overrides win, then the rules."""
    from pipeline.errors import closest

    columns = [str(c) for c in sample.columns]
    for column in overrides:
        if column not in columns:
            raise DataError(f"data.column_roles names {column!r}, which is not a column"
                            f"{closest(column, columns)}; "
                            f"columns: {', '.join(columns)}")
    roles = []
    for column in sample.columns:
        column = str(column)
        s = sample[column]
        if column == label:
            roles.append(ColumnRole(column, "label", "data.label", str(s.dtype)))
        elif column in overrides:
            roles.append(ColumnRole(column, overrides[column], OVERRIDDEN, str(s.dtype)))
        elif column in dropped:
            roles.append(ColumnRole(column, "dropped", "listed in data.drop_columns", str(s.dtype)))
        elif column in categorical:
            why = "listed in data.categorical_columns"
            roles.append(ColumnRole(column, "categorical", why, str(s.dtype)))
        else:
            role, reason = _rule(column, s)
            roles.append(ColumnRole(column, role, reason, str(s.dtype)))
    if leak_check != "off" and label in sample.columns and problem_type is not None:
        from pipeline.leaks import LEAK_ROWS, suspects

        found = suspects(roles, sample, sample_of(sample, LEAK_ROWS, seed=1), label, problem_type, overrides)
        roles = [ColumnRole(r.column, "leak", found[r.column], r.dtype) if r.column in found else r
                 for r in roles]
    return Roles(tuple(roles), label, len(sample))


def _rule(column: str, s: pd.Series) -> tuple[str, str]:
    import pandas as pd

    n = len(s)
    values = s.dropna()
    distinct = values.nunique()
    if distinct == 0:
        return "constant", f"every value missing in the {n} sampled rows"
    if distinct == 1 and not s.isna().any():
        return "constant", f"one value ({_short(values.iloc[0])}) in the {n} sampled rows"
    if UNNAMED.match(column) and _row_numbers(values):
        return "id", "an unnamed column of row numbers (a written index)"
    if pd.api.types.is_datetime64_any_dtype(s):
        return "datetime", "datetime values"
    if pd.api.types.is_bool_dtype(s) or isinstance(s.dtype, pd.CategoricalDtype):
        return "categorical", f"{distinct} distinct values"
    unique_share = distinct / max(len(values), 1)
    if pd.api.types.is_numeric_dtype(s):
        whole = pd.api.types.is_integer_dtype(s) or bool((values == values.round()).all())
        if whole and ID_NAME.search(column) and unique_share >= 0.9:
            return "id", f"named like an identifier, whole numbers, {unique_share:.0%} distinct"
        return "numeric", "numbers"
    text = values.astype(str)
    if _dates(text):
        return "datetime", "text that parses as dates"
    written = number_text.detect(text)
    if written is not None and ID_NAME.search(column) and unique_share >= 0.9:
        return "id", f"named like an identifier, numbers written as text, {unique_share:.0%} distinct"
    if written is not None:
        return "numeric", f"{number_text.REASON} ({written.describe()}; e.g. {_short(values.iloc[0])})"
    if ID_NAME.search(column) and unique_share >= 0.3:
        return "id", f"named like an identifier, {distinct} distinct values ({unique_share:.0%})"
    many = distinct > 50 and unique_share >= 0.3
    words = _mean_words(text) if many else 0.0
    if many and words >= 2:
        return "text", (f"free text: {distinct} distinct values ({unique_share:.0%}), "
                        f"{words:.1f} words on average")
    if distinct > 50 and unique_share >= 0.9:
        return "id", f"nearly every value distinct ({distinct} of {len(values)}), single words"
    return "categorical", f"{distinct} distinct values"


def _mean_words(text: pd.Series) -> float:
    """Words per value on average, each distinct value split once."""
    import numpy as np

    counts = text.value_counts()
    words = counts.index.to_series().str.split().str.len().to_numpy(dtype=np.float64)
    return float(np.average(words, weights=counts.to_numpy()))


def _row_numbers(values: pd.Series) -> bool:
    import pandas as pd

    if not pd.api.types.is_integer_dtype(values) or not values.is_unique:
        return False
    return bool((values.diff().dropna() > 0).all())  # increasing in the file's order


def _dates(text: pd.Series) -> bool:
    """Whether the sampled text is dates: most values look like one, and skrub finds their format."""
    head = text.head(200)
    if not head.str.contains(DATE_LIKE).mean() >= 0.9:
        return False
    from skrub import ToDatetime
    from skrub.core import RejectColumn  # noqa: F401

    try:
        ToDatetime().fit(text.rename("c"))
    except Exception:  # skrub rejects a column it finds no date format for
        return False
    return True


def _short(value) -> str:
    text = repr(value.item() if hasattr(value, "item") else value)
    return text if len(text) <= 30 else text[:27] + "…"


def report(roles: Roles, leak_check: str) -> None:
    """Warnings for the columns left out and for leak suspects (or the error data.leak_check=error asks)."""
    auto_out = [c for c in roles.columns if c.role in ("id", "constant") and c.reason != OVERRIDDEN]
    if auto_out:
        named = ", ".join(f"{c.column!r} ({c.role}: {c.reason})" for c in auto_out)
        keep = ",".join(f"{c.column}:{'numeric' if c.dtype.startswith(('int', 'float')) else 'categorical'}"
                        for c in auto_out[:2])
        log.warning("left out of the features: %s; to keep one, set its role, e.g. +data.column_roles={%s}",
                    named, keep)
    written = [c for c in roles.columns if c.role == "numeric" and c.reason.startswith(number_text.REASON)]
    if written:
        log.info("read as numbers: %s", "; ".join(f"{c.column!r} ({c.reason})" for c in written))
    leaks = [c for c in roles.columns if c.role == "leak" and c.reason != OVERRIDDEN]
    if not leaks:
        return
    names = [c.column for c in leaks]
    message = ("possible label leak: " + "; ".join(f"{c.column!r} {c.reason}" for c in leaks)
               + ". If it is known only after the label, drop it: "
               + f"data.drop_columns=[{','.join(map(quoted, names))}]"
               + f"; if it is a fair feature, set its role, e.g. +data.column_roles={{{names[0]}:numeric}} "
               "(or data.leak_check=off)")
    if leak_check == "error":
        raise DataError(message)
    log.warning("%s", message)


def quoted(column: str) -> str:
    """A column name as an override may spell it (quoted where Hydra's grammar needs it)."""
    return column if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", column) else repr(column)
