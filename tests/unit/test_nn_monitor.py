"""What keeps a network's epoch (`params.monitor`): the validation loss by default, or the eval metric."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pipeline.errors import ConfigError
from pipeline.metrics import METRICS
from pipeline.nn.loop import Arrays, Loop
from pipeline.nn.network import NetSpec
from pipeline.nn.options import LoopConfig, check, watched


def _separable(n=600, seed=0) -> Arrays:
    """Two classes a line divides: accuracy reaches 1.0 within an epoch or two, the loss keeps falling."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 2, generator=g)
    y = (x[:, 0] + x[:, 1] > 0).long()
    cats = torch.zeros(n, 0, dtype=torch.long)
    k = n * 2 // 3
    return Arrays(x[:k], cats[:k], y[:k], x[k:], cats[k:], y[k:])


def _fit(monitor: str):
    spec = NetSpec(num_numeric=2, cardinalities=(), out_dim=2, hidden_sizes=(16,), dropout=0.0)
    config = LoopConfig(batch_size=64, max_epochs=15, patience=0, learning_rate=3e-3, monitor=monitor)
    return Loop(spec, config, "binary", METRICS["accuracy"], torch.device("cpu"), seed=0).run(_separable())


def test_the_kept_epoch_is_the_one_of_least_validation_loss_by_default():
    result = _fit(LoopConfig().monitor)
    losses, accuracy = result.history["val_loss"], result.history["val_accuracy"]
    assert result.best_epoch == int(np.argmin(losses))
    first_best = int(np.argmax(accuracy))  # the eval metric's first best epoch: what was kept before
    assert result.best_epoch > first_best and losses[result.best_epoch] < losses[first_best]
    assert result.best_score == accuracy[result.best_epoch]


def test_monitor_eval_metric_keeps_the_metrics_first_best_epoch():
    result = _fit("eval_metric")
    assert result.best_epoch == int(np.argmax(result.history["val_accuracy"]))


def test_watched_is_lower_better_for_either_monitor():
    assert watched("val_loss", 0.3, 0.9, True) == 0.3
    assert watched("eval_metric", 0.3, 0.9, True) == -0.9
    assert watched("eval_metric", 0.3, 12.0, False) == 12.0


def test_an_unknown_monitor_names_the_key_and_the_choices():
    with pytest.raises(ConfigError, match=r"model.nn.params.monitor='val_auc' is not one of val_loss, eval_metric"):
        check({"monitor": "val_auc"}, "model.nn.params")
