"""How long the work after each task takes (its upward rank), from the fits measured so far: what the
scheduler's queue runs first, the longest path to the end (HEFT's upward rank, Topcuoglu et al. 2002)."""

from __future__ import annotations

from collections import defaultdict
from typing import Callable, Optional

from pipeline.graph.shape import Task, fit_id


class FitRanks:
    """Each model's fits measured (seconds, count), and the ranks of a plan's listed tasks computed from
    their means; a trial the plan does not list ranks as its model's first trial (the same shape)."""

    def __init__(self, tasks: tuple[Task, ...], on_worker: Callable[[Task], bool]):
        self.tasks, self.on_worker = tasks, on_worker
        self.consumers: dict[str, list[Task]] = defaultdict(list)
        for t in tasks:
            for d in t.depends_on:
                self.consumers[d].append(t)
        self.fit_seconds: dict[str, list] = defaultdict(lambda: [0.0, 0])  # model -> [seconds, fits]
        self.ranked: dict[str, float] = {}  # model -> the mean seconds the ranks were computed with
        self._ranks: Optional[dict[str, float]] = None  # None: to compute (again) before the next use

    @property
    def stale(self) -> bool:
        """Whether the ranks are to be computed again (a model's mean moved): the queue's order may too."""
        return self._ranks is None

    def spent(self, model: str) -> float:
        """Seconds the fits of `model` measured so far took."""
        return self.fit_seconds[model][0] if model in self.fit_seconds else 0.0

    def rank(self, task: Task) -> float:
        if self._ranks is None:
            self._ranks = self._upward_ranks()
        rank = self._ranks.get(task.id)
        return self._ranks[fit_id(task.model, 0, task.fold)] if rank is None else rank

    def record(self, model: str, seconds: float) -> None:
        """A finished fit's seconds. The ranks are computed again (and the queue sorted by them) when its
        model is measured for the first time or its mean moved by more than a tenth: a run of thousands
        of HPO fits does not walk its graph after each."""
        finished = self.fit_seconds[model]
        finished[0] += seconds
        finished[1] += 1
        mean, before = finished[0] / finished[1], self.ranked.get(model)
        if before is None or abs(mean - before) > 0.1 * before:
            self._ranks = None

    def _upward_ranks(self) -> dict[str, float]:
        """Each task's seconds plus the longest such sum over the tasks that consume it: a fit takes its
        model's mean so far (a model not yet measured, the longest mean measured), a driver task none."""
        self.ranked = {m: total / fits for m, (total, fits) in self.fit_seconds.items()}
        unknown = max(self.ranked.values(), default=1.0)
        ranks: dict[str, float] = {}
        for t in reversed(self.tasks):  # listed after their dependencies: consumers come first here
            own = self.ranked.get(t.model or "", unknown) if self.on_worker(t) else 0.0
            ranks[t.id] = own + max((ranks[c.id] for c in self.consumers[t.id]), default=0.0)
        return ranks
