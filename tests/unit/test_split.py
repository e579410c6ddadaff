"""The seeded numpy split and folds: sizes, disjointness, stratification, determinism."""

import numpy as np
import pytest

from pipeline import split


def _labels(n=1000, seed=0):
    return np.random.default_rng(seed).choice([0, 1, 2], size=n, p=[0.7, 0.2, 0.1])


def test_holdout_sizes_and_disjoint_parts():
    rows = np.arange(1000)
    kept, held = split.holdout(rows, 0.2, 0, _labels())
    assert len(held) == 200 and len(kept) == 800
    assert np.array_equal(np.sort(np.concatenate([kept, held])), rows)
    assert np.all(np.diff(kept) > 0) and np.all(np.diff(held) > 0)


def test_holdout_rounds_up_like_a_fraction_of_rows():
    kept, held = split.holdout(np.arange(11), 0.25, 3)
    assert len(held) == 3 and len(kept) == 8


def test_holdout_keeps_each_class_share():
    y = _labels()
    _, held = split.holdout(np.arange(len(y)), 0.2, 0, y)
    for c in (0, 1, 2):
        assert abs(np.mean(y[held] == c) - np.mean(y == c)) < 0.005


def test_holdout_is_seeded():
    y = _labels()
    a = split.holdout(np.arange(1000), 0.2, 7, y)
    b = split.holdout(np.arange(1000), 0.2, 7, y)
    c = split.holdout(np.arange(1000), 0.2, 8, y)
    assert all(np.array_equal(x, z) for x, z in zip(a, b))
    assert not np.array_equal(a[1], c[1])


def test_holdout_returns_the_given_row_ids():
    rows = np.arange(100, 300)
    kept, held = split.holdout(rows, 0.5, 0, np.arange(200) % 2)
    assert set(kept) | set(held) == set(rows)


@pytest.mark.parametrize("labels", [None, "classes"])
def test_folds_balanced_and_seeded(labels):
    y = _labels(1003) if labels else None
    f = split.folds(1003, 5, 1, y)
    sizes = np.bincount(f, minlength=5)
    assert sizes.max() - sizes.min() <= 1 and sizes.sum() == 1003
    assert np.array_equal(f, split.folds(1003, 5, 1, y))
    assert not np.array_equal(f, split.folds(1003, 5, 2, y))
    if y is not None:
        for c in (0, 1, 2):
            per_fold = np.bincount(f[y == c], minlength=5)
            assert per_fold.max() - per_fold.min() <= 1


def test_folds_by_rank_deal_each_run_of_sorted_neighbours_one_to_a_fold():
    y = np.random.default_rng(3).lognormal(sigma=2.0, size=1003)
    f = split.folds_by_rank(y, 5, 1)
    sizes = np.bincount(f, minlength=5)
    assert sizes.max() - sizes.min() <= 1 and sizes.sum() == 1003
    runs = f[np.argsort(y, kind="stable")][:1000].reshape(-1, 5)
    assert all(len(set(run)) == 5 for run in runs)  # the five largest values too: one a fold
    assert np.array_equal(f, split.folds_by_rank(y, 5, 1))
    assert not np.array_equal(f, split.folds_by_rank(y, 5, 2))


def test_folds_by_rank_spread_tied_values_at_random():
    f = split.folds_by_rank(np.zeros(1000), 4, 0)
    assert np.array_equal(np.bincount(f), [250] * 4)
    assert not np.array_equal(f, np.arange(1000) % 4)


def test_largest_remainder_adds_up():
    assert split._largest_remainder([7, 2, 1], 3) == [2, 1, 0]
    assert sum(split._largest_remainder([5, 5, 5], 7)) == 7


def _sorted_holdout(rows, size, seed, labels=None):
    """The split's definition, by sorting: each class's positions (classes and positions ascending)
    shuffled by one seeded generator, the first quota held out, both parts sorted."""
    import math

    from pipeline.split import _largest_remainder

    rows, rng = np.asarray(rows), np.random.default_rng(seed)
    n_held = math.ceil(size * len(rows))
    if labels is None:
        order = rows[rng.permutation(len(rows))]
        return np.sort(order[n_held:]), np.sort(order[:n_held])
    classes = np.unique(labels)
    groups = [np.flatnonzero(labels == c) for c in classes]
    quotas = _largest_remainder([len(g) for g in groups], n_held)
    kept, held = [], []
    for group, quota in zip(groups, quotas):
        shuffled = rows[group[rng.permutation(len(group))]]
        held.append(shuffled[:quota])
        kept.append(shuffled[quota:])
    return np.sort(np.concatenate(kept)), np.sort(np.concatenate(held))


@pytest.mark.parametrize("labels_kind", ["codes", "bool", "negative", "many", "text", "none"])
@pytest.mark.parametrize("rows_kind", ["ascending", "shuffled"])
def test_holdout_gives_the_rows_of_its_definition_for_every_kind_of_label(labels_kind, rows_kind):
    """Grouping encoded classes by a pass per class, and splitting ascending rows by a mask, pick the
    same rows as sorting does: the same seed gives the same split as before, and as the plain scripts'."""
    rng = np.random.default_rng(7)
    for trial in range(40):
        n = int(rng.integers(1, 300))
        labels = {"codes": rng.integers(0, 3, n), "bool": rng.integers(0, 2, n).astype(bool),
                  "negative": rng.integers(-2, 3, n), "many": rng.integers(0, 200, n),
                  "text": rng.choice(np.array(["a", "b", "c"]), n), "none": None}[labels_kind]
        rows = np.sort(rng.choice(10 * n, n, replace=False)) if rows_kind == "ascending" else rng.permutation(n) + 5
        got, want = split.holdout(rows, 0.2, (trial, 1), labels), _sorted_holdout(rows, 0.2, (trial, 1), labels)
        assert all(np.array_equal(g, w) for g, w in zip(got, want)), trial
