"""Greedy ensemble selection when members predict NaN."""

import json
from types import SimpleNamespace

import numpy as np
import pytest

from pipeline.ensemble import ensemble_selection
from pipeline.errors import ModelOutputError
from pipeline.metrics import METRICS


@pytest.fixture
def regression():
    rng = np.random.default_rng(0)
    y = rng.normal(size=200)
    return y, y + rng.normal(scale=0.3, size=200)


def test_a_member_that_predicts_nan_gets_no_weight(regression):
    y, good = regression
    for preds in ([np.full_like(y, np.nan), good], [good, np.full_like(y, np.nan)]):
        weights = ensemble_selection(preds, y, METRICS["rmse"])
        assert np.isnan(preds[int(np.argmin(weights))]).all() and weights.max() == 1.0


def test_every_member_predicting_nan_is_an_error_naming_them(regression):
    y, _ = regression
    nan = np.full_like(y, np.nan)
    with pytest.raises(ModelOutputError, match=r"every model is NaN or infinite \(net, custom\)"):
        ensemble_selection([nan, nan], y, METRICS["rmse"], names=["net", "custom"])


class _Counting:
    """A fold model that counts the times it predicts."""

    def __init__(self, shift: float):
        self.shift, self.calls = shift, 0

    def predict_proba(self, X):
        self.calls += 1
        p = 1 / (1 + np.exp(-(X.to_numpy(dtype=float).sum(axis=1) * 0.1 + self.shift)))
        return np.column_stack([1 - p, p])


def test_stacked_members_of_an_ensemble_predict_each_lower_fold_model_once():
    import pandas as pd

    from pipeline.ensemble import EnsemblePredictor, StackedPredictor

    lower = {kind: [_Counting(0.1 * k + offset) for k in range(3)] for kind, offset in (("a", 0.0), ("b", 0.5))}
    layers = [[[("a", lower["a"][k]), ("b", lower["b"][k])]] for k in range(3)]  # fold k chains fold k below
    members = [StackedPredictor(f"{kind}_l2", [_Counting(0.2 * k + offset) for k in range(3)], "binary", [0, 1], None,
                                layers) for kind, offset in (("a", 0.0), ("b", -0.3))]
    X = pd.DataFrame(np.random.default_rng(0).normal(size=(40, 3)), columns=["x0", "x1", "x2"])
    alone = [m.predict_typed(X) for m in members]  # each member on its own predicts its lower levels itself
    assert all(m.calls == 2 for kind in lower.values() for m in kind)
    for m in (m for kind in lower.values() for m in kind):
        m.calls = 0
    ensemble = EnsemblePredictor("ensemble", members, [0.25, 0.75], "binary", [0, 1])
    np.testing.assert_array_equal(ensemble.predict_typed(X), 0.25 * alone[0] + 0.75 * alone[1])
    assert all(m.calls == 1 for kind in lower.values() for m in kind)
    assert all(top.calls == 2 for member in members for top in member.models)  # alone, then in the ensemble


def test_the_weights_are_chosen_on_a_bounded_sample_of_many_held_out_rows(monkeypatch, caplog):
    """Greedy selection scores every member at each step: on 2 million rows ranked by ROC AUC three
    members took 21 s after the fits, a cost no time limit reserved. Past SELECTION_ROWS held-out rows it
    sees a seeded random sample; the ensemble's scores are still on every row."""
    import logging
    from types import SimpleNamespace

    import pipeline.ensemble
    from pipeline.graph.nodes import ensemble as node

    monkeypatch.setattr(node, "SELECTION_ROWS", 500)
    seen = []
    real = pipeline.ensemble.ensemble_selection
    monkeypatch.setattr(pipeline.ensemble, "ensemble_selection",
                        lambda preds, y, *a, **k: seen.append(len(y)) or real(preds, y, *a, **k))
    rng = np.random.default_rng(0)
    n, test = 3000, np.arange(3000, 3200)
    y = (rng.random(3200) < 0.4).astype(int)
    def trial(noise):
        p = np.clip(0.4 + 0.3 * (y - 0.4) + rng.normal(0, noise, 3200), 0.01, 0.99)
        proba = np.column_stack([1 - p, p])
        return SimpleNamespace(held_out=np.arange(n), val_pred=proba[:n], test_pred=proba[test], folds=[None])
    best = {"a": trial(0.2), "b": trial(0.25)}
    data = SimpleNamespace(y=y, test_idx=test, classes=[0, 1])
    seconds = {"a": {"a": 1.0}, "b": {"b": 1.0}}
    with caplog.at_level(logging.INFO):
        row, (held, val_pred, _) = node._ensemble(best, data, METRICS["roc_auc"], "binary", {"a": 0, "b": 0},
                                                  seconds, 2, floor=["a"])
    assert seen == [500, 500]  # the selection and the floor's, each on the sample
    assert "weights chosen on 500 of the 3,000 held-out rows" in caplog.text
    assert len(val_pred) == n and row["val_roc_auc"] == METRICS["roc_auc"](y[:n], val_pred)
    assert (node.selection_rows(3000) == node.selection_rows(3000)).all()  # seeded
    assert node.selection_rows(500) == slice(None)


