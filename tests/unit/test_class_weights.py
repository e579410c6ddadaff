"""Class weights (data.class_weight=balanced): the arithmetic, each model kind fitting with them through the
one place every fit passes (run_fit), the cache key, and the typed error for a regression label."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

from pipeline import class_weights
from pipeline.data import TabularData
from pipeline.errors import ConfigError
from pipeline.graph.tasks import DataRef, FitRequest, run_fit, task_key
from pipeline.models import LightGBMModel, TorchMLPModel, XGBoostModel


def test_balanced_weights_are_rows_over_classes_times_class_rows():
    y = np.array([0] * 90 + [1] * 10)
    weights = class_weights.balanced(y, 2)
    assert weights == pytest.approx([100 / (2 * 90), 100 / (2 * 10)])
    rows, val = class_weights.row_weights("balanced", y, np.array([1, 0, 1]), 2)
    assert rows.sum() == pytest.approx(len(y))  # each class's rows weigh n / k together
    assert rows[y == 0].sum() == pytest.approx(50) and rows[y == 1].sum() == pytest.approx(50)
    assert val == pytest.approx([5.0, 100 / 180, 5.0])  # validation rows: the training rows' class weights


def test_multiclass_weights_and_a_class_absent_from_the_training_rows():
    y = np.array([0] * 6 + [1] * 3 + [3] * 1)  # class 2 has no training row
    weights = class_weights.balanced(y, 4)
    assert weights == pytest.approx([10 / (3 * 6), 10 / (3 * 3), 1.0, 10 / (3 * 1)])


def test_none_gives_no_weights():
    assert class_weights.row_weights("none", np.array([0, 1, 1]), np.array([0]), 2) == (None, None)


def test_a_regression_label_with_class_weights_is_a_config_error_naming_key_value_and_the_valid_one():
    with pytest.raises(ConfigError, match=r"data.class_weight=balanced .*regression.*data.class_weight=none"):
        class_weights.check("balanced", "regression")
    class_weights.check("none", "regression")
    class_weights.check("balanced", "binary")
    with pytest.raises(ConfigError, match=r"data.class_weight='even' is not one of none, balanced"):
        class_weights.check("even", None)


def test_the_option_composes_and_is_checked_in_the_schema(compose):
    from pipeline.settings import read_settings

    from pipeline.tracking.naming import comparable_params

    settings = read_settings(compose(["data.class_weight=balanced"]))
    assert settings.conf.data.class_weight == "balanced"
    logged = comparable_params(settings.params, ["lightgbm"], {}, False, "bundled")
    assert logged["data.class_weight"] == "balanced"  # an MLflow param of the run
    assert read_settings(compose([])).conf.data.class_weight == "none"
    with pytest.raises(ConfigError, match="data.class_weight"):
        read_settings(compose(["data.class_weight=balanced", "data.problem_type=regression"]))


def test_class_weights_change_the_cache_key_and_leave_other_keys_as_they_were():
    model = LightGBMModel({}, "lightgbm")
    args = dict(fingerprint="d", model=model, params={}, fold=0, num_folds=1, fold_seed=0, seed=0,
                eval_metric="auc")
    assert task_key(**args) == task_key(**args, class_weight="none")
    assert task_key(**args) != task_key(**args, class_weight="balanced")


def rare_table(n=3000, seed=0) -> TabularData:
    """5% positives that the features separate only weakly: at 0.5 an unweighted model predicts few."""
    rng = np.random.default_rng(seed)
    X = pd.DataFrame(rng.normal(size=(n, 5)), columns=[f"x{i}" for i in range(5)])
    logit = -4.5 + 1.5 * X["x0"] + 1.0 * X["x1"]
    y = (rng.random(n) < 1 / (1 + np.exp(-logit.to_numpy()))).astype(np.int64)
    order = rng.permutation(n)
    return TabularData(X, y, "binary", "y", classes=[0, 1], numeric=list(X.columns), train_idx=order[:1800],
                       val_idx=order[1800:2400], test_idx=order[2400:], fingerprint=f"rare{seed}")


KINDS = {
    LightGBMModel: {"learning_rate": 0.05, "num_iterations": 300, "early_stopping_round": 30,
                    "verbosity": -1},
    XGBoostModel: {"eta": 0.05, "num_boost_round": 300, "early_stopping_rounds": 30},
    TorchMLPModel: {"max_epochs": 8, "batch_size": 128, "hidden_sizes": [32], "device": "cpu"},
}


def fit_proba(cls, data, class_weight: str, eval_metric: str = "roc_auc"):
    """The test rows' probabilities of one fit through run_fit, as every fit of a run is made."""
    request = FitRequest(
        task_id="fit/m/t0/f0", key="k", model=cls(KINDS[cls], cls.__name__), params={}, model_name="m",
        trial=0, fold=0, num_folds=1, fold_seed=0, seed=0, eval_metric=eval_metric, num_cpus=1, gpu_ids=(),
        gpu_shares=(Fraction(0),), data=DataRef(obj=data), class_weight=class_weight,
    )
    return run_fit(request).test_pred


