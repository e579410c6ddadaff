"""Which tracker a run logs to, built from `tracking._target_` (or the engine's own `tracking.backend`).

The composition root calls the target with keyword arguments `conf` (the typed `tracking` settings),
`launch_dir` (where the run was started) and `sweep_dir` (the sweep's directory when the run is a job
of a multirun, else None). It returns a tracker: an object with the methods of
`pipeline.tracking.NullTracker` (subclass it and set `enabled = True`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

TRACKERS = {"mlflow": "pipeline.trackers.mlflow_tracker", "none": "pipeline.trackers.no_tracker"}
MLFLOW = TRACKERS["mlflow"]


def tracker_target(backend: str, target: Optional[str]) -> str:
    """What `tracking._target_` names, or the engine's tracker `tracking.backend`."""
    from pipeline.targets import target_or_builtin

    return target_or_builtin("tracking.backend", backend, target, TRACKERS)


def sweep_directory(launch_dir: Path, sweep_dir) -> Path:
    """A sweep's directory as its parent run is tagged with and its jobs look it up: absolute."""
    return (Path(launch_dir) / str(sweep_dir)).resolve()


def no_tracker(conf, launch_dir: Path, sweep_dir: Optional[Path] = None):
    """tracking=none: every call does nothing."""
    from pipeline.tracking import NullTracker

    return NullTracker()


def mlflow_tracker(conf, launch_dir: Path, sweep_dir: Optional[Path] = None):
    """One MLflow run, logged from a process of its own or a kept service (tracking.keep_alive_s); in a
    sweep, a child of the sweep's parent run, logged through the sweep's tracker process."""
    from pipeline import tracking
    from pipeline.tracker_process import TrackerProcess

    uri = conf.uri or tracking.default_uri(launch_dir)
    artifact_root = None if tracking.is_remote(uri) else launch_dir / "outputs" / "mlartifacts"
    return TrackerProcess(tracking.MlflowTracker(
        uri, conf.experiment, artifact_root=artifact_root, timeout_s=conf.timeout_s,
        system_metrics=conf.system_metrics, log_models=conf.log_models,
        system_metrics_interval_s=conf.system_metrics_interval_s,
        sweep_dir=None if sweep_dir is None else str(sweep_dir),
    ), keep_alive_s=conf.keep_alive_s if sweep_dir is None else 0.0)  # a sweep's jobs: its own tracker process
