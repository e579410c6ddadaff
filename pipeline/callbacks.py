"""Hydra callbacks: a launcher check before any job starts, and one MLflow parent run per sweep.

The parent run is tagged with the sweep's directory and opened in a thread while the launcher
starts the jobs (importing MLflow and opening the store take seconds). Before any job starts, the
callback writes `PARENT_FILE` in the sweep's directory saying the parent is on its way; the thread
writes the parent's run id there, or why it has none. A job's tracker reads that file before it
starts its run, waiting while the parent is on its way, and makes its run a child of the parent;
without the file it looks for the parent in the store by the sweep's directory
(`pipeline.tracking.sweep_parent`). Concurrent first writes to a SQLite store are serialised by
`pipeline.tracking.store_lock`.
"""

from __future__ import annotations

import atexit
import logging
import threading
from pathlib import Path
from typing import Any, Optional

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
    def __init__(self) -> None:
        self.uri: Optional[str] = None
        self.parent_run_id: Optional[str] = None
        self._opening: Optional[threading.Thread] = None

    def on_multirun_start(self, config, **kwargs: Any) -> None:
        conf = mlflow_settings(config)
        if conf is None:
            return
        from pipeline import tracking as tr
        from pipeline.redact import redact_override
        from pipeline.trackers import sweep_directory

        launch_dir = Path(config.hydra.runtime.cwd)
        self.uri = conf.uri or tr.default_uri(launch_dir)
        tr.quiet_mlflow()
        tr.hide_credential_links(self.uri)
        if tr.is_remote(self.uri):
            tr.configure_http(conf.timeout_s)
            tr.check_server(self.uri, conf.timeout_s)
        artifact_root = None if tr.is_remote(self.uri) else launch_dir / "outputs" / "mlartifacts"
        sweep_dir = sweep_directory(launch_dir, config.hydra.sweep.dir)
        overrides = " ".join(redact_override(o) for o in config.hydra.overrides.task) or "default"
        tr.write_parent_file(sweep_dir, tr.PARENT_PENDING)  # before any job starts: the jobs wait for it
        self._opening = threading.Thread(
            target=self._open_parent, args=(conf.experiment, artifact_root, sweep_dir, overrides),
            name="mlflow-sweep-parent", daemon=True,
        )
        self._opening.start()
        atexit.register(self._close_if_open)  # Hydra skips on_multirun_end when a sweep raises

    def _open_parent(self, experiment: str, artifact_root: Optional[Path], sweep_dir: Path, overrides: str) -> None:
        """Create the parent run and write its id to the sweep's PARENT_FILE (or why there is none)."""
        from pipeline import tracking as tr

        try:
            import mlflow

            experiment_id = tr.ensure_experiment(self.uri, experiment, artifact_root)
            run = mlflow.MlflowClient(self.uri).create_run(
                experiment_id, run_name=f"sweep {overrides}",
                tags={tr.SWEEP_DIR_TAG: str(sweep_dir), tr.SWEEP_TAG: "parent", "pipeline.overrides": overrides},
            )
        except Exception as exc:  # noqa: BLE001  (each job reports the store's error from its own tracker)
            message = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            from pipeline.redact import redact_text

            message = redact_text(message)
            log.error("the sweep's MLflow parent run could not be created (%s); its jobs log without one", message)
            tr.write_parent_file(sweep_dir, f"{tr.PARENT_FAILED} {message}")
            return
        self.parent_run_id = run.info.run_id
        tr.write_parent_file(sweep_dir, self.parent_run_id)
        log.info("MLflow parent run %s for this sweep", self.parent_run_id)

    def __getstate__(self) -> dict:
        """Launchers send Hydra's context, callbacks included, to the jobs: without the thread."""
        return {**self.__dict__, "_opening": None}

    def _wait_for_parent(self) -> None:
        if self._opening is not None:
            self._opening.join()
            self._opening = None

    def on_multirun_end(self, config, **kwargs: Any) -> None:
        self._wait_for_parent()
        if self.parent_run_id is None:
            return
        import mlflow

        client = mlflow.MlflowClient(self.uri)
        children = self._close_children(client)
        failed = any(c.info.status != "FINISHED" for c in children)
        self._summarise(client, children)
        self._tag_front(client, children, Path(str(config.hydra.sweep.dir)))
        client.set_terminated(self.parent_run_id, "FAILED" if failed else "FINISHED")
        self.parent_run_id = None

    def _close_if_open(self) -> None:
        """At exit after a sweep that raised: leave no parent or child run RUNNING."""
        self._wait_for_parent()
        if self.parent_run_id is None:
            return
        try:
            import mlflow

            client = mlflow.MlflowClient(self.uri)
            self._close_children(client)
            client.set_terminated(self.parent_run_id, "FAILED")
        except Exception as exc:  # at exit there is no one left to raise to
            log.warning("could not close the sweep's MLflow parent run %s: %s", self.parent_run_id, exc)
        self.parent_run_id = None

    def _close_children(self, client) -> list:
        """The sweep's job runs, with any a dead job left RUNNING marked FAILED."""
        from pipeline import tracking as tr

        children = client.search_runs(
            [client.get_run(self.parent_run_id).info.experiment_id],
            filter_string=f"tags.mlflow.parentRunId = '{self.parent_run_id}'",
        )
        tr.mark_orphans(self.uri, [c.info.run_id for c in children])
        return children

    def _summarise(self, client, children) -> None:
        """The sweep's best job on the parent run: best/val_<metric>, best/model, best/job."""
        scored = []
        for child in children:
            metric = child.data.tags.get("pipeline.eval_metric")
            value = child.data.metrics.get(f"best/val_{metric}") if metric else None
            if value is not None:
                scored.append((metric, value, child))
        if not scored:
            return
        from pipeline.metrics import METRICS

        metric = scored[0][0]
        sign = 1 if METRICS[metric].greater_is_better else -1
        _, value, child = max(scored, key=lambda s: sign * s[1])
        client.log_metric(self.parent_run_id, f"best/val_{metric}", value)
        client.set_tag(self.parent_run_id, "best/job", child.info.run_name)
        client.set_tag(self.parent_run_id, "best/model", child.data.tags.get("best/model", ""))

    def _tag_front(self, client, children, sweep_dir: Path) -> None:
        """A multi-objective search's Pareto front (the `solutions` of optimization_results.yaml): each
        member's run gets `pipeline.pareto_front=true`, the parent run the list of their jobs."""
        path = sweep_dir / "optimization_results.yaml"
        if not path.exists():
            return
        import yaml

        solutions = (yaml.safe_load(path.read_text()) or {}).get("solutions") or []
        # members from earlier sessions of a stored study ran in other sweeps
        jobs = {str(s["job"]) for s in solutions if "job" in s and Path(str(s.get("sweep_dir"))) == sweep_dir}
        for child in children:
            if child.data.tags.get("pipeline.job_num") in jobs:
                client.set_tag(child.info.run_id, "pipeline.pareto_front", "true")
        if jobs:
            client.set_tag(self.parent_run_id, "pipeline.pareto_front_jobs", ",".join(sorted(jobs, key=int)))
