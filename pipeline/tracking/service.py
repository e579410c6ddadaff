"""The tracker host kept between runs (`tracking.keep_alive_s`): MLflow imported, stores open.

A run's own tracker process spends about three seconds of a core importing MLflow, opening the store
and preparing model logging before it logs anything; that is most of what tracking costs a short
run. The first tracked run started in a directory (with this engine, this interpreter and this
environment) starts a service instead, in a session of its own so that it outlives the run: a
shared host (pipeline.tracking.host) whose socket, host file and log live in this user's private
runtime folder. The next runs reach it there and find MLflow warm. It exits after `keep_alive_s`
seconds without a run, when the next service would make more than MAX_SERVICES, or when told to
(`python -m pipeline.tracking.service --stop`).

Whatever a run could see differently is part of the service's key (pipeline.tracking.service_key), and a run whose
key differs starts a service of its own. A run that cannot reach a service (no private folder, a
service busy with MAX_RUNS runs, one that does not start) logs through a process of its own, as
with `keep_alive_s=0`; so do the jobs of a cluster scheduler (CLUSTER_JOB_ENV). The jobs of a sweep
log through the sweep's host (pipeline.tracking.sweep_host).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Iterator, Optional

from pipeline.tracking import host, protocol, secure
from pipeline.tracking.service_key import service_key
from pipeline.tracking.store import sqlite_path

log = logging.getLogger(__name__)

# A Unix socket's path holds at most 107 bytes on Linux: the folder, a slash, the key (20) and ".sock".
MAX_FOLDER_BYTES = 80
MAX_SERVICES = 2  # per user: each holds MLflow's interpreter (about 250 MB) while it waits
START_TIMEOUT_S = 30.0  # until a new service listens (it has not imported MLflow yet)
FINISH_TIMEOUT_S = 600.0  # how long a retired or idle service waits for the runs it still serves
# Set in a job of a cluster scheduler: the next job runs in another allocation, with another
# environment, and a service would only outlive the job's work inside its allocation.
CLUSTER_JOB_ENV = ("SLURM_JOB_ID", "SUBMITIT_EXECUTOR")
_started: list = []  # the services this process started (see _start)
class RuntimeFolder:
    """This user's private folder for services, held by a descriptor: checked once (a folder, owned by
    this user, closed to others, not a symlink), then every file in it is opened through the
    descriptor, so a path swapped since the check changes nothing."""

    def __init__(self, path: Path, fd: int):
        self.path, self.fd = path, fd

    @classmethod
    def open(cls, path: Path) -> "RuntimeFolder":
        """UnsafeFile or OSError if `path` cannot be this user's private folder."""
        path.parent.mkdir(parents=True, exist_ok=True)
        return cls(path, secure.open_private_dir(path, create=True))

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> "RuntimeFolder":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def socket_address(self, name: str) -> str:
        """Where a socket named `name` in this folder is bound or reached from this process."""
        return secure.dir_path(self.fd, name) if secure.has_fd_paths() else str(self.path / name)

    def read(self, name: str) -> Optional[dict]:
        return host.read_host_file(name, dir_fd=self.fd, shown=str(self.path / name))

    def write(self, name: str, info: dict) -> None:
        host.write_host_file(name, info, self.fd)

    def unlink(self, name: str) -> None:
        try:
            os.unlink(name, dir_fd=self.fd)
        except FileNotFoundError:
            pass

    def names(self, suffix: str) -> list[str]:
        return sorted(n for n in os.listdir(self.fd) if n.endswith(suffix) and not n.startswith("."))

    def mtime(self, name: str) -> float:
        try:
            return os.stat(name, dir_fd=self.fd, follow_symlinks=False).st_mtime
        except OSError:
            return 0.0

    @contextlib.contextmanager
    def locked(self, name: str) -> Iterator[None]:
        """One run at a time finds or starts a service for a key (two would start two)."""
        import fcntl

        fd = secure.open_private_file(name, os.O_RDWR | os.O_CREAT, self.fd)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)


def runtime_path() -> Path:
    """$XDG_RUNTIME_DIR/pipeline, else (unset, or too long for a socket's path) pipeline-<uid> in the
    temporary folder ($TMPDIR, /tmp)."""
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    folder = Path(xdg) / "pipeline" if xdg else None
    if folder is None or len(os.fsencode(folder)) > MAX_FOLDER_BYTES:
        folder = Path(tempfile.gettempdir()) / f"pipeline-{os.getuid()}"
    return folder


