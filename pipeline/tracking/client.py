"""The run's side of its tracker: every call forwarded to a tracker host, which logs to MLflow.

Importing MLflow and opening its store take seconds of one core, as does logging a pyfunc model;
the run itself spends that time loading data, importing the model libraries and fitting. So the
tracker never lives in the run's process. Its host is one of two: a shared host that already has
MLflow imported and the store open (the sweep's, for a job of a sweep on this host; else the service
kept between runs, `tracking.keep_alive_s`), reached the same way (pipeline.tracking.host); or,
where none will serve the run, a process of the run's own, started at `connect` so that it imports
MLflow and opens the store while the run loads its data. The calls travel by
pipeline.tracking.protocol. A driver that dies leaves its connection at end-of-file: the host ends
the run FAILED.
"""

from __future__ import annotations

import atexit
import multiprocessing
import multiprocessing.util  # registers its exit handler before _end_at_exit is registered
import os
import queue
import signal
import threading
import time
import weakref
from multiprocessing.reduction import ForkingPickler
from typing import Any, Optional

from pipeline.errors import TrackingError
from pipeline.tracking import host, protocol, service, sweep_host
from pipeline.tracking.base import NullTracker
from pipeline.tracking.protocol import REPLIED, RETURNING, PendingModelUri

_open: "weakref.WeakSet[TrackerClient]" = weakref.WeakSet()  # connected and not ended, see _end_at_exit()


def _end_at_exit() -> None:
    """At interpreter exit, close the connection of every run that was never ended (a caller that
    raised past `end`): its host ends the run FAILED, and a process of its own exits. Registered after
    multiprocessing's own exit handler, so it runs first: that handler joins the daemonic tracker
    processes, which ignore SIGTERM and would wait forever for a connection this process still holds."""
    for tracker in list(_open):
        tracker._abandon()


atexit.register(_end_at_exit)