def test_the_saved_ensemble_holds_only_the_members_it_blends():
    """A model the selection never picks (here one that predicts noise) has weight 0: its predictor is
    not pickled into the ensemble's file (a forest's fold models are tens of MB)."""
    from types import SimpleNamespace

    from pipeline.graph.nodes import ensemble as node

    rng = np.random.default_rng(0)
    n, test = 2000, np.arange(2000, 2200)
    y = (rng.random(2200) < 0.4).astype(int)
    def trial(signal):
        p = np.clip(0.4 + signal * (y - 0.4) + rng.normal(0, 0.2, 2200), 0.01, 0.99)
        proba = np.column_stack([1 - p, p])
        return SimpleNamespace(held_out=np.arange(n), val_pred=proba[:n], test_pred=proba[test], folds=[None])
    best = {"a": trial(0.4), "b": trial(0.35), "noise": trial(0.0)}
    data = SimpleNamespace(y=y, test_idx=test, classes=[0, 1])
    predictors = {name: SimpleNamespace(name=name) for name in best}
    seconds = {name: {name: 1.0} for name in best}
    row, _ = node._ensemble(best, data, METRICS["roc_auc"], "binary", predictors, seconds, 2)
    import json

    weights = json.loads(row["params"]) if isinstance(row["params"], str) else row["params"]
    assert weights["noise"] == 0.0 and weights["a"] > 0
    saved = predictors["ensemble"]
    assert [m.name for m in saved.members] == [n for n in best if weights[n] > 0]
    assert all(w > 0 for w in saved.weights)


def test_candidates_holding_out_different_rows_are_compared_on_the_rows_they_all_predicted():
    """A first trial kept with fewer folds holds out fewer rows: every candidate is cut to the rows all of
    them predicted, each prediction staying with its row; one sharing no row with the others is left out."""
    from pipeline.graph.nodes.context import TrialResult
    from pipeline.graph.nodes.ensemble import shared_rows

    def trial(name, rows):
        rows = np.asarray(rows)
        return TrialResult(name, 0, {}, [], rows, rows * 10.0, np.zeros(3), 0.0)

    whole, short = trial("whole", range(10)), trial("short", [2, 5, 7])
    out = shared_rows({"whole": whole, "short": short})
    assert list(out["whole"].held_out) == [2, 5, 7] and list(out["whole"].val_pred) == [20.0, 50.0, 70.0]
    assert out["short"].held_out.tolist() == [2, 5, 7] and whole.held_out.size == 10  # the trials are not changed
    same = {"a": trial("a", range(4)), "b": trial("b", range(4))}
    assert shared_rows(same) is same
    apart = shared_rows({"whole": whole, "short": short, "other": trial("other", [0, 1])})
    assert sorted(apart) == ["short", "whole"]  # the candidates holding the most rows are kept first


def test_a_kind_the_search_added_with_fewer_folds_never_cuts_the_default_run_s_rows():
    """The default run's members ("keep") choose on every row they all predicted; an added kind's first trial
    that the budget cut to fewer folds is left out rather than cutting them to its rows, one that predicted
    those rows stays, and a default member with fewer folds still cuts every candidate's rows."""
    from pipeline.graph.nodes.context import TrialResult
    from pipeline.graph.nodes.ensemble import covering, shared_rows

    def trial(name, rows):
        rows = np.asarray(rows)
        return TrialResult(name, 0, {}, [], rows, rows * 10.0, np.zeros(3), 0.0)

    gbm, nn, forest = trial("gbm", range(10)), trial("nn", range(10)), trial("forest", range(10))
    linear = trial("linear", [2, 5, 7])
    kept, out = covering({"gbm": gbm, "nn": nn, "linear": linear, "forest": forest}, ["gbm", "nn"])
    assert list(kept) == ["gbm", "nn", "forest"] and out == ["linear"]
    assert all(t.held_out.size == 10 for t in shared_rows(kept).values())
    short_nn = trial("nn", [1, 2, 5, 7, 9])
    kept, out = covering({"gbm": gbm, "nn": short_nn, "linear": linear, "forest": forest}, ["gbm", "nn"])
    assert out == ["linear"] and set(kept) == {"gbm", "nn", "forest"}
    assert all(t.held_out.tolist() == [1, 2, 5, 7, 9] for t in shared_rows(kept).values())
    every = {"gbm": gbm, "linear": linear}
    assert covering(every, []) == (every, []) and covering(every, ["gbm", "linear"]) == (every, [])


