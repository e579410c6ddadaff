"""A bag's folds are stratified by class whatever the classes' sizes: a class with fewer rows than folds
spreads one row a fold, and every class's rows differ by at most one between folds. A number to predict
is stratified by its rank: every fold holds its share of the largest values."""

import numpy as np
import pandas as pd

from pipeline.config import DataConf
from pipeline.data import load


def test_every_class_spreads_evenly_over_the_folds_even_one_smaller_than_the_fold_count(tmp_path):
    rng = np.random.default_rng(1)
    label = ["a"] * 120 + ["b"] * 75 + ["c"] * 5
    path = tmp_path / "table.csv"
    pd.DataFrame({"x": rng.normal(size=len(label)), "y": label}).to_csv(path, index=False)
    data = load(DataConf(name="csv", _target_="pipeline.data_sources.CsvSource", path=str(path), label="y",
                         test_size=0.2), tmp_path)
    y = data.y[data.fit_idx(True)]
    assert np.bincount(y).min() < 5  # the rare class has fewer fit rows than folds
    folds = data.fold_ids(5, seed=0)
    for c in np.unique(y):
        per_fold = np.bincount(folds[y == c], minlength=5)
        assert per_fold.max() - per_fold.min() <= 1, (c, per_fold)


def test_a_number_to_predict_spreads_its_largest_values_over_the_folds(tmp_path):
    rng = np.random.default_rng(2)
    y = rng.lognormal(sigma=2.0, size=400)  # a few values far above the rest
    path = tmp_path / "table.csv"
    pd.DataFrame({"x": rng.normal(size=len(y)), "y": y}).to_csv(path, index=False)
    data = load(DataConf(name="csv", _target_="pipeline.data_sources.CsvSource", path=str(path), label="y",
                         test_size=0.2, problem_type="regression"), tmp_path)
    fit_y = data.y[data.fit_idx(True)]
    folds = data.fold_ids(5, seed=0)
    by_value = folds[np.argsort(fit_y)]
    assert all(len(set(by_value[i:i + 5])) == 5 for i in range(0, len(by_value) - 4, 5))
    top = np.argsort(fit_y)[-20:]
    assert np.array_equal(np.bincount(folds[top], minlength=5), [4] * 5)
