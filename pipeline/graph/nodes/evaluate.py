"""The evaluate node: the leaderboard of every board it depends on (the ensemble's, the refits'), best
first (a board's `lead`, the run's answer, before every other row), with the predictors it scores. It
computes only: the run's hooks (pipeline.outputs) write the leaderboard, the predictors and the artifacts,
and log them to MLflow."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.graph.nodes import NodeKind, register


@dataclass
class Evaluation:
    """The run's result: leaderboard rows (best first), every predictor by name, each model's best trial."""

    rows: list[dict]
    predictors: dict
    best: dict

    @property
    def top(self) -> dict:
        return self.rows[0]


@register
class EvaluateNode(NodeKind):
    name = "evaluate"
    partial_inputs = True  # the boards that were made, when a time limit cut a node before it

    def run(self, task, inputs, ctx) -> Evaluation:
        boards = [inputs[d] for d in task.depends_on if d in inputs]
        rows = [r for b in boards for r in b.rows]
        lead = next((b.lead for b in reversed(boards) if getattr(b, "lead", None)), None)
        rows.sort(key=lambda r: r["model"] != lead)  # stable: the boards' own order otherwise
        predictors = {k: v for b in boards for k, v in b.predictors.items()}
        best = {k: v for b in boards for k, v in b.best.items()}
        return Evaluation(rows, predictors, best)

    def describe(self, tasks, plan) -> str:
        return "evaluate: the leaderboard on the test split, the saved models and the run's artifacts"
