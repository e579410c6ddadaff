"""MLflow tracking: the only module that imports mlflow (lazily, so start-up stays fast).

One run per Hydra job, a child of the sweep's parent run in a multirun (the job finds it in the store
by the sweep directory, which the sweep callback tags it with); a nested child run per HPO trial. A tracking failure in the middle of a run (a server that dies) does not stop the
fits: later calls are skipped, results stay in the run directory and the failure is reported
when the run ends.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Optional

from pipeline.errors import TrackingError

log = logging.getLogger(__name__)

SWEEP_TAG = "pipeline.sweep"  # "parent" on a sweep's parent run
SWEEP_DIR_TAG = "pipeline.sweep_dir"  # the sweep's directory (absolute) on its parent run
MAX_PARAM_LENGTH = 6000


def default_uri(base_dir: Path) -> str:
    return f"sqlite:///{(base_dir / 'outputs' / 'mlflow.db').resolve()}"


def is_remote(uri: str) -> bool:
    return uri.startswith(("http://", "https://"))


def quiet_mlflow() -> None:
    """MLflow's INFO lines (progress bars, 'Validating input example') drown the run's own output.

    MLflow installs its own handler at import and reads the level from MLFLOW_LOGGING_LEVEL, so the
    variable is set before the import; a user's own setting wins.
    """
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
    logging.getLogger("mlflow").setLevel(os.environ["MLFLOW_LOGGING_LEVEL"].upper())


def hide_credential_links(uri: str) -> bool:
    """MLflow prints 'View run at <tracking uri>' after each run; with user:password@ in the URI it must
    not. True when its links are switched off."""
    if redact_uri(uri) == uri:
        return False
    os.environ["MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"] = "true"
    return True


def check_server(uri: str, timeout_s: float) -> None:
    """Fail in seconds, not minutes of retries, when a tracking server does not answer."""
    import base64
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(uri.rstrip("/") + "/health")
    host = parts.netloc.rpartition("@")[2]  # urllib takes no user:password@ in a URL
    request = urllib.request.Request(urlunsplit(parts._replace(netloc=host)))
    if parts.username is not None:  # user:password@host, as MLflow's basic auth takes it
        token = base64.b64encode(f"{parts.username}:{parts.password or ''}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            if response.status >= 500:
                raise TrackingError(f"tracking.uri={redact_uri(uri)} answers /health with HTTP {response.status}")
    except urllib.error.HTTPError as exc:
        raise TrackingError(f"tracking.uri={redact_uri(uri)} answers /health with HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise TrackingError(
            f"tracking.uri={redact_uri(uri)} does not answer within {timeout_s:g} s ({reason}); start the "
            "server, point tracking.uri at a running one, or run with tracking=none"
        ) from None


def sqlite_path(uri: str) -> Optional[Path]:
    """The database file of a `sqlite:///` store, None for any other store."""
    return Path(uri.removeprefix("sqlite:///")) if uri.startswith("sqlite:///") else None


def check_sqlite_path(uri: str) -> None:
    """A SQLite store needs a file it can create or open: its folder exists or can be made, and
    is writable. Raises TrackingError naming the path otherwise."""
    path = sqlite_path(uri)
    if path is None:
        return
    folder = next((p for p in (path.parent, *path.parent.parents) if p.exists()), None)
    problem = None
    if path.is_dir():
        problem = "is a folder"
    elif folder is not None and not folder.is_dir():
        problem = f"cannot be created: {folder} is a file"
    elif folder is not None and not os.access(folder, os.W_OK | os.X_OK):
        problem = f"cannot be written: {folder} is not writable"
    if problem is not None:
        raise TrackingError(f"tracking.uri={uri}: cannot open the MLflow store: {path} {problem}; point "
                            "tracking.uri at a writable path, or run with tracking=none")


def redact_uri(uri: str) -> str:
    """Hide the password of user:password@host in a URI."""
    from pipeline.redact import redact_uri as _redact

    return _redact(uri)


def configure_http(timeout_s: float) -> None:
    """Bound MLflow's HTTP retries unless the user set them: by default a dead server costs minutes of
    retries per call. A refused connection now fails in seconds; a busy server still gets a minute
    per request (the start-up health check is what enforces tracking.timeout_s)."""
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", str(max(60, int(timeout_s))))
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "3")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")


@contextlib.contextmanager
def store_lock(uri: str):
    """Serialise the first use of a SQLite store across processes: MLflow creates and migrates its
    schema on first use, and concurrent first uses race ('duplicate column', 'database is locked')."""
    path = sqlite_path(uri)
    if path is None:
        yield
        return
    import fcntl

    ready = path.with_name(path.name + ".ready")  # written once the schema exists: later opens need no lock
    if ready.exists():
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
            ready.touch()
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


PARENT_FILE = "mlflow_parent_run"  # in a sweep's directory: the parent run's id, or where it stands
PARENT_PENDING = "pending"
PARENT_FAILED = "failed:"
PARENT_WAIT_S = 120.0  # how long a job waits for the sweep's parent run to be created


def write_parent_file(sweep_dir: Path, text: str) -> None:
    """Say where the sweep's parent run stands, for its jobs: PARENT_PENDING, its run id, or PARENT_FAILED
    and why."""
    from pipeline.store import atomic_write_bytes

    Path(sweep_dir).mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(Path(sweep_dir) / PARENT_FILE, text.encode())


def sweep_parent(uri: str, experiment_id: str, sweep_dir: str, wait_s: float = PARENT_WAIT_S) -> Optional[str]:
    """The id of the sweep's parent run: from the sweep's PARENT_FILE (waiting while it says the parent
    is being created, at most `wait_s`), else the newest parent run tagged with this sweep directory in
    the store, or None."""
    path = Path(sweep_dir) / PARENT_FILE
    deadline = time.monotonic() + wait_s
    while path.exists():
        text = path.read_text().strip()
        if text.startswith(PARENT_FAILED):
            return None
        if text != PARENT_PENDING:
            return text
        if time.monotonic() > deadline:  # the sweep's driver died while creating it: log without a parent
            log.warning("the sweep's MLflow parent run was not created within %g s (%s still says %r); "
                        "this run has no parent", wait_s, path, PARENT_PENDING)
            return None
        time.sleep(0.05)
    import mlflow

    quote = '"' if "'" in sweep_dir else "'"
    found = mlflow.MlflowClient(uri).search_runs(
        [experiment_id], max_results=1, order_by=["attributes.start_time DESC"],
        filter_string=f"tags.`{SWEEP_TAG}` = 'parent' AND tags.`{SWEEP_DIR_TAG}` = {quote}{sweep_dir}{quote}",
    )
    return found[0].info.run_id if found else None


def ensure_experiment(uri: str, name: str, artifact_root: Optional[Path]) -> str:
    """The experiment's id, created once (concurrent creations race, so a lost race is read back)."""
    with store_lock(uri):
        return _ensure_experiment(uri, name, artifact_root)


