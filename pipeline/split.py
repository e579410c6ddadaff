"""Seeded train/validation/test splits and k-fold assignments, stratified by class, in numpy.

Each class's rows are shuffled with one seeded generator and cut in proportion; a class's share
of the held-out rows is its exact fraction rounded by largest remainder (ties to the earlier
class), so the sizes add up and the same seed always gives the same rows.
"""

from __future__ import annotations

import math
from typing import Optional, Union

import numpy as np


def holdout(rows: np.ndarray, size: float, seed: Union[int, tuple[int, ...]], labels: Optional[np.ndarray] = None):
    """Split `rows` into (kept, held out), holding out ceil(size x len(rows)) rows; stratified when
    `labels` (one per row) are given. Both parts are returned sorted."""
    rows = np.asarray(rows)
    n_held = math.ceil(size * len(rows))
    rng = np.random.default_rng(seed)
    if labels is None:
        order = rows[rng.permutation(len(rows))]
        return np.sort(order[n_held:]), np.sort(order[:n_held])
    groups = _groups(np.asarray(labels))
    quotas = _largest_remainder([len(g) for g in groups], n_held)
    kept, held = [], []
    for group, quota in zip(groups, quotas):
        shuffled = rows[group[rng.permutation(len(group))]]
        held.append(shuffled[:quota])
        kept.append(shuffled[quota:])
    return np.sort(np.concatenate(kept)), np.sort(np.concatenate(held))


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


def _groups(labels: np.ndarray) -> list[np.ndarray]:
    """Row positions of each class, classes in sorted order, positions ascending."""
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
