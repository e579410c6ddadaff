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
