"""Test rows that repeat a training row exactly: scored as unseen rows, they are rows the models learnt.

A table concatenated with itself, or one whose rows were copied before export, puts a row and its copy on
both sides of a random split, and the test score then reads memory rather than generalisation. Where the
table's columns take few values (a handful of categories, small counts) equal rows are expected and say
nothing; where a column's values rarely repeat (a measurement, an amount), an exact repeat is a copy. The
check hashes the columns the models read (a copy given a new id is a copy: the caller leaves ids out) and
the label (`pandas.util.hash_pandas_object`), of at most `MAX_FIT` training rows and `MAX_TEST` test rows
drawn at random, and scales the count to the whole test split (a copy is found where its twin was drawn:
the count over the share of training rows drawn). Only the rows drawn are copied, never the table."""

from __future__ import annotations

import logging
from typing import Optional

import numpy as np
import pandas as pd

from pipeline.frames import with_columns

log = logging.getLogger(__name__)

MAX_FIT, MAX_TEST = 200_000, 50_000  # rows hashed (drawn with replacement past them): 0.1 s whatever the rows
DISTINCT = 0.5  # a number column whose values are this share distinct or more: its equal values are rare
SAMPLE = 10_000  # rows read to find such a column
WARN_SHARE, WARN_ROWS = 0.01, 3  # a warning from this share of the test rows and this many rows (else the
# log's info line: Adult holds 13 such rows among 9,768 test rows, diamonds 53 among 10,788)


def repeated(frame: pd.DataFrame, fit_rows: np.ndarray, test_rows: np.ndarray, seed: int = 0,
             columns: Optional[list] = None) -> tuple[int, str]:
    """(About how many of `test_rows` repeat one of `fit_rows` in every column of `frame` (or of `columns`),
    a number column whose values rarely repeat, or ''): 0 where the table has no such column (equal rows
    are expected)."""
    where = slice(None) if columns is None else frame.columns.get_indexer(columns)
    rows_of = lambda rows: frame.iloc[rows, where]  # noqa: E731 - rows and columns taken in one copy
    column = _rarely_repeating(rows_of(fit_rows[:SAMPLE]))
    if not column or not len(test_rows) or not len(fit_rows):
        return 0, column
    rng = np.random.default_rng(seed)
    fit = fit_rows[rng.integers(0, len(fit_rows), MAX_FIT)] if len(fit_rows) > MAX_FIT else fit_rows
    test = test_rows[rng.integers(0, len(test_rows), MAX_TEST)] if len(test_rows) > MAX_TEST else test_rows
    hits = np.isin(_hashes(rows_of(test)), _hashes(rows_of(fit)))
    scale = (len(test_rows) / len(test)) * (len(fit_rows) / len(np.unique(fit)))
    return int(round(hits.sum() * scale)), column


def say(frame: pd.DataFrame, fit_rows: np.ndarray, test_rows: np.ndarray, seed: int = 0,
        columns: Optional[list] = None) -> int:
    """Said where test rows repeat training rows exactly (in `columns`, else every column) though a column's
    values rarely repeat (a warning from WARN_SHARE of the test rows); the count (0 where none, or where
    equal rows are expected)."""
    count, column = repeated(frame, fit_rows, test_rows, seed, columns)
    if count:
        about = "about " if len(fit_rows) > MAX_FIT or len(test_rows) > MAX_TEST else ""
        level = logging.WARNING if count >= max(WARN_ROWS, WARN_SHARE * len(test_rows)) else logging.INFO
        log.log(level,
            "%s%d of the %d test rows (%.1f%%) repeat a training row in every column the models read and in "
            "the label, though column %r rarely repeats a value: the table holds copied rows, and the test "
            "scores read those rows as rows the models learnt (frame.drop_duplicates() before training scores "
            "unseen rows only)",
            about, count, len(test_rows), 100 * count / len(test_rows), column)
    return count


def _hashes(rows: pd.DataFrame) -> np.ndarray:
    """One hash per row; values pandas cannot hash (a Parquet list or a JSON object) by their text."""
    try:
        return pd.util.hash_pandas_object(rows, index=False).to_numpy()
    except TypeError:
        text = {c: rows[c].astype(str) for c in rows.columns if rows[c].dtype == object}
        return pd.util.hash_pandas_object(with_columns(rows, text), index=False).to_numpy()


def _rarely_repeating(sample: pd.DataFrame) -> str:
    """The first number column of the sample whose non-missing values are at least DISTINCT distinct."""
    for name in sample.columns:
        values = sample[name]
        if pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values):
            present = values.dropna()
            if len(present) >= 20 and present.nunique() >= DISTINCT * len(present):
                return str(name)
    return ""
