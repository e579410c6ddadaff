"""Faults a long GPU run meets, concurrent runs on one store, and credentials kept out of the logs."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import FAULT_ENV, ROOT, MlflowServer, user_config
from tests.integration.mlflow_helpers import job_runs, runs

pytestmark = pytest.mark.slow

TINY = ["model=lightgbm", "data.max_rows=600", "model.lightgbm.params.num_iterations=20"]


def run_dirs(workdir: Path):
    return sorted((workdir / "outputs" / "runs").glob("*/*"))


def test_tracking_server_dying_mid_run(tmp_path):
    """The fits go on, the results stay in the run directory, the failure is reported at the end."""
    server = MlflowServer(tmp_path / "server").start()
    searchpath = user_config(
        tmp_path, "model", "slow",
        "defaults: [lightgbm]\nsleep:\n  _target_: tests.fault_models.SleepModel\n  params: {seconds: 4}\n",
    )
    args = ["model=slow", searchpath, "allowed_targets=[tests.]", "data.max_rows=800",
            "model.lightgbm.params.num_iterations=20", f"tracking.uri={server.uri}"]
    # a short backoff between the bounded retries (the user's setting wins; the bound itself: the test below)
    env = {**os.environ, **FAULT_ENV, "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "0"}
    proc = subprocess.Popen([sys.executable, "-m", "pipeline", *args], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            states = list((tmp_path / "outputs" / "runs").glob("*/*/run_state.json"))
            if states and json.loads(states[0].read_text()).get("mlflow_run_id"):
                break
            time.sleep(0.1)
        else:
            pytest.fail("the run never started")
        server.stop()
        out, err = proc.communicate(timeout=120)
    finally:
        server.stop()
        proc.kill()
    assert proc.returncode == 2
    assert "the run finished and its results are in" in err and "MLflow tracking failed" in err
    # The first call to meet the dead server gave up after its bounded retries (test below), on the
    # refused connection, not on a request timeout; it is the one failure: tracking stopped there.
    assert "Max retries exceeded" in err and "Connection refused" in err
    assert err.count("MLflow tracking failed") == 1
    assert "Traceback" not in err
    (run_dir,) = run_dirs(tmp_path)
    board = pd.read_csv(run_dir / "leaderboard.csv")
    assert set(board.model) == {"lightgbm", "sleep", "ensemble"}
    assert json.loads((run_dir / "run_state.json").read_text())["status"] == "FINISHED"
    assert len(list((run_dir / "tasks").glob("*.pkl"))) == 2


def test_a_tracked_run_bounds_the_http_retries_of_each_mlflow_call(monkeypatch):
    """What keeps a dead server from costing minutes per call: MLflow's default is 7 retries with
    backoff factor 2 (minutes); a run asks for 3 with factor 1, unless the user set them."""
    from pipeline.tracking.store import configure_http

    for key in ("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR",
                "MLFLOW_HTTP_REQUEST_TIMEOUT"):
        monkeypatch.delenv(key, raising=False)
    configure_http(10)
    assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "3"
    assert os.environ["MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR"] == "1"
    assert os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] == "60"
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "9")
    configure_http(10)
    assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "9"  # the user's setting wins


AT_ONCE = 4  # per store, eight runs in all: four per core on this 2-core box, so every run's writes meet others'


def _start(n, args, cwd, env=None):
    """n runs started at once. They run niced: on this 2-core box the tracking server shares the CPUs
    with its clients, where in production it has a machine of its own."""
    cwd.mkdir(exist_ok=True)
    return [
        subprocess.Popen([sys.executable, "-m", "pipeline", *args, f"seed={i}"], cwd=cwd,
                         env={**os.environ, **(env or {})}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         preexec_fn=lambda: os.nice(10))
        for i in range(n)
    ]


def _ended(procs):
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    return [p.returncode for p in procs], outputs


@pytest.mark.floods_the_box
def test_eight_runs_at_once_half_on_one_sqlite_store_half_on_one_tracking_server(tmp_path, mlflow_server):
    server = [f"tracking.uri={mlflow_server.uri}", "tracking.experiment=load8"]
    local, served = _start(AT_ONCE, TINY, tmp_path / "local"), _start(AT_ONCE, [*TINY, *server], tmp_path / "served")
    for codes, outputs in (_ended(local), _ended(served)):
        assert codes == [0] * AT_ONCE, "\n".join(o[-2000:] for o, c in zip(outputs, codes) if c)
        assert not any("database is locked" in o for o in outputs)
    _, jobs = job_runs(tmp_path / "local")
    assert len(jobs) == AT_ONCE and all(r.info.status == "FINISHED" for r in jobs)
    assert sorted(r.data.params["seed"] for r in jobs) == sorted(map(str, range(AT_ONCE)))
    _, all_runs = runs(tmp_path / "served", "load8", uri=mlflow_server.uri)
    assert len(all_runs) == AT_ONCE and all(r.info.status == "FINISHED" for r in all_runs)
    assert sorted(r.data.params["seed"] for r in all_runs) == sorted(map(str, range(AT_ONCE)))


def test_credentials_never_reach_the_logs(cli, tmp_path, mlflow_server):
    """Secrets in config values (keys such as token, password, api_key) and in a tracking URI's userinfo
    are masked in logged params, tags, the run name, the logged config and the console."""
    frame = pd.read_parquet(ROOT / "pipeline" / "datasets" / "adult.parquet").head(500)
    frame.to_csv(tmp_path / "table.csv", index=False)
    uri = mlflow_server.uri.replace("http://", "http://alice:hunter2-uri@")
    proc = cli("data=csv", "data.path=table.csv", "data.label=income", "model=lightgbm",
               "+data.storage_options.token=hunter2-token", "+data.storage_options.password=hunter2-password",
               "+tracking.tags.api_key=hunter2-tag", f"tracking.uri={uri}", "tracking.experiment=secrets",
               "model.lightgbm.params.num_iterations=20", check=True)
    secrets = ("hunter2-uri", "hunter2-token", "hunter2-password", "hunter2-tag")
    console = proc.stdout + proc.stderr
    assert not any(s in console for s in secrets)
    client, (run,) = runs(tmp_path, "secrets", uri=mlflow_server.uri)
    logged = json.dumps({"params": run.data.params, "tags": run.data.tags, "name": run.info.run_name})
    assert not any(s in logged for s in secrets)
    assert run.data.params["data.storage_options.token"] == "***"
    assert "tracking.uri" not in run.data.params  # where a run is logged is no parameter of it
    assert f"MLflow run {run.info.run_id}: http://alice:***@127.0.0.1" in proc.stdout  # the closing link, masked
    config_text = Path(client.download_artifacts(run.info.run_id, "config.yaml", str(tmp_path))).read_text()
    assert "http://alice:***@127.0.0.1" in config_text and not any(s in config_text for s in secrets)


def test_targets_outside_the_allowed_modules_are_refused(cli):
    proc = cli("model=lightgbm", "model.lightgbm._target_=subprocess.Popen", "tracking=none")
    assert proc.returncode == 2
    assert "model.lightgbm._target_='subprocess.Popen' is outside the allowed modules (pipeline.)" in proc.stderr
    proc = cli("model=lightgbm", "model.lightgbm._target_=tests.fault_models.SleepModel", "tracking=none",
               "data.max_rows=300")
    assert proc.returncode == 2 and "allowed_targets" in proc.stderr


def test_servers_bind_loopback(mlflow_server):
    import psutil

    root = psutil.Process(mlflow_server.proc.pid)
    listening = [
        c.laddr
        for p in [root, *root.children(recursive=True)]
        for c in p.net_connections(kind="inet")
        if c.status == psutil.CONN_LISTEN
    ]
    assert listening and all(addr.ip == "127.0.0.1" for addr in listening)
