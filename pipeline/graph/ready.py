"""Which of a running graph's tasks still wait for inputs, and which are ready, in plan order.

The scheduler's bookkeeping of dependencies: a task is ready once each of its inputs is settled (done,
or cut); a task cut before it ran is ready at once, to be dropped. Each settled task tells its consumers
once; a task may wait for more than its listed inputs (trials not made yet, pipeline.graph.trial_supply).
"""

from __future__ import annotations

import heapq
from typing import Callable, Iterable, Optional

from pipeline.graph.shape import Task


class ReadyTasks:
    def __init__(self, tasks: Iterable[Task], waits: Callable[[str], int] = lambda task_id: 0):
        self.tasks: list[Task] = []
        self.order: dict[str, int] = {}  # task id -> its place in plan order
        self.blocked: dict[str, Task] = {}  # waiting for their dependencies, or ready and not taken
        self.waiting: dict[str, int] = {}  # task id -> inputs not settled
        self._heap: list[int] = []  # the ready, by plan order
        self.settled: set[str] = set()  # done or cut, their consumers told
        self.add(tasks, waits)

    def add(self, tasks: Iterable[Task], waits: Callable[[str], int] = lambda task_id: 0) -> None:
        """Tasks that join the graph (after those already in it); `waits`: inputs beyond their own."""
        for t in tasks:
            self.order[t.id] = len(self.tasks)
            self.tasks.append(t)
            self.blocked[t.id] = t
            self.waiting[t.id] = len(t.depends_on) + waits(t.id)
            if not self.waiting[t.id]:
                heapq.heappush(self._heap, self.order[t.id])

    def task(self, task_id: str) -> Task:
        return self.tasks[self.order[task_id]]

    def settle(self, task_id: str, consumers: Iterable[str], cut: bool) -> bool:
        """`task_id` is done or `cut`: each of its `consumers` waits for one input less (a cut task not
        taken yet is ready at once, to be dropped). Whether it was not settled before."""
        if task_id in self.settled:
            return False
        self.settled.add(task_id)
        if cut and task_id in self.blocked:
            heapq.heappush(self._heap, self.order[task_id])
        for c in consumers:
            self.less(c)
        return True

    def less(self, task_id: str, inputs: int = 1) -> None:
        """`task_id` waits for `inputs` fewer inputs."""
        if task_id in self.blocked:
            self.waiting[task_id] -= inputs
            if self.waiting[task_id] == 0:
                heapq.heappush(self._heap, self.order[task_id])

    def waits(self, task_id: str) -> bool:
        """Whether `task_id` still waits for an input."""
        return self.waiting.get(task_id, 0) > 0

    def pop(self) -> Optional[Task]:
        """The next ready task in plan order, taken out of `blocked`; None when none is."""
        while self._heap:
            task = self.tasks[heapq.heappop(self._heap)]
            if self.blocked.pop(task.id, None) is not None:
                return task
        return None
