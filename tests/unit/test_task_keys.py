"""The cache key of a finished fit: what determines the result, and nothing else."""

import pytest

from pipeline.graph import tasks
from pipeline.graph.nodes.fit import _device_kind
from pipeline.models import LightGBMModel
from pipeline.models.nn import TorchMLPModel


def key(model, **kw):
    args = dict(fingerprint="f", model=model, params={}, fold=0, num_folds=2, fold_seed=0, seed=1, eval_metric="roc_auc")
    return tasks.task_key(**{**args, **kw})


def test_the_key_is_stable():
    assert key(LightGBMModel({"num_iterations": 5})) == key(LightGBMModel({"num_iterations": 5}))


@pytest.mark.parametrize("distribution", ["pipeline", "lightgbm", "numpy", "pandas", "scikit-learn"])
def test_a_version_change_changes_the_key(monkeypatch, distribution):
    model = LightGBMModel({})
    before = key(model)
    real = tasks.library_versions

    def upgraded(modules=()):
        return {**real(modules), distribution: "99.0"}

    monkeypatch.setattr(tasks, "library_versions", upgraded)
    assert key(model) != before


def test_the_key_names_the_engine_and_the_model_libraries():
    versions = tasks.library_versions(TorchMLPModel.profile.modules)
    import numpy
    import pipeline

    assert versions["pipeline"] == pipeline.__version__ and versions["numpy"] == numpy.__version__
    assert versions["torch"] is not None


def test_a_network_on_device_auto_is_keyed_by_where_it_runs():
    net = TorchMLPModel({"device": "auto"})
    on_gpu = _device_kind(net, {}, ((0, 1),))
    on_cpu = _device_kind(net, {}, ())
    assert (on_gpu, on_cpu) == ("gpu", "cpu")
    assert key(net, device=on_gpu) != key(net, device=on_cpu)


def test_a_cpu_model_given_a_gpu_share_keeps_its_key():
    """A CPU-configured model ignores the GPU it is given: its result, and key, are the same."""
    assert _device_kind(LightGBMModel({}), {}, ((0, 0.5),)) == "cpu"
    assert _device_kind(TorchMLPModel({"device": "cpu"}), {}, ((0, 1),)) == "cpu"


def test_a_fit_whose_scores_are_kept_under_another_metric_has_its_own_key():
    """Under accuracy a released fit's file keeps its trial's and fold's log loss (`metrics.choice_metric`):
    a file that kept accuracies (or the reverse) is not read for it. Where the two agree, the key is as it
    was."""
    model = LightGBMModel({})
    plain = key(model, eval_metric="accuracy")
    assert key(model, eval_metric="accuracy", scored_by="log_loss") != plain
    assert key(model, eval_metric="roc_auc", scored_by="roc_auc") == key(model, eval_metric="roc_auc")


def test_folds_dealt_by_the_label_rank_change_a_bag_fold_key_only():
    model = LightGBMModel({})
    assert key(model, fold_scheme="by_class") == key(model)
    assert key(model, fold_scheme="by_rank") != key(model)
    assert key(model, fold=None, num_folds=1, fold_scheme="by_rank") == key(model, fold=None, num_folds=1)
