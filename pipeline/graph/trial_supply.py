"""The trials a plan counts but does not list, made while the plan runs: a few ahead of the search.

A plan lists the first trials of each model and states the count (pipeline.graph.plan). The scheduler
starts from those and makes each later trial's tasks (its folds' fits and its bag, `trial_tasks`) when
the model has fewer than `window` trials made and unsettled (`AHEAD` per trial it may run at once, and
`SPARE`): enough for `TrialGate` to open the next trial as one leaves, so the fits run in the order they
would with every trial made at the start. A run of 10,000 trials holds the tasks of the few trials in
play, not 150,000, and a search that ends (the budget ran out) drops the trials never made as a count.

A task that reads every trial of a model (the ensemble, a stacked level, a refit: its plan lists the
model's last listed bag among its inputs) waits, beside its listed inputs, for each trial not made yet;
a trial made turns one such wait into its bag, and `inputs` says the task's inputs so far.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from typing import Iterator

from pipeline.graph.plan import Plan, Task, bag_id, trial_bag, trial_rounds, trial_tasks

# trials made and unsettled: per trial a model may run at once, one running and one the gate has opened;
# and the gate's one more opened and one waiting for it
AHEAD, SPARE = 2, 2


class TrialSupply:
    """Per model with trials the plan does not list: the next trial to make, those made and unsettled, and
    the tasks that read every trial of it (`joins`)."""

    def __init__(self, plan: Plan):
        self.plan = plan
        self.rounds, _ = trial_rounds(plan)
        self.next = {m: plan.listed[m] for m in self.rounds}  # the next trial number to make
        self.total = {m: plan.allocation(m).num_trials for m in self.rounds}
        self.live = {m: plan.listed[m] for m in self.rounds}  # made (or listed) and not settled
        self.window = {m: AHEAD * max(1, plan.allocation(m).trials_parallel) + SPARE for m in self.rounds}
        self.made: dict[str, list[str]] = defaultdict(list)  # model -> the bag ids made, in trial order
        self.dropped: dict[str, int] = defaultdict(int)  # model -> trials never made: the search ended first
        self._dropped_since: dict[str, int] = {}  # ... since the last `take_dropped`
        last = {bag_id(m, plan.listed[m] - 1): m for m in self.rounds}
        self.joins: dict[str, list[str]] = defaultdict(list)  # model -> the tasks reading all its trials
        self._reads: dict[str, list[str]] = defaultdict(list)  # task id -> the models whose trials it reads
        for t in plan.tasks:
            if trial_bag(t):
                continue
            for d in t.depends_on:
                if d in last:
                    self.joins[last[d]].append(t.id)
                    self._reads[t.id].append(last[d])

    def left(self, model: str) -> int:
        """Trials of `model` not made yet."""
        return self.total.get(model, 0) - self.next.get(model, 0)

    def waits(self, task_id: str) -> int:
        """How many trials not made yet the task `task_id` waits for."""
        return sum(self.left(m) for m in self._reads.get(task_id, ()))

    def settled(self, task: Task) -> list[Task]:
        """A task settled (done or cut): when it is a trial's bag, the trials made to take its place."""
        if not trial_bag(task) or task.model not in self.live:
            return []
        self.live[task.model] -= 1
        return self.top_up(task.model)

    def top_up(self, model: str) -> list[Task]:
        """The tasks of the trials of `model` made now: until `window` are unsettled, or none is left."""
        out = []
        while self.left(model) and self.live[model] < self.window[model]:
            made = trial_tasks(self.plan, self.rounds, model, self.next[model])
            self.next[model] += 1
            self.live[model] += 1
            self.made[model].append(made[-1].id)
            out += made
        return out

    def end(self, model: str) -> int:
        """The search of `model` ended: its trials not made are dropped; how many."""
        n = self.left(model)
        if n:
            self.dropped[model] += n
            self._dropped_since[model] = self._dropped_since.get(model, 0) + n
            self.next[model] = self.total[model]
        return n

    def take_dropped(self) -> dict[str, int]:
        """Per model, the trials `end` dropped since the last call."""
        out, self._dropped_since = self._dropped_since, {}
        return out

    def inputs(self, task: Task) -> Iterator[str]:
        """`task`'s inputs so far: its listed ones, each model's last listed bag followed by the bags made
        since; and while trials of such a model are still to be made, `pending(model)`, no cut reaches."""
        reads = self._reads.get(task.id)
        if not reads:
            yield from task.depends_on
            return
        last = {bag_id(m, self.plan.listed[m] - 1): m for m in reads}
        for d in task.depends_on:
            yield d
            model = last.get(d)
            if model is not None:
                yield from self.made[model]
                if self.left(model):
                    yield pending(model)

    def whole(self, task: Task) -> Task:
        """`task` with every input it reads now (a node that runs on its inputs sees them all)."""
        if task.id not in self._reads:
            return task
        return dataclasses.replace(task, depends_on=tuple(d for d in self.inputs(task) if not is_pending(d)))

    @property
    def dropped_fits(self) -> int:
        return sum(n * self.plan.allocation(m).num_folds for m, n in self.dropped.items())


def pending(model: str) -> str:
    """The input standing for the trials of `model` not made yet."""
    return f"pending/{model}"


def is_pending(task_id: str) -> bool:
    return task_id.startswith("pending/")
