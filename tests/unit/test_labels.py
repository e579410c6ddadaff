"""Label columns of small whole numbers take a counting pass (no hashing of millions of rows); the
classes, codes and problem type are those of the general path."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pipeline import data as td
from pipeline import problem


def general(y: pd.Series) -> tuple[np.ndarray, list]:
    """Classes and codes as the general path makes them (any label values)."""
    classes = sorted(y.unique().tolist(), key=lambda v: (str(type(v)), v))
    return pd.Categorical(y, categories=classes).codes.astype(np.int64), classes


@pytest.mark.parametrize("dtype", ["int64", "int32", "uint8", "int8"])
@pytest.mark.parametrize("values", [[0, 1], [1, 3, 7], [2, 0, 5, 4, 1], [63, 0]], ids=str)
def test_small_whole_labels_encode_as_the_general_path(dtype, values):
    rng = np.random.default_rng(0)
    y = pd.Series(rng.choice(values, 5000), dtype=dtype)
    assert problem.small_whole_values(y) is not None  # the counting pass is taken
    kind = problem.problem_type_of(y, "auto", "t")
    assert kind == ("binary" if len(values) == 2 else "multiclass")
    codes, classes = td._encode_label(y, kind, "t")
    want_codes, want_classes = general(y)
    assert classes == want_classes and all(type(c) is int for c in classes)
    np.testing.assert_array_equal(codes, want_codes)
    assert codes.dtype == np.int64


@pytest.mark.parametrize("y", [
    pd.Series([0, 64, 1] * 10), pd.Series([-1, 0, 1] * 10), pd.Series([0.0, 1.0] * 10),
    pd.Series([0, 1, None] * 10, dtype="Int64"), pd.Series([True, False] * 10), pd.Series(["a", "b"] * 10),
], ids=["past 63", "negative", "float", "nullable", "bool", "text"])
def test_other_labels_take_the_general_path(y):
    assert problem.small_whole_values(y) is None


def test_many_small_whole_values_are_a_regression_target_as_before():
    y = pd.Series(np.arange(5000) % 30)  # 30 distinct whole numbers: more than MAX_CLASSES
    assert problem.small_whole_values(y) is not None
    assert problem.problem_type_of(y, "auto", "t") == "regression"
    with pytest.raises(problem.DataError, match="has 30 distinct values"):
        problem.problem_type_of(y, "binary", "t")


@pytest.mark.parametrize("y, line", [
    (pd.Series(np.arange(5000) % 30), "whole numbers with more than 20 distinct values: a regression target; "
                                      "data.problem_type=multiclass fits them as classes"),
    (pd.Series(np.linspace(0, 1, 50)), "numbers: a regression target"),
    (pd.Series(["yes", "no"] * 5), "two classes: binary"),
    (pd.Series(np.arange(30) % 4), "4 classes: multiclass; data.problem_type=regression fits them as "
                                   "numbers"),
    (pd.Series(["a", "b", "c"] * 4), "3 classes: multiclass"),
], ids=["many whole numbers", "fractions", "two words", "few whole numbers", "words"])
def test_a_problem_type_inferred_from_the_label_is_said_with_the_setting_that_changes_it(y, line):
    problem_type = problem.problem_type_of(y, "auto", "t")
    _, classes = td._encode_label(y, problem_type, "t")
    said = problem.inferred_line(y, problem_type, "t", len(classes or ()))
    assert said.startswith("data.problem_type=auto: label 't' holds ") and said.endswith(line)
    assert "fits them as numbers" not in said or pd.api.types.is_numeric_dtype(y)


def test_rows_whose_label_is_infinite_are_dropped_as_missing_ones_are_and_said(tmp_path, caplog):
    import logging

    from pipeline.config import DataConf

    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"x": rng.normal(size=60), "y": rng.normal(size=60)})
    frame.loc[[3, 7], "y"] = [np.inf, -np.inf]
    frame.loc[11, "y"] = np.nan
    frame.to_csv(tmp_path / "t.csv", index=False)
    spec = DataConf(name="csv", _target_="pipeline.data_sources.CsvSource", path=str(tmp_path / "t.csv"), label="y")
    with caplog.at_level(logging.WARNING, logger="pipeline.data"):
        data = td.load(spec, tmp_path)
    assert len(data.y) == 57 and np.isfinite(data.y).all()
    assert any("dropping 3 rows whose label is missing or infinite (2 infinite)" in r.getMessage()
               for r in caplog.records)
