"""Refit parameters: the fold models' mean early-stopped length, early stopping off."""

from types import SimpleNamespace

import numpy as np
import pytest
import pandas as pd

from pipeline.models import FitContext, LightGBMModel, TorchMLPModel, XGBoostModel


def folds(**lengths):
    (name, values), = lengths.items()
    return [SimpleNamespace(**{name: v}) for v in values]


def test_each_library_refits_for_the_mean_early_stopped_length():
    # LightGBM counts iterations from 1; XGBoost's best_iteration and the network's best epoch count from 0.
    assert LightGBMModel().refit_params(folds(best_iteration_=[40, 51, 60])) == \
        {"num_iterations": 50, "early_stopping_round": 0}
    assert XGBoostModel().refit_params(folds(best_iteration_=[9, 19])) == \
        {"num_boost_round": 15, "early_stopping_rounds": None}
    assert TorchMLPModel().refit_params(folds(best_epoch_=[0, 1, 3])) == {"max_epochs": 2, "patience": 0}


def test_an_xgboost_refit_boosts_exactly_that_many_rounds():
    rng = np.random.default_rng(0)
    X = pd.DataFrame({"a": rng.random(300, dtype=np.float32), "b": rng.random(300, dtype=np.float32)})
    y = (X["a"] > 0.5).to_numpy().astype(int)
    model = XGBoostModel({"num_boost_round": 500, "early_stopping_rounds": 5})
    refit = model.clone(model.refit_params(folds(best_iteration_=[11, 13])))
    refit.fit(X, y, X, y, FitContext("binary", 2))
    assert refit.booster_.num_boosted_rounds() == 13


def test_the_refits_that_ended_are_kept_and_no_ensemble_refit_is_made_without_every_members(caplog):
    """A time limit cut b's refit: a's refit gets its predictor and row; the ensemble's refit, which keeps
    the bagged ensemble's weights for every member, is not made, and the run says why."""
    from pipeline.ensemble import BaggedPredictor, EnsemblePredictor
    from pipeline.graph.refit import refit_all

    y = np.array([0, 1, 0, 1])
    data = SimpleNamespace(problem_type="binary", y=y, test_idx=np.arange(4), classes=[0, 1])
    plan = SimpleNamespace(allocations=[SimpleNamespace(model="a"), SimpleNamespace(model="b")])
    bags = {m: BaggedPredictor(m, [], "binary", [0, 1], None) for m in ("a", "b")}
    ensemble = EnsemblePredictor("ensemble", list(bags.values()), [0.5, 0.5], "binary", [0, 1])
    predictors = {**bags, "ensemble": ensemble}
    proba = np.column_stack([1.0 - y * 0.8, 0.1 + y * 0.8])
    result = SimpleNamespace(model=SimpleNamespace(params={}), test_pred=proba, test_predict_seconds=0.01,
                             device="cpu", gpu_ids=(), fit_seconds=0.5, predict_seconds=0.01)
    best = {"a": SimpleNamespace(trial=3)}
    with caplog.at_level("WARNING", logger="pipeline.graph.refit"):
        rows = refit_all({("a", 1): result}, best, predictors, data, plan, None)
    assert [r["model"] for r in rows] == ["a_refit"] and rows[0]["test_roc_auc"] == 1.0
    assert "a_refit" in predictors and "ensemble_refit" not in predictors
    assert "no ensemble_refit: b, in the ensemble, had no refit (the time limit cut it)" in caplog.text
    best_both = {**best, "b": SimpleNamespace(trial=0)}
    both = refit_all({("a", 1): result, ("b", 1): result}, best_both, predictors, data, plan, None)
    assert [r["model"] for r in both] == ["a_refit", "b_refit", "ensemble_refit"]


def _regression_board():
    """A bagged ensemble of a and b and their refits on four test rows of a number to predict."""
    from pipeline.ensemble import BaggedPredictor, EnsemblePredictor
    from pipeline.graph.nodes.ensemble import Board

    y = np.array([1.0, 2.0, 3.0, 4.0])
    data = SimpleNamespace(problem_type="regression", y=y, test_idx=np.arange(4), classes=None)
    bags = {m: BaggedPredictor(m, [], "regression", None, None) for m in ("a", "b")}
    ensemble = EnsemblePredictor("ensemble", list(bags.values()), [0.5, 0.5], "regression", None)
    bagged_pred = y + 1.0  # the bags' ensemble predicts one too high, the refits' one too low
    rows = [{"model": "ensemble", "level": 2, "predict_rows_per_s": 400.0},
            {"model": "a", "level": 1, "predict_rows_per_s": 800.0}]
    board = Board(rows, {**bags, "ensemble": ensemble}, {"a": SimpleNamespace(trial=3),
                                                         "b": SimpleNamespace(trial=0)},
                  test_preds={"ensemble": bagged_pred})
    result = SimpleNamespace(model=SimpleNamespace(params={}), test_pred=y - 1.0, test_predict_seconds=0.005,
                             device="cpu", gpu_ids=(), fit_seconds=0.5, predict_seconds=0.01)
    plan = SimpleNamespace(allocations=[SimpleNamespace(model="a"), SimpleNamespace(model="b")])
    return data, board, plan, {("a", 1): result, ("b", 1): result}


