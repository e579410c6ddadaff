"""What an executor's backend is: it starts fits where the scheduler says and reports each one once.

A backend is a context manager with one owner, the composition root (`pipeline.run`): leaving the
`with` block stops its workers or its Ray instance, however the run ended. The scheduler only
prepares, submits, waits and cancels.
"""

from __future__ import annotations

import logging
import time
from typing import Optional

from pipeline.graph.tasks import DataRef, FitRequest, FoldResult, TaskFailure
from pipeline.graph.plan import Plan

log = logging.getLogger("pipeline.graph.scheduler")  # its warnings are the scheduler's


class Backend:
    """Base of every backend: subclasses implement the fit methods; `shutdown` must be idempotent."""

    name: str = "backend"

    def __enter__(self) -> "Backend":
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()

    def start(self, plan: Plan) -> None:
        """Get ready early (start workers, connect), while the driver still loads data."""

    def prepare(self, plan: Plan, data) -> DataRef:
        raise NotImplementedError

    def submit(self, request: FitRequest) -> object:
        raise NotImplementedError

    def wait(self, handles: list, timeout: Optional[float] = None) -> list[tuple[object, FoldResult | TaskFailure]]:
        raise NotImplementedError

    def pickled(self, handle: object) -> Optional[bytes]:
        """The finished fit's result as its worker pickled it (taken: a second call gives None), for the
        result store to write as it came rather than pickle again; None where the backend has no bytes."""
        return None

    def cancel(self, handle: object) -> None:
        """Stop a running fit at once (its worker is killed); it is reported by no later wait()."""

    def shutdown(self) -> None:
        """Stop every worker; a second call does nothing."""


def wait_or_stop(backend: Backend, running: dict, started: dict, budget, task_timeout_s: Optional[float]
                 ) -> tuple[list, int]:
    """The backend's finished fits, (handle, result); with a task time limit, also each fit past it,
    stopped and failed; with a budget, each fit still running past the deadline's grace, stopped (None).
    `running`: handle -> (task, ...); `started`: handle -> time.monotonic() at submission. And how many
    were stopped for the budget."""
    timeouts = []
    if task_timeout_s is not None:
        oldest = min(started[h] for h in running)
        timeouts.append(oldest + task_timeout_s - time.monotonic())
    if budget is not None:  # a refit fit's deadline is past the other fits' (TimeBudget.deadline_for)
        timeouts.append(min(budget.deadline_for(t) for t, *_ in running.values()) + budget.grace - budget.clock())
    done = backend.wait(list(running), timeout=max(0.0, min(timeouts)) if timeouts else None)
    finished, cancelled = {h for h, _ in done}, 0
    now = time.monotonic()
    for handle, (task, *_) in running.items():
        if handle in finished:
            continue
        if budget is not None and budget.clock() >= budget.deadline_for(task) + budget.grace:
            log.warning("fit %s was still running %.0f s past the time limit; its worker is stopped",
                        task.id, budget.clock() - budget.deadline_for(task))
            backend.cancel(handle)
            cancelled += 1
            done.append((handle, None))
        elif task_timeout_s is not None and now - started[handle] >= task_timeout_s:
            backend.cancel(handle)
            done.append((handle, TaskFailure(task.id, f"the fit ran longer than executor.task_timeout_s="
                                                      f"{task_timeout_s:g} s and was stopped")))
    return done, cancelled
