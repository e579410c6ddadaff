"""Extremely randomised trees (scikit-learn's ExtraTrees), a CPU-only kind: the conformance suite, and what
it does of its own: growth in steps that stops where the validation loss flattens or the deadline comes,
missing values and categories as NaN and codes, threads from the placement."""

import time

import numpy as np
import pytest

from pipeline.errors import ConfigError
from pipeline.models.base import FitContext, Placement
from pipeline.models.extra_trees import ExtraTreesModel
from pipeline.testing.model_conformance import ModelKindConformance


class TestExtraTrees(ModelKindConformance):
    model_class = ExtraTreesModel
    config = "extra_trees"
    typo = ("min_sample_leaf", "min_samples_leaf")

    def test_the_forest_grows_in_steps_and_keeps_the_trees_up_to_its_best_step(self, datasets):
        data = datasets["regression"]
        ctx = FitContext(data.problem_type, data.num_classes, Placement(2), seed=0)
        model = ExtraTreesModel({"n_estimators": 400, "trees_per_step": 10, "patience": 2, "tol": 0.01}, "et")
        model.fit_rows(data.X, data.y, data.train_idx, data.val_idx, ctx)
        losses = model.history_["valid_loss"]
        assert len(model.model_.estimators_) == model.trees_ == model.model_.n_estimators
        assert model.trees_ < 400 and model.trees_ % 10 == 0  # it stopped where 1% more was not gained
        assert len(losses) == model.trees_ // 10 + 2  # the best step, then two that did not gain enough
        assert model.model_.get_params()["n_jobs"] == 2

    def test_a_deadline_stops_the_growth_with_the_trees_so_far(self, datasets):
        data = datasets["binary"]
        ctx = FitContext(data.problem_type, data.num_classes, Placement(1), seed=0, deadline=time.time() - 1)
        model = ExtraTreesModel({"n_estimators": 400, "trees_per_step": 10}, "et")
        model.fit_rows(data.X, data.y, data.train_idx, data.val_idx, ctx)
        assert ctx.stopped_by_budget and model.trees_ == 10  # the first step always grows
        assert model.predict_proba(data.X.iloc[data.test_idx]).shape == (len(data.test_idx), 2)

    def test_missing_numbers_and_categories_reach_the_trees_as_nan(self, datasets):
        data = datasets["multiclass"]
        X = data.X.copy()
        number = next(c for c in X.columns if X[c].dtype.kind == "f")
        X.loc[X.index[::5], number] = np.nan
        matrix = ExtraTreesModel._matrix(X)
        assert np.isnan(matrix[::5, list(X.columns).index(number)]).all()
        ctx = FitContext(data.problem_type, data.num_classes, Placement(1), seed=0)
        model = ExtraTreesModel({"n_estimators": 20}, "et")
        model.fit_rows(X, data.y, data.train_idx, data.val_idx, ctx)
        assert np.isfinite(model.predict_proba(X.iloc[data.test_idx])).all()

    def test_parameters_the_engine_sets_or_scikit_learn_rejects_are_refused(self):
        with pytest.raises(ConfigError, match=r"model.et.params.n_jobs is set by the engine"):
            ExtraTreesModel.check_params("et", {"n_jobs": 4}, "binary")
        with pytest.raises(ConfigError, match=r"scikit-learn rejects them.*min_samples_leaf"):
            ExtraTreesModel.check_params("et", {"min_samples_leaf": -1}, "binary")
        with pytest.raises(ConfigError, match=r"model.et.params.patience=0 must be a whole number >= 1"):
            ExtraTreesModel.check_params("et", {"patience": 0}, "binary")


    def test_the_forest_is_saved_compressed_once_and_reads_back_the_same(self, datasets, monkeypatch):
        import pickle
        import zlib

        data = datasets["regression"]
        ctx = FitContext(data.problem_type, data.num_classes, Placement(1), seed=0)
        model = ExtraTreesModel({"n_estimators": 40}, "et")
        model.fit_rows(data.X, data.y, data.train_idx, data.val_idx, ctx)
        raw = len(pickle.dumps(model.model_, protocol=pickle.HIGHEST_PROTOCOL))
        calls = []
        compress = zlib.compress
        monkeypatch.setattr(zlib, "compress", lambda *a: calls.append(1) or compress(*a))
        saved = pickle.dumps(model, protocol=pickle.HIGHEST_PROTOCOL)
        assert len(saved) < raw / 2  # whole trees' node arrays: mostly small integers
        assert pickle.dumps(model, protocol=pickle.HIGHEST_PROTOCOL) == saved and len(calls) == 1
        loaded = pickle.loads(saved)
        rows = data.X.iloc[data.test_idx]
        np.testing.assert_array_equal(loaded.predict(rows), model.predict(rows))
        assert pickle.dumps(loaded, protocol=pickle.HIGHEST_PROTOCOL) == saved and len(calls) == 1
        model.fit_rows(data.X, data.y, data.train_idx, data.val_idx, ctx)  # a new forest: packed anew
        pickle.dumps(model, protocol=pickle.HIGHEST_PROTOCOL)
        assert len(calls) == 2


def test_a_tree_holds_at_most_15000_leaves_whatever_the_rows():
    """Trees grown whole hold about two nodes a training row: on 34,500 rows (diamonds) one fold of the
    100-tree forest pickled to 424 MB, and a 30-s run kept 20 s for saving its predictor. The shipped params
    cap each tree at 15,000 leaves (AutoGluon's rule), which a table of up to 15,000 rows never reaches, so
    a fold's size stops growing with the rows; the memory estimate holds the same bound."""
    from types import SimpleNamespace

    from omegaconf import OmegaConf

    from pipeline.config import CONFIG_DIR
    from pipeline.models.extra_trees import OWN, ExtraTreesModel, memory

    tree = OmegaConf.to_container(OmegaConf.load(f"{CONFIG_DIR}/model/extra_trees.yaml"))
    params = dict(tree["extra_trees"]["params"])
    assert params["max_leaf_nodes"] == 15000
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40_000, 3)).astype(np.float32)
    y = X.sum(axis=1) + rng.normal(size=40_000)
    library = {k: v for k, v in params.items() if k not in OWN}
    forest = ExtraTreesModel._estimator("regression", {**library, "n_estimators": 2, "random_state": 0})
    forest.fit(X, y)
    assert all(t.get_n_leaves() == 15000 for t in forest.estimators_)  # whole, each would hold ~40,000
    fit = SimpleNamespace(train=1_000_000, held_out=0, features=3, classes=0,
                          data=SimpleNamespace(row_bytes=20))
    trees = memory(params, fit, False).parts["trees"]
    assert trees <= 100 * 2 * 15000 * 72 and trees < memory({**params, "max_leaf_nodes": None}, fit,
                                                            False).parts["trees"] / 50
