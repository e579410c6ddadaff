"""The time budget: fit-time estimates, the cut through the graph, and the scheduler planning to a
deadline, on a simulated clock (fits take the seconds their model is given, instantly)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import pytest

from pipeline.graph.backend import Backend
from pipeline.graph.tasks import DataRef, FoldResult
from pipeline.graph.plan import DRIVER, Task, bag_id, fit_id
from pipeline.graph.time_budget import GraphCut, TimeBudget, check_finished, summarize


class Clock:
    def __init__(self, now: float = 1000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def graph(models=("a", "b"), trials=3, folds=2, level2=False):
    """Fits, a bag per trial, a partial ensemble over the bags, an evaluation; with `level2`, a
    level-2 fit per model fed by its level-1 bags, and their bag, before the ensemble."""
    tasks = [Task(fit_id(m, t, f), "fit", DRIVER, model=m, trial=t, fold=f)
             for m in models for t in range(trials) for f in range(folds)]
    bags = [Task(bag_id(m, t), "bag", DRIVER, tuple(fit_id(m, t, f) for f in range(folds)), model=m, trial=t)
            for m in models for t in range(trials)]
    tasks += bags
    last = [b.id for b in bags]
    if level2:
        for m in models:
            fit2 = Task(f"fit/{m}_l2/f0", "fit", DRIVER, tuple(bag_id(m, t) for t in range(trials)), model=m)
            tasks += [fit2, Task(f"bag/{m}_l2", "bag", DRIVER, (fit2.id,), model=m)]
        last = [f"bag/{m}_l2" for m in models]
    tasks += [Task("ensemble", "ensemble", DRIVER, tuple(last)), Task("evaluate", "evaluate", DRIVER, ("ensemble",))]
    return tasks


def partial(task) -> bool:
    return task.kind in ("ensemble", "evaluate")


class TestEstimates:
    def test_no_estimate_before_a_fit_then_the_mean_per_fold_and_a_stopped_fit_as_a_floor(self):
        budget = TimeBudget(60, clock=Clock())
        a0, a1 = Task("x", "fit", DRIVER, model="a"), Task("y", "fit", DRIVER, model="a")
        assert budget.estimate(a0) is None
        budget.record(a0, 9.0, stopped=True)
        assert budget.estimate(a1) == 9.0  # it took at least that
        budget.record(a0, 2.0)
        budget.record(a1, 4.0)
        assert budget.estimate(a0) == 3.0  # complete fits win over the floor

    def test_a_level_uses_its_own_fits_else_the_same_model_at_another_level_else_the_prior(self):
        budget = TimeBudget(60, clock=Clock(), prior=lambda task: 7.0 if task.model == "b" else None)
        level1 = SimpleNamespace(model="a", level=1)
        level2 = SimpleNamespace(model="a", level=2)
        budget.record(level1, 2.0)
        assert budget.estimate(level2) == 2.0
        budget.record(level2, 6.0)
        assert budget.estimate(level2) == 6.0 and budget.estimate(level1) == 2.0
        assert budget.estimate(SimpleNamespace(model="b", level=1)) == 7.0  # the pluggable cost model

    def test_can_finish_places_the_fits_on_the_first_free_places_against_the_deadline(self):
        clock = Clock()
        budget = TimeBudget(10, clock=clock)
        task = Task("x", "fit", DRIVER, model="a")
        assert budget.can_finish(task, fits=3)  # unknown: it starts while the deadline is ahead
        budget.record(task, 3.0)
        now = clock.now
        assert budget.can_finish(task, fits=3) and not budget.can_finish(task, fits=4)  # one place: 9 s, 12 s
        assert budget.can_finish(task, fits=5, slots=[now, now + 3])  # two places, one free at 3 s: 9 s
        assert not budget.can_finish(task, fits=5, slots=[now, now + 5])  # one free at 5 s: 0-3-6-9, 5-8-11
        assert not budget.can_finish(task, fits=1, after=now + 11)  # a fold already running ends too late
        clock.now += 8
        assert not budget.can_finish(task)
        clock.now += 2
        assert not budget.can_finish(Task("z", "fit", DRIVER, model="new"))  # past the deadline: nothing starts


def test_with_stacking_the_level_1_search_ends_early_enough_for_the_stacked_fits():
    from pipeline.graph.stack_reserve import LEVEL_COST, PER_FIT_S, StackReserve
    from pipeline.graph.time_budget import run_grace_s

    reserve = StackReserve((("a", 9), ("b", 9)), places=1)
    budget = TimeBudget(100, clock=Clock(0.0), stacking=reserve)
    trial = Task(fit_id("a", 3, 0), "fit", DRIVER, model="a", trial=3, fold=0, level=1)
    first = Task(fit_id("a", 0, 0), "fit", DRIVER, model="a", trial=0, fold=0, level=1)
    stacked = Task("fit/a/l2/f0", "fit", DRIVER, model="a", level=2, fold_set=(0,))
    assert budget.deadline_for(trial) == budget.deadline  # nothing measured: nothing kept
    budget.record(first, 2.0)
    budget.record(Task(fit_id("b", 0, 0), "fit", DRIVER, model="b", trial=0, fold=0, level=1), 1.0)
    one_a, one_b = 2.0 * LEVEL_COST + PER_FIT_S, 1.0 * LEVEL_COST + PER_FIT_S
    assert budget.stacked_seconds() == pytest.approx(9 * one_a + 9 * one_b + run_grace_s(100))  # and the last
    # level-1 fits' time to stop at their deadline
    assert budget.deadline_for(trial) == budget.deadline - budget.stacked_seconds()
    assert budget.deadline_for(first) == budget.deadline_for(stacked) == budget.deadline  # every level needs it
    assert StackReserve((("a", 9), ("b", 9)), places=2).seconds(budget.model_estimate) == pytest.approx(
        (9 * one_a + 9 * one_b) / 2)
    assert TimeBudget(100, clock=Clock(0.0)).stacked_seconds() == 0.0


def test_the_stacked_fits_and_the_refit_are_priced_at_the_best_trials_own_fits_when_it_is_slower(tmp_path):
    """The stacked levels and the refit fit each model's best level-1 trial: a search's best is often one of
    its slower trials, so the reserve reads that trial's fits, not only the mean of all (which a level-2
    fit outran on a loaded box, and its level was left out)."""
    from pipeline.graph.stack_reserve import LEVEL_COST, PER_FIT_S, StackReserve

    seconds = {"a": [1.0, 1.0, 1.0, 1.0, 5.0, 5.0, 1.0, 1.0]}  # trial 2's two folds take 5 s, the others 1 s
    right = {"a": lambda trial: 0.9 if trial == 2 else 0.6}  # and it scores best
    _, _, budget, _, outcome = simulate(tmp_path, seconds, limit_s=1000.0, right=right)
    assert {t for (_, t) in outcome.trials} == {0, 1, 2, 3}
    assert budget.model_estimate("a") == pytest.approx(2.0)  # the mean of the eight fits
    assert budget.best_estimate("a") == pytest.approx(5.0)  # the best trial's own
    budget.stacking = StackReserve((("a", 4),), places=1)
    from pipeline.graph.time_budget import run_grace_s

    assert budget.stacked_seconds() == pytest.approx(4 * (5.0 * LEVEL_COST + PER_FIT_S) + run_grace_s(1000.0))
    assert budget.best_estimate("new") is None  # nothing measured: nothing kept
    # a refit fits the best trial's params once more: its own fits' time, not the mean of all
    assert budget.refit_estimate("a") == pytest.approx(5.0) and budget.refit_estimate("new") is None


def test_a_model_without_a_complete_trial_keeps_no_time_for_its_refit(tmp_path):
    """A model withdrawn after its first folds (or whose every trial a limit cut) has no trial to refit:
    the tail keeps nothing for it, though its fits were timed."""
    seconds = {"a": [1.0] * 8}
    _, _, budget, _, _ = simulate(tmp_path, seconds, limit_s=1000.0)
    task = SimpleNamespace(model="b", trial=0, level=1, fold_set=None)
    budget.record(task, 3.0)  # b's first fold ended, its trial never did
    assert budget.model_estimate("b") == pytest.approx(3.0) and budget.refit_estimate("b") is None
    assert budget.refit_estimate("a") == pytest.approx(1.0)


def test_the_stacked_fits_are_priced_at_the_models_last_fits_where_they_are_slower():
    """A box loaded late in the run (or a search moving to slower params) slows the last level-1 fits and the
    stacked fits with them: the reserve reads the mean of the last `RECENT_FITS` whole fits where it is
    longer than the best trial's (a 20-s run priced its level 2 at a mean of 0.15 s a fit where its last
    fits took 0.3-0.6 s, and level 2 was left out)."""
    from pipeline.graph.stack_reserve import LEVEL_COST, PER_FIT_S, StackReserve
    from pipeline.graph.time_budget import RECENT_FITS, run_grace_s

    budget = TimeBudget(100, clock=Clock(0.0), stacking=StackReserve((("a", 4),), places=1))

    def fit(trial: int, seconds: float, **how) -> None:
        budget.record(Task(fit_id("a", trial, 0), "fit", DRIVER, model="a", trial=trial, fold=0, level=1),
                      seconds, **how)

    for trial in range(6):
        fit(trial, 0.1)
    for trial in range(6, 6 + RECENT_FITS):
        fit(trial, 0.5)
    budget.record(Task("fit/a/l2/f0", "fit", DRIVER, model="a", level=2, fold_set=(0,)), 0.05)  # not a trial's
    fit(99, 9.0, stopped=True)  # a floor, not a whole fit
    assert budget.best_estimate("a") == pytest.approx((6 * 0.1 + RECENT_FITS * 0.5) / (6 + RECENT_FITS))
    assert budget.stacked_estimate("a") == pytest.approx(0.5)
    assert budget.stacked_seconds() == pytest.approx(4 * (0.5 * LEVEL_COST + PER_FIT_S) + run_grace_s(100))
    for trial in range(20, 20 + RECENT_FITS):  # the box quiet again: the last fits are fast, the mean rules
        fit(trial, 0.1)
    assert budget.stacked_estimate("a") == pytest.approx(budget.best_estimate("a"))
    assert TimeBudget(100, clock=Clock(0.0)).stacked_estimate("a") is None  # nothing measured: nothing kept


@dataclass
class RefitTail:
    """A whole-run tail that keeps `refits` seconds for the refit fits and `fixed` for the rest."""

    fixed: float
    refits: float
    refit: bool = True

    def __call__(self):
        return self.fixed + self.refit_seconds()

    def refit_seconds(self):
        return self.refits if self.refit else 0.0


def test_a_refit_fits_time_starts_after_the_fits_grace_to_stop_and_keeps_a_grace_of_its_own():
    tail = RefitTail(3.0, 5.0)
    budget = TimeBudget(30, start=0.0, clock=Clock(0.0), whole_run=True, tail=tail)
    refit = Task("fit/a/l1/refit", "fit", DRIVER, model="a", level=1, fold_set=())
    assert budget.deadline == 30 - 8 - 2 * budget.grace
    assert budget.deadline_for(refit) == budget.deadline + budget.grace + 5 == 30 - 3 - budget.grace
    assert budget.deadline_for(Task(fit_id("a", 0, 0), "fit", DRIVER, model="a", trial=0, fold=0)) == budget.deadline
    assert TimeBudget(30, clock=Clock(0.0)).deadline_for(refit) == 30  # fit_time_limit_s: refits are fits
    tail.refit = False  # refit=false: one grace, and no time kept for refits
    assert budget.deadline == 30 - 3 - budget.grace


def test_each_models_refit_runs_after_its_search_and_the_refit_node_runs_on_them(tmp_path):
    """Both models search up to the end of their trials' time (b's trials of 4 s stop first), then each
    refit runs in the time kept for it. Before, the refit node needed every refit, so a refit counted the
    other models' refits as fits to end by its own deadline: every refit and the node were cut."""
    plan, backend, budget, scheduler, outcome = simulate(tmp_path, {"a": 1.0, "b": 4.0}, limit_s=30.0,
                                                         trials=40, refit_tail=RefitTail(1.0, 1.5))
    ends = {tid: end for tid, _, end in backend.submitted}
    assert {"fit/a/l1/refit", "fit/b/l1/refit", "refit"} <= set(outcome.results)
    last_trial = max(end for tid, end in ends.items() if "/t" in tid)
    assert last_trial >= budget.deadline - 1.0  # a searched up to the fits' deadline
    assert ends["fit/a/l1/refit"] > budget.deadline  # and its refit ran in the time kept for it
    assert backend.deadlines["fit/a/l1/refit"] == budget.deadline + budget.grace + 1.5
    summary = summarize(budget, scheduler.cut, outcome.results, outcome.timeline)
    assert summary.refits_not_run == [] and "refit" not in summary.other_cut
    assert "no refit" not in summary.line()


