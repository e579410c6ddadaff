"""A fit that would run past the run's deadline stops cleanly and keeps what it trained: LightGBM and
XGBoost through their callbacks, the network at an epoch's end."""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
import pytest

from pipeline.models import FitContext, LightGBMModel, Placement, TorchMLPModel, XGBoostModel

ROUNDS = {  # many rounds, no early stopping: only the deadline stops them
    LightGBMModel: {"num_iterations": 200, "early_stopping_round": 0, "verbosity": -1, "min_data_in_leaf": 5},
    XGBoostModel: {"num_boost_round": 200},
    TorchMLPModel: {"max_epochs": 20, "patience": 0, "batch_size": 64, "hidden_sizes": [16]},
}


def tiny(n=300, seed=0):
    rng = np.random.default_rng(seed)
    X = pd.DataFrame(rng.normal(size=(n, 4)), columns=list("abcd"))
    y = (X["a"] + 0.5 * X["b"] > 0).to_numpy().astype(int)
    return X, y


def fit(cls, deadline, scored_rows=0):
    X, y = tiny()
    ctx = FitContext("binary", 2, Placement(1), seed=0, deadline=deadline, scored_rows=scored_rows)
    model = cls(ROUNDS[cls], cls.__name__).fit(X[:200], y[:200], X[200:], y[200:], ctx)
    return model, ctx, X[200:]


def length(model) -> int:
    """Boosting rounds or epochs the model trained."""
    if isinstance(model, LightGBMModel):
        return model.booster_.current_iteration()
    if isinstance(model, XGBoostModel):
        return model.booster_.num_boosted_rounds()
    return len(model.history_["val_loss"])


@pytest.mark.parametrize("cls", list(ROUNDS), ids=lambda c: c.__name__)
def test_a_deadline_in_the_past_stops_the_fit_after_one_round_and_the_model_predicts(cls):
    model, ctx, X_val = fit(cls, deadline=time.time() - 1)
    assert length(model) == 1 and ctx.stopped_by_budget
    proba = model.predict_proba(X_val)
    assert proba.shape == (len(X_val), 2) and np.isfinite(proba).all()


@pytest.mark.parametrize("cls", [LightGBMModel, XGBoostModel], ids=lambda c: c.__name__)
def test_a_deadline_ahead_lets_every_round_run(cls):
    model, ctx, _ = fit(cls, deadline=time.time() + 3600)
    assert length(model) == 200 and not ctx.stopped_by_budget


@pytest.mark.parametrize("cls", [LightGBMModel, XGBoostModel], ids=lambda c: c.__name__)
def test_a_boosted_fit_keeps_the_time_its_test_rows_predictions_take(cls):
    """The time left must cover predicting the test rows with the trees so far: a trillion of them stops the
    fit within a few rounds of an hour's deadline, which lets all 200 run for none."""
    model, ctx, _ = fit(cls, deadline=time.time() + 3600, scored_rows=10**12)
    assert length(model) <= 3 and ctx.stopped_by_budget
    model, ctx, _ = fit(cls, deadline=time.time() + 3600, scored_rows=10)
    assert length(model) == 200 and not ctx.stopped_by_budget


def test_the_scoring_reserve_grows_with_the_rows_and_shrinks_with_the_columns():
    ctx = FitContext("binary", 2, scored_rows=2_000_000)
    cost = LightGBMModel.profile.predict_cost
    # 8M rows x 20 trained for 50 s: predicting 2M rows took 4.9 s on the 2-core box
    assert ctx.scoring_seconds(50.0, 8_000_000, 20, cost) == pytest.approx(50 / 4 * 15 / 33)
    assert ctx.scoring_seconds(50.0, 8_000_000, 100, cost) < ctx.scoring_seconds(50.0, 8_000_000, 20, cost)
    assert FitContext("binary", 2).scoring_seconds(50.0, 8_000_000, 20, cost) == 0.0


def test_the_fit_request_counts_the_test_rows_as_scored_after_the_fit(adult):
    from pipeline.graph.tasks import DataRef, FitRequest, run_fit

    seen = []

    class Recording(LightGBMModel):
        def _fit_rows(self, X, y, train_rows, val_rows, ctx):
            seen.append(ctx.scored_rows)
            super()._fit_rows(X, y, train_rows, val_rows, ctx)

    model = Recording({**ROUNDS[LightGBMModel], "num_iterations": 5}, "lgb")
    request = FitRequest("fit/lightgbm/t0/f0", "k", model, {}, "lightgbm", 0, 0, 2, 0, 0, "roc_auc", 1, (), (),
                         DataRef(obj=adult))
    run_fit(request)
    assert seen == [len(adult.test_idx)] and seen[0] > 0


