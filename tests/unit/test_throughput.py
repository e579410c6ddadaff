"""The leaderboard's rows per second: the test rows over the seconds the run took to score them,
each fold model's test prediction timed where it was fitted (AutoGluon's pred_time_test, as a rate);
evaluation predicts nothing again to measure it.

The fits here read a virtual clock that only the model's predictions advance (PER_1000 seconds per
1,000 rows), so the seconds a fit reports are exactly those of the rows it timed, on any machine."""

import time
from fractions import Fraction
from types import SimpleNamespace

import pytest

from pipeline.graph import tasks
from pipeline.graph.tasks import DataRef, FitRequest, run_fit
from pipeline import outputs
from pipeline.graph.nodes.context import TrialResult, leaderboard_row, rows_per_second
from tests.fault_models import _Constant

PER_1000 = 0.05  # virtual seconds per 1,000 predicted rows


class VirtualClock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


CLOCK = VirtualClock()


class ClockedPredictModel(_Constant):
    """Takes PER_1000 virtual seconds per 1,000 rows it predicts, and nothing else of the clock."""

    def _predict(self, X):
        CLOCK.now += PER_1000 * len(X) / 1000
        return super()._predict(X)


@pytest.fixture(autouse=True)
def virtual_clock(monkeypatch):
    """run_fit times the predictions with this clock (its time.time() stays the real one)."""
    monkeypatch.setattr(tasks, "time", SimpleNamespace(time=time.time, perf_counter=CLOCK))


def fold(adult, k: int, num_folds: int = 2):
    request = FitRequest(
        task_id=f"fit/slow/t0/f{k}", key=f"k{k}", model=ClockedPredictModel({}),
        params={}, model_name="slow", trial=0, fold=k, num_folds=num_folds, fold_seed=0, seed=0,
        eval_metric="roc_auc", num_cpus=1, gpu_ids=(), gpu_shares=(Fraction(0),), data=DataRef(obj=adult),
    )
    return run_fit(request)


def test_a_fit_times_its_test_rows_apart_from_its_held_out_rows(adult):
    result = fold(adult, 0)
    test_rows, held_rows = len(adult.test_idx), len(result.held_out)
    assert result.test_predict_seconds == pytest.approx(PER_1000 * test_rows / 1000)
    assert result.predict_seconds == pytest.approx(PER_1000 * (test_rows + held_rows) / 1000)
    assert result.test_predict_seconds < result.predict_seconds


def test_a_bag_scores_at_the_test_rows_over_its_folds_test_seconds(adult):
    folds = [fold(adult, k) for k in range(2)]
    trial = TrialResult("slow", 0, {}, folds, None, None, None, 0.5)
    assert trial.test_predict_seconds == pytest.approx(sum(f.test_predict_seconds for f in folds))
    rate = rows_per_second(len(adult.test_idx), trial.test_predict_seconds)
    # two fold models, each taking PER_1000 per 1,000 rows: half the rate of one
    assert rate == pytest.approx(1000 / (2 * PER_1000))


def test_a_fold_cached_before_test_seconds_were_kept_leaves_the_rate_unknown():
    old = SimpleNamespace(predict_seconds=0.3)  # a FoldResult unpickled from an older cache has no such field
    new = SimpleNamespace(predict_seconds=0.3, test_predict_seconds=0.1)
    assert TrialResult("m", 0, {}, [new, old], None, None, None, 0.5).test_predict_seconds is None
    assert rows_per_second(1000, None) is None


def test_evaluation_logs_the_rows_rates_without_predicting(adult):
    logged = {}
    tracker = SimpleNamespace(log_metrics=logged.update)
    rows = [leaderboard_row("a", {}, {}, fit_seconds=1.0, predict_seconds=0.2, test_rows_per_s=5000.0, device="cpu",
                            num_folds=1, best_trial=0, params={}),
            leaderboard_row("b", {}, {}, fit_seconds=1.0, predict_seconds=0.2, test_rows_per_s=None, device="cpu",
                            num_folds=1, best_trial=0, params={})]
    outputs._log_throughput(rows, tracker)
    assert logged == {"a/predict_rows_per_s": 5000.0}
