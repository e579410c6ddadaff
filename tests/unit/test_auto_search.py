"""hpo=auto: the default when time_limit_s is given and no hpo is chosen; each model's own params first,
then its kind's portfolio of proven configurations, then the sampler."""

from __future__ import annotations

import pytest

from pipeline import hardware, run_clock
from pipeline.errors import ConfigError
from pipeline.hpo import TrialSource
from pipeline.models import LightGBMModel
from pipeline.planning.budget import POOL_FITS_FROM, pool_gain, search_for_budget
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


@pytest.mark.parametrize("key, value, expected", [
    ("hpo.pruning", "false", {"pruning": False, "num_trials": 1000}),
    ("hpo.num_trials", "50", {"pruning": True, "num_trials": 50}),  # a ceiling on hpo=auto's trials
    ("hpo.num_trials", "1", {"pruning": True, "num_trials": 1}),
    ("hpo.seed", "7", {"pruning": True, "num_trials": 1000, "seed": 7}),
])
def test_a_key_under_hpo_tunes_hpo_auto_rather_than_turning_it_off(compose, capsys, caplog, key, value,
                                                                   expected):
    overrides = ("time_limit_s=60", f"{key}={value}")
    with caplog.at_level("WARNING", logger="pipeline"):
        settings = search_for_budget(read_settings(compose(list(overrides)), overrides), overrides)
    hpo = settings.conf.hpo
    assert isinstance(hpo.make_searcher(), AutoSearch) and hpo.start_from_defaults
    assert {k: getattr(hpo, k) for k in expected} == expected
    assert settings.params["hpo.num_trials"] == expected["num_trials"]
    said = " ".join(capsys.readouterr().out.split())
    assert f"{key}={value} as set" in said
    assert ("with pruning" in said) == expected["pruning"]
    assert "does not search" not in caplog.text  # hpo=none's warning of repeated trials: not what runs


@pytest.mark.parametrize("override, searcher", [("hpo.start_from_defaults=false", "hpo=tpe"),
                                                ("hpo.grid_points=5", "hpo=grid")])
def test_a_key_hpo_auto_does_not_take_is_refused_naming_the_searcher_it_belongs_to(compose, override, searcher):
    overrides = ("time_limit_s=60", override)
    with pytest.raises(ConfigError, match=f"{override}: .*hpo=auto.*e.g. {searcher} "):
        search_for_budget(read_settings(compose(list(overrides)), overrides), overrides)


@pytest.mark.parametrize("overrides", [("time_limit_s=60", "hpo=none", "hpo.num_trials=3"),
                                       ("time_limit_s=60", "hpo._target_=pipeline.searchers.NoSearch")])
def test_a_searcher_chosen_with_its_keys_stays_as_chosen(compose, overrides):
    settings = search_for_budget(read_settings(compose(list(overrides)), overrides), overrides)
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
    own = {k: v for k, v in spec.params.items() if k in space}
    assert asked[0] == own and set(own) == set(space)  # the model's own params: no dimension left to the sampler
    assert asked[0]["extra_trees"] is False and asked[0]["lambda_l1"] == 0.0
    assert asked[1:end] == [{**own, **entry} for entry in portfolio]  # each entry laid over the params
    assert any(c["extra_trees"] for c in portfolio)  # AutoGluon's LightGBMXT
    assert any(c["num_leaves"] == 4 for c in asked[1:end])  # trees of 4 leaves, inside the space
    assert asked[end] not in asked[:end] and all(space[k].contains(v) for k, v in asked[end].items())


def test_xgboosts_portfolio_reaches_trees_of_4_leaves_inside_its_space(compose):
    """Depth 2 (FLAML's search starts from 4 leaves): an entry outside the space would be asked at the
    params' depth of 6 instead."""
    settings = read_settings(compose(["model=xgboost", "hpo=auto", "time_limit_s=60"]))
    spec = settings.models[0]
    portfolio = spec.cls.profile.portfolio
    source = TrialSource(settings.conf.hpo, {spec.name: spec.search_space}, {spec.name: spec.params},
                         "maximize", portfolios={spec.name: portfolio})
    asked = [source.params(spec.name, t) for t in range(1 + len(portfolio))]
    assert [c["max_depth"] for c in asked] == [6, 6, 8, 4, 2]
    assert all(spec.search_space[k].contains(v) for c in asked for k, v in c.items())


