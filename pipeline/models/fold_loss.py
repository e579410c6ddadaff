"""What the scikit-learn kinds (extra_trees, linear) stop and choose on: the validation loss of a fit's
predictions, and a fold model's probabilities as columns for every class of the problem."""

from __future__ import annotations


def validation_loss(y, pred, problem_type: str) -> float:
    """The squared error for a number; the log loss of the true class's probability for a class."""
    import numpy as np

    if problem_type == "regression":
        return float(np.mean((pred - y) ** 2))
    picked = np.clip(pred[np.arange(len(y)), y.astype(int)], 1e-15, 1.0)
    return float(-np.mean(np.log(picked)))


def every_class(proba, classes, num_classes: int):
    """Probabilities over a fold model's `classes` (a fold may lack one) as columns for all `num_classes`."""
    import numpy as np

    out = np.zeros((len(proba), num_classes))
    out[:, np.asarray(classes).astype(int)] = proba
    return out
