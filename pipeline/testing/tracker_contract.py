"""The contract of a tracker (`pipeline.tracking.NullTracker` and what `tracking._target_` names), as a run
uses it: connect, start, params, metrics (with steps), curves, tags, artifacts, a nested run per HPO
trial, end with the run's status.

Subclass `TrackerContract` in a test module and define the fixture `make_tracker`: a function of a
folder (the launch directory, one per test class: its store is made once) that returns `(tracker, uri)`:
a fresh tracker that stores its runs under that folder, and the MLflow tracking URI to read them back
from (None for a tracker that stores nothing, whose `enabled` is False: every call must then be accepted
and do nothing). A tracker storing elsewhere than MLflow
overrides `read_run` and `read_children`.
"""

from __future__ import annotations

import time
from typing import Optional

import pytest


class TrackerContract:
    @pytest.fixture
    def make_tracker(self):
        raise NotImplementedError("a subclass defines make_tracker(folder) -> (tracker, uri or None)")

    @pytest.fixture(scope="class")
    def launch_dir(self, tmp_path_factory):
        """Where the class's trackers are made: they share its store, each test its own runs."""
        return tmp_path_factory.mktemp("tracker-contract")

    # -- reading back (MLflow's client by default) ------------------------------------------------
    def read_run(self, uri: str, run_id: str) -> dict:
        """{status, params, tags, metrics: {key: [(step, value)]}, artifacts: [paths, recursively]}."""
        import mlflow

        client = mlflow.MlflowClient(uri)
        run = client.get_run(run_id)
        metrics = {k: [(m.step, m.value) for m in client.get_metric_history(run_id, k)]
                   for k in run.data.metrics}

        def artifacts(path=None):
            for a in client.list_artifacts(run_id, path):
                yield from artifacts(a.path) if a.is_dir else [a.path]

        return {"status": run.info.status, "params": run.data.params, "tags": run.data.tags,
                "metrics": metrics, "artifacts": sorted(artifacts())}

    def read_children(self, uri: str, run_id: str) -> list[dict]:
        """The runs nested under `run_id`: {name, status, params, metrics: {key: value}, tags}."""
        import mlflow

        client = mlflow.MlflowClient(uri)
        experiment = client.get_run(run_id).info.experiment_id
        children = client.search_runs([experiment], f"tags.mlflow.parentRunId = '{run_id}'")
        return [{"name": r.info.run_name, "status": r.info.status, "params": r.data.params,
                 "metrics": r.data.metrics, "tags": r.data.tags} for r in children]

    # -- helpers ----------------------------------------------------------------------------------
    @staticmethod
    def started(tracker, name: str = "a run", params: Optional[dict] = None, tags: Optional[dict] = None):
        if tracker.enabled:
            tracker.connect()
        tracker.start(name, params or {}, tags or {})
        return tracker

    @staticmethod
    def run_id_of(tracker, timeout: float = 120.0) -> Optional[str]:
        """The run's id once the tracker has started it (poll does not wait; its process may be busy)."""
        if not tracker.enabled:
            return tracker.poll()
        deadline = time.monotonic() + timeout
        while tracker.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        return tracker.poll()

    # -- the checks -------------------------------------------------------------------------------
    def test_a_run_holds_its_params_metrics_curves_tags_and_artifacts_and_ends_finished(self, make_tracker,
                                                                                        launch_dir, tmp_path):
        tracker, uri = make_tracker(launch_dir)
        note, plot = tmp_path / "note.txt", tmp_path / "curve.txt"
        note.write_text("hello")
        plot.write_text("a curve")
        self.started(tracker, "first run", {"alpha": 1}, {"pipeline.models": "x"})
        tracker.log_params({"beta": "two"})
        for step in range(3):
            tracker.log_metrics({"loss": 1.0 / (step + 1)}, step=step)
        tracker.log_metrics({"val_auc": 0.75, "skipped": float("nan")})
        tracker.log_history("nn", {"train_loss": [0.5, 0.25]})
        tracker.set_tags({"best/model": "lightgbm"})
        tracker.log_artifact(note)
        tracker.log_artifact(plot, "plots")
        tracker.log_artifact(tmp_path / "absent.txt")  # a file that is not there is left out, not an error
        lines = tracker.end("FINISHED")
        assert tracker.failure is None
        if not tracker.enabled:
            assert uri is None and tracker.run_id is None and tracker.poll() is None
            assert not lines and tracker.closing_lines() == []
            return
        run_id = tracker.run_id
        assert run_id and tracker.poll() == run_id
        run = self.read_run(uri, run_id)
        assert run["status"] == "FINISHED"
        assert run["params"] == {"alpha": "1", "beta": "two"}
        assert run["tags"]["pipeline.models"] == "x" and run["tags"]["best/model"] == "lightgbm"
        assert run["tags"]["mlflow.runName"] == "first run"
        assert run["metrics"]["loss"] == [(0, 1.0), (1, 0.5), (2, pytest.approx(1 / 3))]
        assert run["metrics"]["val_auc"] == [(0, 0.75)] and "skipped" not in run["metrics"]
        assert run["metrics"]["nn/train_loss"] == [(0, 0.5), (1, 0.25)]
        assert run["artifacts"] == ["note.txt", "plots/curve.txt"]
        assert any(run_id in line for line in tracker.closing_lines())  # the console's last lines name it

    def test_the_run_id_comes_once_the_run_has_started(self, make_tracker, launch_dir, tmp_path):
        tracker, uri = make_tracker(launch_dir)
        self.started(tracker)
        run_id = self.run_id_of(tracker)
        tracker.end("FINISHED")
        if tracker.enabled:
            assert run_id is not None and run_id == tracker.run_id
        else:
            assert run_id is None

    def test_each_trial_is_a_finished_run_nested_under_the_run(self, make_tracker, launch_dir, tmp_path):
        tracker, uri = make_tracker(launch_dir)
        self.started(tracker, "with trials")
        tracker.log_trial("lightgbm/t0", {"num_leaves": 31}, {"val_auc": 0.8}, {"pipeline.trial": 0})
        tracker.log_trial("lightgbm/t1", {"num_leaves": 63}, {"val_auc": 0.82}, {"pipeline.trial": 1})
        tracker.end("FINISHED")
        assert tracker.failure is None
        if not tracker.enabled:
            return
        children = sorted(self.read_children(uri, tracker.run_id), key=lambda c: c["name"])
        assert [c["name"] for c in children] == ["lightgbm/t0", "lightgbm/t1"]
        assert all(c["status"] == "FINISHED" for c in children)
        assert children[1]["params"] == {"num_leaves": "63"} and children[1]["metrics"] == {"val_auc": 0.82}
        assert children[0]["tags"]["pipeline.trial"] == "0"

    def test_a_run_that_failed_ends_failed(self, make_tracker, launch_dir, tmp_path):
        tracker, uri = make_tracker(launch_dir)
        self.started(tracker, "failing run")
        tracker.log_metrics({"loss": 1.0})
        tracker.end("FAILED")
        if tracker.enabled:
            assert self.read_run(uri, tracker.run_id)["status"] == "FAILED"

    def test_a_tracker_is_a_null_tracker_and_says_whether_it_stores(self, make_tracker, launch_dir, tmp_path):
        from pipeline.tracking import NullTracker

        tracker, uri = make_tracker(launch_dir)
        assert isinstance(tracker, NullTracker)  # what tracking._target_'s kind check accepts
        assert tracker.enabled == (uri is not None)
        if tracker.enabled:
            tracker.connect()
            tracker.end("FINISHED")  # a run that never started ends without error
            assert tracker.failure is None

