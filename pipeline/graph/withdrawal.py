"""A kind whose own params clearly lose, withdrawn after its first fold under a time budget (hpo=auto).

AutoGluon skips a model whose fit would not end in the time left, and FLAML searches next the learner whose
cost and distance to the best error promise most. Here a kind's first trial (its own params) is judged once,
when the first of its folds ends on rows another kind's first trial has held out and scored too (each
fold's rows are the same for every kind), on the score the ensemble weighs by (`metrics.choice_metric`: the
log loss under accuracy). The kind is withdrawn, its first trial's other folds and its search not started,
where all three hold:

1. it scores below the best of those other kinds (the leader) on the fold's rows;
2. the ensemble would not use it: a Caruana blend of those kinds' predictions with it gains over the blend
   without it no more than one standard error of the gain (`pipeline.ensemble.clear_gain`);
3. its other folds are dear: at the pace of the fold judged they would take at least `DEAR_SHARE` of the
   fits' time left, which the kinds that score go on to use.

On VietNamI (22,200 training rows, 30 s on two cores) the network's lead fold scored roc_auc 0.77 against
LightGBM's 0.86 and its two folds took 9.8 s of the 19 s the fits had, leaving the GBMs no search; a kind
that adds to the blend, or whose folds cost little, keeps its first trial whole however it scores."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Optional

import numpy as np

from pipeline.graph.first_trials import first_trial_fit
from pipeline.graph.shape import fit_id
from pipeline.split import drawn

log = logging.getLogger(__name__)

DEAR_SHARE = 0.2  # the share of the fits' time left a first trial's other folds would take: dear from there
JUDGED_ROWS = 10_000  # at most this many of the fold's rows judge it (0.7 s for 20,000 with three rivals)


@dataclass(frozen=True)
class Withdrawal:
    """Why a kind was withdrawn: its lead fold's score, the leader's, and what its other folds would take."""

    model: str
    fold: int
    score: float
    leader: str
    leader_score: float
    gain: float  # what blending it in gained on the fold's rows (in `metric`'s loss)
    noise: float  # one standard error of that gain
    folds_left: int
    seconds_left: float  # its other folds at its lead fold's pace
    time_left: float  # the fits' time left when it was judged
    metric: str  # what it was judged on (`metrics.choice_metric`: the log loss under accuracy)

    def line(self) -> str:
        blend = ("a blend with the other models gave it no weight" if self.gain <= 0 else
                 f"blending it in gained {self.gain:.2g}, within one standard error ({self.noise:.2g})")
        return (f"{self.model} withdrawn after its first fold: {self.metric} {self.score:.4g} on the fold's "
                f"held-out rows against {self.leader_score:.4g} for {self.leader}, {blend}, and its "
                f"{self.folds_left} other fold(s) would take about {self.seconds_left:.1f} s of the "
                f"{self.time_left:.1f} s left, which the other models use")


class Withdrawals:
    """The kinds of a run judged so far and those withdrawn (`active`: under hpo=auto where bags may end
    short, no stacked level reading them); each kind is judged once. Where active, a kind whose fit failed
    every attempt leaves the run too (`fail`)."""

    def __init__(self, models: list[str], active: bool):
        self.models, self.active = list(models), active
        self.judged: set[str] = set()
        self.withdrawn: dict[str, Withdrawal] = {}
        self.failed: dict[str, str] = {}  # kind -> why it left the run: a fit of it failed every attempt

    def gone(self) -> set[str]:
        """The kinds withdrawn or left out after a failed fit."""
        return self.withdrawn.keys() | self.failed.keys()

    def lines(self) -> list[str]:
        """What the budget's last line says of them."""
        return [w.line() for w in self.withdrawn.values()] + list(self.failed.values())

    def fail(self, task, message: str, attempts: int, cut) -> Optional[list[str]]:
        """`task`, a level-1 fit, failed its last attempt (or its kind left the run already): the ids the
        kind's leaving cuts (the fit, its kind's fits not started, its search), or None where the run fails
        instead: not under hpo=auto (you chose the trials), not a trial's fit, or the last kind standing.
        Under hpo=auto the engine chose the kinds and their trials, and AutoGluon's time-limited fit goes on
        without a model whose fit raised; the run says which kind left and why, and goes on without it."""
        model = task.model
        if not self.active or task.kind != "fit" or getattr(task, "fold_set", None) is not None:
            return None
        if model not in self.failed:
            if not set(self.models) - self.gone() - {model}:
                return None
            self.failed[model] = f"{model} left out: its fit {task.id} failed {attempts} time(s) ({message})"
            log.warning("%s; the run goes on with the other models", self.failed[model])
        ids = cut.end_search(model, "failed")
        for bag in [c for c in cut.consumers[task.id] if c not in cut.cut]:  # its trial goes whole
            ids += cut.cut_task(bag, "failed")
        ids += cut.cut_task(task.id, "failed")
        for other in list(cut.tasks.values()):  # its first trial's folds not started
            if (other.model == model and other.kind == "fit" and other.id not in cut.started
                    and other.id not in cut.cut):
                ids += cut.cut_task(other.id, "failed")
        return ids

    def judge(self, task, result, ctx, budget) -> Optional[Withdrawal]:
        """The Withdrawal of `task`'s kind now that `task`, a fit, ended with `result` under `budget` (a
        graph.time_budget.TimeBudget, or None: no limit, nothing withdrawn); None where it stays or was
        judged before. It is judged on the first of its first trial's folds another kind's scored too."""
        if budget is None or not self.active or task.model in self.judged:
            return None
        kinds = [m for m in self.models if m not in self.withdrawn]
        task, result, others = judged_fold(task, result, ctx, kinds)
        if not others:
            return None
        self.judged.add(task.model)
        why = withdrawal(task, result, ctx, budget.remaining(), others)
        if why is not None:
            self.withdrawn[task.model] = why
        return why


