"""On a machine other processes keep busy, a fit the engine derives takes no more CPUs than they leave:
threads waiting for a CPU another process holds spin, and slow the fit several times over."""

from __future__ import annotations

import pytest

from pipeline import run_clock
from pipeline.planning import busy_box
from pipeline.planning.allocation import allocate
from pipeline.planning.busy_box import cap_threads_on_busy_box
from pipeline.planning.planner import make_plan
from pipeline.resources import ModelNeeds, Request, Resources
from pipeline.settings import read_settings

NEEDS = ModelNeeds("m", wants_gpu=False, requires_gpu=False, max_gpus_per_fit=1)
ANY = Request(None, None)


def _box(monkeypatch, *, cpus: int, others, share: float = 1.0, machine_cpus=None) -> None:
    monkeypatch.setattr("pipeline.hardware.affinity_cpus", lambda: cpus)
    monkeypatch.setattr(busy_box.os, "cpu_count", lambda: machine_cpus or cpus)
    monkeypatch.setattr(run_clock, "others_busy_cpus", lambda: others)
    monkeypatch.setattr(run_clock, "cpu_share_so_far", lambda: share)
    monkeypatch.delenv("PIPELINE_SLOT_CPUS", raising=False)
    monkeypatch.delenv("SLURM_CPUS_PER_TASK", raising=False)
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.delenv("SLURM_CPUS_ON_NODE", raising=False)


@pytest.mark.parametrize("others, share, cpus, machine_cpus, most", [
    (1.4, 1.0, 2, None, 1),  # two busy loops on two CPUs, as measured over a start-up: one CPU a fit
    (0.6, 1.0, 2, None, 1),
    (4.3, 1.0, 16, None, 11),
    (4.0, 1.0, 2, 16, 2),  # this process may run on 2 of 16 CPUs: the others' 4 leave it both
    (15.5, 1.0, 16, None, 1),  # never below one
    (None, 0.47, 2, None, 1),  # unmeasured: the start-up's share of a CPU times the CPUs
    (None, 0.6, 16, None, 9),
])
def test_the_cpus_a_busy_machine_leaves(monkeypatch, others, share, cpus, machine_cpus, most):
    _box(monkeypatch, cpus=cpus, others=others, share=share, machine_cpus=machine_cpus)
    load = busy_box.machine_load()
    assert load is not None and load.free_cpus(cpus) == most


@pytest.mark.parametrize("others, share", [(0.0, 0.3), (0.49, 1.0), (None, 0.8)])
def test_a_machine_not_busy_has_no_load_to_leave(monkeypatch, others, share):
    _box(monkeypatch, cpus=2, others=others, share=share)
    assert busy_box.machine_load() is None and busy_box.busy_machine() is None


def test_a_cap_holds_a_derived_fit_and_runs_more_at_once():
    total = Resources(16, 0)
    whole = allocate(total, ANY, ANY, NEEDS, num_folds=1, num_trials=1)
    capped = allocate(total, ANY, ANY, NEEDS, num_folds=1, num_trials=1, fit_cpus_most=11)
    assert whole.fit.num_cpus == 16 and capped.fit.num_cpus == 11
    two = allocate(Resources(2, 0), ANY, ANY, NEEDS, num_folds=1, num_trials=3, fit_cpus_most=1)
    assert (two.fit.num_cpus, two.trials_parallel) == (1, 2)  # each fit one CPU, two at once
    # a bag's choice of threads against folds at once keeps within the cap
    parallel = ModelNeeds("m", False, False, 1, serial_share=0.0)  # threads would win without the cap
    bag = allocate(Resources(16, 0), ANY, ANY, parallel, num_folds=2, num_trials=1, fit_cpus_most=4)
    assert bag.fit.num_cpus <= 4 and bag.folds_parallel == 2


def test_a_fit_the_user_sized_is_not_capped():
    fit = allocate(Resources(16, 0), ANY, Request(8, None), NEEDS, num_folds=1, num_trials=1, fit_cpus_most=2)
    assert fit.fit.num_cpus == 8


