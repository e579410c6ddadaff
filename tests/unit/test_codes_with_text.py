"""A CSV column of numbers with a few text values: a column of category codes when its numbers are few
distinct values (the text is one more level), dirty numbers (a typed error) when they are many."""

import logging

import numpy as np
import pandas as pd
import pytest

from pipeline.config import DataConf
from pipeline.data import load
from pipeline.errors import DataError
from pipeline.schema import FeatureSchema


def _table(tmp_path, column):
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"x": rng.normal(size=len(column)), "col": column,
                          "y": rng.normal(size=len(column))})
    path = tmp_path / "table.csv"
    frame.to_csv(path, index=False)
    return DataConf(name="csv", _target_="pipeline.data_sources.CsvSource", path=str(path), label="y")


def test_few_numbers_and_a_text_value_are_read_as_categories_and_said(tmp_path, caplog):
    cylinders = (["4", "6", "8", "5", "3"] * 4 + ["rotary"]) * 5
    with caplog.at_level(logging.INFO, logger="pipeline.data"):
        data = load(_table(tmp_path, cylinders), tmp_path)
    assert "col" in data.categorical and "col" not in data.numeric
    assert sorted(data.X["col"].cat.categories) == ["3", "4", "5", "6", "8", "rotary"]
    said = [r.getMessage() for r in caplog.records if "'col'" in r.getMessage()]
    assert said and "5 distinct numbers and 5 row(s) of text ('rotary')" in said[0]
    assert "read as categories" in said[0]

    # new rows whose column holds only numbers (read by pandas as integers) get the training's levels
    schema = FeatureSchema.of(data.X, data.raw_dtypes, "y")
    typed = schema.apply(pd.DataFrame({"x": [0.0, 1.0, 2.0], "col": [4, 8, 7]}))
    assert typed["col"].astype(object).tolist()[:2] == ["4", "8"] and pd.isna(typed["col"].iloc[2])


def test_many_numbers_and_a_text_value_are_dirty_numbers_named_in_the_error(tmp_path):
    ages = [str(a) for a in range(18, 78)] * 2 + ["forty"]
    with pytest.raises(DataError, match=r"column 'col' is numeric but 1 row\(s\) hold text \('forty'\) among "
                                        r"60 distinct numbers"):
        load(_table(tmp_path, ages), tmp_path)


def test_many_whole_numbers_and_a_few_codes_are_read_as_categories_and_said(tmp_path, caplog):
    """Stations, families, plots: numbered mostly, a few codes mixing letters and digits ('136A', 'c168')."""
    stations = [str(s) for s in range(100, 160)] * 2 + ["136A", "c168", "B-12"]
    with caplog.at_level(logging.INFO, logger="pipeline.data"):
        data = load(_table(tmp_path, stations), tmp_path)
    assert "col" in data.categorical and "col" not in data.numeric
    said = [r.getMessage() for r in caplog.records if "'col'" in r.getMessage()]
    assert said and "60 distinct whole numbers and 3 row(s) of codes mixing letters and digits" in said[0]


@pytest.mark.parametrize("dirt", ["forty", "12 kg", "n a"])
def test_words_or_spaced_values_among_many_numbers_stay_an_error(tmp_path, dirt):
    stations = [str(s) for s in range(100, 160)] * 2 + ["136A", dirt]
    with pytest.raises(DataError, match="is numeric but 2 row"):
        load(_table(tmp_path, stations), tmp_path)


def test_codes_beside_numbers_with_fractions_are_dirt(tmp_path):
    amounts = [f"{a / 10:.1f}" for a in range(100, 160)] * 2 + ["136A"]
    with pytest.raises(DataError, match=r"hold text \('136A'\)"):
        load(_table(tmp_path, amounts), tmp_path)
