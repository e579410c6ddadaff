"""Classes with fewer training rows than a bag has folds: each fold model whose training part lacks such a
class never predicts it, which the run says once, before the fits (a class with no training row at all is
never predicted by any model)."""

from __future__ import annotations

import logging
from typing import Optional

import numpy as np

log = logging.getLogger(__name__)

SHOWN = 5  # classes named in the line; the rest counted


def rare_classes_line(y_fit: np.ndarray, classes: Optional[list], num_folds: int) -> Optional[str]:
    """The warning for the classes of `classes` (y's codes index them) with fewer rows in `y_fit` than
    `num_folds` (1: a holdout, where only a class without a training row is rare); None where none is."""
    if not classes:
        return None
    folds = max(1, int(num_folds))
    counts = np.bincount(np.asarray(y_fit, dtype=np.int64), minlength=len(classes))
    rare = [(classes[c], int(n)) for c, n in enumerate(counts[:len(classes)]) if n < folds]
    if not rare:
        return None
    named = ", ".join(f"{value!r} ({n} row{'' if n == 1 else 's'})" for value, n in rare[:SHOWN])
    more = f" and {len(rare) - SHOWN} more" if len(rare) > SHOWN else ""
    where = (f"fewer training rows than the {folds} folds of a bag: a fold model whose training part lacks "
             "one never predicts it" if folds > 1 else "no training row: no model predicts it")
    return (f"class(es) {named}{more} of {len(classes)} have {where}; merge such classes or drop their rows "
            "to learn them, or give them more rows")


def say_rare_classes(data, num_folds: int) -> None:
    """The warning for a classification table's training rows (of a bag of `num_folds`, or the holdout's)."""
    if data.problem_type == "regression":
        return
    line = rare_classes_line(data.y[data.fit_idx(num_folds > 1)], data.classes, num_folds)
    if line:
        log.warning(line)