def test_a_busy_machine_caps_the_default_runs_fits_and_says_so(compose, monkeypatch, capsys):
    _box(monkeypatch, cpus=2, others=1.4)
    settings = cap_threads_on_busy_box(read_settings(compose([])))
    assert settings.levels.fit_cpus_most == 1
    said = " ".join(capsys.readouterr().out.split())
    assert ("the machine is busy (other processes kept 1.4 CPUs busy while this run started): each fit whose "
            "CPUs are left to the engine takes at most 1 of its 2 CPUs") in said
    plan = make_plan(settings.plan_input(None, _machine(2)))
    assert {a.fit.num_cpus for a in plan.allocations} == {1}
    idle = make_plan(read_settings(compose([])).plan_input(None, _machine(2)))
    assert {a.fit.num_cpus for a in idle.allocations} == {2}  # without the cap: both CPUs a fit


@pytest.mark.parametrize("overrides, env", [
    (["+hardware=cpu"], {}),  # declared hardware
    (["parallelism.fit.num_cpus=2"], {}),  # every fit's CPUs set
    (["executor=ray"], {}),  # fits on a cluster's nodes
    (["executor.in_process=always"], {}),  # one fit at a time in the driver
    ([], {"PIPELINE_SLOT_CPUS": "2"}),  # a launcher's slot: its share is already its own
    ([], {"SLURM_CPUS_PER_TASK": "2", "SLURM_JOB_ID": "7"}),
])
def test_declared_hardware_a_cluster_the_driver_or_a_share_given_are_kept_on_a_busy_machine(
        compose, monkeypatch, capsys, overrides, env):
    _box(monkeypatch, cpus=2, others=1.9)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    settings = read_settings(compose(overrides), tuple(overrides))
    assert cap_threads_on_busy_box(settings).levels.fit_cpus_most is None
    assert "the machine is busy" not in capsys.readouterr().out


@pytest.mark.parametrize("overrides, cpus", [
    (["parallelism=bag5"], {1}),  # folds chosen, their threads left to the engine: capped
    (["parallelism.fit.num_cpus=2"], {2}),  # the threads set: kept
    (["model=lightgbm", "model.lightgbm.resources.num_cpus=2"], {2}),
])
def test_only_the_fits_whose_cpus_the_engine_derives_are_capped(compose, monkeypatch, overrides, cpus):
    _box(monkeypatch, cpus=2, others=1.4)
    settings = cap_threads_on_busy_box(read_settings(compose(overrides), tuple(overrides)))
    plan = make_plan(settings.plan_input(None, _machine(2)))
    assert {a.fit.num_cpus for a in plan.allocations} == cpus


def test_an_idle_machine_keeps_every_cpu_a_fit(compose, monkeypatch, capsys):
    _box(monkeypatch, cpus=2, others=0.1)
    assert cap_threads_on_busy_box(read_settings(compose([]))).levels.fit_cpus_most is None
    assert "busy" not in capsys.readouterr().out


def _machine(cpus: int):
    from pipeline.hardware import Machine

    return Machine(cpus)



@pytest.fixture
def reading(monkeypatch):
    """The machine's readings (time, busy CPU seconds, the run's own), set by the test."""
    now = {"wall": 100.0, "busy": 0.0, "own": 0.0}
    monkeypatch.setattr(run_clock, "machine_reading", lambda: (now["wall"], now["busy"], now["own"]))
    monkeypatch.setattr(busy_box.time, "time", lambda: now["wall"])
    monkeypatch.setattr(busy_box.os, "cpu_count", lambda: 2)

    def after(seconds: float, others: float, own: float) -> None:  # CPUs' worth over the seconds
        now.update(wall=now["wall"] + seconds, busy=now["busy"] + (others + own) * seconds,
                   own=now["own"] + own * seconds)
    return after