def test_the_blend_of_both_ensembles_is_their_mean_and_leads_the_board():
    """Under hpo=auto the run answers with the mean of the bagged ensemble's and the refits' ensemble's
    predictions: its row is scored on the blended test predictions, its predictor averages the two, and
    the evaluation shows it first whatever the other rows score."""
    from pipeline.graph.nodes.evaluate import EvaluateNode
    from pipeline.graph.refit import BLEND, blend_row, refit_all

    data, board, plan, refits = _regression_board()
    predictors, preds = dict(board.predictors), dict(board.test_preds)
    rows = refit_all(refits, board.best, predictors, data, plan, None, preds)
    assert np.allclose(preds["ensemble_refit"], data.y - 1.0)
    row = blend_row(preds, [*board.rows, *rows], predictors, data)
    assert row["model"] == BLEND and row["test_rmse"] == 0.0  # +1 and -1 average out
    assert np.isnan(row["val_rmse"])  # the refits have no held-out rows
    assert row["level"] == 2 and row["num_folds"] == 1
    # each ensemble predicts the four rows once: 4 / 400 s and 4 / (4 / 0.01 s) for the refits' two members
    assert row["predict_rows_per_s"] == pytest.approx(4 / (4 / 400.0 + 0.01))
    blended = predictors[BLEND]
    assert [m.name for m in blended.members] == ["ensemble", "ensemble_refit"]
    assert blended.weights == [0.5, 0.5]
    from pipeline.graph.nodes.ensemble import Board

    refit_board = Board([row, *rows], {}, lead=BLEND)
    ctx = SimpleNamespace()
    task = SimpleNamespace(depends_on=("ensemble", "refit"))
    ordered = EvaluateNode().run(task, {"ensemble": board, "refit": refit_board}, ctx).rows
    assert [r["model"] for r in ordered] == [BLEND, "ensemble", "a", "a_refit", "b_refit", "ensemble_refit"]


def test_no_blend_is_made_without_the_refits_ensemble():
    """Without stand-ins (a `refit=true` the user chose), a time limit that cut a member's refit leaves no
    refits' ensemble: no blend either, and the bagged ensemble's board keeps its order."""
    from pipeline.graph.refit import BLEND, blend_row, refit_all

    data, board, plan, refits = _regression_board()
    predictors, preds = dict(board.predictors), dict(board.test_preds)
    rows = refit_all({("a", 1): refits[("a", 1)]}, board.best, predictors, data, plan, None, preds)
    assert blend_row(preds, [*board.rows, *rows], predictors, data) is None and BLEND not in predictors


def test_under_hpo_auto_a_member_whose_refit_was_cut_stands_in_with_its_bag(caplog):
    """hpo=auto's blend needs the refits' ensemble: where the time limit cut a member's refit, that member is
    in it as its bag, at its weight, beside the refits that ended, and the run says which. Without any refit
    there is no refits' ensemble, and without stand-ins (refit=true chosen by the user) every member needs
    its refit."""
    from pipeline.ensemble import BaggedPredictor, EnsemblePredictor
    from pipeline.graph.refit import BLEND, blend_row, refit_all

    data, board, plan, refits = _regression_board()
    c = BaggedPredictor("c", [], "regression", None, None)
    members = [board.predictors["a"], board.predictors["b"], c]
    weights = [0.5, 0.25, 0.25]
    board.predictors.update(c=c, ensemble=EnsemblePredictor("ensemble", members, weights, "regression", None))
    bag_of_c = SimpleNamespace(trial=2, test_pred=data.y + 3.0, test_predict_seconds=0.002)
    stand_ins = {**board.best, "c": bag_of_c}
    predictors, preds = dict(board.predictors), dict(board.test_preds)
    with caplog.at_level("WARNING", logger="pipeline.graph.refit"):
        rows = refit_all(refits, board.best, predictors, data, plan, None, preds, stand_ins)
    # 0.5 (y - 1) + 0.25 (y - 1) + 0.25 (y + 3) = y
    assert np.allclose(preds["ensemble_refit"], data.y) and rows[-1]["test_rmse"] == 0.0
    assert [m.name for m in predictors["ensemble_refit"].members] == ["a_refit", "b_refit", "c"]
    assert "ensemble_refit: c stands in with its bag: the time limit cut its refit" in caplog.text
    assert blend_row(preds, [*board.rows, *rows], predictors, data)["model"] == BLEND
    # no refit at all, or no stand-ins: no refits' ensemble, and so no blend
    for made, allowed in (({}, stand_ins), (refits, None)):
        predictors, preds = dict(board.predictors), dict(board.test_preds)
        refit_all(made, board.best, predictors, data, plan, None, preds, allowed)
        assert "ensemble_refit" not in predictors and "ensemble_refit" not in preds
        assert blend_row(preds, [], predictors, data) is None
