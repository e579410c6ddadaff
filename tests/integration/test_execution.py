"""Executing the plan: bagging, devices per worker, faults, SIGTERM and resume."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.conftest import FAULT_ENV, user_config
from tests.integration.mlflow_helpers import job_runs

pytestmark = pytest.mark.slow


def run_dirs(workdir: Path):
    return sorted((workdir / "outputs" / "runs").glob("*/*"))


def sleep_model(tmp_path, seconds=0.6, name="sleep"):
    record = tmp_path / "records"
    text = (
        "sleep:\n  _target_: tests.fault_models.SleepModel\n"
        f"  params: {{seconds: {seconds}, record_dir: '{record}'}}\n"
    )
    return user_config(tmp_path, "model", name, text), record


def records(folder: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]


def test_out_of_fold_predictions_cover_every_row_once(adult):
    from pipeline.executors.local import InProcessBackend
    from pipeline.graph.scheduler import Scheduler
    from pipeline.hardware import Machine, resolve
    from pipeline.config import HpoConf
    from pipeline.hpo import TrialSource
    from pipeline.metrics import METRICS
    from pipeline.models import LightGBMModel
    from pipeline.graph.plan import build_plan
    from pipeline.resources import ModelNeeds, Request
    from pipeline.planning.allocation import allocate
    from pipeline.store import ResultStore

    hw = resolve(None, Machine(2), dry_run=False)
    needs = ModelNeeds("lightgbm", False, False, 1)
    a = allocate(hw.total, Request.parse(None, None, "b"), Request.parse(1, None, "f"), needs, num_folds=4, num_trials=1)
    plan = build_plan(hw, [a])
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        model = LightGBMModel({"num_iterations": 30, "verbosity": -1}, "lightgbm")
        outcome = Scheduler(plan, InProcessBackend(), ResultStore(Path(tmp)), TrialSource(HpoConf(), {}, {}, "maximize"),
                            {"lightgbm": model}, adult, METRICS["roc_auc"], seed=0).run()
    trial = outcome.trials[("lightgbm", 0)]
    fit_rows = np.sort(adult.fit_idx(True))
    assert np.array_equal(trial.held_out, fit_rows)  # every training row once, none twice
    assert len(np.unique(trial.held_out)) == len(trial.held_out)
    held = [set(f.held_out.tolist()) for f in trial.folds]
    assert all(a.isdisjoint(b) for i, a in enumerate(held) for b in held[i + 1:])
    y = adult.y[fit_rows]
    rates = [adult.y[f.held_out].mean() for f in trial.folds]
    assert max(rates) - min(rates) < 0.01  # stratified
    assert trial.test_pred.shape == (len(adult.test_idx), 2)
    assert 0.85 < trial.score < 1.0 and y.size == trial.val_pred.shape[0]


@pytest.mark.parametrize("share, expected_devices", [(0.5, {"0", "1"}), (0.75, {"0", "1"})])
def test_workers_see_only_their_devices_and_never_overfill_one(cli, tmp_path, share, expected_devices):
    """Simulated GPUs: each worker's CUDA_VISIBLE_DEVICES is its slot; shares on a device never pass 1.0."""
    searchpath, record = sleep_model(tmp_path)
    proc = cli("model=sleep", searchpath, "allowed_targets=[tests.]", "+hardware=2gpu", "parallelism.num_folds=4",
               "parallelism.fit.num_cpus=1", f"parallelism.fit.num_gpus={share}", "data.max_rows=500",
               "tracking=none", env={**FAULT_ENV, "PIPELINE_SIMULATE_GPUS": "2"}, check=True)
    assert "configured for the CPU" in proc.stdout + proc.stderr  # a CPU model given GPUs: warned, not refused
    seen = records(record)
    assert len(seen) == 4
    assert {r["cuda_visible_devices"] for r in seen} == expected_devices
    for r in seen:  # one device each, the one the task was given
        assert r["cuda_visible_devices"] == ",".join(map(str, r["gpu_ids"]))
    (run_dir,) = run_dirs(tmp_path)
    timeline = json.loads((run_dir / "timeline.json").read_text())
    events = sorted([(e["start"], +1, e) for e in timeline] + [(e["end"], -1, e) for e in timeline],
                    key=lambda x: (x[0], x[1]))
    load: dict[int, Fraction] = {}
    cpus, peak = 0, 0
    for _, sign, e in events:
        for d, s in zip(e["device_ids"], e["gpu_shares"]):
            load[d] = load.get(d, Fraction(0)) + sign * Fraction(s).limit_denominator(100)
            assert load[d] <= 1
        cpus += sign * e["num_cpus"]
        assert cpus <= 2
        peak = max(peak, cpus)
    assert peak == 2  # two fits did run at once


def _killer_model(tmp_path):
    """A user model (tests.fault_models.KillOnceModel) whose first fit SIGKILLs its own worker."""
    marker = tmp_path / "killed-once"
    searchpath = user_config(
        tmp_path, "model", "killer",
        f"killer:\n  _target_: tests.fault_models.KillOnceModel\n  params: {{marker: '{marker}'}}\n",
    )
    return marker, searchpath