def test_fits_started_while_others_keep_cpus_busy_take_the_cpus_left_and_the_run_says_so(reading, capsys):
    cap = busy_box.ThreadCap(2, frozenset({"lightgbm"}))
    reading(3.0, others=0.1, own=2.0)  # the run alone on both CPUs
    assert cap.threads("lightgbm", 2) == 2
    assert "busy" not in capsys.readouterr().out
    reading(3.0, others=1.6, own=0.4)  # two busy loops started meanwhile
    assert cap.threads("lightgbm", 2) == 1
    said = " ".join(capsys.readouterr().out.split())
    assert "the machine got busy while the run fitted (other processes kept 1.6 CPUs busy over the last " \
           "3.0 s): fits starting from now take at most 1 of the 2 CPUs" in said
    reading(1.0, others=0.0, own=2.0)
    assert cap.threads("lightgbm", 2) == 1  # under WINDOW_S since the last reading: that reading holds
    reading(2.0, others=0.0, own=2.0)
    assert cap.threads("lightgbm", 2) == 2
    assert "the machine is less busy (other processes kept 0.0 CPUs busy over the last 3.0 s)" in " ".join(
        capsys.readouterr().out.split())


def test_a_fit_the_user_sized_or_planned_below_the_cap_keeps_its_cpus(reading):
    cap = busy_box.ThreadCap(2, frozenset({"lightgbm"}))
    reading(3.0, others=1.9, own=0.1)
    assert cap.threads("xgboost", 2) == 2  # its CPUs were set: model.xgboost.resources.num_cpus
    assert cap.threads("lightgbm", 1) == 1


def test_without_proc_stat_the_plans_cpus_hold(monkeypatch):
    monkeypatch.setattr(run_clock, "machine_reading", lambda: None)
    cap = busy_box.ThreadCap(2, frozenset({"lightgbm"}))
    assert cap.threads("lightgbm", 2) == 2


@pytest.mark.parametrize("overrides, env, models", [
    ([], {}, {"lightgbm", "xgboost", "nn"}),
    (["executor.in_process=always"], {}, {"lightgbm", "xgboost", "nn"}),  # fits in the driver spin too
    (["model=gbm", "model.lightgbm.resources.num_cpus=2"], {}, {"xgboost"}),
    (["+hardware=cpu"], {}, None),  # declared hardware
    (["parallelism.fit.num_cpus=2"], {}, None),
    (["executor=ray"], {}, None),
    ([], {"PIPELINE_SLOT_CPUS": "2"}, None),
    ([], {"SLURM_CPUS_PER_TASK": "2", "SLURM_JOB_ID": "7"}, None),
])
def test_the_cap_reads_the_load_where_the_engine_sizes_the_fits(compose, monkeypatch, overrides, env, models):
    _box(monkeypatch, cpus=2, others=0.0)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    cap = busy_box.thread_cap(read_settings(compose(overrides), tuple(overrides)))
    assert (cap.models if cap else None) == (frozenset(models) if models else None)


def test_one_cpu_has_no_threads_to_take(compose, monkeypatch):
    _box(monkeypatch, cpus=1, others=0.0)
    assert busy_box.thread_cap(read_settings(compose([]))) is None


def test_a_fit_on_gpus_keeps_its_host_threads(reading):
    from types import SimpleNamespace

    from pipeline.graph.nodes.context import GraphContext

    ctx = GraphContext(*[None] * 7, thread_cap=busy_box.ThreadCap(2, frozenset({"nn"})))
    reading(3.0, others=1.9, own=0.1)
    task = SimpleNamespace(model="nn", resources=Resources(2, 0))
    assert ctx.fit_threads(task, shares=((0, 1),)) == 2
    assert ctx.fit_threads(task, shares=()) == 1


def test_a_fit_starting_within_the_window_reads_no_proc(monkeypatch):
    import time

    readings = []
    monkeypatch.setattr(run_clock, "machine_reading", lambda: readings.append(1) or (time.time(), 0.0, 0.0))
    cap = busy_box.ThreadCap(2, frozenset({"lightgbm"}))
    for _ in range(100):
        assert cap.threads("lightgbm", 2) == 2
    assert len(readings) == 1  # the first, at the cap's making: every fit since started within WINDOW_S
