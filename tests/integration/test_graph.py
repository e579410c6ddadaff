"""The plan's graph is what runs: every task of the plan, in dependency order, whatever its kind."""

from __future__ import annotations

import json

import pytest


def small_plan(num_folds=2, num_trials=2, evaluate=False, refit=False):
    from pipeline.hardware import Machine, resolve
    from pipeline.graph.plan import build_plan
    from pipeline.resources import ModelNeeds, Request
    from pipeline.planning.allocation import allocate

    hw = resolve(None, Machine(2), dry_run=False)
    a = allocate(hw.total, Request.parse(None, None, "b"), Request.parse(1, None, "f"),
                 ModelNeeds("sleep", False, False, 1), num_folds=num_folds, num_trials=num_trials)
    return build_plan(hw, [a], evaluate=evaluate, refit=refit)


def run_plan(plan, data, tmp_path, hooks=None):
    from pipeline.executors.local import InProcessBackend
    from pipeline.graph.scheduler import Scheduler
    from pipeline.config import HpoConf
    from pipeline.hpo import TrialSource
    from pipeline.metrics import METRICS
    from pipeline.store import ResultStore
    from tests.fault_models import SleepModel

    with InProcessBackend() as backend:
        return Scheduler(plan, backend, ResultStore(tmp_path / "run"), TrialSource(HpoConf(), {}, {}, "maximize"),
                         {"sleep": SleepModel({"seconds": 0}, "sleep")}, data, METRICS["roc_auc"], seed=0,
                         hooks=hooks).run()


def test_a_node_kind_registered_outside_the_engine_runs_in_the_graph_in_dependency_order(adult, tmp_path):
    from tests.conftest import printed_plan
    from pipeline.graph.plan import DRIVER, EVALUATE, Task
    from tests import graph_nodes

    plan = small_plan(evaluate=True)
    bags = tuple(t.id for t in plan.tasks if t.kind == "bag")
    plan = plan.with_task(Task("audit", "audit", DRIVER, bags), before=EVALUATE)
    graph_nodes.RAN.clear()
    (tmp_path / "run").mkdir()
    outcome = run_plan(plan, adult, tmp_path)

    (ran,) = graph_nodes.RAN
    fits = [t.id for t in plan.fit_tasks]
    assert set(fits) | set(bags) <= set(ran["done"])  # after everything it depends on
    assert EVALUATE not in ran["done"]  # before the node that depends on it
    assert ran["scores"] == {b: outcome.trials[("sleep", int(b[-1]))].score for b in bags}
    assert set(outcome.results) == {t.id for t in plan.tasks}  # every task of the plan ran, none else
    assert [r["model"] for r in outcome.results[EVALUATE].rows] == ["sleep"]

    written = json.loads(plan.write(tmp_path / "plan.json").read_text())
    tasks = {t["id"]: t for t in written["tasks"]}
    assert tasks["audit"]["kind"] == "audit" and tasks["audit"]["depends_on"] == list(bags)
    assert tasks[EVALUATE]["depends_on"] == ["ensemble", "audit"]
    printed = printed_plan(plan)
    assert "fit ×4 → bag ×2 → ensemble → audit → evaluate" in printed
    assert "audit: 1 check(s) of the bagged trials" in printed


def test_a_plan_without_evaluation_nodes_runs_the_fits_and_bags_only(adult, tmp_path):
    outcome = run_plan(small_plan(num_folds=2, num_trials=1), adult, tmp_path)
    assert sorted(outcome.results) == ["bag/sleep/t0", "fit/sleep/t0/f0", "fit/sleep/t0/f1"]
    assert outcome.results["bag/sleep/t0"] is outcome.trials[("sleep", 0)]


def test_a_task_listed_before_its_dependency_is_refused():
    from pipeline.graph.plan import DRIVER, Plan, Task

    plan = small_plan()
    with pytest.raises(ValueError, match="'late' is listed twice or before its dependencies \\['later'\\]"):
        Plan(plan.hardware, plan.allocations, (*plan.tasks, Task("late", "audit", DRIVER, ("later",)),
                                               Task("later", "audit", DRIVER)))


def test_an_unregistered_node_kind_is_named_with_the_known_ones():
    from pipeline.graph.nodes import node_kind

    with pytest.raises(KeyError, match="no node kind 'calibrate' is registered \\(known: .*bag.*evaluate.*fit"):
        node_kind("calibrate")


