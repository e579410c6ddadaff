"""The refit node (refit=true): each model's best trial fitted once more on train + validation
(pipeline.refit), and the ensemble of the refits with the bagged ensemble's weights."""

from __future__ import annotations

from pipeline.nodes import NodeKind, register
from pipeline.nodes.ensemble import Board


@register
class RefitNode(NodeKind):
    """Depends on the ensemble node; its board holds the refits' rows and predictors."""

    name = "refit"

    def run(self, task, inputs, ctx) -> Board:
        from pipeline.refit import refit_all

        (board,) = (inputs[d] for d in task.depends_on)
        predictors = dict(board.predictors)
        rows = refit_all(board.best, predictors, ctx.data, ctx.metric, ctx.plan, ctx.seed, board.schema)
        ctx.require_outputs(task).tracker.log_metrics(
            {f"{r['model']}/test_{k[5:]}": v for r in rows for k, v in r.items() if k.startswith("test_")})
        return Board(rows, {k: v for k, v in predictors.items() if k not in board.predictors})

    def describe(self, tasks, plan) -> str:
        return "refit: each model's best trial fitted once more on train + validation, in the driver"
