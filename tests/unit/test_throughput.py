"""The leaderboard's rows per second: the best of up to three passes over the test rows, after a
warm-up, ending early when two passes agree."""

import types

import pandas as pd
import pytest

from pipeline.nodes import evaluate


class _Clock:
    def __init__(self):
        self.now = 0.0

    def perf_counter(self):
        return self.now


class _Predictor:
    """Each call on the full rows takes the next of `seconds` on the clock; the warm-up takes none."""

    def __init__(self, clock, seconds):
        self.clock, self.seconds, self.full_passes = clock, list(seconds), 0

    def predict_typed(self, X):
        if len(X) > 8:
            self.clock.now += self.seconds[self.full_passes]
            self.full_passes += 1
        return [0.0] * len(X)


class _Tracker:
    def __init__(self):
        self.logged = {}

    def log_metrics(self, metrics):
        self.logged.update(metrics)


@pytest.mark.parametrize(
    ("seconds", "passes", "best"),
    [
        ([0.100, 0.103, 0.050], 2, 0.100),  # the first two agree within 5%: no third pass
        ([0.100, 0.120, 0.090], 3, 0.090),  # they do not: the third is taken, and the best of all
        ([0.600, 0.100, 0.100], 1, 0.600),  # one pass outran the budget
    ],
)
def test_passes_end_when_two_agree_or_the_budget_is_spent(monkeypatch, seconds, passes, best):
    clock = _Clock()
    monkeypatch.setattr(evaluate, "time", types.SimpleNamespace(perf_counter=clock.perf_counter))
    predictor, tracker = _Predictor(clock, seconds), _Tracker()
    rows = [{"model": "m"}]
    evaluate._measure_throughput(rows, {"m": predictor}, pd.DataFrame({"x": range(1000)}), tracker)
    assert predictor.full_passes == passes
    assert rows[0]["predict_rows_per_s"] == pytest.approx(1000 / best)
    assert tracker.logged == {"m/predict_rows_per_s": rows[0]["predict_rows_per_s"]}
