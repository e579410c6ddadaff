"""The regularised linear model (scikit-learn's LogisticRegression and Ridge), a CPU-only kind: the
conformance suite, and what it does of its own: a penalty path that stops where the validation loss
flattens or the deadline comes, a refit at the penalty its folds kept, encoded numbers and categories."""

import time

import numpy as np
import pandas as pd
import pytest

from pipeline.errors import ConfigError
from pipeline.models.base import FitContext, Placement
from pipeline.models.linear import LinearModel, _path
from pipeline.testing.model_conformance import ModelKindConformance


class TestLinear(ModelKindConformance):
    model_class = LinearModel
    config = "linear"
    typo = ("path_lenght", "path_length")

    def test_the_path_stops_after_steps_that_gain_nothing_and_keeps_its_best(self, datasets):
        data = datasets["binary"]
        ctx = FitContext(data.problem_type, data.num_classes, Placement(1), seed=0)
        model = LinearModel({"path_length": 25, "patience": 2}, "lin").fit_rows(
            data.X, data.y, data.train_idx, data.val_idx, ctx)
        losses = model.history_["valid_loss"]
        assert len(losses) == model.step_ + 2 < 25  # the best step, then two that did not gain enough
        assert losses[model.step_ - 1] == min(losses)
        path = _path({"c_min": 1e-4, "c_max": 1e4, "path_length": 25})
        assert model.model_.C == pytest.approx(path[model.step_ - 1])
        # the validation scores the fit handed over are the kept step's, not the last one's
        held = model.predict_proba(data.X.iloc[data.val_idx])
        np.testing.assert_allclose(model.take_validation_proba(), held)

    def test_a_deadline_stops_the_path_after_its_first_step(self, datasets):
        data = datasets["regression"]
        ctx = FitContext(data.problem_type, data.num_classes, Placement(1), seed=0, deadline=time.time() - 1)
        model = LinearModel({}, "lin").fit_rows(data.X, data.y, data.train_idx, data.val_idx, ctx)
        assert ctx.stopped_by_budget and len(model.history_["valid_loss"]) == 1
        assert np.isfinite(model.predict_proba(data.X.iloc[data.test_idx])).all()

    def test_a_refit_fits_once_at_the_penalty_its_folds_kept(self, datasets):
        data = datasets["regression"]
        ctx = FitContext(data.problem_type, data.num_classes, Placement(1), seed=0)
        folds = [LinearModel({}, "lin").fit_rows(data.X, data.y, data.train_idx, data.val_idx, ctx)]
        params = folds[0].refit_params(folds)
        kept = 1.0 / folds[0].model_.alpha
        assert params == {"path_length": 1, "c_min": pytest.approx(kept), "c_max": pytest.approx(kept)}
        rows = np.concatenate([data.train_idx, data.val_idx])
        refit = LinearModel(params, "lin").fit(data.X.iloc[rows], data.y[rows], data.X.iloc[[]], data.y[[]],
                                               ctx)
        assert refit.model_.alpha == pytest.approx(1.0 / kept)

    def test_a_solver_stopped_at_max_iter_is_said_once_a_run_not_warned_at_every_fit(self, datasets,
                                                                                     caplog, monkeypatch):
        """scikit-learn's ConvergenceWarning printed ten lines to the terminal at each unconverged fit of a
        search's folds; the run's log says it once."""
        import logging
        import warnings

        monkeypatch.setattr("pipeline.said_once._said", set())
        data = datasets["multiclass"]
        ctx = FitContext(data.problem_type, data.num_classes, Placement(1), seed=0)
        with warnings.catch_warnings(), caplog.at_level(logging.INFO, logger="pipeline.models.linear"):
            warnings.simplefilter("error")  # any warning escaping the fit fails it
            for _ in range(2):
                LinearModel({"max_iter": 2, "path_length": 3}, "lin").fit_rows(
                    data.X, data.y, data.train_idx, data.val_idx, ctx)
        said = [r.getMessage() for r in caplog.records if "max_iter=2" in r.getMessage()]
        assert len(said) == 1
        assert said[0].startswith("lin: the solver stopped at max_iter=2 before converging")
        assert said[0].endswith("model.lin.params.max_iter raises the cap")

    def test_missing_infinite_and_unseen_values_and_rare_categories(self, datasets):
        data = datasets["multiclass"]
        X = data.X.copy()
        number = next(c for c in X.columns if X[c].dtype.kind == "f")
        category = next(c for c in X.columns if X[c].dtype.name == "category")
        X.loc[X.index[::5], number] = np.nan
        X.loc[X.index[1], number] = np.inf
        ctx = FitContext(data.problem_type, data.num_classes, Placement(1), seed=0)
        model = LinearModel({"numeric": "quantile", "min_frequency": 30}, "lin").fit_rows(
            X, data.y, data.train_idx, data.val_idx, ctx)
        test = X.iloc[data.test_idx].copy()
        test[category] = pd.Categorical([None] * len(test), categories=X[category].cat.categories)
        proba = model.predict_proba(test)
        assert np.isfinite(proba).all() and proba.shape == (len(test), data.num_classes)
        importance = model.feature_importance()
        assert set(importance) == {str(c) for c in X.columns} and importance[number] > 0

    def test_numbers_on_a_spline_basis_learn_a_curve_a_line_cannot(self):
        """`numeric: spline` spreads each number on a cubic B-spline basis: an additive model of curves. A
        class set by |x| > 1 is beyond a line in x, within the curve; a missing, an infinite and an unseen
        far value are answered, flat past the training range."""
        from sklearn.metrics import roc_auc_score

        rng = np.random.default_rng(0)
        X = pd.DataFrame({"x": rng.normal(size=1200), "noise": rng.normal(size=1200)})
        y = (X["x"].abs() > 1).to_numpy().astype(np.int64)
        ctx = FitContext("binary", 2, Placement(1), seed=0)
        train, held = np.arange(800), np.arange(800, 1000)
        scores = {}
        for numeric in ("standard", "spline"):
            model = LinearModel({"numeric": numeric}, "lin").fit_rows(X, y, train, held, ctx)
            scores[numeric] = roc_auc_score(y[1000:], model.predict_proba(X.iloc[1000:])[:, 1])
        assert scores["standard"] < 0.65 and scores["spline"] > 0.95
        odd = pd.DataFrame({"x": [np.nan, np.inf, 50.0, -50.0], "noise": [0.0, 0.0, 0.0, 0.0]})
        proba = model.predict_proba(odd)
        assert np.isfinite(proba).all() and proba[2, 1] > 0.5 and proba[3, 1] > 0.5

    def test_a_slice_of_float64_columns_is_fitted_without_writing_into_it(self):
        """pandas' copy-on-write hands a float64 column's own values out read-only: cleaning them in place
        raised 'assignment destination is read-only' on a slice of a frame."""
        rng = np.random.default_rng(0)
        X = pd.DataFrame({"a": rng.normal(size=200), "b": rng.normal(size=200)})
        X.loc[3, "a"] = np.inf
        y = 2.0 * X["b"].to_numpy()
        ctx = FitContext("regression", None, Placement(1), seed=0)
        model = LinearModel({}, "lin").fit(X.iloc[:150], y[:150], X.iloc[150:], y[150:], ctx)
        assert np.isfinite(model.predict(X.iloc[150:])).all() and X.loc[3, "a"] == np.inf

    def test_parameters_out_of_range_are_refused_naming_what_is_valid(self):
        with pytest.raises(ConfigError, match=r"numeric='log' must be one of standard, quantile, spline"):
            LinearModel.check_params("lin", {"numeric": "log"}, "binary")
        with pytest.raises(ConfigError, match=r"model.lin.params.c_min=100.0 is above c_max=1.0"):
            LinearModel.check_params("lin", {"c_min": 100.0, "c_max": 1.0}, "binary")
        with pytest.raises(ConfigError, match=r"model.lin.params.patience=0 must be a whole number >= 1"):
            LinearModel.check_params("lin", {"patience": 0}, "binary")

    def test_its_solvers_and_predictions_run_on_one_blas_thread(self, monkeypatch, datasets):
        """Tall, thin products on two OpenBLAS threads made a 10-class path ten times slower than on one (the
        module's docstring): the fit and the prediction see one BLAS thread whatever the process has, and
        the process's count comes back after them."""
        from sklearn.linear_model import LogisticRegression
        from threadpoolctl import threadpool_info, threadpool_limits

        def blas_threads():
            return {pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"}

        seen = []

        def spy(method):
            def call(estimator, *args, **kwargs):
                seen.append(blas_threads())
                return method(estimator, *args, **kwargs)
            return call

        monkeypatch.setattr(LogisticRegression, "fit", spy(LogisticRegression.fit))
        monkeypatch.setattr(LogisticRegression, "predict_proba", spy(LogisticRegression.predict_proba))
        data = datasets["multiclass"]
        with threadpool_limits(limits=2, user_api="blas"):
            assert blas_threads() == {2}
            ctx = FitContext(data.problem_type, data.num_classes, Placement(2), seed=0)
            model = LinearModel({}, "lin").fit_rows(data.X, data.y, data.train_idx, data.val_idx, ctx)
            model.predict_proba(data.X.iloc[data.test_idx])
            assert blas_threads() == {2}
        assert len(seen) > 3 and all(threads == {1} for threads in seen)
