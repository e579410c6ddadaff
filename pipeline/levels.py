"""Levels the user left unset or set to no effect: derived GPU shares that pack, ignored levels.

A derived share is a whole device or 1/k of one, never a share such as 0.8 (four of which cannot
be placed on four devices). It is the largest such share that lets the fits able to run at once
(as many as the level's CPUs allow) run side by side on the level's devices, so that two fits on
a four-GPU box get a device each rather than halves of one.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Optional

from pipeline.quantities import fmt

ONE = Fraction(1)


def derived_gpu_share(level_gpus: Fraction, concurrent: int) -> Fraction:
    """The share of each of `concurrent` fits on a level holding `level_gpus` GPUs.

    Whole devices when the level has one per fit; otherwise 1/k of a device with k the fewest fits
    per device that still seats every concurrent fit: ceil(concurrent / whole devices), or, for a
    level that owns only part of one device (a launcher slot of 0.5), ceil(concurrent / share).
    """
    if level_gpus <= 0:
        return Fraction(0)
    concurrent = max(1, concurrent)
    if level_gpus >= 1:
        whole = math.floor(level_gpus)
        return ONE if concurrent <= whole else Fraction(1, math.ceil(Fraction(concurrent, whole)))
    return Fraction(1, math.ceil(concurrent / level_gpus))


def ineffective_bag(num_cpus: Optional[int], num_gpus: Optional[Fraction], num_folds: int) -> list[str]:
    """Why each value set on parallelism.bag has no effect: without bagging there is no bag level."""
    if num_folds >= 2:
        return []
    set_values = [(k, v) for k, v in (("num_cpus", num_cpus), ("num_gpus", num_gpus)) if v is not None]
    return [
        f"parallelism.bag.{key}={fmt(value)} has no effect: parallelism.num_folds={num_folds} fits one holdout model "
        "per trial, with no bag; each fit is checked against the hardware total instead. Set "
        "parallelism.num_folds>=2 to bag, or drop parallelism.bag"
        for key, value in set_values
    ]