def test_an_added_kind_that_ended_most_of_its_folds_stays_and_the_rows_are_cut_to_them():
    """An added kind whose folds hold at least `MOST_ROWS` of the default run's held-out rows stays in the
    ensemble (the best model may be the one the budget cut by a fold); below that share it is left out."""
    from pipeline.graph.nodes.context import TrialResult
    from pipeline.graph.nodes.ensemble import MOST_ROWS, covering, shared_rows

    def trial(name, rows):
        rows = np.asarray(rows)
        return TrialResult(name, 0, {}, [], rows, rows * 10.0, np.zeros(3), 0.0)

    gbm, nn = trial("gbm", range(10)), trial("nn", range(10))
    most = trial("catboost", [0, 1, 2, 3, 4, 5, 6, 7])  # 4 folds of 5
    assert 0.8 >= MOST_ROWS
    kept, out = covering({"gbm": gbm, "nn": nn, "catboost": most}, ["gbm", "nn"])
    assert out == [] and set(kept) == {"gbm", "nn", "catboost"}
    assert all(t.held_out.tolist() == list(range(8)) for t in shared_rows(kept).values())
    some = trial("catboost", [0, 1, 2, 3, 4, 5])  # 3 folds of 5
    kept, out = covering({"gbm": gbm, "nn": nn, "catboost": some}, ["gbm", "nn"])
    assert out == ["catboost"] and all(t.held_out.size == 10 for t in shared_rows(kept).values())


def test_a_default_member_far_behind_on_the_lead_rows_with_fewer_folds_is_left_out_not_cutting_the_rows():
    """A default member whose kind stood far behind on its lead fold's rows (`behind`), cut to fewer folds
    than another default member, is left out as an added kind is: the others keep every row. One level with
    the leader (not behind) still cuts the rows to its folds; where every default member is short, the one
    with the most rows keeps its place whatever its standing."""
    from pipeline.graph.nodes.context import TrialResult
    from pipeline.graph.nodes.ensemble import covering, shared_rows

    def trial(name, rows):
        rows = np.asarray(rows)
        return TrialResult(name, 0, {}, [], rows, rows * 10.0, np.zeros(3), 0.0)

    gbm, forest, short_nn = trial("gbm", range(10)), trial("forest", range(10)), trial("nn", [0, 5])
    kept, out = covering({"gbm": gbm, "nn": short_nn, "forest": forest}, ["gbm", "nn"], behind={"nn"})
    assert out == ["nn"] and set(kept) == {"gbm", "forest"}
    assert all(t.held_out.size == 10 for t in shared_rows(kept).values())
    kept, out = covering({"gbm": gbm, "nn trial 0": short_nn, "forest": forest}, ["gbm", "nn trial 0"],
                         behind={"nn"})
    assert out == ["nn trial 0"]
    kept, out = covering({"gbm": gbm, "nn": short_nn, "forest": forest}, ["gbm", "nn"], behind={"forest"})
    assert out == [] and all(t.held_out.tolist() == [0, 5] for t in shared_rows(kept).values())
    short_gbm = trial("gbm", [0, 2, 5, 7])
    kept, out = covering({"gbm": short_gbm, "nn": short_nn, "forest": forest}, ["gbm", "nn"],
                         behind={"gbm", "nn"})
    assert out == ["nn"] and set(kept) == {"gbm", "forest"}


