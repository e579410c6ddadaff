"""The tracker contract (pipeline.testing.tracker_contract) on the engine's trackers: tracking=none, the
MLflow tracker in this process, and the MLflow tracker as a run gets it (tracking=mlflow: its calls
forwarded to a process of its own)."""

import pytest

from pipeline.testing.tracker_contract import TrackerContract


class TestNoTracker(TrackerContract):
    @pytest.fixture
    def make_tracker(self):
        from pipeline.config import TrackingConf
        from pipeline.tracking.factory import no_tracker

        return lambda folder: (no_tracker(TrackingConf(), folder), None)


class TestMlflowInProcess(TrackerContract):
    @pytest.fixture
    def make_tracker(self):
        from pipeline.tracking.mlflow_run import MlflowTracker
        from pipeline.tracking.store import Store

        def make(folder):
            store = Store.of(None, folder)
            return MlflowTracker(store, "contract"), store.uri

        return make


class TestMlflowThroughItsProcess(TrackerContract):
    @pytest.fixture
    def make_tracker(self):
        from pipeline.config import TrackingConf
        from pipeline.tracking.factory import mlflow_store, mlflow_tracker

        def make(folder):
            conf = TrackingConf(experiment="contract")  # the service kept between runs, as by default
            return mlflow_tracker(conf, folder), mlflow_store(conf, folder).uri

        return make
