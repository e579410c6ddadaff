"""The model conformance suite: every model honours the same contract on three problem types."""

import pickle
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipeline import metrics
from pipeline.config import DataConf
from pipeline.data import load
from pipeline.errors import ConfigError, HardwareError
from pipeline.models import FitContext, LightGBMModel, Placement, TorchMLPModel, XGBoostModel

ROOT = Path(__file__).resolve().parents[2]

FAST = {
    LightGBMModel: {"num_iterations": 200, "early_stopping_round": 10, "learning_rate": 0.2, "verbosity": -1},
    XGBoostModel: {"num_boost_round": 200, "early_stopping_rounds": 10, "eta": 0.2},
    TorchMLPModel: {"max_epochs": 4, "patience": 2, "batch_size": 128, "hidden_sizes": [32, 16], "learning_rate": 0.01},
}
MODELS = list(FAST)


@pytest.fixture(scope="module")
def datasets():
    return {
        "binary": load(DataConf(max_rows=3000), ROOT),
        "multiclass": load(DataConf(name="s", _target_="pipeline.data_sources.SyntheticSource", rows=1500, features=8, classes=3,
                                    categorical_features=2), ROOT),
        "regression": load(DataConf(name="c", path="california_housing", label="MedHouseVal", max_rows=2000), ROOT),
    }


def fit(cls, data, **extra):
    model = cls({**FAST[cls], **extra}, cls.__name__)
    ctx = FitContext(data.problem_type, data.num_classes, Placement(1), seed=0)
    tr, va = data.train_idx, data.val_idx
    return model.fit(data.X.iloc[tr], data.y[tr], data.X.iloc[va], data.y[va], ctx)


