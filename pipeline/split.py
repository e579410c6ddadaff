"""Seeded train/validation/test splits and k-fold assignments, stratified by class (folds of a number to
predict: by its rank), in numpy.

Each class's rows are shuffled with one seeded generator and cut in proportion; a class's share
of the held-out rows is its exact fraction rounded by largest remainder (ties to the earlier
class), so the sizes add up and the same seed always gives the same rows.
"""

from __future__ import annotations

import logging
import math
from typing import Optional, Union

import numpy as np

log = logging.getLogger(__name__)


def holdout(rows: np.ndarray, size: float, seed: Union[int, tuple[int, ...]], labels: Optional[np.ndarray] = None):
    """Split `rows` into (kept, held out), holding out ceil(size x len(rows)) rows; stratified when
    `labels` (one per row) are given. Both parts are returned sorted."""
    rows = np.asarray(rows)
    n_held = math.ceil(size * len(rows))
    rng = np.random.default_rng(seed)
    if labels is None:
        return _parts(rows, rng.permutation(len(rows))[:n_held])
    groups = _groups(np.asarray(labels))
    quotas = _largest_remainder([len(g) for g in groups], n_held)
    held = [group[rng.permutation(len(group))[:quota]] for group, quota in zip(groups, quotas)]
    return _parts(rows, np.concatenate(held))


