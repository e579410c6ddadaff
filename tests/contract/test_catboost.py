"""CatBoost, the optional model kind (pip install '.[catboost]'): the conformance suite, and what it does
of its own: native categorical columns, threads and devices from the placement, its GPU check on a
machine without one, and no catboost import where a run does not select it."""

import subprocess
import sys
import time

import pytest

from pipeline.errors import ConfigError, HardwareError
from pipeline.models.base import FitContext, Placement
from pipeline.models.catboost import CatBoostModel
from pipeline.testing.model_conformance import ModelKindConformance


class TestCatBoost(ModelKindConformance):
    model_class = CatBoostModel
    config = "catboost"
    typo = ("deptth", "depth")

    def test_categorical_columns_are_native_and_threads_follow_the_placement(self, datasets, fit_params):
        data = datasets["binary"]
        ctx = FitContext(data.problem_type, data.num_classes, Placement(2), seed=0)
        model = CatBoostModel(fit_params, "catboost")
        model.fit_rows(data.X, data.y, data.train_idx, data.val_idx, ctx)
        names = model.model_.feature_names_
        assert sorted(names[i] for i in model.model_.get_cat_feature_indices()) == sorted(data.categorical)
        assert model.model_.get_params()["thread_count"] == 2

    def test_a_deadline_stops_the_rounds_with_those_so_far(self, datasets):
        data = datasets["binary"]
        in_an_hour = time.time() + 3600
        ctx = FitContext(data.problem_type, data.num_classes, Placement(1), seed=0, deadline=in_an_hour)
        model = CatBoostModel({"iterations": 300}, "catboost")
        model.fit_rows(data.X, data.y, data.train_idx, data.val_idx, ctx)
        assert not ctx.stopped_by_budget and model.model_.tree_count_ > 1  # its best round of 300
        ctx = FitContext(data.problem_type, data.num_classes, Placement(1), seed=0, deadline=time.time() - 1)
        model.fit_rows(data.X, data.y, data.train_idx, data.val_idx, ctx)
        assert ctx.stopped_by_budget and model.model_.tree_count_ == 1  # the round that told the time
        assert model.predict_proba(data.X.iloc[data.test_idx]).shape == (len(data.test_idx), 2)

    @pytest.mark.parametrize("stopping", [{"early_stopping_rounds": 20}, {"od_type": "Iter", "od_wait": 20}])
    def test_under_a_deadline_the_metrics_are_recorded_every_few_rounds_and_early_stopping_holds(
            self, datasets, stopping):
        """CatBoost rebuilds every recorded metric for its callback at each round: with one recorded a round,
        a fit under the engine's callback slows as it grows. Recorded every METRIC_PERIOD rounds, its early
        stopping (applied by the callback) stops where CatBoost's own would, to the period."""
        from pipeline.models.catboost import METRIC_PERIOD

        data = datasets["regression"]
        params = {"iterations": 3000, "learning_rate": 0.3, "depth": 4, **stopping}
        own = CatBoostModel(params, "catboost")
        own.fit_rows(data.X, data.y, data.train_idx, data.val_idx,
                     FitContext(data.problem_type, data.num_classes, Placement(1), seed=0))
        ctx = FitContext(data.problem_type, data.num_classes, Placement(1), seed=0,
                         deadline=time.time() + 3600)
        model = CatBoostModel(params, "catboost").fit_rows(data.X, data.y, data.train_idx, data.val_idx, ctx)
        recorded = model.model_.get_evals_result()["validation"]["RMSE"]
        rounds = len(model.history_["valid_RMSE"])
        assert not ctx.stopped_by_budget and rounds < 3000  # early stopping ended it, not the cap
        assert len(recorded) <= rounds // METRIC_PERIOD + 2  # not one a round
        assert model.best_iteration_ % METRIC_PERIOD == 0
        assert rounds - 1 - model.best_iteration_ < 20 + METRIC_PERIOD  # stopped its patience past the best
        assert abs(model.best_iteration_ - own.best_iteration_) <= METRIC_PERIOD
        curve = model.history_["valid_RMSE"]  # the recorded values at their rounds, NaN between
        assert curve[model.best_iteration_] == min(recorded) and curve[1] != curve[1]

    @pytest.mark.parametrize("metric, rising_stops", [("AUC", False), ("RMSE", True), ("Accuracy", False),
                                                      ("Logloss", True)])
    def test_the_callbacks_early_stopping_follows_the_metrics_direction(self, metric, rising_stops):
        """Patience 3, a metric rising every round: a maximised one never stops, a minimised one stops once
        3 rounds have passed its best (round 0)."""
        from types import SimpleNamespace

        from pipeline.models.catboost import _Callback

        ctx = FitContext("binary", 2, Placement(1), seed=0, deadline=time.time() + 3600)
        callback, values, going = _Callback(ctx, patience=3, metric=metric), [], []
        for round_ in range(1, 9):
            values.append(0.5 + 0.01 * round_)
            going.append(callback.after_iteration(SimpleNamespace(iteration=round_,
                                                                  metrics={"validation": {metric: values}})))
        assert going == ([True, True, True, False] + [False] * 4 if rising_stops else [True] * 8)

    @pytest.mark.parametrize("metric, sign", [("AUC", -1), ("Kappa", -1), ("MCC", -1), ("Logloss", 1),
                                              ("RMSE", 1)])
    def test_the_pruning_report_is_a_loss_whatever_the_metric(self, metric, sign):
        from types import SimpleNamespace

        from pipeline.models.catboost import _Callback

        reported = []
        ctx = FitContext("binary", 2, Placement(1), seed=0, report=lambda step, loss: reported.append(loss))
        _Callback(ctx).after_iteration(SimpleNamespace(iteration=10, metrics={"validation": {metric: [0.7]}}))
        assert reported == [sign * 0.7]

    def test_the_gpu_check_before_any_fit_follows_the_gpus_catboost_sees(self):
        """A machine without a GPU: a typed error naming the key; with one: the check passes."""
        if _gpus() > 0:
            CatBoostModel.check_environment("catboost", {"task_type": "GPU"}, {"CUDA_VISIBLE_DEVICES": "0"})
        else:
            with pytest.raises(HardwareError, match=r"model.catboost \(CatBoost with task_type=GPU\)"):
                CatBoostModel.check_environment("catboost", {"task_type": "GPU"})
        with pytest.raises(HardwareError, match="sees no GPU"):  # no device visible to it
            CatBoostModel.check_environment("catboost", {"task_type": "GPU"}, {"CUDA_VISIBLE_DEVICES": ""})
        assert CatBoostModel.profile.gpu_params((1,)) == {"devices": "1"}
        assert CatBoostModel.on_device({}, "cuda") == {"task_type": "GPU"}

    def test_parameters_the_engine_sets_are_refused(self):
        with pytest.raises(ConfigError, match=r"model.catboost.params.thread_count is set by the engine"):
            CatBoostModel.check_params("catboost", {"thread_count": 4}, "binary")
        with pytest.raises(ConfigError, match=r"CatBoost rejects them.*depth"):
            CatBoostModel.check_params("catboost", {"depth": "deep"}, "binary")


