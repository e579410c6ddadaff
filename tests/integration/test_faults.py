"""Faults of models and tasks, through the CLI: NaN predictions, hung fits, stop signals."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import FAULT_ENV, user_config
from tests.integration.mlflow_helpers import job_runs

pytestmark = pytest.mark.slow


def run_dirs(workdir: Path):
    return sorted((workdir / "outputs" / "runs").glob("*/*"))


def test_a_model_that_predicts_nan_is_left_out_of_the_ensemble(cli, tmp_path):
    searchpath = user_config(tmp_path, "model", "broken",
                             "defaults: [lightgbm]\nbroken:\n  _target_: tests.fault_models.NanModel\n  params: {}\n")
    cli("model=broken", searchpath, "allowed_targets=[tests.]", "data=california", "data.max_rows=1000",
        "model.lightgbm.params.num_iterations=20", "tracking=none", env=FAULT_ENV, check=True)
    (run_dir,) = run_dirs(tmp_path)
    board = pd.read_csv(run_dir / "leaderboard.csv")
    assert list(board["model"])[-1] == "broken"  # NaN ranks last
    weights = json.loads(board.set_index("model").loc["ensemble", "params"])
    assert weights == {"lightgbm": 1.0, "broken": 0.0}


def test_models_that_all_predict_nan_are_one_clear_error(cli, tmp_path):
    spec = "  _target_: tests.fault_models.NanModel\n  params: {}\n"
    searchpath = user_config(tmp_path, "model", "broken", f"first:\n{spec}second:\n{spec}")
    proc = cli("model=broken", searchpath, "allowed_targets=[tests.]", "data=california", "data.max_rows=1000",
               "tracking=none", env=FAULT_ENV)
    assert proc.returncode == 1
    assert "no ensemble can be built: the validation rmse of every model is NaN or infinite (first, second)" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.wall_clock
def test_under_hpo_auto_a_kind_whose_fits_fail_leaves_the_run_and_the_others_go_on(cli, tmp_path):
    """The engine chose the trials: as AutoGluon's time-limited fit, it goes on without a model that raised,
    and says so; the failed fit is retried first (executor.max_retries)."""
    searchpath = user_config(tmp_path, "model", "mixed",
                             "defaults: [lightgbm]\nboom:\n  _target_: tests.fault_models.FailingModel\n"
                             "  search_space: {smoothing: {type: float, low: 0.0, high: 1.0}}\n")
    proc = cli("model=mixed", searchpath, "allowed_targets=[tests.]", "hpo=auto", "time_limit_s=25",
               "data.max_rows=800", "model.lightgbm.params.num_iterations=20", "tracking=none", env=FAULT_ENV)
    assert proc.returncode == 0, proc.stderr[-2000:]
    said = r"boom left out: its fit fit/boom/t\d+/f\d+ failed 2 time\(s\) \(RuntimeError: injected failure\)"
    (run_dir,) = run_dirs(tmp_path)
    assert re.search(said, proc.stdout) and re.search(said, (run_dir / "pipeline.log").read_text())
    board = pd.read_csv(run_dir / "leaderboard.csv")
    assert "boom" not in set(board["model"]) and "lightgbm" in set(board["model"])


def test_a_kind_whose_fits_fail_fails_the_run_where_it_was_chosen_or_stands_alone(cli, tmp_path):
    searchpath = user_config(tmp_path, "model", "mixed",
                             "defaults: [lightgbm]\nboom:\n  _target_: tests.fault_models.FailingModel\n"
                             "  search_space: {smoothing: {type: float, low: 0.0, high: 1.0}}\n")
    user_config(tmp_path, "model", "boom", "boom:\n  _target_: tests.fault_models.FailingModel\n"
                "  search_space: {smoothing: {type: float, low: 0.0, high: 1.0}}\n")
    common = (searchpath, "allowed_targets=[tests.]", "time_limit_s=25", "data.max_rows=800",
              "executor.max_retries=0", "tracking=none")
    chosen = cli("model=mixed", "hpo=none", *common, env=FAULT_ENV)  # the user's own trials: the run fails
    alone = cli("model=boom", "hpo=auto", *common, env=FAULT_ENV)  # no other kind to go on with
    for proc in (chosen, alone):
        assert proc.returncode == 1
        # which of its trials' fits fails first depends on the order the workers end them
        assert re.search(r"task fit/boom/t\d+/f\d+ failed after 1 attempt\(s\): RuntimeError: injected failure",
                         proc.stderr)
        assert "Traceback" not in proc.stderr


def _start(args, cwd, env):
    return subprocess.Popen([sys.executable, "-m", "pipeline", *args], cwd=cwd, env={**os.environ, **env},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for(condition, timeout=60.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError("timed out waiting")


def test_sigterm_while_the_data_loads_stops_the_run_cleanly(tmp_path):
    """A data source that never answers (a stalled object store); the workers are starting meanwhile."""
    import socket

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()  # connections queue but are never answered
        url = f"http://127.0.0.1:{server.getsockname()[1]}/data.csv"
        proc = _start(["data=csv", f"data.path={url}", "data.label=y", "model=lightgbm", "parallelism.num_folds=2",
                       "executor.in_process=never", "tracking=none"], tmp_path, {})
        _wait_for(lambda: list((tmp_path / "outputs" / "runs").glob("*/*/plan.json")))
        time.sleep(1.0)  # in the read of the data
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, out + err
    assert "stopped by SIGTERM" in err and "Traceback" not in err


def test_repeated_stop_signals_never_leave_the_mlflow_run_running(tmp_path):
    """SIGTERM, then SIGTERM again every 20 ms while the run cleans up: it still closes its MLflow run."""
    searchpath = user_config(tmp_path, "model", "slow",
                             "sleep:\n  _target_: tests.fault_models.SleepModel\n  params: {seconds: 30}\n")
    proc = _start(["model=slow", searchpath, "allowed_targets=[tests.]", "executor.in_process=always",
                   "data.max_rows=500"], tmp_path, FAULT_ENV)

    def running():
        states = list((tmp_path / "outputs" / "runs").glob("*/*/run_state.json"))
        return states and json.loads(states[0].read_text()).get("status") == "RUNNING"

    _wait_for(running)
    time.sleep(0.5)
    while proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.02)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGTERM, out + err
    (run_dir,) = run_dirs(tmp_path)
    assert json.loads((run_dir / "run_state.json").read_text())["status"] == "KILLED"
    _, (run,) = job_runs(tmp_path)
    assert run.info.status == "KILLED"


def test_a_fit_that_hangs_once_is_stopped_and_retried(cli, tmp_path):
    marker = tmp_path / "hung-once"
    searchpath = user_config(tmp_path, "model", "hang",
                             f"hang:\n  _target_: tests.fault_models.HangOnceModel\n  params: {{marker: '{marker}'}}\n")
    proc = cli("model=hang", searchpath, "allowed_targets=[tests.]", "executor.task_timeout_s=3",
               "executor.max_retries=1", "data.max_rows=500", "tracking=none", env=FAULT_ENV, timeout=120, check=True)
    assert marker.exists()  # the first attempt hung (an hour's sleep): the run finished only by stopping it
    assert "ran longer than executor.task_timeout_s=3 s and was stopped; retrying" in proc.stdout + proc.stderr
    (run_dir,) = run_dirs(tmp_path)
    (entry,) = json.loads((run_dir / "timeline.json").read_text())
    assert entry["attempt"] == 1


def test_a_fit_that_always_hangs_fails_the_run_and_keeps_the_finished_folds(cli, tmp_path):
    searchpath = user_config(
        tmp_path, "model", "mixed",
        "defaults: [lightgbm]\nhang:\n  _target_: tests.fault_models.SleepModel\n  params: {seconds: 3600}\n",
    )
    proc = cli("model=mixed", searchpath, "allowed_targets=[tests.]", "executor.task_timeout_s=3",
               "executor.max_retries=0", "parallelism.num_folds=2", "parallelism.fit.num_cpus=1",
               "model.lightgbm.params.num_iterations=20", "data.max_rows=1000", env=FAULT_ENV, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "failed after 1 attempt(s): the fit ran longer than executor.task_timeout_s=3 s" in proc.stderr
    assert "Traceback" not in proc.stderr
    (run_dir,) = run_dirs(tmp_path)
    assert len(list((run_dir / "tasks").glob("*.pkl"))) == 2  # lightgbm's two folds
    _, (run,) = job_runs(tmp_path)
    assert run.info.status == "FAILED"


@pytest.mark.parametrize("overrides, message", [
    (["executor.task_timeout_s=0"], "executor.task_timeout_s=0.0 must be > 0 seconds"),
    (["executor.task_timeout_s=5", "executor.in_process=always"],
     "executor.task_timeout_s=5.0 needs fits in worker processes"),
    (["tracking.keep_alive_s=-1"], r"tracking.keep_alive_s=-1.0 must be >= 0 seconds \(0: no tracker service"),
])
def test_bad_time_limits_are_refused(compose, overrides, message):
    from pipeline.errors import ConfigError
    from pipeline.settings import read_settings

    with pytest.raises(ConfigError, match=message):
        read_settings(compose(overrides))


def test_a_fit_worker_dies_with_its_driver(tmp_path):
    """The driver SIGKILLed (the OOM killer, a node failure) mid-fit: its workers stop at once
    instead of finishing their fits and writing into a run directory a resumed run now owns."""
    import psutil

    searchpath = user_config(tmp_path, "model", "slow",
                             "sleep:\n  _target_: tests.fault_models.SleepModel\n  params: {seconds: 60}\n")
    proc = _start(["model=slow", searchpath, "allowed_targets=[tests.]", "executor.in_process=never",
                   "data.max_rows=500", "tracking=none"], tmp_path, FAULT_ENV)

    def running():
        states = list((tmp_path / "outputs" / "runs").glob("*/*/run_state.json"))
        return states and json.loads(states[0].read_text()).get("status") == "RUNNING"

    def fit_workers():  # the forkserver's children (the server starts while the data loads; slower under load)
        return [w for helper in psutil.Process(proc.pid).children() for w in helper.children(recursive=True)]

    _wait_for(running)
    _wait_for(fit_workers, timeout=30.0)
    time.sleep(1.0)  # the fit has been submitted
    workers = fit_workers()
    assert workers, "no fit worker found"
    proc.kill()
    proc.wait()  # not communicate(): an orphaned worker would hold the output pipes open
    _, alive = psutil.wait_procs(workers, timeout=5)
    assert not alive, f"fit workers outlived their driver: {alive}"