def _held_out_case(members: dict) -> tuple:
    """(best, data, predictors, seconds) for the ensemble node on 2,000 held-out and 200 test rows of a
    binary label: each member (name -> (its signal, the first rows it held out)) predicts the label's share
    moved towards the label by its signal, plus noise."""
    from types import SimpleNamespace

    from pipeline.graph.nodes.context import TrialResult

    rng = np.random.default_rng(0)
    test = np.arange(2000, 2200)
    y = (rng.random(2200) < 0.4).astype(int)
    best = {}
    for name, (signal, held) in members.items():
        p = np.clip(0.4 + signal * (y - 0.4) + rng.normal(0, 0.2, 2200), 0.01, 0.99)
        proba, rows = np.column_stack([1 - p, p]), np.arange(held)
        best[name] = TrialResult(name, 0, {}, [None], rows, proba[rows], proba[test], 0.0)
    data = SimpleNamespace(y=y, test_idx=test, classes=[0, 1])
    return best, data, {name: SimpleNamespace(name=name) for name in best}, {n: {n: 1.0} for n in best}


def test_the_ensemble_chooses_on_every_row_where_only_an_added_kind_kept_fewer_folds(caplog):
    """Through the node: the default run's two members predicted all 2,000 held-out rows, the added kind's
    cut first trial 800 of them; the weights are chosen and scored on the 2,000, the added kind is out of
    the ensemble, and the run says so."""
    import json
    import logging

    from pipeline.graph.nodes import ensemble as node

    n = 2000
    best, data, predictors, seconds = _held_out_case({"a": (0.4, n), "b": (0.35, n), "linear": (0.5, 800)})
    y = data.y
    with caplog.at_level(logging.INFO):
        row, (held, val_pred, _) = node._ensemble(best, data, METRICS["roc_auc"], "binary", predictors,
                                                  seconds, 2, floor=["a", "b"], noise_guard=True)
    assert len(held) == len(val_pred) == n and row["val_roc_auc"] == METRICS["roc_auc"](y[:n], val_pred)
    weights = json.loads(row["params"]) if isinstance(row["params"], str) else row["params"]
    assert set(weights) == {"a", "b"}
    assert ("ensemble: linear left out: the budget ended its first trial with fewer folds than the default "
            "run's models, whose 2,000 held-out rows the weights are chosen on") in caplog.text


@pytest.mark.parametrize("behind", [True, False])
def test_a_default_member_behind_with_fewer_folds_leaves_the_ensemble_the_rows_of_the_others(caplog, behind):
    """Through the node: the default run's third member, far behind on the lead rows, kept 800 of the 2,000
    rows; the weights are chosen on the 2,000 without it. Level with the leader, it cuts them to its 800."""
    import logging

    from pipeline.graph.nodes import ensemble as node

    n = 2000
    best, data, predictors, seconds = _held_out_case({"a": (0.4, n), "b": (0.35, n), "nn": (0.1, 800)})
    with caplog.at_level(logging.INFO):
        row, (held, _, _) = node._ensemble(best, data, METRICS["roc_auc"], "binary", predictors, seconds, 2,
                                           floor=["a", "b", "nn"], noise_guard=True,
                                           behind={"nn"} if behind else ())
    assert len(held) == (n if behind else 800)
    assert ("ensemble: nn left out" in caplog.text) == behind


@pytest.fixture
def weights_by_the_metric(monkeypatch):
    """The ensemble's weights chosen on the eval metric itself, accuracy included: the noise guard's tests
    count rows right and wrong, and its rule is the same whatever score chooses the weights."""
    import pipeline.metrics

    monkeypatch.setattr(pipeline.metrics, "choice_metric", lambda metric: metric)


def _label_trials(right_of_changed: int, changed: int = 40, n: int = 2000):
    """A floor member (trial 0) right on 70% of n held-out rows, and a searched one that differs from it on
    `changed` rows: right on `right_of_changed` the floor had wrong, wrong on the rest, which the floor had
    right (3 classes)."""
    from types import SimpleNamespace

    rng = np.random.default_rng(0)
    test = np.arange(n, n + 300)
    y = rng.integers(0, 3, n + 300)
    def proba(labels):
        out = np.full((len(labels), 3), 0.1)
        out[np.arange(len(labels)), labels] = 0.8
        return out
    floor_labels = np.where(rng.random(n + 300) < 0.7, y, (y + 1) % 3)
    wrong = np.flatnonzero(floor_labels[:n] != y[:n])[:right_of_changed]
    right = np.flatnonzero(floor_labels[:n] == y[:n])[:changed - right_of_changed]
    searched_labels = floor_labels.copy()
    searched_labels[wrong] = y[wrong]
    searched_labels[right] = (y[right] + 2) % 3
    def trial(labels):
        p = proba(labels)
        return SimpleNamespace(held_out=np.arange(n), val_pred=p[:n], test_pred=p[test], folds=[None])
    best = {"m": trial(searched_labels), "m trial 0": trial(floor_labels)}
    data = SimpleNamespace(y=y, test_idx=test, classes=[0, 1, 2])
    return best, data


