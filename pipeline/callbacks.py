"""Hydra callbacks: a launcher check before any job starts, and one MLflow parent run per sweep.

Before any job starts, the MLflow callback writes the sweep's parent file saying the parent run is
on its way, and starts the sweep's tracker host (pipeline.tracking.sweep_host), which creates the
parent (tagged with the sweep's directory) and writes its id there, or why there is none, while the
launcher starts the jobs. A job's tracker reads that file before it starts its run, waiting while
the parent is on its way, and makes its run a child of the parent; without the file it looks for
the parent in the store by the sweep's directory (pipeline.tracking.sweep). The jobs of this host
log through that host, which closes the parent at the end. The callback takes the store from the
same code as each job (pipeline.tracking.factory.mlflow_store).
"""

from __future__ import annotations

import atexit
import logging
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback

log = logging.getLogger(__name__)


class RunFolderCallback(Callback):
    """The run's (or sweep's) folder checked before Hydra writes into it (pipeline.run_folder), and
    Hydra's own files (.hydra/*.yaml with the whole config, multirun.yaml, pipeline.log) made this
    user's alone: the umask is 0o077 while Hydra writes them, the user's own (closed to group and
    other writes) while the job runs."""

    def __init__(self) -> None:
        self._umask = None

    def _start(self, folder: str, key: str) -> None:
        from pipeline.run_folder import check_run_folder, private_umask
        from pipeline.trusted import UntrustedFile

        try:
            check_run_folder(folder, key)
        except UntrustedFile as exc:  # Hydra turns a callback's exceptions into warnings: exit here
            from pipeline.report import exit_with_error

            exit_with_error(exc)
        self._umask = private_umask()

    def on_run_start(self, config, **kwargs: Any) -> None:
        self._start(config.hydra.run.dir, "hydra.run.dir")

    def on_multirun_start(self, config, **kwargs: Any) -> None:
        self._start(config.hydra.sweep.dir, "hydra.sweep.dir")

    def on_job_start(self, config, **kwargs: Any) -> None:
        import os

        if self._umask is not None:  # Hydra's files are written: the job's own are closed to writes only
            os.umask(self._umask | 0o022)

    def on_job_end(self, config, **kwargs: Any) -> None:
        from pipeline.run_folder import private_umask

        if self._umask is not None:  # the next job's (in this process) .hydra files
            private_umask()


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
            from pipeline.report import exit_with_error

            exit_with_error(error)  # SystemExit: Hydra turns a callback's exceptions into warnings


def mlflow_settings(config):
    """The sweep's typed `tracking` settings when its runs log to the engine's MLflow tracker, else None
    (a config error is left to the jobs, which report it)."""
    from omegaconf import OmegaConf

    from pipeline.config import MLFLOW_TRACKER
    from pipeline.config_checks import check_tracking
    from pipeline.errors import ConfigError

    if "tracking" not in config:
        return None
    try:
        conf = OmegaConf.to_object(config.tracking)
        check_tracking(conf)
        return conf if conf._target_ == MLFLOW_TRACKER else None
    except ConfigError:
        return None


class MlflowSweepCallback(Callback):
    """The sweep's MLflow tracker host (pipeline.tracking.sweep_host): it opens the parent run while
    the launcher starts the jobs, logs the jobs of this host, and closes the parent at the end."""

    def __init__(self) -> None:
        self._tracker = None

    def on_multirun_start(self, config, **kwargs: Any) -> None:
        conf = mlflow_settings(config)
        if conf is None:
            return
        from pipeline.errors import TrackingError
        from pipeline.redact import redact_override
        from pipeline.tracking import factory, sweep
        from pipeline.tracking.sweep_host import SweepHost, SweepSpec

        launch_dir = Path(config.hydra.runtime.cwd)
        store = factory.mlflow_store(conf, launch_dir)
        sweep_dir = sweep.sweep_directory(launch_dir, config.hydra.sweep.dir)
        from omegaconf import OmegaConf

        from pipeline.tracking import naming

        task = list(config.hydra.overrides.task)
        sweeper = OmegaConf.to_container(config.hydra.sweeper, resolve=False)
        objectives = list(config.get("objectives") or ["val_score"])
        name = naming.sweep_name(task, sweeper, objectives)
        overrides = " ".join(redact_override(o) for o in task) or "default"
        sweep.write_parent_file(sweep_dir, sweep.PARENT_PENDING)  # before any job starts: the jobs wait for it
        try:
            store.check()  # a store that cannot be reached: each job says so, and no host is started
            spec = SweepSpec(store, conf.experiment, sweep_dir, name, overrides, conf.ui_port)
            self._tracker = SweepHost.start(spec)
        except (OSError, RuntimeError, TrackingError) as exc:
            log.error("the sweep's MLflow tracker process could not start (%s); its jobs log without a parent run", exc)
            sweep.write_parent_file(sweep_dir, f"{sweep.PARENT_FAILED} {exc}")
            return
        atexit.register(self._close_if_open)  # Hydra skips on_multirun_end when a sweep raises

    def __getstate__(self) -> dict:
        """Launchers send Hydra's context, callbacks included, to the jobs: without the process."""
        return {**self.__dict__, "_tracker": None}

    def on_multirun_end(self, config, **kwargs: Any) -> None:
        if self._tracker is not None:
            tracker, self._tracker = self._tracker, None
            tracker.finish(Path(str(config.hydra.sweep.dir)))
            from pipeline import report

            for line in tracker.closing_lines:  # the parent run's link and the shared view's, as a job's end
                report.console.print(line, soft_wrap=True, highlight=False)

    def _close_if_open(self) -> None:
        """At exit after a sweep that raised: leave no parent or child run RUNNING."""
        if self._tracker is not None:
            tracker, self._tracker = self._tracker, None
            tracker.finish(None)
