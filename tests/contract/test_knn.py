"""k nearest neighbours (scikit-learn's NearestNeighbors), a CPU-only kind: the conformance suite, and
what it does of its own: the number of neighbours and their weighting chosen on the validation rows, a
row repeated from the training rows answered by its copies, probabilities that are never 0."""

import numpy as np
import pandas as pd
import pytest

from pipeline.errors import ConfigError
from pipeline.models.base import FitContext, Placement
from pipeline.models.fold_loss import validation_loss
from pipeline.models.knn import KNeighborsModel, ladder, neighbour_weights
from pipeline.testing.model_conformance import ModelKindConformance


class TestKNeighbors(ModelKindConformance):
    model_class = KNeighborsModel
    config = "knn"
    typo = ("n_neighbours", "n_neighbors")

    def test_the_fit_keeps_the_neighbours_and_weighting_of_the_lowest_validation_loss(self, datasets):
        data = datasets["binary"]
        ctx = FitContext(data.problem_type, data.num_classes, Placement(1), seed=0)
        model = KNeighborsModel({"n_neighbors": 60}, "knn").fit_rows(
            data.X, data.y, data.train_idx, data.val_idx, ctx)
        assert model.history_["valid_loss"] and len(model.history_["valid_loss"]) == len(ladder(60))
        held = data.X.iloc[data.val_idx]
        y_val = data.y[data.val_idx]
        kept = validation_loss(y_val, model.predict_proba(held), "binary")
        assert kept == pytest.approx(min(model.history_["valid_loss"]))
        for k in ladder(60):
            for weighting in ("uniform", "distance"):
                other = KNeighborsModel({"n_neighbors": k, "weights": weighting}, "knn").fit(
                    data.X.iloc[data.train_idx], data.y[data.train_idx], data.X.iloc[[]], data.y[[]], ctx)
                assert validation_loss(y_val, other.predict_proba(held), "binary") >= kept - 1e-12
        np.testing.assert_allclose(model.take_validation_proba(), model.predict_proba(held))

    def test_a_repeated_row_is_answered_by_its_copies_under_distance_weights(self):
        rng = np.random.default_rng(0)
        X = pd.DataFrame({"a": rng.normal(size=400), "b": rng.normal(size=400)})
        y = rng.integers(0, 2, 400)  # labels of noise: only a copy of a row knows its label
        ctx = FitContext("binary", 2, Placement(1), seed=0)
        model = KNeighborsModel({"n_neighbors": 20, "weights": "distance", "prior_weight": 0.0}, "knn").fit(
            X, y, X.iloc[[]], y[[]], ctx)
        assert (model.predict(X.iloc[:50]) == y[:50]).all()

    def test_one_hot_rows_are_compared_dense_by_brute_force_and_saved_compressed(self):
        """scikit-learn compares sparse rows pair by pair, and with 15 columns or fewer walks a k-d tree: on
        Adult's one-hot rows a 5-fold bag took 90.8 s and 2.43 GB, dense 22.2 s and 0.45 GB, and 60,000 rows
        of 10 numbers 9.7 s a query through the tree against 3.1 s by brute force. Dense rows are mostly
        zeros, saved compressed: the bag's fold results and predictor 68 and 66 MB, 8.2 and 6.6 MB packed."""
        import pickle

        rng = np.random.default_rng(0)
        X = pd.DataFrame({"a": rng.normal(size=3000),
                          "c": pd.Categorical(rng.choice([f"v{i}" for i in range(40)], 3000))})
        y = rng.integers(0, 2, 3000)
        ctx = FitContext("binary", 2, Placement(1), seed=0)
        model = KNeighborsModel({"n_neighbors": 10}, "knn").fit(X[:2000], y[:2000], X[2000:], y[2000:], ctx)
        index = model.index_
        assert index._fit_method == "brute" and isinstance(index._fit_X, np.ndarray)  # noqa: SLF001
        assert index._fit_X.dtype == np.float32 and index._fit_X.shape == (2000, 41)  # noqa: SLF001
        saved = pickle.dumps(model)
        assert len(saved) < index._fit_X.nbytes / 4  # noqa: SLF001
        np.testing.assert_array_equal(pickle.loads(saved).predict_proba(X[2000:]), model.predict_proba(X[2000:]))

    def test_no_class_is_given_probability_zero(self, datasets):
        data = datasets["multiclass"]
        ctx = FitContext(data.problem_type, data.num_classes, Placement(1), seed=0)
        model = KNeighborsModel({"n_neighbors": 3, "weights": "uniform"}, "knn").fit(
            data.X.iloc[data.train_idx], data.y[data.train_idx], data.X.iloc[[]], data.y[[]], ctx)
        proba = model.predict_proba(data.X.iloc[data.test_idx])
        assert (proba > 0).all()
        np.testing.assert_allclose(proba.sum(axis=1), 1.0)

    def test_the_refit_takes_the_weighting_most_folds_kept_at_their_mean_neighbours(self, datasets):
        data = datasets["regression"]
        ctx = FitContext(data.problem_type, data.num_classes, Placement(1), seed=0)
        folds = [KNeighborsModel({}, "knn").fit_rows(data.X, data.y, data.train_idx, data.val_idx, ctx)]
        folds[0].k_, folds[0].weighting_ = 4, "distance"
        twin = KNeighborsModel({}, "knn").fit_rows(data.X, data.y, data.train_idx, data.val_idx, ctx)
        twin.k_, twin.weighting_ = 16, "distance"
        third = KNeighborsModel({}, "knn").fit_rows(data.X, data.y, data.train_idx, data.val_idx, ctx)
        third.k_, third.weighting_ = 8, "uniform"
        assert folds[0].refit_params([folds[0], twin, third]) == {"n_neighbors": 8, "weights": "distance"}

    def test_missing_infinite_unseen_values_fit_and_predict(self, datasets):
        data = datasets["multiclass"]
        X = data.X.copy()
        number = next(c for c in X.columns if X[c].dtype.kind == "f")
        X.loc[X.index[::5], number] = np.nan
        X.loc[X.index[1::7], number] = np.inf
        ctx = FitContext(data.problem_type, data.num_classes, Placement(1), seed=0)
        model = KNeighborsModel({"n_neighbors": 10}, "knn").fit_rows(X, data.y, data.train_idx, data.val_idx,
                                                                     ctx)
        assert np.isfinite(model.predict_proba(X.iloc[data.test_idx])).all()

    @pytest.mark.parametrize("params, named", [
        ({"p": 3}, r"params\.p=3 must be 1"),
        ({"weights": "nearest"}, r"params\.weights='nearest' must be one of auto, uniform, distance"),
        ({"n_neighbors": 0}, r"params\.n_neighbors=0 must be a whole number >= 1"),
        ({"prior_weight": -1}, r"params\.prior_weight=-1 must be a number >= 0"),
    ])
    def test_a_wrong_value_names_the_key_and_what_is_valid(self, params, named):
        with pytest.raises(ConfigError, match=named):
            KNeighborsModel.check_params("knn", params, "binary")


def test_the_ladder_grows_by_half_and_ends_at_the_most():
    assert ladder(1) == [1]
    assert ladder(10) == [1, 2, 3, 5, 8, 10]
    assert ladder(100)[-1] == 100 and all(b > a for a, b in zip(ladder(100), ladder(100)[1:]))


def test_inverse_distance_weights_sum_to_the_count_and_a_copy_takes_them_all():
    w = neighbour_weights(np.array([[1.0, 2.0, 4.0], [0.0, 0.0, 3.0]]), "distance")
    np.testing.assert_allclose(w.sum(axis=1), 3.0)
    np.testing.assert_allclose(w[0], np.array([4, 2, 1]) * 3 / 7)
    np.testing.assert_allclose(w[1], [1.5, 1.5, 0.0])