def _ensure_experiment(uri: str, name: str, artifact_root: Optional[Path]) -> str:
    import mlflow
    from mlflow.exceptions import MlflowException

    client = mlflow.MlflowClient(uri)
    found = client.get_experiment_by_name(name)
    if found is not None:
        return found.experiment_id
    location = artifact_root.resolve().as_uri() if artifact_root is not None else None
    try:  # the kind tag makes the MLflow UI open the experiment on its training runs, not GenAI traces
        return client.create_experiment(name, artifact_location=location,
                                        tags={"mlflow.experimentKind": "custom_model_development"})
    except MlflowException:
        found = client.get_experiment_by_name(name)
        if found is None:
            raise
        return found.experiment_id


def warm_model_logging() -> None:
    """Import MLflow's pyfunc flavour and build its map of installed packages (its requirement check
    reads it, a third of a second) before the first model is logged."""
    try:
        import mlflow.pyfunc  # noqa: F401
        from mlflow.models import signature  # noqa: F401
        from mlflow.utils import requirements_utils

        build_map = getattr(requirements_utils, "_init_modules_to_packages_map", None)
        build_map() if build_map is not None else None
    except Exception as exc:  # noqa: BLE001  (only a head start: logging the model reports real errors)
        log.debug("preparing model logging failed: %s", exc)


class NullTracker:
    """tracking=none: every call does nothing."""

    enabled = False
    run_id: Optional[str] = None
    failure: Optional[str] = None

    def connect(self) -> None:
        """Reach the store before the run starts (called when `enabled`); raise TrackingError if it cannot."""

    def start(self, run_name: str, params: dict, tags: dict) -> None: ...

    def poll(self) -> Optional[str]:
        """The run's id if it has started, without waiting (None if not yet); TrackingError if it
        could not start."""
        return self.run_id

    def log_params(self, params: dict) -> None: ...

    def log_metrics(self, metrics: dict, step: Optional[int] = None) -> None: ...

    def log_history(self, prefix: str, history: dict[str, list[float]]) -> None: ...

    def set_tags(self, tags: dict) -> None: ...

    def log_artifact(self, path: Path, folder: Optional[str] = None) -> None: ...

    def log_predictor(self, name: str, predictor, example) -> Optional[str]: ...

    def log_plots(self, run_dir: Path, data) -> None:
        """Draw the run's plots (`data`: pipeline.plots.RunPlots) into run_dir and log each as an
        artifact; nothing when not `enabled`. A tracker in a process of its own draws them there."""
        if not self.enabled:
            return
        from pipeline import plots

        for path in plots.draw(data, Path(run_dir)):
            self.log_artifact(path)

    def register_model(self, model_uri: str, name: str, alias: str) -> Optional[str]: ...

    def log_datasets(self, summary, locations: dict) -> None: ...

    def log_trial(self, name: str, params: dict, metrics: dict, tags: dict) -> None: ...

    def end(self, status: str) -> None: ...


