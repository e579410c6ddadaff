"""Every model's first trial under a time budget: no slow model's first fit may spend what every other
model's first trial needs. AutoGluon gives each fold of a bag the time left over the folds left; here each
first-trial fit stops by its share of the time left (`FirstTrials.share`, max-min fair, so a quick model's
fits are not shortened for a slow one's).

Where a bag may end with fewer folds (`partial`: no stacked level reads its out-of-fold predictions), a
model's first fold to start (its lead) runs at full length where its model's share of the first trials'
time allows: the models share it max-min fair, each begun one counting the seconds its first trial has run
and the estimates of its folds not started, so a slow model's lead leaves the quick models their bags; the
leads come first, every model's, then the bags' other folds, each of which starts only where its share is
at least `MIN_PART` of its model's fit; a bag that cannot end is kept with the folds that did
(graph.nodes.bag). An 8-class table of 13,600 rows at time_limit_s=30 had LightGBM's first fold run to the
deadline with no model complete; with every fold of the three first trials shortened to its share instead,
the bags' test accuracy was 0.8088, against 0.8329 for one holdout fit per model. On diamonds (34,500
training rows) at time_limit_s=30, with the network waiting longer for a better epoch, its lead shared the
time with the other models' leads alone: once those had ended it ran to the deadline, and LightGBM and
XGBoost kept one fold of five each (test RMSE 555); counting the models' bags, they keep all five (535).

Once the leads have ended, the bags' other folds share the time weighted by each kind's standing on the
lead fold's rows (`LeadStanding`, as `time_shares` weighs later trials). On Snmesp (4,723 rows) at 30 s
the network, far behind CatBoost (test RMSE 0.102 against 0.060), took an even share, and CatBoost, the
best kind, ended 2 of its 5 folds and was left out of the ensemble (test RMSE 0.0638); weighted, CatBoost
ends all 5 and the network its lead (0.0600, the network left out of the ensemble: `ensemble.covering`)."""

from __future__ import annotations

import logging
from typing import Iterable, Optional

from pipeline.graph.trial_gate import time_shares
from pipeline.resources import gpu_slots
from pipeline.split import drawn

log = logging.getLogger(__name__)

# where bags stay whole (stacking): the first fold of a bag whose model has no fit ended yet weighs this many
# times another fit: it measures what the bag's other folds are given, and a share that stops it cuts every
# one of them short too
UNMEASURED_FIRST = 2.0
# a bag's later fold starts only with a share of at least this much of its model's measured fit: a fold
# stopped far short is a weak model scoring its rows, which the bag is better without
MIN_PART = 0.5


def first_trial_fit(task) -> bool:
    """A fit of a model's first trial at level 1 (each model's own params under hpo=auto)."""
    return task.kind == "fit" and task.fold_set is None and task.trial == 0 and getattr(task, "level", 1) == 1


def first_trial_bag(task) -> bool:
    """The bag of a model's first trial at level 1."""
    return task.kind == "bag" and task.trial == 0 and getattr(task, "level", 1) == 1


