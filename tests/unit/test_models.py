"""What each model kind does of its own (the contract they share: tests/contract/test_model_kinds.py)."""

from pathlib import Path

import pandas as pd
import pytest

from pipeline.config import DataConf
from pipeline.data import load
from pipeline.errors import ConfigError, HardwareError
from pipeline.models import FitContext, LightGBMModel, Placement, TorchMLPModel, XGBoostModel

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def datasets():
    return {"binary": load(DataConf(max_rows=3000), ROOT)}


def fit(cls, data, **extra):
    model = cls({**dict(cls.profile.quick), **extra}, cls.__name__)
    ctx = FitContext(data.problem_type, data.num_classes, Placement(1), seed=0)
    tr, va = data.train_idx, data.val_idx
    return model.fit(data.X.iloc[tr], data.y[tr], data.X.iloc[va], data.y[va], ctx)


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
    model = XGBoostModel({**dict(XGBoostModel.profile.quick), "device": "cuda"}, "xgboost")
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


def test_the_network_takes_quantile_scaling_and_periodic_embeddings_from_its_params(datasets):
    import pickle

    import numpy as np

    data = datasets["binary"]
    plr = fit(TorchMLPModel, data, numeric_scaling="quantile", numeric_embedding="periodic",
              embedding_frequencies=4, numeric_embedding_dim=6)
    plain = fit(TorchMLPModel, data)
    assert plr.encoder_.scaling == "quantile" and plain.encoder_.scaling == "standard"
    module = plr._module()
    assert module.numeric_embedding is not None and plain._module().numeric_embedding is None
    assert module.input_width == len(data.numeric) * 6 + sum(e.embedding_dim for e in module.embeddings)
    rows = data.X.iloc[data.test_idx[:200]]
    predicted = plr.predict_proba(rows)
    assert predicted.shape == (200, 2) and np.allclose(predicted.sum(axis=1), 1.0)
    np.testing.assert_allclose(pickle.loads(pickle.dumps(plr)).predict_proba(rows), predicted, rtol=1e-6)