@pytest.mark.parametrize("overrides, in_process", [
    (["time_limit_s=30"], "always"),  # a short budget: no worker pool to start
    (["time_limit_s=120"], "auto"),
    (["time_limit_s=30", "executor.in_process=never"], "never"),
])
def test_a_short_limit_fits_hpo_autos_trials_in_the_driver_unless_the_executor_was_chosen(compose, overrides,
                                                                                         in_process, monkeypatch):
    monkeypatch.setattr(run_clock, "others_busy_cpus", lambda: 0.0)  # an idle machine
    monkeypatch.setattr(hardware, "job_cpus", lambda machine_cpus=None: 2)
    settings = search_for_budget(read_settings(compose(overrides)), tuple(overrides))
    assert settings.conf.executor.in_process == in_process
    # one fit at a time in the driver: each is planned with the whole box, not one CPU of it
    assert settings.plan_input(None).levels.sequential is (in_process == "always")


def test_the_pool_is_estimated_to_fit_twice_as_much_as_the_driver_from_five_cpus():
    """One fit at a time with every CPU against one thread a fit (Amdahl, a GBM fit's serial share)."""
    assert pool_gain(1) == pytest.approx(1.0)
    assert pool_gain(2) == pytest.approx(1.3)
    assert pool_gain(4) < POOL_FITS_FROM <= pool_gain(5)
    assert pool_gain(16) == pytest.approx(5.5)


@pytest.mark.parametrize("cpus, declared, in_process, sequential", [
    (2, None, "always", True),  # this machine's two CPUs: one fit at a time in the driver
    (4, None, "always", True),
    (16, None, "auto", False),  # a workstation: the pool, several fits at once
    (2, 16, "auto", False),  # the declared box's CPUs count, not this machine's (a dry run plans for it)
    (16, 2, "always", True),
])
def test_a_short_limit_keeps_the_worker_pool_where_it_fits_more(compose, monkeypatch, capsys, cpus, declared,
                                                                in_process, sequential):
    """On many CPUs one fit at a time with every thread leaves most of them idle (a fit's threads do not
    scale): hpo=auto's short limit keeps the pool there, and the run says why."""
    monkeypatch.setattr(run_clock, "others_busy_cpus", lambda: 0.0)
    monkeypatch.setattr(hardware, "job_cpus", lambda machine_cpus=None: cpus)
    overrides = ["time_limit_s=30"] + (["+hardware=cpu", f"hardware.num_cpus={declared}", "dry_run=true"]
                                       if declared else [])
    settings = search_for_budget(read_settings(compose(overrides)), tuple(overrides))
    assert settings.conf.executor.in_process == in_process
    assert settings.plan_input(None).levels.sequential is sequential
    said = " ".join(capsys.readouterr().out.split())
    assert ("the trials keep the worker pool" in said) is (in_process == "auto")
    assert ("fitted in the driver" in said) is (in_process == "always")
    if in_process == "auto":
        assert "on 16 CPUs it fits about 5.5 times as much" in said


@pytest.mark.parametrize("others, share, whole_box, why", [
    (0.0, 0.47, True, None),  # others' work measured: it decides
    (0.49, 0.93, True, None),
    (1.0, 0.93, False, "other processes kept 1.0 CPUs busy while this run started"),
    (None, 0.93, True, None),  # not measurable (no /proc/stat): the main thread's share decides
    (None, 0.74, False, "this run's start-up had 0.74 of a CPU"),
])
def test_fits_in_the_driver_take_every_cpu_only_on_a_machine_not_busy(compose, monkeypatch, capsys, others,
                                                                      share, whole_box, why):
    """Other processes busy on half a CPU or more while the run started (or, unmeasured, the start-up's main
    thread had under 0.75 of a CPU): a fit's extra threads would wait for CPUs the others hold, so each fit
    keeps one CPU's share, and the run says why."""
    monkeypatch.setattr(run_clock, "others_busy_cpus", lambda: others)
    monkeypatch.setattr(run_clock, "cpu_share_so_far", lambda: share)
    monkeypatch.setattr(hardware, "job_cpus", lambda machine_cpus=None: 2)
    overrides = ("time_limit_s=30",)
    settings = search_for_budget(read_settings(compose(list(overrides))), overrides)
    assert settings.plan_input(None).levels.sequential is whole_box
    said = " ".join(capsys.readouterr().out.split())
    assert ("each with all the CPUs" in said) is whole_box
    assert whole_box or f"the machine is busy ({why})" in said