def test_a_killed_worker_without_retries_fails_the_run_naming_the_task(cli, tmp_path):
    marker, searchpath = _killer_model(tmp_path)
    proc = cli("model=killer", searchpath, "allowed_targets=[tests.]", "executor.in_process=never",
               "executor.max_retries=0", "data.max_rows=500", env=FAULT_ENV, timeout=120)
    assert proc.returncode == 1
    assert "task fit/killer/t0/f0 failed after 1 attempt(s): the worker process died (killed by signal SIGKILL)" in proc.stderr
    assert "Traceback" not in proc.stderr
    _, (run,) = job_runs(tmp_path)
    assert run.info.status == "FAILED"


def _start(args, cwd, env):
    return subprocess.Popen([sys.executable, "-m", "pipeline", *args], cwd=cwd, env={**os.environ, **env},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_sigterm_then_resume_gives_identical_results(cli, tmp_path):
    """A spot-instance interruption: SIGTERM mid-run, then resume=true finishes with the same scores."""
    searchpath = user_config(
        tmp_path, "model", "mixed",
        "defaults: [lightgbm]\nsleep:\n  _target_: tests.fault_models.SleepModel\n  params: {seconds: 1.5}\n",
    )
    args = ["model=mixed", searchpath, "allowed_targets=[tests.]", "parallelism.num_folds=4",
            "parallelism.fit.num_cpus=1", "data.max_rows=2000", "model.lightgbm.params.num_iterations=50"]
    proc = _start(args, tmp_path, FAULT_ENV)
    tasks = None
    deadline = time.time() + 90
    while time.time() < deadline:
        found = list((tmp_path / "outputs" / "runs").glob("*/*/tasks/*.pkl"))
        if len(found) >= 3:
            tasks = found
            break
        time.sleep(0.1)
    assert tasks, "no task finished in time"
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, out + err
    assert "stopped by SIGTERM" in err and "resume=true" in err
    (first_dir,) = run_dirs(tmp_path)
    assert json.loads((first_dir / "run_state.json").read_text())["status"] == "KILLED"
    finished_before = len(list((first_dir / "tasks").glob("*.pkl")))
    assert 3 <= finished_before < 8
    _, (killed,) = job_runs(tmp_path)
    assert killed.info.status == "KILLED"

    time.sleep(1.1)  # a new Hydra run directory (second resolution)
    cli(*args, "resume=true", env=FAULT_ENV, check=True)
    resumed_dir = run_dirs(tmp_path)[-1]
    timeline = json.loads((resumed_dir / "timeline.json").read_text())
    assert sum(e["cached"] for e in timeline) == finished_before  # nothing finished was fitted again
    assert json.loads((resumed_dir / "run_state.json").read_text())["status"] == "FINISHED"

    fresh = tmp_path / "fresh"
    fresh.mkdir()
    cli(*args, "tracking=none", env=FAULT_ENV, check=True, cwd=fresh)
    (fresh_dir,) = run_dirs(fresh)
    a = pd.read_csv(resumed_dir / "leaderboard.csv").set_index("model")
    b = pd.read_csv(fresh_dir / "leaderboard.csv").set_index("model")
    scores = [c for c in a.columns if c.startswith(("val_", "test_"))]
    pd.testing.assert_frame_equal(a[scores].sort_index(), b[scores].sort_index())


def test_sigterm_during_an_in_process_fit_stops_the_run(tmp_path):
    """With a single slot the fit runs in the driver: a stop signal stops the run, it is no task failure."""
    searchpath = user_config(tmp_path, "model", "slow",
                             "sleep:\n  _target_: tests.fault_models.SleepModel\n  params: {seconds: 30}\n")
    proc = _start(["model=slow", searchpath, "allowed_targets=[tests.]", "executor.in_process=always",
                   "data.max_rows=500"], tmp_path, FAULT_ENV)
    deadline = time.time() + 60
    while time.time() < deadline:
        states = list((tmp_path / "outputs" / "runs").glob("*/*/run_state.json"))
        if states and json.loads(states[0].read_text()).get("status") == "RUNNING":
            break
        time.sleep(0.1)
    time.sleep(1.0)  # inside the 30 s fit
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGTERM
    assert "retrying" not in out + err and "stopped by SIGTERM" in err
    (run_dir,) = run_dirs(tmp_path)
    assert json.loads((run_dir / "run_state.json").read_text())["status"] == "KILLED"
    _, (run,) = job_runs(tmp_path)
    assert run.info.status == "KILLED"


def test_rerun_in_the_same_directory_reuses_finished_tasks(cli, tmp_path):
    run_dir = tmp_path / "outputs" / "fixed"
    args = ["model=lightgbm", "parallelism.num_folds=3", "data.max_rows=1500", f"hydra.run.dir={run_dir}",
            "tracking=none"]
    first = cli(*args, check=True)
    assert "reused" not in first.stdout
    again = cli(*args, check=True)
    timeline = json.loads((run_dir / "timeline.json").read_text())
    assert len(timeline) == 3 and all(e["cached"] for e in timeline)
    # the run says what it reused, from where and when, and the leaderboard marks it
    stamp = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"
    assert re.search(rf"reused 3 of 3 fit\(s\) finished earlier in this run directory \({stamp}( to {stamp})?\)",
                     again.stdout), again.stdout
    board = pd.read_csv(run_dir / "leaderboard.csv")
    assert board.set_index("model").loc["lightgbm", "reused_folds"] == 3
    assert re.search(r"│ lightgbm .*│\s+3/3 │", again.stdout), again.stdout
