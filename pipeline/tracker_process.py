"""An MLflow tracker that lives in a process of its own, beside the run.

Importing MLflow and opening its store take seconds of one core, as does logging a pyfunc model;
the run itself spends that time loading data, importing the model libraries and fitting. Here the
tracker's process imports MLflow, opens the store and starts the MLflow run while the run loads
its data and fits, and logs what the run sends it in order, while the run goes on. Every call is
sent and not waited for, except where the run needs an answer: a registered model's version
(RETURNING), and `end`, which waits until everything sent is logged. `start` is answered too, but
the run reads that answer when it comes (`poll`, after each fit) or at the end: a store that
cannot be opened fails the run then (what can be checked at once, a server's health, a SQLite
store's folder, is checked before). A logged model's URI is not waited for: the run gets a
`PendingModelUri` that stands for it in later calls (the best model's tag, the registry), and this
process puts the URI in its place. A driver that dies leaves a pipe at EOF: the tracker ends the
run as FAILED. When its pipe closes (after the last run it serves) the process exits without
tearing the interpreter down (MLflow's thousands of modules take seconds to free, and nothing is
left to write). A job of a sweep logs through the sweep's own tracker process instead, where it
can (pipeline.tracker_server): the same calls, one connection per run.
"""

from __future__ import annotations

import atexit
import multiprocessing
import multiprocessing.util  # registers its exit handler before _end_at_exit is registered
import os
import queue
import signal
import sys
import threading
import weakref
from dataclasses import dataclass
from multiprocessing.reduction import ForkingPickler
from typing import Any, Optional

from pipeline.errors import TrackingError
from pipeline.tracking import NullTracker

ANSWERED = ("start", "end")
RETURNING = ("register_model",)  # the run uses what these return (a registered version)
REPLIED = ANSWERED + RETURNING  # the calls the process answers
NICENESS = 10  # the tracker's process yields the CPU to the run's fits


@dataclass(frozen=True)
class PendingModelUri:
    """The URI of the model `name`, logged by the tracker's process after the run asked for it."""

    name: str


_warm: dict = {"keep": False, "server": None}  # the process kept for this process's next run, see keep_warm()
_open: "weakref.WeakSet[TrackerProcess]" = weakref.WeakSet()  # connected and not ended, see _end_at_exit()


def _end_at_exit() -> None:
    """At interpreter exit, close the connection of every run that was never ended (a caller that
    raised past `end`): its tracker ends the run FAILED and its process exits. Registered after
    multiprocessing's own exit handler, so it runs first: that handler joins the daemonic tracker
    processes, which ignore SIGTERM and would wait forever for a connection this process still holds."""
    for tracker in list(_open):
        tracker._abandon()


atexit.register(_end_at_exit)


def keep_warm() -> None:
    """Keep the tracker's process between the runs of this process (the warm worker of a sweep's slot):
    the next run reuses it, with MLflow imported and its store open. It exits with this process."""
    if not _warm["keep"]:
        _warm["keep"] = True
        atexit.register(close_warm)


def close_warm() -> None:
    """Let the kept tracker process exit; call it before this process exits (a worker process's
    multiprocessing exit handler joins its children before any atexit handler runs)."""
    server, _warm["server"] = _warm["server"], None
    if server is not None:
        process, conn = server
        conn.close()  # end-of-file: the process returns
        process.join(timeout=10)
        if process.is_alive():
            process.kill()


class TrackerProcess:
    """Forwards every tracker call to an MlflowTracker in a spawned process."""

    enabled = True

    def __init__(self, tracker, keep_alive_s: float = 0.0):
        self._tracker = tracker  # configured, not connected: it travels to the process
        self._keep_alive_s = keep_alive_s  # > 0: log through a kept service (pipeline.tracker_service)
        self._conn = None
        self._process = None
        self._shared = False  # served by a process serving many runs: a sweep's, or a kept service
        self._plots_here = True  # False: served by a warm tracker service, which draws the plots
        self._outbox: Optional[queue.SimpleQueue] = None  # pickled calls for the sender thread
        self._sender: Optional[threading.Thread] = None
        self._answers_due = 0
        self._run_id: Optional[str] = None
        self._error: Optional[str] = None
        self.failure: Optional[str] = None

    def connect(self) -> None:
        """Check what can be checked here at once (a server's health), then start the process,
        which imports MLflow and opens the store while this one goes on."""
        self._tracker.prepare()
        _open.add(self)
        from pipeline import tracker_server

        conn = tracker_server.connect(getattr(self._tracker, "sweep_dir", None), self._tracker.uri)
        if conn is not None:  # the sweep's own tracker process serves this run
            self._conn, self._shared = conn, True
            self._conn.send(self._tracker)
            return
        server, _warm["server"] = _warm["server"], None
        if server is not None and server[0].is_alive():
            self._process, self._conn = server
            self._conn.send(self._tracker)  # the kept process serves this run next
            return
        if self._keep_alive_s > 0:
            from pipeline import tracker_service

            conn, started = tracker_service.connect(self._tracker.uri, self._keep_alive_s)
            if conn is not None:  # a new service is as cold as a process of this run's own
                self._conn, self._shared, self._plots_here = conn, True, started
                self._conn.send(self._tracker)
                return
        ctx = multiprocessing.get_context("spawn")  # no fork of a driver that may hold threads
        self._conn, child = ctx.Pipe()
        self._process = ctx.Process(target=serve, args=(child, self._tracker), name="mlflow-tracker", daemon=True)
        self._process.start()
        child.close()

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
        self._send("start", (run_name, params, tags), {})
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

    def log_predictor(self, name: str, predictor, example) -> Optional[PendingModelUri]:
        """Send the model to be logged, as its payload (pickled here: the tracker's process never
        imports the model's library); what stands for its URI until that process has it."""
        if not self._tracker.log_models:
            return None
        from pipeline.tracking_models import ModelPayload

        self._send("log_predictor", (name, ModelPayload.of(predictor, example), example), {})
        return PendingModelUri(name)

    def end(self, status: str) -> None:
        """Wait until the tracker has logged everything it was sent and ended the run."""
        _open.discard(self)
        if self._process is None and not self._shared:
            return
        self._send("end", (status,), {})
        self._collect()
        self._stop_sender()
        if self._shared:
            self._conn.close()  # the sweep's process goes on serving other runs
            self._shared = False
            return
        if _warm["keep"] and self.failure is None and self._process.is_alive():
            _warm["server"], self._process = (self._process, self._conn), None
            return
        self._conn.close()  # end-of-file: the process returns
        self._process.join(timeout=30)
        if self._process.is_alive():
            self._process.kill()  # it ignores SIGTERM: the driver decides when it ends
        self._process = None

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


