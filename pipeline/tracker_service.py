"""A tracker process kept between runs (`tracking.keep_alive_s`): MLflow imported, stores open.

A run's own tracker process spends about three seconds of a core importing MLflow, opening the store
and preparing model logging before it logs anything; that is most of what tracking costs a short
run. The first tracked run started in a directory (with this engine, this interpreter and this
environment) starts a service instead, in a session of its own so that it outlives the run: it
listens on a Unix socket in a private runtime folder, and speaks the protocol a run's own process
speaks (pipeline.tracker_process.serve_run), one run per connection, each in a thread
(pipeline.tracker_server). The next runs connect to it and find MLflow warm. It exits after
`keep_alive_s` seconds without a run, when the next service would make more than MAX_SERVICES, or
when told to (`python -m pipeline.tracker_service --stop`).

Whatever a run could see differently is part of the service's key, and a run whose key differs
starts a service of its own: the store, the launch directory (relative store paths), the interpreter, the
environment (credentials, MLflow's settings) and the engine's and MLflow's installed files. A run
that cannot reach a service (no private folder, a service busy with MAX_RUNS runs, one that does not
start) logs through a process of its own, as with `keep_alive_s=0`; so do the jobs of a sweep (the
sweep's tracker process serves them) and of a cluster scheduler (CLUSTER_JOB_ENV).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Iterator, Optional

from pipeline import tracker_server
from pipeline.tracker_server import RETIRE

# A Unix socket's path holds at most 107 bytes on Linux: the folder, a slash, the key (20) and ".sock".
MAX_FOLDER_BYTES = 80
MAX_SERVICES = 2  # per user: each holds MLflow's interpreter (about 250 MB) while it waits
START_TIMEOUT_S = 30.0  # until a new service listens (it has not imported MLflow yet)
# Set in a job of a cluster scheduler: the next job runs in another allocation, with another
# environment, and a service would only outlive the job's work inside its allocation.
CLUSTER_JOB_ENV = ("SLURM_JOB_ID", "SUBMITIT_EXECUTOR")
_started: list = []  # the services this process started (see _start)
# The environment a tracker's work depends on: MLflow's settings, the artifact stores' credentials
# and endpoints, git (MLflow tags the commit), proxies and certificates, where Python imports from.
# The rest (terminals, shells, what libraries set for themselves on import) is not part of the key.
KEY_ENV_PREFIXES = ("MLFLOW_", "AWS_", "AZURE_", "GOOGLE_", "GCS_", "CLOUDSDK_", "DATABRICKS_", "HADOOP_",
                    "ARROW_", "GIT_", "OTEL_")
KEY_ENV_NAMES = frozenset({"HOME", "USER", "PATH", "TMPDIR", "TZ", "VIRTUAL_ENV", "CONDA_PREFIX", "PYTHONPATH",
                           "PYTHONHOME", "PYTHONUSERBASE", "PYTHONNOUSERSITE", "SSL_CERT_FILE", "SSL_CERT_DIR",
                           "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY",
                           "ALL_PROXY"})


def _keyed(name: str) -> bool:
    upper = name.upper()  # proxies are often set in lower case
    return upper in KEY_ENV_NAMES or upper.startswith(KEY_ENV_PREFIXES)


def runtime_dir() -> Optional[Path]:
    """This user's private folder for services (0700, owned by this user), or None if there is none
    to be had: a folder others can write to could hand a run someone else's socket.
    $XDG_RUNTIME_DIR/pipeline, else (unset, or too long for a socket's path) /tmp/pipeline-<uid>."""
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    folder = Path(xdg) / "pipeline" if xdg else None
    if folder is None or len(os.fsencode(folder)) > MAX_FOLDER_BYTES:
        folder = Path("/tmp") / f"pipeline-{os.getuid()}"
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = folder.stat()
    except OSError:
        return None
    if st.st_uid != os.getuid() or st.st_mode & 0o077:
        return None
    return folder


def service_key(uri: str, cwd: Optional[Path] = None, environ: Optional[dict] = None) -> str:
    """What a run shares with the service that may serve it, as a short hash: the store's URI (MLflow
    keeps one per process), the launch directory, the interpreter, the environment a tracker depends
    on (KEY_ENV_PREFIXES, KEY_ENV_NAMES) and the installed files of the engine and MLflow (their sizes
    and modification times: an upgrade or an edit starts a new service)."""
    import importlib.util

    environ = os.environ if environ is None else environ
    digest = hashlib.sha256()
    for part in (uri, str(cwd or Path.cwd()), sys.executable, sys.version):
        digest.update(part.encode() + b"\0")
    for name in sorted(filter(_keyed, environ)):
        digest.update(f"{name}={environ[name]}".encode() + b"\0")
    engine = Path(__file__).resolve().parent
    spec = importlib.util.find_spec("mlflow")
    files = sorted(engine.rglob("*.py")) + ([Path(spec.origin)] if spec and spec.origin else [])
    for path in files:
        try:
            st = path.stat()
        except OSError:
            continue
        digest.update(f"{path}:{st.st_size}:{st.st_mtime_ns}".encode() + b"\0")
    return digest.hexdigest()[:20]


def connect(uri: str, keep_alive_s: float) -> tuple[Optional[object], bool]:
    """(a connection to the service for this run's store `uri` that will serve one run, whether this call started the
    service: it warms up only after this run); (None, False) where the run must log through a
    process of its own."""
    if any(os.environ.get(name) for name in CLUSTER_JOB_ENV):
        return None, False
    folder = runtime_dir()
    if folder is None:
        return None, False
    key = service_key(uri)
    store = _store_file(uri)
    started = False
    try:
        with _locked(folder / f"{key}.lock"):
            conn = _connect(folder / f"{key}.json", _identity(store))
            if conn is None and not _find(folder, key):
                _retire_oldest(folder, keep=MAX_SERVICES - 1)
                started = _start(folder, key, keep_alive_s, store)
                conn = _connect(folder / f"{key}.json", None) if started else None  # it has opened no store yet
    except OSError:
        return None, False
    return conn, started and conn is not None


def service_pids(folder: Path) -> list[int]:
    """The process ids of the services with a key file in `folder`."""
    pids = []
    for path in folder.glob("*.json"):
        found = _read(path)
        if found is not None and isinstance(found.get("pid"), int):
            pids.append(found["pid"])
    return pids


def stop_all(folder: Optional[Path] = None) -> list[int]:
    """Ask every service of this user to exit once its runs end (one serving MAX_RUNS runs loses its
    key file and idles out); returns their process ids."""
    folder = folder or runtime_dir()
    if folder is None:
        return []
    pids = service_pids(folder)
    for path in folder.glob("*.json"):
        _retire(path)
    return pids


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One run at a time finds or starts a service for a key (two would start two)."""
    import fcntl

    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _read(path: Path) -> Optional[dict]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _store_file(uri: str) -> Optional[Path]:
    """A SQLite store's database file, absolute; None for other stores."""
    from pipeline.tracking import sqlite_path

    path = sqlite_path(uri)
    return None if path is None else Path.cwd() / path


def _identity(path: Optional[Path]) -> Optional[list]:
    """Which file `path` is now (device and inode), None if there is none: a store deleted (or
    replaced) since a service opened it is another file, which that service's pooled connections
    do not reach (they write to the deleted one)."""
    try:
        st = path.stat() if path is not None else None
    except OSError:
        return None
    return None if st is None else [st.st_dev, st.st_ino]


def _connect(path: Path, store: Optional[list]):
    """A connection the service at `path` accepted (it answered "ok"), or None: no service, a file
    left by one that died (removed), a service that opened another store file than `store` (the
    one the run will use; retired), or a service serving MAX_RUNS runs."""
    found = _read(path)
    if found is None:
        return None
    if found.get("store") is not None and found["store"] != store:
        _retire(path)
        return None
    conn, reached = tracker_server.dial(found)
    if not reached and _read(path) == found:  # the service has exited: its file is stale
        path.unlink(missing_ok=True)
    return conn


def _find(folder: Path, key: str) -> bool:
    """Whether a service of this key is alive (a busy one counts: the run logs on its own)."""
    found = _read(folder / f"{key}.json")
    return found is not None and _alive(found.get("pid"))


def _alive(pid) -> bool:
    try:
        os.kill(int(pid), 0)
    except (OSError, TypeError, ValueError):
        return False
    return True


def _retire_oldest(folder: Path, keep: int) -> None:
    """Retire the services least recently started until `keep` are left."""
    services = sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime if p.exists() else 0)
    for path in services[: max(0, len(services) - keep)]:
        _retire(path)