class TrackerClient:
    """Forwards every tracker call to a tracker (an MlflowTracker) served by a tracker host."""

    enabled = True

    def __init__(self, tracker, keep_alive_s: float = 0.0):
        self._tracker = tracker  # configured, not connected: it travels to the process
        self._keep_alive_s = keep_alive_s  # > 0: log through the service kept between runs
        self._conn = None
        self._process = None
        self._shared = False  # served by a process serving many runs: a sweep's, or a kept service
        self._plots_here = True  # False: served by a warm tracker service, which draws the plots
        self._outbox: Optional[queue.SimpleQueue] = None  # pickled calls for the sender thread
        self._sender: Optional[threading.Thread] = None
        self._answers_due = 0
        self._run_id: Optional[str] = None
        self._error: Optional[str] = None
        self._closing: list[str] = []
        self.failure: Optional[str] = None

    def connect(self) -> None:
        """Check what can be checked here at once (a server's health), then hand the tracker to a
        shared host, or start a process of its own, which imports MLflow and opens the store while
        this one goes on."""
        self._tracker.prepare()
        _open.add(self)
        conn, self._plots_here = self._shared_host()
        if conn is not None:
            self._conn, self._shared = conn, True
            self._conn.send(self._tracker)
            return
        ctx = multiprocessing.get_context("spawn")  # no fork of a driver that may hold threads
        self._conn, child = ctx.Pipe()
        self._process = ctx.Process(target=serve_own, args=(child, self._tracker), name="mlflow-tracker",
                                    daemon=True)
        self._process.start()
        child.close()

    def _shared_host(self) -> tuple[Optional[Any], bool]:
        """(a connection to a shared host that will serve this run, or None; whether this process
        draws the run's plots: all but a warm service do). The sweep's host serves its jobs; else
        the service kept between runs, when keep_alive_s > 0 (a service started just now is as
        cold as a process of the run's own, and it warms up only after this run)."""
        found = sweep_host.find(getattr(self._tracker, "sweep_dir", None), self._tracker.uri)
        if found is not None:
            conn, _ = host.dial_file(found)
            if conn is not None:
                return conn, True
        if self._keep_alive_s > 0:
            conn, started = service.connect(self._tracker.uri, self._keep_alive_s)
            if conn is not None:
                return conn, started
        return None, True

    @property
    def run_id(self) -> Optional[str]:
        """The MLflow run's id, once the process has started it (waits for that); TrackingError if
        it could not."""
        self._collect()
        if self._error is not None:
            raise TrackingError(self._error)
        return self._run_id

    def poll(self) -> Optional[str]:
        """The run's id if the process has answered by now, else None, without waiting;
        TrackingError if the run could not start."""
        if self._conn is not None and self._answers_due and self._conn.poll(0):
            self._collect(1)
        if self._error is not None:
            raise TrackingError(self._error)
        return self._run_id

    @property
    def experiment_id(self) -> Optional[str]:
        self._collect()
        return self._experiment_id

    def start(self, run_name: str, params: dict, tags: dict) -> None:
        """Start the run, dated now where the tracker takes a date (its host may start it later, after
        other jobs' calls)."""
        self._send("start", (run_name, params, tags), self._now("start_time"))
        if self._plots_here:
            from pipeline import plots

            plots.preload()  # this process draws the plots, see log_plots

    def log_plots(self, run_dir, data) -> None:
        """Drawn by a warm tracker service, where matplotlib is loaded and nothing else waits; else
        here, while the tracker's process logs the models (drawing there would come after them, and
        a sweep's one process would draw its jobs' plots one after another: 1.9-2.1 s per job
        beyond the fit for a 16-job sweep on 2 cores, against 1.5-1.8 with each job drawing its own)."""
        if self._plots_here:
            NullTracker.log_plots(self, run_dir, data)  # draws, and sends each file to log_artifact
        else:
            self._send("log_plots", (run_dir, data), {})

    def log_predictor(self, name: str, predictor, example, metrics: Optional[dict] = None,
                      pickled: Optional[bytes] = None) -> Optional[PendingModelUri]:
        """Send the model to be logged, as its payload (pickled here, or `pickled` as its save made it:
        the tracker's process never imports the model's library); what stands for its URI until that
        process has it."""
        if not self._tracker.log_models:
            return None
        from pipeline.tracking.models import ModelPayload

        payload = ModelPayload.of(predictor, example, pickled)
        self._send("log_predictor", (name, payload, example, metrics), {})
        return PendingModelUri(name)

    def end(self, status: str) -> None:
        """Wait until the tracker has logged everything it was sent and ended the run."""
        _open.discard(self)
        if self._process is None and not self._shared:
            return
        self._send("end", (status,), self._now("end_time"))
        self._closing = self._collect() or []
        self._stop_sender()
        if self._shared:
            self._conn.close()  # the sweep's process goes on serving other runs
            self._shared = False
            return
        self._conn.close()  # end-of-file: the process returns
        self._process.join(timeout=30)
        if self._process.is_alive():
            self._process.kill()  # it ignores SIGTERM: the driver decides when it ends
        self._process = None

    def closing_lines(self) -> list[str]:
        """What the tracker's host said of the ended run (pipeline.tracking.mlflow_run.closing_lines)."""
        return list(self._closing)

    def _now(self, key: str) -> dict:
        """{key: now in ms} for a tracker that dates its run by the job's clock (`dated`), else {}."""
        return {key: int(time.time() * 1000)} if getattr(self._tracker, "dated", False) else {}

    def _abandon(self) -> None:
        """Close the connection of a run that was not ended: its tracker ends it FAILED."""
        _open.discard(self)
        self._stop_sender()
        if self._conn is not None:
            self._conn.close()

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)

        def call(*args, **kwargs):
            self._send(name, args, kwargs)
            if name in RETURNING:
                return self._collect()

        return call

    def _send(self, name: str, args: tuple, kwargs: dict) -> None:
        """Pickle the call here (what the run changes later is not what was sent), and leave the
        writing to the sender thread: a model's payload outgrows the pipe's buffer, and the run
        must not wait while the tracker's process is still busy with the calls before it."""
        if self._conn is None:
            raise RuntimeError("the tracker is not connected")
        if self._outbox is None:
            self._outbox = queue.SimpleQueue()
            self._sender = threading.Thread(target=self._write, args=(self._conn, self._outbox),
                                            name="tracker-sender", daemon=True)
            self._sender.start()
        self._outbox.put((name, ForkingPickler.dumps((name, args, kwargs))))
        if name in REPLIED:
            self._answers_due += 1

    def _write(self, conn, outbox) -> None:
        """The sender thread: write each pickled call in order, until None."""
        while (item := outbox.get()) is not None:
            name, data = item
            try:
                conn.send_bytes(data)
            except (BrokenPipeError, OSError):
                self.failure = self.failure or f"{name}: the tracker's process is gone"

    def _stop_sender(self) -> None:
        """Let the sender thread write what it holds, then end."""
        if self._outbox is not None:
            self._outbox.put(None)
            self._sender.join()
            self._outbox = self._sender = None

    def _collect(self, count: Optional[int] = None) -> Any:
        """Read the answers owed so far, or the next `count` (each carries the call's result, the
        run id, experiment id, error and failure); returns the last result."""
        result = None
        count = self._answers_due if count is None else min(count, self._answers_due)
        for _ in range(count):
            self._answers_due -= 1
            try:
                answer = self._conn.recv()
            except (EOFError, OSError):
                self.failure = self.failure or "the tracker's process died"
                continue
            result, self._run_id, self._experiment_id, self._error, failure = answer
            self.failure = self.failure or failure
        return result

    _experiment_id: Optional[str] = None


def serve_own(conn, tracker) -> None:
    """A run's own tracker process: serve the run, then exit."""
    for sig in (signal.SIGINT, signal.SIGTERM):  # the driver decides when the run ends, and says how
        signal.signal(sig, signal.SIG_IGN)
    # Below the fits: a fit's threads stall when one of them loses its core, while logging can wait.
    # Where the fits leave a core idle (data loading, scoring, a box with cores to spare) this
    # process runs at full speed.
    os.nice(protocol.NICENESS)
    protocol.serve_run(conn, tracker)
    protocol.exit_now()


NullTracker.register(TrackerClient)  # a tracker: every call forwarded (__getattr__), none a no-op
