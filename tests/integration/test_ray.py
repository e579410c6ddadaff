"""The Ray executor: the same plan as Ray tasks, the same results, parallel folds, typed errors, retries."""

import json
import os
from pathlib import Path

import pandas as pd
import pytest

from pipeline.store import read_state
from tests.conftest import FAULT_ENV, run_cli, small, user_config

pytestmark = pytest.mark.slow

RAY_ENV = {"RAY_AUTH_MODE": "disabled"}
BAG5 = ["model=lightgbm", "parallelism=bag5", "parallelism.fit.num_cpus=1", "data.max_rows=3000", "tracking=none"]


def run_dir(workdir: Path) -> Path:
    (found,) = sorted((workdir / "outputs" / "runs").glob("*/*"))
    return found


@pytest.fixture(scope="module")
def bag5_runs(tmp_path_factory):
    """The same 5-fold LightGBM job under executor=ray and executor=local, run side by side (most of a
    short Ray run is start-up waiting): {executor: run directory}."""
    from concurrent.futures import ThreadPoolExecutor

    workdirs = {ex: tmp_path_factory.mktemp(f"bag5-{ex}") for ex in ("ray", "local")}
    with ThreadPoolExecutor(2) as pool:
        jobs = [pool.submit(run_cli, [f"executor={ex}", *BAG5], workdirs[ex], env=RAY_ENV, timeout=240, check=True)
                for ex in workdirs]
        for job in jobs:
            job.result()
    return {ex: run_dir(workdir) for ex, workdir in workdirs.items()}


def test_ray_gives_the_local_leaderboard(bag5_runs):
    ray_board = pd.read_csv(bag5_runs["ray"] / "leaderboard.csv")
    local_board = pd.read_csv(bag5_runs["local"] / "leaderboard.csv")
    assert list(ray_board["model"]) == list(local_board["model"]) == ["lightgbm"]
    scores = [c for c in local_board.columns if c.startswith(("val_", "test_"))]
    assert "val_roc_auc" in scores and "test_roc_auc" in scores
    for column in scores:
        assert ray_board[column].to_numpy() == pytest.approx(local_board[column].to_numpy(), abs=1e-9), column


def test_ray_folds_run_in_parallel_worker_processes(bag5_runs):
    timeline = json.loads((bag5_runs["ray"] / "timeline.json").read_text())
    assert len(timeline) == 5 and not any(e["cached"] for e in timeline)
    assert len({e["pid"] for e in timeline}) >= 2
    spans = sorted((e["start"], e["end"]) for e in timeline)
    assert any(later[0] < earlier[1] for earlier, later in zip(spans, spans[1:]))  # two fits at once


STACKED = ["model=lightgbm", "stack_levels=1", "parallelism.num_folds=3", "parallelism.fit.num_cpus=1",
           "data.max_rows=1500", "model.lightgbm.params.num_iterations=20", "tracking=none"]


def test_a_stacked_run_on_ray_gives_the_local_leaderboard(tmp_path):
    """Stacked fits travel to Ray's workers with their features: the same scores as the local run."""
    from concurrent.futures import ThreadPoolExecutor

    workdirs = {ex: tmp_path / ex for ex in ("ray", "local")}
    with ThreadPoolExecutor(2) as pool:
        jobs = [pool.submit(run_cli, [f"executor={ex}", *STACKED], workdirs[ex].resolve(), env=RAY_ENV, timeout=240,
                            check=True) for ex in workdirs if workdirs[ex].mkdir() is None]
        for job in jobs:
            job.result()
    boards = {ex: pd.read_csv(run_dir(w) / "leaderboard.csv").set_index("model") for ex, w in workdirs.items()}
    assert dict(boards["ray"]["level"]) == {"lightgbm": 1, "lightgbm_l2": 2}
    for column in ("val_roc_auc", "test_roc_auc"):
        assert boards["ray"][column].to_numpy() == pytest.approx(boards["local"][column].to_numpy(), abs=1e-9)
    timeline = json.loads((run_dir(workdirs["ray"]) / "timeline.json").read_text())
    assert sum(e["level"] == 2 for e in timeline) == 3 and all(e["node"] for e in timeline)  # in Ray's workers


