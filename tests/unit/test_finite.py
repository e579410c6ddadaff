"""Infinite numbers in a feature are missing values at training and at prediction, said per column."""

import logging

import numpy as np
import pandas as pd

from pipeline.schema import CHUNK_ROWS, FeatureSchema, finite


def test_infinite_values_become_missing_and_each_column_is_named_with_its_count(caplog):
    block = np.array([[1.0, np.inf], [-np.inf, 2.0], [3.0, np.inf], [np.nan, 4.0]], dtype=np.float32)
    with caplog.at_level(logging.WARNING, logger="pipeline.schema"):
        out = finite(block, ["a", "b"], "the table")
    assert np.isnan(out[[1, 3], 0]).all() and np.isnan(out[[0, 2], 1]).all()
    assert out[0, 0] == 1.0 and out[3, 1] == 4.0
    assert np.isinf(block).sum() == 3  # the caller's array is left as it was
    (message,) = [r.getMessage() for r in caplog.records]
    assert "'a' (1 row(s)), 'b' (2 row(s)) read as missing values" in message


def test_a_finite_block_is_returned_as_it_is_and_nothing_is_said(caplog):
    block = np.arange(12, dtype=np.float32).reshape(6, 2)
    with caplog.at_level(logging.WARNING, logger="pipeline.schema"):
        assert finite(block, ["a", "b"], "the table") is block
    assert not caplog.records


def test_an_infinite_value_past_the_first_chunk_of_rows_is_found():
    column = np.zeros(CHUNK_ROWS + 5, dtype=np.float32)
    column[-1] = np.inf
    assert np.isnan(finite(column, ["a"], "x")[-1])


def test_new_rows_with_infinite_or_too_large_numbers_predict_from_missing_values(caplog):
    train = pd.DataFrame({"a": np.array([1.0, 2.0], dtype=np.float32)})
    schema = FeatureSchema.of(train, {"a": "float32"}, "y")
    with caplog.at_level(logging.WARNING, logger="pipeline.schema"):
        typed = schema.apply(pd.DataFrame({"a": [np.inf, 1e300, 5.0]}), "new.csv")
    assert np.isnan(typed["a"].to_numpy()[:2]).all() and typed["a"].iloc[2] == 5.0
    assert any("new.csv: infinite values" in r.getMessage() and "'a' (2 row(s))" in r.getMessage()
               for r in caplog.records)
