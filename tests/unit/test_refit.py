"""Refit parameters: the fold models' mean early-stopped length, early stopping off."""

from types import SimpleNamespace

import numpy as np
import pandas as pd

from pipeline.models import FitContext, LightGBMModel, TorchMLPModel, XGBoostModel


def folds(**lengths):
    (name, values), = lengths.items()
    return [SimpleNamespace(**{name: v}) for v in values]


def test_each_library_refits_for_the_mean_early_stopped_length():
    # LightGBM counts iterations from 1; XGBoost's best_iteration and the network's best epoch count from 0.
    assert LightGBMModel().refit_params(folds(best_iteration_=[40, 51, 60])) == \
        {"num_iterations": 50, "early_stopping_round": 0}
    assert XGBoostModel().refit_params(folds(best_iteration_=[9, 19])) == \
        {"num_boost_round": 15, "early_stopping_rounds": None}
    assert TorchMLPModel().refit_params(folds(best_epoch_=[0, 1, 3])) == {"max_epochs": 2, "patience": 0}


def test_an_xgboost_refit_boosts_exactly_that_many_rounds():
    rng = np.random.default_rng(0)
    X = pd.DataFrame({"a": rng.random(300, dtype=np.float32), "b": rng.random(300, dtype=np.float32)})
    y = (X["a"] > 0.5).to_numpy().astype(int)
    model = XGBoostModel({"num_boost_round": 500, "early_stopping_rounds": 5})
    refit = model.clone(model.refit_params(folds(best_iteration_=[11, 13])))
    refit.fit(X, y, X, y, FitContext("binary", 2))
    assert refit.booster_.num_boosted_rounds() == 13


def test_the_refits_that_ended_are_kept_and_no_ensemble_refit_is_made_without_every_members(caplog):
    """A time limit cut b's refit: a's refit gets its predictor and row; the ensemble's refit, which keeps
    the bagged ensemble's weights for every member, is not made, and the run says why."""
    from pipeline.ensemble import BaggedPredictor, EnsemblePredictor
    from pipeline.graph.refit import refit_all

    y = np.array([0, 1, 0, 1])
    data = SimpleNamespace(problem_type="binary", y=y, test_idx=np.arange(4), classes=[0, 1])
    plan = SimpleNamespace(allocations=[SimpleNamespace(model="a"), SimpleNamespace(model="b")])
    bags = {m: BaggedPredictor(m, [], "binary", [0, 1], None) for m in ("a", "b")}
    ensemble = EnsemblePredictor("ensemble", list(bags.values()), [0.5, 0.5], "binary", [0, 1])
    predictors = {**bags, "ensemble": ensemble}
    proba = np.column_stack([1.0 - y * 0.8, 0.1 + y * 0.8])
    result = SimpleNamespace(model=SimpleNamespace(params={}), test_pred=proba, test_predict_seconds=0.01,
                             device="cpu", gpu_ids=(), fit_seconds=0.5, predict_seconds=0.01)
    best = {"a": SimpleNamespace(trial=3)}
    with caplog.at_level("WARNING", logger="pipeline.graph.refit"):
        rows = refit_all({("a", 1): result}, best, predictors, data, plan, None)
    assert [r["model"] for r in rows] == ["a_refit"] and rows[0]["test_roc_auc"] == 1.0
    assert "a_refit" in predictors and "ensemble_refit" not in predictors
    assert "no ensemble_refit: b, in the ensemble, had no refit (the time limit cut it)" in caplog.text
    best_both = {**best, "b": SimpleNamespace(trial=0)}
    both = refit_all({("a", 1): result, ("b", 1): result}, best_both, predictors, data, plan, None)
    assert [r["model"] for r in both] == ["a_refit", "b_refit", "ensemble_refit"]