@pytest.fixture
def clock(monkeypatch):
    """The wall clock, the machine's busy CPU seconds (/proc/stat) and this process's, set by the test."""
    clock = {"wall": 100.0, "machine": 50.0, "own": 3.0}
    monkeypatch.setattr(run_clock.time, "time", lambda: clock["wall"])
    monkeypatch.setattr(run_clock, "_machine_busy_seconds", lambda: clock["machine"])
    monkeypatch.setattr(run_clock, "_own_seconds", lambda: clock["own"])
    monkeypatch.setattr(run_clock, "_machine_at_start", None)
    monkeypatch.setattr(run_clock, "_machine_before", None)
    return clock


def test_others_busy_cpus_is_the_machines_busy_time_less_this_processs(clock, monkeypatch):
    run_clock.note_machine()
    clock.update(wall=100.1)
    assert run_clock.others_busy_cpus() is None  # too short to tell: a few clock ticks
    clock.update(wall=102.0, machine=53.0, own=5.0)  # 3 CPU seconds in 2 s, 2 of them this process's
    assert run_clock.others_busy_cpus() == pytest.approx(0.5)
    monkeypatch.setattr(run_clock, "_machine_busy_seconds", lambda: None)  # no /proc/stat
    run_clock.note_machine()
    assert run_clock.others_busy_cpus() is None


def test_a_later_job_of_a_sweep_reads_the_machine_over_the_earlier_jobs_window(clock):
    run_clock.note_machine()  # the first job
    clock.update(wall=110.0, machine=68.0, own=11.0)  # its 10 s: 8 CPU seconds its own, 10 another process's
    run_clock.note_machine()  # the next job's start
    clock.update(wall=110.05, machine=68.08, own=11.03)
    assert run_clock.others_busy_cpus() == pytest.approx((18.08 - 8.03) / 10.05)  # the earlier window
    clock.update(wall=111.0, machine=69.0, own=11.5)
    assert run_clock.others_busy_cpus() == pytest.approx(0.5)  # its own window once measurable


BUSY_SECOND = "import time\nend = time.time() + 1.0\nwhile time.time() < end: pass"


def test_others_busy_cpus_sees_another_process_busy():
    import subprocess
    import sys
    import time

    run_clock.note_machine()
    # a process that is not this one's descendant: started by a child that exits at once, it is orphaned
    orphan = f"import subprocess, sys\nsubprocess.Popen([sys.executable, '-c', {BUSY_SECOND!r}])"
    subprocess.run([sys.executable, "-c", orphan], check=True)
    time.sleep(1.3)
    assert run_clock.others_busy_cpus() > 0.5  # its second of work over about a second and a half