class FirstTrials:
    """The first trials' fits not started yet, and the share of the time each gets when it starts."""

    def __init__(self, tasks: Iterable, partial: bool = False, standing: Optional["LeadStanding"] = None):
        self.pending = {t.id: t for t in tasks if first_trial_fit(t)}
        self.partial = partial  # a first trial's bag may end with the folds that ended
        self.standing = standing  # the kinds' errors on their lead folds: weights of the later folds' shares
        self.begun: set[str] = set()  # models one of whose first-trial fits started
        self.capped: set[str] = set()  # fits started with a deadline of their own, before the run's
        self.held_to_share = 0  # of them, fits that stopped there
        self.spent: dict[str, float] = {}  # model -> seconds its first trial's ended fits ran
        self.running: dict[str, tuple[str, float]] = {}  # first-trial fit running -> (its model, its start)
        self.yielded: dict[str, str] = {}  # kind -> why its first trial's later folds yielded (`yielding`)

    def leads(self, task) -> bool:
        """Whether `task` would be its model's first first-trial fit to start."""
        return task.id in self.pending and task.model not in self.begun

    def share(self, task, budget, places: int, busy_s: float, gone,
              now: Optional[float] = None) -> Optional[float]:
        """The seconds `task` may run, or None where the run's deadline holds. The time left on `places`
        places, less `busy_s` seconds the running fits still hold, is shared by max-min fairness (a fit whose
        model's estimate is under the common level takes its estimate, the others the level; one not measured
        demands the level) over the first trials' fits not yet started (`gone`: whether a task id was started
        or cut): with `partial`, a lead over the models, each one demand (`_model_demands`); another fit over
        the fits of the models begun; without, over all of them, a bag's first fold `UNMEASURED_FIRST`
        levels. Where every demand shared with is measured and all fit, None."""
        if task.id not in self.pending:
            return None
        now = budget.clock() if now is None else now
        remaining = budget.deadline_for(task) - now
        self._forget(lambda tid: tid != task.id and gone(tid))
        others = [t for t in self.pending.values() if t.id != task.id]
        capacity, weight = places * remaining - busy_s, 1.0
        weights = self.standing.weights() if self.standing is not None and self.partial else {}
        if self.partial and self.leads(task):
            demands, spent = self._model_demands(others, task.model, budget, now)
            capacity += spent
        else:
            if self.partial:
                others = [t for t in others if t.model in self.begun]
                weight = weights.get(task.model, 1.0)
            elif budget.estimate(task) is None and any(t.model == task.model for t in others):
                weight = UNMEASURED_FIRST
            demands = [(budget.estimate(t), weights.get(t.model, 1.0)) for t in others]
        level = water_level(demands + [(budget.estimate(task), weight)], max(0.0, capacity))
        if level is None or level * weight >= remaining:
            return None
        return level * weight

    def _model_demands(self, others: list, own: str, budget, now: float) -> tuple[list, float]:
        """Each other model with first-trial fits not started, as one demand for a lead's share: a model
        not begun, its lead's estimate; a begun one, the seconds its first trial has run (ended fits and
        running ones so far) and its fits not started (None, no bound, while one is unmeasured). And the
        seconds those begun models have run, which the time shared gets back."""
        ran = dict(self.spent)
        for model, start in self.running.values():
            ran[model] = ran.get(model, 0.0) + max(0.0, now - start)
        by_model: dict[str, list] = {}
        for t in others:
            if t.model != own:
                by_model.setdefault(t.model, []).append(t)
        demands, spent = [], 0.0
        for model, fits in by_model.items():
            if model not in self.begun:
                demands.append((budget.estimate(fits[0]), 1.0))
                continue
            estimates = [budget.estimate(t) for t in fits]
            done = ran.get(model, 0.0)
            demands.append((None if None in estimates else done + sum(estimates), 1.0))
            spent += done
        return demands, spent

    def _forget(self, gone) -> None:
        """Drop from the fits not started those `gone` says were started or cut (a task id -> bool)."""
        for tid in [tid for tid in self.pending if gone(tid)]:
            del self.pending[tid]

    def yielding(self, budget, dear: float, gone=lambda tid: False) -> dict[str, float]:
        """The kinds whose first-trial folds not started yield to the other kinds' later trials, each with
        its weight on the lead fold's rows (`LeadStanding.weights`): a kind behind the leader there (beyond
        `EVEN_WITHIN` of its error) whose folds left, at its measured pace, would take at least `dear` of
        the fits' time left. Its folds then wait their turn as a later trial's fits do, by the seconds its
        model has fitted over its weight; a bag they leave short is kept with the folds that ended. Said
        once per kind (`yielded`). Its folds counted are those not started or cut (`gone`: whether a task id
        was), so a kind withdrawn, whose folds are cut, yields nothing."""
        if self.standing is None or not self.partial:
            return {}
        self._forget(gone)
        behind, left = self.standing.behind(), {}
        for t in self.pending.values():
            if t.model in behind:
                left.setdefault(t.model, []).append(t)
        remaining, out = budget.remaining(), {}
        for model, fits in left.items():
            seconds = sum(budget.estimate(t) or 0.0 for t in fits)
            if remaining > 0 and seconds >= dear * remaining:
                out[model] = self.standing.weights()[model]
                if model not in self.yielded:
                    self.yielded[model] = why = (
                        f"{model}'s first trial yields to the other models' trials: "
                        f"{self.standing.line(model)}; its {len(fits)} other fold(s) would take about "
                        f"{seconds:.1f} s of the {remaining:.1f} s left, and run in its share of the time")
                    log.info("%s: %s", budget.key, why)
        return out

    def too_short(self, task, budget, seconds: Optional[float]) -> bool:
        """Whether a bag's later fold (not its lead), given `seconds` of its share (None: the time left to
        the run's deadline), is better not started: under `MIN_PART` of its model's measured fit."""
        estimate = budget.estimate(task)
        if seconds is None and estimate is not None:
            seconds = budget.deadline_for(task) - budget.clock()
        return (self.partial and not self.leads(task) and estimate is not None
                and seconds < MIN_PART * estimate)

    def started(self, task, seconds: Optional[float], now: float) -> None:
        """`task` started at `now`, to stop after its share of `seconds` (None: at the run's deadline)."""
        if self.pending.pop(task.id, None) is not None:
            self.begun.add(task.model)
            self.running[task.id] = task.model, now
            if seconds is not None:
                self.capped.add(task.id)

    def ended(self, task, result, now: float) -> None:
        """A fit ended at `now` (`result` None: stopped, failed or cancelled): its seconds counted to its
        model's first trial, and where it stopped at its own deadline."""
        model, start = self.running.pop(task.id, (None, None))
        if self.standing is not None and result is not None:
            self.standing.ended(task, result)
        if model is not None:
            self.spent[model] = self.spent.get(model, 0.0) + max(0.0, now - start)
        if task.id in self.capped and getattr(result, "stopped_by_budget", False):
            self.held_to_share += 1