def serve(conn, tracker) -> None:
    """The tracker's process: serve a run, then the next tracker sent (a kept process), until end-of-file."""
    for sig in (signal.SIGINT, signal.SIGTERM):  # the driver decides when the run ends, and says how
        signal.signal(sig, signal.SIG_IGN)
    # Below the fits: a fit's threads stall when one of them loses its core, while logging can wait.
    # Where the fits leave a core idle (data loading, scoring, a box with cores to spare) this
    # process runs at full speed.
    os.nice(NICENESS)
    while serve_run(conn, tracker):
        try:
            tracker = conn.recv()
        except (EOFError, OSError):
            break
    _exit()


def serve_run(conn, tracker) -> bool:
    """Connect, then run each call as it arrives, answering `start` and `end`; True after `end`."""
    error: Optional[str] = None
    try:
        tracker.connect()
    except TrackingError as exc:
        error = str(exc)
    except Exception as exc:  # noqa: BLE001  (reported to the driver as the run's tracking error)
        error = f"cannot connect to MLflow: {type(exc).__name__}: {exc}"
    model_uris: dict[str, Optional[str]] = {}
    prepared = False  # model logging's one-time work, done once the run has started and no call waits
    while True:
        try:
            name, args, kwargs = conn.recv()
        except (EOFError, OSError):  # the driver died without ending the run
            if error is None and tracker.run_id is not None:
                tracker.end("FAILED")
            return False
        result = None
        if error is None:
            args, kwargs = _resolve(args, model_uris), _resolve(kwargs, model_uris)
            result, error = _call(tracker, name, args, kwargs)
            if name == "log_predictor":
                model_uris[args[0]] = result
        if name in REPLIED:
            conn.send((result, tracker.run_id, getattr(tracker, "experiment_id", None), error, tracker.failure))
        if name == "end":
            return True
        if not prepared and error is None and tracker.run_id is not None and not conn.poll(0):
            prepared = True
            prepare = getattr(tracker, "prepare_model_logging", None)
            if prepare is not None:  # while the run fits, in the cycles its fits leave idle
                prepare()


def _resolve(value, model_uris: dict[str, Optional[str]]):
    """`value` with each PendingModelUri (in a tuple, a dict's values) replaced by the logged URI;
    a tag whose model was not logged is left out."""
    if isinstance(value, PendingModelUri):
        return model_uris.get(value.name)
    if isinstance(value, tuple):
        return tuple(_resolve(v, model_uris) for v in value)
    if isinstance(value, dict):
        resolved = {k: _resolve(v, model_uris) for k, v in value.items()}
        return {k: v for k, v in resolved.items() if v is not None or not isinstance(value[k], PendingModelUri)}
    return value


def _exit() -> None:
    """Leave without freeing the interpreter: everything was logged and the run has ended."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001  (a closed stream has nothing to flush)
            pass
    os._exit(0)


def _call(tracker, name: str, args: tuple, kwargs: dict) -> tuple[Any, Optional[str]]:
    """Run one call: (its result, None), or (None, the message of a TrackingError: the run could not
    start); any other exception is the run's tracking failure."""
    try:
        return getattr(tracker, name)(*args, **kwargs), None
    except TrackingError as exc:
        return None, str(exc)
    except Exception as exc:  # noqa: BLE001  (a call outside the tracker's own guard: the run goes on)
        tracker.failure = tracker.failure or f"{name}: {type(exc).__name__}: {exc}"
    return None, None

