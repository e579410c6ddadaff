"""One MLflow tracker process for a whole sweep, which its jobs on this host log through.

Each job's tracker would otherwise import MLflow and open the store in a process of its own (two
seconds of a core each), beside the sweep's driver doing the same for the parent run. The sweep's
callback starts this process instead: it listens on a Unix socket (in a private folder, with an
authentication key), writes where in the sweep's SERVER_FILE, then creates the parent run. A job's
TrackerProcess connects to it and speaks the protocol it would speak to a process of its own
(pipeline.tracker_process.serve_run), one run per connection, each in a thread with its own active
MLflow run. A job finds no server (another host, another store, a sweep without the callback), or
a full one (MAX_RUNS runs at once: the process logs on one core), and then starts its own process.

When the sweep ends the driver asks this process to close the parent run and waits for that; a
driver that dies leaves its control pipe at end-of-file: the process stops taking jobs, lets the
runs it serves end, closes the parent as FAILED and exits.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import tempfile
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Client, Listener
from pathlib import Path
from typing import Optional

SERVER_FILE = "mlflow_tracker"  # in a sweep's directory: where the sweep's tracker process listens
MAX_RUNS = 4  # runs served at once; the job that would be one more starts its own tracker process
RETIRE = "retire"  # sent in place of a run's tracker: stop taking runs (pipeline.tracker_service)
START_TIMEOUT_S = 60.0
FINISH_TIMEOUT_S = 600.0  # how long the end of a sweep waits for the runs still being logged
ABORT_WAIT_S = 20.0  # the same after a sweep that raised: its jobs were stopped


@dataclass(frozen=True)
class SweepSpec:
    """What the sweep's tracker needs to open and close the parent run."""

    uri: str
    experiment: str
    artifact_root: Optional[Path]
    sweep_dir: Path  # absolute: where SERVER_FILE and the parent file go, and the parent's tag
    overrides: str  # the parent run's name


class SweepTracker:
    """The sweep driver's handle on the process: start it, then `finish` it once (with no sweep
    directory after a sweep that raised)."""

    def __init__(self, process, control):
        self._process, self._control = process, control

    @classmethod
    def start(cls, spec: SweepSpec) -> "SweepTracker":
        """Start the process and wait until it listens (a fraction of a second: it has not imported
        MLflow yet); OSError or RuntimeError if it could not."""
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")  # no fork of a driver that may hold threads
        control, child = ctx.Pipe()
        process = ctx.Process(target=serve_sweep, args=(child, spec), name="mlflow-sweep-tracker", daemon=True)
        process.start()
        child.close()
        if not control.poll(START_TIMEOUT_S):
            process.kill()
            raise RuntimeError(f"the sweep's tracker process did not start within {START_TIMEOUT_S:g} s")
        try:
            answer = control.recv()
        except EOFError:
            raise RuntimeError(f"the sweep's tracker process exited with code {process.exitcode}") from None
        if answer != "ready":
            process.join(5)
            raise RuntimeError(f"the sweep's tracker process could not listen: {answer}")
        return cls(process, control)

    def finish(self, sweep_dir: Optional[Path]) -> Optional[str]:
        """Close the parent run (as FAILED when `sweep_dir` is None: the sweep raised) once every run
        the process serves has ended, and let the process exit; returns the parent's id, or None."""
        if self._control is None:
            return None
        control, self._control = self._control, None
        answer = None
        wait_s = (FINISH_TIMEOUT_S if sweep_dir is not None else ABORT_WAIT_S) + 60  # + closing the parent
        try:
            control.send(("finish", sweep_dir))
            if control.poll(wait_s):
                answer = control.recv()
        except (EOFError, OSError):
            pass
        control.close()
        self._process.join(10)
        if self._process.is_alive():
            self._process.kill()
        return answer


