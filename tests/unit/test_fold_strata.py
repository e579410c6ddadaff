"""A bag's folds are stratified by class whatever the classes' sizes: a class with fewer rows than folds
spreads one row a fold, and every class's rows differ by at most one between folds."""

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
