"""What a run keeps of its trials. A search scores hundreds or thousands of trials, but the board, the
ensemble, the stacked levels and the refits read only each model's few best complete trials and its trial 0
(`TRIALS_PER_MODEL`, the ensemble's candidates). Every other trial's fold models are let go as soon as it
can no longer be one of those: a trial cut before its bag (pruned, or out of time) at once, a scored one
when enough better ones have been scored. Held in memory and written to `tasks/` for every fit, they made
a 120-s search on a 2,798-row table hold 1.2 GB in the driver and write 633 MB.

A released fit keeps its scores and timings in memory. In `tasks/` it keeps what a resumed run reads of it:
its trial's score where the trial was scored (the bag reads it, and the searcher is told it again), under
pruning its fold's score on its held-out rows (successive halving judges the trial again from those), and
its held-out predictions only where the deadline cut its trial (a resumed run with more time fits the rest
of the bag and scores it whole). Its model and test predictions are gone, so a stored fit
weighs the same on a table of a million rows as on one of a thousand. Ranks never change once scored, so
a trial released stays out of every later choice; a resumed run that reads a released result back marks its
trial released (`TrialResult.released`), and no choice takes it."""

from __future__ import annotations

import bisect
import dataclasses
from collections import defaultdict
from typing import Any, Optional

TRIALS_PER_MODEL = 3  # a searched model's best trials the ensemble may pick from, its own params besides


@dataclasses.dataclass
class Retention:
    """Each model's kept trials: the `keep` best complete ones and the best pruned one (what
    `Outcome.best` falls back to), besides trial 0, which is never released."""

    keep: int = TRIALS_PER_MODEL
    # (model, pruned) -> [(loss, the order told, trial)], best first
    _ranked: dict = dataclasses.field(default_factory=lambda: defaultdict(list))
    _seq: int = 0

    def scored(self, trial, ctx) -> None:
        """`trial` (a level-1 TrialResult just told) joins its model's ranks; a trial it pushes out goes. One
        a resumed run read back released holds no place: it cannot be chosen."""
        if trial.level != 1 or trial.trial == 0 or trial.released:
            return
        self._seq += 1
        ranked = self._ranked[(trial.model, trial.pruned)]
        bisect.insort(ranked, (ctx.search_metric.loss_of(trial.score), self._seq, trial.trial))
        limit = 1 if trial.pruned else self.keep
        while len(ranked) > limit:
            self.release_trial(trial.model, ranked.pop()[2], ctx)

    def dropped(self, bag, ctx) -> None:
        """A level-1 trial's bag cut before it ran (pruned, or out of time): its finished folds go."""
        if bag.level == 1 and bag.trial:
            losing = (bag.model, bag.trial) in ctx.trials.pruned
            for fit_id in bag.depends_on:
                self.release_fit(fit_id, ctx, losing=losing)

    def ended_unused(self, task, ctx) -> None:
        """A level-1 trial's fit ended after its bag was cut (its fold ran on while the trial was judged)."""
        if task.kind == "fit" and task.level == 1 and task.trial and task.fold_set is None:
            self.release_fit(task.id, ctx, losing=(task.model, task.trial) in ctx.trials.pruned)

    def release_trial(self, model: str, number: int, ctx) -> None:
        trial = ctx.outcome.trials.get((model, number))
        if trial is None or trial.released:
            return
        ctx.outcome.trials[(model, number)] = dataclasses.replace(
            trial, folds=[light(f) for f in trial.folds], held_out=None, val_pred=None, test_pred=None,
            released=True)
        for fold in trial.folds:
            self.release_fit(fold.task_id, ctx, trial_score=trial.score)

    def release_fit(self, fit_id: str, ctx, trial_score: Optional[float] = None,
                    losing: bool = False) -> None:
        """Let a fit's model go; `trial_score`: its trial's (scored), `losing`: its trial was stopped as
        losing. Then its fold's score (and its trial's) replace its held-out predictions on disk: what
        successive halving and the bag of a resumed run read."""
        result = ctx.outcome.results.get(fit_id)
        if getattr(result, "released", True):  # not a fit's result, or released already
            return
        ctx.outcome.results[fit_id] = light(result)
        # a fit stopped by the deadline was never stored, and one read from the store (cached) may share its
        # key's file with a fit that stays (another trial of the same params, a run before): left as it is
        if result.stopped_by_budget or result.cached:
            return
        stored = dataclasses.replace(result, model=None, test_pred=None, released=True)
        if trial_score is not None or losing:
            # what successive halving reads (hpo.pruning: else nothing reads it)
            fold_score = held_out_score(result, ctx) if ctx.pruning else None
            stored = dataclasses.replace(stored, held_out=None, val_pred=None, fold_score=fold_score,
                                         trial_score=trial_score)
        ctx.store.lighten(result.key, stored)


def held_out_score(result: Any, ctx) -> Optional[float]:
    """A fit's score on its held-out rows: from its predictions, or as its released file keeps it (None where
    neither is there)."""
    if getattr(result, "held_out", None) is not None:
        return ctx.search_metric(ctx.data.y[result.held_out], result.val_pred)
    return getattr(result, "fold_score", None)


def light(result: Any):
    """A fold result without its model and predictions: what the run's summaries read of a released fit."""
    return dataclasses.replace(result, model=None, held_out=None, val_pred=None, test_pred=None, curve={},
                               released=True)