def _retire(path: Path) -> bool:
    """Ask the service at `path` to exit once its runs end (its file goes at once)."""
    found = _read(path)
    if found is None:
        return False
    path.unlink(missing_ok=True)  # no run connects to it from now on
    conn, _ = tracker_server.dial(found)
    if conn is None:  # it has exited already, or it serves MAX_RUNS runs: it will idle out
        return False
    try:
        conn.send(RETIRE)
    except OSError:
        return False
    finally:
        conn.close()
    return True


def _start(folder: Path, key: str, keep_alive_s: float, store: Optional[Path]) -> bool:
    """Start a service in a session of its own (a Ctrl-C of the run does not reach it) and wait until
    it listens; False if it did not."""
    import select

    log = os.fdopen(os.open(folder / f"{key}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "ab")
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pipeline.tracker_service", "--serve", str(folder), key, repr(float(keep_alive_s)),
             str(store or "")],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log, start_new_session=True, close_fds=True,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
        )
    finally:
        log.close()
    _started.append(proc)  # it outlives this process: never garbage here (Popen warns of a live child)
    ready, _, _ = select.select([proc.stdout], [], [], START_TIMEOUT_S)
    line = proc.stdout.readline() if ready else b""
    proc.stdout.close()
    if line.strip() != b"ready":
        if proc.poll() is None:
            proc.kill()
        return False
    return True


