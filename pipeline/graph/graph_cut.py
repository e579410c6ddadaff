"""What a time budget cut in a running graph, and how the cut spreads (pipeline.graph.time_budget).

A task is cut when a task it needs was cut, except for node kinds that run on whichever of their inputs
finished (`partial_inputs`: the ensemble, the evaluation, the refits), which are cut only when all were,
and fits that read the best of a model's level-1 trials (stacked fits, refits), cut only when every trial
of a model they read was; a task not started yet is cut when every task that would use its result was
cut (the other folds of a trial that cannot finish). Trials made while the graph runs
(pipeline.graph.trial_supply) join it through `add`; one not made yet is an input no cut reaches.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Callable, Iterable, Optional, Sequence

from pipeline.graph.shape import trial_bag
from pipeline.graph.trial_supply import TrialSupply, pending


def reads_best_trial(task) -> bool:
    """A fit that reads the best of its inputs' level-1 trials (a stacked fit, a refit: fitted with the best
    trial's params, or fed its fold models' predictions): a cut trial does not cut it, only every trial of
    a model it reads."""
    return task.kind == "fit" and getattr(task, "fold_set", None) is not None


class GraphCut:
    """The tasks of a plan the budget cut, and the cut's spread through the graph (module docstring)."""

    def __init__(self, tasks: Iterable, partial_inputs: Callable[[Any], bool],
                 supply: Optional[TrialSupply] = None):
        self.tasks = {t.id: t for t in tasks}
        self.partial_inputs = partial_inputs
        self.supply = supply
        self.consumers: dict[str, list[str]] = defaultdict(list)
        for t in self.tasks.values():
            for d in t.depends_on:
                self.consumers[d].append(t.id)
        # task id -> why: "budget" (did not fit), "input", "unused", "pruned" (a losing trial), "withdrawn"
        # (its kind was, graph.withdrawal) or "failed" (its kind left the run after a fit of it failed)
        self.cut: dict[str, str] = {}
        self.started: set[str] = set()  # started, running or done: never cut as unused
        self._trials: dict[str, dict[str, list[str]]] = {}  # a fit reading best trials: model -> trial bags
        self._searched: Optional[dict[str, list]] = None  # model -> the bags of its trials after the first

    def add(self, tasks: Sequence) -> None:
        """A trial made while the graph runs: its fits and its bag, which the tasks reading every trial of
        its model read too (`TrialSupply.joins`)."""
        for t in tasks:
            self.tasks[t.id] = t
            for d in t.depends_on:
                self.consumers[d].append(t.id)
            if not trial_bag(t):
                continue
            joins = self.supply.joins.get(t.model, ()) if self.supply is not None else ()
            self.consumers[t.id] += joins
            for j in joins:
                if j in self._trials:
                    self._trials[j].setdefault(t.model, []).append(t.id)
            if self._searched is not None and t.trial:
                self._searched[t.model].append(t)

    def gone(self, task_id: str) -> bool:
        """Whether `task_id` was started or cut: it waits in no queue."""
        return task_id in self.started or task_id in self.cut

    def inputs(self, task) -> Iterable[str]:
        """`task`'s inputs so far (with the trials made while the graph runs, `TrialSupply.inputs`)."""
        return self.supply.inputs(task) if self.supply is not None else task.depends_on

    def cut_task(self, task_id: str, why: str = "budget") -> list[str]:
        """Cut `task_id` and what the cut leaves without a use or without its inputs; the ids newly cut."""
        new, stack = [], [(task_id, why)]
        while stack:
            tid, reason = stack.pop()
            if tid in self.cut:
                continue
            self.cut[tid] = reason
            new.append(tid)
            # a pruned trial's bag is a trial that lost: what reads the model's best (a stacked level, a
            # refit) goes on without it
            for c in self.consumers[tid]:
                if c not in self.cut and all(d in self.cut for d in self._enough(self.tasks[c], tid, reason)):
                    stack.append((c, "input"))
            for d in self.inputs(self.tasks[tid]):
                if (d in self.tasks and d not in self.started and d not in self.cut
                        and all(c in self.cut for c in self.consumers[d])):
                    stack.append((d, "unused"))
        return new

    def search_end(self, task, ended: bool = True) -> list[str]:
        """`task`, a fit of a trial after its model's first, was cut for want of time (`ended`): its model's
        search ends there. A later trial has as many fits left or more, the same estimate per fit and no
        more time, so every one none of whose fits started is cut at once (before, each went through an
        admission pass of its own, in the same instant: 1.1-1.4 s for 10,000 trials), and those not made
        yet are dropped (`TrialSupply.end`); the ids newly cut."""
        if (not ended or task.kind != "fit" or not getattr(task, "trial", None)
                or getattr(task, "fold_set", None) is not None):
            return []
        return self.end_search(task.model, "budget")

    def end_search(self, model: str, why: str) -> list[str]:
        """Cut every trial of `model` after its first none of whose fits started, and drop those not made
        yet (`TrialSupply.end`): its search ends (`why`: the budget, or the kind was withdrawn); the ids
        newly cut."""
        if self.supply is not None:
            self.supply.end(model)
        if self._searched is None:
            self._searched = defaultdict(list)
            for t in self.tasks.values():
                if trial_bag(t) and t.trial:
                    self._searched[t.model].append(t)
        new = []
        for bag in self._searched.get(model, ()):
            if bag.id not in self.cut and not any(d in self.started for d in bag.depends_on):
                new += self.cut_task(bag.id, why)
        if model in self._searched:  # the trials still in play: a later call scans those alone
            self._searched[model] = [b for b in self._searched[model] if b.id not in self.cut]
        return new

    def _enough(self, consumer, cut_id: str, reason: str) -> Iterable[str]:
        """The inputs of `consumer` of which one still in place keeps it when `cut_id` is cut: all of them for
        a node that runs on whichever finished (or where a trial lost, `pruned`: what reads the model's best
        goes on without it), the model's level-1 trials for a fit that reads their best, else `cut_id`."""
        if reason == "pruned" or self.partial_inputs(consumer):
            return self.inputs(consumer)
        if not (reads_best_trial(consumer) and trial_bag(self.tasks[cut_id])):
            return (cut_id,)
        if consumer.id not in self._trials:
            groups: dict[str, list[str]] = defaultdict(list)
            for d in self.inputs(consumer):
                if d in self.tasks and trial_bag(self.tasks[d]):
                    groups[self.tasks[d].model].append(d)
            self._trials[consumer.id] = dict(groups)
        model = self.tasks[cut_id].model
        group = self._trials[consumer.id][model]
        return (*group, pending(model)) if self.supply is not None and self.supply.left(model) else group

    def siblings_left(self, task) -> int:
        """How many fits, this one included, a consumer that needs all its inputs (a trial's bag)
        still waits for before it can run: they must all end by the deadline for this one to count. One
        where a consumer takes it alone (a refit, read by the refit node): it counts on its own."""
        if any(self.partial_inputs(self.tasks[c]) for c in self.consumers[task.id]):
            return 1
        left = [
            sum(self.tasks[d].kind == "fit" and d not in self.started and d not in self.cut
                for d in self.tasks[c].depends_on)
            for c in self.consumers[task.id]
        ]
        return max(left, default=1)