def _parts(rows: np.ndarray, held: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(kept, held) rows, each sorted, from the positions `held` of `rows`: by a mask over the positions
    where `rows` is ascending (as the splits' rows are), so no sort of millions of rows is needed."""
    mask = np.zeros(len(rows), dtype=bool)
    mask[held] = True
    kept, held_rows = rows[~mask], rows[mask]
    if len(rows) > 1 and not bool(np.all(rows[1:] >= rows[:-1])):
        kept, held_rows = np.sort(kept), np.sort(held_rows)
    return kept, held_rows


def folds(n_rows: int, num_folds: int, seed: int, labels: Optional[np.ndarray] = None) -> np.ndarray:
    """The fold (0..num_folds-1) of each of n_rows rows: shuffled, and stratified when `labels` are
    given. Rows are dealt round-robin, each class continuing where the previous one stopped, so
    fold sizes differ by at most one and each class spreads evenly over the folds."""
    rng = np.random.default_rng(seed)
    out = np.empty(n_rows, dtype=np.int32)
    groups = [np.arange(n_rows)] if labels is None else _groups(np.asarray(labels))
    start = 0
    for group in groups:
        shuffled = group[rng.permutation(len(group))]
        out[shuffled] = (start + np.arange(len(group))) % num_folds
        start = (start + len(group)) % num_folds
    return out


def fold_scheme(problem_type: str) -> str:
    """How a bag's folds deal rows: by class, or by the rank of the number to predict."""
    return "by_rank" if problem_type == "regression" else "by_class"


def fold_ids(labels: np.ndarray, num_folds: int, seed: int, problem_type: str) -> np.ndarray:
    """The fold of each row of a bag, from the rows' labels (`fold_scheme`)."""
    if fold_scheme(problem_type) == "by_rank":
        return folds_by_rank(labels, num_folds, seed)
    # rows are dealt to folds class by class: a class with fewer rows than folds spreads one a fold
    return folds(len(labels), num_folds, seed, labels)


def folds_by_rank(values: np.ndarray, num_folds: int, seed: int) -> np.ndarray:
    """The fold (0..num_folds-1) of each row for a number to predict: the rows sorted by it (ties in a
    random order) and each run of num_folds neighbours dealt one to a fold, in a random order. Every fold
    then holds its share of the low, middle and extreme values: a fold without any of the few largest
    would stop its models early on rows unlike the other folds' and score them on rows unlike the table.
    Fold sizes differ by at most one."""
    rng = np.random.default_rng(seed)
    values = np.asarray(values)
    n = len(values)
    shuffled = rng.permutation(n)
    order = shuffled[np.argsort(values[shuffled])]  # the shuffle puts tied values in a random order
    runs = -(-n // num_folds)
    deals = np.argsort(rng.random((runs, num_folds)), axis=1).astype(np.int32)
    out = np.empty(n, dtype=np.int32)
    out[order] = deals.ravel()[:n]
    return out


SMALL_CODES = 64  # classes coded 0..63 are grouped by a pass per class, not by sorting the rows


def drawn(num_rows: int, at_most: int) -> Optional[np.ndarray]:
    """Sorted positions of `at_most` of `num_rows` rows drawn without replacement (seed 0: the same rows
    on every call), or None where there are no more than that: what keeps a score's or a selection's cost
    flat on a large table."""
    if num_rows <= at_most:
        return None
    return np.sort(np.random.default_rng(0).choice(num_rows, at_most, replace=False))


def small_counts(labels: np.ndarray) -> Optional[np.ndarray]:
    """How many rows hold each of 0..max when the labels are whole numbers from 0 to SMALL_CODES - 1
    (counted in one pass, no hashing or sort); None for any other labels."""
    if not isinstance(labels, np.ndarray) or labels.dtype.kind not in "iub" or not len(labels):
        return None
    low, high = labels.min(), labels.max()
    if low < 0 or high >= SMALL_CODES:
        return None
    return np.bincount(labels, minlength=int(high) + 1)


def _groups(labels: np.ndarray) -> list[np.ndarray]:
    """Row positions of each class, classes in sorted order, positions ascending. Labels that are small
    whole numbers (the engine's encoded classes) take a pass per class; others a sort."""
    counts = small_counts(labels)
    if counts is not None:
        return [np.flatnonzero(labels == c) for c in np.flatnonzero(counts)]
    _, inverse = np.unique(labels, return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    bounds = np.cumsum(np.bincount(inverse))[:-1]
    return np.split(order, bounds)


def _largest_remainder(counts: list[int], total: int) -> list[int]:
    """Integers proportional to counts that add up to total."""
    n = sum(counts)
    exact = [c * total / n for c in counts]
    quotas = [math.floor(e) for e in exact]
    by_remainder = sorted(range(len(counts)), key=lambda i: (-(exact[i] - quotas[i]), i))
    for i in by_remainder[: total - sum(quotas)]:
        quotas[i] += 1
    return quotas


def say_parts(frame, y: np.ndarray, problem_type: str, parts: tuple, spec, roles=None) -> None:
    """What the split's parts (training, validation and test rows) hold that the scores depend on: a part of
    one class (`say_one_class`), test rows that repeat training rows in the columns the models read and the
    label (pipeline.repeated_rows; `roles`: the columns' roles, whose ids and constants are left out)."""
    from pipeline import repeated_rows
    from pipeline.roles import LEFT_OUT

    train, val, test = parts
    say_one_class(y, problem_type, {"validation": val, "test": test}, spec.split)
    unread = {c.column for c in (roles.columns if roles else ()) if c.role in LEFT_OUT}
    read = [c for c in frame.columns if c not in unread]
    repeated_rows.say(frame, np.concatenate([train, val]), test, spec.seed or 0, read)


def say_one_class(y: np.ndarray, problem_type: str, parts: dict, how: str) -> None:
    """A warning for each part of a classification split (name -> its rows) that holds one class: ROC AUC is
    undefined on it, NaN on the board. A random split stratifies the classes, so it happens where a class
    has a row or two, or where the time split's latest rows share one class."""
    if problem_type == "regression":
        return
    for name, rows in parts.items():
        if len(rows) and len(np.unique(y[rows])) < 2:
            if how == "time":
                why = "data.split=time: the " + ("latest rows" if name == "test" else "rows before the test")
            else:
                why = "a class too rare to reach every part" + (" (or a test file of one class)"
                                                                 if name == "test" else "")
            log.warning("the %s rows (%d, %s) hold one class of the label: roc_auc is undefined on them (NaN "
                        "on the board), and the other scores read one class", name, len(rows), why)