def test_a_refit_cut_alone_is_said_and_leaves_the_refit_node_to_run():
    from pipeline.graph.nodes import node_kind

    tasks = graph(models=("a", "b"), trials=1, folds=1)
    refits = [Task(f"fit/{m}/l1/refit", "fit", DRIVER, (bag_id(m, 0),), model=m, level=1, fold_set=())
              for m in ("a", "b")]
    node = Task("refit", "refit", DRIVER, ("ensemble", *(r.id for r in refits)))
    cut = GraphCut([*tasks, *refits, node], lambda t: node_kind(t.kind).partial_inputs)
    cut.started |= {t.id for t in tasks if t.kind == "fit"} | {refits[0].id}
    cut.cut_task(refits[1].id)
    done = {t.id: None for t in [*tasks, refits[0], node]}
    summary = summarize(TimeBudget(30, clock=Clock()), cut, done, [])
    assert summary.refits_not_run == ["b"] and summary.other_cut == {}
    assert "no refit of b (it could not end in the time kept for the refits)" in summary.line()


class TestGraphCut:
    def test_the_refit_node_runs_on_the_refits_that_ended_and_is_cut_only_when_every_one_was(self):
        from pipeline.graph.nodes import node_kind

        tasks = graph(models=("a", "b"), trials=1, folds=1)
        refits = [Task(f"fit/{m}/l1/refit", "fit", DRIVER, (bag_id(m, 0),), model=m, level=1, fold_set=())
                  for m in ("a", "b")]
        node = Task("refit", "refit", DRIVER, ("ensemble", *(r.id for r in refits)))
        cut = GraphCut([*tasks, *refits, node], lambda t: node_kind(t.kind).partial_inputs)
        assert cut.siblings_left(refits[0]) == 1  # it waits for no other model's refit
        cut.cut_task(refits[1].id)
        assert node.id not in cut.cut and refits[0].id not in cut.cut
        cut.cut_task(refits[0].id)
        assert node.id not in cut.cut  # the ensemble's board still comes: an empty refit board
        cut.cut_task("ensemble")
        assert cut.cut[node.id] == "input"

    def test_a_stacked_fit_is_cut_only_when_every_trial_of_a_model_it_reads_was_or_a_fit_it_needs(self):
        """It reads the best trial of each model: before, any trial cut (a time limit cuts most under hpo=auto)
        cut every stacked fit, and `stack_levels=1 time_limit_s=60` never fitted level 2."""
        tasks = graph(models=("a", "b"), trials=3, folds=1)
        inner = Task("fit/a/l1/f0+1", "fit", DRIVER, tuple(bag_id("a", t) for t in range(3)), model="a", level=1,
                     fold_set=(0, 1))
        level2 = Task("fit/a/l2/f0", "fit", DRIVER, (*(bag_id(m, t) for m in "ab" for t in range(3)), inner.id),
                      model="a", level=2, fold_set=(0,))
        cut = GraphCut([*tasks, inner, level2], partial)
        assert cut.siblings_left(inner) == 1  # level 2 waits for no other fit; the bags are not fits
        for t in (1, 2):
            cut.cut_task(fit_id("a", t, 0))
            cut.cut_task(fit_id("b", t, 0))
        assert inner.id not in cut.cut and level2.id not in cut.cut  # trial 0 of each ended
        cut.cut_task(fit_id("b", 0, 0))
        assert cut.cut[level2.id] == "input"  # no b to read
        assert cut.cut[inner.id] == "unused"  # and nothing reads a's inner model then
        other = GraphCut([*tasks, inner, level2], partial)
        other.cut_task(inner.id)
        assert other.cut[level2.id] == "input"  # a fit it needs

    def test_a_cut_trial_does_not_cut_its_models_refit_unless_every_trial_was(self):
        tasks = graph(models=("a",), trials=2, folds=1)
        refit = Task("fit/a/l1/refit", "fit", DRIVER, (bag_id("a", 0), bag_id("a", 1)), model="a", level=1,
                     fold_set=())
        cut = GraphCut([*tasks, refit], partial)
        cut.cut_task(fit_id("a", 1, 0))
        assert refit.id not in cut.cut
        cut.cut_task(fit_id("a", 0, 0))
        assert cut.cut[refit.id] == "input"

    def test_a_cut_fit_cuts_its_bag_and_the_unstarted_folds_of_its_trial_not_the_started_ones(self):
        cut = GraphCut(graph(folds=3), partial)
        cut.started.add(fit_id("a", 0, 0))
        new = cut.cut_task(fit_id("a", 0, 1))
        assert set(new) == {fit_id("a", 0, 1), bag_id("a", 0), fit_id("a", 0, 2)}
        assert cut.cut[fit_id("a", 0, 2)] == "unused" and cut.cut[bag_id("a", 0)] == "input"
        assert fit_id("a", 0, 0) not in cut.cut  # started: it runs on (and is stopped as unused)

    def test_the_ensemble_and_evaluation_run_on_what_finished_and_are_cut_only_when_nothing_did(self):
        tasks = graph(models=("a",), trials=2, folds=1)
        cut = GraphCut(tasks, partial)
        cut.cut_task(fit_id("a", 0, 0))
        assert "ensemble" not in cut.cut
        cut.cut_task(fit_id("a", 1, 0))
        assert {"ensemble", "evaluate"} <= set(cut.cut)

    def test_later_levels_downstream_of_a_cut_are_cut_transitively(self):
        cut = GraphCut(graph(models=("a", "b"), trials=2, folds=2, level2=True), partial)
        cut.cut_task(fit_id("a", 1, 0))  # one level-1 trial of a: a's level-2 fit needs every one
        assert {bag_id("a", 1), "fit/a_l2/f0", "bag/a_l2"} <= set(cut.cut)
        assert not any(t.startswith(("fit/b", "bag/b")) for t in cut.cut) and "ensemble" not in cut.cut

    def test_a_pruned_trial_cuts_its_unstarted_folds_not_the_level_above_which_reads_the_best_trials(self):
        cut = GraphCut(graph(models=("a",), trials=2, folds=3, level2=True), partial)
        cut.started.add(fit_id("a", 1, 0))
        new = cut.cut_task(bag_id("a", 1), "pruned")
        assert set(new) == {bag_id("a", 1), fit_id("a", 1, 1), fit_id("a", 1, 2)}
        assert "fit/a_l2/f0" not in cut.cut

    def test_siblings_left_are_the_unstarted_fits_a_bag_still_waits_for(self):
        cut = GraphCut(graph(folds=5), partial)
        task = cut.tasks[fit_id("a", 0, 3)]
        assert cut.siblings_left(task) == 5
        cut.started.update({fit_id("a", 0, 0), fit_id("a", 0, 1)})
        assert cut.siblings_left(task) == 3


