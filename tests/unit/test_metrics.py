"""The metrics agree with scikit-learn's, which they replace for speed."""

import numpy as np
import pytest
from sklearn import metrics as sk

from pipeline.errors import ConfigError
from pipeline.metrics import METRICS, resolve, score_all


@pytest.fixture(params=[2, 4])
def classification(request):
    rng = np.random.default_rng(request.param)
    n, k = 3000, request.param
    y = rng.integers(0, k, n)
    logits = rng.normal(size=(n, k)) + 1.5 * np.eye(k)[y]
    logits[::7] = np.round(logits[::7], 1)  # ties
    p = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    return y, p


def test_roc_auc(classification):
    y, p = classification
    expected = sk.roc_auc_score(y, p[:, 1]) if p.shape[1] == 2 else sk.roc_auc_score(y, p, multi_class="ovr")
    assert METRICS["roc_auc"](y, p) == pytest.approx(expected, abs=1e-12)


def test_roc_auc_with_heavy_ties():
    y = np.array([0, 1, 0, 1, 1, 0, 1, 0])
    p1 = np.array([0.5, 0.5, 0.2, 0.9, 0.5, 0.2, 0.9, 0.9])
    p = np.column_stack([1 - p1, p1])
    assert METRICS["roc_auc"](y, p) == pytest.approx(sk.roc_auc_score(y, p1))


def test_f1_and_balanced_accuracy(classification):
    y, p = classification
    pred = p.argmax(axis=1)
    average = "binary" if p.shape[1] == 2 else "macro"
    assert METRICS["f1"](y, p) == pytest.approx(sk.f1_score(y, pred, average=average))
    assert METRICS["balanced_accuracy"](y, p) == pytest.approx(sk.balanced_accuracy_score(y, pred))
    assert METRICS["accuracy"](y, p) == pytest.approx(sk.accuracy_score(y, pred))
    assert METRICS["log_loss"](y, p) == pytest.approx(sk.log_loss(y, p), rel=1e-9)


def test_regression_metrics():
    rng = np.random.default_rng(0)
    y = rng.normal(size=500)
    pred = y + rng.normal(scale=0.3, size=500)
    assert METRICS["rmse"](y, pred) == pytest.approx(np.sqrt(sk.mean_squared_error(y, pred)))
    assert METRICS["mae"](y, pred) == pytest.approx(sk.mean_absolute_error(y, pred))
    assert METRICS["r2"](y, pred) == pytest.approx(sk.r2_score(y, pred))


def test_roc_auc_on_rows_of_one_class_is_nan_and_still_a_score():
    """Undefined, not an error: a fold or a split of a rare class's table may hold one class, and every
    reader of a score (the board, the search, the ensemble) takes NaN as the worst."""
    y = np.zeros(10, dtype=int)
    p = np.column_stack([np.full(10, 0.7), np.full(10, 0.3)])
    scores = score_all("binary", y, p)
    assert np.isnan(scores["roc_auc"]) and scores["accuracy"] == 1.0
    assert np.isnan(METRICS["roc_auc"](np.zeros(4, dtype=int), np.eye(4)[:, :4]))  # one class of four
    assert METRICS["roc_auc"].loss_of(scores["roc_auc"]) == float("inf")


def test_resolve():
    assert resolve("auto", "binary").name == "roc_auc"
    assert resolve("auto", "regression").name == "rmse"
    with pytest.raises(ConfigError, match="not a regression metric"):
        resolve("accuracy", "regression")


def test_models_are_chosen_by_log_loss_where_the_metric_is_undefined_on_a_holdout_of_one_class(caplog):
    import logging
    from types import SimpleNamespace

    from pipeline.checks import chosen_by

    one_class = SimpleNamespace(problem_type="binary", y=np.array([0, 0, 0, 1, 0]), val_idx=np.array([0, 1, 2]),
                                classes=["no", "yes"])
    with caplog.at_level(logging.WARNING, logger="pipeline"):
        assert chosen_by(METRICS["roc_auc"], one_class, num_folds=1).name == "log_loss"
    assert "eval_metric roc_auc is undefined on the 3 validation rows" in caplog.text
    assert chosen_by(METRICS["roc_auc"], one_class, num_folds=5).name == "roc_auc"  # bags choose out of fold
    assert chosen_by(METRICS["accuracy"], one_class, num_folds=1).name == "accuracy"  # defined on one class
    both = SimpleNamespace(**{**vars(one_class), "val_idx": np.array([2, 3])})
    assert chosen_by(METRICS["roc_auc"], both, num_folds=1).name == "roc_auc"
