"""Random forests (scikit-learn's RandomForest), a CPU-only kind sharing the extra-trees kind's growth: the
conformance suite, and that its trees are the random forest's (bootstrap rows, the best split among a
share of the features), with scikit-learn's own default share per problem type."""

import pytest

from pipeline.errors import ConfigError
from pipeline.models.base import FitContext, Placement
from pipeline.models.random_forest import RandomForestModel
from pipeline.testing.model_conformance import ModelKindConformance


class TestRandomForest(ModelKindConformance):
    model_class = RandomForestModel
    config = "random_forest"
    typo = ("max_featurs", "max_features")

    @pytest.mark.parametrize("problem, share", [("binary", "sqrt"), ("regression", 1.0)])
    def test_its_trees_are_a_random_forest_with_scikit_learn_s_share(self, datasets, problem, share):
        from sklearn.ensemble import RandomForestClassifier, RandomForestRegressor

        data = datasets[problem]
        ctx = FitContext(data.problem_type, data.num_classes, Placement(1), seed=0)
        model = RandomForestModel({"n_estimators": 40, "trees_per_step": 20}, "rf")
        model.fit_rows(data.X, data.y, data.train_idx, data.val_idx, ctx)
        forest = model.model_
        kind = RandomForestRegressor if problem == "regression" else RandomForestClassifier
        assert isinstance(forest, kind)
        assert forest.bootstrap and forest.max_features == share and model.trees_ in (20, 40)
        assert len(model.history_["valid_loss"]) >= 1

    def test_its_parameters_are_the_random_forest_s(self):
        RandomForestModel.check_params("rf", {"max_samples": 0.5, "criterion": "entropy"}, "binary")
        with pytest.raises(ConfigError, match=r"model.rf.params.max_featurs is not a parameter of "
                                              r"scikit-learn's RandomForestClassifier \(.*max_features"):
            RandomForestModel.check_params("rf", {"max_featurs": 0.5}, "binary")
        with pytest.raises(ConfigError, match=r"model.rf.params.n_jobs is set by the engine"):
            RandomForestModel.check_params("rf", {"n_jobs": 2}, "binary")

    def test_its_parameters_are_checked_against_the_estimator_of_the_problem_type(self):
        """A classifier's key on a number to predict, and a regressor's on classes, are refused naming the
        estimator that would get them; before the type is known, a key either takes passes."""
        with pytest.raises(ConfigError, match=r"not a parameter of scikit-learn's RandomForestRegressor"):
            RandomForestModel.check_params("rf", {"class_weight": "balanced"}, "regression")
        with pytest.raises(ConfigError, match=r"RandomForestClassifier must be .*Got 'absolute_error'"):
            RandomForestModel.check_params("rf", {"criterion": "absolute_error"}, "multiclass")
        RandomForestModel.check_params("rf", {"criterion": "absolute_error"}, "regression")
        RandomForestModel.check_params("rf", {"criterion": "absolute_error"}, None)
        RandomForestModel.check_params("rf", {"criterion": "entropy"}, None)
        with pytest.raises(ConfigError, match=r"scikit-learn's RandomForestRegressor or RandomFor"):
            RandomForestModel.check_params("rf", {"max_featurs": 0.5}, None)

    @pytest.mark.parametrize("problem", ["binary", "multiclass", None])
    def test_class_weights_are_the_engine_s(self, problem):
        """scikit-learn's class_weight beside data.class_weight would weigh the rows twice: the key is refused
        for the engine's own, which every model kind follows."""
        refused = r"params.class_weight='balanced': the engine weighs the classes' rows itself.*class_weight"
        with pytest.raises(ConfigError, match=refused + r" \(none \| balanced\)"):
            RandomForestModel.check_params("rf", {"class_weight": "balanced"}, problem)


def test_its_search_reaches_shallow_forests_and_whole_trees(compose):
    """The trees' size is searched, from a few leaves (FLAML's forests start at 4) to the configured cap."""
    from pipeline.settings import read_settings

    (spec,) = read_settings(compose(["model=random_forest", "hpo=tpe"])).models
    size = spec.search_space["max_leaf_nodes"]
    assert size.contains(8) and size.contains(32) and size.contains(spec.params["max_leaf_nodes"])
    assert not size.contains(4)
