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

from pipeline.errors import ConfigError, DataError

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

log = logging.getLogger(__name__)

ROLES = ("numeric", "categorical", "datetime", "text", "id", "constant", "leak", "dropped")
LEFT_OUT = ("id", "constant", "dropped")  # roles whose columns are no features
LEAK_CHECKS = ("warn", "error", "off")
SAMPLE_ROWS = 10_000  # rows the inference looks at, whatever the table's length
LEAK_ROWS = 5_000  # rows the leak check scores (out of fold)
LEAK_SCORE = 0.98  # one column's out-of-fold R² or squared rank correlation (regression), balanced accuracy
PAIR_R2 = 0.999  # two numeric columns whose linear combination is the label
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
        roles = _flag_leaks(roles, sample, label, problem_type, overrides)
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


def _flag_leaks(roles: list, sample: pd.DataFrame, label: str, problem_type: str, overrides: dict) -> list:
    """Columns that alone (or two numeric ones together, as a sum) predict the label almost perfectly."""
    import numpy as np
    import pandas as pd

    rows = sample_of(sample, LEAK_ROWS, seed=1)
    y_raw = rows[label]
    keep = y_raw.notna().to_numpy()
    rows = rows[keep]
    if len(rows) < 30:
        return roles
    if problem_type == "regression":
        y = pd.to_numeric(rows[label], errors="coerce").to_numpy(dtype=np.float64)
        if np.isnan(y).any():
            return roles  # not numbers: the label's own check says so at loading
    else:
        y = rows[label].astype(str).factorize()[0]
    folds = np.random.default_rng(2).permutation(len(rows)) % 2
    found = {}
    scores = {}
    for r in roles:
        if r.role not in ("numeric", "categorical") or r.column in overrides:
            continue
        score = _single_score(rows[r.column], y, folds, problem_type)
        scores[r.column] = score
        if score >= LEAK_SCORE:
            what = ("out-of-fold R² (or squared rank correlation)" if problem_type == "regression"
                    else "out-of-fold balanced accuracy")
            found[r.column] = f"alone predicts {label!r}: {what} {score:.3f} on {len(rows)} sampled rows"
    if problem_type == "regression":
        for column, why in _pairs(rows, y, roles, scores, label, overrides, found).items():
            found.setdefault(column, why)
    return [ColumnRole(r.column, "leak", found[r.column], r.dtype) if r.column in found else r for r in roles]


def _codes(x: pd.Series, bins: int = 32) -> np.ndarray:
    """A column as small integer codes: quantile bins of numbers, categories (the rarest sharing one code)."""
    import numpy as np
    import pandas as pd

    if pd.api.types.is_numeric_dtype(x) and not pd.api.types.is_bool_dtype(x):
        v = x.to_numpy(dtype=np.float64, na_value=np.nan)
        inner = np.linspace(0, 1, bins + 1)[1:-1]
        edges = np.unique(np.nanquantile(v, inner)) if np.isfinite(v).any() else np.empty(0)
        codes = np.searchsorted(edges, v, side="right")
        codes[np.isnan(v)] = bins + 1
        return codes
    codes, _ = pd.factorize(x.astype(str), use_na_sentinel=False)
    return np.minimum(codes, 4 * bins)


def _single_score(x: pd.Series, y: np.ndarray, folds: np.ndarray, problem_type: str) -> float:
    """Out-of-fold score of y predicted from one column's codes (each code's mean or majority on the other
    fold)."""
    import numpy as np

    codes = _codes(x)
    k = int(codes.max()) + 1
    if problem_type == "regression":
        pred = np.empty(len(y))
        for f in (0, 1):
            fit, out = folds != f, folds == f
            sums = np.bincount(codes[fit], weights=y[fit], minlength=k)
            counts = np.bincount(codes[fit], minlength=k)
            means = np.where(counts > 0, sums / np.maximum(counts, 1), y[fit].mean())
            pred[out] = means[codes[out]]
        total = ((y - y.mean()) ** 2).sum()
        r2 = float(1 - ((y - pred) ** 2).sum() / total) if total > 0 else 0.0
        return max(r2, _rank_r2(x, y))
    classes = int(y.max()) + 1
    pred = np.empty(len(y), dtype=np.int64)
    for f in (0, 1):
        fit, out = folds != f, folds == f
        table = np.zeros((k, classes))
        np.add.at(table, (codes[fit], y[fit]), 1)
        table[table.sum(axis=1) == 0] = np.bincount(y[fit], minlength=classes)
        pred[out] = table.argmax(axis=1)[codes[out]]
    return max(_balanced_accuracy(pred, y, classes), _neighbour_score(x, y, folds, classes))


