"""The engine's trackers, which `tracking._target_` names (conf/tracking/mlflow.yaml, none.yaml).

The composition root calls the target with keyword arguments `conf` (the typed `tracking` settings),
`launch_dir` (where the run was started) and `sweep_dir` (the sweep's directory when the run is a job
of a multirun, else None). It returns a tracker: an object with the methods of
`pipeline.tracking.NullTracker` (subclass it and set `enabled = True`): a class of it, or a function
that says so (`-> NullTracker`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from pipeline.tracking.base import NullTracker  # what the targets return: the target kind check reads it


def mlflow_store(conf, launch_dir: Path):
    """The store of the engine's MLflow tracker for the typed `tracking` settings `conf`, as the run
    and its sweep's parent both use it."""
    from pipeline.tracking.store import Store

    return Store.of(conf.uri, launch_dir, conf.timeout_s)


def no_tracker(conf, launch_dir: Path, sweep_dir: Optional[Path] = None) -> NullTracker:
    """tracking=none: every call does nothing."""
    return NullTracker()


def mlflow_tracker(conf, launch_dir: Path, sweep_dir: Optional[Path] = None) -> NullTracker:
    """One MLflow run, logged through a shared host or a process of its own (pipeline.tracking.client):
    in a sweep, a child of the sweep's parent run, served by the sweep's host where it can be; else
    through the service kept between runs (tracking.keep_alive_s)."""
    from pipeline.tracking.client import TrackerClient  # a NullTracker (registered): forwards every call
    from pipeline.tracking.mlflow_run import MlflowTracker

    tracker = MlflowTracker(
        mlflow_store(conf, launch_dir), conf.experiment, system_metrics=conf.system_metrics,
        log_models=conf.log_models, system_metrics_interval_s=conf.system_metrics_interval_s,
        sweep_dir=None if sweep_dir is None else str(sweep_dir), ui_port=conf.ui_port,
    )
    return TrackerClient(tracker, keep_alive_s=conf.keep_alive_s if sweep_dir is None else 0.0)