@pytest.mark.parametrize("cls", MODELS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("problem", ["binary", "multiclass", "regression"])
class TestConformance:
    def test_fit_returns_self_and_predicts(self, datasets, cls, problem):
        data = datasets[problem]
        model = fit(cls, data)
        X_test, y_test = data.X.iloc[data.test_idx], data.y[data.test_idx]
        proba = model.predict_proba(X_test)
        if problem == "regression":
            assert proba.shape == (len(X_test),)
            assert metrics.METRICS["r2"](y_test, proba) > 0.3
        else:
            assert proba.shape == (len(X_test), data.num_classes)
            np.testing.assert_allclose(proba.sum(axis=1), 1.0, atol=1e-5)
            assert set(np.unique(model.predict(X_test))) <= set(range(data.num_classes))
            assert metrics.METRICS["accuracy"](y_test, proba) > 1.0 / data.num_classes + 0.1
        assert model.fit_seconds_ > 0
        assert model.device_ == "cpu"

    def test_pickles_and_predicts_the_same(self, datasets, cls, problem):
        data = datasets[problem]
        model = fit(cls, data)
        X = data.X.iloc[data.test_idx[:50]]
        again = pickle.loads(pickle.dumps(model))
        np.testing.assert_allclose(again.predict_proba(X), model.predict_proba(X), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("cls", MODELS, ids=lambda c: c.__name__)
class TestContract:
    def test_clone_is_unfitted_and_independent(self, datasets, cls):
        model = fit(cls, datasets["binary"])
        twin = model.clone()
        assert not hasattr(twin, "fit_seconds_")
        assert twin.params == model.params and twin.params is not model.params
        with pytest.raises(RuntimeError, match="not fitted"):
            twin.predict(datasets["binary"].X.iloc[:5])

    def test_early_stopping_on_validation(self, datasets, cls):
        model = fit(cls, datasets["binary"])
        if cls is TorchMLPModel:
            assert 0 <= model.best_epoch_ < 4
            assert len(model.history_["val_loss"]) >= 1
        else:
            assert model.best_iteration_ < 199  # stopped before the cap
            assert model.history_

    def test_unknown_parameter_names_the_closest(self, cls):
        typo = {LightGBMModel: "num_leavs", XGBoostModel: "max_dept", TorchMLPModel: "dropuot"}[cls]
        right = {LightGBMModel: "num_leaves", XGBoostModel: "max_depth", TorchMLPModel: "dropout"}[cls]
        with pytest.raises(ConfigError, match=rf"model\.m\.params\.{typo} .*did you mean '{right}'"):
            cls.check_params("m", {typo: 3}, "binary")

    def test_known_parameters_pass(self, cls):
        cls.check_params("m", FAST[cls], "binary")

    def test_same_seed_same_predictions(self, datasets, cls):
        data = datasets["binary"]
        X = data.X.iloc[data.test_idx[:100]]
        a, b = fit(cls, data), fit(cls, data)
        np.testing.assert_allclose(a.predict_proba(X), b.predict_proba(X), rtol=1e-6)


def test_categoricals_stay_categorical(datasets):
    data = datasets["binary"]
    assert len(data.categorical) == 8
    lgb = fit(LightGBMModel, data)
    dumped = lgb.booster_.dump_model()
    assert len(dumped["pandas_categorical"]) == 8  # native categorical features
    nn = fit(TorchMLPModel, data)
    assert len(nn.encoder_.categorical) == 8
    assert nn.spec_.cardinalities == tuple(len(data.X[c].cat.categories) + 1 for c in data.categorical)
    xgb = fit(XGBoostModel, data)
    assert "c" in set(xgb.booster_.feature_types)  # XGBoost's categorical feature type


def test_gpu_requests_follow_the_library_params():
    assert LightGBMModel.gpu_request({"device_type": "gpu"})[:2] == (True, True)
    assert LightGBMModel.gpu_request({})[:2] == (False, False)
    assert XGBoostModel.gpu_request({"device": "cuda:1"})[:2] == (True, True)
    assert XGBoostModel.gpu_request({"device": "cpu"})[:2] == (False, False)
    assert TorchMLPModel.gpu_request({"device": "auto"})[:2] == (True, False)
    assert TorchMLPModel.gpu_request({"device": "cuda"})[:2] == (True, True)


def test_xgboost_silent_cpu_fallback_is_an_error(datasets):
    """XGBoost with device=cuda and no visible GPU trains on the CPU with a warning; the engine refuses."""
    data = datasets["binary"]
    model = XGBoostModel({**FAST[XGBoostModel], "device": "cuda"}, "xgboost")
    ctx = FitContext(data.problem_type, 2, Placement(1, gpu_ids=(0,), local_gpus=(0,)), seed=0)
    tr, va = data.train_idx, data.val_idx
    try:
        import torch

        if torch.cuda.is_available():
            pytest.skip("a GPU is visible: XGBoost does train on it")
    except ImportError:
        pass
    with pytest.raises(HardwareError, match="trained on the CPU"):
        model.fit(data.X.iloc[tr], data.y[tr], data.X.iloc[va], data.y[va], ctx)


def test_lightgbm_without_gpu_support_names_the_fix():
    with pytest.raises(HardwareError) as info:
        LightGBMModel.check_environment("lightgbm", {"device_type": "cuda"})
    text = str(info.value)
    assert "--config-settings=cmake.define.USE_CUDA=ON" in text and "--no-binary lightgbm" in text
    assert "--install-option" not in text


def test_network_rejects_fp16_on_cpu():
    from pipeline.resources import Resources

    with pytest.raises(ConfigError, match="16-mixed needs a CUDA device"):
        TorchMLPModel.check_placement("nn", {"precision": "16-mixed"}, Resources(2))


def test_unseen_category_at_predict_time_is_missing(datasets):
    data = datasets["binary"]
    model = fit(LightGBMModel, data)
    X = data.X.iloc[data.test_idx[:3]].copy()
    X["workclass"] = pd.Categorical([None] * 3, categories=X["workclass"].cat.categories)
    assert model.predict_proba(X).shape == (3, 2)