def test_the_network_stops_at_the_epoch_whose_successor_would_end_past_the_deadline(monkeypatch):
    from pipeline.metrics import METRICS
    from pipeline.nn import loop as loop_module
    from pipeline.nn.loop import Arrays, Loop, LoopConfig, NetSpec

    class Clock:  # the loop's `time`: each epoch takes 10 s of the wall clock
        perf_counter = staticmethod(time.perf_counter)
        now = 0.0

        def time(self):
            return self.now

    clock, epoch = Clock(), Loop._epoch

    def ten_seconds(self, *args):
        out = epoch(self, *args)
        clock.now += 10.0
        return out

    monkeypatch.setattr(loop_module, "time", clock)
    monkeypatch.setattr(Loop, "_epoch", ten_seconds)
    x, c = np.random.default_rng(0).normal(size=(64, 3)).astype("float32"), np.zeros((64, 1), dtype="int64")
    import torch

    y = torch.as_tensor((x[:, 0] > 0).astype("int64"))
    arrays = Arrays(torch.from_numpy(x), torch.from_numpy(c), y, torch.from_numpy(x), torch.from_numpy(c), y)
    spec = NetSpec(num_numeric=3, cardinalities=(2,), out_dim=2, hidden_sizes=(8,), dropout=0.0, max_embedding_dim=2)
    config = LoopConfig.from_params({"max_epochs": 20, "patience": 0, "batch_size": 32}, "params")
    # each epoch checks at its end (10, 20, 30 ...) whether one more epoch and scoring the held-out rows
    # after it (64 rows, half as long as training on 64: 5 s) end before 55: at 40, 40 + 10 + 5 does not
    result = Loop(spec, config, "binary", METRICS["accuracy"], torch.device("cpu"), deadline=55.0).run(arrays)
    assert result.epochs_run == 4 and result.stopped_by_budget and result.state_dict


def test_the_network_stops_within_an_epoch_longer_than_the_time_left(monkeypatch):
    """An epoch over many rows can outlast the time left: the deadline is read after every step within
    it, and a fit past it ends its epoch there (scored, kept, stopped by the budget)."""
    import torch

    from pipeline.metrics import METRICS
    from pipeline.nn.loop import Arrays, Loop, LoopConfig, NetSpec

    steps, step = [], Loop._step
    monkeypatch.setattr(Loop, "_step", lambda self, *a, **k: steps.append(1) or step(self, *a, **k))
    x, c = np.random.default_rng(0).normal(size=(2560, 3)).astype("float32"), np.zeros((2560, 1), dtype="int64")
    y = torch.as_tensor((x[:, 0] > 0).astype("int64"))
    arrays = Arrays(torch.from_numpy(x), torch.from_numpy(c), y, torch.from_numpy(x), torch.from_numpy(c), y)
    spec = NetSpec(num_numeric=3, cardinalities=(2,), out_dim=2, hidden_sizes=(8,), dropout=0.0,
                   max_embedding_dim=2)
    config = LoopConfig.from_params({"max_epochs": 5, "patience": 0, "batch_size": 8}, "params")  # 320 steps
    result = Loop(spec, config, "binary", METRICS["accuracy"], torch.device("cpu"),
                  deadline=time.time() - 1.0).run(arrays)
    assert len(steps) == 1  # one process: the deadline is read after every step
    assert result.epochs_run == 1 and result.stopped_by_budget and result.state_dict and result.best_epoch == 0
    steps.clear()
    whole = Loop(spec, config, "binary", METRICS["accuracy"], torch.device("cpu"), deadline=time.time() + 600).run(arrays)
    assert len(steps) == 5 * 320 and not whole.stopped_by_budget  # a deadline ahead: every step of every epoch
    steps.clear()  # ... unless predicting the test rows after the fit would not end by it
    short = Loop(spec, config, "binary", METRICS["accuracy"], torch.device("cpu"), deadline=time.time() + 600,
                 scored_after=10**12).run(arrays)
    assert short.epochs_run == 1 and short.stopped_by_budget and len(steps) < 320


def test_the_fold_result_says_the_fit_was_stopped_by_the_budget(adult):
    from pipeline.graph.tasks import DataRef, FitRequest, run_fit

    request = FitRequest("fit/lightgbm/t0/f0", "k", LightGBMModel(ROUNDS[LightGBMModel], "lightgbm"), {}, "lightgbm",
                         0, 0, 2, 0, 0, "roc_auc", 1, (), (), DataRef(obj=adult), deadline=time.time() - 1)
    result = run_fit(request)
    assert result.stopped_by_budget and result.model.booster_.current_iteration() == 1
    assert not run_fit(FitRequest(**{**vars(request), "deadline": None})).stopped_by_budget
