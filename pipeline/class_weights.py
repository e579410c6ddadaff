"""Class weights (`data.class_weight`): each training row of a classification label weighed so that every
class counts as much as the others, as AutoGluon's `sample_weight='balance_weight'` does.

`balanced`: a row of class c weighs n / (k × n_c), from the rows one fit learns from (n of them, k classes
among them, n_c of class c): the weights sum to n, and each class's rows together weigh n / k. The fit's
validation rows get their class's weight from the same training counts (a class the training rows lack:
1). Every model kind takes the weights through its library (pipeline.models.base.FitContext.row_weights).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from pipeline.errors import ConfigError, closest

if TYPE_CHECKING:
    import numpy as np

CLASS_WEIGHTS = ("none", "balanced")
DESCRIPTION = "each training row weighs n_rows / (n_classes × rows of its class), from each fit's rows"


def balanced(y_train: np.ndarray, num_classes: int) -> np.ndarray:
    """The weight of each class (codes 0 .. num_classes-1) from the training labels `y_train`; 1 for a
    class with no training row."""
    import numpy as np

    counts = np.bincount(np.asarray(y_train, dtype=np.int64), minlength=num_classes).astype(np.float64)
    present = counts > 0
    weights = np.ones(num_classes, dtype=np.float64)
    weights[present] = len(y_train) / (present.sum() * counts[present])
    return weights


def row_weights(class_weight: str, y_train: np.ndarray, y_val: Optional[np.ndarray],
                num_classes: int) -> tuple[Optional[np.ndarray], Optional[np.ndarray]]:
    """(training rows' weights, validation rows' weights) for `class_weight`; (None, None) for none."""
    if class_weight == "none":
        return None, None
    import numpy as np

    weights = balanced(y_train, num_classes)
    codes = np.asarray(y_train, dtype=np.int64)
    return weights[codes], (None if y_val is None else weights[np.asarray(y_val, dtype=np.int64)])


def check(class_weight: str, problem_type: Optional[str]) -> None:
    """data.class_weight against the label's problem type (None: not known yet)."""
    if class_weight not in CLASS_WEIGHTS:
        raise ConfigError(f"data.class_weight={class_weight!r} is not one of {', '.join(CLASS_WEIGHTS)}"
                          f"{closest(str(class_weight), CLASS_WEIGHTS)}")
    if class_weight != "none" and problem_type == "regression":
        raise ConfigError(f"data.class_weight={class_weight} weighs the classes of a classification label, "
                          "but this label is a regression target; valid for regression: "
                          "data.class_weight=none")


def plan_line(class_weight: str) -> str:
    """The line the plan prints for the option."""
    return f"class weights: {class_weight} ({DESCRIPTION})"


def weights_line(y_train: np.ndarray, classes) -> str:
    """The line the run prints once the data is loaded: each class's weight on the training split."""
    weights = balanced(y_train, len(classes))
    each = ", ".join(f"{c} {w:.3g}" for c, w in zip(classes, weights))
    return f"class weights on the training split: {each}"