@pytest.mark.parametrize("alive", [True, False])
def test_the_work_of_processes_this_one_started_is_its_own(alive):
    """A sweep's tracking service, a worker pool: alive or ended, their CPU time is this run's, which
    others_busy_cpus takes from the machine's (a CPU second of the child's, whatever the load beside)."""
    import subprocess
    import sys

    work = "import time\nwhile time.process_time() < 1.0: pass\nprint('done', flush=True)\n"
    before = run_clock._own_seconds()
    child = subprocess.Popen([sys.executable, "-c", work + ("time.sleep(60)" if alive else "")],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "done"
        if not alive:
            child.wait()
        assert run_clock._own_seconds() - before >= 0.95
    finally:
        child.kill()
        child.wait()


@pytest.mark.parametrize("overrides, folds", [
    # adult's ~39,000 training rows x 14 features: under 80 million cells per hour of budget for 30 s, over
    # it for 20 s
    (["time_limit_s=30"], 5),
    (["time_limit_s=20"], 1),
    (["time_limit_s=3600"], 5),
    # ~8,000 training rows x 20 features: over FLAML's 10 million per hour for 30 s, under 80 million; over
    # it for 5 s
    (["time_limit_s=30", "data=synthetic"], 5),
    (["time_limit_s=5", "data=synthetic"], 1),
    (["time_limit_s=3600", "data.max_rows=2000"], 5),
    (["time_limit_s=3600", "parallelism=default"], 1),  # chosen: kept
    (["time_limit_s=3600", "hpo=tpe"], 1),  # not hpo=auto
])
def test_hpo_auto_bags_its_trials_where_the_table_is_small_for_the_budget(compose, overrides, folds):
    settings = search_for_budget(read_settings(compose(overrides)), tuple(overrides))
    assert settings.conf.parallelism.num_folds == folds
    assert settings.plan_input(None).levels.num_folds == folds  # what the plan reads


REGRESSION = ["data=synthetic", "data.classes=0", "data.rows=3000"]


REGRESSION_KINDS = ["extra_trees", "catboost", "linear"]
BINARY_KINDS = ["linear", "knn"]
MULTICLASS_KINDS = ["linear", "random_forest"]
WHAT = {"extra_trees": "scikit-learn's extremely randomised trees", "catboost": "CatBoost's ordered boosting",
        "linear": "a linear model choosing its own penalty",
        "random_forest": "scikit-learn's random forest, its trees of at most 128 leaves",
        "knn": "k nearest neighbours choosing their own number"}


@pytest.mark.parametrize("overrides, added", [
    # a number to predict on a table small for the budget: extremely randomised trees, CatBoost and the
    # linear model join
    (["time_limit_s=3600", *REGRESSION], REGRESSION_KINDS),
    (["time_limit_s=60", *REGRESSION], REGRESSION_KINDS),
    # a class to predict: the linear model; on two classes k nearest neighbours, on more the random forest
    (["time_limit_s=3600"], BINARY_KINDS),  # adult, binary
    (["time_limit_s=3600", "data=synthetic", "data.rows=3000"], BINARY_KINDS),  # binary
    (["time_limit_s=3600", "data=synthetic", "data.rows=3000", "data.classes=4"], MULTICLASS_KINDS),
    (["time_limit_s=30"], []),  # adult's ~39,000 training rows x 14 features: too many cells for 30 s
    (["time_limit_s=10", *REGRESSION[:-1], "data.rows=90000"], []),  # too many cells for 10 s
    # bagged (under 80 million cells per hour) but over FLAML's rule (10 million): the rows are too many
    (["time_limit_s=30", *REGRESSION[:-1], "data.rows=10000"], []),
    (["time_limit_s=3600", *REGRESSION, "model=gbm"], []),  # models chosen: kept
    (["time_limit_s=3600", *REGRESSION, "~model.nn"], []),  # a model removed: chosen too
    # a default model tuned, or a library parameter added to one: the models are still the default ones
    (["time_limit_s=60", *REGRESSION, "model.nn.params.max_epochs=500"], REGRESSION_KINDS),
    (["time_limit_s=60", *REGRESSION, "+model.xgboost.params.max_bin=128"], REGRESSION_KINDS),
    (["time_limit_s=3600", *REGRESSION, "hpo=tpe"], []),  # not hpo=auto
    # stacking: its levels are of the chosen models
    (["time_limit_s=3600", *REGRESSION, "stack_levels=1", "parallelism=bag5"], []),
])
def test_hpo_auto_adds_kinds_for_the_problem_type_on_a_table_small_for_the_budget(compose, overrides, added,
                                                                                   capsys):
    settings = search_for_budget(read_settings(compose(overrides)), tuple(overrides))
    names = [m.name for m in settings.models]
    # the kinds it added are marked: the default run the searched ensemble must beat is of the others
    assert [m.name for m in settings.models if m.added] == added
    for kind in WHAT:
        assert (kind in names) is (kind in added) and (kind in settings.conf.model) is (kind in added)
        # logged as the run's params
        assert any(k.startswith(f"model.{kind}.params.") for k in settings.params) is (kind in added)
    said = " ".join(capsys.readouterr().out.split())
    if added:
        listed = [f"{k} ({WHAT[k]})" for k in added]
        joined = listed[0] if len(listed) == 1 else f"{', '.join(listed[:-1])} and {listed[-1]}"
        assert f"{joined} join{'s' if len(listed) == 1 else ''} the models" in said
        assert names == ["lightgbm", "xgboost", "nn", *added]
        assert [m.spec.name for m in settings.plan_input(None).models][-len(added):] == added
    else:
        assert "the models, since the table is small for the budget" not in said


@pytest.mark.parametrize("overrides, chosen", [
    (("model=gbm",), True), (("model=[lightgbm,nn]",), True), (("+model.catboost={}",), True),
    (("~model.nn",), True), (("model.nn=null",), True),
    (("model.nn.params.max_epochs=500",), False), (("+model.xgboost.params.max_bin=128",), False),
    (("model.lightgbm.device=cpu", "hpo=auto"), False), (("hpo=auto", "models=1"), False),
])
def test_models_are_chosen_by_the_group_or_a_model_not_by_a_key_below_one(overrides, chosen):
    from pipeline.settings import models_chosen

    assert models_chosen(overrides) is chosen


def test_a_tuned_default_model_keeps_its_value_beside_the_added_kinds(compose):
    overrides = ["time_limit_s=60", *REGRESSION, "model.nn.params.max_epochs=500"]
    settings = search_for_budget(read_settings(compose(overrides)), tuple(overrides))
    (nn,) = [m for m in settings.models if m.name == "nn"]
    assert nn.params["max_epochs"] == 500 and not nn.added
    assert [m.name for m in settings.models if m.added] == REGRESSION_KINDS


def test_an_added_random_forest_starts_from_trees_of_128_leaves_and_searches_their_size(compose):
    """The forest hpo=auto adds among several classes fits little beyond its first trial at a short budget:
    that trial, its portfolio over it and its logged params have trees of at most 128 leaves; the search
    still reaches whole trees, and a forest the user chose keeps its own params."""
    overrides = ["time_limit_s=3600", "data=synthetic", "data.rows=3000", "data.classes=4"]
    settings = search_for_budget(read_settings(compose(overrides)), tuple(overrides))
    (forest,) = [m for m in settings.models if m.name == "random_forest"]
    assert forest.params["max_leaf_nodes"] == 128
    assert settings.params["model.random_forest.params.max_leaf_nodes"] == 128  # logged as it fits
    assert forest.search_space["max_leaf_nodes"].high == 15000
    chosen = read_settings(compose(["model=random_forest", "time_limit_s=3600", *overrides[1:]]))
    (own,) = search_for_budget(chosen, ("model=random_forest",)).models
    assert own.params["max_leaf_nodes"] == 15000


def test_a_kind_whose_library_is_not_installed_is_said_and_left_out(compose, monkeypatch, capsys):
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "catboost" else find_spec(name, *a))
    overrides = ("time_limit_s=60", *REGRESSION)
    settings = search_for_budget(read_settings(compose(list(overrides))), overrides)
    assert [m.name for m in settings.models] == ["lightgbm", "xgboost", "nn", "extra_trees", "linear"]
    said = " ".join(capsys.readouterr().out.split())
    assert ("hpo=auto: left out: catboost (catboost is not installed: "
            "pip install 'tabular-pipeline[catboost]', or pip install catboost)" in said)