def _balanced_accuracy(pred: np.ndarray, y: np.ndarray, classes: int) -> float:
    import numpy as np

    return float(np.mean([float((pred[y == c] == c).mean()) for c in range(classes) if (y == c).any()]))


def _neighbour_score(x: pd.Series, y: np.ndarray, folds: np.ndarray, classes: int) -> float:
    """Out-of-fold balanced accuracy of each row's class taken from the other fold's row nearest in value
    (numbers only): a label cut from the column at thresholds (a low birth weight from the weight) errs at
    the cuts alone, where quantile bins straddling a cut err on a few hundred rows by a bin's share."""
    import numpy as np
    import pandas as pd

    if not pd.api.types.is_numeric_dtype(x) or pd.api.types.is_bool_dtype(x):
        return 0.0
    v = x.to_numpy(dtype=np.float64, na_value=np.nan)
    known = np.isfinite(v)
    pred = np.empty(len(y), dtype=np.int64)
    for f in (0, 1):
        fit, out = folds != f, folds == f
        pred[out] = np.bincount(y[fit], minlength=classes).argmax()  # rows without a number: the majority
        fit, out = fit & known, out & known
        if not fit.any():
            continue
        order = np.argsort(v[fit], kind="stable")
        xs, ys, q = v[fit][order], y[fit][order], v[out]
        right = np.minimum(np.searchsorted(xs, q), len(xs) - 1)
        left = np.maximum(right - 1, 0)
        nearer_left = np.abs(q - xs[left]) < np.abs(xs[right] - q)
        pred[out] = np.where(nearer_left, ys[left], ys[right])
    return _balanced_accuracy(pred, y, classes)


def _rank_r2(x: pd.Series, y: np.ndarray) -> float:
    """The squared rank correlation of a numeric column with the label: 1 for any monotone function of it."""
    import numpy as np
    import pandas as pd

    if not pd.api.types.is_numeric_dtype(x) or pd.api.types.is_bool_dtype(x):
        return 0.0
    ok = x.notna().to_numpy()
    if ok.sum() < 30:
        return 0.0
    a = pd.Series(x.to_numpy()[ok]).rank().to_numpy()
    b = pd.Series(y[ok]).rank().to_numpy()
    if a.std() == 0 or b.std() == 0:
        return 0.0
    return float(np.corrcoef(a, b)[0, 1] ** 2)


def _pairs(rows, y, roles, scores, label, overrides, found) -> dict:
    """Two numeric columns (among the six that score best alone) whose linear combination is the label."""
    import numpy as np

    numeric = [r.column for r in roles if r.role == "numeric" and r.column not in overrides]
    top = sorted(numeric, key=lambda c: -scores.get(c, 0))[:6]
    flagged = {}
    total = ((y - y.mean()) ** 2).sum()
    for i, a in enumerate(top):
        for b in top[i + 1:]:
            X = rows[[a, b]].to_numpy(dtype=np.float64, na_value=np.nan)
            ok = np.isfinite(X).all(axis=1)
            if ok.sum() < 30 or total <= 0:
                continue
            A = np.column_stack([X[ok], np.ones(ok.sum())])
            coef, *_ = np.linalg.lstsq(A, y[ok], rcond=None)
            yy = y[ok]
            r2 = 1 - ((yy - A @ coef) ** 2).sum() / max(((yy - yy.mean()) ** 2).sum(), 1e-300)
            if r2 >= PAIR_R2:
                why = (f"with {{other}} predicts {label!r} as a linear combination: R² {r2:.4f} "
                       f"on {int(ok.sum())} sampled rows")
                flagged.setdefault(a, why.format(other=repr(b)))
                flagged.setdefault(b, why.format(other=repr(a)))
    return flagged


def report(roles: Roles, leak_check: str) -> None:
    """Warnings for the columns left out and for leak suspects (or the error data.leak_check=error asks)."""
    auto_out = [c for c in roles.columns if c.role in ("id", "constant") and c.reason != OVERRIDDEN]
    if auto_out:
        named = ", ".join(f"{c.column!r} ({c.role}: {c.reason})" for c in auto_out)
        keep = ",".join(f"{c.column}:{'numeric' if c.dtype.startswith(('int', 'float')) else 'categorical'}"
                        for c in auto_out[:2])
        log.warning("left out of the features: %s; to keep one, set its role, e.g. +data.column_roles={%s}",
                    named, keep)
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
