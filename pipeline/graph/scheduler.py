"""The driver loop shared by every executor: walk the plan's graph.

A task starts when every task in its `depends_on` is done. What starting means is its node kind's
(`pipeline.graph.nodes`): a worker kind (the fit) is admitted as the plan allows (per-trial and per-model
limits and the device pool, through plan.Admission), reused from the store when a result for its
key is there, sent to the backend, and retried when it fails (its result written once the next fits
have started); a driver kind (bag, ensemble, refit, evaluate, any kind registered later) runs here.

The plan lists each model's first trials; the others are made as the run reaches them, a few ahead of
the search (pipeline.graph.trial_supply), so the scheduler holds the trials in play, not every one asked for.

With a time budget (pipeline.graph.time_budget) the queue runs trial by trial across the models (every
model's first trial before any model's second, but the dear later folds of a kind far behind: first_trials),
a fit starts only when it and its trial can end by the deadline, the cut spreads through the graph
(`GraphCut`), fits carry the deadline to stop at, and one running past the deadline's grace is stopped.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from typing import Any, Optional

from pipeline.errors import TaskFailedError
from pipeline.graph.backend import Backend, wait_or_stop
from pipeline.graph.tasks import TaskFailure
from pipeline.graph.nodes import node_kind
from pipeline.graph.nodes.context import GraphContext, Hooks, Outcome, TrialResult
from pipeline.graph.plan import Admission, Plan, Task, fit_id
from pipeline.store import ResultStore
from pipeline.graph.first_trials import FirstTrials, LeadStanding, busy_seconds, first_trial_bag, places_for
from pipeline.graph.time_budget import BudgetSummary, GraphCut, TimeBudget, summarize
from pipeline.graph.trial_gate import TrialGate, before_first_score, losing_trial, standing
from pipeline.graph.trial_supply import TrialSupply
from pipeline.graph.withdrawal import DEAR_SHARE, Withdrawals
from pipeline.graph.ranks import FitRanks
from pipeline.graph.ready import ReadyTasks

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
        metric,  # metrics.Metric
        *,
        seed: int, max_retries: int = 1, hooks: Optional[Hooks] = None, pruning: bool = False,
        task_timeout_s: Optional[float] = None, unseen_categories: str = "missing", class_weight: str = "none",
        budget: Optional[TimeBudget] = None,
    ):
        self.plan = plan  # its first trials; the others are made as the run reaches them (`supply`)
        self.backend, self.store = backend, store
        self.supply = TrialSupply(plan)
        self.serial = getattr(backend, "one_at_a_time", False)  # one fit at a time
        self.max_retries, self.hooks, self.task_timeout_s = max_retries, hooks, task_timeout_s
        partial = budget is not None and not plan.stack_levels  # a first trial's bag may end short
        self.ctx = GraphContext(plan, data, metric, seed, trials, store, prototypes, pruning=pruning, hooks=hooks,
                                unseen_categories=unseen_categories, class_weight=class_weight,
                                standing=LeadStanding(metric, data.y) if partial else None)
        self.kinds = {kind: node_kind(kind) for kind in dict.fromkeys(t.kind for t in plan.tasks)}
        self.started: dict[object, float] = {}  # handle -> time.monotonic() at submission
        self.submitted_at: dict[object, float] = {}  # handle -> the budget's clock at submission
        self.budget = budget
        self.first = FirstTrials(plan.tasks, partial, self.ctx.standing)
        self.cut = GraphCut(plan.tasks, lambda t: self.kinds[t.kind].partial_inputs
                            or (self.first.partial and first_trial_bag(t)), self.supply)
        self.cancelled = self.abandoned = 0  # fits stopped: past the deadline's grace; their trial can't end
        self.ranks = FitRanks(plan.tasks, lambda t: self.kinds[t.kind].on_worker)
        self.ready = ReadyTasks(plan.tasks, self.supply.waits)  # one reading every trial waits for those not made
        self.gate = TrialGate(plan)
        self._shares: dict[str, float] = {}  # model -> its share of the time (`standing`); absent: 1
        self._yielding: dict[str, float] = {}  # kind -> its weight, its first trial's later folds yielding
        guard = getattr(trials, "noise_guard", False)  # hpo=auto (TrialSource.noise_guard)
        self.withdrawals = Withdrawals([a.model for a in plan.allocations], guard and self.first.partial)

    def run(self) -> Outcome:
        """Run every task of the plan (under a budget, those it did not cut); the outcome holds each
        task's result under its id."""
        ctx = self.ctx
        admission = Admission(self.plan.hardware, self.plan.allocations, self.plan.ram_for_fits)
        for model in self.supply.rounds:
            self._make(self.supply.top_up(model))
        self.queued: list[Task] = []  # worker tasks waiting for admission, in priority order
        self.running: dict[object, tuple[Task, tuple, Any]] = {}
        attempts: dict[str, int] = defaultdict(int)
        ctx.data_ref = self.backend.prepare(self.plan, ctx.data)
        if self.budget is not None:  # fit_time_limit_s: the clock starts with the first fit
            ctx.deadline = self.budget.begin()
        self._release()
        while self.queued or self.running:
            # a pass may release more fits (a result from the store feeding a stacked level or a refit, the
            # cuts settling a node's inputs): they are admitted in the same turn
            progressed = False
            while self._admit(admission, attempts):
                progressed = True
                self._release()
            self._release()
            self.store.flush()  # the results read since the last pass, once the next fits have started
            self._stop_unused(admission)
            self._release()  # the trials made to replace those it settled
            if not self.running:
                if self.queued and not progressed:  # cannot happen for a valid plan
                    raise RuntimeError(f"scheduler stalled with {len(self.queued)} tasks pending")
                continue
            finished, cancelled = wait_or_stop(self.backend, self.running, self.started, self.budget,
                                               self.task_timeout_s)
            self.cancelled += cancelled
            for handle, result in finished:
                pickled = self.backend.pickled(handle)  # as the worker sent it, with attempt 0
                task, shares, request = self.running.pop(handle)
                self.started.pop(handle, None)
                self.submitted_at.pop(handle, None)
                admission.release(task, shares)
                if self.budget is not None:
                    self.first.ended(task, result, self.budget.clock())
                if result is None:  # stopped past the deadline's grace
                    self._cut(task, "overran")
                    self._release()
                    continue
                if isinstance(result, TaskFailure):
                    attempts[task.id] += 1
                    last = attempts[task.id] > self.max_retries or task.model in self.withdrawals.failed
                    if last and (left := self.withdrawals.fail(task, result.message, attempts[task.id],
                                                               self.cut)) is not None:
                        self._settle_cut(left)  # under hpo=auto its kind leaves the run (graph.withdrawal)
                        self._release()
                        continue
                    if attempts[task.id] > self.max_retries:
                        raise TaskFailedError(
                            f"task {task.id} failed after {attempts[task.id]} attempt(s): {result.message}. "
                            f"Finished tasks are kept in {self.store.dir}; fix the cause and re-run with "
                            "resume=true to reuse them")
                    log.warning("task %s failed (attempt %d of %d): %s; retrying", task.id, attempts[task.id],
                                self.max_retries + 1, result.message)
                    self.queued.insert(0, task)
                    self.gate.again(task)
                    continue
                result.attempt = attempts[task.id]
                if not getattr(result, "stopped_by_budget", False):  # a shortened fit is not its key's result
                    self.store.put(request.key, result, later=True, pickled=None if result.attempt else pickled)
                self._complete(task, result, request)
        self.store.flush()
        unmade = {m: n for m in self.supply.rounds if (n := self.supply.left(m))}
        if self.ready.blocked or unmade:  # build_plan orders tasks after their dependencies: cannot happen
            raise RuntimeError(f"scheduler stalled with {len(self.ready.blocked)} tasks waiting "
                               f"{list(self.ready.blocked)[:1]} and trials not made {unmade}")
        return ctx.outcome

    def budget_summary(self) -> BudgetSummary:
        """What the time budget cut, once the graph has run (the root announces it: `on_time_budget`)."""
        outcome = self.ctx.outcome
        return summarize(self.budget, self.cut, outcome.results, outcome.timeline, self.cancelled, self.abandoned,
                         self.first.held_to_share, self.withdrawals.lines())

    def _priority(self, task: Task) -> tuple:
        """The queue's order: under a budget, every model's first trial (its own params) first (but the
        later folds of a kind behind and dear: `FirstTrials.yielding`), then the model that has fitted for
        the fewest seconds so far for its share (a fast model fits more trials; one whose best error is far
        behind the leader's gets less: `time_shares`), trial by trial (fits one at a time: a trial's later
        folds, once its first has ended, before any other trial's, as a trial left unfinished at the
        deadline is dropped); then the fits of a model none of whose fits has ended (how long they take is
        learnt first); one at a time under a budget, the first trials of the quicker models first (a deadline
        that cannot hold them all cuts the slowest, not a quick model), fold by fold where their bags may end
        short (first_trials); then the longest path of work to the end first."""
        trial = (task.trial or 0) if self.budget is not None else 0
        weight = self._yielding.get(task.model)  # a kind behind whose first trial's later folds yield
        yields = weight is not None and not trial and task.id in self.first.pending
        share = weight if weight is not None else self._shares.get(task.model, 1.0)  # its trials' too
        spent = self.ranks.spent(task.model) / share if trial or yields else 0.0
        under_way = self.serial and trial and task.fold and fit_id(task.model, trial, 0) in self.ctx.outcome.results
        quick = self.ranks.ranked.get(task.model, 0.0) if self.serial and self.budget and not trial else 0.0
        fold = (task.fold or 0) if self.first.partial and not trial else 0  # every model's lead fold first
        return (trial > 0 or yields, not under_way, spent, trial, fold, task.model in self.ranks.ranked, quick,
                -self.ranks.rank(task), self.ready.order[task.id])

    def _admit(self, admission: Admission, attempts: dict) -> bool:
        """Start (or take from the store) every queued task that admission and the budget allow, in
        priority order; then, on what is left, the fits held back while their model's first fit runs.
        Whether any task left the queue."""
        progressed, held_back = False, []
        if self.ranks.stale or self.budget is not None:  # the durations changed: so may the queue's order
            models = {a.model for a in self.plan.allocations} - self.withdrawals.gone()
            self._shares = standing(models, self.ctx.trials) if self.budget is not None else {}
            active = self.withdrawals.active  # hpo=auto, bags that may end short
            self._yielding = self.first.yielding(self.budget, DEAR_SHARE, self.cut.gone) if active else {}
            self.queued.sort(key=self._priority)
        for task in list(self.queued):
            if self.serial and self.running:
                return progressed
            go = task.id not in self.cut.cut and self._in_time(task, admission)
            if go is None:
                held_back.append(task)
            elif go is False:
                self._dequeue(task)
                progressed = True
            else:
                progressed = self._start(task, admission, attempts) or progressed
        for task in held_back:  # places nothing else could take: no reason to wait for the estimate
            if self.serial and self.running:
                break
            progressed = self._start(task, admission, attempts) or progressed
        return progressed

    def _start(self, task: Task, admission: Admission, attempts: dict) -> bool:
        """Submit `task` if admission allows (or complete it from the store); whether it left the queue."""
        shares = admission.try_admit(task)
        if shares is None:
            return False
        self._dequeue(task)
        self.cut.started.add(task.id)
        request = self.kinds[task.kind].request(task, shares, self.ctx, attempts[task.id])
        cached = self.store.get(request.key)
        if cached is not None:
            admission.release(task, shares)
            cached.cached, cached.task_id = True, task.id  # an earlier run's may be another trial's
            self._complete(task, cached, request)
            return True
        if self.budget is not None:  # a refit fit's deadline: past the fits', in the time kept for the refits
            request.deadline = self.budget.deadline_for(task)
        if self.budget is not None and task.id in self.first.pending:
            seconds = self._own_seconds(task, admission)
            request.deadline = request.deadline if seconds is None else self.budget.clock() + seconds
            self.first.started(task, seconds, self.budget.clock())
        if self.hooks:
            self.hooks.on_task_start(task)
        handle = self.backend.submit(request)
        self.running[handle] = (task, shares, request)
        self.started[handle] = time.monotonic()
        if self.budget is not None:
            self.submitted_at[handle] = self.budget.clock()
        return True

    def _in_time(self, task: Task, admission: Admission) -> Optional[bool]:
        """True: `task` may start (always, without a budget); None: only on a place nothing else takes, while
        the model's first fit, which tells how long one takes, runs, or its trial's first score is awaited
        (`before_first_score`); False: it and the rest of its trial cannot end by the deadline: it is cut."""
        if self.budget is None:
            return True
        # a first trial's fit stops at its share of the time: it starts while any is left, unless it is a
        # bag's later fold whose share is too short to be worth it; another past its deadline is cut unweighed;
        # a later trial's fit cut ends its model's search: its trials not begun go with it (search_end)
        in_time = self.budget.deadline_for(task) > self.budget.clock()
        first = task.id in self.first.pending and in_time
        fits = self.cut.siblings_left(task) if in_time else 1
        slots, after = self._slots(task, admission) if in_time else ([], 0.0)
        short = first and self.first.too_short(task, self.budget, self._own_seconds(task, admission))
        if not in_time or short or (not first and not self.budget.can_finish(task, fits, slots, after)):
            log.debug("cut %s: %d fit(s) on %d place(s) do not end in time", task.id, fits, len(slots))
            self._cut(task, "budget", ended=not short)
            return False
        if before_first_score(task, self.ctx) or self.budget.estimate(task) is None and any(
                (t.model, getattr(t, "level", None)) == (task.model, getattr(task, "level", None))
                for t, _, _ in self.running.values()):
            return None
        return True

    def _own_seconds(self, task: Task, admission: Admission) -> Optional[float]:
        """A first trial's fit: the seconds it may run, its share of the time left (graph.first_trials)."""
        now = self.budget.clock()
        running = [(t, self.submitted_at[h], r.deadline) for h, (t, _, r) in self.running.items()]
        return self.first.share(task, self.budget, places_for(task, admission.pool, self.serial),
                                busy_seconds(running, self.budget, now), self.cut.gone, now)

    def _slots(self, task: Task, admission: Admission) -> tuple[list[float], float]:
        """Where the rest of `task`'s trial can run, as the times those places free (at most the plan's
        folds in parallel): CPUs free now, those of its own running folds, and those of running fits
        that come after it in the queue's order (it takes them as they free; an estimate says when);
        fits ahead of it keep theirs. And when its own running folds end."""
        now, cpus = self.budget.clock(), max(1, task.resources.num_cpus)
        slots, after = [now] * (admission.pool.free_cpus // cpus), now
        for handle, (t, _, _) in self.running.items():
            mine = (t.model, t.trial) == (task.model, task.trial)
            seconds = self.budget.estimate(t)
            if seconds is None or not (mine or self._priority(t) > self._priority(task)):
                continue
            end = self.submitted_at[handle] + seconds
            after = max(after, end) if mine else after
            slots += [end] * (t.resources.num_cpus // cpus)
        limit = admission.limits.get(task.model)
        places = 1 if self.serial or limit is None else limit.folds_parallel  # serial: whatever the CPUs free
        return sorted(slots)[:places], after

    def _stop_unused(self, admission: Admission) -> None:
        """Stop each running fit whose every consumer was cut (the other folds of its trial cannot
        end in time): its result would go unused."""
        for handle, (task, shares, _) in list(self.running.items()):
            consumers = self.cut.consumers[task.id]
            if (consumers and all(c in self.cut.cut for c in consumers)
                    and not any(self.cut.cut[c] == "pruned" for c in consumers)):  # a pruned trial's: ends
                self.backend.cancel(handle)
                if self.budget is not None:
                    self.first.ended(task, None, self.budget.clock())
                del self.running[handle]
                self.started.pop(handle, None)
                self.submitted_at.pop(handle, None)
                admission.release(task, shares)
                self.cut.cut[task.id] = "unused"
                self._settle(task.id)
                self.abandoned += 1

    def _cut(self, task: Task, why: str, ended: bool = False) -> None:  # ended: GraphCut.search_end
        self._settle_cut(self.cut.cut_task(task.id, why) + self.cut.search_end(task, ended))

    def _settle_cut(self, ids: list[str]) -> None:
        """The tasks just cut: their consumers wait for them no more, their node kinds are told."""
        gone = [self.cut.tasks[tid] for tid in ids]
        for cut in gone:
            self._settle(cut.id)
            self.kinds[cut.kind].cut(cut, self.ctx)
        for model, n in self.supply.take_dropped().items():  # trials never made: the search ended
            self._dropped(model, n)
        if self.hooks and hasattr(self.hooks, "on_tasks_cut"):  # those that had not finished, in one call
            self.hooks.on_tasks_cut([t for t in gone if t.id not in self.ctx.outcome.results])

    def _complete(self, task: Task, result, request) -> None:
        if hasattr(result, "end") and not getattr(result, "cached", False):
            seconds = result.end - result.start
            if task.model:
                self.ranks.record(task.model, seconds)
            if self.budget is not None:
                self.budget.record(task, seconds, getattr(result, "stopped_by_budget", False), result)
                self.ctx.deadline = self.budget.deadline  # the tail's estimate moves with the fits measured
        self.ctx.outcome.results[task.id] = self.kinds[task.kind].done(task, result, request, self.ctx)
        self._settle(task.id)
        consumers = self.cut.consumers.get(task.id, ())
        if consumers and all(c in self.cut.cut for c in consumers):  # its trial was judged while it ran
            self.ctx.retention.ended_unused(task, self.ctx)
        bags = [c for c in consumers if self.ready.waits(c) and c not in self.cut.cut]
        if bags and losing_trial(task, result, self.ctx):  # its later folds are not started
            for bag in bags:
                self._cut(self.cut.tasks[bag], "pruned")
        elif bags and (why := self.withdrawals.judge(task, result, self.ctx, self.budget)):
            log.info("%s: %s", self.budget.key, why.line())  # its later folds and trials are not started
            ids = self.cut.end_search(task.model, "withdrawn")
            for bag in bags:
                ids += self.cut.cut_task(bag, "withdrawn")
            self._settle_cut(ids)
        self._release()

    def _settle(self, task_id: str) -> None:
        """`task_id` is done or cut: each consumer waits for one input less (a cut one is ready at once)."""
        if not self.ready.settle(task_id, self.cut.consumers.get(task_id, ()), task_id in self.cut.cut):
            return
        task = self.ready.task(task_id)
        if task_id in self.gate.gated and task_id not in self.ready.blocked:  # cut while it waited for its trial
            self.gate.gone(task)
        self._make(self.supply.settled(task))

    def _make(self, tasks: list[Task]) -> None:
        """Trials made now (`TrialSupply`): they join the graph, their fits ready at once."""
        if tasks:
            self.ready.add(tasks)
            self.cut.add(tasks)

    def _dropped(self, model: str, trials: int) -> None:
        """`trials` of `model` will never be made: what reads every trial of it waits for them no more."""
        for join in self.supply.joins.get(model, ()):
            self.ready.less(join, trials)
        if self.hooks and hasattr(self.hooks, "on_fits_dropped"):
            self.hooks.on_fits_dropped(model, trials * self.plan.allocation(model).num_folds)

    def _dequeue(self, task: Task) -> None:
        """`task` leaves the admission queue (started, or cut); its trial's next may enter (`TrialGate`)."""
        self.queued.remove(task)
        self._enqueue(self.gate.left(task))

    def _enqueue(self, tasks) -> None:
        if tasks:
            self.queued += tasks
            self.queued.sort(key=self._priority)

    def _release(self) -> None:
        """Tasks whose dependencies are settled leave `blocked`, in plan order: a cut one is dropped, a
        driver task runs now (it may release others), a worker task queues once `TrialGate` opens its trial."""
        done, cut = self.ctx.outcome.results, self.cut.cut
        while (ready := self.ready.pop()) is not None:
            ready = self.supply.whole(ready)  # a task reading every trial of a model: the trials made too
            kind = self.kinds[ready.kind]
            if ready.id in cut:
                pass
            elif kind.on_worker:
                self._enqueue(self.gate.arrive(ready))
            else:
                self.cut.started.add(ready.id)
                done[ready.id] = kind.run(ready, {d: done[d] for d in ready.depends_on if d in done}, self.ctx)
                if self.budget is not None:  # a trial's score: the budget prices its model's best's fits
                    self.budget.scored(done[ready.id], self.ctx.search_metric)
                self._settle(ready.id)
                if self.hooks and hasattr(self.hooks, "on_node_end"):  # the root writes and logs what it computed
                    self.hooks.on_node_end(ready, done[ready.id])
