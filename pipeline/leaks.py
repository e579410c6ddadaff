"""The leak check: columns that alone (or two together: numbers as a linear combination of a numeric label,
any two's values jointly for a class) predict the label almost perfectly, scored out of fold on a sample of
rows, and categories that determine the class where too few rows a value leave that score blind
(`pipeline.roles` calls it once the roles are inferred)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipeline import number_text
from pipeline.frames import with_columns

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

LEAK_ROWS = 5_000  # rows the leak check scores (out of fold)
LEAK_SCORE = 0.98  # one column's out-of-fold R² or squared rank correlation (regression), balanced accuracy
PAIR_R2 = 0.999  # two numeric columns whose linear combination is the label


def suspects(roles: list, sample: pd.DataFrame, rows: pd.DataFrame, label: str, problem_type: str,
             overrides: dict) -> dict:
    """{column: why} for the columns that alone (or two together) predict the label almost perfectly on `rows`
    (at most LEAK_ROWS of the roles' `sample`); `roles`: the ColumnRoles."""
    import numpy as np
    import pandas as pd

    y_raw = rows[label]
    keep = y_raw.notna().to_numpy()
    rows = rows[keep]
    if len(rows) < 30:
        return {}
    if problem_type == "regression":
        y = pd.to_numeric(rows[label], errors="coerce").to_numpy(dtype=np.float64)
        if np.isnan(y).any():
            return {}  # not numbers: the label's own check says so at loading
    else:
        y = rows[label].astype(str).factorize()[0]
    written = [r.column for r in roles if r.role == "numeric" and r.reason.startswith(number_text.REASON)]
    rows = with_columns(rows, {c: number_text.read(rows[c], number_text.detect(sample[c]))[0]
                               for c in written})
    folds = np.random.default_rng(2).permutation(len(rows)) % 2
    found = {}
    scores = {}
    scored = {}  # the columns as scored (a text by its first word)
    for r in roles:
        if r.role not in ("numeric", "categorical", "text") or r.column in overrides:
            continue
        x = rows[r.column]
        if r.role == "text":  # free text's first word can name the label (a car's make in its name)
            x = x.astype("string").str.split().str[0]
        score = _single_score(x, y, folds, problem_type)
        scores[r.column] = score
        scored[r.column] = x
        whose = "its first word alone" if r.role == "text" else "alone"
        if score >= LEAK_SCORE:
            what = ("out-of-fold R² (or squared rank correlation)" if problem_type == "regression"
                    else "out-of-fold balanced accuracy")
            found[r.column] = f"{whose} predicts {label!r}: {what} {score:.3f} on {len(rows)} sampled rows"
        elif problem_type != "regression" and r.role != "numeric":
            pure, repeated, values = _purity(x, y)
            if pure >= LEAK_SCORE:
                found[r.column] = (
                    f"{whose} determines {label!r}: each of its {values} values seen more than once holds "
                    f"one class (balanced accuracy {pure:.3f} on those {repeated} of {len(rows)} sampled "
                    "rows, too few a value to score it out of fold)")
    pairs = _pairs(rows, y, roles, scores, label, overrides, found) if problem_type == "regression" \
        else _class_pairs(scored, y, folds, scores, label, found)
    for column, why in pairs.items():
        found.setdefault(column, why)
    return found


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
    return max(_code_score(codes, y, folds, classes), _neighbour_score(x, y, folds, classes))


def _code_score(codes: np.ndarray, y: np.ndarray, folds: np.ndarray, classes: int) -> float:
    """Out-of-fold balanced accuracy of each code's majority class on the other fold (a code unseen there:
    that fold's majority)."""
    import numpy as np

    k = int(codes.max()) + 1
    pred = np.empty(len(y), dtype=np.int64)
    for f in (0, 1):
        fit, out = folds != f, folds == f
        table = np.zeros((k, classes))
        np.add.at(table, (codes[fit], y[fit]), 1)
        table[table.sum(axis=1) == 0] = np.bincount(y[fit], minlength=classes)
        pred[out] = table.argmax(axis=1)[codes[out]]
    return _balanced_accuracy(pred, y, classes)


def _purity(x: pd.Series, y: np.ndarray) -> tuple[float, int, int]:
    """How far a category determines the class, where too few rows per class leave the out-of-fold score
    blind (37 makers of 392 cars): the balanced accuracy of each value's majority class over the rows whose
    value repeats, if those are half the rows or more, in five values or more, of two classes or more; else
    0. A chance column scores about 0.75 with values in pairs, less with more rows per value."""
    import numpy as np
    import pandas as pd

    codes, _ = pd.factorize(x.astype(str), use_na_sentinel=True)
    counts = np.bincount(codes[codes >= 0]) if (codes >= 0).any() else np.zeros(0, dtype=np.int64)
    repeated = (codes >= 0) & (counts[np.maximum(codes, 0)] >= 2 if len(counts) else False)
    values = int((counts >= 2).sum())
    if repeated.sum() < 0.5 * len(codes) or values < 5 or len(np.unique(y[repeated])) < 2:
        return 0.0, int(repeated.sum()), values
    classes = int(y.max()) + 1
    table = np.zeros((len(counts), classes))
    np.add.at(table, (codes[repeated], y[repeated]), 1)
    pred = table.argmax(axis=1)[codes[repeated]]
    return _balanced_accuracy(pred, y[repeated], classes), int(repeated.sum()), values


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
    """Two numeric columns (among the six that score best alone) whose linear combination is the label, where
    neither alone is such a line: with a copy of the label, any other column makes a pair that adds nothing."""
    numeric = [r.column for r in roles if r.role == "numeric" and r.column not in overrides]
    top = sorted(numeric, key=lambda c: -scores.get(c, 0))[:6]
    alone = {c: _linear_r2(rows[[c]], y)[0] for c in top}
    flagged = {}
    for i, a in enumerate(top):
        for b in top[i + 1:]:
            r2, n = _linear_r2(rows[[a, b]], y)
            if r2 >= PAIR_R2 and max(alone[a], alone[b]) < PAIR_R2:
                _flag_both(flagged, a, b, f"with {{other}} predicts {label!r} as a linear combination: "
                                          f"R² {r2:.4f} on {n} sampled rows")
    return flagged


def _linear_r2(columns, y) -> tuple[float, int]:
    """R² of the least-squares line (with an intercept) through `columns` to y, on the rows where all are
    finite, and those rows' count; 0 on fewer than 30 rows or a constant label."""
    import numpy as np

    X = columns.to_numpy(dtype=np.float64, na_value=np.nan)
    ok = np.isfinite(X).all(axis=1)
    yy = y[ok]
    total = ((yy - yy.mean()) ** 2).sum() if ok.sum() else 0.0
    if ok.sum() < 30 or total <= 0:
        return 0.0, int(ok.sum())
    A = np.column_stack([X[ok], np.ones(ok.sum())])
    coef, *_ = np.linalg.lstsq(A, yy, rcond=None)
    return float(1 - ((yy - A @ coef) ** 2).sum() / total), int(ok.sum())


def _class_pairs(scored: dict, y: np.ndarray, folds: np.ndarray, scores: dict, label: str,
                 found: dict) -> dict:
    """Two columns (among the six that score best alone) whose values together predict the class out of fold:
    a label coded into two columns (an answer written as the bounds of the bid it accepted)."""
    import numpy as np

    top = sorted((c for c in scored if c not in found), key=lambda c: -scores[c])[:6]
    codes = {c: _codes(scored[c]) for c in top}
    classes = int(y.max()) + 1
    flagged = {}
    for i, a in enumerate(top):
        for b in top[i + 1:]:
            joint = np.unique(codes[a] * (int(codes[b].max()) + 1) + codes[b], return_inverse=True)[1]
            score = _code_score(joint.ravel(), y, folds, classes)
            if score >= LEAK_SCORE:
                _flag_both(flagged, a, b, f"with {{other}} predicts {label!r}: out-of-fold balanced "
                                          f"accuracy {score:.3f} of the two columns' values together on "
                                          f"{len(y)} sampled rows")
    return flagged


def _flag_both(flagged: dict, a: str, b: str, why: str) -> None:
    """Flag each column of a pair (unless flagged already), `why` naming the other as {other}."""
    flagged.setdefault(a, why.format(other=repr(b)))
    flagged.setdefault(b, why.format(other=repr(a)))
