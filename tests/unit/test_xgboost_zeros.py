"""XGBoost's zero_as_missing: numeric zeros reach the library as missing values, in training and in
prediction, so a split may send them to either side; categorical, boolean and missing values are kept."""

import numpy as np
import pandas as pd
import pytest

from pipeline.errors import ConfigError
from pipeline.models import FitContext, Placement, XGBoostModel
from pipeline.models.xgboost import zeros_as_missing


def test_numeric_zeros_become_missing_and_nothing_else_changes():
    X = pd.DataFrame({
        "gain": np.array([0.0, 1.5, np.nan, 0.0], dtype=np.float32),
        "age": [30, 0, 41, 52],
        "count": pd.array([0, None, 2, 3], dtype="Int64"),
        "kind": pd.Categorical(["a", "b", "a", "b"]),
        "flag": [True, False, True, False],
        "hours": np.array([40.0, 38.0, 45.0, 50.0]),
    })
    before = X.copy()
    out = zeros_as_missing(X)
    pd.testing.assert_frame_equal(X, before)  # the caller's frame is untouched
    np.testing.assert_array_equal(out["gain"], np.array([np.nan, 1.5, np.nan, np.nan], dtype=np.float32))
    np.testing.assert_array_equal(out["age"], np.array([30, np.nan, 41, 52], dtype=np.float32))
    np.testing.assert_array_equal(out["count"], np.array([np.nan, np.nan, 2, 3], dtype=np.float32))
    assert out["gain"].dtype == np.float32
    pd.testing.assert_series_equal(out["kind"], X["kind"])
    pd.testing.assert_series_equal(out["flag"], X["flag"])
    # no zero: the same values, in XGBoost's float32 like every numeric column (one block for the library)
    np.testing.assert_array_equal(out["hours"], X["hours"].to_numpy(np.float32))
    assert list(out.columns) == list(X.columns) and out.index.equals(X.index)


def test_a_frame_without_zeros_is_passed_as_is():
    X = pd.DataFrame({"a": np.array([1.0, 2.0], dtype=np.float32), "b": pd.Categorical(["x", "y"])})
    assert zeros_as_missing(X) is X


def _stump(zero_as_missing: bool, X, y):
    params = {"num_boost_round": 1, "early_stopping_rounds": None, "max_depth": 1, "eta": 1.0,
              "zero_as_missing": zero_as_missing}
    return XGBoostModel(params, "xgboost").fit(X, y, X, y, FitContext("binary", 2, Placement(1), seed=0))


def test_one_split_can_put_the_zeros_with_the_large_values():
    """Label 1 for x == 0 or x > 5: one split separates that only when zeros may go to either side."""
    rng = np.random.default_rng(0)
    x = np.where(rng.random(2000) < 0.5, 0.0, rng.uniform(0.1, 10.0, 2000)).astype(np.float32)
    y = ((x == 0) | (x > 5)).astype(int)
    X = pd.DataFrame({"x": x})
    accuracy = {flag: float(((_stump(flag, X, y).predict_proba(X)[:, 1] > 0.5) == y).mean()) for flag in (True, False)}
    assert accuracy[True] > 0.99, accuracy  # all but the rows in the histogram bin at 5
    assert accuracy[False] < 0.8, accuracy


def test_prediction_reads_the_zeros_as_training_did():
    import xgboost as xgb

    rng = np.random.default_rng(1)
    x = np.where(rng.random(2000) < 0.5, 0.0, rng.uniform(0.1, 10.0, 2000)).astype(np.float32)
    y = ((x == 0) | (x > 5)).astype(int)
    X = pd.DataFrame({"x": x})
    model = _stump(True, X, y)
    as_missing = model.booster_.predict(xgb.DMatrix(zeros_as_missing(X)))
    as_values = model.booster_.predict(xgb.DMatrix(X))
    assert not np.allclose(as_missing, as_values)  # the two readings differ on this data
    np.testing.assert_allclose(model.predict_proba(X)[:, 1], as_missing)


def test_the_setting_must_be_a_boolean():
    with pytest.raises(ConfigError, match=r"model\.xgboost\.params\.zero_as_missing='yes' must be true or false"):
        XGBoostModel.check_params("xgboost", {"zero_as_missing": "yes"}, "binary")
    XGBoostModel.check_params("xgboost", {"zero_as_missing": False, "max_depth": 3}, "binary")


def test_a_folds_rows_are_taken_once():
    """The fold's frame with its zeros as missing values costs one copy of its rows (tracemalloc sees
    numpy's buffers), not the rows' copy and then a changed copy of each column, and its numbers are one
    block, as XGBoost reads a frame's rows fastest and without a copy of its own."""
    import tracemalloc

    rng = np.random.default_rng(2)
    n, k = 200_000, 8
    X = pd.DataFrame({f"f{i}": np.where(rng.random(n) < 0.3, 0, rng.random(n)).astype(np.float32) for i in range(k)})
    X["kind"] = pd.Categorical(rng.integers(0, 3, n))
    rows = np.sort(rng.choice(n, n // 2, replace=False))
    expected = zeros_as_missing(X.iloc[rows])
    fold_bytes = len(rows) * k * 4
    tracemalloc.start()
    try:
        out = zeros_as_missing(X, rows)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    pd.testing.assert_frame_equal(out, expected)
    assert peak < 1.5 * fold_bytes, (peak, fold_bytes)
    assert out._mgr.nblocks == 2  # the numbers' float32 block and the categorical column  # the rows once, their index (8 bytes a row), a mask
