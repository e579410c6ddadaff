"""Test rows that repeat a training row exactly (pipeline.repeated_rows), said where a column's values
rarely repeat, so that an exact repeat is a copy and not chance."""

import logging

import numpy as np
import pandas as pd

from pipeline import repeated_rows
from pipeline.config import DataConf
from pipeline.data import load
from tests.conftest import ROOT

CREDIT = ROOT / "tests" / "data" / "real" / "Credit.csv"


def _conf(path) -> DataConf:
    return DataConf(name="csv", _target_="pipeline.data_sources.CsvSource", path=str(path), label="Balance")


def test_a_table_concatenated_with_itself_is_said_and_the_table_itself_is_not(tmp_path, caplog):
    frame = pd.read_csv(CREDIT)
    frame.to_csv(tmp_path / "once.csv", index=False)
    pd.concat([frame, frame]).to_csv(tmp_path / "twice.csv", index=False)
    with caplog.at_level(logging.WARNING, logger="pipeline.repeated_rows"):
        load(_conf(tmp_path / "once.csv"), tmp_path)
        assert "repeat a training row" not in caplog.text
        data = load(_conf(tmp_path / "twice.csv"), tmp_path)
    said = " ".join(caplog.text.split())
    twins = pd.util.hash_pandas_object(pd.concat([data.X, pd.Series(data.y, name="y")], axis=1), index=False)
    fit = set(twins.to_numpy()[np.concatenate([data.train_idx, data.val_idx])])
    expected = int(np.isin(twins.to_numpy()[data.test_idx], list(fit)).sum())
    assert expected > 0.5 * len(data.test_idx)  # most test rows' copy landed in training
    assert (f"{expected} of the {len(data.test_idx)} test rows ({100 * expected / len(data.test_idx):.1f}%) "
            "repeat a training row in every column the models read and in the label, though column 'ID' "
            "rarely repeats a value") in said  # each id twice: half distinct, so a feature here


def test_copies_that_differ_only_in_an_id_column_are_copies(tmp_path, caplog):
    """Rows copied with new ids: the id column is no feature (its role), so the rows the models read repeat."""
    frame = pd.read_csv(CREDIT)
    copies = frame.assign(ID=frame["ID"] + len(frame))
    pd.concat([frame, copies]).to_csv(tmp_path / "rekeyed.csv", index=False)
    with caplog.at_level(logging.WARNING, logger="pipeline.repeated_rows"):
        data = load(_conf(tmp_path / "rekeyed.csv"), tmp_path)
    assert "ID" not in data.X.columns
    said = " ".join(caplog.text.split())
    assert "a training row in every column the models read and in the label, though column 'Income'" in said


def test_equal_rows_of_a_table_of_few_values_are_expected_and_not_said():
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"cls": rng.integers(1, 4, 1000), "sex": rng.choice(["m", "f"], 1000),
                          "survived": rng.integers(0, 2, 1000)})  # Titanic's shape: 12 distinct rows
    rows = np.arange(1000)
    assert repeated_rows.repeated(frame, rows[:800], rows[800:]) == (0, "")


def test_past_the_rows_hashed_the_count_is_scaled_from_a_draw(monkeypatch):
    rng = np.random.default_rng(1)
    base = pd.DataFrame({"x": rng.normal(size=4000), "c": rng.integers(0, 3, 4000)})
    frame = pd.concat([base, base.iloc[:1000]], ignore_index=True)  # rows 4000.. copy rows 0..999
    fit, test = np.arange(4000), np.arange(4000, 5000)
    assert repeated_rows.repeated(frame, fit, test) == (1000, "x")
    monkeypatch.setattr(repeated_rows, "MAX_FIT", 2000)
    monkeypatch.setattr(repeated_rows, "MAX_TEST", 500)
    count, column = repeated_rows.repeated(frame, fit, test)
    assert column == "x" and 800 <= count <= 1200 and count != 1000


def test_a_few_repeated_rows_among_many_are_an_info_line_not_a_warning(caplog):
    rng = np.random.default_rng(2)
    base = pd.DataFrame({"x": rng.normal(size=2000)})
    frame = pd.concat([base, base.iloc[:2]], ignore_index=True)  # 2 copies among 402 test rows
    fit, test = np.arange(1600), np.arange(1600, 2002)
    with caplog.at_level(logging.INFO, logger="pipeline.repeated_rows"):
        assert repeated_rows.say(frame, fit, test) == 2
    assert [r.levelname for r in caplog.records] == ["INFO"]


def test_values_pandas_cannot_hash_are_compared_by_their_text():
    rng = np.random.default_rng(3)
    base = pd.DataFrame({"x": rng.normal(size=500), "self": [[1, 2], {"a": 1}] * 250})  # Parquet lists, JSON
    frame = pd.concat([base, base.iloc[:50]], ignore_index=True)
    assert repeated_rows.repeated(frame, np.arange(500), np.arange(500, 550)) == (50, "x")
