"""Saving the run's predictors: a fold model shared by several predictors (its bag, the stacked bags
above it, the ensemble) has its booster serialized once per save, every file loads on its
own, and logging a model sends the bytes the save wrote rather than pickling it again."""

import pickle

import numpy as np
import pytest


@pytest.mark.parametrize("library", ["lightgbm", "xgboost"])
def test_a_booster_in_three_predictors_is_serialized_once_and_each_file_predicts_alone(tmp_path, monkeypatch,
                                                                                        library):
    from pipeline.outputs import save_predictors

    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(300, 4)), rng.integers(0, 2, 300)
    if library == "lightgbm":
        import lightgbm as lgb

        booster = lgb.train({"objective": "binary", "verbosity": -1, "num_threads": 1}, lgb.Dataset(X, y), 5)
        serialize, predict = "model_to_string", lambda b: b.predict(X)
    else:
        import xgboost as xgb

        booster = xgb.train({"objective": "binary:logistic", "nthread": 1}, xgb.DMatrix(X, label=y), 5)
        serialize, predict = "__getstate__", lambda b: b.predict(xgb.DMatrix(X))
    calls = []
    original = getattr(type(booster), serialize)
    monkeypatch.setattr(type(booster), serialize, lambda self, *a, **k: calls.append(1) or original(self, *a, **k))
    predictors = {"bag": {"folds": [booster]}, "bag_l2": {"below": [booster], "own": []},
                  "ensemble": {"members": [{"folds": [booster]}]}}
    saved = save_predictors(tmp_path, predictors, "ensemble")
    assert len(calls) == 1
    expected = predict(booster)
    for name in predictors:
        written = (tmp_path / "predictors" / f"{name}.pkl").read_bytes()
        assert written == saved[name]
        loaded = pickle.loads(written)
        again = loaded["members"][0]["folds"][0] if name == "ensemble" else next(iter(loaded.values()))[0]
        assert type(again) is type(booster) and again is not booster
        np.testing.assert_allclose(predict(again), expected)
    assert (tmp_path / "predictors" / "BEST").read_text() == "ensemble"


def test_logging_a_model_sends_the_bytes_its_save_wrote():
    from pipeline.outputs import _log_models
    from pipeline.tracking.base import NullTracker

    class Recorder(NullTracker):
        sent = {}

        def log_predictor(self, name, predictor, example, metrics=None, pickled=None):
            self.sent[name] = pickled
            return f"models:/{name}"

    class Out:
        register_model = None

    rows = [{"model": "lightgbm", "val_auc": 0.9, "test_auc": 0.8, "fit_seconds": 1.0}]
    saved = {"lightgbm": b"as written"}
    tracker = Recorder()
    _log_models(Out(), {"lightgbm": object()}, saved, rows, "lightgbm", None, tracker)
    assert tracker.sent == {"lightgbm": b"as written"}
