"""The registry of graph node kinds: what the scheduler does with a task of each `Task.kind`.

A node kind is a `NodeKind` subclass registered under its name. Worker kinds (`on_worker = True`:
the fit) are admitted against the plan's resources and sent to the backend; driver kinds (bag,
ensemble, refit, evaluate) run in the driver as soon as every task they depend on is done. The
scheduler knows neither list: a new kind is a new registered class and tasks of it in the plan.

Built-in kinds are imported when first asked for, so the printed plan costs no heavy import.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any, ClassVar, Sequence

_BUILT_IN = {
    "fit": "pipeline.graph.nodes.fit",
    "bag": "pipeline.graph.nodes.bag",
    "ensemble": "pipeline.graph.nodes.ensemble",
    "refit": "pipeline.graph.nodes.refit",
    "evaluate": "pipeline.graph.nodes.evaluate",
}
_KINDS: dict[str, type["NodeKind"]] = {}


class NodeKind:
    """One kind of node. Driver kinds implement `run`; worker kinds implement `request` and `done`."""

    name: ClassVar[str]
    on_worker: ClassVar[bool] = False
    # runs on whichever of its inputs finished (a time limit cut the others); else it needs them all
    partial_inputs: ClassVar[bool] = False

    def run(self, task, inputs: dict[str, Any], ctx) -> Any:
        """The node's result from its inputs (the results of `task.depends_on`, by task id)."""
        raise NotImplementedError(f"node kind {self.name!r} runs on a worker; it has no run()")

    def request(self, task, shares, ctx, attempt: int):
        """What the backend runs for this task (with a `key` the result store files it under)."""
        raise NotImplementedError(f"node kind {self.name!r} runs in the driver; it has no request()")

    def done(self, task, result, request, ctx) -> Any:
        """The node's result from what its worker returned."""
        return result

    def cut(self, task, ctx) -> None:
        """The time limit cut this task: it will not run (release what it holds, if anything)."""

    def describe(self, tasks: Sequence, plan) -> str:
        """One line for the printed plan about this kind's tasks."""
        return f"{self.name}: {len(tasks)} node(s)"


def register(cls: type[NodeKind]) -> type[NodeKind]:
    """Class decorator: make `cls` the node kind named `cls.name`."""
    _KINDS[cls.name] = cls
    return cls


def node_kind(name: str) -> NodeKind:
    """The registered node kind `name` (a built-in one is imported on first use)."""
    if name not in _KINDS and name in _BUILT_IN:
        import_module(_BUILT_IN[name])
    try:
        return _KINDS[name]()
    except KeyError:
        known = sorted(set(_KINDS) | set(_BUILT_IN))
        raise KeyError(f"no node kind {name!r} is registered (known: {', '.join(known)})") from None
