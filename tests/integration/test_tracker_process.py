"""MLflow tracking in its own process: calls logged in order, errors before any fit, a dead driver's run closed."""

import subprocess
import sys
import textwrap
import time

import pytest

from pipeline.errors import TrackingError
from pipeline.tracker_process import TrackerProcess
from pipeline.tracking import MlflowTracker


def _client(uri):
    import mlflow

    return mlflow.MlflowClient(uri)


def test_calls_arrive_in_order_and_end_waits_for_them(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    artifact = tmp_path / "note.txt"
    artifact.write_text("hello")
    tracker = TrackerProcess(MlflowTracker(uri, "exp", artifact_root=tmp_path / "artifacts"))
    tracker.connect()
    tracker.start("a run", {"alpha": 1}, {"pipeline.models": "x"})
    run_id = tracker.run_id
    for step in range(3):
        tracker.log_metrics({"loss": 1.0 / (step + 1)}, step=step)
    tracker.log_artifact(artifact)
    tracker.end("FINISHED")
    assert tracker.failure is None
    run = _client(uri).get_run(run_id)
    assert run.info.status == "FINISHED"
    assert run.data.params == {"alpha": "1"} and run.data.tags["pipeline.models"] == "x"
    history = _client(uri).get_metric_history(run_id, "loss")
    assert [m.step for m in history] == [0, 1, 2] and history[-1].value == pytest.approx(1 / 3)
    assert [a.path for a in _client(uri).list_artifacts(run_id)] == ["note.txt"]


def test_a_store_that_cannot_open_fails_at_the_run_id(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    tracker = TrackerProcess(MlflowTracker(f"sqlite:///{blocker / 'mlflow.db'}", "exp"))
    tracker.connect()
    tracker.start("a run", {}, {})
    with pytest.raises(TrackingError, match="cannot open the MLflow store"):
        tracker.run_id
    tracker.end("FAILED")  # returns: the process has nothing left to do


def test_a_driver_that_dies_leaves_its_run_failed(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    script = textwrap.dedent(f"""
        import os
        from pipeline.tracker_process import TrackerProcess
        from pipeline.tracking import MlflowTracker
        if __name__ == "__main__":
            t = TrackerProcess(MlflowTracker({uri!r}, "exp"))
            t.connect()
            t.start("doomed", {{}}, {{}})
            print(t.run_id, flush=True)
            os._exit(9)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    run_id = proc.stdout.strip().splitlines()[-1]
    deadline = time.time() + 60
    while time.time() < deadline and _client(uri).get_run(run_id).info.status == "RUNNING":
        time.sleep(0.5)
    assert _client(uri).get_run(run_id).info.status == "FAILED"
