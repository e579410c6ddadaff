"""How a boosting library's summed raw score (margin) becomes its prediction, and back: the links of
the objectives the engine sets (sigmoid for binary, softmax for multiclass, identity for squared
error). The boosters use them to take rounds off the scores they kept while training."""

from __future__ import annotations


def from_raw(raw, link: str):
    """Predictions from raw scores (`raw` is overwritten for softmax)."""
    import numpy as np

    if link == "sigmoid":
        return 1.0 / (1.0 + np.exp(-raw))
    if link == "softmax":
        raw -= raw.max(axis=1, keepdims=True)
        np.exp(raw, out=raw)
        return raw / raw.sum(axis=1, keepdims=True)
    return raw


def to_raw(predictions, link: str):
    """Raw scores from predictions (for softmax up to a constant per row, which softmax ignores); a
    probability of exactly 0 or 1 gives an infinite score: its raw score is lost."""
    import numpy as np

    with np.errstate(divide="ignore"):
        if link == "sigmoid":
            return np.log(predictions) - np.log1p(-predictions)
        if link == "softmax":
            return np.log(predictions)
    return predictions
