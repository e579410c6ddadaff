"""A model's study holds a window of its trials: past twice the searcher's `study_window` finished trials a
new study takes its place with the best and the latest, so that TPE's ask, which reads every trial its study
holds, costs the same at the thousandth trial as at the hundredth."""

from __future__ import annotations

import math

import pytest
from optuna.trial import TrialState

from pipeline.config import HpoConf, SearchDimConf
from pipeline.hpo import KEPT_BEST, TrialSource
from pipeline.errors import ConfigError

WINDOW = 30


def _source(target="pipeline.searchers.TpeSearch", pruning=False, direction="minimize",
            window=WINDOW) -> TrialSource:
    options = {"study_window": window} if target.endswith("TpeSearch") else {}
    spec = HpoConf(num_trials=10_000, seed=0, pruning=pruning, start_from_defaults=True, _target_=target,
                   options=options)
    space = {"x": SearchDimConf("float", 0.0, 1.0), "y": SearchDimConf("float", 0.0, 1.0)}
    return TrialSource(spec, {"m": space}, {"m": {"x": 0.5, "y": 0.5}}, direction)


def _loss(params: dict) -> float:
    return (params["x"] - 0.3) ** 2 + (params["y"] - 0.7) ** 2 + 0.01 * math.sin(40 * params["x"])


def test_the_study_tpe_asks_holds_at_most_twice_its_window_and_keeps_the_best_trials():
    source = _source()
    told, held = [], []
    for trial in range(10 * WINDOW):
        score = _loss(source.params("m", trial))
        held.append(len(source._study("m").get_trials(deepcopy=False)))
        source.tell("m", trial, score)
        told.append(score)
    study = source._study("m")
    assert source._generations["m"] >= 4 and max(held) <= 2 * WINDOW
    assert study.best_value == min(told)  # the best trial outlives every renewal
    kept = sorted(t.value for t in study.get_trials(deepcopy=False) if t.state == TrialState.COMPLETE)
    assert kept[:KEPT_BEST] == sorted(told)[:KEPT_BEST]
    assert min(told[-WINDOW:]) < 0.05  # still searching where the loss is low


def test_trials_running_when_the_study_is_renewed_are_told_to_their_own_and_join_the_new():
    source = _source(pruning=True)
    for running in range(3):
        source.params("m", running)
    trial = 3
    while source._generations.get("m", 0) == 0:
        source.params("m", trial)
        source.tell("m", trial, 1.0 + trial)
        trial += 1
    source.params("m", trial)  # asked of the new study
    old = source._trials[("m", 1)].study
    assert old is not source._study("m")
    source.tell("m", 0, 0.5)
    assert source.fold_scored("m", 1, 9.0, pruned=True)  # its fold pruned over rounds
    source.drop("m", 2)
    states = {t.number: t.state for t in old.get_trials(deepcopy=False)}
    assert states[0] == TrialState.COMPLETE and states[1] == TrialState.PRUNED and states[2] == TrialState.FAIL
    new = source._study("m").get_trials(deepcopy=False)
    assert 0.5 in [t.value for t in new if t.state == TrialState.COMPLETE]  # joined the current study
    assert sum(t.state == TrialState.PRUNED for t in new) == 1  # the pruned one too, the failed one not
    assert source._study("m").best_value == 0.5


def test_a_searcher_without_a_window_keeps_every_trial_in_one_study():
    source = _source("pipeline.searchers.RandomSearch")  # a grid's sampler reads its study to know what is left
    for trial in range(3 * WINDOW):
        source.tell("m", trial, _loss(source.params("m", trial)))
    assert "m" not in source._generations and len(source._study("m").get_trials(deepcopy=False)) == 3 * WINDOW


def test_a_maximised_score_keeps_its_highest_trials():
    source = _source(direction="maximize")
    told = []
    for trial in range(5 * WINDOW):
        score = -_loss(source.params("m", trial))
        source.tell("m", trial, score)
        told.append(score)
    assert source._generations["m"] >= 1 and source._study("m").best_value == max(told)


def test_hpo_options_study_window_null_keeps_every_trial_and_a_bad_one_is_refused_before_work():
    source = _source(window=None)
    for trial in range(3 * WINDOW):
        source.tell("m", trial, _loss(source.params("m", trial)))
    assert "m" not in source._generations and len(source._study("m").get_trials(deepcopy=False)) == 3 * WINDOW
    for bad in (0, -5, 2.5, "big", True):
        with pytest.raises(ConfigError, match=r"hpo.options.study_window=.*at least 1.*or null"):
            HpoConf(_target_="pipeline.searchers.TpeSearch", options={"study_window": bad}).make_searcher()


def test_the_engine_tpe_searchers_have_a_window_and_the_others_none():
    from pipeline import searchers

    assert searchers.TpeSearch().study_window == searchers.AutoSearch().study_window >= 10 * KEPT_BEST
    assert all(cls().study_window is None for cls in (searchers.RandomSearch, searchers.GridSearch,
                                                       searchers.NoSearch))
