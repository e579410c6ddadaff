"""The contract of an executor's backend (`pipeline.graph.backend.Backend`), as the scheduler uses it.

Subclass `BackendContract` in a test module and define the fixture `make_backend`: a function of
(plan, run_dir) that returns a fresh backend. Set the class attributes to what the backend is:

- `fits_in_driver`: fits run in the test's own process (they cannot be stopped or killed there);
- `sees_only_its_devices`: a fit's process sees exactly its devices (CUDA_VISIBLE_DEVICES), numbered from 0;
  else the plan's device ids are the ordinals the fit uses;
- `runs_declared_gpus`: a plan on declared GPUs runs here without the devices (the engine's own
  backends do; a cluster's scheduler, Ray's, refuses a GPU it does not have);
- `owns_its_workers`: leaving the `with` block ends the processes that ran the fits.

A backend whose fits run in the driver must prove the engine never hands it a time limit (define
`never_given_a_time_limit`). Every check runs a real plan through `pipeline.graph.scheduler.Scheduler`
on a small synthetic table, with the models of `pipeline.testing.models`.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import psutil
import pytest

from pipeline.testing.models import DieOnceModel, FailingModel, PriorModel, records

DATA_ROWS = 400


@pytest.fixture(scope="session")
def contract_data(tmp_path_factory):
    """A small synthetic binary table, loaded and split once."""
    from pipeline.components import DataConf
    from pipeline.data import load

    conf = DataConf(name="synthetic", _target_="pipeline.data_sources.SyntheticSource", rows=DATA_ROWS,
                    features=5)
    return load(conf, tmp_path_factory.mktemp("contract-data"))


def plan_for(model: str, num_folds: int = 2, cpus: int = 2, gpus: int = 0, fit_gpus=None):
    """A plan of one trial of `model` in `num_folds` folds, one CPU per fit (and `fit_gpus` of the
    `gpus` declared devices)."""
    from pipeline.config import HardwareConf
    from pipeline.graph.plan import build_plan
    from pipeline.hardware import Machine, resolve
    from pipeline.resources import ModelNeeds, Request

    from pipeline.planning.allocation import allocate

    machine = Machine(cpus, tuple(str(i) for i in range(gpus)))
    hw = resolve(HardwareConf(name="box", num_cpus=cpus, num_gpus=gpus), machine, dry_run=False)
    needs = ModelNeeds(model, bool(fit_gpus), False, 1, "params.device=cuda")
    allocation = allocate(hw.total, Request.parse(None, None, "parallelism.bag"),
                          Request.parse(1, fit_gpus, "parallelism.fit"), needs, num_folds=num_folds,
                          num_trials=1, gpu_capacities=list(hw.capacities().values()))
    return build_plan(hw, [allocation])


def scheduler(backend, plan, model, data, run_dir: Path, **options):
    """The scheduler of `plan` with `model` (its name is the plan's model) on `backend`."""
    from pipeline.config import HpoConf
    from pipeline.graph.scheduler import Scheduler
    from pipeline.hpo import TrialSource
    from pipeline.metrics import METRICS
    from pipeline.store import ResultStore

    return Scheduler(plan, backend, ResultStore(run_dir), TrialSource(HpoConf(), {}, {}, "maximize"),
                     {model.name: model}, data, METRICS["roc_auc"], seed=0, **options)


def run_plan(backend, plan, model, data, run_dir: Path, **options):
    """Run `plan` on `backend`, inside its `with` block."""
    with backend:
        return scheduler(backend, plan, model, data, run_dir, **options).run()


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _gone(pids, wanted=None, timeout: float = 15.0) -> bool:
    """Whether `wanted` (all by default) of the processes `pids` end (or are zombies) within `timeout` s."""
    wanted = len(pids) if wanted is None else wanted
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if sum(not _alive(p) for p in pids) >= wanted:
            return True
        time.sleep(0.1)
    return False


class BackendContract:
    fits_in_driver = False
    sees_only_its_devices = True
    runs_declared_gpus = True
    owns_its_workers = True

    @pytest.fixture
    def make_backend(self):
        raise NotImplementedError("a contract's subclass defines make_backend(plan, run_dir) -> Backend")

    def never_given_a_time_limit(self):
        """For a backend whose fits run in the driver: raise if the engine could give it a time limit."""
        raise NotImplementedError

    def test_runs_every_fit_and_returns_each_result_once(self, make_backend, contract_data, tmp_path):
        plan = plan_for("prior", num_folds=3)
        model = PriorModel({"record_dir": str(tmp_path / "fits")}, "prior")
        outcome = run_plan(make_backend(plan, tmp_path / "run"), plan, model, contract_data, tmp_path / "run")
        assert set(outcome.results) == {t.id for t in plan.tasks}
        trial = outcome.trials[("prior", 0)]
        assert len(trial.folds) == 3 and len(outcome.timeline) == 3
        assert np.array_equal(np.sort(trial.held_out), np.sort(contract_data.fit_idx(True)))  # every row once
        pids = {r["pid"] for r in records(tmp_path / "fits")}
        assert len(records(tmp_path / "fits")) == 3
        assert (pids == {os.getpid()}) if self.fits_in_driver else (os.getpid() not in pids)

    def test_a_failing_fit_is_reported_naming_its_task_after_its_retries(self, make_backend, contract_data,
                                                                         tmp_path):
        from pipeline.errors import TaskFailedError

        plan = plan_for("failing", num_folds=1)
        with pytest.raises(TaskFailedError, match=r"task fit/failing/t0/f0 failed after 2 attempt\(s\): "
                                                  r"RuntimeError: a fit that always fails"):
            run_plan(make_backend(plan, tmp_path / "run"), plan, FailingModel({}, "failing"), contract_data,
                     tmp_path / "run", max_retries=1)

    def test_a_fit_whose_process_dies_is_a_failure_that_is_retried(self, make_backend, contract_data,
                                                                      tmp_path, caplog):
        if self.fits_in_driver:  # its process is the run's: the run ends with it
            return
        marker = tmp_path / "died-once"
        plan = plan_for("dies", num_folds=1)
        with caplog.at_level("WARNING", logger="pipeline.graph.scheduler"):
            model = DieOnceModel({"marker": str(marker)}, "dies")
            backend = make_backend(plan, tmp_path / "run")
            outcome = run_plan(backend, plan, model, contract_data, tmp_path / "run", max_retries=1)
        assert marker.exists()
        assert "task fit/dies/t0/f0 failed (attempt 1 of 2)" in caplog.text
        assert "died" in caplog.text and "during the fit" in caplog.text
        (entry,) = outcome.timeline
        assert entry["attempt"] == 1 and ("dies", 0) in outcome.trials

    def test_a_fit_past_its_time_limit_is_stopped_and_fails(self, make_backend, contract_data, tmp_path):
        from pipeline.errors import TaskFailedError

        if self.fits_in_driver:
            self.never_given_a_time_limit()
            return
        plan = plan_for("sleep", num_folds=2)
        model = PriorModel({"seconds": 60, "start_dir": str(tmp_path / "started"),
                            "record_dir": str(tmp_path / "ended")}, "sleep")
        began = time.monotonic()
        backend = make_backend(plan, tmp_path / "run")
        with backend:
            stopped = r"ran longer than executor.task_timeout_s=4 s and was stopped"
            with pytest.raises(TaskFailedError, match=stopped):
                scheduler(backend, plan, model, contract_data, tmp_path / "run", max_retries=0,
                          task_timeout_s=4).run()
            assert time.monotonic() - began < 45  # the run did not wait for the 60 s fits
            started = {r["pid"] for r in records(tmp_path / "started")}
            # the fit past its limit is stopped at once (a fit cancelled before it began left no record);
            # the run's other fit may run until the block ends
            assert _gone(started, wanted=min(1, len(started)))
        assert _gone(started) and not (tmp_path / "ended").exists()  # nothing left running, no fit finished

    def test_each_fit_sees_the_devices_its_plan_gave_it(self, make_backend, contract_data, tmp_path):
        gpus = 2 if self.runs_declared_gpus else 0
        plan = plan_for("prior", num_folds=2, gpus=gpus, fit_gpus=1 if gpus else None)
        model = PriorModel({"record_dir": str(tmp_path / "fits")}, "prior")
        run_plan(make_backend(plan, tmp_path / "run"), plan, model, contract_data, tmp_path / "run")
        seen = records(tmp_path / "fits")
        # as many devices as the plan gave each fit, among the run's: which ones is the device pool's choice
        # at the time (a backend that runs one fit at a time may give each the same idle device)
        assert sorted(len(r["gpu_ids"]) for r in seen) == sorted(len(t.device_ids) for t in plan.fit_tasks)
        declared = {d for t in plan.fit_tasks for d in t.device_ids}
        assert all(set(r["gpu_ids"]) <= declared for r in seen)
        for r in seen:
            if self.sees_only_its_devices:
                assert r["local_gpus"] == list(range(len(r["gpu_ids"])))
                if r["gpu_ids"]:
                    assert r["cuda_visible_devices"] == ",".join(map(str, r["gpu_ids"]))
                else:
                    assert not r["cuda_visible_devices"]  # a CPU fit sees no device
            else:
                assert r["local_gpus"] == r["gpu_ids"]

    def test_leaving_the_block_stops_its_workers_and_a_second_shutdown_does_nothing(
            self, make_backend, contract_data, tmp_path):
        plan = plan_for("prior", num_folds=2)
        backend = make_backend(plan, tmp_path / "run")
        run_plan(backend, plan, PriorModel({"record_dir": str(tmp_path / "fits")}, "prior"), contract_data,
                 tmp_path / "run")
        backend.shutdown()  # after the `with` block's own
        pids = {r["pid"] for r in records(tmp_path / "fits")}
        if self.owns_its_workers and not self.fits_in_driver:
            assert _gone(pids)
        assert psutil.pid_exists(os.getpid())
