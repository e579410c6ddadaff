"""Stacking levels without leakage: which models each level fits, on which rows, fed with what.

Write M(l, S) for the level-l model of one model kind that learns from the rows outside the fold set
S (S = {k}: the fold model k that the bag, the leaderboard and the saved predictor use; S = {}: the
refit on every row). Level 1 learns from the original features. Level l > 1 learns from them plus one
column per level-(l-1) model kind (one per class for multiclass), filled, for each row, by a model
that never learnt that row's label, nor the label of any row in S:

- rows of a fold j outside S (its training rows): an M(l-1, C) with C containing S and j;
- rows in S (its validation rows) and the test rows: an M(l-1, C) with C containing S (C = S where
  that model exists, as it does for the fold models).

Plain out-of-fold stacking takes M(l-1, {j}) for the rows of fold j: a model that learnt fold k's
labels; the level-l fold model k learns from that feature, then is validated on fold k. Here, by
induction, M(l, S) learns from no label of a row in S, directly or through its features. (Each
model early-stops on its held-out rows, the rows of S, as a flat bag's fold model does on its fold.)

Which sets C: the smallest choice, C = S + {j}, needs every fold set of 2 .. (top - l + 1) folds
(C(k, 2) = 10 inner models per kind at level 1 for k = 5 and one stacking level). A model left out of
more folds serves more (S, j) pairs: M(1, {0, 1, 2}) fills fold 1 and 2 for the level-2 fold model 0,
fold 0 and 2 for fold model 1, and fold 0 and 1 for fold model 2. So each level's sets are a cover of
what the level above reads, found greedily (`_cover`), with sets of up to `widest` folds: as many as
leave every inner model, down to level 1, at least half the folds a fold model learns from (rounded
up). For k = 5 and one level that is 4 inner models on 2 of the 5 folds each (a two-fold split of the
4 folds outside each fold model) instead of 10 on 3: 14 fits per kind instead of 20.

The math (sets, counts, names) is light: the functions on arrays import numpy and pandas when they run.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Callable, Optional, Sequence

from pipeline.errors import ConfigError

if TYPE_CHECKING:
    import numpy as np

MAX_STACK_LEVELS = 2  # three levels of k=5 fit 35 models per kind; four would fit 65 (some on one fold), k=10 393
FoldSet = tuple[int, ...]


def check(stack_levels: int, num_folds: int) -> None:
    """stack_levels: a whole number in 0 .. MAX_STACK_LEVELS, with enough folds for the inner models."""
    if isinstance(stack_levels, bool) or not isinstance(stack_levels, int) or not 0 <= stack_levels <= MAX_STACK_LEVELS:
        raise ConfigError(
            f"stack_levels={stack_levels!r} must be a whole number from 0 (no stacking) to {MAX_STACK_LEVELS}: "
            f"leak-free stacking fits models without 1, 2, ... folds at the levels below the top, so with "
            f"k=5 folds {MAX_STACK_LEVELS} levels fit {fits_per_kind(5, MAX_STACK_LEVELS, False)} models per kind "
            f"and {MAX_STACK_LEVELS + 1} would fit {fits_per_kind(5, MAX_STACK_LEVELS + 1, False)}"
        )
    if stack_levels and num_folds < stack_levels + 2:
        raise ConfigError(
            f"stack_levels={stack_levels} needs parallelism.num_folds >= {stack_levels + 2} (it is {num_folds}): "
            f"each level's features come from models fitted without up to {stack_levels + 1} folds, and one "
            f"fold at least must remain to learn from; use parallelism=bag5 (num_folds=5) or stack_levels=0"
        )


def folds_for(stack_levels: int, num_folds: int) -> Optional[int]:
    """The folds a bag needs for `stack_levels` when `num_folds` has too few (5, or more for two levels);
    None when it has enough, or stacking is off or out of range (check says why)."""
    whole = isinstance(stack_levels, int) and not isinstance(stack_levels, bool)
    if not whole or not 0 < stack_levels <= MAX_STACK_LEVELS or num_folds >= stack_levels + 2:
        return None
    return max(5, stack_levels + 2)


def fold_sets(level: int, top: int, num_folds: int, refit: bool) -> list[FoldSet]:
    """The fold sets S of every M(level, S) a stack of `top` levels needs: the fold models first, then
    the inner models' sets, smaller first."""
    return ([()] if refit else []) + list(_families(top, num_folds)[level - 1])


def fits_per_kind(num_folds: int, stack_levels: int, refit: bool) -> int:
    """How many models of one kind a stack fits (level 1's best trial counted once, HPO trials aside)."""
    top = stack_levels + 1
    return sum(len(fold_sets(level, top, num_folds, refit)) for level in range(1, top + 1))


def widest(level: int, num_folds: int) -> int:
    """The most folds a level-`level` inner model is left out of, unless what the level above reads
    needs more: every inner model, down to level 1 (which adds a fold per level), then learns from at
    least half the k - 1 folds a fold model learns from, rounded up."""
    return (num_folds + 1) // 2 - (level - 1)


