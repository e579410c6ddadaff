"""What an executor's backend is: it starts fits where the scheduler says and reports each one once.

A backend is a context manager with one owner, the composition root (`pipeline.run`): leaving the
`with` block stops its workers or its Ray instance, however the run ended. The scheduler only
prepares, submits, waits and cancels.
"""

from __future__ import annotations

from typing import Optional

from pipeline.graph.tasks import DataRef, FitRequest, FoldResult, TaskFailure
from pipeline.graph.plan import Plan


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

    def cancel(self, handle: object) -> None:
        """Stop a running fit at once (its worker is killed); it is reported by no later wait()."""

    def shutdown(self) -> None:
        """Stop every worker; a second call does nothing."""