def test_a_failing_task_is_retried_then_fails_the_run_naming_it(cli, tmp_path):
    searchpath = user_config(tmp_path, "model", "boom", "defaults: [lightgbm]\nboom:\n  _target_: tests.fault_models.FailingModel\n")
    proc = cli("executor=ray", "model=boom", searchpath, "allowed_targets=[tests.]", "executor.max_retries=1",
               "tracking=none", *small(("lightgbm",)), env={**FAULT_ENV, **RAY_ENV}, timeout=180)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert "task fit/boom/t0/f0 failed after 2 attempt(s): RuntimeError: injected failure" in proc.stderr
    assert "retrying" in proc.stdout + proc.stderr
    assert read_state(run_dir(tmp_path))["status"] == "FAILED"


# --------------------------------------------------------------------------- RayBackend in this process


def plan_for(cpus, gpus, fit_cpus, fit_gpus, num_folds=1, model="lightgbm", num_trials=1):
    from pipeline.config import HardwareConf
    from pipeline.hardware import Machine, resolve
    from pipeline.graph.plan import build_plan
    from pipeline.resources import ModelNeeds, Request
    from pipeline.planning.allocation import allocate

    machine = Machine(cpus, tuple(str(i) for i in range(gpus)))
    hw = resolve(HardwareConf(name="box", num_cpus=cpus, num_gpus=gpus), machine, dry_run=False)
    needs = ModelNeeds(model, bool(fit_gpus), bool(fit_gpus), 1, "params.device=cuda")
    a = allocate(hw.total, Request.parse(None, None, "parallelism.bag"),
                 Request.parse(fit_cpus, fit_gpus, "parallelism.fit"), needs, num_folds=num_folds,
                 num_trials=num_trials, gpu_capacities=list(hw.capacities().values()))
    return build_plan(hw, [a])


def test_a_gpu_fit_on_a_gpu_less_cluster_is_a_hardware_error_not_a_hang(ray_instance, adult):
    from pipeline.errors import HardwareError
    from pipeline.executors.ray import RayBackend

    backend = RayBackend()
    with pytest.raises(HardwareError) as err:
        backend.prepare(plan_for(2, 1, 1, 1, model="xgboost"), adult)
    # refused before the data went to the object store, and before any task could sit pending
    assert backend.data_ref is None and backend._remote is None and backend.running == {}
    message = str(err.value)
    assert "task fit/xgboost/t0/f0 asks for 1 CPU / 1 GPU" in message
    assert "2 CPU / 0 GPU" in message
    assert ray_instance.is_initialized()  # an instance the backend did not start is left running


def test_the_ray_tasks_of_a_lean_run_import_the_libraries_lean(ray_instance, adult, tmp_path):
    """A lean run's preload list reaches Ray's workers as `lean`: each task installs pipeline.lean_imports
    before its fit imports LightGBM (the fitted model notes it in the worker that fitted it)."""
    from pipeline.config import HpoConf
    from pipeline.executors.ray import RayBackend
    from pipeline.graph.scheduler import Scheduler
    from pipeline.hpo import TrialSource
    from pipeline.lean_imports import PRELOAD
    from pipeline.metrics import METRICS
    from pipeline.store import ResultStore
    from tests.user_components import LeanProbeLightGBM

    model = LeanProbeLightGBM({"num_iterations": 5, "verbosity": -1}, "probe")
    plan = plan_for(2, 0, 1, None, num_folds=2, model="probe")
    with RayBackend(preload=(PRELOAD, "lightgbm")) as backend:
        assert backend.lean
        trials = TrialSource(HpoConf(), {}, {}, "maximize")
        outcome = Scheduler(plan, backend, ResultStore(tmp_path / "run"), trials, {"probe": model}, adult,
                            METRICS["roc_auc"], seed=0, max_retries=0).run()
    folds = outcome.trials[("probe", 0)].folds
    assert len(folds) == 2 and all(f.model.lean_installed_ for f in folds)
    assert not RayBackend(preload=("lightgbm",)).lean


