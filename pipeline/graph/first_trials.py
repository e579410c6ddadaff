"""Every model's first trial under a time budget: each of its fits stops by its share of the time left
(`FirstTrials.deadline`; max-min fair, so a quick model's fits are not shortened for a slow one's), so
that one slow model's first fit cannot spend what every other model's first trial, and in a bag its own
other folds, need. AutoGluon gives each fold of a bag the time left over the folds left in the same way.
Without it, an 8-class table of 13,600 rows at time_limit_s=30 ended with no model complete: LightGBM's
first fold ran to the deadline and the bags' other 14 fits never started."""

from __future__ import annotations

from typing import Iterable, Optional

from pipeline.resources import gpu_slots

# the first fold of a bag whose model has no fit ended yet weighs this many times another fit: it measures
# what the bag's other folds are given, and a share that stops it cuts every one of them short too
UNMEASURED_FIRST = 2.0


def first_trial_fit(task) -> bool:
    """A fit of a model's first trial at level 1 (each model's own params under hpo=auto)."""
    return task.kind == "fit" and task.fold_set is None and task.trial == 0 and getattr(task, "level", 1) == 1


class FirstTrials:
    """The first trials' fits not started yet, and the deadline each gets when it starts."""

    def __init__(self, tasks: Iterable):
        self.pending = {t.id: t for t in tasks if first_trial_fit(t)}
        self.capped: set[str] = set()  # fits started with a deadline of their own, before the run's
        self.held_to_share = 0  # of them, fits that stopped there

    def deadline(self, task, budget, places: int, busy_s: float, gone,
                 now: Optional[float] = None) -> Optional[float]:
        """The time.time() `task` stops by, or None where the run's deadline holds. The time left on
        `places` places, less `busy_s` seconds the running fits still hold, is shared over the first
        trials' fits not yet started (`gone`: whether a task id was started or cut) by max-min fairness:
        a fit whose model's estimate is under the common level takes its estimate, the others the level
        (one not measured yet demands the level; `task` itself, the first of its bag's folds to start,
        `UNMEASURED_FIRST` levels). Where every fit left is measured and all fit, None."""
        if task.id not in self.pending:
            return None
        now = budget.clock() if now is None else now
        remaining = budget.deadline - now
        waiting = [t for tid, t in list(self.pending.items()) if tid == task.id or not self._gone(tid, gone)]
        del self.pending[task.id]
        demands = [(budget.estimate(t), 1.0) for t in waiting if t.id != task.id]
        own = budget.estimate(task)
        bag_first = own is None and sum(t.model == task.model for t in waiting) > 1
        demands.append((own, UNMEASURED_FIRST if bag_first else 1.0))
        level = water_level(demands, max(0.0, places * remaining - busy_s))
        if level is None:
            return None
        allowance = level * demands[-1][1]
        if allowance >= remaining:
            return None
        self.capped.add(task.id)
        return now + allowance

    def _gone(self, task_id: str, gone) -> bool:
        if gone(task_id):
            del self.pending[task_id]
            return True
        return False

    def ended(self, task, result) -> None:
        """A fit ended: counted where it stopped at its own deadline."""
        if task.id in self.capped and getattr(result, "stopped_by_budget", False):
            self.held_to_share += 1


def water_level(demands: list, capacity: float) -> Optional[float]:
    """The level L at which the fits' allowances, each min(its demand, its weight x L), add up to
    `capacity` (`demands`: (seconds or None for no bound, weight) per fit); None where every demand is
    bounded and they fit."""
    bounded = sorted((d / w, d, w) for d, w in demands if d is not None)
    if sum(d for _, d, _ in bounded) <= capacity and len(bounded) == len(demands):
        return None
    weight = sum(w for _, _, w in bounded) + sum(w for d, w in demands if d is None)
    spent = 0.0
    for per_weight, d, w in bounded:  # the lowest demands first: each one under the level takes all of it
        if spent + per_weight * weight > capacity:
            break
        spent, weight = spent + d, weight - w
    return (capacity - spent) / weight if weight > 0 else None


def places_for(task, pool, serial: bool) -> int:
    """How many fits like `task` run at once on the pool's CPUs and GPUs (one where fits run one at a
    time)."""
    if serial:
        return 1
    cpus = max(1, task.resources.num_cpus)
    gpus = gpu_slots(task.resources.num_gpus, list(pool.capacity.values()))
    return max(1, min(pool.num_cpus // cpus, gpus))


def busy_seconds(running: Iterable[tuple], budget, now: float) -> float:
    """Seconds the running fits still hold their places: each until its estimated end, at most its own
    deadline (`running`: (task, when it was submitted on the budget's clock, its request's deadline))."""
    total = 0.0
    for task, submitted, own in running:
        end = own or budget.deadline
        seconds = budget.estimate(task)
        if seconds is not None:
            end = min(end, submitted + seconds)
        total += max(0.0, end - now)
    return total
