"""Greedy ensemble selection when members predict NaN."""

import numpy as np
import pytest

from pipeline.ensemble import ensemble_selection
from pipeline.errors import ModelOutputError
from pipeline.metrics import METRICS


@pytest.fixture
def regression():
    rng = np.random.default_rng(0)
    y = rng.normal(size=200)
    return y, y + rng.normal(scale=0.3, size=200)


def test_a_member_that_predicts_nan_gets_no_weight(regression):
    y, good = regression
    for preds in ([np.full_like(y, np.nan), good], [good, np.full_like(y, np.nan)]):
        weights = ensemble_selection(preds, y, METRICS["rmse"])
        assert np.isnan(preds[int(np.argmin(weights))]).all() and weights.max() == 1.0


def test_every_member_predicting_nan_is_an_error_naming_them(regression):
    y, _ = regression
    nan = np.full_like(y, np.nan)
    with pytest.raises(ModelOutputError, match=r"every model is NaN or infinite \(net, custom\)"):
        ensemble_selection([nan, nan], y, METRICS["rmse"], names=["net", "custom"])