def test_a_searched_ensemble_within_the_rows_noise_of_the_default_runs_gives_way_to_it(caplog,
                                                                                      weights_by_the_metric):
    """Chosen among hundreds of trials, the searched members fit some of the held-out rows' noise: on 2,000
    rows a gain of 4 (22 rows more right, 18 more wrong) is within one standard error of the paired gain
    (about sqrt(40) rows), so under hpo=auto the default run's members are kept, and the run says why. A
    clear gain (40 of 40 rows) keeps the searched ones, and so does a searcher the user chose."""
    import json
    import logging

    from pipeline.graph.nodes import ensemble as node

    for right, guard, expected in ((22, True, "m trial 0"), (40, True, "m"), (22, False, "m")):
        best, data = _label_trials(right)
        predictors = {name: SimpleNamespace(name=name) for name in best}
        seconds = {name: {name: 1.0} for name in best}
        caplog.clear()
        with caplog.at_level(logging.INFO):
            row, _ = node._ensemble(best, data, METRICS["accuracy"], "multiclass", predictors, seconds, 2,
                                    floor=["m trial 0"], noise_guard=guard)
        weights = json.loads(row["params"]) if isinstance(row["params"], str) else row["params"]
        assert weights[expected] == 1.0, (right, weights)
        said = ("default run's selection kept" if expected == "m trial 0"
                else "searched trials' selection kept")
        assert (said in caplog.text) is guard  # hpo=auto's rule; a chosen searcher's best held-out score wins


def test_the_noise_of_a_gain_is_its_bootstrap_standard_error_scaled_to_every_row():
    from pipeline.ensemble import gain_noise

    rng = np.random.default_rng(1)
    y = rng.normal(size=40_000)
    ours, other = y + rng.normal(0, 0.5, y.size), y + rng.normal(0, 0.5, y.size)
    rmse = METRICS["rmse"]
    assert gain_noise(y, ours, ours, rmse) == 0.0  # the same predictions: no gain on any resample
    whole = gain_noise(y, ours, other, rmse, max_rows=40_000)
    drawn = gain_noise(y, ours, other, rmse, max_rows=4_000)
    assert 0.5 * whole < drawn < 2 * whole  # a draw of a tenth, scaled, reads the same noise
    assert gain_noise(y[:4_000], ours[:4_000], other[:4_000], rmse) > 2 * whole  # fewer rows: noisier


def test_a_models_best_trial_within_the_rows_noise_of_its_own_params_gives_way_to_them(caplog):
    """The same rule for each model's row: its best of many trials is kept over its trial 0 (the default
    run's fit) only for a gain on the held-out rows beyond one standard error; the run says which it kept."""
    import logging

    from pipeline.graph.nodes import ensemble as node

    for right, expected in ((22, 0), (40, 7)):
        trials, data = _label_trials(right)
        def result(trial, t):
            return SimpleNamespace(trial=trial, pruned=False, released=False, held_out=t.held_out,
                                   val_pred=t.val_pred, score=METRICS["accuracy"](data.y[t.held_out], t.val_pred))
        outcome = SimpleNamespace(trials={("m", 0): result(0, trials["m trial 0"]), ("m", 7): result(7, trials["m"])})
        caplog.clear()
        with caplog.at_level(logging.INFO):
            chosen = node._best_or_own(outcome, "m", outcome.trials[("m", 7)], METRICS["accuracy"], data)
        assert chosen.trial == expected
        assert ("own params (trial 0) kept" in caplog.text) is (expected == 0)


