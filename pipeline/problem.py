"""The problem type a label column holds (binary, multiclass, regression): the declared one,
checked against the values, or inferred from them. Loading and the checks before loading share it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipeline.errors import DataError

if TYPE_CHECKING:
    import pandas as pd

MAX_CLASSES = 20  # integral labels with more distinct values than this are a regression target


def problem_type_of(y: "pd.Series", declared: str, label: str) -> str:
    """`declared` when the values allow it (a DataError says why not), else what the values suggest."""
    import pandas as pd

    numeric = pd.api.types.is_numeric_dtype(y) and not pd.api.types.is_bool_dtype(y)
    distinct = small_whole_values(y)
    n_unique = len(distinct) if distinct is not None else y.nunique()
    if declared == "regression":
        if not numeric:
            raise DataError(f"data.problem_type=regression but data.label={label!r} holds text values such as {y.iloc[0]!r}")
        return declared
    if declared in ("binary", "multiclass"):
        if declared == "binary" and n_unique != 2:
            raise DataError(f"data.problem_type=binary but data.label={label!r} has {n_unique} distinct values")
        return declared
    if not numeric:
        return "binary" if n_unique == 2 else "multiclass"
    integral = distinct is not None or _whole(y)
    if n_unique == 2:
        return "binary"
    if integral and n_unique <= MAX_CLASSES:
        return "multiclass"
    return "regression"


def inferred_line(y: "pd.Series", problem_type: str, label: str, num_classes: int) -> str:
    """What data.problem_type=auto made of the label's values, and the setting that says otherwise."""
    import pandas as pd

    numeric = pd.api.types.is_numeric_dtype(y) and not pd.api.types.is_bool_dtype(y)
    said = f"data.problem_type=auto: label {label!r} holds"
    if problem_type == "regression":
        if _whole(y):  # the rule of problem_type_of: these were too many to be classes
            return (f"{said} whole numbers with more than {MAX_CLASSES} distinct values: a regression "
                    "target; data.problem_type=multiclass fits them as classes")
        return f"{said} numbers: a regression target"
    if problem_type == "binary":
        return f"{said} two classes: binary"
    other = "; data.problem_type=regression fits them as numbers" if numeric else ""
    return f"{said} {num_classes} classes: multiclass{other}"


def _whole(y: "pd.Series") -> bool:
    """Whether every value of a numeric label is a whole number."""
    import numpy as np

    return bool(np.all(np.equal(np.mod(y.to_numpy(), 1), 0)))


def small_whole_values(y: "pd.Series"):
    """The distinct values, ascending, of a label column of whole numbers from 0 to 63 in a numpy dtype
    (found in one counting pass over millions of rows); None for any other column."""
    import numpy as np

    from pipeline.split import small_counts

    if not isinstance(y.dtype, np.dtype) or y.dtype.kind not in "iu":
        return None
    counts = small_counts(y.to_numpy())
    return None if counts is None else np.flatnonzero(counts).astype(y.dtype)
