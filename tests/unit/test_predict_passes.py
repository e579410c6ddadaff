"""One pass per prediction: a fold's fit scores the test rows once, and its validation rows once, in
training where the library scored them there (LightGBM's and XGBoost's boosters every round, the
network every epoch), else once after it. The passes are counted on the models' `_predict`."""

from fractions import Fraction

import numpy as np
import pytest

from pipeline.graph.tasks import DataRef, FitRequest, run_fit
from pipeline.models import LightGBMModel, TorchMLPModel, XGBoostModel


def counting(cls):
    class Counting(cls):
        def _predict(self, X):
            type(self).passes.append(len(X))
            return super()._predict(X)

    Counting.passes = []
    return Counting


def fold(adult, model):
    request = FitRequest(
        task_id="fit/m/t0/f0", key="k", model=model, params={}, model_name="m", trial=0, fold=0, num_folds=1,
        fold_seed=0, seed=0, eval_metric="roc_auc", num_cpus=1, gpu_ids=(), gpu_shares=(Fraction(0),),
        data=DataRef(obj=adult),
    )
    return run_fit(request)


FIXED_LENGTH = {  # no round or epoch after the best one: the kept model is the last one scored
    LightGBMModel: {"num_iterations": 15, "early_stopping_round": 0},
    XGBoostModel: {"num_boost_round": 15},
    TorchMLPModel: {"max_epochs": 2, "patience": 0},
}


@pytest.mark.parametrize("cls", list(FIXED_LENGTH), ids=lambda c: c.__name__)
def test_a_fold_predicts_its_test_rows_once_and_its_validation_rows_not_again(adult, cls):
    model_cls = counting(cls)
    result = fold(adult, model_cls(FIXED_LENGTH[cls]))
    assert model_cls.passes == [len(adult.test_idx)]
    # the kept scores are the model's own predictions of those rows
    np.testing.assert_array_equal(result.val_pred, result.model.predict_proba(adult.X.iloc[result.held_out]))


def test_rounds_after_the_best_one_cost_one_validation_pass(adult):
    model_cls = counting(LightGBMModel)
    result = fold(adult, model_cls({"num_iterations": 400, "learning_rate": 0.5, "early_stopping_round": 3}))
    assert result.model.best_iteration_ < 400  # it stopped early
    assert model_cls.passes == [len(adult.val_idx), len(adult.test_idx)]
    assert result.model.take_validation_proba() is None  # nothing kept beyond the fit


def test_the_kept_validation_scores_are_handed_over_once(adult):
    from pipeline.models.base import FitContext, Placement

    model = XGBoostModel({"num_boost_round": 5})
    model.fit_rows(adult.X, adult.y, adult.train_idx, adult.val_idx, FitContext("binary", 2, Placement(1)))
    assert model.take_validation_proba().shape == (len(adult.val_idx), 2)
    assert model.take_validation_proba() is None
    assert "validation_raw_" not in model.__dict__  # not pickled with the model
    model.fit(adult.X.iloc[adult.train_idx], adult.y[adult.train_idx], adult.X.iloc[adult.val_idx],
              adult.y[adult.val_idx], FitContext("binary", 2, Placement(1)))
    assert model.take_validation_proba() is None  # a user's fit keeps nothing it will not be asked for
