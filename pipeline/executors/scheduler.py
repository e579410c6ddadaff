"""The driver loop shared by every executor: admit fits as the plan allows, collect, retry, bag.

A backend only starts fits and reports them. The scheduler decides what starts (the plan's
per-trial and per-model limits and the device pool, through plan.Admission), reuses finished
results from the store, retries failures, and turns each trial's folds into a bagged result.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Optional, Protocol

import numpy as np

from pipeline.errors import TaskFailedError
from pipeline.executors.backend import Backend
from pipeline.executors.tasks import DataRef, FitRequest, FoldResult, TaskFailure, task_key, task_seed
from pipeline.metrics import Metric
from pipeline.plan import Admission, Plan, Task
from pipeline.store import ResultStore

log = logging.getLogger(__name__)


@dataclass
class TrialResult:
    """One trial of one model: its bagged out-of-fold (or holdout) and test predictions."""

    model: str
    trial: int
    params: dict
    folds: list[FoldResult]
    held_out: np.ndarray
    val_pred: np.ndarray
    test_pred: np.ndarray
    score: float
    pruned: bool = False

    @property
    def fit_seconds(self) -> float:
        return sum(f.fit_seconds for f in self.folds)

    @property
    def predict_seconds(self) -> float:
        return sum(f.predict_seconds for f in self.folds)


@dataclass
class Outcome:
    trials: dict[tuple[str, int], TrialResult] = field(default_factory=dict)
    timeline: list[dict] = field(default_factory=list)

    def best(self, model: str, metric: Metric) -> TrialResult:
        candidates = [t for (m, _), t in self.trials.items() if m == model and not t.pruned]
        if not candidates:
            candidates = [t for (m, _), t in self.trials.items() if m == model]
        best = candidates[0]
        for t in candidates[1:]:
            if metric.better(t.score, best.score):
                best = t
        return best


class Hooks(Protocol):
    def on_task_start(self, task: Task) -> None: ...

    def on_task_end(self, task: Task, result: FoldResult) -> None: ...

    def on_trial_end(self, result: TrialResult) -> None: ...


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
    ):
        self.plan, self.backend, self.store, self.trials = plan, backend, store, trials
        self.prototypes, self.data, self.metric = prototypes, data, metric
        self.seed, self.max_retries, self.hooks, self.pruning = seed, max_retries, hooks, pruning
        self.curves: dict[tuple[str, int], list[dict]] = {}
        self.task_timeout_s = task_timeout_s
        self.started: dict[object, float] = {}  # handle -> time.monotonic() at submission

    def run(self) -> Outcome:
        outcome = Outcome()
        admission = Admission(self.plan.hardware, self.plan.allocations, self.plan.ram_for_fits)
        pending: list[Task] = list(self.plan.fit_tasks)
        running: dict[object, tuple[Task, tuple, FitRequest]] = {}
        finished: dict[str, FoldResult] = {}
        attempts: dict[str, int] = defaultdict(int)
        folds_of = {(a.model, t): a.num_folds for a in self.plan.allocations for t in range(a.num_trials)}
        data_ref = self.backend.prepare(self.plan, self.data)
        while pending or running:
            for task in list(pending):
                shares = admission.try_admit(task)
                if shares is None:
                    continue
                pending.remove(task)
                request = self._request(task, shares, data_ref, attempts[task.id])
                cached = self.store.get(request.key)
                if cached is not None:
                    admission.release(task, shares)
                    cached.cached = True
                    self._finish(task, cached, request, finished, folds_of, outcome)
                    continue
                if self.hooks:
                    self.hooks.on_task_start(task)
                handle = self.backend.submit(request)
                running[handle] = (task, shares, request)
                self.started[handle] = time.monotonic()
            if not running:
                if pending:  # admission refused everything with nothing running: cannot happen for a valid plan
                    raise RuntimeError(f"scheduler stalled with {len(pending)} tasks pending")
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
                    pending.insert(0, task)
                    continue
                result.attempt = attempts[task.id]
                self.store.put(request.key, result)
                self._finish(task, result, request, finished, folds_of, outcome)
        return outcome

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

    def _reference(self, model: str, fold: int) -> tuple[dict, ...]:
        """Loss curves of this model's finished, unpruned trials on this fold, for the pruner."""
        return tuple(self.curves.get((model, fold), ()))

    def _request(self, task: Task, shares, data_ref: DataRef, attempt: int) -> FitRequest:
        params = self.trials.params(task.model, task.trial)
        prototype = self.prototypes[task.model]
        num_folds = self.plan.allocation(task.model).num_folds
        seed = task_seed(self.seed, task.model, task.trial, task.fold)
        key = task_key(self.data.fingerprint, prototype, params, task.fold, num_folds, self.seed, seed,
                       self.metric.name, self.pruning, device=_device_kind(prototype, params, shares))
        return FitRequest(
            task_id=task.id, key=key, model=prototype, params=params, model_name=task.model,
            trial=task.trial, fold=task.fold, num_folds=num_folds, fold_seed=self.seed, seed=seed,
            eval_metric=self.metric.name, num_cpus=task.resources.num_cpus,
            gpu_ids=tuple(d for d, _ in shares), gpu_shares=tuple(s for _, s in shares), data=data_ref,
            checkpoint_dir=str(self.store.checkpoint_dir(key)), pruning=self.pruning,
            prune_reference=self._reference(task.model, task.fold) if self.pruning else (),
        )

    def _finish(self, task: Task, result: FoldResult, request: FitRequest, finished: dict, folds_of: dict,
                outcome: Outcome) -> None:
        finished[task.id] = result
        if result.curve and not result.pruned:
            self.curves.setdefault((task.model, task.fold), []).append(result.curve)
        outcome.timeline.append(
            {
                "task": task.id, "model": task.model, "trial": task.trial, "fold": task.fold,
                "start": result.start, "end": result.end, "pid": result.pid, "host": result.host,
                "node": result.node,
                "num_cpus": request.num_cpus, "device_ids": list(result.gpu_ids),
                "gpu_shares": [float(s) for s in request.gpu_shares],
                "cuda_visible_devices": result.cuda_visible_devices, "device": result.device,
                "cached": result.cached, "attempt": result.attempt, "pruned": result.pruned,
                **self._memory(task.model, result),
            }
        )
        if self.hooks:
            self.hooks.on_task_end(task, result)
        key = (task.model, task.trial)
        ids = [f"fit/{task.model}/t{task.trial}/f{f}" for f in range(folds_of[key])]
        if all(i in finished for i in ids):
            trial = self._bag(task.model, task.trial, [finished[i] for i in ids])
            outcome.trials[key] = trial
            self.trials.tell(task.model, task.trial, trial.score, pruned=trial.pruned)
            if self.hooks:
                self.hooks.on_trial_end(trial)

    def _memory(self, model: str, result: FoldResult) -> dict:
        """The fit's measured peaks beside the plan's estimate, in MiB, for the timeline."""
        out = {"peak_ram_mb": round(result.peak_ram / 2**20, 1), "peak_gpu_mb": round(result.peak_gpu / 2**20, 1)}
        memory = self.plan.allocation(model).memory
        if memory is not None:
            out.update(estimate_ram_mb=round(memory.estimate.ram / 2**20, 1),
                       estimate_gpu_mb=round(memory.estimate.gpu / 2**20, 1))
        return out

    def _bag(self, model: str, trial: int, folds: list[FoldResult]) -> TrialResult:
        held_out = np.concatenate([f.held_out for f in folds])
        val_pred = np.concatenate([f.val_pred for f in folds])
        order = np.argsort(held_out, kind="stable")
        held_out, val_pred = held_out[order], val_pred[order]
        test_pred = np.mean([f.test_pred for f in folds], axis=0)
        score = self.metric(self.data.y[held_out], val_pred)
        return TrialResult(model, trial, self.trials.params(model, trial), folds, held_out, val_pred, test_pred,
                           score, pruned=any(f.pruned for f in folds))


def _device_kind(prototype, params: dict, shares) -> str:
    """"gpu" when this fit is given GPUs and its parameters let it use them, else "cpu"."""
    may_use_gpu = type(prototype).gpu_request({**prototype.params, **params})[0]
    return "gpu" if shares and may_use_gpu else "cpu"
