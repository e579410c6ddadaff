"""The execution graph: fit tasks (model x trial x fold), a bag node per trial, then the ensemble,
the refit (refit=true) and the evaluation, each with its resources and device ids. The scheduler
runs exactly these tasks (pipeline.nodes says what each kind does). `dry_run` stops here and
writes plan.json.

Every task id is made here (`fit_id`, `bag_id` and the constants below); other modules read ids
from tasks' `depends_on`, never rebuild them.
"""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, Iterable, Optional

from pipeline.hardware import Hardware
from pipeline.quantities import ZERO
from pipeline.resources import Allocation, DevicePool, Resources

DRIVER = Resources(0, ZERO)  # bag, ensemble, refit and evaluate nodes run in the driver, holding no slot
ENSEMBLE, REFIT, EVALUATE = "ensemble", "refit", "evaluate"  # the ids (and kinds) of the single tail nodes


@dataclass(frozen=True)
class Task:
    id: str
    kind: str  # a registered node kind (pipeline.nodes): fit | bag | ensemble | refit | evaluate | ...
    resources: Resources
    depends_on: tuple[str, ...] = ()
    model: Optional[str] = None
    trial: Optional[int] = None
    fold: Optional[int] = None
    device_ids: tuple[int, ...] = ()
    gpu_shares: tuple[Fraction, ...] = ()
    wave: int = 0

    def to_json(self) -> dict:
        return {
            "id": self.id,
            "kind": self.kind,
            "model": self.model,
            "trial": self.trial,
            "fold": self.fold,
            "num_cpus": self.resources.num_cpus,
            "num_gpus": float(self.resources.num_gpus),
            "device_ids": list(self.device_ids),
            "gpu_shares": [float(s) for s in self.gpu_shares],
            "depends_on": list(self.depends_on),
            "wave": self.wave,
        }


def fit_id(model: str, trial: int, fold: int) -> str:
    return f"fit/{model}/t{trial}/f{fold}"


def bag_id(model: str, trial: int) -> str:
    return f"bag/{model}/t{trial}"


@dataclass(frozen=True)
class Plan:
    hardware: Hardware
    allocations: tuple[Allocation, ...]
    tasks: tuple[Task, ...]
    memory: Any = None  # pipeline.memory.budget.MemoryPlan: the data's shape and the capacities

    def __post_init__(self):
        seen: set[str] = set()
        for task in self.tasks:
            missing = [d for d in task.depends_on if d not in seen]
            if missing or task.id in seen:
                raise ValueError(f"task {task.id!r} is listed twice or before its dependencies {missing}: "
                                 "a plan lists every task after the tasks it depends on")
            seen.add(task.id)

    def with_task(self, task: Task, *, before: Optional[str] = None) -> "Plan":
        """This plan with `task` added (before the task `before`, which then also depends on it;
        else at the end): how a node of another kind joins the graph."""
        tasks = list(self.tasks)
        if before is None:
            tasks.append(task)
        else:
            i = next(i for i, t in enumerate(tasks) if t.id == before)
            tasks[i] = dataclasses.replace(tasks[i], depends_on=(*tasks[i].depends_on, task.id))
            tasks.insert(i, task)
        return dataclasses.replace(self, tasks=tuple(tasks))

    @property
    def ram_for_fits(self) -> Optional[int]:
        """Bytes of RAM the fits running at once may hold together; None when not planned."""
        return self.memory.ram_for_fits if self.memory is not None else None

    @property
    def fit_tasks(self) -> list[Task]:
        return [t for t in self.tasks if t.kind == "fit"]

    def allocation(self, model: str) -> Allocation:
        return next(a for a in self.allocations if a.model == model)

    @property
    def num_waves(self) -> int:
        return 1 + max((t.wave for t in self.fit_tasks), default=-1)

    @property
    def max_concurrency(self) -> int:
        """The most fit tasks that run at once in the simulated schedule."""
        per_wave = defaultdict(int)
        for t in self.fit_tasks:
            per_wave[t.wave] += 1
        return max(per_wave.values(), default=0)

    def to_json(self) -> dict:
        return {
            "hardware": self.hardware.to_json(),
            "models": [
                {
                    "name": a.model,
                    "num_folds": a.num_folds,
                    "num_trials": a.num_trials,
                    "folds_parallel": a.folds_parallel,
                    "folds_parallel_reason": a.parallel_reason,
                    "trials_parallel": a.trials_parallel,
                    "bag": a.bag.to_json(),
                    "fit": a.fit.to_json(),
                    "used": a.used.to_json(),
                    **({"memory": a.memory.to_json()} if a.memory is not None else {}),
                }
                for a in self.allocations
            ],
            **({"memory": self.memory.to_json()} if self.memory is not None else {}),
            "num_waves": self.num_waves,
            "tasks": [t.to_json() for t in self.tasks],
        }

    def write(self, path: Path) -> Path:
        from pipeline.store import atomic_write_bytes

        atomic_write_bytes(path, json.dumps(self.to_json(), indent=2).encode())
        return path


