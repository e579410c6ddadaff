"""A node kind defined outside the engine, registered the way a plugin would: the scheduler runs
its tasks like its own."""

from __future__ import annotations

from pipeline.graph.nodes import NodeKind, register
from pipeline.graph.nodes.ensemble import Board

RAN: list[dict] = []  # per run of a node: its id and the task ids that were done at that moment


@register
class TrialAudit(NodeKind):
    """Reads the bagged trials it depends on; joins the leaderboard with no row of its own."""

    name = "audit"

    def run(self, task, inputs, ctx) -> Board:
        RAN.append({"id": task.id, "done": sorted(ctx.outcome.results), "scores": {
            d: inputs[d].score for d in task.depends_on}})
        return Board(rows=[], predictors={})

    def describe(self, tasks, plan) -> str:
        return f"audit: {len(tasks)} check(s) of the bagged trials"