def serve(folder: Path, key: str, keep_alive_s: float, store: Optional[Path] = None) -> None:
    """The service: listen, say "ready" on stdout, serve runs (warming MLflow and matplotlib up once
    the first has ended) until `keep_alive_s` pass without one or it is retired, then exit. Once
    the first run has opened the SQLite `store`, its key file says which file that is."""
    import secrets
    from multiprocessing.connection import Listener

    from pipeline import tracker_process
    from pipeline.store import atomic_write_bytes

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.nice(tracker_process.NICENESS)  # below the fits of the runs it serves, as a run's own process
    socket_path = folder / f"{key}.sock"
    socket_path.unlink(missing_ok=True)  # left by a service that was killed (the caller holds the lock)
    authkey = secrets.token_bytes(32)
    listener = Listener(str(socket_path), family="AF_UNIX", authkey=authkey)
    info = {"pid": os.getpid(), "address": str(socket_path), "authkey": authkey.hex(),
            "cwd": os.getcwd(), "keep_alive_s": keep_alive_s}
    server_file = folder / f"{key}.json"
    atomic_write_bytes(server_file, json.dumps(info).encode(), mode=0o600)
    print("ready", flush=True)
    os.dup2(2, 1)  # the caller has stopped reading: MLflow's prints go to the service's log
    server = tracker_server._Server(listener)
    threading.Thread(target=server.accept_all, name="accept", daemon=True).start()
    warm = False
    while not server.retired.wait(1.0 if warm else 0.1):
        idle_s = server.idle_s()
        if idle_s >= keep_alive_s:
            break
        if not warm and idle_s > 0:  # after the first run, which the run that started this paces
            if store is not None and _read(server_file) == info:
                info = {**info, "store": _identity(store)}
                atomic_write_bytes(server_file, json.dumps(info).encode(), mode=0o600)
            warm_up()
            warm = True
    if _read(server_file) == info:
        server_file.unlink(missing_ok=True)
    server.stop(tracker_server.FINISH_TIMEOUT_S)
    tracker_process._exit()


def warm_up() -> None:
    """What every run's logging needs once: MLflow and its store classes, pyfunc and its package map
    (model logging), matplotlib (the run's plots)."""
    from pipeline import plots, tracking

    tracking.quiet_mlflow()
    loading = plots.preload()
    try:
        import mlflow  # noqa: F401
        from mlflow.store.tracking import sqlalchemy_store  # noqa: F401
    except Exception:  # noqa: BLE001  (a run's connect reports what fails)
        return
    tracking.warm_model_logging()
    loading.join()


def main(argv: list[str]) -> int:
    if argv[:1] == ["--serve"] and len(argv) == 5:
        serve(Path(argv[1]), argv[2], float(argv[3]), Path(argv[4]) if argv[4] else None)
        return 0
    if argv == ["--stop"]:
        print(f"asked {len(stop_all())} tracker service(s) to exit once their runs end")
        return 0
    print("usage: python -m pipeline.tracker_service --stop", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