def positive_rate(cls, data, class_weight: str) -> float:
    return float((fit_proba(cls, data, class_weight)[:, 1] >= 0.5).mean())


@pytest.fixture(scope="module")
def rare():
    return rare_table()


@pytest.mark.parametrize("cls", list(KINDS), ids=lambda c: c.__name__)
def test_each_model_kind_fits_with_the_weights_and_predicts_the_rare_class_far_more_often(cls, rare):
    base_rate = rare.y.mean()
    unweighted = positive_rate(cls, rare, "none")
    balanced = positive_rate(cls, rare, "balanced")
    assert unweighted < base_rate  # the common class almost everywhere at 0.5
    assert balanced > 2 * base_rate  # weighted to balance: the rare class at 0.5 far more often


def test_the_libraries_hold_the_weights(rare, monkeypatch):
    """LightGBM's Dataset and XGBoost's matrices hold each row's weight, the validation rows' too."""
    import lightgbm as lgb
    import xgboost as xgb

    seen = {}
    for module, name in ((lgb, "Dataset"), (xgb, "QuantileDMatrix"), (xgb, "DMatrix")):
        original = getattr(module, name)

        def recording(*args, _original=original, _name=name, **kwargs):
            seen.setdefault(_name, []).append(kwargs.get("weight"))
            return _original(*args, **kwargs)

        monkeypatch.setattr(module, name, recording)
    positive_rate(LightGBMModel, rare, "balanced")
    positive_rate(XGBoostModel, rare, "balanced")
    expected = class_weights.balanced(rare.y[rare.train_idx], 2)
    train_weights, val_weights = seen["Dataset"]
    assert train_weights == pytest.approx(expected[rare.y[rare.train_idx]])
    assert val_weights == pytest.approx(expected[rare.y[rare.val_idx]])
    assert seen["QuantileDMatrix"][0] == pytest.approx(expected[rare.y[rare.train_idx]])
    assert seen["DMatrix"][0] == pytest.approx(expected[rare.y[rare.val_idx]])


def test_a_multiclass_label_is_weighted_too():
    """Three classes, the third 4% of the rows: weighted, the boosters predict it far more often."""
    rng = np.random.default_rng(3)
    n = 3000
    X = pd.DataFrame(rng.normal(size=(n, 4)), columns=list("abcd"))
    y = np.where(X["a"] + rng.normal(0, 0.8, n) > 2.2, 2, (X["b"] > 0).astype(int)).astype(np.int64)
    order = rng.permutation(n)
    data = TabularData(X, y, "multiclass", "y", classes=[0, 1, 2], numeric=list(X.columns),
                       train_idx=order[:1800], val_idx=order[1800:2400], test_idx=order[2400:],
                       fingerprint="multi")
    for cls in (LightGBMModel, XGBoostModel):
        rates = {}
        for weight in ("none", "balanced"):
            proba = fit_proba(cls, data, weight, "accuracy")
            rates[weight] = float((proba.argmax(axis=1) == 2).mean())
        assert rates["balanced"] > 1.5 * max(rates["none"], 0.01), (cls.__name__, rates)
