"""A regression model that can extrapolate (the network, the linear model) predicts within the labels it was
trained on, past them by at most y_range_extend of their standard deviation, never across zero."""

import numpy as np
import pandas as pd
import pytest

from pipeline.errors import ConfigError
from pipeline.models.base import FitContext, Placement
from pipeline.label_range import label_range
from pipeline.models.linear import LinearModel
from pipeline.models.nn import TorchMLPModel


def test_the_range_extends_by_a_share_of_the_std_and_stops_at_zero_for_labels_on_one_side():
    y = np.array([0.0, 10.0, 20.0, np.nan])
    std = np.std([0.0, 10.0, 20.0])
    assert label_range(y, 0.05) == pytest.approx((0.0, 20.0 + 0.05 * std))  # all >= 0: not below 0
    assert label_range(-y, 0.05) == pytest.approx((-20.0 - 0.05 * std, 0.0))
    assert label_range(y - 5.0, 0.1) == pytest.approx((-5.0 - 0.1 * std, 15.0 + 0.1 * std))
    assert label_range(y, None) is None


def _trend(n=400, seed=0):
    """A number growing with x: 0 to 1,000 on the training rows; the rows to predict lie far outside them."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 10, n)
    X = pd.DataFrame({"x": x, "noise": rng.normal(size=n)})
    return X, 100.0 * x + rng.normal(0, 5, n), pd.DataFrame({"x": [-50.0, 200.0], "noise": [0.0, 0.0]})


@pytest.mark.parametrize("kind, params", [
    (LinearModel, {}),
    (TorchMLPModel, {"max_epochs": 40, "hidden_sizes": [16], "batch_size_by_rows": False, "batch_size": 32,
                     "learning_rate": 0.01, "dropout": 0.0}),
])
def test_predictions_beyond_the_training_rows_stay_within_the_labels_range(kind, params):
    X, y, outside = _trend()
    ctx = FitContext("regression", None, Placement(1), seed=0)
    train, val = np.arange(300), np.arange(300, 400)
    bounded = kind(params, "m").fit_rows(X, y, train, val, ctx)
    low, high = label_range(y[train], 0.05)
    pred = bounded.predict(outside)
    assert low == 0.0 and (pred >= low).all() and pred[1] == pytest.approx(high)
    assert (bounded.take_validation_proba() <= high).all()
    free = kind({**params, "y_range_extend": None}, "m")
    free.fit_rows(X, y, train, val, ctx)
    far = free.predict(outside)
    assert far[1] > high + 50  # the trend carried on past the labels
    if kind is LinearModel:
        assert pred[0] == low and far[0] < low - 50


@pytest.mark.parametrize("kind, key", [(LinearModel, "model.m.params"), (TorchMLPModel, "model.m.params")])
@pytest.mark.parametrize("value", [-0.1, "wide", True])
def test_a_y_range_extend_that_is_no_share_is_refused_naming_the_key(kind, key, value):
    with pytest.raises(ConfigError, match=rf"{key}.y_range_extend={value!r} must be a number >= 0 .* or null"):
        kind.check_params("m", {"y_range_extend": value}, "regression")
