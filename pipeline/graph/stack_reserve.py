"""With stacking under a time limit, the time the level-1 search leaves for the fits above it.

The stacked fits (level 1's inner models and every fit of the levels above: pipeline.graph.stacking) read
the best of each model's level-1 trials, so they can start only once the search has ended. A search that
runs to the fits' deadline leaves them none: `stack_levels=1 time_limit_s=60` on a 2,798-row table fitted
no level-2 model ("left out (no complete trial): lightgbm (level 2), ..."). So a level-1 trial after the
first (each model's own params, which every level needs) must end that much before the deadline: each
model's stacked fits at `LEVEL_COST` times its measured level-1 fit time (its best trial's so far where
longer than its mean, its last few fits' where longer still: `TimeBudget.stacked_estimate`), on the places
the CPUs give. A model not measured yet keeps nothing until it is.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Callable, Optional

# a stacked fit against a level-1 fit of its model: it learns from the level below's predictions too, and the
# driver builds those features. On a 4-class table of 2,798 rows, three models: LightGBM's and XGBoost's
# level-2 fits 1.5-2.5 times their mean level-1 fit, their inner level-1 fits about 1; the network's 0.3-0.7
# (its mean is its longest trials'); the whole stacked level took 0.45-0.6 of this estimate. Generous: a
# stacked fit that cannot end leaves its model out of the level, a search ended early costs a few trials
LEVEL_COST = 2.0
PER_FIT_S = 0.05  # the driver's own work per fit (its request, its result), which tiny fits are mostly made of


@dataclass(frozen=True)
class StackReserve:
    """The stacked fits per model, and how many run at once."""

    fits: tuple[tuple[str, int], ...]  # (model, its fits above its level-1 trials), the refits apart
    places: int = 1

    @classmethod
    def of(cls, plan) -> Optional["StackReserve"]:
        """The reserve of a plan with stacked levels; None without."""
        if not plan.stack_levels:
            return None
        counts = Counter(t.model for t in plan.tasks if t.kind == "fit" and t.fold_set)
        cpus = max((a.fit.num_cpus for a in plan.allocations), default=1)
        places = max(1, plan.hardware.num_cpus // max(1, cpus))
        return cls(tuple(sorted(counts.items())), places)

    def seconds(self, fit_seconds: Callable[[str], Optional[float]]) -> float:
        """The stacked fits' time, with `fit_seconds` a model's measured seconds per level-1 fit."""
        def one(model: str) -> float:
            seconds = fit_seconds(model)
            return 0.0 if seconds is None else seconds * LEVEL_COST + PER_FIT_S

        each = [(one(model), n) for model, n in self.fits]
        return max(max((s for s, _ in each), default=0.0), sum(s * n for s, n in each) / self.places)

    def holds(self, task) -> bool:
        """Whether `task` ends this much before the deadline: a level-1 trial's fit after the first."""
        return (task.kind == "fit" and getattr(task, "fold_set", None) is None and getattr(task, "level", 1) == 1
                and getattr(task, "trial", None) not in (None, 0))
