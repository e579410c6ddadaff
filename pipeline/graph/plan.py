"""The execution graph: fit tasks (model x trial x fold, and with stacking the models of every
level), a bag node per trial and per stacked level, then the ensemble, the refit (refit=true: its
fits, then the node that assembles them) and the evaluation, each with its resources and device ids.
The scheduler runs exactly these tasks (pipeline.graph.nodes says what each kind does). `dry_run` stops
here and writes plan.json.

The graph's shape (the tasks and their ids, one builder per node kind) is pipeline.graph.shape's; this
module places the fits on the hardware and admits them while the plan runs.
"""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Optional

from pipeline.hardware import Hardware
from pipeline.resources import Allocation, DevicePool
from pipeline.graph.shape import (  # noqa: F401  (the graph's records and ids, importable from here)
    BUILDERS, DRIVER, ENSEMBLE, EVALUATE, REFIT, Shape, Task, bag_id, fit_id, stack_bag_id, stack_fit_id,
)


@dataclass(frozen=True)
class Plan:
    hardware: Hardware
    allocations: tuple[Allocation, ...]
    tasks: tuple[Task, ...]
    memory: Any = None  # pipeline.memory.budget.MemoryPlan: the data's shape and the capacities
    stack_levels: int = 0  # levels stacked on the base models (pipeline.graph.stacking)

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

    def task(self, task_id: str) -> Task:
        return next(t for t in self.tasks if t.id == task_id)

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
                    "device": a.device,
                    "device_reason": a.device_reason,
                    **({"gpu_packing_reason": a.packing_reason} if a.packing_reason else {}),
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
            "stack_levels": self.stack_levels,
            "num_waves": self.num_waves,
            "tasks": [t.to_json() for t in self.tasks],
        }

    def write(self, path: Path) -> Path:
        from pipeline.store import atomic_write_bytes

        atomic_write_bytes(path, json.dumps(self.to_json(), indent=2).encode())
        return path


class Admission:
    """Decides which fit may start now: the plan's per-trial and per-model limits, and the pool.

    A stacked level's fits (and a refit) count as one more trial of their model: at most
    folds_parallel of them at once, beside at most trials_parallel - 1 other trials or levels.

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
        key = task.slot
        if self.folds_running[key] >= alloc.folds_parallel:
            return None
        trials = self.trials_running[task.model]
        if key[1] not in trials and len(trials) >= alloc.trials_parallel:
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
        trials.add(key[1])
        return shares

    def release(self, task: Task, shares) -> None:
        self.pool.release(task.resources, shares)
        if self.ram_free is not None:
            self.ram_free += self._ram(self.limits[task.model])
        key = task.slot
        self.folds_running[key] -= 1
        if self.folds_running[key] == 0:
            self.trials_running[task.model].discard(key[1])

    @staticmethod
    def _ram(alloc: Allocation) -> int:
        return alloc.memory.ram if alloc.memory is not None else 0




def build_plan(hardware: Hardware, allocations: list[Allocation], memory=None, *, evaluate: bool = False,
               refit: bool = False, stack_levels: int = 0) -> Plan:
    """The graph `BUILDERS` make, each fit placed (wave, device ids) by a unit-time simulation that
    starts a fit once everything it depends on is done; a driver task's wave follows its inputs'."""
    shape = Shape(tuple(allocations), stack_levels, evaluate, refit)
    tasks: list[Task] = []
    for builder in BUILDERS:
        tasks += builder(shape, tasks)
    placed = _simulate(hardware, allocations, tasks, memory.ram_for_fits if memory is not None else None)
    return Plan(hardware, tuple(allocations), tuple(placed), memory, stack_levels)


def _simulate(hardware: Hardware, allocations: list[Allocation], tasks: list[Task], ram: Optional[int]) -> list[Task]:
    admission = Admission(hardware, allocations, ram)
    done_at: dict[str, int] = {}  # task id -> the wave at whose end it is done
    waves: dict[str, int] = {}
    placed: dict[str, Task] = {}
    pending = [t for t in tasks if t.kind == "fit"]
    wave = 0
    fit_ids = {t.id for t in pending}
    _settle(tasks, fit_ids, done_at, waves)
    while pending:
        started = []
        for task in pending:
            if any(done_at.get(d, wave) >= wave for d in task.depends_on):
                continue
            shares = admission.try_admit(task)
            if shares is not None:
                started.append((task, shares))
        if not started:  # cannot happen after allocate() passed; guards an endless loop
            raise RuntimeError(f"plan simulation stalled at wave {wave} with {len(pending)} tasks")
        for task, shares in started:
            placed[task.id] = dataclasses.replace(task, device_ids=tuple(d for d, _ in shares),
                                                  gpu_shares=tuple(s for _, s in shares), wave=wave)
            admission.release(task, shares)
            done_at[task.id] = waves[task.id] = wave
        started_ids = {t.id for t, _ in started}
        pending = [t for t in pending if t.id not in started_ids]
        _settle(tasks, fit_ids, done_at, waves)
        wave += 1
    return [placed[t.id] if t.kind == "fit" else dataclasses.replace(t, wave=waves[t.id]) for t in tasks]


def _settle(tasks: list[Task], fit_ids: set[str], done_at: dict[str, int], waves: dict[str, int]) -> None:
    """Driver tasks whose inputs are all placed: done when the last is; shown in the wave of their last
    fit, or the wave after their last driver input (a bag in its folds' wave, the ensemble after)."""
    for task in tasks:
        if task.id in fit_ids or task.id in done_at or any(d not in done_at for d in task.depends_on):
            continue
        done_at[task.id] = max((done_at[d] for d in task.depends_on), default=-1)
        waves[task.id] = max((waves[d] + (d not in fit_ids) for d in task.depends_on), default=0)