def test_a_named_configuration_leaves_what_it_does_not_name_to_the_models_params(compose):
    """Trial 0 is the model's own params and a portfolio entry is laid over them; the sampler draws none of
    their dimensions, and one the params leave unset (or set outside the space) stays as the params have it:
    trial 0 is the default run's fit and a portfolio entry the configuration it was proven as."""
    from pipeline.config import SearchDimConf

    settings = read_settings(compose(["model=lightgbm", "hpo=auto", "time_limit_s=60"]))
    space = {"learning_rate": SearchDimConf(type="float", low=0.01, high=0.2, log=True),
             "lambda_l1": SearchDimConf(type="float", low=0.001, high=10.0, log=True)}
    source = TrialSource(settings.conf.hpo, {"m": space}, {"m": {"learning_rate": 0.05, "num_leaves": 31}},
                         "maximize", portfolios={"m": ({"lambda_l1": 1.0, "num_leaves": 15},)})
    assert source.params("m", 0) == {"learning_rate": 0.05}  # lambda_l1: unset in the params, not drawn
    assert source.params("m", 1) == {"learning_rate": 0.05, "lambda_l1": 1.0}
    searched = source.params("m", 2)
    assert set(searched) == set(space) and all(space[k].contains(v) for k, v in searched.items())


@pytest.mark.parametrize("overrides, refit", [
    (["time_limit_s=60", *REGRESSION], True),  # a number to predict, bagged: the refits and the blend join
    (["time_limit_s=3600", *REGRESSION, "model=gbm"], True),  # models chosen: still hpo=auto's bags
    (["time_limit_s=60", *REGRESSION, "refit=false"], False),  # the user's word
    (["time_limit_s=60", *REGRESSION, "refit=null"], True),  # left to the engine, as by default
    (["time_limit_s=60", "data=synthetic", "data.rows=3000", "refit=true"], True),  # the user's, on classes
    (["time_limit_s=60", *REGRESSION, "parallelism=default"], False),  # one holdout fit: no fold misses rows
    (["time_limit_s=30", *REGRESSION[:-1], "data.rows=200000"], False),  # too many cells: not bagged
    (["time_limit_s=60", *REGRESSION, "hpo=tpe"], False),  # not hpo=auto
    (["time_limit_s=60", "data=synthetic", "data.rows=3000"], False),  # classes: the refits gained nothing
    (["time_limit_s=60", "data=synthetic", "data.rows=3000", "data.classes=4"], False),
])
def test_hpo_auto_refits_and_blends_on_a_number_to_predict_when_it_bags(compose, overrides, refit, capsys):
    settings = search_for_budget(read_settings(compose(overrides)), tuple(overrides))
    assert settings.conf.refit is refit
    assert settings.plan_input(None).refit is refit  # what the plan reads
    assert settings.params.get("refit", False) is refit  # logged as the run's param
    said = " ".join(capsys.readouterr().out.split())
    decided = refit and "refit=true" not in overrides  # said where the engine turned refit on
    assert ("(refit=true) and the run answers with ensemble_blend" in said) is decided