def runtime_folder() -> Optional[RuntimeFolder]:
    """This user's private folder for services, or None, with a warning saying why and what to do: a
    folder another user owns or can write to could hand a run someone else's socket."""
    path = runtime_path()
    try:
        return RuntimeFolder.open(path)
    except OSError as exc:
        log.warning("no tracker service: its folder cannot be used (%s); this run logs through a process "
                    "of its own. Remove %s or point XDG_RUNTIME_DIR at a private folder to get one back",
                    exc, path)
        return None


def connect(uri: str, keep_alive_s: float) -> tuple[Optional[object], bool]:
    """(a connection to the service for this run's store `uri` that will serve one run, whether this
    call started the service: it warms up only after this run); (None, False) where the run must log
    through a process of its own."""
    if any(os.environ.get(name) for name in CLUSTER_JOB_ENV):
        return None, False
    folder = runtime_folder()
    if folder is None:
        return None, False
    key = service_key(uri)
    store = _store_file(uri)
    started = False
    with folder:
        try:
            with folder.locked(f"{key}.lock"):
                conn = _connect(folder, f"{key}.json", _identity(store))
                if conn is None and not _find(folder, key):
                    _retire_oldest(folder, keep=MAX_SERVICES - 1)
                    started = _start(folder, key, keep_alive_s, store)
                    conn = _connect(folder, f"{key}.json", None) if started else None  # it opened no store yet
        except OSError as exc:
            log.warning("no tracker service (%s); this run logs through a process of its own", exc)
            return None, False
    return conn, started and conn is not None


def service_pids(path: Optional[Path] = None) -> list[int]:
    """The process ids of the services with a host file in the runtime folder (or `path`)."""
    with _open(path) as folder:
        return [] if folder is None else _pids(folder)


def stop_all(path: Optional[Path] = None) -> list[int]:
    """Ask every service of this user (in the runtime folder, or `path`) to exit once its runs end
    (one serving MAX_RUNS runs loses its host file and idles out); returns their process ids."""
    with _open(path) as folder:
        if folder is None:
            return []
        pids = _pids(folder)
        for name in folder.names(".json"):
            _retire(folder, name)
        return pids


@contextlib.contextmanager
def _open(path: Optional[Path]) -> Iterator[Optional[RuntimeFolder]]:
    if path is None:
        folder = runtime_folder()
    else:
        try:
            folder = RuntimeFolder(path, secure.open_private_dir(path))
        except OSError:
            folder = None
    try:
        yield folder
    finally:
        folder.close() if folder is not None else None


def _pids(folder: RuntimeFolder) -> list[int]:
    found = (folder.read(name) for name in folder.names(".json"))
    return [f["pid"] for f in found if f is not None and isinstance(f.get("pid"), int)]


def _store_file(uri: str) -> Optional[Path]:
    """A SQLite store's database file, absolute; None for other stores."""
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


def _address(folder: RuntimeFolder, found: dict) -> dict:
    """The host file's socket, reached through the folder's descriptor."""
    return {**found, "address": folder.socket_address(found["socket"])} if "socket" in found else found


def _connect(folder: RuntimeFolder, name: str, store: Optional[list]):
    """A connection the service with the host file `name` accepted, or None: no service, a file left
    by one that died (removed), a service that opened another store file than `store` (the one the
    run will use; retired), or a service serving MAX_RUNS runs."""
    found = folder.read(name)
    if found is None:
        return None
    if found.get("store") is not None and found["store"] != store:
        _retire(folder, name)
        return None
    conn, reached = host.dial_file(_address(folder, found))
    if not reached and folder.read(name) == found:  # the service has exited: its file is stale
        folder.unlink(name)
    return conn


def _find(folder: RuntimeFolder, key: str) -> bool:
    """Whether a service of this key is alive (a busy one counts: the run logs on its own)."""
    found = folder.read(f"{key}.json")
    return found is not None and _alive(found.get("pid"))


def _alive(pid) -> bool:
    try:
        os.kill(int(pid), 0)
    except (OSError, TypeError, ValueError):
        return False
    return True


