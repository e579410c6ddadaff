"""One pass per prediction: a fold's fit scores the test rows once, and its validation rows once, in
training where the library scored them there (LightGBM's and XGBoost's boosters every round, the
network every epoch), else once after it. LightGBM's and XGBoost's rounds after the best one are
taken off their scores by predicting those rounds alone. The passes are counted on the models' `_predict`."""

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


def synthetic(problem: str):
    """3,000 rows x 10 features of a binary, 4-class or regression problem."""
    from sklearn.datasets import make_classification, make_regression

    if problem == "regression":
        return make_regression(3000, 10, noise=5, random_state=0)
    return make_classification(3000, 10, n_informative=6, n_classes=2 if problem == "binary" else 4,
                               random_state=0)


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


def test_rounds_after_the_best_one_are_taken_off_the_booster_s_own_scores(adult):
    model_cls = counting(LightGBMModel)
    result = fold(adult, model_cls({"num_iterations": 400, "learning_rate": 0.5, "early_stopping_round": 3}))
    model = result.model
    assert model.best_iteration_ < 400  # it stopped early, with rounds after the best one
    assert model_cls.passes == [len(adult.test_idx)]  # no full pass over the validation rows
    np.testing.assert_allclose(result.val_pred, model.predict_proba(adult.X.iloc[result.held_out]), rtol=0,
                               atol=1e-12)
    assert model.take_validation_proba() is None  # nothing kept beyond the fit


def test_an_objective_of_another_link_predicts_the_validation_rows_once_after_the_fit(adult):
    """cross_entropy's scores are not undone through a link the engine knows: the rows are predicted
    again, once."""
    model_cls = counting(LightGBMModel)
    params = {"objective": "cross_entropy", "num_iterations": 400, "learning_rate": 0.5, "early_stopping_round": 3}
    result = fold(adult, model_cls(params))
    assert result.model.best_iteration_ < 400
    assert model_cls.passes == [len(adult.val_idx), len(adult.test_idx)]
    np.testing.assert_array_equal(result.val_pred, result.model.predict_proba(adult.X.iloc[result.held_out]))


@pytest.mark.parametrize("problem", ["binary", "multiclass", "regression"])
def test_taking_rounds_off_gives_the_kept_model_s_predictions(problem):
    import lightgbm as lgb

    from pipeline.models.lightgbm import _kept_validation_scores

    X, y = synthetic(problem)
    params = {"objective": problem, "verbosity": -1, "learning_rate": 0.5, "early_stopping_round": 5,
              "num_iterations": 300, **({"num_class": 4} if problem == "multiclass" else {})}
    train = lgb.Dataset(X[:2000], y[:2000])
    booster = lgb.train(params, train, valid_sets=[lgb.Dataset(X[2000:], y[2000:], reference=train)],
                        keep_training_booster=True)
    best = booster.best_iteration
    assert 0 < best < booster.current_iteration()
    kept = _kept_validation_scores(booster, best, params, lambda: X[2000:])
    np.testing.assert_allclose(kept, booster.predict(X[2000:], num_iteration=best), rtol=1e-12, atol=1e-12)


def test_a_saturated_score_is_not_taken_apart():
    from pipeline.models.lightgbm import without_rounds

    np.testing.assert_allclose(without_rounds(np.array([0.5, 0.75]), np.array([0.0, np.log(3.0)]), "sigmoid"),
                               [0.5, 0.5])
    assert without_rounds(np.array([0.5, 1.0]), np.array([0.0, 1.0]), "sigmoid") is None
    assert without_rounds(np.array([[0.5, 0.5, 0.0]]), np.zeros((1, 3)), "softmax") is None
    np.testing.assert_allclose(without_rounds(np.array([3.0]), np.array([1.0]), "identity"), [2.0])


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


@pytest.mark.parametrize("problem", ["binary", "multiclass", "regression"])
def test_xgboost_takes_the_rounds_after_the_best_one_off_its_cached_scores(problem):
    import pandas as pd

    from pipeline.models.base import FitContext, Placement

    X, y = synthetic(problem)
    X = pd.DataFrame(X.astype(np.float32), columns=[f"c{i}" for i in range(10)])
    summed = []
    model_cls = type("Counted", (XGBoostModel,), {
        "_predict_matrix": lambda self, matrix: summed.append(matrix) or XGBoostModel._predict_matrix(self, matrix)})
    model = model_cls({"num_boost_round": 300, "early_stopping_rounds": 5, "learning_rate": 0.5})
    classes = {"binary": 2, "multiclass": 4, "regression": 0}[problem]
    model.fit_rows(X, y, np.arange(2000), np.arange(2000, 3000), FitContext(problem, classes, Placement(1)))
    assert model.best_iteration_ + 1 < model.booster_.num_boosted_rounds()  # rounds after the best one
    kept = model.take_validation_proba()
    assert summed == []  # the kept rounds were not summed again over the validation rows
    reference = model.predict_proba(X.iloc[2000:])
    np.testing.assert_allclose(kept, reference, rtol=1e-5, atol=1e-6 * np.abs(reference).max())


def test_xgboost_sums_the_kept_rounds_again_for_an_objective_of_another_link(adult):
    from pipeline.models.base import FitContext, Placement

    model = XGBoostModel({"objective": "binary:hinge", "num_boost_round": 300, "early_stopping_rounds": 3,
                          "learning_rate": 0.5})
    model.fit_rows(adult.X, adult.y, adult.train_idx, adult.val_idx, FitContext("binary", 2, Placement(1)))
    assert model.best_iteration_ + 1 < model.booster_.num_boosted_rounds()
    np.testing.assert_array_equal(model.take_validation_proba(), model.predict_proba(adult.X.iloc[adult.val_idx]))


def test_a_fold_scores_its_rows_on_its_own_cpus_and_keeps_no_thread_count(adult):
    """A fit granted two CPUs predicted its held-out and test rows on one (scikit-learn's kinds) or on every
    core of the box (the boosters): Adult's k-nearest-neighbours bag spent 11.6 s of its 22 s predicting the
    test rows on one of two CPUs. The count is the fit's while it scores, and not saved with the model: a
    logged model is served where `place()` is never called."""
    from pipeline.models.knn import KNeighborsModel

    seen = []

    class Recording(KNeighborsModel):
        def _predict(self, X):
            seen.append(getattr(self, "predict_threads_", None))
            return super()._predict(X)

    request = FitRequest(
        task_id="fit/m/t0/f0", key="k", model=Recording({"n_neighbors": 10}, "knn"), params={},
        model_name="m", trial=0, fold=0, num_folds=1, fold_seed=0, seed=0, eval_metric="roc_auc", num_cpus=2,
        gpu_ids=(), gpu_shares=(Fraction(0),), data=DataRef(obj=adult),
    )
    result = run_fit(request)
    assert seen == [2]  # the test rows (the validation rows were scored while it fitted)
    assert "predict_threads_" not in result.model.__dict__
    result.model.place("cpu", 3)
    with result.model.predicting_on(1):
        assert result.model.predict_threads_ == 1
    assert result.model.predict_threads_ == 3  # a placed model keeps its placement
