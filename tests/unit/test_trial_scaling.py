"""Cost grows with the work, not faster: planning 10,000 trials costs what planning 10 does, and the
scheduler's work per fit stays flat as the trials grow (counted, not timed: the CPUs are shared)."""

from __future__ import annotations

import cProfile
import pstats

import pytest

from pipeline.graph.plan import Admission, bag_id, build_plan, fit_id
from pipeline.hardware import Machine, resolve
from pipeline.resources import ModelNeeds, Request
from pipeline.planning.allocation import allocate
from tests.unit.test_time_budget import simulate


class Counted(Exception):
    pass


def _plan(trials: int, folds: int = 5, models=("a", "b", "c"), evaluate=False):
    hw = resolve(None, Machine(2), dry_run=False)
    allocations = [allocate(hw.total, Request.parse(None, None, "b"), Request.parse(1, None, "f"),
                            ModelNeeds(m, False, False, 1), num_folds=folds, num_trials=trials) for m in models]
    return build_plan(hw, allocations, evaluate=evaluate)


def _admissions(monkeypatch, trials: int, limit: int) -> int:
    """try_admit calls while planning `trials` trials; Counted past `limit` (today's quadratic
    simulation would take hours at 10,000 trials: it fails fast instead)."""
    calls = [0]
    real = Admission.try_admit

    def counted(self, task):
        calls[0] += 1
        if calls[0] > limit:
            raise Counted(f"planning {trials} trials made more than {limit} admission checks")
        return real(self, task)

    monkeypatch.setattr(Admission, "try_admit", counted)
    plan = _plan(trials)
    monkeypatch.setattr(Admission, "try_admit", real)
    return calls[0], plan


def test_planning_10000_trials_costs_what_10_do_and_the_plan_states_the_count(monkeypatch):
    ten, small = _admissions(monkeypatch, 10, limit=10**6)
    many, plan = _admissions(monkeypatch, 10_000, limit=10 * ten)
    assert many <= 2 * ten
    assert len(plan.tasks) == len(small.tasks)  # the trial shape, listed once
    assert plan.num_fits == 3 * 10_000 * 5 and all(a.num_trials == 10_000 for a in plan.allocations)
    written = plan.to_json()
    assert [m["num_trials"] for m in written["models"]] == [10_000] * 3
    assert written["num_fits"] == 150_000 and len(written["tasks"]) == len(small.tasks)


def test_the_unlisted_trials_repeat_a_listed_trial_a_whole_number_of_rounds_later():
    plan = _plan(10, folds=2, evaluate=True)
    full = plan.expanded()
    assert len(full.fit_tasks) == plan.num_fits == 3 * 10 * 2 and plan.expanded() is full
    listed = plan.listed["a"]
    assert listed < 10
    ids = {t.id: t for t in full.tasks}
    for trial in range(listed, 10):
        fit = ids[fit_id("a", trial, 1)]
        assert fit.trial == trial and fit.resources == ids[fit_id("a", 0, 1)].resources
        assert ids[bag_id("a", trial)].depends_on == (fit_id("a", trial, 0), fit_id("a", trial, 1))
        assert fit.wave > ids[fit_id("a", trial - 1, 1)].wave
    assert sorted(ids["ensemble"].depends_on) == sorted(t.id for t in full.tasks if t.kind == "bag")
    assert [t.id for t in full.tasks].index("ensemble") > max(
        i for i, t in enumerate(full.tasks) if t.kind == "bag")


def _calls_per_fit(tmp_path, trials: int) -> float:
    """Python function calls the scheduler makes per fit, two models of 2 folds and `trials` trials."""
    profile = cProfile.Profile()
    profile.enable()
    plan, backend, budget, scheduler, outcome = simulate(tmp_path, {"fast": 1.0, "slow": 2.0}, limit_s=1e9,
                                                         trials=trials)
    profile.disable()
    fits = len(backend.submitted)
    assert fits == 2 * trials * 2 and len(outcome.results["collect"]) == 2 * trials
    return pstats.Stats(profile).total_calls / fits


