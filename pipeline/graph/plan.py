"""The execution graph: fit tasks (model x trial x fold, and with stacking the models of every
level), a bag node per trial and per stacked level, then the ensemble, the refit (refit=true: its
fits, then the node that assembles them) and the evaluation, each with its resources and device ids.
The scheduler runs exactly these tasks (pipeline.graph.nodes says what each kind does). `dry_run` stops
here and writes plan.json.

Trials of one model share one resource shape, so a plan lists only the first rounds of each model's
trials (`listed_trials`: two rounds of its trials in parallel, whatever hpo.num_trials is) and
states the count; each other trial is a copy of a listed trial a whole number of rounds later
(`trial_tasks`), made by the scheduler as the run reaches it (pipeline.graph.trial_supply).
Planning costs the same for 10 trials as for 10,000, and so does a run that ends its search early.

The graph's shape (the tasks and their ids, one builder per node kind) is pipeline.graph.shape's; this
module places the fits on the hardware and admits them while the plan runs.
"""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Iterable, Optional

from pipeline.hardware import Hardware
from pipeline.resources import Allocation, DevicePool
from pipeline.graph.shape import (  # noqa: F401  (the graph's records and ids, importable from here)
    BUILDERS, DRIVER, ENSEMBLE, EVALUATE, REFIT, Shape, Task, bag_id, fit_id, stack_bag_id, stack_fit_id,
    trial_bag,
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

    @cached_property
    def _by_id(self) -> dict[str, Task]:
        return {t.id: t for t in self.tasks}

    @cached_property
    def listed(self) -> dict[str, int]:
        """Model -> how many of its trials the plan lists (the first ones); the others repeat their shape."""
        out: dict[str, int] = defaultdict(int)
        for t in self.tasks:
            if trial_bag(t):
                out[t.model] += 1
        return dict(out)

    def unlisted(self, model: str) -> int:
        """How many trials of `model` the plan counts but does not list."""
        return max(0, self.allocation(model).num_trials - self.listed.get(model, 0))

    @property
    def unlisted_fits(self) -> int:
        return sum(self.unlisted(a.model) * a.num_folds for a in self.allocations)

    @property
    def num_fits(self) -> int:
        """Every fit the plan will run, listed or not."""
        return len(self.fit_tasks) + self.unlisted_fits

    def expanded(self) -> "Plan":
        """This plan with every trial listed: the whole graph a run walks, trial by trial as it makes them."""
        if not any(self.unlisted(a.model) for a in self.allocations):
            return self
        if "_expanded" not in self.__dict__:  # made once
            self.__dict__["_expanded"] = dataclasses.replace(self, tasks=tuple(_expand(self)))
        return self.__dict__["_expanded"]

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
        return self._by_id[task_id]

    def allocation(self, model: str) -> Allocation:
        return next(a for a in self.allocations if a.model == model)

    @property
    def num_waves(self) -> int:
        """Waves of the whole plan, the unlisted trials' included (`trial_rounds` extrapolates them)."""
        return 1 + max((t.wave for t in self.fit_tasks), default=-1) + trial_rounds(self)[1]

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
                    "trials_listed": self.listed.get(a.model, 0),
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
            "num_fits": self.num_fits,
            "trials_note": ("tasks lists the first trials of each model (trials_listed of num_trials): every trial "
                            "has their shape (folds, devices, memory); the others run the same way, a whole "
                            "number of rounds of trials_parallel later"),
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
    listed = [dataclasses.replace(a, num_trials=listed_trials(a)) for a in allocations]
    shape = Shape(tuple(listed), stack_levels, evaluate, refit)
    tasks: list[Task] = []
    for builder in BUILDERS:
        tasks += builder(shape, tasks)
    placed = _simulate(hardware, listed, tasks, memory.ram_for_fits if memory is not None else None)
    return Plan(hardware, tuple(allocations), tuple(placed), memory, stack_levels)


def listed_trials(a: Allocation) -> int:
    """The trials of a model a plan lists: two rounds of its trials in parallel (four at least), so that
    the second round shows how the rounds follow each other."""
    return min(a.num_trials, max(4, 2 * a.trials_parallel))


def trial_rounds(plan: Plan) -> tuple[dict[str, tuple[int, int, dict]], int]:
    """Per model with unlisted trials: its trials in parallel P, the waves D from one round to the next
    (trial i to trial i + P, in the last listed round), and the first wave of each listed trial; and the waves the
    unlisted trials add to the plan's end."""
    firsts: dict[str, dict[int, int]] = defaultdict(dict)
    lasts: dict[str, int] = defaultdict(int)
    for t in plan.tasks:
        if t.kind == "fit" and t.fold_set is None:
            first = firsts[t.model]
            first[t.trial] = min(first.get(t.trial, t.wave), t.wave)
            lasts[t.model] = max(lasts[t.model], t.wave)
    out, added = {}, 0
    for a in plan.allocations:
        listed, extra = plan.listed.get(a.model, 0), plan.unlisted(a.model)
        if not extra:
            continue
        p, first = max(1, a.trials_parallel), firsts[a.model]
        # the second round against the first: the steady state, once the models' first fits have interleaved
        step = max([1] + [first[i + p] - first[i] for i in range(max(0, listed - 2 * p), listed - p) if i + p in first])
        out[a.model] = (p, step, first)
        added = max(added, -(-extra // p) * step)
    return out, added


def trial_tasks(plan: Plan, rounds: dict, model: str, trial: int) -> list[Task]:
    """Trial `trial` of `model`, one the plan does not list: its fits and its bag, copies of listed trial
    L - P + (t - L) mod P, (t - L) // P + 1 rounds of D waves later (`trial_rounds`)."""
    p, step, _ = rounds[model]
    listed, by_id = plan.listed[model], plan._by_id
    template, later = listed - p + (trial - listed) % p, ((trial - listed) // p + 1) * step
    fits = [dataclasses.replace(fit, id=fit_id(model, trial, fold), trial=trial, wave=fit.wave + later)
            for fold in range(plan.allocation(model).num_folds) for fit in (by_id[fit_id(model, template, fold)],)]
    bag = by_id[bag_id(model, template)]
    return [*fits, dataclasses.replace(bag, id=bag_id(model, trial), trial=trial, wave=bag.wave + later,
                                       depends_on=tuple(f.id for f in fits))]


def _expand(plan: Plan) -> list[Task]:
    """The plan's tasks with every trial (`trial_tasks`); each task that reads every trial of a model (the
    ensemble, stacking, refits) reads the new bags too; what follows the trials moves by the waves they add."""
    rounds, added = trial_rounds(plan)
    new_fits: list[Task] = []
    new_bags: dict[str, list[str]] = {}
    for a in plan.allocations:
        if a.model not in rounds:
            continue
        listed = plan.listed[a.model]
        made = [t for trial in range(listed, a.num_trials) for t in trial_tasks(plan, rounds, a.model, trial)]
        new_fits += made
        new_bags[bag_id(a.model, listed - 1)] = [t.id for t in made if t.kind == "bag"]
    out: list[Task] = []
    trial_task = lambda t: t.level == 1 and t.trial is not None and t.kind in ("fit", "bag")  # noqa: E731
    last_trial = max(i for i, t in enumerate(plan.tasks) if trial_task(t))
    for i, t in enumerate(plan.tasks):
        if not trial_task(t):
            deps = tuple(d2 for d in t.depends_on for d2 in (d, *new_bags.get(d, ())))
            t = dataclasses.replace(t, depends_on=deps, wave=t.wave + added)
        out.append(t)
        if i == last_trial:
            out += new_fits
    return out


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
