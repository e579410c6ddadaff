"""The sweep's tracker host: the jobs of this host log through it (runs at once, each a child of
the parent run it opened), a full or foreign server is not used, and a driver that dies leaves the
parent run FAILED and no server behind."""

import json
import os
import stat
import threading
import time
from pathlib import Path

import pytest

from pipeline.tracking import host, sweep
from pipeline.tracking import sweep_host as ts
from pipeline.tracking.client import TrackerClient
from pipeline.tracking.mlflow_run import MlflowTracker
from pipeline.tracking.store import Store


def _client(uri):
    import mlflow

    return mlflow.MlflowClient(uri)


def _start(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    sweep_dir = tmp_path / "multirun"
    sweep.write_parent_file(sweep_dir, sweep.PARENT_PENDING)
    server = ts.SweepHost.start(ts.SweepSpec(Store(uri, tmp_path / "artifacts"), "exp", sweep_dir, "seed=0,1"))
    return uri, sweep_dir, server


def _connect(sweep_dir, uri):
    """A connection the sweep's host accepted for one run of `uri`, or None."""
    found = ts.find(str(sweep_dir), uri)
    return None if found is None else host.dial_file(found)[0]


def _job(uri, sweep_dir, seed, results):
    tracker = TrackerClient(MlflowTracker(Store(uri), "exp", sweep_dir=str(sweep_dir)))
    tracker.connect()
    results[seed] = {"shared": tracker._shared, "own_process": tracker._process is not None}
    tracker.start(f"job {seed}", {"seed": seed}, {"pipeline.eval_metric": "roc_auc"})
    for step in range(3):
        tracker.log_metrics({"loss": 1.0 / (step + 1 + seed)}, step=step)
    tracker.log_metrics({"best/val_roc_auc": 0.8 + seed / 100})
    tracker.set_tags({"best/model": f"model{seed}"})
    results[seed]["run_id"] = tracker.run_id
    tracker.end("FINISHED")
    results[seed]["failure"] = tracker.failure


def test_jobs_log_through_the_sweeps_process_as_children_of_its_parent(tmp_path):
    uri, sweep_dir, server = _start(tmp_path)
    assert stat.S_IMODE(os.stat(sweep_dir / ts.HOST_FILE).st_mode) == 0o600  # it holds the key
    socket_dir = Path(json.loads((sweep_dir / ts.HOST_FILE).read_text())["address"]).parent
    assert stat.S_IMODE(os.stat(socket_dir).st_mode) == 0o700  # no other user reaches the socket
    results: dict = {}
    jobs = [threading.Thread(target=_job, args=(uri, sweep_dir, seed, results)) for seed in (0, 1)]
    for job in jobs:
        job.start()
    for job in jobs:
        job.join(120)
    parent_id = server.finish(sweep_dir)
    assert parent_id is not None and (sweep_dir / sweep.PARENT_FILE).read_text() == parent_id
    assert not (sweep_dir / ts.HOST_FILE).exists() and not socket_dir.exists()
    for seed in (0, 1):
        assert results[seed]["shared"] and not results[seed]["own_process"]
        assert results[seed]["failure"] is None
        run = _client(uri).get_run(results[seed]["run_id"])
        assert run.info.status == "FINISHED" and run.data.tags["mlflow.parentRunId"] == parent_id
        assert [m.step for m in _client(uri).get_metric_history(run.info.run_id, "loss")] == [0, 1, 2]
        assert run.data.params == {"seed": str(seed)}
    parent = _client(uri).get_run(parent_id)
    assert parent.info.status == "FINISHED"
    assert parent.data.tags["best/job"] == "job 1" and parent.data.metrics["best/val_roc_auc"] == pytest.approx(0.81)


def test_the_sweeps_process_runs_at_the_jobs_priority(tmp_path):
    # Every job waits at its end for its run to be logged: this process's work is on the jobs' path,
    # so it is not niced below them as a single run's own tracker process is.
    uri, sweep_dir, server = _start(tmp_path)
    try:
        pid = json.loads((sweep_dir / ts.HOST_FILE).read_text())["pid"]
        assert os.getpriority(os.PRIO_PROCESS, pid) == os.getpriority(os.PRIO_PROCESS, 0)
    finally:
        server.finish(sweep_dir)


def test_a_full_server_or_another_store_sends_the_job_to_its_own_process(tmp_path):
    uri, sweep_dir, server = _start(tmp_path)
    try:
        assert _connect(sweep_dir, f"sqlite:///{tmp_path / 'other.db'}") is None
        assert _connect(tmp_path / "not_a_sweep", uri) is None
        held = [_connect(sweep_dir, uri) for _ in range(host.MAX_RUNS)]
        assert all(conn is not None for conn in held)
        assert _connect(sweep_dir, uri) is None  # one more than it serves at once
        tracker = TrackerClient(MlflowTracker(Store(uri), "exp", sweep_dir=str(sweep_dir)))
        tracker.connect()
        assert not tracker._shared and tracker._process is not None
        tracker.start("own process", {}, {})
        tracker.end("FINISHED")
        assert tracker.failure is None and _client(uri).get_run(tracker.run_id).info.status == "FINISHED"
        held.pop().close()
        deadline = time.monotonic() + 30
        while (conn := _connect(sweep_dir, uri)) is None and time.monotonic() < deadline:
            time.sleep(0.05)  # the server notices the closed connection
        assert conn is not None
        conn.close()
        for conn in held:
            conn.close()
    finally:
        server.finish(sweep_dir)


def test_a_driver_that_dies_leaves_the_parent_failed_and_no_server(tmp_path):
    uri, sweep_dir, server = _start(tmp_path)
    results: dict = {}
    _job(uri, sweep_dir, 0, results)
    server._control.close()  # as the driver's death leaves it: end-of-file
    server._process.join(120)
    assert server._process.exitcode == 0
    assert not (sweep_dir / ts.HOST_FILE).exists()
    parent_id = (sweep_dir / sweep.PARENT_FILE).read_text()
    assert _client(uri).get_run(parent_id).info.status == "FAILED"
    assert _client(uri).get_run(results[0]["run_id"]).info.status == "FINISHED"
    assert _connect(sweep_dir, uri) is None
