"""The graph's shape as data: the task record, every task id, and one builder per node kind.

`BUILDERS` lists the builders in graph order; each is a small function that adds its kind's tasks to
those before it, naming what they depend on. pipeline.graph.plan runs them and places the fits (waves,
devices); pipeline.graph.stacking says which models stacking fits. Every task id is made here (`fit_id`,
`bag_id`, `stack_fit_id`, `stack_bag_id` and the constants below); other modules read ids from tasks'
`depends_on`, never rebuild them.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Callable, Optional

from pipeline.graph import stacking
from pipeline.quantities import ZERO
from pipeline.resources import Allocation, Resources

DRIVER = Resources(0, ZERO)  # bag, ensemble, refit and evaluate nodes run in the driver, holding no slot
ENSEMBLE, REFIT, EVALUATE = "ensemble", "refit", "evaluate"  # the ids (and kinds) of the single tail nodes


@dataclass(frozen=True)
class Task:
    id: str
    kind: str  # a registered node kind (pipeline.graph.nodes): fit | bag | ensemble | refit | evaluate | ...
    resources: Resources
    depends_on: tuple[str, ...] = ()
    model: Optional[str] = None
    trial: Optional[int] = None
    fold: Optional[int] = None
    device_ids: tuple[int, ...] = ()
    gpu_shares: tuple[Fraction, ...] = ()
    wave: int = 0
    level: int = 1  # the stacking level of a fit or bag (1: the base models)
    fold_set: Optional[tuple[int, ...]] = None  # a stacked fit's S (pipeline.graph.stacking); (): every row; None: a trial's

    @property
    def inner(self) -> bool:
        """A stacked model fit without two folds or more (fold set of 2+ folds): it only makes the
        features of the level above, and no leaderboard row shows it."""
        return bool(self.fold_set) and len(self.fold_set) > 1

    @property
    def slot(self) -> tuple[str, object]:
        """What admission counts a fit under: its trial's bag, or its model's stacked level."""
        return (self.model, self.trial) if self.fold_set is None else (self.model, f"level {self.level}")

    def to_json(self) -> dict:
        return {
            "id": self.id,
            "kind": self.kind,
            "model": self.model,
            "trial": self.trial,
            "fold": self.fold,
            "level": self.level,
            **({"fold_set": list(self.fold_set)} if self.fold_set is not None else {}),
            "num_cpus": self.resources.num_cpus,
            "num_gpus": float(self.resources.num_gpus),
            "device_ids": list(self.device_ids),
            "gpu_shares": [float(s) for s in self.gpu_shares],
            "depends_on": list(self.depends_on),
            "wave": self.wave,
        }


def fit_id(model: str, trial: int, fold: int) -> str:
    return f"fit/{model}/t{trial}/f{fold}"


def bag_id(model: str, trial: int) -> str:
    return f"bag/{model}/t{trial}"


def trial_bag(task) -> bool:
    """Whether `task` is a level-1 trial's bag (a search's trial, not a stacked level's)."""
    return (task.kind == "bag" and getattr(task, "trial", None) is not None
            and getattr(task, "level", None) in (None, 1))


def stack_fit_id(model: str, level: int, fold_set: tuple[int, ...]) -> str:
    """M(level, fold_set) of `model`: fit/lightgbm/l2/f3, fit/lightgbm/l1/f0+3, fit/lightgbm/l2/refit."""
    return f"fit/{model}/l{level}/" + ("f" + "+".join(map(str, fold_set)) if fold_set else "refit")


def stack_bag_id(model: str, level: int) -> str:
    return f"bag/{model}/l{level}"


@dataclass(frozen=True)
class Shape:
    """What the graph is built from: the models' allocations and the run's options."""

    allocations: tuple[Allocation, ...]
    stack_levels: int = 0
    evaluate: bool = False
    refit: bool = False

    @property
    def top(self) -> int:
        return self.stack_levels + 1

    @property
    def num_folds(self) -> int:
        return self.allocations[0].num_folds if self.allocations else 0

    def bags(self, model: str, level: int) -> tuple[str, ...]:
        """The ids of a model's bags at a level: one per trial at level 1, one above."""
        if level == 1:
            return tuple(bag_id(model, t) for t in range(self.allocation(model).num_trials))
        return (stack_bag_id(model, level),)

    def allocation(self, model: str) -> Allocation:
        return next(a for a in self.allocations if a.model == model)

    def model_id(self, model: str, level: int, fold_set: tuple[int, ...]) -> tuple[str, ...]:
        """The tasks after which M(level, fold_set) of `model` is known: at level 1 a fold model of
        the best trial, known once every trial is bagged; else its own fit."""
        if level == 1 and len(fold_set) == 1:
            return self.bags(model, 1)
        return (stack_fit_id(model, level, fold_set),)

    def feature_deps(self, level: int, fold_set: tuple[int, ...]) -> tuple[str, ...]:
        """What M(level, fold_set)'s features come from, for every model kind (pipeline.graph.stacking)."""
        sources = stacking.feature_sources(fold_set, level, self.top, self.num_folds)
        deps = [d for a in self.allocations for source, _ in sources for d in self.model_id(a.model, level - 1, source)]
        return tuple(dict.fromkeys(deps))


