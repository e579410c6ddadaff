"""The driver loop shared by every executor: walk the plan's graph.

A task starts when every task in its `depends_on` is done. What starting means is its node kind's
(`pipeline.nodes`): a worker kind (the fit) is admitted as the plan allows (per-trial and per-model
limits and the device pool, through plan.Admission), reused from the store when a result for its
key is there, sent to the backend, and retried when it fails; a driver kind (bag, ensemble, refit,
evaluate, or any kind registered later) runs here, on its dependencies' results. The backend only
runs requests and reports them.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from typing import Any, Optional

from pipeline.errors import TaskFailedError
from pipeline.executors.backend import Backend
from pipeline.executors.tasks import TaskFailure
from pipeline.metrics import Metric
from pipeline.nodes import node_kind
from pipeline.nodes.context import GraphContext, Hooks, Outcome, RunOutputs, TrialResult
from pipeline.plan import Admission, Plan, Task
from pipeline.store import ResultStore

__all__ = ["Hooks", "Outcome", "Scheduler", "TrialResult"]

log = logging.getLogger(__name__)


class Scheduler:
    def __init__(
        self,
        plan: Plan,
        backend: Backend,
        store: ResultStore,
        trials,  # hpo.TrialSource
        prototypes: dict,  # model name -> unfitted TabularModel
        data,  # TabularData
        metric: Metric,
        *,
        seed: int,
        max_retries: int = 1,
        hooks: Optional[Hooks] = None,
        pruning: bool = False,
        task_timeout_s: Optional[float] = None,
        outputs: Optional[RunOutputs] = None,
    ):
        self.plan, self.backend, self.store = plan, backend, store
        self.max_retries, self.hooks, self.task_timeout_s = max_retries, hooks, task_timeout_s
        self.ctx = GraphContext(plan, data, metric, seed, trials, store, prototypes, pruning=pruning, hooks=hooks,
                                outputs=outputs)
        self.kinds = {kind: node_kind(kind) for kind in dict.fromkeys(t.kind for t in plan.tasks)}
        self.started: dict[object, float] = {}  # handle -> time.monotonic() at submission

    def run(self) -> Outcome:
        """Run every task of the plan; the outcome holds each task's result under its id."""
        ctx = self.ctx
        admission = Admission(self.plan.hardware, self.plan.allocations, self.plan.ram_for_fits)
        self.blocked: list[Task] = list(self.plan.tasks)  # waiting for their dependencies
        self.queued: list[Task] = []  # worker tasks waiting for admission, in plan order
        running: dict[object, tuple[Task, tuple, Any]] = {}
        attempts: dict[str, int] = defaultdict(int)
        ctx.data_ref = self.backend.prepare(self.plan, ctx.data)
        self._release()
        while self.queued or running:
            while self._admit(admission, running, attempts):
                pass  # a result taken from the store may release fits that depend on it (a stacked level, a refit)
            if not running:
                if self.queued:  # admission refused everything with nothing running: cannot happen for a valid plan
                    raise RuntimeError(f"scheduler stalled with {len(self.queued)} tasks pending")
                break
            for handle, result in self._wait(running):
                task, shares, request = running.pop(handle)
                self.started.pop(handle, None)
                admission.release(task, shares)
                if isinstance(result, TaskFailure):
                    attempts[task.id] += 1
                    if attempts[task.id] > self.max_retries:
                        raise TaskFailedError(
                            f"task {task.id} failed after {attempts[task.id]} attempt(s): {result.message}. "
                            f"Finished tasks are kept in {self.store.dir}; fix the cause and re-run with "
                            "resume=true to reuse them"
                        )
                    log.warning("task %s failed (attempt %d of %d): %s; retrying", task.id, attempts[task.id],
                                self.max_retries + 1, result.message)
                    self.queued.insert(0, task)
                    continue
                result.attempt = attempts[task.id]
                self.store.put(request.key, result)
                self._complete(task, result, request)
        if self.blocked:  # build_plan orders tasks after their dependencies: cannot happen for a valid plan
            raise RuntimeError(f"scheduler stalled with {len(self.blocked)} tasks waiting: {self.blocked[0].id}")
        return ctx.outcome

    def _admit(self, admission: Admission, running: dict, attempts: dict) -> bool:
        """Start every queued task admission allows; True when one completed at once, from the store."""
        reused = False
        for task in list(self.queued):
            shares = admission.try_admit(task)
            if shares is None:
                continue
            self.queued.remove(task)
            request = self.kinds[task.kind].request(task, shares, self.ctx, attempts[task.id])
            cached = self.store.get(request.key)
            if cached is not None:
                admission.release(task, shares)
                cached.cached = True
                self._complete(task, cached, request)
                reused = True
                continue
            if self.hooks:
                self.hooks.on_task_start(task)
            handle = self.backend.submit(request)
            running[handle] = (task, shares, request)
            self.started[handle] = time.monotonic()
        return reused

    def _complete(self, task: Task, result, request) -> None:
        self.ctx.outcome.results[task.id] = self.kinds[task.kind].done(task, result, request, self.ctx)
        self._release()

    def _release(self) -> None:
        """Every task whose dependencies are done leaves `blocked`: a driver task runs now (and may
        release others), a worker task joins the admission queue."""
        done = self.ctx.outcome.results
        ready = next((t for t in self.blocked if all(d in done for d in t.depends_on)), None)
        while ready is not None:
            self.blocked.remove(ready)
            kind = self.kinds[ready.kind]
            if kind.on_worker:
                self.queued.append(ready)
            else:
                done[ready.id] = kind.run(ready, {d: done[d] for d in ready.depends_on}, self.ctx)
            ready = next((t for t in self.blocked if all(d in done for d in t.depends_on)), None)

    def _wait(self, running: dict) -> list:
        """The backend's finished fits; with a time limit, also each fit past it, stopped and failed."""
        if self.task_timeout_s is None:
            return self.backend.wait(list(running))
        oldest = min(self.started[h] for h in running)
        done = self.backend.wait(list(running), timeout=max(0.0, oldest + self.task_timeout_s - time.monotonic()))
        finished = {h for h, _ in done}
        now = time.monotonic()
        for handle, (task, _, _) in running.items():
            if handle not in finished and now - self.started[handle] >= self.task_timeout_s:
                self.backend.cancel(handle)
                done.append((handle, TaskFailure(task.id, f"the fit ran longer than executor.task_timeout_s="
                                                          f"{self.task_timeout_s:g} s and was stopped")))
        return done