@functools.lru_cache(maxsize=None)
def _families(top: int, num_folds: int) -> tuple[tuple[FoldSet, ...], ...]:
    """Each level's fold sets (without the refit's), from the top down: the top level's are the fold
    models; a level below covers the sets the level above reads (its own, and each with one more fold)."""
    families = {top: tuple((f,) for f in range(num_folds))}
    for level in range(top - 1, 0, -1):
        above = families[level + 1]
        needed = set(above) | {tuple(sorted((*s, j))) for s in above for j in range(num_folds) if j not in s}
        families[level] = _cover(needed, widest(level, num_folds), num_folds)
    return tuple(families[level] for level in range(1, top + 1))


def _cover(needed: set[FoldSet], widest: int, num_folds: int) -> tuple[FoldSet, ...]:
    """Fold sets such that each needed set lies within one of them: a single fold as it is (the fold
    models), a larger set within a set of at most max(its size, `widest`) folds. Greedy: the largest
    needed set not yet covered grows, a fold at a time, by the fold that lets it cover the most needed
    sets not yet covered, up to its bound; the shortest such set covering that many is kept."""

    def bound(s: FoldSet) -> int:
        return 1 if len(s) == 1 else max(len(s), widest)

    def count(c: frozenset, left: list[FoldSet]) -> int:
        return sum(len(c) <= bound(s) and c.issuperset(s) for s in left)

    left = sorted(needed, key=lambda s: (-len(s), s))
    chosen: list[FoldSet] = []
    while left:
        grown = frozenset(left[0])
        best, best_count = grown, count(grown, left)
        while len(grown) < bound(left[0]):
            candidates = [grown | {f} for f in range(num_folds) if f not in grown]
            grown, covered = max(((c, count(c, left)) for c in candidates),
                                 key=lambda pair: (pair[1], -sum(pair[0])))
            if covered > best_count:
                best, best_count = grown, covered
        chosen.append(tuple(sorted(best)))
        left = [s for s in left if not (len(best) <= bound(s) and best.issuperset(s))]
    return tuple(sorted(chosen, key=lambda s: (len(s), s)))


def feature_sources(fold_set: FoldSet, level: int, top: int, num_folds: int) -> list[tuple[FoldSet, Optional[int]]]:
    """Where M(level, S)'s level-(level-1) features come from: (the producer's fold set, the fold whose
    rows it fills; None: the rows in S and the test rows). Each producer is the smallest level-(level-1)
    set that holds S and the fold it fills (S for None); the refit's (S = {}) is the refit below."""
    below = _families(top, num_folds)[level - 2]

    def producer(rows: FoldSet) -> FoldSet:
        return min((c for c in below if set(rows) <= set(c)), key=lambda c: (len(c), c))

    outside = [j for j in range(num_folds) if j not in fold_set]
    own = producer(fold_set) if fold_set else ()
    return [(producer(tuple(sorted((*fold_set, j)))), j) for j in outside] + [(own, None)]


def level_name(model: str, level: int) -> str:
    """The name a model's level shows under: lightgbm, lightgbm_l2, ..."""
    return model if level == 1 else f"{model}_l{level}"


def column_names(level: int, model: str, problem_type: str, num_classes: int) -> list[str]:
    """The feature columns a level-`level` model of kind `model` feeds the level above."""
    stem = f"stack_l{level}_{model}"
    if problem_type == "regression":
        return [stem]
    if problem_type == "binary":
        return [f"{stem}_p1"]
    return [f"{stem}_p{c}" for c in range(num_classes)]


def as_columns(pred: "np.ndarray", problem_type: str) -> "np.ndarray":
    """A model's predictions as its feature columns: the value, the positive class's probability, or
    every class's."""
    import numpy as np

    pred = np.asarray(pred, dtype=np.float32)
    if problem_type == "regression":
        return pred.reshape(-1, 1)
    if problem_type == "binary":
        return pred[:, 1:2]
    return pred


def join(X, names: Sequence[str], values: "np.ndarray"):
    """X with the stacked columns `names` (float32 `values`, a row per row of X) after its own."""
    import pandas as pd

    return pd.concat([X, pd.DataFrame(values, index=X.index, columns=list(names))], axis=1)


def feature_matrix(fold_set: FoldSet, level: int, top: int, models: Sequence[str], data,
                   fold_of_row: "np.ndarray", num_folds: int, result: Callable[[str, int, FoldSet], object]) -> tuple[list[str], "np.ndarray"]:
    """The level-(level-1) columns M(level, fold_set) learns and is validated with: (names, values
    with a row per row of data.X, NaN where no row of this model's reads). `fold_of_row` holds each
    row's fold (-1: not a training row); `result(model, level, fold_set)` is that model's fold result
    (held_out rows, val_pred, test_pred)."""
    import numpy as np

    problem, names, blocks = data.problem_type, [], []
    for model in models:
        names += column_names(level - 1, model, problem, data.num_classes)
        block = np.full((len(data.y), len(column_names(level - 1, model, problem, data.num_classes))), np.nan,
                        dtype=np.float32)
        for source, fold in feature_sources(fold_set, level, top, num_folds):
            producer = result(model, level - 1, source)
            held = np.asarray(producer.held_out)
            values = as_columns(producer.val_pred, problem)
            keep = fold_of_row[held] == fold if fold is not None else np.isin(fold_of_row[held], fold_set)
            block[held[keep]] = values[keep]
            if fold is None:
                block[data.test_idx] = as_columns(producer.test_pred, problem)
        blocks.append(block)
    return names, np.concatenate(blocks, axis=1)