class MlflowTracker(NullTracker):
    enabled = True

    def __init__(self, uri: str, experiment: str, *, artifact_root: Optional[Path] = None, timeout_s: float = 10,
                 system_metrics: bool = False, log_models: bool = True, system_metrics_interval_s: float = 10.0,
                 sweep_dir: Optional[str] = None):
        self.uri, self.experiment, self.artifact_root = uri, experiment, artifact_root
        self.sweep_dir = sweep_dir  # a job of a sweep: its run becomes a child of the sweep's parent run
        self.server_checked = False  # a remote server's health, checked once per run
        self.timeout_s, self.system_metrics, self.log_models = timeout_s, system_metrics, log_models
        self.system_metrics_interval_s = system_metrics_interval_s
        self.run_id = None
        self.failure = None
        self.print_masked_link = False

    def prepare(self) -> None:
        """What connecting needs before MLflow is imported: its environment, and the checks that
        fail in milliseconds (no mlflow import): a server's health, a SQLite store's folder."""
        quiet_mlflow()
        self.print_masked_link = hide_credential_links(self.uri)
        check_sqlite_path(self.uri)
        if is_remote(self.uri):
            configure_http(self.timeout_s)
            if not self.server_checked:  # the driver checked it before handing this tracker to its process
                check_server(self.uri, self.timeout_s)
                self.server_checked = True

    def connect(self) -> None:
        """Reach the store before any work starts; errors here are TrackingErrors."""
        self.prepare()
        try:
            import mlflow

            mlflow.set_tracking_uri(self.uri)
            self.experiment_id = ensure_experiment(self.uri, self.experiment, self.artifact_root)
        except TrackingError:
            raise
        except Exception as exc:
            raise TrackingError(f"tracking.uri={redact_uri(self.uri)}: cannot open the MLflow store: {exc}") from None

    def start(self, run_name: str, params: dict, tags: dict) -> None:
        import mlflow

        if self.system_metrics:
            mlflow.set_system_metrics_sampling_interval(self.system_metrics_interval_s)
            mlflow.set_system_metrics_samples_before_logging(1)
        try:
            parent = sweep_parent(self.uri, self.experiment_id, self.sweep_dir) if self.sweep_dir else None
            run = mlflow.start_run(
                experiment_id=self.experiment_id, run_name=run_name, tags=tags,
                parent_run_id=parent or None, log_system_metrics=self.system_metrics,
            )
        except Exception as exc:
            raise TrackingError(f"tracking.uri={redact_uri(self.uri)}: cannot start an MLflow run: {exc}") from None
        self.run_id = run.info.run_id
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

    def log_metrics(self, metrics: dict, step: Optional[int] = None) -> None:
        import mlflow

        finite = {k: float(v) for k, v in metrics.items() if v is not None and v == v}
        self._safely("log_metrics", mlflow.log_metrics, finite, step=step)

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

    def set_tags(self, tags: dict) -> None:
        import mlflow

        self._safely("set_tags", mlflow.set_tags, {k: str(v) for k, v in tags.items()})

    def log_artifact(self, path: Path, folder: Optional[str] = None) -> None:
        import mlflow

        if Path(path).exists():
            self._safely("log_artifact", mlflow.log_artifact, str(path), folder)

    def log_predictor(self, name: str, predictor, example) -> Optional[str]:
        """Log a predictor as a pyfunc model (pipeline.tracking_models); returns its model URI.
        `predictor` may come as its ModelPayload already (made where the predictor lives)."""
        if not self.log_models:
            return None
        from pipeline.tracking_models import ModelPayload, log_pyfunc

        payload = predictor if isinstance(predictor, ModelPayload) else ModelPayload.of(predictor, example)
        return self._safely("log_model", log_pyfunc, name, payload)

    def log_plots(self, run_dir: Path, data) -> None:
        self._safely("log_plots", super().log_plots, run_dir, data)

    def register_model(self, model_uri: str, name: str, alias: str) -> Optional[str]:
        from pipeline.tracking_models import register

        if model_uri is None:  # the model could not be logged (the failure says why)
            return None
        return self._safely("register_model", register, model_uri, name, alias)

    def log_datasets(self, summary, locations: dict) -> None:
        """`summary`: pipeline.tracking_datasets.DataSummary, the data's shape without its rows."""
        from pipeline.tracking_datasets import log_datasets

        self._safely("log_inputs", log_datasets, summary, locations)

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

    def end(self, status: str) -> None:
        import mlflow

        if self.run_id is None:
            return
        try:
            mlflow.end_run(status=status)
            if self.print_masked_link:  # in place of MLflow's own link, which would show the credentials
                print(f"View run at: {redact_uri(self.uri).rstrip('/')}/#/experiments/{self.experiment_id}/runs/{self.run_id}")
        except Exception as exc:
            self.failure = self.failure or f"end_run: {type(exc).__name__}: {exc}"
            try:  # leave no active run behind in this process, whatever the server did
                mlflow.end_run(status=status) if mlflow.active_run() else None
            except Exception:
                pass


def mark_orphans(uri: str, run_ids: list[str], status: str = "FAILED") -> None:
    """Close runs left RUNNING by a process that died (used by the sweep callback)."""
    import mlflow

    client = mlflow.MlflowClient(uri)
    for run_id in run_ids:
        try:
            if client.get_run(run_id).info.status == "RUNNING":
                client.set_terminated(run_id, status)
        except Exception:
            continue
