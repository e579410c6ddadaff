"""SIGTERM and SIGINT during a run: the first stops it (Interrupted), later ones wait for the clean-up.

The handlers are installed before the run's first piece of work (worker start, data loading), so
a stop signal at any moment unwinds through the same clean-up: workers stopped, run_state.json
and the MLflow run marked KILLED. A second signal while that clean-up runs (a spot instance's
SIGTERM repeated, Ctrl-C pressed twice) is reported and otherwise ignored, so it cannot leave
the MLflow run RUNNING; SIGKILL still stops the process at once.

The handler runs between any two bytecodes of the main thread, a write to the log among them: a
repeat writes its one line to the raw stderr descriptor (no buffer, lock nor logging handler to
re-enter), once, and the block's end logs how many came.
"""

from __future__ import annotations

import logging
import os
import signal

from pipeline.errors import Interrupted

log = logging.getLogger("pipeline")

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopSignals:
    """Installs the handlers for the life of a `with` block, then restores the previous ones, or, where the
    block ends by a stop signal, ignores later ones."""

    def __init__(self):
        self.previous: dict[int, object] = {}
        self.received: list[int] = []
        self.repeats = 0

    def __enter__(self) -> "StopSignals":
        for sig in STOP_SIGNALS:
            try:
                self.previous[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread: the caller's handlers stay
                pass
        return self

    def __exit__(self, exc_type, *exc) -> None:
        # A block left by a stop signal leaves a process on its way out: its exit code says which signal
        # stopped it, and a repeat arriving as the block unwinds must neither kill it nor change that code.
        stopped = exc_type is not None and issubclass(exc_type, Interrupted)
        for sig, handler in self.previous.items():
            signal.signal(sig, signal.SIG_IGN if stopped else handler)
        self.previous.clear()
        if self.repeats:
            log.warning("%d stop signal(s) received during the run's clean-up: ignored until it ended",
                        self.repeats)

    @property
    def stopping(self) -> bool:
        return bool(self.received)

    def clean_up(self) -> None:
        """From here on the run only cleans up: a signal is noted, never raised."""
        if not self.received:
            self.received.append(0)

    def _handle(self, signum, frame) -> None:
        name = signal.Signals(signum).name
        if self.received:
            self.repeats += 1
            if self.repeats == 1:
                _write_stderr(f"{name} received while the run stops: finishing the clean-up first "
                              "(SIGKILL stops at once)\n")
            return
        self.received.append(signum)
        raise Interrupted(signum, f"stopped by {name}; finished tasks stay in the run directory: re-run with "
                                  "resume=true (or the same hydra.run.dir) to continue")


def _write_stderr(line: str) -> None:
    """One unbuffered write, safe inside a signal handler whatever the main thread was writing."""
    try:
        os.write(2, line.encode())
    except OSError:  # a closed or full stderr: the block's end still logs the count
        pass
