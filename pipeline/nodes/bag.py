"""The bag node: one trial's fold models as one result (out-of-fold predictions in row order, the
test predictions averaged), scored, and told to the trial source."""

from __future__ import annotations

from pipeline.nodes import NodeKind, register


@register
class BagNode(NodeKind):
    name = "bag"

    def run(self, task, inputs, ctx):
        import numpy as np

        from pipeline.nodes.context import TrialResult

        folds = [inputs[i] for i in task.depends_on]
        held_out = np.concatenate([f.held_out for f in folds])
        val_pred = np.concatenate([f.val_pred for f in folds])
        order = np.argsort(held_out, kind="stable")
        held_out, val_pred = held_out[order], val_pred[order]
        test_pred = np.mean([f.test_pred for f in folds], axis=0)
        score = ctx.metric(ctx.data.y[held_out], val_pred)
        trial = TrialResult(task.model, task.trial, ctx.trials.params(task.model, task.trial), folds, held_out,
                            val_pred, test_pred, score, pruned=any(f.pruned for f in folds))
        ctx.outcome.trials[(task.model, task.trial)] = trial
        ctx.trials.tell(task.model, task.trial, trial.score, pruned=trial.pruned)
        if ctx.hooks:
            ctx.hooks.on_trial_end(trial)
        return trial

    def cut(self, task, ctx) -> None:
        """Not all of the trial's folds will run: the trial is dropped, not scored on part of the rows."""
        ctx.trials.drop(task.model, task.trial)

    def describe(self, tasks, plan) -> str:
        return f"bag: {len(tasks)} node(s), each trial's fold models averaged and scored out of fold"