class Admission:
    """Decides which fit may start now: the plan's per-trial and per-model limits, and the pool.

    The plan's simulation and the executors share it, so a run follows its plan.
    """

    def __init__(self, plan_hardware: Hardware, allocations: Iterable[Allocation], ram: Optional[int] = None):
        self.pool = DevicePool(plan_hardware.num_cpus, plan_hardware.capacities())
        self.limits = {a.model: a for a in allocations}
        self.ram_free = ram  # bytes the running fits may still reserve; None: RAM not planned
        self.folds_running: dict[tuple[str, int], int] = defaultdict(int)
        self.trials_running: dict[str, set[int]] = defaultdict(set)

    def try_admit(self, task: Task):
        alloc = self.limits[task.model]
        key = (task.model, task.trial)
        if self.folds_running[key] >= alloc.folds_parallel:
            return None
        trials = self.trials_running[task.model]
        if task.trial not in trials and len(trials) >= alloc.trials_parallel:
            return None
        ram = self._ram(alloc)
        if self.ram_free is not None and ram > self.ram_free:
            return None
        shares = self.pool.try_allocate(task.resources)
        if shares is None:
            return None
        if self.ram_free is not None:
            self.ram_free -= ram
        self.folds_running[key] += 1
        trials.add(task.trial)
        return shares

    def release(self, task: Task, shares) -> None:
        self.pool.release(task.resources, shares)
        if self.ram_free is not None:
            self.ram_free += self._ram(self.limits[task.model])
        key = (task.model, task.trial)
        self.folds_running[key] -= 1
        if self.folds_running[key] == 0:
            self.trials_running[task.model].discard(task.trial)

    @staticmethod
    def _ram(alloc: Allocation) -> int:
        return alloc.memory.ram if alloc.memory is not None else 0


def build_plan(hardware: Hardware, allocations: list[Allocation], memory=None, *, evaluate: bool = False,
               refit: bool = False) -> Plan:
    """Fit tasks in order (model, trial, fold), with waves and device ids from a unit-time simulation,
    and a bag task per trial. With `evaluate`, the ensemble and evaluate tasks after the bags; with
    `refit` too, the refit task between them."""
    fits = [
        Task(fit_id(a.model, t, f), "fit", a.fit, model=a.model, trial=t, fold=f)
        for a in allocations
        for t in range(a.num_trials)
        for f in range(a.num_folds)
    ]
    placed = _simulate(hardware, allocations, fits, memory.ram_for_fits if memory is not None else None)
    wave_of = {t.id: t.wave for t in placed}
    bags = []
    for a in allocations:
        for t in range(a.num_trials):
            folds = tuple(fit_id(a.model, t, f) for f in range(a.num_folds))
            wave = max(wave_of[f] for f in folds)
            bags.append(Task(bag_id(a.model, t), "bag", DRIVER, folds, model=a.model, trial=t, wave=wave))
    tail = _tail(tuple(b.id for b in bags), max(wave_of.values(), default=-1) + 1, refit) if evaluate else []
    return Plan(hardware, tuple(allocations), tuple(placed + bags + tail), memory)


def _tail(bags: tuple[str, ...], wave: int, refit: bool) -> list[Task]:
    """The driver's nodes after the bags: ensemble, then (refit) refit, then evaluate on both."""
    tasks = [Task(ENSEMBLE, ENSEMBLE, DRIVER, bags, wave=wave)]
    if refit:
        tasks.append(Task(REFIT, REFIT, DRIVER, (ENSEMBLE,), wave=wave + 1))
    tasks.append(Task(EVALUATE, EVALUATE, DRIVER, tuple(t.id for t in tasks), wave=wave + len(tasks)))
    return tasks


def _simulate(hardware: Hardware, allocations: list[Allocation], fits: list[Task], ram: Optional[int]) -> list[Task]:
    admission = Admission(hardware, allocations, ram)
    pending = list(fits)
    placed: dict[str, Task] = {}
    wave = 0
    while pending:
        started = []
        for task in pending:
            shares = admission.try_admit(task)
            if shares is not None:
                started.append((task, shares))
        if not started:  # cannot happen after allocate() passed; guards an endless loop
            raise RuntimeError(f"plan simulation stalled at wave {wave} with {len(pending)} tasks")
        for task, shares in started:
            placed[task.id] = Task(
                task.id, task.kind, task.resources, task.depends_on, task.model, task.trial, task.fold,
                tuple(d for d, _ in shares), tuple(s for _, s in shares), wave,
            )
            admission.release(task, shares)
        started_ids = {t.id for t, _ in started}
        pending = [t for t in pending if t.id not in started_ids]
        wave += 1
    return [placed[t.id] for t in fits]
