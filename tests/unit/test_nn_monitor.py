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


def test_where_the_metric_is_undefined_on_the_validation_rows_the_loss_keeps_the_epoch():
    """ROC AUC on validation rows of one class is NaN at every epoch: the first epoch was kept."""
    data = _separable()
    one_class = (data.v_y == 1).nonzero().squeeze(1)
    data = Arrays(data.x_num, data.x_cat, data.y, data.v_num[one_class], data.v_cat[one_class],
                  data.v_y[one_class])
    spec = NetSpec(num_numeric=2, cardinalities=(), out_dim=2, hidden_sizes=(16,), dropout=0.0)
    config = LoopConfig(batch_size=64, max_epochs=15, patience=0, learning_rate=3e-3, monitor="eval_metric")
    result = Loop(spec, config, "binary", METRICS["roc_auc"], torch.device("cpu"), seed=0).run(data)
    losses = result.history["val_loss"]
    assert np.isnan(result.history["val_roc_auc"]).all()
    assert result.best_epoch == int(np.argmin(losses)) > 0


def test_watched_is_lower_better_for_either_monitor():
    assert watched("val_loss", 0.3, 0.9, True) == 0.3
    assert watched("eval_metric", 0.3, 0.9, True) == -0.9
    assert watched("eval_metric", 0.3, 12.0, False) == 12.0


def test_an_unknown_monitor_names_the_key_and_the_choices():
    with pytest.raises(ConfigError, match=r"model.nn.params.monitor='val_auc' is not one of val_loss, eval_metric"):
        check({"monitor": "val_auc"}, "model.nn.params")


def test_a_fit_whose_best_epoch_came_late_waits_longer_for_the_next(monkeypatch):
    """AutoGluon's adaptive early stopping: the patience grows by `patience_growth` epochs per epoch before
    the best one (0 by default: README's Models). A validation loss that falls until epoch 20, sits still,
    and falls again at epoch 34: a fixed patience of 10 ends the fit at epoch 30 with epoch 20 kept;
    10 + 0.5 x 20 = 20 epochs of patience reach epoch 34 and keep it."""

    script = [1.0 - 0.01 * e for e in range(21)] + [0.9] * 13 + [0.5] + [0.6] * 40
    real = Loop._evaluate

    def scripted(self, *args, **kwargs):
        _, score, out = real(self, *args, **kwargs)
        self._seen = getattr(self, "_seen", -1) + 1
        return script[self._seen], score, out

    monkeypatch.setattr(Loop, "_evaluate", scripted)
    spec = NetSpec(num_numeric=2, cardinalities=(), out_dim=2, hidden_sizes=(4,), dropout=0.0)
    kept = {}
    for growth in (0.0, 0.5):
        config = LoopConfig(batch_size=256, max_epochs=50, patience=10, patience_growth=growth)
        loop = Loop(spec, config, "binary", METRICS["accuracy"], torch.device("cpu"), seed=0)
        result = loop.run(_separable())
        kept[growth] = result.best_epoch, result.epochs_run
    assert kept[0.0] == (20, 31)
    assert kept[0.5] == (34, 50)  # 10 + 0.5 x 34 = 27 epochs more would pass max_epochs
    assert LoopConfig(patience=0, patience_growth=0.5).patience_at(40) == float("inf")  # 0: no early stopping
