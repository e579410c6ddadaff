"""The bag node: one trial's fold models (or one stacked level's) as one result (out-of-fold
predictions in row order, the test predictions averaged), scored; a trial's is told to the trial source.
Under a time budget a model's first trial may end with the folds that ended in time (graph.first_trials):
it is scored on their held-out rows."""

from __future__ import annotations

import logging

from pipeline.graph.nodes import NodeKind, register

log = logging.getLogger(__name__)


@register
class BagNode(NodeKind):
    name = "bag"

    def run(self, task, inputs, ctx):
        import numpy as np

        from pipeline.graph.nodes.context import TrialResult
        from pipeline.graph.stacking import level_name

        folds = [inputs[i] for i in task.depends_on if i in inputs]  # fewer: a first trial the budget cut
        if task.level == 1:
            folds = _without_far_short(folds, ctx)
        released = any(f.released for f in folds)  # a resumed run read it released (graph.retention)
        eval_score = None
        if any(f.held_out is None for f in folds):  # read back released: its scores, not its predictions
            held_out = val_pred = test_pred = None
            score = _stored_score(folds, ctx)
        else:
            held_out = np.concatenate([f.held_out for f in folds])
            val_pred = np.concatenate([f.val_pred for f in folds])
            order = np.argsort(held_out, kind="stable")
            held_out, val_pred = held_out[order], val_pred[order]
            test_pred = None if released else np.mean([f.test_pred for f in folds], axis=0)
            score = ctx.search_metric(ctx.data.y[held_out], val_pred)
            if ctx.search_metric is not ctx.metric:
                eval_score = ctx.metric(ctx.data.y[held_out], val_pred)
        if task.level > 1:  # a stacked level: its kind's best level-1 parameters; no trial to tell
            best = ctx.outcome.best(task.model, ctx.search_metric)
            trial = TrialResult(level_name(task.model, task.level), best.trial, best.params, folds, held_out,
                                val_pred, test_pred, score, level=task.level)
            ctx.outcome.trials[(trial.model, trial.trial)] = trial
            return trial
        trial = TrialResult(task.model, task.trial, ctx.trials.params(task.model, task.trial), folds, held_out,
                            val_pred, test_pred, score, pruned=any(f.pruned for f in folds),
                            released=released, eval_score=eval_score)
        ctx.outcome.trials[(task.model, task.trial)] = trial
        ctx.trials.tell(task.model, task.trial, trial.score, pruned=trial.pruned)
        if ctx.hooks:
            ctx.hooks.on_trial_end(trial)
        ctx.retention.scored(trial, ctx)
        return ctx.outcome.trials[(task.model, task.trial)]

    def cut(self, task, ctx) -> None:
        """Not all of the trial's folds will run: the trial is dropped, not scored on part of the rows; the
        folds that ended let their models go."""
        ctx.trials.drop(task.model, task.trial)
        ctx.retention.dropped(task, ctx)

    def describe(self, tasks, plan) -> str:
        trials = sum(t.level == 1 for t in tasks) + sum(plan.unlisted(a.model) for a in plan.allocations)
        above = sum(t.level > 1 for t in tasks)
        return (f"bag: {trials + above} node(s), each trial's fold models averaged and scored out of fold"
                + (f" ({above} of them a stacked level's)" if above else ""))


def _without_far_short(folds: list, ctx) -> list:
    """The folds, less those the budget stopped far short (graph.stopped_folds), each said."""
    from pipeline.graph.stopped_folds import far_short

    short = far_short(folds, ctx.data.y, ctx.metric)
    for fold in short:
        log.warning("time_limit_s: %s", fold.line(ctx.metric.name))
    left = {f.task_id for f in short}
    return [f for f in folds if getattr(f, "task_id", None) not in left]


def _stored_score(folds, ctx) -> float:
    """A released trial's score as its stored fits keep it: its own, where it was scored; else (a trial
    stopped as losing that a resumed run's successive halving let go on) the mean of its folds' scores."""
    scores = [f.trial_score for f in folds if f.trial_score is not None]
    if scores:
        return scores[0]
    from pipeline.graph.retention import held_out_score

    fold_scores = [held_out_score(f, ctx) for f in folds]
    return sum(fold_scores) / len(fold_scores)