# ---------------------------------------------------------------- the scheduler on a simulated clock
class SimulatedBackend(Backend):
    """No fit runs: one of model m takes seconds[m] on the clock (or, for a list, its next entry), and
    wait() moves the clock to the next end (or by its timeout). Each result holds out the fold's rows,
    predicting 0.5 (a model in `right`: the label on that fraction of the rows, the other class elsewhere)."""

    def __init__(self, seconds: dict, clock: Clock, rows: int, right: dict | None = None,
                 stops: bool = False, stopped_learn: bool = True):
        self.seconds, self.clock, self.rows, self.right = seconds, clock, rows, right or {}
        self.stops = stops  # a fit ends at its request's deadline, stopped, as the models' callbacks stop it
        self.stopped_learn = stopped_learn  # False: a stopped fit predicts 0.5, as one stopped after a round
        self.running: dict[int, tuple] = {}
        self.submitted: list[tuple[str, float, float]] = []  # (task id, start, end)
        self.deadlines: dict[str, float] = {}  # task id -> the deadline its request carried
        self.cancelled: list[str] = []
        self.counter = itertools.count()

    def prepare(self, plan, data):
        return DataRef(obj=data)

    def submit(self, request):
        handle, start = next(self.counter), self.clock.now
        seconds = self.seconds[request.model_name]
        end = start + (seconds.pop(0) if isinstance(seconds, list) else seconds)
        stopped = self.stops and request.deadline is not None and end > request.deadline
        end = max(start, request.deadline) if stopped else end
        self.running[handle] = (start, end, request, stopped)
        self.submitted.append((request.task_id, start, end))
        self.deadlines[request.task_id] = request.deadline
        return handle

    def wait(self, handles, timeout=None):
        handle = min(handles, key=lambda h: self.running[h][1])
        start, end, request, stopped = self.running[handle]
        if timeout is not None and end > self.clock.now + timeout:
            self.clock.now += timeout
            return []
        del self.running[handle]
        self.clock.now = max(self.clock.now, end)
        held_out = (np.arange(self.rows) if request.fold is None  # a refit: every row
                    else np.arange(request.fold, self.rows, request.num_folds))
        val_pred = np.full((len(held_out), 2), 0.5)
        if request.model_name in self.right and (self.stopped_learn or not stopped):
            y = np.tile([0, 1], self.rows // 2)[held_out]
            right = self.right[request.model_name]
            if callable(right):  # of the trial
                right = right(int(request.task_id.split("/t")[1].split("/")[0]))
            p = np.where(held_out * 37 % 100 < 100 * right, y, 1 - y)
            val_pred = np.column_stack([1.0 - p, p])
        return [(handle, FoldResult(request.task_id, request.key, None, held_out, val_pred,
                                    np.full((4, 2), 0.5), end - start, 0.0, "cpu", start, end, 0, "sim",
                                    stopped_by_budget=stopped))]

    def cancel(self, handle):
        self.cancelled.append(self.running.pop(handle)[2].task_id)


def simulate(tmp_path, seconds: dict, limit_s: float, trials=4, folds=2, right: dict | None = None, rows=8,
             serial=False, source=None, stops=False, refit_tail=None, every_trial=False, hooks=None,
             stopped_learn=True):
    """`refit_tail`: refit=true under a whole-run limit with that tail: a refit fit per model after its bags,
    and the refit node after them and the bags' collector (the ensemble's place). `every_trial`: the
    scheduler is given every trial's tasks (`Plan.expanded`) rather than making them as it goes. `hooks`:
    the plan -> the scheduler's hooks."""
    from pipeline.config import HpoConf
    from pipeline.graph.scheduler import Scheduler
    from pipeline.hardware import Machine, resolve
    from pipeline.hpo import TrialSource
    from pipeline.metrics import METRICS
    from pipeline.graph.plan import build_plan
    from pipeline.resources import ModelNeeds, Request
    from pipeline.planning.allocation import allocate
    from pipeline.store import ResultStore
    from tests.fault_models import SleepModel

    hw = resolve(None, Machine(2), dry_run=False)
    allocations = [allocate(hw.total, Request.parse(None, None, "b"), Request.parse(1, None, "f"),
                            ModelNeeds(m, False, False, 1), num_folds=folds, num_trials=trials) for m in seconds]
    plan = build_plan(hw, allocations)
    bags = tuple(t.id for t in plan.tasks if t.kind == "bag")
    plan = plan.with_task(Task("collect", "collect", DRIVER, bags))
    clock = Clock()
    budget = TimeBudget(limit_s, clock=clock)
    if refit_tail is not None:
        from pipeline.graph.shape import REFIT, stack_fit_id

        refits = [Task(stack_fit_id(a.model, 1, ()), "fit", a.fit,
                       tuple(t.id for t in plan.tasks if t.kind == "bag" and t.model == a.model),
                       model=a.model, level=1, fold_set=()) for a in allocations]
        for task in refits:
            plan = plan.with_task(task)
        plan = plan.with_task(Task(REFIT, REFIT, DRIVER, ("collect", *(t.id for t in refits))))
        budget = TimeBudget(limit_s, start=clock.now, clock=clock, whole_run=True, tail=refit_tail)
    plan = plan.expanded() if every_trial else plan
    data = SimpleNamespace(y=np.tile([0, 1], rows // 2), fingerprint="simulated", problem_type="binary")
    backend = SimulatedBackend(seconds, clock, rows, right, stops, stopped_learn)
    backend.one_at_a_time = serial
    source = source or TrialSource(HpoConf(), {}, {}, "maximize")
    scheduler = Scheduler(plan, backend, ResultStore(tmp_path), source, {m: SleepModel({}, m) for m in seconds},
                          data, METRICS["roc_auc"], seed=0, budget=budget, pruning=source.spec.pruning,
                          hooks=hooks(plan) if hooks else None)
    outcome = scheduler.run()
    return plan, backend, budget, scheduler, outcome


def _register_collect():
    from pipeline.graph.nodes import NodeKind, register

    @register
    class Collect(NodeKind):
        """Like the ensemble: runs on the bags that finished."""

        name = "collect"
        partial_inputs = True

        def run(self, task, inputs, ctx):
            return sorted(inputs)


_register_collect()


def test_the_scheduler_starts_only_fits_that_end_by_the_deadline_and_cuts_the_rest(tmp_path):
    plan, backend, budget, scheduler, outcome = simulate(tmp_path, {"fast": 1.0, "slow": 8.0}, limit_s=20.0)
    ends = {tid: end for tid, _, end in backend.submitted}
    starts = {tid: start for tid, start, _ in backend.submitted}
    assert starts[fit_id("slow", 0, 1)] == ends[fit_id("slow", 0, 0)]  # it waited for the first to tell its time
    assert max(ends.values()) <= budget.deadline  # every fit that started ended in time
    later = {tid: d for tid, d in backend.deadlines.items() if "/t0/" not in tid}
    assert later and set(later.values()) == {budget.deadline}  # and carried the deadline
    assert all(d <= budget.deadline for d in backend.deadlines.values())  # a first trial's fit: its share
    done_bags = outcome.results["collect"]
    # the slow model's first fit (8 s) runs alone; its second fold fits (16 s), a second trial would not
    assert [b for b in done_bags if "slow" in b] == [bag_id("slow", 0)]
    assert not any(t.startswith("fit/slow/t1") for t in ends)
    # the fast model fills the rest, trial after trial; no trial is started that cannot finish
    fast = [b for b in done_bags if "fast" in b]
    assert len(fast) >= 3
    depends_on = {t.id: t.depends_on for t in plan.tasks}
    assert {t for t in ends if "fast" in t} == {f for b in fast for f in depends_on[b]}
    summary = summarize(budget, scheduler.cut, outcome.results, outcome.timeline)
    assert summary.trials == 8 and summary.trials_not_run == 8 - len(done_bags) and summary.trials_dropped == 0
    assert summary.fits_not_run == 16 - len(ends) and summary.left_out == []
    assert summary.line().startswith(f"fit_time_limit_s=20 s: {8 - len(done_bags)} of 8 trials not run")


def test_a_fit_that_does_not_stop_is_stopped_past_the_grace_and_nothing_finished_is_an_error(tmp_path):
    from pipeline.errors import TimeLimitError

    plan, backend, budget, scheduler, outcome = simulate(tmp_path, {"stuck": 1000.0}, limit_s=5.0, trials=2)
    # its second fold waits for the first to tell its time, but takes the CPU nothing else wants
    assert sorted(backend.cancelled) == [fit_id("stuck", 0, 0), fit_id("stuck", 0, 1)]
    assert "collect" not in outcome.results
    summary = summarize(budget, scheduler.cut, outcome.results, outcome.timeline, scheduler.cancelled)
    assert summary.nothing_finished and summary.left_out == ["stuck"] and scheduler.cancelled == 2
    with pytest.raises(TimeLimitError, match="fit_time_limit_s=5: no model finished a complete trial.*raise fit_time_limit_s"):
        check_finished(summary)
    assert "2 stopped past the deadline" in summary.line()


def test_a_whole_run_limit_start_up_spent_says_when_the_run_was_ready_to_fit_and_what_the_tail_kept():
    """A limit the start-up took: the error says how long the run took to be ready to fit and what it kept
    for its tail: the limit under which the fits have no time on this machine; a fits-only limit starts at
    the first fit and says neither."""
    from pipeline.errors import TimeLimitError

    clock = Clock()
    budget = TimeBudget(6.0, start=clock.now, clock=clock, whole_run=True, tail=lambda: 2.0)
    clock.now += 4.5  # the interpreter, the table, the model libraries' imports
    budget.begin()
    tasks = graph(models=("a",), trials=1, folds=1)
    cut = GraphCut(tasks, partial)
    cut.cut_task(fit_id("a", 0, 0))
    summary = summarize(budget, cut, {}, [])
    assert summary.nothing_finished and summary.ready_s == pytest.approx(4.5)
    assert summary.reserved_s == pytest.approx(3.0)  # the tail's 2 s and the stop grace
    with pytest.raises(TimeLimitError, match=r"time_limit_s=6: no model finished a complete trial .*no "
                                             r"leaderboard: the run was ready to fit 4\.5 s after start-up .*"
                                             r"kept 3\.0 s for its tail, which left the fits 0\.0 s: on this "
                                             r"machine a limit under 7\.5 s leaves the fits no time; raise "
                                             r"time_limit_s"):
        check_finished(summary)
    fits_only = TimeBudget(6.0, clock=clock)
    fits_only.begin()
    summary = summarize(fits_only, cut, {}, [])
    assert summary.ready_s is None
    with pytest.raises(TimeLimitError) as refused:
        check_finished(summary)
    assert "ready to fit" not in str(refused.value)


def test_an_ample_budget_cuts_nothing(tmp_path):
    plan, backend, budget, scheduler, outcome = simulate(tmp_path, {"fast": 1.0, "slow": 3.0}, limit_s=1e6, trials=3)
    assert len(outcome.results["collect"]) == 6 and not scheduler.cut.cut
    assert not summarize(budget, scheduler.cut, outcome.results, outcome.timeline).cut_anything


def test_a_running_fold_whose_trial_can_no_longer_finish_is_stopped(tmp_path):
    # both first trials end by 0.6 s (fits of 0.2 s); m's second trial: its first fit takes 1 s, so at 1.6 s
    # its third starts... its second starts at 0.6 s beside it (two of 0.2 s, as measured, end in time) but
    # runs 6 s; the third, on the CPU x's 4 s fit holds until 5.6 s, would end past the 5.5 s deadline: the
    # trial is cut, and its running second fold stopped
    plan, backend, budget, scheduler, outcome = simulate(
        tmp_path, {"m": [0.2] * 3 + [1.0, 6.0, 1.0], "x": [0.2] * 3 + [4.0] * 3}, limit_s=5.5, trials=2, folds=3)
    assert backend.cancelled == [fit_id("m", 1, 1)] and scheduler.abandoned == 1
    assert fit_id("m", 1, 2) not in {tid for tid, _, _ in backend.submitted}
    summary = summarize(budget, scheduler.cut, outcome.results, outcome.timeline, scheduler.cancelled,
                        scheduler.abandoned)
    assert (summary.trials_dropped, summary.fits_abandoned, summary.left_out) == (2, 1, [])
    assert "2 dropped unfinished" in summary.line() and "1 stopped when their trial could no longer finish" in summary.line()


def test_a_trial_counts_the_cpus_of_fits_behind_it_in_the_queue_not_those_ahead_of_it(tmp_path):
    # b (2 s, 3 folds) runs beside a's first fit, whose time is unknown (it does not stop) and which comes
    # first; after b's first trial, at 6 s, its second gets one CPU, 2 + 2 + 2 = 6 s, past the 10.5 s
    # deadline (two at once would end at 10 s): it is not started
    plan, backend, budget, scheduler, outcome = simulate(tmp_path, {"a": 20.0, "b": 2.0}, limit_s=10.5,
                                                         trials=2, folds=3)
    submitted = {tid for tid, _, _ in backend.submitted}
    assert {fit_id("b", 0, f) for f in range(3)} <= submitted and not any("/b/t1/" in tid for tid in submitted)
    # c (4 s, 3 folds) comes first; when its first fit ends at 4 s, d's second trial holds a CPU until
    # 4.5 s: c's other folds run on the free CPU and on d's as it frees, ending at 8.5 s, by the 9 s deadline
    plan, backend, budget, scheduler, outcome = simulate(tmp_path / "2", {"c": 4.0, "d": 1.5}, limit_s=9.0,
                                                         trials=2, folds=2 + 1)
    assert bag_id("c", 0) in outcome.results["collect"]
    assert {tid: (start - 1000, end - 1000) for tid, start, end in backend.submitted}[fit_id("c", 0, 2)] == (4.5, 8.5)


@pytest.mark.parametrize("value", ["0", "-5", "nan", "inf"])
def test_a_time_limit_that_is_no_positive_number_of_seconds_is_refused_naming_the_key(compose, value):
    from pipeline.errors import ConfigError
    from pipeline.settings import read_settings

    with pytest.raises(ConfigError, match=f"time_limit_s={value}.* must be a positive number of seconds.*or null"):
        read_settings(compose([f"time_limit_s={value}"]))
    assert read_settings(compose(["time_limit_s=40"])).conf.time_limit_s == 40.0
    assert read_settings(compose([])).conf.time_limit_s is None


def test_a_dropped_trial_is_told_to_optuna_as_failed_and_a_trial_never_asked_is_no_trial():
    import optuna

    from pipeline.config import HpoConf, SearchDimConf
    from pipeline.hpo import TrialSource

    source = TrialSource(HpoConf(num_trials=3, seed=0, _target_="pipeline.searchers.RandomSearch"), {"m": {"x": SearchDimConf("float", 0.0, 1.0)}}, {}, "maximize")
    source.params("m", 0)
    source.drop("m", 0)
    source.drop("m", 1)
    assert source.dropped == {("m", 0)}
    assert [t.state for t in source._study("m").trials] == [optuna.trial.TrialState.FAIL]


def test_the_tail_keeps_no_time_for_stopping_workers_when_the_fits_ran_in_the_driver():
    from pipeline.graph.tail import EXIT_S, IN_DRIVER_EXIT_S, TailEstimate

    models = (("a", 1, 1), ("b", 1, 1))
    pool, driver = TailEstimate(models, 2), TailEstimate(models, 2, workers=False)
    assert pool() - driver() == pytest.approx(EXIT_S - IN_DRIVER_EXIT_S) and driver() < pool()


def test_the_tail_keeps_time_to_write_and_log_each_models_predictor_by_its_measured_size():
    """A forest's trees grown whole weigh tens of MB a fold: a fixed cost per model under-reserved its save
    and MLflow's logging (0.2 s past a 60-s limit). The budget weighs each model's first fitted fold model
    as a save pickles it; the tail adds its megabytes times its folds, three passes with tracking."""
    from pipeline.graph.tail import SAVE_S_PER_MB, TailEstimate

    budget = TimeBudget(60, prior=lambda task: None, whole_run=True)
    heavy, light = SimpleNamespace(model=list(range(200_000))), SimpleNamespace(model=[1, 2, 3])
    budget.record(SimpleNamespace(model="forest", level=1), 1.0, False, heavy)
    budget.record(SimpleNamespace(model="forest", level=1), 1.0, False, light)  # the first one is kept
    budget.record(SimpleNamespace(model="gbm", level=1), 1.0, False, light)
    assert budget.model_bytes("forest") > 500_000 and budget.model_bytes("gbm") < 100
    assert budget.model_bytes("nn") is None  # no fit ended yet
    models = (("forest", 5, 1), ("gbm", 5, 1), ("nn", 5, 1))
    bare = TailEstimate(models, 2)
    untracked = TailEstimate(models, 2, saved_bytes=budget.model_bytes)
    tracked = TailEstimate(models, 2, tracking=True, saved_bytes=budget.model_bytes)
    mb = (budget.model_bytes("forest") + budget.model_bytes("gbm")) * 5 / 2**20
    assert untracked.fixed - bare.fixed == pytest.approx(mb * SAVE_S_PER_MB)
    assert tracked.saving_seconds == pytest.approx(3 * untracked.saving_seconds)


def test_the_tail_reserve_follows_the_tails_measured_for_runs_like_it(monkeypatch, tmp_path):
    from pipeline.graph.tail import (BOUND_CPU_SHARE, FLOOR, KEEP, SAFETY, TailEstimate, keep_measured,
                                     reserved_share, size_decade)

    monkeypatch.setenv("PIPELINE_CACHE_DIR", str(tmp_path))
    tail = TailEstimate((("a", 5, 1), ("b", 5, 1)), 2, size=size_decade(5000, 14))
    # nothing measured: the bound's own CPU share stands in, scaled by how busy the start-up found the machine
    assert tail.size == "1e4" and reserved_share(tail, 1.0) == (pytest.approx(SAFETY * BOUND_CPU_SHARE), 0)
    assert reserved_share(tail, 0.25) == (1.0, 0)  # a quarter of a CPU, as when the bound was measured: all of it
    keep_measured(tail, 0.4 * tail.fixed, 1.0)
    keep_measured(tail, 0.1 * tail.fixed, 1.0)
    assert reserved_share(tail, 1.0) == (pytest.approx(SAFETY * 0.4), 2)  # the largest, with its margin
    assert reserved_share(tail, 0.8) == (pytest.approx(SAFETY * 0.4 / 0.8), 2)  # a busier start-up: more
    for _ in range(KEEP):
        keep_measured(tail, 0.01 * tail.fixed, 1.0)
    assert reserved_share(tail, 1.0) == (FLOOR, KEEP)  # the oldest forgotten; never under the floor
    keep_measured(tail, 0.5 * tail.fixed, 0.5)  # a tail measured on a busy machine: half its cost at a whole CPU
    assert reserved_share(tail, 1.0) == (pytest.approx(SAFETY * 0.25), KEEP)
    scaled = TailEstimate(tail.models, 2, size="1e4", share=FLOOR)
    assert scaled() == pytest.approx(FLOOR * tail.fixed)
    others = [TailEstimate(tail.models, 2, tracking=True, size="1e4"), TailEstimate(tail.models, 2, size="1e7"),
              TailEstimate(tail.models, 2, workers=False, size="1e4")]
    assert all(reserved_share(o, 1.0)[1] == 0 for o in others)  # other kinds of run, other sizes: their own
    refits = TailEstimate(tail.models, 2, refit=True, size="1e2")
    keep_measured(refits, 0.1, 1.0)
    assert reserved_share(refits, 1.0)[1] == 0  # a tail of refits is not a measure of the fixed costs
    assert size_decade(None, 3) == "unknown" and size_decade(10_000_000, 21) == "1e8"
    keep_measured(tail, 1.3 * tail.fixed, 1.0)  # a tail past its bound (it wrote more than the bound counts)
    assert reserved_share(tail, 1.0) == (pytest.approx(1.3), KEEP)  # the next run like it keeps that much
    assert reserved_share(tail, 0.25)[0] == pytest.approx(1.3)  # however busy: what was measured, no more


def test_a_run_measures_how_much_of_a_cpu_its_start_up_had(monkeypatch):
    """The share is the main thread's CPU seconds over the wall seconds since the run started: a thread that
    computes has nearly all of a CPU, one that waits (as on a machine with more runnable threads than CPUs)
    little; it is measured once per run and kept for the run's tail."""
    import time

    from pipeline import run_clock

    monkeypatch.setattr(run_clock, "_runs", 1)
    run_clock.run_started()  # a later job of a sweep: its own start
    end = time.thread_time() + 0.2
    while time.thread_time() < end:
        pass
    busy = run_clock.start_up_cpu_share()
    assert run_clock.start_up_cpu_share() == busy  # measured once, the same after
    run_clock.run_started()
    time.sleep(0.2)
    waiting = run_clock.start_up_cpu_share()
    # waiting is not computing; the bound on `busy` leaves room for a box with twice the runnable threads
    # of its CPUs (the suite's workers and their runs' processes: 0.38 measured so)
    assert waiting < 0.1 and busy > max(0.25, 3 * waiting)


def test_under_a_budget_every_models_first_trial_comes_first_then_the_models_share_the_time_not_the_trials(
        tmp_path):
    plan, backend, budget, scheduler, outcome = simulate(tmp_path, {"fast": 1.0, "slow": 4.0}, limit_s=60.0,
                                                         trials=40, folds=2)
    starts = {tid: start for tid, start, _ in backend.submitted}
    assert max(starts[fit_id(m, 0, 0)] for m in ("fast", "slow")) < min(
        s for tid, s in starts.items() if "/t0/" not in tid)  # (a second fold waits to learn the fit's time)
    done = outcome.results["collect"]
    fast, slow = sum("fast" in b for b in done), sum("slow" in b for b in done)
    seconds = {m: sum(e - s for tid, s, e in backend.submitted if m in tid) for m in ("fast", "slow")}
    assert fast >= 3 * slow and abs(seconds["fast"] - seconds["slow"]) <= 8.0, (fast, slow, seconds)


@pytest.mark.parametrize("serial, at_most", [(True, 0.15), (False, 0.6)])
def test_once_every_model_has_a_whole_trial_one_far_behind_the_leader_gets_less_of_the_time(tmp_path, serial,
                                                                                           at_most):
    """Fits one at a time (in the driver), the share decides every start; with a pool, a model far
    behind still takes a CPU its leader cannot use (its one trial's last fold running alone)."""
    right = {"good": 0.9, "poor": 0.6}  # out-of-fold errors 0.1 and 0.4: the poor one's share a twentieth
    plan, backend, budget, scheduler, outcome = simulate(tmp_path, {"good": 1.0, "poor": 1.0}, limit_s=60.0,
                                                         trials=60, folds=2, right=right, rows=20, serial=serial)
    seconds = {m: sum(e - s for tid, s, e in backend.submitted if f"/{m}/" in tid) for m in right}
    assert seconds["poor"] <= at_most * seconds["good"], seconds
    assert scheduler._shares == {"good": 1.0, "poor": 0.05}


def test_a_model_far_behind_on_its_own_params_still_fits_its_next_configuration_at_an_equal_share(tmp_path):
    """One trial is a poor judge of a kind (the network's own params far behind the GBMs, its first
    portfolio entry level with them): a model's share falls only once it has told two trials."""
    right = {"good": 0.9, "poor": lambda trial: 0.6 if trial == 0 else 0.89}
    plan, backend, budget, scheduler, outcome = simulate(tmp_path, {"good": 1.0, "poor": 1.0}, limit_s=60.0,
                                                         trials=60, folds=2, right=right, rows=20, serial=True)
    starts = {tid: start for tid, start, _ in backend.submitted}
    assert starts[fit_id("poor", 1, 0)] - min(starts.values()) <= 6.0, sorted(starts.items(), key=lambda kv: kv[1])[:8]
    assert scheduler._shares["poor"] >= 0.4  # judged on both trials: 10% behind the leader, half the time


def test_fits_one_at_a_time_finish_a_trial_under_way_before_starting_another_models(tmp_path):
    """In the driver a trial's folds run end to end: once its first fold has ended, its other folds go
    before any other trial's, so the models' turns do not spread a trial over the budget (one left
    unfinished at the deadline is dropped, its fits wasted)."""
    plan, backend, budget, scheduler, outcome = simulate(tmp_path, {"a": 1.0, "b": 2.5}, limit_s=60.0,
                                                         trials=40, folds=3, serial=True)
    order = [tid for tid, _, _ in backend.submitted]
    for model in ("a", "b"):
        for trial in range(1, 40):
            folds = [order.index(fit_id(model, trial, f)) for f in range(3) if fit_id(model, trial, f) in order]
            if len(folds) == 3:
                assert folds[2] - folds[0] == 2, (model, trial, order[folds[0]:folds[2] + 1])
    summary = summarize(budget, scheduler.cut, outcome.results, outcome.timeline)
    assert summary.trials_dropped == 0


def test_time_shares_wait_for_two_told_trials():
    from pipeline.graph.trial_gate import time_shares

    errors = {"a": 0.10, "b": 0.40}
    assert time_shares(errors, {"a": 5, "b": 1}) == {"a": 1.0, "b": 1.0}
    assert time_shares(errors, {"a": 5, "b": 2}) == pytest.approx({"a": 1.0, "b": 0.05})


@pytest.mark.parametrize("errors, shares", [
    ({"a": 0.30, "b": 0.31, "c": 0.315}, {"a": 1.0, "b": 1.0, "c": 1.0}),  # within 5% of the leader's error
    ({"a": 0.30, "b": 0.36}, {"a": 1.0, "b": 0.25}),  # 20% behind: a quarter
    ({"a": 140.0, "b": 196.0}, {"a": 1.0, "b": 0.125}),  # an RMSE 40% behind: an eighth
    ({"a": 0.10, "b": 0.40}, {"a": 1.0, "b": 0.05}),  # four times the error: the floor
    ({"a": 0.0, "b": 0.01, "c": 0.0}, {"a": 1.0, "b": 0.05, "c": 1.0}),  # a perfect leader
])
def test_time_shares_by_the_relative_gap_to_the_leaders_error(errors, shares):
    from pipeline.graph.trial_gate import time_shares

    assert time_shares(errors) == pytest.approx(shares)


def test_the_trial_source_keeps_each_models_best_whole_trial_as_an_error():
    from pipeline.config import HpoConf
    from pipeline.hpo import TrialSource

    auc = TrialSource(HpoConf(), {}, {}, "maximize")
    for trial, score, pruned in ((0, 0.70, False), (1, 0.90, True), (2, 0.75, False), (3, float("nan"), False)):
        auc.tell("m", trial, score, pruned=pruned)
    rmse = TrialSource(HpoConf(), {}, {}, "minimize")
    rmse.tell("m", 0, 150.0)
    rmse.tell("m", 1, 160.0)
    assert auc.best_error == {"m": pytest.approx(0.25)} and rmse.best_error == {"m": 150.0}
    assert auc.told == {"m": 4} and rmse.told == {"m": 2}  # pruned and NaN trials are told too


def test_a_later_fold_of_a_trial_halving_may_stop_waits_for_its_first_fold_while_other_fits_can_start(tmp_path):
    """Two searched models on two CPUs, 5-fold trials, successive halving over folds: most trials stop
    after their first fold, and their second fold is not started beside the first (it would be
    fitted for nothing) while the other model has fits to start."""
    from pipeline.config import HpoConf, SearchDimConf
    from pipeline.hpo import TrialSource

    hpo = HpoConf(num_trials=60, seed=0, pruning=True, _target_="pipeline.searchers.RandomSearch")
    source = TrialSource(hpo, {m: {"x": SearchDimConf("float", 0.0, 1.0)} for m in "ab"}, {}, "maximize")
    right = {m: (lambda trial: 0.6 + 0.3 * ((trial * 7) % 10) / 10) for m in "ab"}  # 0.6 to 0.87 by trial
    plan, backend, budget, scheduler, outcome = simulate(tmp_path, {"a": 1.0, "b": 1.0}, limit_s=60.0, trials=60,
                                                         folds=5, right=right, rows=100, source=source)
    folds = {}
    for tid, _, _ in backend.submitted:
        model, trial = tid.split("/")[1:3]
        folds[(model, trial)] = folds.get((model, trial), 0) + 1
    stopped = [n for (m, t), n in folds.items() if (m, int(t[1:])) in source.pruned]
    assert len(stopped) >= 10 and sum(n > 1 for n in stopped) <= 0.2 * len(stopped), sorted(stopped)


def test_only_a_trial_halving_may_stop_and_none_of_whose_folds_has_scored_awaits_its_first_score():
    from pipeline.config import HpoConf, SearchDimConf
    from pipeline.hpo import TrialSource

    space = {"m": {"x": SearchDimConf("float", 0.0, 1.0)}}
    pruned = TrialSource(HpoConf(num_trials=9, pruning=True, _target_="pipeline.searchers.RandomSearch"), space, {},
                         "maximize")
    for trial in range(3):
        pruned.params("m", trial)
    pruned.fold_scored("m", 2, 0.7)
    assert [pruned.awaits_first_score("m", t) for t in range(3)] == [False, True, False]
    plain = TrialSource(HpoConf(num_trials=9, _target_="pipeline.searchers.RandomSearch"), space, {}, "maximize")
    assert not plain.awaits_first_score("m", 1)


@pytest.mark.parametrize("limit_s", [7.5, 8.5, 9.5, 10.5])
def test_in_the_driver_a_trial_starts_only_if_its_folds_one_after_another_end_in_time(tmp_path, limit_s):
    """Fits in the driver run one at a time: the free CPUs are no second place for a trial's other fold,
    so no trial is started whose folds, laid end to end, pass the deadline (it would be dropped unfinished)."""
    plan, backend, budget, scheduler, outcome = simulate(tmp_path, {"m": 1.0}, limit_s=limit_s, trials=20,
                                                         serial=True)
    summary = summarize(budget, scheduler.cut, outcome.results, outcome.timeline)
    assert summary.trials_dropped == 0 and summary.trials > summary.trials_not_run
    assert max(end for _, _, end in backend.submitted) <= budget.deadline


@pytest.mark.parametrize("serial", [True, False])
def test_a_deadline_that_cannot_hold_every_models_first_trial_whole_gives_each_fit_its_share(tmp_path,
                                                                                           serial):
    """The quick model's folds take 1 s, the slow one's 4 s, 5 folds each; at full length the two first
    trials need 25 fit-seconds, more than the deadline holds: each first-trial fit stops by its share of the
    time left (graph.first_trials), so both trials end, the slow one's fits shortened; without the shares
    the slow model's trial was cut and it was left out of the run."""
    plan, backend, budget, scheduler, outcome = simulate(tmp_path, {"quick": 1.0, "slow": 4.0},
                                                         limit_s=11.0 + 11 * serial, trials=3, folds=5,
                                                         serial=serial, stops=True)
    done = outcome.results["collect"]
    assert {bag_id("quick", 0), bag_id("slow", 0)} <= set(done), done
    assert max(end for _, _, end in backend.submitted) <= budget.deadline
    summary = summarize(budget, scheduler.cut, outcome.results, outcome.timeline, scheduler.cancelled,
                        scheduler.abandoned, scheduler.first.held_to_share)
    assert summary.left_out == [] and summary.trials_dropped == 0 and summary.fits_cancelled == 0
    full = {"quick": 1.0, "slow": 4.0}
    shortened = [tid for tid, start, end in backend.submitted if end - start < full[tid.split("/")[1]]]
    assert shortened and all("/t0/" in tid for tid in shortened)
    own = [tid for tid in shortened if backend.deadlines[tid] < budget.deadline]  # not the run's deadline
    assert own and summary.fits_held_to_share == len(own) and summary.fits_stopped == len(shortened)
    assert f"({len(own)} of them first-trial fits at their share of the time" in summary.line()


@pytest.mark.parametrize("learnt", [True, False])
def test_a_first_trials_fold_the_budget_stopped_far_short_is_left_out_of_its_bag_and_said(tmp_path, learnt):
    """The shortened folds of the case above: where they learnt what the whole ones did they stay in their
    bags; where they predict nothing (a booster stopped after a round on a box that slowed), each is left
    out of its bag, whose out-of-fold rows and test predictions are then its whole folds' alone."""
    plan, backend, budget, scheduler, outcome = simulate(
        tmp_path, {"quick": 1.0, "slow": 4.0}, limit_s=11.0, trials=3, folds=5, stops=True, rows=400,
        right={"quick": 0.9, "slow": 0.9}, stopped_learn=learnt)
    stopped = {e["task"] for e in outcome.timeline if e.get("stopped_by_budget")}
    assert stopped
    summary = summarize(budget, scheduler.cut, outcome.results, outcome.timeline, scheduler.cancelled,
                        scheduler.abandoned, scheduler.first.held_to_share)
    for model in ("quick", "slow"):
        trial = outcome.results[bag_id(model, 0)]
        kept = {f.task_id for f in trial.folds}
        ended = {t for t in outcome.results if t.startswith(f"fit/{model}/t0/")}
        assert kept == (ended if learnt else ended - stopped)
        assert list(trial.held_out) == sorted(r for f in trial.folds for r in f.held_out)
    if learnt:
        assert "stopped far short" not in summary.line()
    else:
        slow = sum(t.startswith("fit/slow/") for t in stopped)
        assert f"slow: {5 - slow - sum(fit_id('slow', 0, k) not in outcome.results for k in range(5))} of 5 " \
               f"folds, {slow} stopped far short left out" in summary.line()


@pytest.mark.parametrize("serial", [True, False])
def test_first_trials_that_cannot_end_whole_are_kept_with_the_folds_that_ended(tmp_path, serial):
    """Three models whose folds take 8 s, 5 folds each, 30 s (120 fit-seconds asked of 30, or of 60 on two
    CPUs): every model's lead fold runs first and whole; a later fold starts only with at least half a fit's
    time, and each first trial is kept on the held-out rows of its folds that ended (before, all 15 fits ran,
    each stopped at its share: 2 s of 8 one at a time)."""
    from pipeline.graph.first_trials import MIN_PART

    seconds = {"a": 8.0, "b": 8.0, "c": 8.0}
    plan, backend, budget, scheduler, outcome = simulate(tmp_path, seconds, limit_s=30.0, trials=3, folds=5,
                                                         serial=serial, stops=True)
    assert outcome.results["collect"] == sorted(bag_id(m, 0) for m in seconds)
    ran = {tid: end - start for tid, start, end in backend.submitted}
    assert all(ran[fit_id(m, 0, 0)] == 8.0 for m in seconds)  # the leads: whole, first
    assert max(start for tid, start, _ in backend.submitted if tid.endswith("/f0")) <= min(
        start for tid, start, _ in backend.submitted if not tid.endswith("/f0"))
    assert min(ran.values()) >= MIN_PART * 8.0 and len(ran) < 15
    assert max(end for _, _, end in backend.submitted) <= budget.deadline
    for m in seconds:
        trial = outcome.results[bag_id(m, 0)]
        assert list(trial.held_out) == sorted(r for f in trial.folds for r in f.held_out)
    summary = summarize(budget, scheduler.cut, outcome.results, outcome.timeline, scheduler.cancelled,
                        scheduler.abandoned, scheduler.first.held_to_share)
    assert summary.left_out == [] and summary.trials_dropped == 0 and summary.first_trials_partial
    assert "first trials kept with the folds that ended in time, scored on their held-out rows (a: 1 of 5 folds" in (
        summary.line())
    if serial:
        assert summary.first_trials_partial[:2] == ["a: 1 of 5 folds", "b: 1 of 5 folds"]


def test_a_first_trials_fit_gets_its_max_min_fair_share_of_the_time_left():
    """Where bags stay whole (a stacked level reads them), every first-trial fit shares the time left."""
    from pipeline.graph.first_trials import UNMEASURED_FIRST, FirstTrials, busy_seconds, water_level

    clock = Clock(0.0)
    budget = TimeBudget(100, clock=clock)
    bag = lambda m: [Task(fit_id(m, 0, f), "fit", DRIVER, model=m, trial=0, fold=f) for f in range(5)]  # noqa: E731
    tasks = bag("a") + bag("b") + [Task(fit_id("a", 1, 0), "fit", DRIVER, model="a", trial=1, fold=0)]
    first, gone = FirstTrials(tasks), set()
    assert len(first.pending) == 10  # a later trial's fit keeps the run's deadline
    assert first.share(tasks[-1], budget, 1, 0.0, gone.__contains__) is None
    # nothing measured: 100 s over 10 fits, the first of a bag twice an equal share
    share = 100 * UNMEASURED_FIRST / (9 + UNMEASURED_FIRST)
    assert first.share(tasks[0], budget, 1, 0.0, gone.__contains__) == pytest.approx(share)
    first.started(tasks[0], share, clock.now)
    budget.record(tasks[0], 2.0)
    budget.record(tasks[5], 30.0, stopped=True)  # b took at least 30 s
    first.started(tasks[5], None, clock.now)
    clock.now = 32.0
    # 68 s left on two places (136 s), 20 s of them held by a running fit: a's 4 fits of 2 s take 8 s, b's
    # 4 of 30 s or more share the 108 s left: the level is 27 s, a fit under it is stopped there too
    assert water_level([(2.0, 1.0)] * 4 + [(30.0, 1.0)] * 4, 116.0) == pytest.approx(27.0)
    assert first.share(tasks[1], budget, 2, 20.0, gone.__contains__) == pytest.approx(27.0)
    first.started(tasks[1], 27.0, clock.now)
    assert first.held_to_share == 0 and tasks[1].id in first.capped and tasks[5].id not in first.capped
    # where every fit left is measured and all fit, none gets a deadline of its own
    roomy = FirstTrials(bag("c"))
    budget.record(bag("c")[0], 1.0)
    assert roomy.share(bag("c")[1], budget, 1, 0.0, set().__contains__) is None
    assert water_level([(1.0, 1.0), (3.0, 1.0)], 4.0) is None
    assert water_level([(1.0, 1.0), (None, 2.0)], 4.0) == 1.5  # the unbounded one weighs two: 2 x 1.5 s
    # a's fit from 30 s, estimated 2 s, is over; b's from 31 s holds its place to its own deadline, 40 s
    assert busy_seconds([(tasks[2], 30.0, None), (tasks[6], 31.0, 40.0)], budget, 32.0) == pytest.approx(8.0)


def test_where_a_bag_may_end_short_the_leads_share_the_time_among_themselves_then_the_later_folds():
    """With `partial` (no stacking), each model's first fold to start shares the time left with the other
    models' leads only: three unmeasured models get a third each, not a fifteenth. A later fold shares
    with the other later folds of the models begun, and is not started under half its model's fit."""
    from pipeline.graph.first_trials import MIN_PART, FirstTrials

    clock = Clock(0.0)
    budget = TimeBudget(30, clock=clock)
    bag = lambda m: [Task(fit_id(m, 0, f), "fit", DRIVER, model=m, trial=0, fold=f) for f in range(5)]  # noqa: E731
    tasks = bag("a") + bag("b") + bag("c")
    first = FirstTrials(tasks, partial=True)
    gone = set()
    assert first.leads(tasks[0]) and first.share(tasks[0], budget, 1, 0.0, gone.__contains__) == pytest.approx(10.0)
    first.started(tasks[0], 10.0, now=0.0)
    gone.add(tasks[0].id)
    assert not first.leads(tasks[1]) and first.leads(tasks[5])
    budget.record(tasks[0], 8.0)  # a's fold took 8 s
    clock.now = 8.0
    first.ended(tasks[0], None, now=8.0)
    # b's lead: the 30 s of the first trials over a (which ran 8 s and asks 32 more), b and c: 10 s each
    assert first.share(tasks[5], budget, 1, 0.0, gone.__contains__) == pytest.approx(10.0)
    for lead in (tasks[5], tasks[10]):
        first.started(lead, None, clock.now)
        gone.add(lead.id)
        budget.record(lead, 8.0)
    clock.now = 24.0
    # 6 s left over the 12 later folds of 8 s each: half a second each, under half a fit: not started
    share = first.share(tasks[1], budget, 1, 0.0, gone.__contains__)
    assert share == pytest.approx(0.5) and share < MIN_PART * 8.0 and first.too_short(tasks[1], budget, share)
    clock.now = 0.0  # with 30 s left, 2.5 s each: still too short; with 120 s, 10 s each: the whole fit
    assert first.too_short(tasks[1], budget, first.share(tasks[1], budget, 1, 0.0, gone.__contains__))
    assert first.share(tasks[1], budget, 4, 0.0, gone.__contains__) is None
    # without `partial` the same fold would be started at its share (a stacked level needs whole bags)
    whole = FirstTrials(tasks)
    assert not whole.too_short(tasks[1], budget, 0.5)


def test_once_the_leads_have_ended_a_kind_far_behind_on_their_rows_shares_the_later_folds_time_less():
    """Each kind's error on its lead fold's rows (`LeadStanding`, a stopped lead or a later fold not read)
    weighs its later folds' shares as `time_shares` weighs later trials: the two kinds level on the lead
    rows get most of their 8-s folds, and the one twice behind, under half a fit, starts none. Without
    standing the 60 s are split alike and each of the 12 folds would stop at 5 s of its 8."""
    from pipeline.graph.first_trials import MIN_PART, FirstTrials, LeadStanding
    from pipeline.metrics import resolve

    y = np.arange(200, dtype=float)
    rows = np.arange(0, 200, 5)
    standing = LeadStanding(resolve("rmse", "regression"), y)
    result = lambda err, **kw: SimpleNamespace(held_out=rows, val_pred=y[rows] + err, **kw)  # noqa: E731
    clock = Clock(0.0)
    budget = TimeBudget(60, clock=clock)
    bag = lambda m: [Task(fit_id(m, 0, f), "fit", DRIVER, model=m, trial=0, fold=f) for f in range(5)]  # noqa: E731
    tasks = bag("a") + bag("b") + bag("c")
    first, gone = FirstTrials(tasks, partial=True, standing=standing), set()
    plain = FirstTrials(tasks, partial=True)
    standing.ended(tasks[5], result(1.0, stopped_by_budget=True))  # stopped at its share: not read
    standing.ended(tasks[11], result(9.0))  # not a lead fold's rows
    assert standing.weights() == {} and standing.errors == {}
    for lead, err in ((tasks[0], 1.0), (tasks[5], 1.02), (tasks[10], 2.0)):
        for trials in (first, plain):
            trials.started(lead, None, now=0.0)
            trials.ended(lead, result(err), now=0.0)
        gone.add(lead.id)
        budget.record(lead, 8.0)
    assert standing.errors == pytest.approx({"a": 1.0, "b": 1.02, "c": 2.0})
    assert standing.weights() == pytest.approx({"a": 1.0, "b": 1.0, "c": 0.05}) and standing.behind() == {"c"}
    # 60 s over a's and b's 8 later folds at the level L and c's 4 at 0.05 L: L = 60 / 8.2
    share_a = first.share(tasks[1], budget, 1, 0.0, gone.__contains__)
    assert share_a == pytest.approx(60 / 8.2) and not first.too_short(tasks[1], budget, share_a)
    share_c = first.share(tasks[11], budget, 1, 0.0, gone.__contains__)
    assert share_c == pytest.approx(0.05 * 60 / 8.2) and first.too_short(tasks[11], budget, share_c)
    assert plain.share(tasks[1], budget, 1, 0.0, gone.__contains__) == pytest.approx(5.0)
    assert not plain.too_short(tasks[1], budget, 5.0) and 5.0 > MIN_PART * 8.0
    assert plain.share(tasks[11], budget, 1, 0.0, gone.__contains__) == pytest.approx(5.0)
    clock.now = 57.0  # the run's deadline alone (no share): 3 s left, under half a fit
    assert first.too_short(tasks[1], budget, None) and not first.too_short(tasks[1], budget, 4.0)


def test_under_accuracy_the_lead_folds_are_judged_on_their_log_loss():
    """Two kinds right on the same rows of a lead fold tie on accuracy; one sure of its right rows and the
    other barely so are far apart on the log loss, the score the ensemble weighs by: the unsure one is
    behind and the line names the log loss."""
    from pipeline.graph.first_trials import LeadStanding
    from pipeline.metrics import resolve

    y = np.tile([0, 1, 2], 40)
    rows = np.arange(0, 120, 2)
    standing = LeadStanding(resolve("accuracy", "multiclass"), y)

    def proba(sure):
        p = np.full((len(rows), 3), (1 - sure) / 2)
        p[np.arange(len(rows)), y[rows]] = sure
        return SimpleNamespace(held_out=rows, val_pred=p)

    lead = lambda m: Task(fit_id(m, 0, 0), "fit", DRIVER, model=m, trial=0, fold=0)  # noqa: E731
    standing.ended(lead("sharp"), proba(0.9))
    standing.ended(lead("soft"), proba(0.4))
    assert standing.behind() == {"soft"}
    assert "(log_loss's loss;" in standing.line("soft")


@pytest.mark.parametrize("standing", [True, False])
def test_the_time_a_kind_far_behind_on_the_lead_rows_leaves_goes_to_the_leaders_later_folds(
        tmp_path, monkeypatch, standing):
    """Three kinds of 8-s folds, one at a time, 60 s: after the leads (24 s), an even share leaves every
    bag 4 folds of 5, each later fold stopped at 4 s. Weighted by the kinds' standing on the lead rows, the
    two level kinds end all 5 and the one far behind none but its lead (its last fold, offered the 0.2 s
    left, is under half a fit: before, one that had the run's deadline to itself started however short)."""
    from pipeline.graph.first_trials import LeadStanding

    if not standing:
        monkeypatch.setattr(LeadStanding, "weights", lambda self: {})
    seconds = {"best": 8.0, "level": 8.0, "far": 8.0}
    plan, backend, budget, scheduler, outcome = simulate(
        tmp_path, seconds, limit_s=60.0, trials=3, folds=5, stops=True, rows=400, serial=True,
        right={"best": 0.95, "level": 0.948, "far": 0.7})
    folds = {m: len(outcome.results[bag_id(m, 0)].folds) for m in seconds}
    if standing:
        assert folds == {"best": 5, "level": 5, "far": 1}
        assert scheduler.first.standing.weights() == pytest.approx({"best": 1.0, "level": 1.0, "far": 0.05})
    else:
        assert folds == {"best": 4, "level": 4, "far": 4}
    assert max(end for _, _, end in backend.submitted) <= budget.deadline


def test_a_slow_models_lead_leaves_the_quick_models_the_time_for_their_bags():
    """A slow model's lead shares the first trials' time with the models begun, each counting what its
    trial ran and its folds to come: once the quick models' leads have ended, it does not run to the
    deadline, which left each of their bags one fold of five."""
    from pipeline.graph.first_trials import FirstTrials

    clock = Clock(0.0)
    budget = TimeBudget(30, clock=clock)
    bag = lambda m: [Task(fit_id(m, 0, f), "fit", DRIVER, model=m, trial=0, fold=f) for f in range(5)]  # noqa: E731
    tasks = bag("a") + bag("b") + bag("slow")
    first, gone = FirstTrials(tasks, partial=True), set()
    for lead, took in ((tasks[0], 1.0), (tasks[5], 2.0)):
        first.started(lead, first.share(lead, budget, 1, 0.0, gone.__contains__), now=clock.now)
        gone.add(lead.id)
        clock.now += took
        budget.record(lead, took)
        first.ended(lead, None, now=clock.now)
    # 27 s left; a asks 1 + 4 s, b 2 + 8 s: the slow lead is given the 30 s less those 15
    share = first.share(tasks[10], budget, 1, 0.0, gone.__contains__)
    assert share == pytest.approx(27.0 + 3.0 - 15.0)


@pytest.mark.parametrize("serial", [True, False])
def test_a_slow_lead_ends_by_its_share_and_the_quick_models_bags_end_whole(tmp_path, serial):
    """Two models of 1-s folds and one whose folds take 60 s, 5 folds each, 30 s: the slow model's lead stops
    at its share and the quick models' first trials end with every fold (before: one fold each, the slow
    lead running to the deadline)."""
    seconds = {"a": 1.0, "b": 1.0, "slow": 60.0}
    plan, backend, budget, scheduler, outcome = simulate(tmp_path, seconds, limit_s=30.0, trials=3, folds=5,
                                                         serial=serial, stops=True)
    assert bag_id("slow", 0) in outcome.results["collect"]
    for m in ("a", "b"):
        assert len(outcome.results[bag_id(m, 0)].folds) == 5, m
    assert backend.deadlines[fit_id("slow", 0, 0)] < budget.deadline
    assert max(end for _, _, end in backend.submitted) <= budget.deadline


def test_one_fit_per_model_gets_no_more_than_an_equal_share_of_the_time_left():
    """A holdout first trial is one fit: the first one of each model does not measure others of its bag."""
    from pipeline.graph.first_trials import FirstTrials

    budget = TimeBudget(90, clock=Clock(0.0))
    tasks = [Task(fit_id(m, 0, 0), "fit", DRIVER, model=m, trial=0, fold=0) for m in "abc"]
    assert FirstTrials(tasks).share(tasks[0], budget, 1, 0.0, set().__contains__) == pytest.approx(30.0)


def _auto_source(models, trials=40):
    from pipeline.config import HpoConf, SearchDimConf
    from pipeline.hpo import TrialSource

    hpo = HpoConf(num_trials=trials, seed=0, pruning=True, _target_="pipeline.searchers.AutoSearch")
    return TrialSource(hpo, {m: {"x": SearchDimConf("float", 0.0, 1.0)} for m in models}, {}, "maximize")


@pytest.mark.parametrize("serial", [True, False])
def test_a_dear_kind_whose_first_fold_loses_and_adds_nothing_to_a_blend_is_withdrawn(tmp_path, serial):
    """hpo=auto, 30 s: two quick models and one whose 5-s folds predict nothing (AUC 0.5 against 0.9): its
    first trial stops after its first fold, its search with it, and the quick models search in its time."""
    seconds = {"a": 1.0, "b": 1.0, "slow": 5.0}
    source = _auto_source(seconds)
    plan, backend, budget, scheduler, outcome = simulate(tmp_path, seconds, limit_s=30.0, trials=40, folds=5,
                                                         right={"a": 0.9, "b": 0.85}, rows=400, serial=serial,
                                                         source=source, stops=True)
    slow = [tid for tid, _, _ in backend.submitted if "/slow/" in tid]
    assert slow == [fit_id("slow", 0, 0)]
    assert scheduler.cut.cut[bag_id("slow", 0)] == "withdrawn"
    assert "slow" not in scheduler.first.yielded  # withdrawn, not said to yield
    assert not any("slow" in b for b in outcome.results["collect"])
    assert all(sum(f"/{m}/" in b for b in outcome.results["collect"]) >= 2 for m in ("a", "b"))
    why = scheduler.withdrawals.withdrawn["slow"]
    assert (why.leader, why.score, why.folds_left) == ("a", 0.5, 4) and why.seconds_left == 20.0
    summary = summarize(budget, scheduler.cut, outcome.results, outcome.timeline, scheduler.cancelled,
                        scheduler.abandoned, scheduler.first.held_to_share, [why.line()])
    assert summary.left_out == [] and summary.trials_dropped == 0
    line = summary.line()
    assert "slow withdrawn after its first fold: roc_auc 0.5 on the fold's held-out rows against 0.9" in line
    assert ("a blend with the other models gave it no weight, and its 4 other fold(s) would take about "
            "20.0 s") in line


@pytest.mark.parametrize("case", ["cheap", "better", "no search"])
def test_a_kind_that_scores_or_costs_little_or_a_run_without_hpo_auto_keeps_its_first_trial_whole(tmp_path,
                                                                                                   case):
    seconds = {"a": 1.0, "b": 1.0, "slow": 0.5 if case == "cheap" else 5.0}
    right = {"a": 0.9, "b": 0.85, **({"slow": 0.95} if case == "better" else {})}
    source = None if case == "no search" else _auto_source(seconds)
    plan, backend, budget, scheduler, outcome = simulate(tmp_path, seconds, limit_s=30.0, trials=40, folds=5,
                                                         right=right, rows=400, serial=True, source=source,
                                                         stops=True)
    assert "slow" not in scheduler.withdrawals.withdrawn and "slow" not in scheduler.first.yielded
    if case == "better":  # the quick kinds, far behind it on the lead rows, yield their later folds to it
        assert set(scheduler.first.yielded) == {"a", "b"} and len(outcome.results[bag_id("slow", 0)].folds) == 5
    else:
        assert not scheduler.withdrawals.withdrawn
    assert bag_id("slow", 0) in outcome.results["collect"]
    assert len(outcome.results[bag_id("slow", 0)].folds) >= 3


@pytest.mark.parametrize("yielding", [True, False])
def test_the_dear_later_folds_of_a_kind_behind_on_the_lead_rows_yield_to_the_leaders_trials(
        tmp_path, monkeypatch, caplog, yielding):
    """hpo=auto, 30 s, fits one at a time: two quick models and one whose 3-s folds score far below theirs on
    the lead rows but which the blend keeps (not withdrawn). Its four later folds would take 12 s of the
    ~27 s left: they yield, and the quick models' searched trials run in that time, the slow bag ending with
    the folds its share allowed. Without yielding every first trial ends whole before any model's second."""
    import logging

    from pipeline.graph import first_trials, scheduler as scheduler_module

    monkeypatch.setattr(scheduler_module.Withdrawals, "judge", lambda *a, **k: None)  # the blend keeps it
    if not yielding:
        monkeypatch.setattr(first_trials.FirstTrials, "yielding", lambda self, budget, dear, gone=None: {})
    seconds = {"a": 1.0, "b": 1.0, "slow": 3.0}
    caplog.set_level(logging.INFO, logger="pipeline.graph.first_trials")
    plan, backend, budget, scheduler, outcome = simulate(
        tmp_path, seconds, limit_s=30.0, trials=40, folds=5, right={"a": 0.9, "b": 0.88, "slow": 0.6}, rows=400,
        serial=True, source=_auto_source(seconds), stops=True)
    order = [tid for tid, _, _ in backend.submitted]
    slow_folds = [tid for tid in order if tid.startswith("fit/slow/t0/")]
    first_searched = min((i for i, tid in enumerate(order) if "/t0/" not in tid), default=len(order))
    if yielding:
        assert scheduler.first.standing.behind() == {"slow"}
        assert 1 <= len(slow_folds) < 5 and all(order.index(f) > first_searched for f in slow_folds[1:])
        assert sum("/t0/" not in tid for tid in order) >= 10  # the quick models searched in its time
        assert not any(tid.startswith("fit/slow/t1/") for tid in order)  # its own search waits its turn too
        assert "slow's first trial yields to the other models' trials" in caplog.text
    else:
        assert len(slow_folds) == 5 and order.index(slow_folds[-1]) < first_searched
        assert "yields" not in caplog.text
    assert max(end for _, _, end in backend.submitted) <= budget.deadline


def test_a_kind_behind_on_the_lead_rows_yields_only_where_its_folds_left_are_dear():
    """`FirstTrials.yielding`: a kind far behind on the lead rows whose four later folds would take 32 s of
    the 60 left yields (its weight 0.05); at 1 s a fold (4 s, under a fifth of the time left) it does not, nor
    does a kind level with the leader, nor any where bags stay whole (no `partial`)."""
    from pipeline.graph.first_trials import FirstTrials, LeadStanding
    from pipeline.metrics import resolve

    y = np.arange(200, dtype=float)
    rows = np.arange(0, 200, 5)
    standing = LeadStanding(resolve("rmse", "regression"), y)
    result = lambda err: SimpleNamespace(held_out=rows, val_pred=y[rows] + err)  # noqa: E731
    bag = lambda m: [Task(fit_id(m, 0, f), "fit", DRIVER, model=m, trial=0, fold=f) for f in range(5)]  # noqa: E731
    tasks = bag("a") + bag("b") + bag("c")
    first = FirstTrials(tasks, partial=True, standing=standing)
    whole = FirstTrials(tasks, standing=standing)
    budget = TimeBudget(60, clock=Clock(0.0))
    for lead, err in ((tasks[0], 1.0), (tasks[5], 1.02), (tasks[10], 2.0)):
        first.started(lead, None, now=0.0)
        first.ended(lead, result(err), now=0.0)
        budget.record(lead, 8.0)
    assert first.yielding(budget, 0.2) == pytest.approx({"c": 0.05}) and whole.yielding(budget, 0.2) == {}
    assert "c's first trial yields" in first.yielded["c"] and "32.0 s of the 60.0 s left" in first.yielded["c"]
    quick = TimeBudget(60, clock=Clock(0.0))
    for lead in (tasks[0], tasks[5], tasks[10]):
        quick.record(lead, 1.0)
    assert first.yielding(quick, 0.2) == {}
    assert first.yielding(budget, 0.2, gone=lambda tid: "/c/" in tid) == {}  # withdrawn: its folds are cut


def test_a_refit_is_priced_at_the_length_its_trials_folds_stopped_at():
    """A fold fit runs its patience past its best round (epoch, step of trees) and scores its held-out rows;
    the refit fits the best length alone. The tail prices it at that share of its trial's fits
    (`refit_share`): priced at whole fold fits, Workinghours' six refits at 30 s were priced at 1.9 s and took
    0.85 s."""
    class Fitted:
        def __init__(self, share):
            self.share = share

        def refit_share(self):
            return self.share

    class Broken:
        def refit_share(self):
            raise ValueError("no history")

    budget = TimeBudget(100, clock=Clock(0.0))
    results = {"a": SimpleNamespace(model=Fitted(0.25)), "b": None, "c": SimpleNamespace(model=Broken()),
               "d": SimpleNamespace(model=Fitted(0))}
    for model, result in results.items():
        for fold in range(2):
            task = Task(fit_id(model, 0, fold), "fit", DRIVER, model=model, trial=0, fold=fold, level=1)
            budget.record(task, 4.0, result=result)
        budget.scored(SimpleNamespace(level=1, pruned=False, model=model, trial=0, score=0.5), None)
    assert budget.refit_estimate("a") == pytest.approx(1.0)  # a quarter of its 4-s fold fits
    assert budget.refit_estimate("b") == budget.refit_estimate("c") == pytest.approx(4.0)  # whole fits
    assert budget.refit_estimate("d") == pytest.approx(4.0 * 0.05)  # at least LEAST_REFIT_SHARE of one
    refit = Task("fit/a/l1/refit", "fit", DRIVER, model="a", level=1, fold_set=())
    assert budget.estimate(refit) == pytest.approx(1.0)  # whether it can end in the time kept for refits
    assert budget.estimate(Task(fit_id("a", 1, 0), "fit", DRIVER, model="a", trial=1, fold=0, level=1)) == 4.0
