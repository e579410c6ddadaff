"""The refit node (refit=true): the refit fits (each model's best trial fitted once more on train +
validation, at every stacked level; pipeline.graph.refit) as predictors and rows, and the ensemble of the
refits with the bagged ensemble's weights. The fits ran on the backend as fit tasks of the plan."""

from __future__ import annotations

from pipeline.graph.nodes import NodeKind, register
from pipeline.graph.nodes.ensemble import Board


@register
class RefitNode(NodeKind):
    """Depends on the ensemble node and the refit fits; its board holds the refits' rows and predictors."""

    name = "refit"
    partial_inputs = True  # the refits that ended, when the time limit left one without the time to

    def run(self, task, inputs, ctx) -> Board:
        from pipeline.graph.refit import refit_all

        boards = [inputs[d] for d in task.depends_on if isinstance(inputs.get(d), Board)]
        if not boards:  # the ensemble was cut: no trial ended, so no refit had a trial to fit
            return Board([], {})
        (board,) = boards
        refits = {(fit.model, fit.level): inputs[fit.id] for fit in map(ctx.plan.task, task.depends_on)
                  if fit.kind == "fit" and fit.id in inputs}
        predictors = dict(board.predictors)
        rows = refit_all(refits, board.best, predictors, ctx.data, ctx.plan, board.schema)
        return Board(rows, {k: v for k, v in predictors.items() if k not in board.predictors})

    def describe(self, tasks, plan) -> str:
        refits = sum(t.kind == "fit" and t.fold_set == () for t in plan.tasks)
        return (f"refit: the {refits} refit fit(s) (each model's best trial once more on train + validation, "
                "run like every fit) as predictors, and their ensemble with the bagged ensemble's weights")