def _recording_submits(backend) -> list:
    """The object refs of the fits `backend` submits, in order."""
    submitted, submit = [], backend.submit

    def recording(request):
        ref = submit(request)
        submitted.append(ref)
        return ref

    backend.submit = recording
    return submitted


def _assert_cancelled(ray, refs) -> None:
    """Each task was cancelled: a fit left running would instead return its result once its sleep ends."""
    for ref in refs:
        with pytest.raises((ray.exceptions.TaskCancelledError, ray.exceptions.WorkerCrashedError)):
            ray.get(ref)


def test_sigterm_stops_a_ray_run_at_once_and_cancels_its_fits(ray_instance, adult, tmp_path):
    import signal
    import threading

    from pipeline.errors import Interrupted
    from pipeline.executors.ray import RayBackend
    from pipeline.graph.scheduler import Scheduler
    from pipeline.config import HpoConf
    from pipeline.hpo import TrialSource
    from pipeline.metrics import METRICS
    from pipeline.signals import StopSignals
    from pipeline.store import ResultStore
    from tests.fault_models import SleepModel

    records = tmp_path / "fits"  # a fit that finishes its 60 s sleep writes a record here
    plan = plan_for(2, 0, 1, None, num_folds=2, model="sleep")
    backend = RayBackend()
    submitted = _recording_submits(backend)
    timer = threading.Timer(1, os.kill, (os.getpid(), signal.SIGTERM))
    recording_submit = backend.submit

    def submit_then_signal(request):  # SIGTERM a second after both fits are submitted
        ref = recording_submit(request)
        if len(submitted) == 2:
            timer.start()
        return ref

    backend.submit = submit_then_signal
    scheduler = Scheduler(plan, backend, ResultStore(tmp_path / "run"), TrialSource(HpoConf(), {}, {}, "maximize"),
                          {"sleep": SleepModel({"seconds": 60, "record_dir": str(records)}, "sleep")}, adult,
                          METRICS["roc_auc"], seed=0)
    try:
        with StopSignals(), pytest.raises(Interrupted), backend:
            scheduler.run()
    finally:
        timer.cancel()
    assert len(submitted) == 2
    assert not records.exists()  # the run stopped before either fit ended: it did not wait for them
    assert backend.running == {}
    _assert_cancelled(ray_instance, submitted)
    assert ray_instance.is_initialized()


def test_the_look_at_a_cluster_describes_the_connected_cluster(ray_instance):
    from pipeline.executors.ray import look_at_cluster

    machine = look_at_cluster("auto", {}).machine
    assert (machine.num_cpus, machine.num_gpus) == (2, 0)


def test_without_ray_the_executor_is_a_config_error(monkeypatch, adult):
    import sys

    from pipeline.errors import ConfigError
    from pipeline.executors.ray import RayBackend

    monkeypatch.setitem(sys.modules, "ray", None)  # import ray now raises ImportError
    with pytest.raises(ConfigError, match=r"executor=ray needs Ray: pip install '\.\[ray\]'"):
        RayBackend().prepare(plan_for(2, 0, 1, None), adult)


