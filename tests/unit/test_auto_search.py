"""hpo=auto: the default when time_limit_s is given and no hpo is chosen; each model's own params first,
then its kind's portfolio of proven configurations, then the sampler."""

from __future__ import annotations

import pytest

from pipeline import run_clock
from pipeline.errors import ConfigError
from pipeline.hpo import TrialSource
from pipeline.models import LightGBMModel
from pipeline.planning.budget import search_for_budget
from pipeline.searchers import AutoSearch, NoSearch
from pipeline.settings import read_settings


def test_a_time_limit_without_a_chosen_hpo_searches_with_hpo_auto(compose):
    settings = search_for_budget(read_settings(compose(["time_limit_s=60"])), ("time_limit_s=60",))
    assert isinstance(settings.conf.hpo.make_searcher(), AutoSearch)
    assert settings.conf.hpo.pruning and settings.conf.hpo.num_trials == 1000


@pytest.mark.parametrize("overrides", [["time_limit_s=60", "hpo=none"], ["fit_time_limit_s=60"], []])
def test_a_chosen_hpo_or_no_whole_run_limit_keeps_the_config(compose, overrides):
    settings = search_for_budget(read_settings(compose(overrides)), tuple(overrides))
    assert isinstance(settings.conf.hpo.make_searcher(), NoSearch)


def test_hpo_auto_without_a_limit_is_refused_naming_the_key(compose):
    with pytest.raises(ConfigError, match="hpo=auto.*set time_limit_s"):
        search_for_budget(read_settings(compose(["hpo=auto"])), ("hpo=auto",))


def test_both_limits_at_once_are_refused(compose):
    with pytest.raises(ConfigError, match="time_limit_s=60 and fit_time_limit_s=30 are both set"):
        read_settings(compose(["time_limit_s=60", "fit_time_limit_s=30"]))


def test_the_first_trials_are_the_models_own_params_then_its_portfolio_then_the_sampler(compose):
    settings = read_settings(compose(["model=lightgbm", "hpo=auto", "time_limit_s=60"]))
    spec = settings.models[0]
    source = TrialSource(settings.conf.hpo, {spec.name: spec.search_space}, {spec.name: spec.params}, "maximize",
                         portfolios={spec.name: spec.cls.profile.portfolio})
    space = spec.search_space
    portfolio = list(LightGBMModel.profile.portfolio)
    end = 1 + len(portfolio)
    asked = [source.params(spec.name, t) for t in range(end + 2)]
    assert asked[0] == {k: v for k, v in spec.params.items() if k in space}
    assert asked[0]["extra_trees"] is False  # the model's own params: no dimension left to the sampler
    assert asked[1:end] == portfolio and any(c["extra_trees"] for c in portfolio)  # AutoGluon's LightGBMXT
    assert asked[end] not in asked[:end] and all(space[k].contains(v) for k, v in asked[end].items())


@pytest.mark.parametrize("overrides, in_process", [
    (["time_limit_s=30"], "always"),  # a short budget: no worker pool to start
    (["time_limit_s=120"], "auto"),
    (["time_limit_s=30", "executor.in_process=never"], "never"),
])
def test_a_short_limit_fits_hpo_autos_trials_in_the_driver_unless_the_executor_was_chosen(compose, overrides,
                                                                                         in_process, monkeypatch):
    monkeypatch.setattr(run_clock, "cpu_share_so_far", lambda: 0.93)  # an idle machine's start-up
    settings = search_for_budget(read_settings(compose(overrides)), tuple(overrides))
    assert settings.conf.executor.in_process == in_process
    # one fit at a time in the driver: each is planned with the whole box, not one CPU of it
    assert settings.plan_input(None).levels.sequential is (in_process == "always")


@pytest.mark.parametrize("share, whole_box", [(0.93, True), (0.74, False), (0.47, False)])
def test_fits_in_the_driver_take_every_cpu_only_on_a_machine_not_busy(compose, monkeypatch, capsys, share,
                                                                      whole_box):
    """More runnable threads than CPUs (the start-up's main thread had under 0.75 of a CPU): a fit's extra
    threads would wait for CPUs the others hold, so each fit keeps one CPU's share, and the run says why."""
    monkeypatch.setattr(run_clock, "cpu_share_so_far", lambda: share)
    overrides = ("time_limit_s=30",)
    settings = search_for_budget(read_settings(compose(list(overrides))), overrides)
    plan_input = settings.plan_input(None)
    assert plan_input.levels.sequential is whole_box
    said = " ".join(capsys.readouterr().out.split())
    assert ("each with all the CPUs" in said) is whole_box
    assert (f"the machine is busy (this run's start-up had {share:.2f} of a CPU)" in said) is not whole_box


@pytest.mark.parametrize("overrides, folds", [
    (["time_limit_s=30"], 1),  # adult's ~39,000 training rows x 14 features: too many cells for 30 s
    (["time_limit_s=3600"], 5),  # under 10 million cells per hour of budget: 5-fold bags
    (["time_limit_s=3600", "data.max_rows=2000"], 5),
    (["time_limit_s=3600", "parallelism=default"], 1),  # chosen: kept
    (["time_limit_s=3600", "hpo=tpe"], 1),  # not hpo=auto
])
def test_hpo_auto_bags_its_trials_where_the_table_is_small_for_the_budget(compose, overrides, folds):
    settings = search_for_budget(read_settings(compose(overrides)), tuple(overrides))
    assert settings.conf.parallelism.num_folds == folds
    assert settings.plan_input(None).levels.num_folds == folds  # what the plan reads


REGRESSION = ["data=synthetic", "data.classes=0", "data.rows=3000"]


@pytest.mark.parametrize("overrides, forest", [
    # a number to predict on a table small for the budget: extremely randomised trees join
    (["time_limit_s=3600", *REGRESSION], True),
    (["time_limit_s=60", *REGRESSION], True),
    (["time_limit_s=3600"], False),  # adult: a class to predict
    (["time_limit_s=3600", "data=synthetic", "data.rows=3000"], False),  # binary
    (["time_limit_s=10", *REGRESSION[:-1], "data.rows=90000"], False),  # too many cells for 10 s
    (["time_limit_s=3600", *REGRESSION, "model=gbm"], False),  # models chosen: kept
    (["time_limit_s=3600", *REGRESSION, "hpo=tpe"], False),  # not hpo=auto
    # stacking: its levels are of the chosen models
    (["time_limit_s=3600", *REGRESSION, "stack_levels=1", "parallelism=bag5"], False),
])
def test_hpo_auto_adds_a_forest_on_a_regression_table_small_for_the_budget(compose, overrides, forest):
    settings = search_for_budget(read_settings(compose(overrides)), tuple(overrides))
    names = [m.name for m in settings.models]
    assert ("extra_trees" in names) is forest and ("extra_trees" in settings.conf.model) is forest
    assert any(k.startswith("model.extra_trees.params.") for k in settings.params) is forest  # logged as run
    if forest:
        assert names == ["lightgbm", "xgboost", "nn", "extra_trees"]
        assert [m.spec.name for m in settings.plan_input(None).models][-1] == "extra_trees"
