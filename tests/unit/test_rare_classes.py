"""The line naming the classes a bag's fold models (or every model) cannot learn, and when it is said."""

import logging

import numpy as np
import pandas as pd

from pipeline.config import DataConf
from pipeline.data import load
from pipeline.rare_classes import rare_classes_line, say_rare_classes


def test_classes_under_the_fold_count_are_named_with_their_rows():
    y = np.array([0] * 40 + [1] * 3 + [2] * 1)
    line = rare_classes_line(y, ["common", "few", "single", "absent"], 5)
    assert line.startswith("class(es) 'few' (3 rows), 'single' (1 row), 'absent' (0 rows) of 4 have fewer "
                           "training rows than the 5 folds of a bag")
    assert rare_classes_line(y, ["common", "few", "single"], 3) == (
        "class(es) 'single' (1 row) of 3 have fewer training rows than the 3 folds of a bag: a fold model "
        "whose training part lacks one never predicts it; merge such classes or drop their rows to learn "
        "them, or give them more rows")
    assert rare_classes_line(y, ["common", "few", "single"], 1) is None  # a holdout: each has a row
    assert "'absent' (0 rows) of 4 have no training row" in rare_classes_line(y, ["common", "few", "single",
                                                                                   "absent"], 1)
    many = rare_classes_line(np.arange(8), [f"c{i}" for i in range(8)], 5)
    assert "'c4' (1 row) and 3 more of 8" in many


def test_a_table_with_a_rare_class_says_it_once_loaded(tmp_path, caplog):
    rng = np.random.default_rng(0)
    label = ["a"] * 60 + ["b"] * 50 + ["rare"] * 3
    path = tmp_path / "t.csv"
    pd.DataFrame({"x": rng.normal(size=len(label)), "y": label}).to_csv(path, index=False)
    data = load(DataConf(name="csv", _target_="pipeline.data_sources.CsvSource", path=str(path), label="y"),
                tmp_path)
    with caplog.at_level(logging.WARNING, logger="pipeline.rare_classes"):
        say_rare_classes(data, 5)
        say_rare_classes(data, 1)  # the holdout: 'rare' has a training row
    said = [r.getMessage() for r in caplog.records if r.name == "pipeline.rare_classes"]
    assert len(said) == 1 and said[0].startswith("class(es) 'rare' (")
