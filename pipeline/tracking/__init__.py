"""Tracking: one MLflow run per job, logged outside the run's process.

- `base`: what a tracker is (NullTracker: tracking=none); `factory`: which tracker a run gets.
- `mlflow_run`: the tracker that talks to MLflow; `models`, `datasets`: what it logs of models and data.
- `store`: the store, its URI and the checks made at once; `sweep`: a sweep's parent run.
- `client`: the run's side, forwarding calls by `protocol` to a host: a process of the run's own,
  or a shared `host` (the sweep's, `sweep_host`; or the one kept between runs, `service`), whose
  files and sockets `secure` checks.

Importing this package imports none of MLflow.
"""

from pipeline.tracking.base import NullTracker
from pipeline.tracking.store import default_uri, quiet_mlflow

__all__ = ["NullTracker", "default_uri", "quiet_mlflow"]