def test_refit_fits_are_sent_to_the_backend_and_reused_from_the_store_like_any_fit(adult, tmp_path):
    from pipeline.config import HpoConf
    from pipeline.executors.local import InProcessBackend
    from pipeline.graph.scheduler import Scheduler
    from pipeline.hpo import TrialSource
    from pipeline.metrics import METRICS
    from pipeline.graph.plan import EVALUATE
    from pipeline.store import ResultStore
    from tests.fault_models import SleepModel

    class Recording(InProcessBackend):
        submitted: list = []

        def submit(self, request):
            self.submitted.append(request.task_id)
            return super().submit(request)

    plan = small_plan(num_folds=2, num_trials=1, evaluate=True, refit=True)
    for attempt in range(2):
        Recording.submitted = []
        with Recording() as backend:
            outcome = Scheduler(plan, backend, ResultStore(tmp_path / "run"),
                                TrialSource(HpoConf(), {}, {}, "maximize"), {"sleep": SleepModel({"seconds": 0}, "sleep")},
                                adult, METRICS["roc_auc"], seed=0).run()
        if attempt == 0:
            assert Recording.submitted == ["fit/sleep/t0/f0", "fit/sleep/t0/f1", "fit/sleep/l1/refit"]
        else:
            assert Recording.submitted == []  # every fit, the refit's too, taken from the store by its key
        refit = outcome.results["refit"].predictors["sleep_refit"]
        assert refit.models == [outcome.results["fit/sleep/l1/refit"].model]  # the backend's model, not a driver's fit
        assert [r["model"] for r in outcome.results[EVALUATE].rows] == ["sleep", "sleep_refit"]


def test_nodes_compute_and_the_roots_hooks_write_and_log(adult, tmp_path):
    """Without hooks the graph writes nothing beside its result store; the root's OutputHooks write the
    leaderboard and predictors and log the board's metrics, from the nodes' results."""
    from pipeline.graph.plan import EVALUATE
    from pipeline.metrics import METRICS
    from pipeline.outputs import HookList, OutputHooks, RunOutputs
    from pipeline.tracking import NullTracker

    class Recorder(NullTracker):
        def __init__(self):
            super().__init__()
            self.metrics = {}

        def log_metrics(self, values):
            self.metrics.update(values)

    plan = small_plan(evaluate=True)
    outcome = run_plan(plan, adult, tmp_path)
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["tasks"]  # the store only
    assert outcome.results[EVALUATE].top["model"] == "sleep"

    tracker, out_dir = Recorder(), tmp_path / "hooked"
    out_dir.mkdir()
    hooks = HookList(OutputHooks(RunOutputs(out_dir, tracker), plan, adult, METRICS["roc_auc"], lambda: outcome))
    outcome = run_plan(plan, adult, tmp_path, hooks)
    assert (out_dir / "leaderboard.csv").exists() and (out_dir / "predictors" / "sleep.pkl").exists()
    assert tracker.metrics["sleep/val_roc_auc"] == outcome.results[EVALUATE].top["val_roc_auc"]
    assert "val_roc_auc" in tracker.metrics  # the main metric at the top level


def test_a_fits_result_is_written_once_the_next_fit_has_started(adult, tmp_path, monkeypatch):
    """The driver writes each result to the store after starting the next fits, so that a worker does not
    wait on its pickling and disk: when each fit starts, the one before it is not written yet; all are at
    the end."""
    from pipeline.executors.local import InProcessBackend

    plan = small_plan()
    (tmp_path / "run").mkdir()
    written_at_start = []
    submit = InProcessBackend.submit

    def counting(self, request):
        written_at_start.append(len(list((tmp_path / "run" / "tasks").glob("*.pkl"))))
        return submit(self, request)

    monkeypatch.setattr(InProcessBackend, "submit", counting)
    run_plan(plan, adult, tmp_path)
    assert written_at_start == [0, 0, 1, 2]  # at once, each start would find every earlier fit written
    assert len(list((tmp_path / "run" / "tasks").glob("*.pkl"))) == len(plan.fit_tasks) == 4



def test_a_result_is_written_as_its_worker_pickled_it(adult, tmp_path, monkeypatch):
    """A worker's answer arrives pickled: the store writes those bytes rather than pickling the result again in
    the driver (a fitted booster's model_to_string cost about 11 ms a fit, on CPUs the fits share). Here the
    'worker' pickles with protocol 2, which the driver never uses: every file holds those bytes."""
    import pickle

    from pipeline.executors.local import InProcessBackend

    sent = {}
    wait = InProcessBackend.wait

    def answering(self, handles, timeout=None):
        out = wait(self, handles, timeout)
        sent.update((handle, pickle.dumps(result, protocol=2)) for handle, result in out)
        return out

    monkeypatch.setattr(InProcessBackend, "wait", answering)
    monkeypatch.setattr(InProcessBackend, "pickled", lambda self, handle: sent.pop(handle, None))
    plan = small_plan()
    (tmp_path / "run").mkdir()
    run_plan(plan, adult, tmp_path)
    files = sorted((tmp_path / "run" / "tasks").glob("*.pkl"))
    assert len(files) == 4 and not sent
    assert all(f.read_bytes()[:2] == b"\x80\x02" for f in files)  # protocol 2's header: the worker's bytes
    assert {pickle.loads(f.read_bytes()).task_id for f in files} == {t.id for t in plan.fit_tasks}
