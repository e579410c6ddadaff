"""Trials enter the scheduler's admission queue a few at a time (`TrialGate`): what keeps its work per
fit flat whatever hpo.num_trials is; and each model's share of a time budget by its standing (`time_shares`)."""

from __future__ import annotations

from collections import defaultdict, deque
from typing import Optional

from pipeline.graph.plan import Plan, Task
from pipeline.graph.retention import held_out_score


class TrialGate:
    """Lets a model's trial fits into the admission queue a few trials at a time, in trial order: the
    trials that may run at once and one more. The queue (and each admission pass over it) stays as
    short with 10,000 trials as with 10; a trial's parameters are asked when its first fold starts."""

    def __init__(self, plan: Plan):
        self.open_at_once = {a.model: a.trials_parallel + 1 for a in plan.allocations}
        self.open: dict[str, set] = defaultdict(set)  # model -> trials whose fits are in the queue
        self.unstarted: dict[tuple, int] = defaultdict(int)  # (model, trial) -> its fits in the queue
        self.waiting: dict[str, deque] = defaultdict(deque)  # model -> trials ready but not let in, in order
        self.held: dict[tuple, list] = defaultdict(list)  # (model, trial) -> its fits ready but not let in
        self.gated: set[str] = set()  # ids of fits held here

    @staticmethod
    def _trial_fit(task: Task) -> bool:
        return task.kind == "fit" and task.fold_set is None and task.trial is not None

    def arrive(self, task: Task) -> list[Task]:
        """The fits that enter the queue now that `task` is ready: it, or none while its trial waits."""
        if not self._trial_fit(task) or task.model not in self.open_at_once:
            return [task]
        key = (task.model, task.trial)
        if task.trial in self.open[task.model]:
            self.unstarted[key] += 1
            return [task]
        if not self.held[key]:
            self.waiting[task.model].append(task.trial)
        self.held[key].append(task)
        self.gated.add(task.id)
        return self._open(task.model)

    def left(self, task: Task) -> list[Task]:
        """`task` left the queue: when it was its trial's last there, the next trial's fits enter."""
        if not self._trial_fit(task) or task.trial not in self.open[task.model]:
            return []
        key = (task.model, task.trial)
        self.unstarted[key] -= 1
        if self.unstarted[key] > 0:
            return []
        self.open[task.model].discard(task.trial)
        del self.unstarted[key]
        return self._open(task.model)

    def again(self, task: Task) -> None:
        """A failed fit back in the queue for another attempt: its trial waits for it again."""
        if self._trial_fit(task) and task.trial in self.open[task.model]:
            self.unstarted[(task.model, task.trial)] += 1

    def gone(self, task: Task) -> None:
        """A held fit that was cut before its trial opened: it never enters."""
        self.gated.discard(task.id)
        held = self.held.get((task.model, task.trial))
        if held and task in held:
            held.remove(task)

    def _open(self, model: str) -> list[Task]:
        out, waiting = [], self.waiting[model]
        while waiting and len(self.open[model]) < self.open_at_once[model]:
            trial = waiting.popleft()
            fits = self.held.pop((model, trial), [])
            if not fits:
                continue
            self.open[model].add(trial)
            self.unstarted[(model, trial)] = len(fits)
            self.gated.difference_update(f.id for f in fits)
            out += fits
        return out


def before_first_score(task: Task, ctx) -> bool:
    """Whether `task` is a later fold of a trial successive halving may stop (hpo.pruning, not trial 0)
    none of whose folds has been scored yet: it waits for a place nothing else takes, since most such
    trials stop after their first fold (a fold started beside it would be fitted for nothing)."""
    return (ctx.pruning and task.kind == "fit" and task.fold_set is None and task.trial is not None
            and bool(task.fold) and ctx.trials.awaits_first_score(task.model, task.trial))


def losing_trial(task: Task, result, ctx) -> bool:
    """Whether the trial fit `task` just ended (`result`) is losing and its folds not yet fitted should
    not start: its fold's score on its held-out rows, told to the trial source (TrialSource.fold_scored:
    successive halving over folds, and a fit its round-by-round pruner stopped). Only with hpo.pruning;
    a fit shortened by the deadline says nothing of its trial."""
    if (not ctx.pruning or task.kind != "fit" or task.fold_set is not None or task.trial is None
            or getattr(result, "stopped_by_budget", False)):
        return False
    score = held_out_score(result, ctx)  # a released fit read back: the score its file keeps
    if score is None or score != score:  # NaN: undefined on the fold's rows (ROC AUC on one class)
        return False
    return ctx.trials.fold_scored(task.model, task.trial, score, pruned=bool(result.pruned))


# a model whose best error is within this fraction of the leader's shares the time equally; one further
# behind gets the share EVEN_WITHIN / gap, never less than MIN_SHARE (a model at twice the leader's
# error or worse, a twentieth: it goes on being searched, slowly)
EVEN_WITHIN, MIN_SHARE = 0.05, 0.05
# Trials a model has told before its standing can lower its share: its own params and the first
# configuration after them (under hpo=auto its kind's first portfolio entry). One trial is a poor
# judge of a kind: on Computers the network's own params scored RMSE 188 against the GBMs' 147, which
# left it a fifth of their time and no second trial in 30 s; its first portfolio entry scores 154.
JUDGED_AFTER = 2


def time_shares(best_errors: dict[str, float], told: Optional[dict[str, int]] = None) -> dict[str, float]:
    """Each model's share of the fit time (the leader's 1) from its best trial's error (a loss, lower
    better: 1 - AUC, 1 - accuracy, RMSE) against the leader's: models within EVEN_WITHIN of the
    leader's error share equally; one further behind gets EVEN_WITHIN / gap (gap: its error over the
    leader's, less 1), at least MIN_SHARE (FLAML
    too picks the learner to fit next by its distance to the best error, and AutoGluon fits its
    portfolio's strongest kinds first). A model that has told fewer than JUDGED_AFTER trials (`told`,
    when given) keeps the leader's share."""
    lead = min(best_errors.values(), default=0.0)
    shares = {}
    for model, error in best_errors.items():
        gap = (error - lead) / lead if lead > 0 else (0.0 if error <= lead else float("inf"))
        judged = told is None or told.get(model, 0) >= JUDGED_AFTER
        shares[model] = 1.0 if gap <= EVEN_WITHIN or not judged else max(MIN_SHARE, EVEN_WITHIN / gap)
    return shares


def standing(models: set, trials) -> dict[str, float]:
    """Each of `models`' share of the time under a budget, by its best whole trial's error against the
    leader's once every one has one (`time_shares`; before, equal shares: {})."""
    best = getattr(trials, "best_error", {})
    if len(models) < 2 or not models <= best.keys():
        return {}
    return time_shares({m: best[m] for m in models}, getattr(trials, "told", None))
