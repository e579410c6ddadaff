"""The sweep's tracker host: one process for a whole sweep, which its jobs on this host log through.

Each job's tracker would otherwise import MLflow and open the store in a process of its own (two
seconds of a core each), beside the sweep's driver doing the same for the parent run. The sweep's
callback starts this process instead: it listens (pipeline.tracking.host) on a socket in a private
folder, writes its host file, HOST_FILE, in the sweep's directory, then creates the parent run.
A job's tracker reads that file, dials the host and is served there, one run per connection.

When the sweep ends the driver asks this process to close the parent run and waits for that; a
driver that dies leaves its control pipe at end-of-file: the process stops taking jobs, lets the
runs it serves end, closes the parent as FAILED and exits.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from pipeline.tracking import host, protocol, sweep
from pipeline.tracking.store import Store

log = logging.getLogger(__name__)

HOST_FILE = "mlflow_tracker"  # in a sweep's directory: where the sweep's tracker host listens
START_TIMEOUT_S = 60.0
FINISH_TIMEOUT_S = 600.0  # how long the end of a sweep waits for the runs still being logged
ABORT_WAIT_S = 20.0  # the same after a sweep that raised: its jobs were stopped


@dataclass(frozen=True)
class SweepSpec:
    """What the sweep's host needs to open and close the parent run."""

    store: Store
    experiment: str
    sweep_dir: Path  # absolute: where HOST_FILE and the parent file go, and the parent's tag
    name: str  # the parent run's name
    overrides: str = ""  # the sweep's overrides, secrets masked: the parent's pipeline.overrides tag
    ui_port: int = 5000  # the port of `mlflow ui` in the links the sweep's last lines give


class SweepHost:
    """The sweep driver's handle on the process: start it, then `finish` it once (with no sweep
    directory after a sweep that raised)."""

    def __init__(self, process, control):
        self._process, self._control = process, control
        self.closing_lines: list[str] = []  # once finished: the parent run's link and the shared view's

    @classmethod
    def start(cls, spec: SweepSpec) -> "SweepHost":
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
                answer, self.closing_lines = control.recv()
        except (EOFError, OSError):
            pass
        control.close()
        self._process.join(10)
        if self._process.is_alive():
            self._process.kill()
        return answer


def find(sweep_dir: Optional[str], uri: str) -> Optional[dict]:
    """The host file of the sweep's host on this host for the store `uri`, or None."""
    if not sweep_dir:
        return None
    try:
        dir_fd = os.open(sweep_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        found = host.read_host_file(HOST_FILE, dir_fd=dir_fd, shown=os.path.join(sweep_dir, HOST_FILE))
    finally:
        os.close(dir_fd)
    if found is None or found.get("host") != socket.gethostname() or found.get("uri") != uri:
        return None
    return found


def serve_sweep(control, spec: SweepSpec) -> None:
    """The sweep's host process: listen, open the parent run, serve jobs until the driver says
    `finish` (or dies), then close the parent run.

    Unlike a run's own tracker process it is not niced: each job waits at its end until its run is
    logged, so this process's work is on every job's path. Niced, it ran only in the CPU the slots
    left, and on a 2-core box a 16-job sweep took 1.60-1.64 s per job beyond the fits against 1.49
    at the jobs' priority, the fits as fast (16.6-17.1 s in all, against 16.7-16.9)."""
    for sig in (signal.SIGINT, signal.SIGTERM):  # the driver decides when the sweep ends
        signal.signal(sig, signal.SIG_IGN)
    try:
        folder = tempfile.mkdtemp(prefix="pipeline-tracker-")  # 0700: no other user reaches the socket
        listener, authkey = host.listen(os.path.join(folder, "socket"))
        dir_fd = os.open(spec.sweep_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        host.write_host_file(HOST_FILE, {"host": socket.gethostname(), "pid": os.getpid(), "uri": spec.store.uri,
                                         "address": listener.address, "authkey": authkey.hex()}, dir_fd)
    except Exception as exc:  # noqa: BLE001  (the driver reports it and the jobs log on their own)
        control.send(f"{type(exc).__name__}: {exc}")
        os._exit(1)
    control.send("ready")
    spec.store.quiet()
    server = host.Host(listener)
    parent: dict = {}
    opening = threading.Thread(target=lambda: parent.setdefault("id", sweep.open_parent(
        spec.store, spec.experiment, spec.sweep_dir, spec.name, spec.overrides)), daemon=True)
    opening.start()
    server.start()
    try:
        message = control.recv()
    except (EOFError, OSError):  # the driver died: the sweep failed
        message = ("finish", None)
    _, sweep_dir = message
    try:
        os.unlink(HOST_FILE, dir_fd=dir_fd)
    except OSError:
        pass
    server.stop(FINISH_TIMEOUT_S if sweep_dir is not None else ABORT_WAIT_S)
    try:
        os.rmdir(folder)  # the listener removed its socket
    except OSError:
        pass
    opening.join()
    run_id, lines = parent.get("id"), []
    if run_id is not None:
        try:
            sweep.close_parent(spec.store.uri, run_id, sweep_dir)
            lines = sweep.closing_lines(spec.store, run_id, spec.ui_port) if sweep_dir is not None else []
        except Exception as exc:  # noqa: BLE001  (nothing to stop: the jobs are done)
            log.warning("could not close the sweep's MLflow parent run %s: %s", run_id, exc)
    try:
        control.send((run_id, lines))
    except OSError:
        pass
    protocol.exit_now()