Builder = Callable[[Shape, list[Task]], list[Task]]


def trial_fits(shape: Shape, tasks: list[Task]) -> list[Task]:
    """Level 1: a fit per model x trial x fold."""
    return [Task(fit_id(a.model, t, f), "fit", a.fit, model=a.model, trial=t, fold=f)
            for a in shape.allocations for t in range(a.num_trials) for f in range(a.num_folds)]


def trial_bags(shape: Shape, tasks: list[Task]) -> list[Task]:
    """A bag per trial, after its folds."""
    return [Task(bag_id(a.model, t), "bag", DRIVER, tuple(fit_id(a.model, t, f) for f in range(a.num_folds)),
                 model=a.model, trial=t)
            for a in shape.allocations for t in range(a.num_trials)]


def stacked_fits(shape: Shape, tasks: list[Task]) -> list[Task]:
    """With stacking: level 1's inner models (fold sets of two folds or more, the best trial's
    parameters, after the model's trials), then every level above, each fit after its features."""
    if not shape.stack_levels:
        return []
    out = []
    for level in range(1, shape.top + 1):
        for a in shape.allocations:
            for fold_set in stacking.fold_sets(level, shape.top, shape.num_folds, refit=False):
                if level == 1 and len(fold_set) == 1:
                    continue  # the best trial's fold model
                deps = shape.bags(a.model, 1) if level == 1 else shape.feature_deps(level, fold_set)
                out.append(Task(stack_fit_id(a.model, level, fold_set), "fit", a.fit, deps, model=a.model,
                                fold=fold_set[0] if len(fold_set) == 1 else None, level=level, fold_set=fold_set))
    return out


def stacked_bags(shape: Shape, tasks: list[Task]) -> list[Task]:
    """A bag per model and level above the first, after its fold models."""
    return [Task(stack_bag_id(a.model, level), "bag", DRIVER,
                 tuple(stack_fit_id(a.model, level, (f,)) for f in range(shape.num_folds)), model=a.model,
                 level=level)
            for level in range(2, shape.top + 1) for a in shape.allocations]


def ensemble(shape: Shape, tasks: list[Task]) -> list[Task]:
    """Every model's best, at every level, and the weighted ensemble of the last level."""
    if not shape.evaluate:
        return []
    return [Task(ENSEMBLE, ENSEMBLE, DRIVER, tuple(t.id for t in tasks if t.kind == "bag"))]


def refit_fits(shape: Shape, tasks: list[Task]) -> list[Task]:
    """refit=true: M(level, {}) per model and level, on every row, after its level's bag (the length to
    fit for) and, above level 1, after the level below's refits and fold models (its features)."""
    if not (shape.evaluate and shape.refit):
        return []
    return [Task(stack_fit_id(a.model, level, ()), "fit", a.fit,
                 tuple(dict.fromkeys((*shape.bags(a.model, level),
                                      *(shape.feature_deps(level, ()) if level > 1 else ())))),
                 model=a.model, level=level, fold_set=())
            for level in range(1, shape.top + 1) for a in shape.allocations]


def refit(shape: Shape, tasks: list[Task]) -> list[Task]:
    """refit=true: the node that turns the refit fits into predictors, after the ensemble (its weights)."""
    if not (shape.evaluate and shape.refit):
        return []
    return [Task(REFIT, REFIT, DRIVER, (ENSEMBLE, *(t.id for t in tasks if t.kind == "fit" and t.fold_set == ())))]


def evaluate(shape: Shape, tasks: list[Task]) -> list[Task]:
    """The leaderboard of the ensemble's and the refit's boards."""
    if not shape.evaluate:
        return []
    return [Task(EVALUATE, EVALUATE, DRIVER, tuple(t.id for t in tasks if t.kind in (ENSEMBLE, REFIT)))]


BUILDERS: tuple[Builder, ...] = (trial_fits, trial_bags, stacked_fits, stacked_bags, ensemble, refit_fits, refit,
                                 evaluate)