def test_the_floor_is_the_default_runs_members_and_under_hpo_auto_the_ensemble_leads_the_board(
        caplog, weights_by_the_metric):
    """Model m's searched trial beat its trial 0 beyond the noise (40 rows of 2,000) and is its row; model n
    is right on 60% of the rows; model c is a kind hpo=auto added (not in the default run). The floor is the
    default run's members: m's trial 0 and n, never c. The searched selection's gain over theirs is within
    the noise, so the default run's selection is kept although it scores below m's row on the held-out
    rows: under hpo=auto the ensemble still leads the board (the run's answer); else the rows go by score."""
    import logging

    from pipeline.graph.nodes import ensemble as node

    trials, data = _label_trials(40)
    n, rng = 2000, np.random.default_rng(4)
    labels = np.where(rng.random(n + 300) < 0.6, data.y, (data.y + 1) % 3)
    proba = np.full((n + 300, 3), 0.1)
    proba[np.arange(n + 300), labels] = 0.8
    def member(t, trial):
        return SimpleNamespace(trial=trial, held_out=t.held_out, val_pred=t.val_pred, test_pred=t.test_pred,
                               folds=[None])
    weak = SimpleNamespace(held_out=np.arange(n), val_pred=proba[:n], test_pred=proba[n:])
    members = {"m": member(trials["m"], 7), "n": member(weak, 0), "c": member(weak, 0)}
    extra = {"m trial 0": (trials["m trial 0"], None)}
    assert node.floor_members(members, extra, ("m", "n")) == ["m trial 0", "n"]
    assert node.floor_members(members, extra, ("m", "n", "c")) == ["m trial 0", "n", "c"]
    assert node.floor_members({"m": members["m"]}, {}, ("m",)) == []  # m's trial 0 is not a candidate
    candidates = {**members, "m trial 0": trials["m trial 0"]}
    predictors = {name: SimpleNamespace(name=name) for name in candidates}
    seconds = {name: {name: 1.0} for name in candidates}
    accuracy = METRICS["accuracy"]
    with caplog.at_level(logging.INFO):
        row, (held, val_pred, _) = node._ensemble(candidates, data, accuracy, "multiclass", predictors,
                                                  seconds, 2, floor=["m trial 0", "n"],
                                                  extra={"m trial 0": None}, noise_guard=True)
    assert "the default run's selection kept" in caplog.text
    weights = json.loads(row["params"]) if isinstance(row["params"], str) else row["params"]
    assert weights["m"] == weights["c"] == 0.0 and weights["m trial 0"] > 0
    m_row = accuracy(data.y[:n], trials["m"].val_pred)
    assert accuracy(data.y[held], val_pred) < m_row
    rows = [{"model": "m", "val_accuracy": m_row}, {"model": "ensemble", "val_accuracy": row["val_accuracy"]},
            {"model": "n", "val_accuracy": accuracy(data.y[:n], weak.val_pred)}]
    node.board_order(rows, accuracy, lead="ensemble")
    assert [r["model"] for r in rows] == ["ensemble", "m", "n"]
    node.board_order(rows, accuracy)
    assert [r["model"] for r in rows] == ["m", "ensemble", "n"]


def test_under_a_metric_of_the_predicted_class_the_weights_are_chosen_by_the_log_loss(caplog):
    """Two members predicting the same class on every row tie on accuracy whatever their weights, so the
    greedy step keeps the first; chosen by the log loss, the one sure of its right rows and unsure of its
    wrong ones carries the blend. The leaderboard row still scores accuracy."""
    import logging

    from pipeline.graph.nodes import ensemble as node
    from pipeline.metrics import choice_metric

    rng = np.random.default_rng(0)
    n, test = 600, np.arange(600, 700)
    y = rng.integers(0, 3, 700)
    right = rng.random(700) < 0.7
    label = np.where(right, y, (y + rng.integers(1, 3, 700)) % 3)
    def trial(sure):
        proba = np.full((700, 3), (1 - sure) / 2)
        proba[np.arange(700), label] = sure
        return SimpleNamespace(held_out=np.arange(n), val_pred=proba[:n], test_pred=proba[test], folds=[None])
    best = {"sharp": trial(0.98), "soft": trial(0.6)}
    data = SimpleNamespace(y=y, test_idx=test, classes=[0, 1, 2])
    seconds = {name: {name: 1.0} for name in best}
    with caplog.at_level(logging.INFO):
        row, _ = node._ensemble(best, data, METRICS["accuracy"], "multiclass", dict.fromkeys(best, 0),
                                seconds, 2)
    weights = json.loads(row["params"]) if isinstance(row["params"], str) else row["params"]
    assert weights["soft"] > weights["sharp"]
    assert "weights chosen by the held-out rows' log_loss, not their accuracy" in caplog.text
    assert row["val_accuracy"] == METRICS["accuracy"](y[:n], best["soft"].val_pred)
    assert choice_metric(METRICS["roc_auc"]) is METRICS["roc_auc"]  # a score of the probabilities: itself
    assert choice_metric(METRICS["rmse"]) is METRICS["rmse"]
    for name in ("accuracy", "balanced_accuracy", "f1"):
        assert choice_metric(METRICS[name]) is METRICS["log_loss"]
