"""Hydra callbacks: a launcher check before any job starts, and one MLflow parent run per sweep.

Before any job starts, the MLflow callback writes `PARENT_FILE` in the sweep's directory saying
the parent run is on its way, and starts the sweep's tracker process (pipeline.tracker_server),
which creates the parent (tagged with the sweep's directory) and writes its id there, or why there
is none, while the launcher starts the jobs. A job's tracker reads that file before it starts its
run, waiting while the parent is on its way, and makes its run a child of the parent; without the
file it looks for the parent in the store by the sweep's directory
(`pipeline.tracking.sweep_parent`). The jobs of this host log through that process. At the end
the process closes the parent (pipeline.sweep_runs). Concurrent first writes to a SQLite store are
serialised by `pipeline.tracking.store_lock`.
"""

from __future__ import annotations

import atexit
import logging
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback

log = logging.getLogger(__name__)


class LaunchCheckCallback(Callback):
    """Resolves the launcher's config before Hydra instantiates it, so a value it cannot take
    (a GPU share for SLURM's whole GPUs) is one `error:` line and exit 2, not a traceback."""

    def on_multirun_start(self, config, **kwargs: Any) -> None:
        from omegaconf import OmegaConf
        from omegaconf.errors import InterpolationResolutionError

        from pipeline.errors import PipelineError

        try:
            OmegaConf.to_container(config.hydra.launcher, resolve=True)
        except InterpolationResolutionError as exc:
            error = exc
            while error is not None and not isinstance(error, PipelineError):  # the resolver's own error
                error = error.__cause__ or error.__context__
            if error is None:
                raise
            import sys

            from pipeline.report import err_console

            err_console.print(f"[bold red]error:[/bold red] {error}", soft_wrap=True)
            sys.exit(error.exit_code)  # SystemExit: Hydra turns a callback's exceptions into warnings


def mlflow_settings(config):
    """The sweep's typed `tracking` settings when its runs log to the engine's MLflow tracker, else None
    (a config error is left to the jobs, which report it)."""
    from omegaconf import OmegaConf

    from pipeline.errors import ConfigError
    from pipeline.trackers import MLFLOW, tracker_target

    if "tracking" not in config:
        return None
    try:
        conf = OmegaConf.to_object(config.tracking)  # its checks run here
        return conf if tracker_target(conf.backend, conf._target_) == MLFLOW else None
    except ConfigError:
        return None


class MlflowSweepCallback(Callback):
    """The sweep's MLflow tracker process (pipeline.tracker_server): it opens the parent run while
    the launcher starts the jobs, logs the jobs of this host, and closes the parent at the end."""

    def __init__(self) -> None:
        self._tracker = None

    def on_multirun_start(self, config, **kwargs: Any) -> None:
        conf = mlflow_settings(config)
        if conf is None:
            return
        from pipeline import tracking as tr
        from pipeline.redact import redact_override
        from pipeline.trackers import sweep_directory
        from pipeline.tracker_server import SweepSpec, SweepTracker

        launch_dir = Path(config.hydra.runtime.cwd)
        uri = conf.uri or tr.default_uri(launch_dir)
        tr.hide_credential_links(uri)
        if tr.is_remote(uri):
            tr.configure_http(conf.timeout_s)
            tr.check_server(uri, conf.timeout_s)
        artifact_root = None if tr.is_remote(uri) else launch_dir / "outputs" / "mlartifacts"
        sweep_dir = sweep_directory(launch_dir, config.hydra.sweep.dir)
        overrides = " ".join(redact_override(o) for o in config.hydra.overrides.task) or "default"
        tr.write_parent_file(sweep_dir, tr.PARENT_PENDING)  # before any job starts: the jobs wait for it
        try:
            self._tracker = SweepTracker.start(SweepSpec(uri, conf.experiment, artifact_root, sweep_dir, overrides))
        except (OSError, RuntimeError) as exc:
            log.error("the sweep's MLflow tracker process could not start (%s); its jobs log without a parent run", exc)
            tr.write_parent_file(sweep_dir, f"{tr.PARENT_FAILED} {exc}")
            return
        atexit.register(self._close_if_open)  # Hydra skips on_multirun_end when a sweep raises

    def __getstate__(self) -> dict:
        """Launchers send Hydra's context, callbacks included, to the jobs: without the process."""
        return {**self.__dict__, "_tracker": None}

    def on_multirun_end(self, config, **kwargs: Any) -> None:
        if self._tracker is not None:
            tracker, self._tracker = self._tracker, None
            tracker.finish(Path(str(config.hydra.sweep.dir)))

    def _close_if_open(self) -> None:
        """At exit after a sweep that raised: leave no parent or child run RUNNING."""
        if self._tracker is not None:
            tracker, self._tracker = self._tracker, None
            tracker.finish(None)
