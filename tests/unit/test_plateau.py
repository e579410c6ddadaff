"""Early stopping's plateau: a boosted fit whose validation loss falls by next to nothing a round stops, as
one whose loss does not fall does; a fit still learning runs on."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pipeline.models import FitContext, LightGBMModel, Placement, XGBoostModel
from pipeline.models import plateau
from pipeline.models.plateau import Plateau

PARAMS = {  # the engine's patience and round cap
    LightGBMModel: {"num_iterations": 10000, "early_stopping_round": 50, "verbosity": -1,
                    "learning_rate": 0.05},
    XGBoostModel: {"num_boost_round": 10000, "early_stopping_rounds": 50, "eta": 0.05},
}


def first_stall(losses, patience=50):
    watch = Plateau(patience)
    return next((i for i, loss in enumerate(losses) if watch.stalled(i, loss)), None)


def test_a_loss_falling_by_next_to_nothing_stalls_after_the_patience():
    assert first_stall([0.45 - 1e-8 * i for i in range(1000)]) == 50


def test_a_flat_loss_stalls_as_early_stopping_would():
    assert first_stall([0.45] * 200) == 50


def test_a_loss_still_falling_does_not_stall():
    assert first_stall([0.45 * 0.999 ** i for i in range(2000)]) is None  # 0.1% a round
    assert first_stall([0.45 - 2e-7 * i for i in range(2000)]) is None  # 2e-5 of the loss in 50 rounds


def test_the_scale_is_the_loss_itself_so_a_loss_near_zero_still_learning_runs_on():
    assert first_stall([1e-3 * 0.99 ** i for i in range(2000)]) is None


def test_no_patience_never_stalls_and_missing_losses_are_no_best():
    assert first_stall([0.45] * 200, patience=0) is None
    watch = Plateau(3)
    assert not any(watch.stalled(i, float("nan")) for i in range(10)) and watch.best_round == -1


def pure_cell_table(n=1000, seed=2):
    """Three categorical columns (12 groups of rows), one group all of one class: the loss creeps."""
    rng = np.random.default_rng(seed)
    X = pd.DataFrame({"a": rng.integers(0, 3, n), "b": rng.integers(0, 2, n), "c": rng.integers(0, 2, n)})
    X = X.astype(str).astype("category")
    p = 0.2 + 0.15 * X["a"].cat.codes + 0.2 * X["b"].cat.codes - 0.1 * X["c"].cat.codes
    p = p.where(~((X["a"] == "2") & (X["b"] == "1") & (X["c"] == "0")), 1.0)
    return X, (rng.random(n) < p).to_numpy().astype(int)


def fit(cls):
    X, y = pure_cell_table()
    model = cls(PARAMS[cls], cls.__name__).fit(X[:800], y[:800], X[800:], y[800:],
                                              FitContext("binary", 2, Placement(1), seed=0))
    return model, X[800:]


@pytest.mark.parametrize("cls", list(PARAMS), ids=lambda c: c.__name__)
def test_a_booster_creeping_on_a_pure_group_stops_at_its_plateau_and_keeps_its_best_round(cls, monkeypatch):
    model, X_val = fit(cls)
    losses = next(iter(model.history_.values()))
    kept = model.best_iteration_ - 1 if cls is LightGBMModel else model.best_iteration_  # 1-based / 0-based
    # the kept round is the best, or (XGBoost's early stopping records it) one round of creep before it
    assert len(losses) < 3000 and kept < len(losses) - 1
    assert losses[kept] - min(losses) <= plateau.PLATEAU_GAIN * min(losses)
    if cls is LightGBMModel:
        assert model.booster_.current_iteration() == kept + 1  # the rounds after the best are not kept
    assert np.isfinite(model.predict_proba(X_val)).all()

    monkeypatch.setattr(plateau, "PLATEAU_GAIN", 0.0)  # early stopping alone: the same fit runs to its cap
    alone, _ = fit(cls)
    assert len(next(iter(alone.history_.values()))) >= 9000


@pytest.mark.parametrize("metric, value, loss", [
    ("logloss", 0.3, 0.3), ("auc", 0.8, -0.8), ("map@3", 0.6, -0.6), ("pre", 0.7, -0.7),
    ("ndcg@5-", 0.5, -0.5), ("mape", 0.2, 0.2), ("rmse", 1.5, 1.5),
])
def test_xgboost_scores_turn_into_losses_by_early_stoppings_own_direction(metric, value, loss):
    assert plateau.xgboost_loss({"valid": {"logloss": [9.0], metric: [0.1, value]}}) == loss


def test_xgboosts_pruning_reports_the_metric_early_stopping_reads_as_a_loss():
    from pipeline.models.xgboost import _PruningCallback

    reported = []
    callback = _PruningCallback(lambda step, value: reported.append((step, value)))
    log = {"valid": {"logloss": [0.5], "map@10": [0.75]}}  # early stopping reads the last, and maximizes it
    assert callback.after_iteration(None, 10, log) is False
    assert callback.after_iteration(None, 11, log) is False
    assert reported == [(10, -0.75)]
