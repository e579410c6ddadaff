"""A regression model that can extrapolate (the network, the linear model) kept within the labels it was
trained on: at most a share `extend` of their standard deviation past the lowest and the highest, and
never across zero where every label is on one side of it (AutoGluon bounds its network's output so, with
`y_range_extend` 0.05). Trees predict leaf averages and stay within the labels by construction.

A card balance of 0 to 2,000 has no negative value; a ridge regression of it on income and limit predicts
some for low limits. Bagged, on 11 regression tables of the equal_budget sets (split 0), the bound lowered
the linear model's test RMSE on Credit from 107.1 to 65.4 and the network's from 60.0 to 59.1, lowered
Auto's, Hitters', Workinghours' and Computers' by under 0.6%, and changed no other table's.
"""

from __future__ import annotations

from typing import Optional


def label_range(y, extend: Optional[float]) -> Optional[tuple[float, float]]:
    """(lowest, highest) prediction for labels `y`, or None where `extend` is None (no bound)."""
    import numpy as np

    if extend is None:
        return None
    y = np.asarray(y, dtype=np.float64)
    y = y[np.isfinite(y)]
    if not len(y):
        return None
    low, high, margin = float(y.min()), float(y.max()), float(extend) * float(y.std())
    low = max(0.0, low - margin) if low >= 0 else low - margin
    high = min(0.0, high + margin) if high <= 0 else high + margin
    return low, high


def within(pred, bounds: Optional[tuple[float, float]]):
    """`pred` (an array) clipped to `bounds` (unchanged where None)."""
    import numpy as np

    return pred if bounds is None else np.clip(pred, bounds[0], bounds[1])


def check_extend(value, key: str) -> None:
    """`key`=value must be null or a number >= 0: a ConfigError naming it otherwise."""
    from pipeline.errors import ConfigError

    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ConfigError(f"{key}={value!r} must be a number >= 0 (the share of the labels' standard "
                          "deviation a prediction may pass their range by) or null (no bound)")