def test_the_schedulers_work_per_fit_is_flat_from_10_to_400_trials(tmp_path):
    ten = _calls_per_fit(tmp_path / "10", 10)
    many = _calls_per_fit(tmp_path / "400", 400)
    assert many <= 2 * ten, f"{many:.0f} calls per fit at 400 trials, {ten:.0f} at 10"


def test_asked_trials_are_appended_once_each_and_read_back_whole_a_torn_line_skipped(tmp_path):
    """Each ask appends a line (no rewrite of every trial asked so far); the snapshot is written as the
    count doubles and by flush; a resumed run reads the snapshot and the lines after it."""
    from pipeline.config import HpoConf
    from pipeline.hpo import TrialSource
    from pipeline.store import read_trials

    source = TrialSource(HpoConf(), {"m": {}}, {}, "maximize", store_dir=tmp_path)
    for trial in range(5):
        source.params("m", trial)
    assert len((tmp_path / "m.jsonl").read_text().splitlines()) == 5
    assert len(read_trials(tmp_path)["m"]) == 5  # the snapshot (4) and the lines after it
    with open(tmp_path / "m.jsonl", "a") as f:
        f.write('{"5": {"a"')  # a crash mid-line
    assert sorted(read_trials(tmp_path)["m"]) == ["0", "1", "2", "3", "4"]
    source.flush()
    assert len(__import__("json").loads((tmp_path / "m.json").read_text())) == 5


def test_the_searchs_end_cuts_the_trials_left_without_an_admission_pass_each(tmp_path, monkeypatch):
    """A 30-s budget fits the same 42 fits whether 20 or 2,000 trials a model were asked for; the trials
    left are cut in one go once a later trial can no longer end in time (before: one admission pass per
    trial cut, 2,071 passes against 91; 1.1-1.4 s of a 20-s run at 10,000 trials)."""
    from pipeline.graph.scheduler import Scheduler

    passes, real = [0], Scheduler._admit

    def counted(self, *args):
        passes[0] += 1
        return real(self, *args)

    monkeypatch.setattr(Scheduler, "_admit", counted)
    seen = {}
    for trials in (20, 2000):
        passes[0] = 0
        plan, backend, budget, scheduler, outcome = simulate(tmp_path / str(trials), {"fast": 1.0, "slow": 2.0},
                                                             limit_s=30, trials=trials)
        summary = scheduler.budget_summary()
        seen[trials] = passes[0], len(backend.submitted), summary.trials_not_run + summary.trials_dropped
    (few, fits, _), (many, same_fits, not_run) = seen[20], seen[2000]
    assert same_fits == fits and not_run >= 2 * 2000 - fits
    assert many <= few + 5, f"{many} admission passes at 2,000 trials, {few} at 20"


def _run(tmp_path, **kw):
    plan, backend, budget, scheduler, outcome = simulate(tmp_path, **kw)
    summary = scheduler.budget_summary().line() if budget.limit_s < 1e9 else None
    return backend.submitted, outcome.results["collect"], summary, scheduler


@pytest.mark.parametrize("case", [
    dict(seconds={"fast": 1.0, "slow": 2.0}, limit_s=1e9, trials=30),  # no budget: every trial runs
    dict(seconds={"fast": 1.0, "slow": 2.0}, limit_s=30, trials=200),  # the budget ends the search
    dict(seconds={"fast": [1.0] * 5 + [9.0] * 400, "slow": 2.0}, limit_s=40, trials=100),  # slower later
    dict(seconds={"fast": 1.0, "slow": 3.0}, limit_s=25, trials=60, serial=True),
    dict(seconds={"fast": 1.0, "slow": 2.0}, limit_s=30, trials=50, refit_tail=lambda: 2.0),
])
def test_trials_made_as_the_run_reaches_them_run_as_if_all_were_made_at_the_start(tmp_path, case):
    """The scheduler makes a model's later trials while it runs (graph.trial_supply): the same fits start at
    the same times, the same bags reach what reads every trial, and the budget says the same."""
    import copy

    lazy = _run(tmp_path / "lazy", **copy.deepcopy(case))
    whole = _run(tmp_path / "whole", every_trial=True, **copy.deepcopy(case))
    assert lazy[:3] == whole[:3]
    if case["limit_s"] < 1e9:  # the trials the search never reached are never made
        assert len(lazy[3].ready.tasks) < len(whole[3].ready.tasks)


