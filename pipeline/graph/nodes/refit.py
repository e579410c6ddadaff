"""The refit node (refit=true): the refit fits (each model's best trial fitted once more on train +
validation, at every stacked level; pipeline.graph.refit) as predictors and rows, and the ensemble of the
refits with the bagged ensemble's weights; under hpo=auto also the blend of the two ensembles, the run's
answer (pipeline.graph.refit.blend_row). The fits ran on the backend as fit tasks of the plan."""

from __future__ import annotations

from pipeline.graph.nodes import NodeKind, register
from pipeline.graph.nodes.ensemble import Board


@register
class RefitNode(NodeKind):
    """Depends on the ensemble node and the refit fits; its board holds the refits' rows and predictors."""

    name = "refit"
    partial_inputs = True  # the refits that ended, when the time limit left one without the time to

    def run(self, task, inputs, ctx) -> Board:
        from pipeline.graph.refit import blend_row, refit_all

        boards = [inputs[d] for d in task.depends_on if isinstance(inputs.get(d), Board)]
        if not boards:  # the ensemble was cut: no trial ended, so no refit had a trial to fit
            return Board([], {})
        (board,) = boards
        refits = {(fit.model, fit.level): inputs[fit.id] for fit in map(ctx.plan.task, task.depends_on)
                  if fit.kind == "fit" and fit.id in inputs}
        predictors = dict(board.predictors)
        test_preds = dict(board.test_preds)
        guard = getattr(ctx.trials, "noise_guard", False)  # hpo=auto: the blend of both ensembles answers
        # under it a member whose refit the time limit cut stands in as its bag: the blend keeps the others'
        stand_ins = board.best if guard else None
        rows = refit_all(refits, board.best, predictors, ctx.data, ctx.plan, board.schema, test_preds,
                         stand_ins)
        lead = None
        if guard:
            row = blend_row(test_preds, [*board.rows, *rows], predictors, ctx.data)
            if row is not None:
                rows.insert(0, row)
                lead = row["model"]
        return Board(rows, {k: v for k, v in predictors.items() if k not in board.predictors}, lead=lead)

    def describe(self, tasks, plan) -> str:
        refits = sum(t.kind == "fit" and t.fold_set == () for t in plan.tasks)
        return (f"refit: the {refits} refit fit(s) (each model's best trial once more on train + validation, "
                "run like every fit) as predictors, and their ensemble with the bagged ensemble's weights")