def test_the_ray_executor_runs_the_same_graph_with_a_node_kind_registered_outside_the_engine(ray_instance, adult,
                                                                                              tmp_path):
    from pipeline.executors.ray import RayBackend
    from pipeline.graph.scheduler import Scheduler
    from pipeline.config import HpoConf
    from pipeline.hpo import TrialSource
    from pipeline.metrics import METRICS
    from pipeline.graph.plan import DRIVER, Task
    from pipeline.store import ResultStore
    from tests import graph_nodes
    from tests.fault_models import SleepModel

    plan = plan_for(2, 0, 1, None, num_folds=2, model="sleep")
    plan = plan.with_task(Task("audit", "audit", DRIVER, ("bag/sleep/t0",)))
    graph_nodes.RAN.clear()
    with RayBackend() as backend:
        outcome = Scheduler(plan, backend, ResultStore(tmp_path / "run"), TrialSource(HpoConf(), {}, {}, "maximize"),
                            {"sleep": SleepModel({"seconds": 0}, "sleep")}, adult, METRICS["roc_auc"], seed=0).run()
    (ran,) = graph_nodes.RAN
    assert ran["done"] == ["bag/sleep/t0", "fit/sleep/t0/f0", "fit/sleep/t0/f1"]
    assert set(outcome.results) == {t.id for t in plan.tasks}
    assert {e["pid"] for e in outcome.timeline} != {os.getpid()}  # the fits ran in Ray's workers


def test_ray_runs_the_trials_a_plan_counts_but_does_not_list_under_a_whole_run_deadline(ray_instance, adult,
                                                                                          tmp_path):
    """The plan lists the first rounds of trials; the scheduler instantiates the rest, and each Ray task
    carries the whole-run budget's deadline (the limit from the run's start, less the tail's reserve)."""
    import time

    from pipeline.config import HpoConf
    from pipeline.executors.ray import RayBackend
    from pipeline.graph.plan import bag_id
    from pipeline.graph.scheduler import Scheduler
    from pipeline.graph.time_budget import TimeBudget
    from pipeline.hpo import TrialSource
    from pipeline.metrics import METRICS
    from pipeline.store import ResultStore
    from tests.fault_models import SleepModel

    plan = plan_for(2, 0, 1, None, num_folds=2, model="sleep", num_trials=12)
    assert plan.listed["sleep"] < 12 and plan.num_fits == 24
    budget = TimeBudget(600, start=time.time(), whole_run=True, tail=lambda: 5.0)
    with RayBackend() as backend:
        scheduler = Scheduler(plan, backend, ResultStore(tmp_path / "run"), TrialSource(HpoConf(), {}, {}, "maximize"),
                              {"sleep": SleepModel({"seconds": 0}, "sleep")}, adult, METRICS["roc_auc"], seed=0,
                              budget=budget)
        outcome = scheduler.run()
    assert {bag_id("sleep", t) for t in range(12)} <= set(outcome.results)
    assert set(outcome.results) == {t.id for t in plan.expanded().tasks}
    assert scheduler.ctx.deadline == pytest.approx(budget.start + 600 - 5.0 - budget.grace)


def test_on_ray_a_losing_trial_does_not_start_its_later_folds(ray_instance, adult, tmp_path):
    """Successive halving over folds with Ray's parallel folds: a trial ranked out after its first folds
    starts no more of them (those running end on their own); the model's own params fit every fold."""
    from collections import Counter

    from pipeline.config import HpoConf, SearchDimConf
    from pipeline.executors.ray import RayBackend
    from pipeline.graph.scheduler import Scheduler
    from pipeline.hpo import TrialSource
    from pipeline.metrics import METRICS
    from pipeline.models import LightGBMModel
    from pipeline.store import ResultStore

    plan = plan_for(2, 0, 1, None, num_folds=5, num_trials=8)
    spec = HpoConf(num_trials=8, seed=0, pruning=True, start_from_defaults=True,
                   _target_="pipeline.searchers.RandomSearch")
    space = {"learning_rate": SearchDimConf("float", 0.0005, 0.3, log=True)}
    trials = TrialSource(spec, {"lightgbm": space}, {"lightgbm": {}}, "maximize")
    with RayBackend() as backend:
        outcome = Scheduler(plan, backend, ResultStore(tmp_path), trials,
                            {"lightgbm": LightGBMModel({"num_iterations": 30}, "lightgbm")}, adult,
                            METRICS["roc_auc"], seed=0, pruning=True).run()
    fits = Counter(e["trial"] for e in outcome.timeline)
    assert trials.pruned and fits[0] == 5, fits
    assert all(fits[t] < 5 for _, t in trials.pruned) and sum(fits.values()) < 8 * 5