def _gpus() -> int:
    code = "from catboost.utils import get_gpu_device_count as c; print(c())"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    return int(proc.stdout.strip() or 0)


@pytest.mark.parametrize("model, imported", [("all", False), ("catboost", True)])
def test_catboost_is_imported_only_by_a_run_that_selects_it(tmp_path, model, imported):
    """A dry run checks the models' params: CatBoost's check imports catboost, the others' never do."""
    args = [f"model={model}", "dry_run=true", "tracking=none"]
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "pipeline", *args], capture_output=True,
                          text=True, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert any(line.endswith("| catboost") for line in proc.stderr.splitlines()) == imported


@pytest.mark.gpu
def test_a_gpu_fit_runs_on_the_device_the_placement_gives(tmp_path):
    """On a CUDA box: model.catboost.device=cuda trains with task_type=GPU on the planned device (CatBoost's
    own record of its task type and devices), predicts, and scores as the CPU does."""
    pytest.importorskip("catboost", reason="catboost, an optional extra (pip install '.[catboost]'), cannot be "
                        "imported here", exc_type=ImportError)
    import pandas as pd

    args = ["model=catboost", "+hardware=1gpu", "model.catboost.device=cuda", "data.max_rows=20000",
            "model.catboost.params.iterations=200", "tracking=none"]
    proc = subprocess.run([sys.executable, "-m", "pipeline", *args], capture_output=True, text=True,
                          cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (run_dir,) = (tmp_path / "outputs" / "runs").glob("*/*")
    board = pd.read_csv(run_dir / "leaderboard.csv").set_index("model")
    row = board.loc["catboost"]
    assert row["device"].startswith("cuda:") and row["test_roc_auc"] > 0.88
    import pickle

    predictor = pickle.loads((run_dir / "predictors" / "catboost.pkl").read_bytes())
    model = predictor.models[0]
    assert model.model_.get_all_params()["task_type"] == "GPU" and model.model_.get_params()["devices"] == "0"