def _retire_oldest(folder: RuntimeFolder, keep: int) -> None:
    """Retire the services least recently started until `keep` are left."""
    services = sorted(folder.names(".json"), key=folder.mtime)
    for name in services[: max(0, len(services) - keep)]:
        _retire(folder, name)


def _retire(folder: RuntimeFolder, name: str) -> bool:
    """Ask the service with the host file `name` to exit once its runs end (its file goes at once)."""
    found = folder.read(name)
    if found is None:
        return False
    folder.unlink(name)  # no run connects to it from now on
    return host.retire(_address(folder, found))


def _start(folder: RuntimeFolder, key: str, keep_alive_s: float, store: Optional[Path]) -> bool:
    """Start a service in a session of its own (a Ctrl-C of the run does not reach it) and wait until
    it listens; False if it did not. It gets the folder's descriptor, not its path."""
    import select

    log_fd = secure.open_private_file(f"{key}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, folder.fd)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pipeline.tracking.service", "--serve", str(folder.fd), str(folder.path), key,
             repr(float(keep_alive_s)), str(store or "")],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log_fd, start_new_session=True,
            close_fds=True, pass_fds=(folder.fd,),
            env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
        )
    finally:
        os.close(log_fd)
    _started.append(proc)  # it outlives this process: never garbage here (Popen warns of a live child)
    ready, _, _ = select.select([proc.stdout], [], [], START_TIMEOUT_S)
    line = proc.stdout.readline() if ready else b""
    proc.stdout.close()
    if line.strip() != b"ready":
        if proc.poll() is None:
            proc.kill()
        return False
    return True


def serve(folder: RuntimeFolder, key: str, keep_alive_s: float, store: Optional[Path] = None) -> None:
    """The service: listen, say "ready" on stdout, serve runs (warming MLflow and matplotlib up once
    the first has ended) until `keep_alive_s` pass without one or it is retired, then exit. Once
    the first run has opened the SQLite `store`, its host file says which file that is."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.nice(protocol.NICENESS)  # below the fits of the runs it serves, as a run's own process
    socket_name = f"{key}.sock"
    folder.unlink(socket_name)  # left by a service that was killed (the caller holds the lock)
    listener, authkey = host.listen(folder.socket_address(socket_name))
    info = {"pid": os.getpid(), "socket": socket_name, "authkey": authkey.hex(), "cwd": os.getcwd(),
            "keep_alive_s": keep_alive_s, "address": str(folder.path / socket_name)}
    host_file = f"{key}.json"
    folder.write(host_file, info)
    print("ready", flush=True)
    os.dup2(2, 1)  # the caller has stopped reading: MLflow's prints go to the service's log
    server = host.Host(listener)
    server.start()
    warm = False
    while not server.retired.wait(1.0 if warm else 0.1):
        idle_s = server.idle_s()
        if idle_s >= keep_alive_s:
            break
        if not warm and idle_s > 0:  # after the first run, which the run that started this paces
            if store is not None and folder.read(host_file) == info:
                info = {**info, "store": _identity(store)}
                folder.write(host_file, info)
            # on a thread: a retire (or the end of keep_alive_s) during the imports ends the service at once
            threading.Thread(target=warm_up, name="warm-up", daemon=True).start()
            warm = True
    if folder.read(host_file) == info:
        folder.unlink(host_file)
    server.stop(FINISH_TIMEOUT_S)
    protocol.exit_now()


def warm_up() -> None:
    """What every run's logging needs once: MLflow and its store classes, pyfunc and its package map
    (model logging), matplotlib (the run's plots)."""
    from pipeline import plots
    from pipeline.tracking import store

    store.quiet_mlflow()
    loading = plots.preload()
    try:
        import mlflow  # noqa: F401
        from mlflow.store.tracking import sqlalchemy_store  # noqa: F401
    except Exception:  # noqa: BLE001  (a run's connect reports what fails)
        return
    store.warm_model_logging()
    loading.join()


def main(argv: list[str]) -> int:
    if argv[:1] == ["--serve"] and len(argv) == 6:  # the folder's descriptor (inherited) and its path
        folder = RuntimeFolder(Path(argv[2]), int(argv[1]))
        serve(folder, argv[3], float(argv[4]), Path(argv[5]) if argv[5] else None)
        return 0
    if argv == ["--stop"]:
        print(f"asked {len(stop_all())} tracker service(s) to exit once their runs end")
        return 0
    print("usage: python -m pipeline.tracking.service --stop", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
