"""The tracker protocol: what a run sends its tracker's host, and how a host serves one run.

A run's calls travel pickled over a connection, in order, and are not waited for, except where the
run needs an answer: `start` and `end` (REPLIED; `end` waits until everything sent is logged) and
a registered model's version (RETURNING). A logged model's URI is not waited for either: the run
gets a PendingModelUri that stands for it in later calls, and the host puts the URI in its place.
A host is a process of the run's own or a shared one (a sweep's, or the service kept between runs,
pipeline.tracking.host); both serve each run with `serve_run`.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any, Optional

from pipeline.errors import TrackingError

ANSWERED = ("start", "end")
RETURNING = ("register_model",)  # the run uses what these return (a registered version)
REPLIED = ANSWERED + RETURNING  # the calls a host answers
NICENESS = 10  # a run's tracker yields the CPU to the run's fits


@dataclass(frozen=True)
class PendingModelUri:
    """The URI of the model `name`, logged by the tracker's host after the run asked for it."""

    name: str


def serve_run(conn, tracker) -> bool:
    """Connect, then run each call as it arrives, answering REPLIED calls; True after `end`, False
    when the run's side closed the connection without ending (its driver died: the run is FAILED)."""
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
            args, kwargs = resolve_pending(args, model_uris), resolve_pending(kwargs, model_uris)
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


def resolve_pending(value, model_uris: dict[str, Optional[str]]):
    """`value` with each PendingModelUri (in a tuple, a dict's values) replaced by the logged URI;
    a tag whose model was not logged is left out."""
    if isinstance(value, PendingModelUri):
        return model_uris.get(value.name)
    if isinstance(value, tuple):
        return tuple(resolve_pending(v, model_uris) for v in value)
    if isinstance(value, dict):
        resolved = {k: resolve_pending(v, model_uris) for k, v in value.items()}
        return {k: v for k, v in resolved.items() if v is not None or not isinstance(value[k], PendingModelUri)}
    return value


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


_BEFORE_EXIT_NOW: list = []


def before_exit_now(cleanup) -> None:
    """Call `cleanup()` in `exit_now`, which skips the interpreter's `atexit` handlers (a temporary
    folder registered only there would be left behind by every tracker process)."""
    _BEFORE_EXIT_NOW.append(cleanup)


def exit_now() -> None:
    """Leave without freeing the interpreter: everything was logged (MLflow's thousands of modules
    take seconds to free, and nothing is left to write); only the `before_exit_now` cleanups run."""
    for cleanup in _BEFORE_EXIT_NOW:
        try:
            cleanup()
        except Exception:  # noqa: BLE001  (leaving anyway)
            pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001  (a closed stream has nothing to flush)
            pass
    os._exit(0)
