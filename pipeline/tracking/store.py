"""The MLflow store a run logs to: its URI, where its artifacts go, and what can be checked at once.

The root (pipeline.tracking.factory) and the sweep's callback (pipeline.callbacks) both take the
store from `Store.of`, so a job and its sweep's parent run always agree on it. Nothing here imports
MLflow at module level: start-up stays fast.
"""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from pipeline.errors import TrackingError
from pipeline.redact import redact_uri

log = logging.getLogger(__name__)

SWEEP_TAG = "pipeline.sweep"  # "parent" on a sweep's parent run
SWEEP_DIR_TAG = "pipeline.sweep_dir"  # the sweep's directory (absolute) on its parent run


@dataclass(frozen=True)
class Store:
    """An MLflow store: its URI, the artifact root of a local one (None for a server), how long a
    server may take to answer."""

    uri: str
    artifact_root: Optional[Path] = None
    timeout_s: float = 10.0

    @classmethod
    def of(cls, uri: Optional[str], launch_dir: Path, timeout_s: float = 10.0) -> "Store":
        """`tracking.uri` (null: outputs/mlflow.db under the launch directory), with local stores'
        artifacts in outputs/mlartifacts there."""
        uri = uri or default_uri(launch_dir)
        return cls(uri, None if is_remote(uri) else Path(launch_dir) / "outputs" / "mlartifacts", timeout_s)

    @property
    def remote(self) -> bool:
        return is_remote(self.uri)

    def quiet(self) -> None:
        quiet_mlflow()

    def check(self, server: bool = True) -> None:
        """What fails in milliseconds, without importing MLflow: a SQLite store's folder, a server's
        health (unless `server` is False: checked already), with MLflow's HTTP retries bounded and its
        environment set."""
        quiet_mlflow()
        check_sqlite_path(self.uri)
        check_store_trusted(self.uri, self.artifact_root)
        if self.remote:
            configure_http(self.timeout_s)
            if server:
                check_server(self.uri, self.timeout_s)


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
    # MLflow's own "View run at <uri>" would show a URI's credentials, and only for servers: the run's
    # closing lines give the link, masked, for every store (MlflowTracker.closing_lines)
    os.environ["MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"] = "true"
    logging.getLogger("mlflow").setLevel(os.environ["MLFLOW_LOGGING_LEVEL"].upper())


def check_server(uri: str, timeout_s: float) -> None:
    """Fail in seconds, not minutes of retries, when a tracking server does not answer."""
    import base64
    import urllib.error
    import urllib.request  # with http.client and ssl: 10 ms that a run without a server does not spend
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(uri.rstrip("/") + "/health")
    if "@" in uri.partition("://")[2].split("/", 1)[0] and "@" not in parts.netloc:  # a # or ? cut the netloc
        raise TrackingError(f"tracking.uri={redact_uri(uri)} is not a URL its server can be reached at: its "
                            "password holds a character that ends the host part (#, ?); percent-encode it "
                            "(# as %23, ? as %3F), or give the credentials in MLFLOW_TRACKING_USERNAME and "
                            "MLFLOW_TRACKING_PASSWORD")
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
    except ValueError:  # http.client's InvalidURL quotes the URL's parts: the message is ours
        raise TrackingError(f"tracking.uri={redact_uri(uri)} is not a valid URL; percent-encode reserved "
                            "characters in its user and password") from None
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


STORE_SIDE_FILES = ("-journal", "-wal", "-shm", ".lock", ".ready")


def check_store_trusted(uri: str, artifact_root: Optional[Path] = None) -> None:
    """A local store is trusted like a pickle (pipeline.trusted.check_owned): its folder, its database
    and the files SQLite and the engine keep beside it, and its artifact folder, must be this user's (or
    root's), never symbolic links, and closed to others' writes (a folder may be shared if sticky).
    Another user who made or can change them could point a run's model at code of their choosing."""
    from pipeline.trusted import check_owned

    path = sqlite_path(uri)
    if uri.startswith("file:") or "://" not in uri:  # a file store: a folder of MLflow's files
        folder = Path(uri.removeprefix("file://").removeprefix("file:"))
        check_owned(folder.parent, "the folder of the MLflow store", folder=True)
        check_owned(folder, "the MLflow store", folder=True)
    if path is not None:
        check_owned(path.parent, "the MLflow store's folder", folder=True)
        check_owned(path, "the MLflow store")
        for suffix in STORE_SIDE_FILES:
            check_owned(path.with_name(path.name + suffix), "a file of the MLflow store")
    if artifact_root is not None:
        check_owned(artifact_root.parent, "the folder of the MLflow artifact store", folder=True)
        check_owned(artifact_root, "the MLflow artifact store", folder=True)


def _open_marker(path: Path) -> int:
    """A descriptor of the lock or marker file `path`, created if missing (0600), never through a
    symbolic link and never truncated: a link planted there must not empty the file it points at."""
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)


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
    schema on first use, and concurrent first uses race ('duplicate column', 'database is locked').
    A new store starts as a copy of an empty one (pipeline.tracking.empty_store)."""
    path = sqlite_path(uri)
    if path is None:
        yield
        return
    import fcntl

    ready = path.with_name(path.name + ".ready")  # written once the schema exists: later opens need no lock
    if ready.exists():
        yield
        return
    from pipeline.trusted import make_folders

    make_folders(path.parent)
    check_store_trusted(uri)
    fd = _open_marker(path.with_name(path.name + ".lock"))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        from pipeline.tracking.empty_store import seed

        seed(path)  # a new store: a copy of an empty one, so MLflow need not build the schema
        yield
        os.close(_open_marker(ready))
    finally:
        os.close(fd)  # closing releases the lock


def ensure_experiment(uri: str, name: str, artifact_root: Optional[Path]) -> str:
    """The experiment's id, created once (concurrent creations race, so a lost race is read back)."""
    with store_lock(uri):
        return _ensure_experiment(uri, name, artifact_root)


EXPERIMENT_KIND = "mlflow.experimentKind"  # MLflow's UI opens an experiment on the page its kind says
TRAINING = "custom_model_development"  # the training runs, not the GenAI overview


def _ensure_experiment(uri: str, name: str, artifact_root: Optional[Path]) -> str:
    import mlflow
    from mlflow.exceptions import MlflowException

    client = mlflow.MlflowClient(uri)
    found = client.get_experiment_by_name(name)
    if found is None:
        location = artifact_root.resolve().as_uri() if artifact_root is not None else None
        try:
            return client.create_experiment(name, artifact_location=location, tags={EXPERIMENT_KIND: TRAINING})
        except MlflowException:
            found = client.get_experiment_by_name(name)
            if found is None:
                raise
    if EXPERIMENT_KIND not in found.tags:  # made before the engine tagged its experiments, or by hand
        client.set_experiment_tag(found.experiment_id, EXPERIMENT_KIND, TRAINING)
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
