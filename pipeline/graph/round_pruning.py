"""Stopping a losing fit between its boosting rounds or epochs (hpo.pruning).

A fit reports its validation loss every few rounds (every 10 for the boosters) or every epoch. It is
judged only at rungs spaced by a factor of 3 (the boosters' rounds 10, 30, 90, 270, ...; epochs 1, 3,
9, 27, ...) and stops where its best loss so far is in the worst quarter of what the earlier fits of
the same model and fold (stopped ones included) had reached by that step: Optuna's PercentilePruner
rule (percentile 75, 3 start-up fits) at Hyperband's geometric steps.

Judging at every report against the median, as Optuna's MedianPruner does, ratchets: the fits still
running at a later step are the ones that were better than the median before, so each check stops
about half of what is left, and a search stops nearly every fit within its first rounds (measured on
a 120-s budget: 952 of 1,000 LightGBM trials stopped at round 10). Successive halving over folds
(pipeline.hpo.TrialSource.fold_scored) keeps only the best third of the trials after their first
fold; this pruner only ends the fits that are clearly losing before they spend their rounds.

The driver keeps a `RungTable` per (model, fold) and sends each fit its thresholds (a few numbers,
whatever the number of earlier fits); the fit's `FoldPruner` compares against them.
"""

from __future__ import annotations

import bisect
import math

RUNG_FACTOR = 3
PERCENTILE = 75.0  # a fit whose best loss is above this percentile of the earlier fits' at a rung stops
MIN_REFERENCES = 3  # earlier fits that reached a rung before it judges anything


def rungs(curve: dict[int, float]) -> dict[int, float]:
    """The curve's best loss so far at each of its rungs: steps unit x 3^k, the unit being its first
    reported step after step 0 (10 rounds for the boosters, 1 epoch for the network)."""
    steps = sorted(int(s) for s in curve)
    positive = [s for s in steps if s > 0]
    if not positive:
        return {}
    unit, best, out = positive[0], math.inf, {}
    for step in steps:
        best = min(best, float(curve[step]))
        if step > 0 and step % unit == 0 and _power_of(step // unit, RUNG_FACTOR):
            out[step] = best
    return out


def _power_of(n: int, base: int) -> bool:
    while n > 1 and n % base == 0:
        n //= base
    return n == 1


class RungTable:
    """The best losses earlier fits of one model and fold had reached at each rung, kept sorted."""

    def __init__(self):
        self.reached: dict[int, list[float]] = {}

    def add(self, curve: dict[int, float]) -> None:
        for step, best in rungs(curve).items():
            if best == best:  # (not NaN)
                bisect.insort(self.reached.setdefault(step, []), best)

    def thresholds(self) -> tuple[tuple[int, float], ...]:
        """(rung step, loss above which a fit stops there), for the rungs enough fits reached."""
        return tuple((step, percentile(values, PERCENTILE)) for step, values in sorted(self.reached.items())
                     if len(values) >= MIN_REFERENCES)


def percentile(ordered: list[float], q: float) -> float:
    """The q-th percentile of sorted values, interpolated linearly between ranks (numpy's default)."""
    rank = (len(ordered) - 1) * q / 100.0
    low = int(math.floor(rank))
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


class FoldPruner:
    """In the fit: its reported losses (the curve), and whether it is losing at a rung. The models call
    it every few rounds or every epoch with (step, loss) and stop when it returns True."""

    def __init__(self, thresholds: tuple[tuple[int, float], ...] = ()):
        self.thresholds = dict(thresholds)
        self.values: dict[int, float] = {}
        self.best = math.inf
        self.pruned = False

    def __call__(self, step: int, value: float) -> bool:
        self.values[step] = value
        if value == value:
            self.best = min(self.best, float(value))
        limit = self.thresholds.get(step)
        if limit is not None and not self.best <= limit:
            self.pruned = True
        return self.pruned
