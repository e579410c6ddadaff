"""One MLflow run: the tracker that talks to MLflow (imported lazily, so start-up stays fast).

One run per Hydra job, a child of the sweep's parent run in a multirun (pipeline.tracking.sweep); a
nested child run per HPO trial. A tracking failure in the middle of a run (a server that dies) does
not stop the fits: later calls are skipped, results stay in the run directory and the failure is
reported when the run ends. A tracker host (pipeline.tracking.client) serves it, outside the
run's own process.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, Optional

from pipeline.errors import TrackingError
from pipeline.redact import redact_uri
from pipeline.tracking.base import NullTracker
from pipeline.tracking.store import Store, ensure_experiment, warm_model_logging
from pipeline.tracking.sweep import sweep_parent

log = logging.getLogger(__name__)

MAX_PARAM_LENGTH = 6000


class MlflowTracker(NullTracker):
    enabled = True
    dated = True  # start and end take the job's own times (start_time, end_time)

    def __init__(self, store: Store, experiment: str, *, system_metrics: bool = False, log_models: bool = True,
                 system_metrics_interval_s: float = 10.0, sweep_dir: Optional[str] = None,
                 ui_port: int = 5000):
        self.store, self.experiment, self.ui_port = store, experiment, ui_port
        self.sweep_dir = sweep_dir  # a job of a sweep: its run becomes a child of the sweep's parent run
        self.server_checked = False  # a remote server's health, checked once per run
        self.system_metrics, self.log_models = system_metrics, log_models
        self.system_metrics_interval_s = system_metrics_interval_s
        self.run_id = None
        self.failure = None
        self.best_model_uri: Optional[str] = None
        self.datasets: dict[str, tuple[str, str]] = {}  # context -> (name, digest) of its dataset inputs
        self.source: dict[str, str] = {}  # the run's mlflow.source.* tags, its models' too
        self.params: dict[str, str] = {}  # the run's params as logged, its models' too

    def prepare(self) -> None:
        """What connecting needs before MLflow is imported: its environment, and the checks that
        fail in milliseconds (no mlflow import): a server's health, a SQLite store's folder."""
        # the driver checks a server before handing this tracker to its host, which need not again
        self.store.check(server=not self.server_checked)
        self.server_checked = True

    @property
    def uri(self) -> str:
        return self.store.uri

    def connect(self) -> None:
        """Reach the store before any work starts; errors here are TrackingErrors."""
        self.prepare()
        try:
            import mlflow

            mlflow.set_tracking_uri(self.uri)
            self.experiment_id = ensure_experiment(self.uri, self.experiment, self.store.artifact_root)
        except TrackingError:
            raise
        except Exception as exc:
            raise TrackingError(f"tracking.uri={redact_uri(self.uri)}: cannot open the MLflow store: {exc}") from None

    def start(self, run_name: str, params: dict, tags: dict, start_time: Optional[int] = None) -> None:
        """Start the run, dated `start_time` (ms; the job's own clock, not when a shared host got to it),
        with MLflow's context tags (user, source, git) under `tags`, which win."""
        import mlflow
        from mlflow.tracking.context.registry import resolve_tags

        if self.system_metrics:
            mlflow.set_system_metrics_sampling_interval(self.system_metrics_interval_s)
            mlflow.set_system_metrics_samples_before_logging(1)
        try:
            parent = sweep_parent(self.uri, self.experiment_id, self.sweep_dir) if self.sweep_dir else None
            resolved = resolve_tags({**tags, **({"mlflow.parentRunId": parent} if parent else {})})
            created = mlflow.MlflowClient(self.uri).create_run(
                self.experiment_id, start_time=start_time or int(time.time() * 1000), tags=resolved,
                run_name=run_name,
            )
            run = mlflow.start_run(run_id=created.info.run_id, log_system_metrics=self.system_metrics)
        except Exception as exc:
            raise TrackingError(f"tracking.uri={redact_uri(self.uri)}: cannot start an MLflow run: {exc}") from None
        self.run_id = run.info.run_id
        self.source = {k: str(v) for k, v in tags.items() if k.startswith("mlflow.source.")}
        self.log_params(params)

    def prepare_model_logging(self) -> None:
        """warm_model_logging(), where this run logs models."""
        if self.log_models:
            warm_model_logging()

    def _safely(self, what: str, fn, *args, **kwargs) -> Any:
        if self.failure is not None or self.run_id is None:
            return None
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # a dead server must not stop the fits
            self.failure = f"{what}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            log.error("MLflow tracking failed (%s); the run goes on and keeps its results on disk", self.failure)
            return None

    def log_params(self, params: dict) -> None:
        import mlflow

        clean = {}
        for key, value in params.items():
            text = str(value)
            if len(text) > MAX_PARAM_LENGTH:
                log.warning("param %s is %d characters long; logged truncated to %d", key, len(text), MAX_PARAM_LENGTH)
                text = text[: MAX_PARAM_LENGTH - 3] + "..."
            clean[key] = text
        self._safely("log_params", mlflow.log_params, clean)
        self.params.update(clean)

    def log_metrics(self, metrics: dict, step: Optional[int] = None) -> None:
        """The run's metrics, linked to none of its logged models (MLflow's `log_metrics` would link
        them to every model the run logged at the same step: each model would show the ensemble's)."""
        import mlflow
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        finite = [Metric(k, float(v), now, step or 0) for k, v in metrics.items() if v is not None and v == v]
        if finite:
            self._safely("log_metrics", mlflow.MlflowClient(self.uri).log_batch, self.run_id, metrics=finite)

    def log_history(self, prefix: str, history: dict[str, list[float]]) -> None:
        """Per-epoch (or per-round) curves, step = epoch, in one batch."""
        import mlflow
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        entries = [
            Metric(f"{prefix}/{name}", float(v), now, step)
            for name, values in history.items()
            for step, v in enumerate(values)
            if v == v
        ]
        client = mlflow.MlflowClient(self.uri)
        for start in range(0, len(entries), 1000):
            self._safely("log_batch", client.log_batch, self.run_id, metrics=entries[start : start + 1000])

    def log_artifact(self, path: Path, folder: Optional[str] = None) -> None:
        import mlflow

        if Path(path).exists():
            self._safely("log_artifact", mlflow.log_artifact, str(path), folder)

    def log_predictor(self, name: str, predictor, example, metrics: Optional[dict] = None,
                      pickled: Optional[bytes] = None) -> Optional[str]:
        """Log a predictor as a pyfunc model (pipeline.tracking.models) with its own `metrics`, each
        linked to the split it was scored on; returns its model URI. `predictor` may come as its
        ModelPayload already (made where the predictor lives); `pickled`: its pickle, made by a save."""
        if not self.log_models:
            return None
        from pipeline.tracking.models import ModelPayload, log_model_metrics, log_pyfunc

        payload = (predictor if isinstance(predictor, ModelPayload)
                   else ModelPayload.of(predictor, example, pickled))
        uri = self._safely("log_model", log_pyfunc, name, payload, self.source, self.params)
        if uri is not None and metrics:
            self._safely("log_model_metrics", log_model_metrics, self.uri, self.run_id, uri, metrics,
                         self.datasets)
        return uri

    def log_plots(self, run_dir: Path, data) -> None:
        self._safely("log_plots", super().log_plots, run_dir, data)

    def register_model(self, model_uri: str, name: str, alias: str) -> Optional[str]:
        from pipeline.tracking.models import register

        if model_uri is None:  # the model could not be logged (the failure says why)
            return None
        return self._safely("register_model", register, model_uri, name, alias)

    def log_datasets(self, summary, locations: dict) -> None:
        """`summary`: pipeline.tracking.datasets.DataSummary, the data's shape without its rows."""
        from pipeline.tracking.datasets import log_datasets

        self.datasets = self._safely("log_inputs", log_datasets, summary, locations) or {}

    def log_trial(self, name: str, params: dict, metrics: dict, tags: dict) -> None:
        import mlflow

        def child():
            client = mlflow.MlflowClient(self.uri)
            run = client.create_run(
                self.experiment_id, run_name=name,
                tags={"mlflow.parentRunId": self.run_id, **{k: str(v) for k, v in tags.items()}},
            )
            from mlflow.entities import Metric, Param

            now = int(time.time() * 1000)
            client.log_batch(
                run.info.run_id,
                metrics=[Metric(k, float(v), now, 0) for k, v in metrics.items() if v == v],
                params=[Param(k, str(v)[:MAX_PARAM_LENGTH]) for k, v in params.items()],
            )
            client.set_terminated(run.info.run_id, "FINISHED")

        self._safely("log_trial", child)

    def share_view(self, state: dict) -> None:
        """Make `state` (pipeline.tracking.view.view_state) the experiment's shared view in MLflow's UI."""
        import mlflow

        from pipeline.tracking.view import share

        self._safely("share_view", share, mlflow.MlflowClient(self.uri), self.experiment_id, state)

    def set_tags(self, tags: dict) -> None:
        import mlflow

        if "best/model_uri" in tags:
            self.best_model_uri = tags["best/model_uri"]
        self._safely("set_tags", mlflow.set_tags, {k: str(v) for k, v in tags.items()})

    def end(self, status: str, end_time: Optional[int] = None) -> list[str]:
        """End the run, dated `end_time` (ms; the job's own clock); returns closing_lines() for the
        run's console (this may be another process)."""
        import mlflow

        if self.run_id is None:
            return []
        try:
            mlflow.end_run(status=status)
            if end_time is not None:  # end_run dates it now, after the host logged what the run sent
                mlflow.MlflowClient(self.uri).set_terminated(self.run_id, status, end_time=end_time)
        except Exception as exc:
            self.failure = self.failure or f"end_run: {type(exc).__name__}: {exc}"
            try:  # leave no active run behind in this process, whatever the server did
                mlflow.end_run(status=status) if mlflow.active_run() else None
            except Exception:
                pass
        return self.closing_lines()

    def closing_lines(self) -> list[str]:
        """The run's id and its link in MLflow's UI, then the experiment's shared view (its runs, the main
        metric sorted: pipeline.tracking.view), for a local store after the `mlflow ui` command that
        serves it; and the best model's URI with the command that serves it."""
        from pipeline.tracking import view

        if self.run_id is None:
            return []
        base = view.ui_base(self.uri, self.store.remote, self.ui_port)
        serve = view.serve_command(self.uri, self.ui_port)
        lines = [] if self.store.remote else [f"see the runs with `{serve}`, then:"]
        lines += [f"MLflow run {self.run_id}: {view.run_link(base, self.experiment_id, self.run_id)}",
                  f"all runs, best first: {view.runs_link(base, self.experiment_id)}"]
        if self.best_model_uri:
            lines.append(f"best model {self.best_model_uri}: serve it with `MLFLOW_TRACKING_URI={redact_uri(self.uri)} "
                         f"mlflow models serve -m {self.best_model_uri} -p 5001 --env-manager local`")
        return lines
