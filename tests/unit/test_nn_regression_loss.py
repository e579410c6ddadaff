"""What a regression network minimises (`params.regression_loss`): the squared error by default, the
absolute error (AutoGluon's NN_TORCH), or Huber's."""

from __future__ import annotations

import pytest
import torch

from pipeline.errors import ConfigError
from pipeline.metrics import METRICS
from pipeline.nn.loop import Arrays, Loop
from pipeline.nn.network import NetSpec
from pipeline.nn.options import DEFAULTS, LoopConfig, check


def _skewed(n=900, seed=0) -> Arrays:
    """Features that say nothing; a label 0 on nine rows in ten and 10 on the tenth: its mean is 1, its
    median 0."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 3, generator=g)
    y = torch.where(torch.arange(n) % 10 == 0, 10.0, 0.0)
    cats = torch.zeros(n, 0, dtype=torch.long)
    k = n * 2 // 3
    return Arrays(x[:k], cats[:k], y[:k], x[k:], cats[k:], y[k:])


def _fitted_level(loss: str) -> float:
    spec = NetSpec(num_numeric=3, cardinalities=(), out_dim=1, hidden_sizes=(8,), dropout=0.0)
    config = LoopConfig(batch_size=64, max_epochs=60, patience=0, learning_rate=1e-2, weight_decay=0.0,
                        regression_loss=loss)
    result = Loop(spec, config, "regression", METRICS["rmse"], torch.device("cpu"), seed=0).run(_skewed())
    return float(result.validation_output.float().mean())


def test_the_squared_error_fits_the_mean_and_the_absolute_error_the_median():
    assert DEFAULTS["regression_loss"] == "mse"
    assert _fitted_level("mse") == pytest.approx(1.0, abs=0.4)
    assert abs(_fitted_level("l1")) < 0.3
    assert 0.0 < _fitted_level("huber") < 1.0  # squared near 0, absolute for the tenth at 10


def test_an_unknown_regression_loss_names_the_key_and_the_choices():
    with pytest.raises(ConfigError, match=r"regression_loss=.mae. is not one of mse, l1, huber"):
        check({"regression_loss": "mae"}, "model.nn.params")