def judged_fold(task, result, ctx, kinds: list[str]) -> tuple:
    """(fit, its result, its `rivals`): what `task`'s kind is judged on now that `task`, a fit of its first
    trial, ended with `result`: `task` itself, or, where the budget stopped it, the first of the trial's
    folds that ended on its own and whose rows another kind scored too. The kind is judged when the first
    of its folds ends on rows another kind scored (no rivals: not judged yet), whichever fold judges it. A
    fold the budget stopped scores where it was stopped: on a box that slowed mid-run a booster stopped
    after a round predicts about the label's mean (Snmesp at 30 s: LightGBM withdrawn on a second fold at
    RMSE 1.34, its first whole at 0.073, the leader's 0.069); where no whole fold can judge, the stopped
    one does (a slow kind's lead stopped at its share of the time is what that kind does in its share)."""
    others = rivals(task, result, ctx, kinds)
    if not others or not getattr(result, "stopped_by_budget", False):
        return task, result, others
    for k in range(ctx.plan.allocation(task.model).num_folds):
        fold = ctx.outcome.results.get(fit_id(task.model, 0, k))
        if fold is None or getattr(fold, "stopped_by_budget", False):
            continue
        fit = replace(task, id=fit_id(task.model, 0, k), fold=k)
        whole = rivals(fit, fold, ctx, kinds)
        if whole:
            return fit, fold, whole
    return task, result, others


def rivals(task, result, ctx, kinds: list[str]) -> dict:
    """The predictions the first trials of the other `kinds` made on the rows `task` (a first trial's fit,
    ended with `result`) held out, for those whose fit of the same fold has ended: kind -> predictions."""
    if not first_trial_fit(task) or getattr(result, "held_out", None) is None or result.val_pred is None:
        return {}
    out = {}
    for kind in kinds:
        other = ctx.outcome.results.get(fit_id(kind, 0, task.fold or 0))
        if (kind != task.model and getattr(other, "val_pred", None) is not None
                and np.array_equal(other.held_out, result.held_out)):
            out[kind] = other.val_pred
    return out


def withdrawal(task, result, ctx, time_left: float, others: dict) -> Optional[Withdrawal]:
    """The Withdrawal of `task`'s kind, where its first trial's fit `task` ended with `result`, `time_left`
    seconds of fits are left, and against `others` (`rivals`) it meets the module's three rules; else None."""
    from pipeline.ensemble import clear_gain

    folds = ctx.plan.allocation(task.model).num_folds
    folds_left = sum(fit_id(task.model, 0, k) not in ctx.outcome.results for k in range(folds))
    seconds = (result.end - result.start) * folds_left
    if not others or folds_left == 0 or time_left <= 0 or seconds < DEAR_SHARE * time_left:
        return None
    metric, y, mine = ctx.search_metric, ctx.data.y[result.held_out], result.val_pred  # the ensemble's score
    pick = drawn(len(y), JUDGED_ROWS)  # the blend's cost stays flat, its noise measured on the draw
    if pick is not None:
        y, mine = y[pick], mine[pick]
        others = {kind: pred[pick] for kind, pred in others.items()}
    own = metric.loss(y, mine)
    if own != own:  # undefined on the fold's rows (ROC AUC on rows of one class): they judge nothing
        return None
    losses = {kind: metric.loss(y, pred) for kind, pred in others.items()}
    leader = min(losses, key=losses.get)
    if not own > losses[leader]:
        return None
    without = _blend(list(others.values()), y, metric)
    beats, gain, noise = clear_gain(y, _blend([*others.values(), mine], y, metric), without, metric)
    if beats:
        return None
    return Withdrawal(task.model, task.fold or 0, metric(y, mine), leader, metric(y, others[leader]), gain,
                      noise, folds_left, seconds, time_left, metric.name)


def _blend(preds: list, y, metric) -> np.ndarray:
    """The Caruana blend of `preds` on the rows (one prediction: itself)."""
    from pipeline.ensemble import blend, ensemble_selection

    return blend(preds, ensemble_selection(preds, y, metric)) if len(preds) > 1 else preds[0]