EXPERIMENT = """# @package _global_
defaults:
  - override /model: gbm
refit: false
"""


def test_what_a_users_experiment_config_chooses_is_theirs_as_on_the_command_line(compose, tmp_path):
    """An experiment config of the user's (`+experiment=NAME` from their --config-dir) that chooses the
    models and refit=false is the user's choice: hpo=auto adds no kinds and fits no refits, as with the same
    keys on the command line."""
    from pipeline.runtime import chosen_groups
    from tests.conftest import user_config

    searchpath = user_config(tmp_path, "experiment", "gbm_only", EXPERIMENT)
    overrides = ["time_limit_s=60", *REGRESSION, "+experiment=gbm_only", searchpath]
    chosen = chosen_groups(compose(overrides, return_hydra_config=True).hydra.runtime.choices)
    assert set(chosen) == {"model=gbm", "experiment=gbm_only", "data=synthetic"}
    choices = (*overrides, *chosen)  # as pipeline.runtime.Runtime.choices has them
    settings = search_for_budget(read_settings(compose(overrides), choices), choices)
    assert isinstance(settings.conf.hpo.make_searcher(), AutoSearch)
    assert [m.name for m in settings.models] == ["lightgbm", "xgboost"]
    assert settings.conf.parallelism.num_folds == 5 and settings.conf.refit is False  # still hpo=auto's bags
    assert settings.params["refit"] is False


def test_groups_left_at_their_packaged_default_are_not_chosen(compose):
    from pipeline.runtime import chosen_groups

    assert chosen_groups(compose([], return_hydra_config=True).hydra.runtime.choices) == ()
    listed = compose(["model=[lightgbm,nn]", "+hardware=4gpu"], return_hydra_config=True)
    assert set(chosen_groups(listed.hydra.runtime.choices)) == {"model=[...]", "hardware=4gpu"}


@pytest.mark.parametrize("limit, added", [(600, True), (240, False)])
def test_k_nearest_neighbours_join_only_where_their_quadratic_bag_fits_a_tenth_of_the_limit(
        compose, capsys, limit, added):
    """Adult's ~39,000 training rows are small for FLAML's rule from about 220 s, but k nearest neighbours
    compare every row with every other: a bag estimated at about 27 s on one CPU is left out of a 240-s run
    (a query cannot be stopped by the deadline) and said, and joins a 600-s one (left out before its rows
    were compared dense: 90 s a bag)."""
    from pipeline.memory.shape import DataShape
    from pipeline.models.knn import bag_seconds

    overrides = [f"time_limit_s={limit}"]
    settings = search_for_budget(read_settings(compose(overrides)), tuple(overrides))
    assert 20 < bag_seconds(39_000, DataShape(48_842, 6, 8)) < 35
    assert "linear" in [m.name for m in settings.models]  # the table is small for the budget
    assert ("knn" in [m.name for m in settings.models if m.added]) is added
    said = " ".join(capsys.readouterr().out.split())
    assert ("hpo=auto: left out: knn (a 5-fold bag would take about" in said) is not added
    if not added:
        assert f"more than 10% of time_limit_s={limit}, as its time grows faster than the rows)" in said