class LeadStanding:
    """Each kind's error (`Metric.error`) on the rows its first trial's first fold held out, every kind's
    the same rows, and from them the weights of the kinds' later first-trial folds (`weights`). A fold the
    budget stopped is not read: it scores what a share allowed, not what the kind does."""

    def __init__(self, metric, y, max_rows: int = 100_000):
        from pipeline.metrics import choice_metric

        self.metric, self.y, self.max_rows = choice_metric(metric), y, max_rows  # the log loss under accuracy
        self.errors: dict[str, float] = {}
        self._weights: dict[str, float] = {}

    def ended(self, task, result) -> None:
        held, pred = getattr(result, "held_out", None), getattr(result, "val_pred", None)
        if (not first_trial_fit(task) or (task.fold or 0) != 0 or held is None or pred is None
                or getattr(result, "stopped_by_budget", False)):
            return
        pick = drawn(len(held), self.max_rows)  # the same rows for every kind
        if pick is not None:
            held, pred = held[pick], pred[pick]
        error = self.metric.error(self.metric(self.y[held], pred))
        if error == error:  # undefined on the rows (ROC AUC on one class): no standing
            self.errors[task.model] = error
            self._weights = time_shares(self.errors) if len(self.errors) > 1 else {}

    def line(self, model: str) -> str:
        """Its error on the lead fold's rows against the leader's, in words."""
        leader = min(self.errors, key=self.errors.get)
        return (f"error {self.errors[model]:.4g} on its first fold's held-out rows against "
                f"{self.errors[leader]:.4g} for {leader} ({self.metric.name}'s loss; weight "
                f"{self._weights.get(model, 1.0):.2f})")

    def behind(self) -> set[str]:
        """The kinds whose weight is under the leader's: beyond `EVEN_WITHIN` of its error."""
        return {kind for kind, weight in self._weights.items() if weight < 1.0}

    def weights(self) -> dict[str, float]:
        """Kind -> its weight (the leader's 1; a kind within `EVEN_WITHIN` of the leader's error 1, one further
        behind less, down to `MIN_SHARE`); a kind not measured is absent (weight 1)."""
        return self._weights


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
