"""SIGTERM and SIGINT during a run: the first stops it (Interrupted), later ones wait for the clean-up.

The handlers are installed before the run's first piece of work (worker start, data loading), so
a stop signal at any moment unwinds through the same clean-up: workers stopped, run_state.json
and the MLflow run marked KILLED. A second signal while that clean-up runs (a spot instance's
SIGTERM repeated, Ctrl-C pressed twice) is reported and otherwise ignored, so it cannot leave
the MLflow run RUNNING; SIGKILL still stops the process at once.

The handler runs between any two bytecodes of the main thread, so it keeps out of what that thread
may be holding:
- a stop that lands inside the import machinery or a logging call is raised a moment later: raised
  between a lock's acquire and the `try` that releases it, it left Python's import lock held, and
  the next import in another thread (the plots' preload) hung the run for good;
- a repeat writes its one line to the raw stderr descriptor (no buffer, lock nor logging handler to
  re-enter), once, and the block's end logs how many came;
- a stop that some library's bare `except` swallowed is raised again by the next signal: only a stop
  unwinding or the clean-up makes a signal a repeat.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from typing import Optional

from pipeline.errors import Interrupted

log = logging.getLogger("pipeline")

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
RETRY_S = 0.02  # how soon a stop deferred out of the import machinery or logging is sent again
_LOCKING_CODE = ("<frozen importlib._bootstrap", os.path.dirname(logging.__file__) + os.sep)


class StopSignals:
    """Installs the handlers for the life of a `with` block, then restores the previous ones, or, where the
    block ends by a stop signal, ignores later ones."""

    def __init__(self):
        self.previous: dict[int, object] = {}
        self.stop: Optional[int] = None  # the signal last raised as Interrupted
        self.cleaning = False
        self.repeats = 0
        self._again: Optional[_SendAgain] = None

    def __enter__(self) -> StopSignals:
        for sig in STOP_SIGNALS:
            try:
                self.previous[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread: the caller's handlers stay
                pass
        if self.previous:
            self._again = _SendAgain()
        return self

    def __exit__(self, exc_type, *exc) -> None:
        if self._again is not None:  # before the handlers go: a signal it sends still finds them
            self._again.close()
            self._again = None
        # A block left by a stop signal leaves a process on its way out: its exit code says which signal
        # stopped it, and a repeat arriving as the block unwinds must neither kill it nor change that code.
        stopped = exc_type is not None and issubclass(exc_type, Interrupted)
        for sig, handler in self.previous.items():
            signal.signal(sig, signal.SIG_IGN if stopped else handler)
        self.previous.clear()
        if self.repeats:
            log.warning("%d stop signal(s) received during the run's clean-up: ignored until it ended",
                        self.repeats)

    def clean_up(self) -> None:
        """From here on the run only cleans up: a signal is noted, never raised."""
        self.cleaning = True

    def _handle(self, signum, frame) -> None:
        name = signal.Signals(signum).name
        if self.cleaning or (self.stop is not None and _unwinding()):
            self.repeats += 1
            if self.repeats == 1:
                _write_stderr(f"{name} received while the run stops: finishing the clean-up first "
                              "(SIGKILL stops at once)\n")
            return
        if self._again is not None and _in_locking_code(frame):
            self._again.send(signum)
            return
        self.stop = signum
        raise Interrupted(signum, f"stopped by {name}; finished tasks stay in the run directory: re-run with "
                                  "resume=true (or the same hydra.run.dir) to continue")


class _SendAgain:
    """A thread that sends a deferred stop signal to this process again after RETRY_S. The handler may
    neither start a thread nor take a lock (the main thread may hold it), so it writes one byte to a pipe."""

    def __init__(self):
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="stop-signal-again", daemon=True)
        self._thread.start()

    def send(self, signum: int) -> None:
        try:
            os.write(self._write, bytes([signum]))
        except OSError:  # a full pipe: a request is already waiting
            pass

    def _run(self) -> None:
        while True:
            asked = os.read(self._read, 64)
            if self._closed or not asked:
                return
            time.sleep(RETRY_S)
            if self._closed:
                return
            os.kill(os.getpid(), asked[-1])

    def close(self) -> None:
        self._closed = True
        self.send(0)  # wakes the thread's read at once, even where a forked child holds the pipe's other end
        os.close(self._write)
        self._thread.join(timeout=1.0)
        if not self._thread.is_alive():
            os.close(self._read)


def _in_locking_code(frame) -> bool:
    """Whether the main thread was stopped inside code that takes a lock before the `try` that frees it."""
    return frame is not None and frame.f_code.co_filename.startswith(_LOCKING_CODE)


def _unwinding() -> bool:
    """Whether the exception being handled here is (or arose while handling) a stop: it is on its way out."""
    exc, depth = sys.exc_info()[1], 0
    while exc is not None and depth < 16:
        if isinstance(exc, Interrupted):
            return True
        exc, depth = exc.__context__, depth + 1
    return False


def _write_stderr(line: str) -> None:
    """One unbuffered write, safe inside a signal handler whatever the main thread was writing."""
    try:
        os.write(2, line.encode())
    except OSError:  # a closed or full stderr: the block's end still logs the count
        pass