def serve_sweep(control, spec: SweepSpec) -> None:
    """The sweep's tracker process: listen, open the parent run, serve jobs until the driver says
    `finish` (or dies), then close the parent run.

    Unlike a run's own tracker process it is not niced: each job waits at its end until its run is
    logged, so this process's work is on every job's path. Niced, it ran only in the CPU the slots
    left, and on a 2-core box a 16-job sweep took 1.60-1.64 s per job beyond the fits against 1.49
    at the jobs' priority, the fits as fast (16.6-17.1 s in all, against 16.7-16.9)."""
    for sig in (signal.SIGINT, signal.SIGTERM):  # the driver decides when the sweep ends
        signal.signal(sig, signal.SIG_IGN)
    try:
        authkey = os.urandom(32)
        folder = tempfile.mkdtemp(prefix="pipeline-tracker-")  # 0700: no other user reaches the socket
        listener = Listener(os.path.join(folder, "socket"), family="AF_UNIX", authkey=authkey)
        _write_server_file(spec, listener.address, authkey)
    except Exception as exc:  # noqa: BLE001  (the driver reports it and the jobs log on their own)
        control.send(f"{type(exc).__name__}: {exc}")
        os._exit(1)
    control.send("ready")
    from pipeline import sweep_runs, tracking

    tracking.quiet_mlflow()
    server = _Server(listener)
    parent: dict = {}
    opening = threading.Thread(target=lambda: parent.setdefault("id", sweep_runs.open_parent(
        spec.uri, spec.experiment, spec.artifact_root, spec.sweep_dir, spec.overrides)), daemon=True)
    opening.start()
    threading.Thread(target=server.accept_all, name="accept", daemon=True).start()
    try:
        message = control.recv()
    except (EOFError, OSError):  # the driver died: the sweep failed
        message = ("finish", None)
    _, sweep_dir = message
    (Path(spec.sweep_dir) / SERVER_FILE).unlink(missing_ok=True)
    server.stop(FINISH_TIMEOUT_S if sweep_dir is not None else ABORT_WAIT_S)
    try:
        os.rmdir(folder)  # the listener removed its socket
    except OSError:
        pass
    opening.join()
    run_id = parent.get("id")
    if run_id is not None:
        try:
            sweep_runs.close_parent(spec.uri, run_id, sweep_dir)
        except Exception as exc:  # noqa: BLE001  (nothing to stop: the jobs are done)
            sweep_runs.log.warning("could not close the sweep's MLflow parent run %s: %s", run_id, exc)
    try:
        control.send(run_id)
    except OSError:
        pass
    from pipeline.tracker_process import _exit

    _exit()


class _Server:
    """Accepts jobs' connections and serves each in a thread, at most MAX_RUNS at once."""

    def __init__(self, listener: Listener):
        self._listener = listener
        self._lock = threading.Lock()
        self._serving: set[threading.Thread] = set()
        self._stopped = False
        self._idle_since: Optional[float] = time.monotonic()  # None while a run is served
        self.retired = threading.Event()  # a peer sent RETIRE (pipeline.tracker_service)

    def idle_s(self) -> float:
        """Seconds since the last run ended (or since the start), 0 while one is served."""
        with self._lock:
            return 0.0 if self._idle_since is None else time.monotonic() - self._idle_since

    def accept_all(self) -> None:
        while True:
            try:
                conn = self._listener.accept()
            except Exception:  # noqa: BLE001  (closed by stop(), or a peer that failed to authenticate)
                if self._stopped:
                    return
                continue
            with self._lock:
                full = self._stopped or len(self._serving) >= MAX_RUNS
                if not full:
                    thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
                    self._serving.add(thread)
                    self._idle_since = None
            try:
                conn.send("busy" if full else "ok")
            except OSError:
                pass
            if full:
                conn.close()
            else:
                thread.start()

    def _serve(self, conn) -> None:
        from pipeline.tracker_process import serve_run

        try:
            tracker = conn.recv()
            if tracker == RETIRE:
                self.retired.set()
            else:
                serve_run(conn, tracker)
        except (EOFError, OSError):
            pass
        finally:
            conn.close()
            with self._lock:
                self._serving.discard(threading.current_thread())
                if not self._serving:
                    self._idle_since = time.monotonic()

    def stop(self, wait_s: float) -> None:
        """Take no more jobs, and wait for the runs being served to end (at most `wait_s` each)."""
        with self._lock:
            self._stopped = True
            serving = list(self._serving)
        try:
            self._listener.close()
        except OSError:
            pass
        for thread in serving:
            thread.join(wait_s)


def _write_server_file(spec: SweepSpec, address: str, authkey: bytes) -> None:
    """SERVER_FILE, readable by this user only (it holds the key), written whole or not at all."""
    from pipeline.store import atomic_write_bytes

    text = json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "uri": spec.uri,
                       "address": address, "authkey": authkey.hex()})
    atomic_write_bytes(Path(spec.sweep_dir) / SERVER_FILE, text.encode(), mode=0o600)


def connect(sweep_dir: Optional[str], uri: str):
    """A connection to the sweep's tracker process that will serve one run of `uri`, or None: no
    sweep, no server on this host for this store, or a server serving MAX_RUNS runs."""
    if not sweep_dir:
        return None
    try:
        found = json.loads((Path(sweep_dir) / SERVER_FILE).read_text())
    except (OSError, ValueError):
        return None
    if found.get("host") != socket.gethostname() or found.get("uri") != uri:
        return None
    return dial(found)[0]  # None: a server that has exited, a stale file, a full one: the job logs on its own


def dial(found: dict) -> tuple:
    """Connect to the server a server file describes (`address`, `authkey`): (the connection, if the
    server will serve one run on it, else None; whether the server was reached at all)."""
    try:
        conn = Client(found["address"], family="AF_UNIX", authkey=bytes.fromhex(found["authkey"]))
    except Exception:  # noqa: BLE001  (it has exited: the file is stale)
        return None, False
    try:
        answer = conn.recv()
    except (EOFError, OSError):
        answer = None
    if answer != "ok":  # "busy": it serves MAX_RUNS runs
        conn.close()
        return None, True
    return conn, True
