"""Stacking levels without leakage: which models each level fits, on which rows, fed with what.

Write M(l, S) for the level-l model of one model kind that learns from the rows outside the fold set
S (S = {k}: the fold model k that the bag, the leaderboard and the saved predictor use; S = {}: the
refit on every row). Level 1 learns from the original features. Level l > 1 learns from them plus one
column per level-(l-1) model kind (one per class for multiclass), filled, for each row, by a model
that never learnt that row's label, nor the label of any row in S:

- rows of a fold j outside S (its training rows): M(l-1, S ∪ {j}), which learnt without S and j;
- rows in S (its validation rows) and the test rows: M(l-1, S).

Plain out-of-fold stacking takes M(l-1, {j}) for the rows of fold j: a model that learnt fold k's
labels; the level-l fold model k learns from that feature, then is validated on fold k. Here, by
induction, M(l, S) learns from no label of a row in S, directly or through its features. (Each
model early-stops on its held-out rows, the rows of S, as a flat bag's fold model does on its fold.)

So level l needs the fold sets of sizes 1 .. (top - l + 1) (and {} with refit); every set leaves at
least one fold to learn from, so num_folds >= stack_levels + 2. With k folds and one stacking level a
model kind fits k + C(k, 2) level-1 models and k level-2 models (20 for k = 5, where one level costs
5). Every model beyond level 1's trials takes the parameters of its kind's best level-1 trial.

The math (sets, counts, names) is light: the functions on arrays import numpy and pandas when they run.
"""

from __future__ import annotations

from itertools import combinations
from math import comb
from typing import TYPE_CHECKING, Callable, Optional, Sequence

from pipeline.errors import ConfigError

if TYPE_CHECKING:
    import numpy as np

MAX_STACK_LEVELS = 2  # three levels of k=5 fit 45 models per kind; four would fit 75, with k=10 over 600
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


def fold_sets(level: int, top: int, num_folds: int, refit: bool) -> list[FoldSet]:
    """The fold sets S of every M(level, S) a stack of `top` levels needs, smaller sets first."""
    sets = [s for size in range(1, top - level + 2) for s in combinations(range(num_folds), size)]
    return ([()] if refit else []) + sets


def fits_per_kind(num_folds: int, stack_levels: int, refit: bool) -> int:
    """How many models of one kind a stack fits (level 1's best trial counted once, HPO trials aside)."""
    top = stack_levels + 1
    return sum(refit + sum(comb(num_folds, size) for size in range(1, top - level + 2))
               for level in range(1, top + 1))


def feature_sources(fold_set: FoldSet, num_folds: int) -> list[tuple[FoldSet, Optional[int]]]:
    """Where M(l, S)'s level-(l-1) features come from: (the producer's fold set, the fold whose rows it
    fills; None: the rows in S and the test rows)."""
    outside = [j for j in range(num_folds) if j not in fold_set]
    return [(tuple(sorted((*fold_set, j))), j) for j in outside] + [(fold_set, None)]


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


def feature_matrix(fold_set: FoldSet, level: int, models: Sequence[str], data, fold_of_row: "np.ndarray",
                   num_folds: int, result: Callable[[str, int, FoldSet], object]) -> tuple[list[str], "np.ndarray"]:
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
        for source, fold in feature_sources(fold_set, num_folds):
            producer = result(model, level - 1, source)
            held = np.asarray(producer.held_out)
            values = as_columns(producer.val_pred, problem)
            keep = fold_of_row[held] == fold if fold is not None else np.isin(fold_of_row[held], fold_set)
            block[held[keep]] = values[keep]
            if fold is None:
                block[data.test_idx] = as_columns(producer.test_pred, problem)
        blocks.append(block)
    return names, np.concatenate(blocks, axis=1)
