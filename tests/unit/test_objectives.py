"""What a run returns to a sweeper: one value per configured objective."""

import pytest

from pipeline.errors import ConfigError
from pipeline.objectives import check, job_return

ROWS = [
    {"model": "ensemble", "val_roc_auc": 0.93, "fit_seconds": 0.5, "predict_seconds": 0.0},
    {"model": "lightgbm", "val_roc_auc": 0.92, "fit_seconds": 3.0, "predict_seconds": 0.25},
    {"model": "xgboost", "val_roc_auc": 0.91, "fit_seconds": 4.0, "predict_seconds": 0.5},
]


def test_one_objective_returns_a_float_as_hydra_sweepers_expect():
    assert job_return(("val_score",), ROWS, "roc_auc") == 0.93


def test_an_ensemble_costs_its_members_too():
    assert job_return(("val_score", "fit_seconds", "predict_seconds"), ROWS, "roc_auc") == [0.93, 7.5, 0.75]
    refit = {"model": "lightgbm_refit", "val_roc_auc": float("nan"), "fit_seconds": 9.0, "predict_seconds": 1.0}
    assert job_return(("fit_seconds",), ROWS + [refit], "roc_auc") == 7.5  # refits are not the returned model
    single = [ROWS[1], ROWS[2]]
    assert job_return(("fit_seconds", "val_score"), single, "roc_auc") == [3.0, 0.92]


STACKED = [
    {"model": "lightgbm_l2", "level": 2, "val_roc_auc": 0.935, "fit_seconds": 2.0, "predict_seconds": 0.125},
    {"model": "ensemble", "level": 3, "val_roc_auc": 0.934, "fit_seconds": 0.5, "predict_seconds": 0.0},
    {"model": "xgboost_l2", "level": 2, "val_roc_auc": 0.933, "fit_seconds": 2.5, "predict_seconds": 0.25},
    {**ROWS[1], "level": 1}, {**ROWS[2], "level": 1},
    {"model": "lightgbm_l2_refit", "level": 2, "val_roc_auc": float("nan"), "fit_seconds": 9.0, "predict_seconds": 1.0},
]
INNER = {1: 6.0}  # level 1's models without 2+ folds, fit for level 2's features


def test_a_stacked_bag_costs_every_level_below_it_and_the_models_fit_for_its_features():
    got = job_return(("val_score", "fit_seconds", "predict_seconds"), STACKED, "roc_auc", INNER)
    assert got == [0.935, 2.0 + 3.0 + 4.0 + 6.0, 0.125 + 0.25 + 0.5]  # not the other level-2 bag, not the refit
    ensemble_first = [STACKED[1], STACKED[0], *STACKED[2:]]
    assert job_return(("fit_seconds", "predict_seconds"), ensemble_first, "roc_auc", INNER) == \
        [0.5 + 2.0 + 2.5 + 3.0 + 4.0 + 6.0, 0.125 + 0.25 + 0.25 + 0.5]
    level_1_first = [STACKED[3], *STACKED[:3], *STACKED[4:]]
    assert job_return(("fit_seconds",), level_1_first, "roc_auc", INNER) == 3.0  # needs nothing else


@pytest.mark.parametrize("names, expected", [
    ([], "objectives=[]: give at least one of val_score, fit_seconds, predict_seconds"),
    (["val_score", "accuracy"], "objectives: 'accuracy' is not an objective; valid ones are val_score"),
    (["val_score", "val_score"], "each objective may appear once"),
])
def test_bad_objectives_are_config_errors(names, expected):
    with pytest.raises(ConfigError) as info:
        check(names)
    assert expected in str(info.value)


def test_the_blend_with_the_refits_returns_the_bagged_sides_score_and_costs_both_sides():
    """hpo=auto's blend of the bagged ensemble and the refits' (no held-out score: the refits learnt from
    every row) returns the held-out score of the first row that has one, and costs the bags and the refits."""
    nan = float("nan")
    def row(model, level, fit_seconds, predict_seconds):
        return {"model": model, "level": level, "val_roc_auc": nan, "fit_seconds": fit_seconds,
                "predict_seconds": predict_seconds}

    blend = row("ensemble_blend", 2, 0.0, 0.0)
    refits = [row("lightgbm_refit", 1, 1.0, 0.1), row("ensemble_refit", 2, 0.0, 0.0)]
    rows = [blend, *({**r, "level": 1 + (r["model"] == "ensemble")} for r in ROWS), *refits]
    got = job_return(("val_score", "fit_seconds", "predict_seconds"), rows, "roc_auc")
    assert got == [0.93, 3.0 + 4.0 + 1.0, 0.25 + 0.5 + 0.1]