def test_a_run_of_10000_trials_holds_and_walks_only_the_trials_in_play(tmp_path):
    """A 30-s budget runs the same fits at 20 and at 10,000 trials a model; the scheduler holds the tasks
    of the trials it reached and a few more, and makes as many Python calls (counted, not timed), where
    making every trial at the start held 60,000 tasks."""
    counts = {}
    for trials in (20, 10_000):
        profile = cProfile.Profile()
        profile.enable()
        submitted, collected, line, scheduler = _run(tmp_path / str(trials), limit_s=30, trials=trials,
                                                     seconds={"fast": 1.0, "slow": 2.0})
        profile.disable()
        counts[trials] = (pstats.Stats(profile).total_calls, len(scheduler.ready.tasks), submitted, line)
    (few_calls, few_tasks, few_fits, _), (calls, tasks, fits, line) = counts[20], counts[10_000]
    assert [f[0] for f in fits] == [f[0] for f in few_fits]
    assert tasks <= few_tasks + 20, f"{tasks} tasks held at 10,000 trials, {few_tasks} at 20"
    assert calls <= 1.5 * few_calls, f"{calls} calls at 10,000 trials, {few_calls} at 20"
    summary = scheduler.budget_summary()
    assert summary.trials == 20_000 and summary.fits == 40_000
    assert summary.trials_not_run + summary.trials_dropped == 20_000 - len(collected)
    assert summary.fits_not_run == 40_000 - len(fits) and "of 20000 trials not run" in line


def test_the_progress_bars_count_every_trial_asked_for_and_drop_those_never_made(tmp_path):
    """A model's bar counts the fits of all its trials, listed or not; when the budget ends its search, the
    fits of the trials never made leave it, so each bar ends full at the fits that ran."""
    from types import SimpleNamespace

    from pipeline.outputs import RunHooks
    from pipeline.report import FitProgress

    bars = {}

    def hooks(plan):
        progress = bars["progress"] = FitProgress(plan, enabled=False)
        bars["totals"] = {m: progress.progress.tasks[i].total for m, i in progress.ids.items()}
        return RunHooks(progress, SimpleNamespace(enabled=False), None, log_trials=False)

    submitted, _, _, _ = _run(tmp_path, seconds={"fast": 1.0, "slow": 2.0}, limit_s=30, trials=1000,
                              hooks=hooks)
    assert bars["totals"] == {"fast": 2000, "slow": 2000}
    progress = bars["progress"].progress
    for model, i in bars["progress"].ids.items():
        ran = sum(f[0].split("/")[1] == model for f in submitted)
        assert progress.tasks[i].completed == ran and progress.tasks[i].total == ran, model


def test_every_trial_runs_where_no_task_reads_them_all(tmp_path):
    """A plan with no ensemble (nothing waits for every trial): the trials it does not list are still made
    and run, each once, as the listed ones settle."""
    from types import SimpleNamespace

    import numpy as np

    from pipeline.config import HpoConf
    from pipeline.graph.scheduler import Scheduler
    from pipeline.hpo import TrialSource
    from pipeline.metrics import METRICS
    from pipeline.store import ResultStore
    from tests.fault_models import SleepModel
    from tests.unit.test_time_budget import Clock, SimulatedBackend

    plan = _plan(25, folds=2, models=("a", "b"))
    assert plan.listed["a"] < 25 and not any(t.kind == "ensemble" for t in plan.tasks)
    backend = SimulatedBackend({"a": 1.0, "b": 2.0}, Clock(), 8)
    Scheduler(plan, backend, ResultStore(tmp_path), TrialSource(HpoConf(), {}, {}, "maximize"),
              {m: SleepModel({}, m) for m in "ab"},
              SimpleNamespace(y=np.tile([0, 1], 4), fingerprint="s", problem_type="binary"),
              METRICS["roc_auc"], seed=0).run()
    ran = [f[0] for f in backend.submitted]
    assert sorted(ran) == sorted(fit_id(m, t, f) for m in "ab" for t in range(25) for f in range(2))
