"""Numbers written as text ('$12,500', '45%', '1.234,5 €', '3 years'): read as numbers by their column's
one way of writing them; codes, ordinals, versions, times and mixed units are not numbers."""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd
import pytest

from pipeline import number_text, roles
from pipeline.features import FeatureMaker
from pipeline.schema import FeatureSchema

from tests.unit.test_roles import REAL


def numbers(values: list) -> list:
    fmt = number_text.detect(pd.Series(values))
    assert fmt is not None, values
    return number_text.read(pd.Series(values), fmt)[0].tolist()


def test_written_numbers_are_read_as_written():
    assert numbers(["$14,891", "$106,025.50", "-$5", "($1,000)", "$-7"]) == [14891, 106025.5, -5, -1000, -7]
    assert numbers(["45%", "3.5%", "100%"]) == [45, 3.5, 100]
    assert numbers(["1.234,5 €", "12,5 €", "3 €"]) == [1234.5, 12.5, 3]
    assert numbers(["12 500", "1 000 000", "999"]) == [12500, 1_000_000, 999]
    assert numbers(["3 years", "1 year", "12 years"]) == [3, 1, 12]
    assert numbers(["120 km/h", "80 km/h"]) == [120, 80]
    assert numbers(["1,234", "12,345", "999"]) == [1234, 12345, 999]  # a comma between thousands first
    assert numbers(["1,5", "2,25", "3"]) == [1.5, 2.25, 3]  # only a decimal comma reads '2,25'
    assert numbers(["1.234.567", "2.000"]) == [1234567, 2000]
    assert numbers(["US$1,200", "US$30"]) == [1200, 30]


@pytest.mark.parametrize("values", [
    ["1", "2.5", "3"],  # plain numbers: the file's reader reads them
    ["1st", "2nd", "3rd", "4th"], ["A12", "A13", "B14"], ["1.2.3", "1.2.4"], ["12:30", "13:45"],
    ["02134-1234", "10001-0001"], ["<1 year", "10+ years", "3 years"], ["10 mg", "5 g", "7 mg"],
    ["1,23,4", "5"], ["red", "blue"], ["066", "185", "136A", "120"],
])
def test_codes_ordinals_versions_times_and_mixed_units_are_not_numbers(values):
    assert number_text.detect(pd.Series(values)) is None


def test_a_few_values_written_otherwise_are_missing_and_returned():
    values = pd.Series(["$1,000"] * 19 + ["ask", None])
    assert number_text.detect(values) is None  # the roles' rule: every sampled value
    fmt = number_text.detect(values, number_text.MIN_SHARE)
    read, unread = number_text.read(values, fmt)
    assert read[0] == 1000 and np.isnan(read[-2:]).all() and unread.tolist() == ["ask"]
    assert number_text.read(pd.Series(["1000", "$2,000"]), fmt)[0].tolist() == [1000, 2000]  # no '$': read


def credit_written() -> pd.DataFrame:
    """ISLP's Credit with its money and score columns written as a spreadsheet would."""
    credit = pd.read_csv(REAL / "Credit.csv")
    return credit.assign(Limit=credit["Limit"].map(lambda v: f"${v:,}"),
                         Rating=credit["Rating"].map(lambda v: f"{v} pts"))


def test_roles_call_them_numeric_and_say_so(caplog):
    credit = credit_written()
    found = roles.infer(credit, "Balance", "regression", {})
    assert found.get("Limit").role == found.get("Rating").role == "numeric"
    assert found.get("Limit").reason.startswith("numbers written as text ('$' before, ',' between thousands")
    with caplog.at_level(logging.INFO, logger="pipeline.roles"):
        roles.report(found, "warn")
    said = [r.getMessage() for r in caplog.records if r.name == "pipeline.roles"]
    assert any(m.startswith("read as numbers: 'Limit'") and "'Rating'" in m for m in said)


def test_an_identifier_written_with_separators_stays_an_id():
    credit = credit_written()
    credit["Customer ID"] = [f"{100_000 + 37 * i:,}" for i in range(len(credit))]  # 100,000 and on
    assert roles.infer(credit, "Balance", "regression", {}).get("Customer ID").role == "id"


def test_a_leak_written_as_text_is_flagged():
    credit = credit_written()
    credit["Owed"] = credit["Balance"].map(lambda v: f"${v:,}.00")  # the label itself, written as money
    assert roles.infer(credit, "Balance", "regression", {}).get("Owed").role == "leak"
    credit["Over"] = (credit["Balance"] > 500).map({True: "yes", False: "no"})
    assert roles.infer(credit.drop(columns="Balance"), "Over", "binary", {}).get("Owed").role == "leak"


def test_features_read_them_at_training_and_prediction_alike(caplog):
    credit = credit_written()
    raw = credit.drop(columns="Balance")
    maker = FeatureMaker.fit(raw, roles.infer(credit, "Balance", "regression", {}), np.arange(300))
    made = maker.transform(raw)
    plain = pd.read_csv(REAL / "Credit.csv")
    assert made["Limit"].tolist() == plain["Limit"].tolist()
    assert made["Rating"].tolist() == plain["Rating"].tolist()
    schema = FeatureSchema.of(made.drop(columns=[c for c in made if made[c].dtype == object]), features=maker)
    assert {"Limit", "Rating"} <= schema.input_text and not {"Limit", "Rating"} & schema.input_numeric
    new = raw.iloc[:3].copy()
    new["Limit"] = ["3606", "ask", "$7,075"]  # a plain number, a word, the column's way
    with caplog.at_level(logging.WARNING, logger="pipeline.features"):
        again = maker.transform(new)
    assert again["Limit"].tolist()[0::2] == [3606, 7075] and np.isnan(again["Limit"].iloc[1])
    assert any("column 'Limit': 1 row(s) not written as its numbers are ('ask'" in r.getMessage()
               for r in caplog.records)


def test_missing_marks_in_a_numeric_column_are_missing_values(tmp_path, caplog):
    """A column of numbers with '?' or '-' where a number is missing (as UCI's files and spreadsheets
    write it) is numeric with those rows missing, said; a word that is no missing mark is still refused."""
    from pipeline.config import DataConf
    from pipeline.data import load
    from pipeline.errors import DataError

    read = numbers(["1", "?", "2.5", "-", "N/A", "unknown"])
    assert read[0::2] == [1, 2.5, read[4]] and np.isnan([read[1], read[3], read[4], read[5]]).all()
    assert number_text.detect(pd.Series(["Private", "?", "Self-emp"])) is None  # categories with a '?'
    credit = pd.read_csv(REAL / "Credit.csv")
    credit["Age"] = credit["Age"].astype(object)
    credit.loc[[3, 50, 200], "Age"] = ["?", "-", "?"]
    credit.to_csv(tmp_path / "credit.csv", index=False)
    spec = DataConf(name="csv", path="credit.csv", label="Balance",
                    _target_="pipeline.data_sources.CsvSource")
    with caplog.at_level(logging.INFO, logger="pipeline.roles"):
        data = load(spec, tmp_path)
    assert "Age" in data.numeric and int(np.isnan(data.X["Age"].to_numpy()).sum()) == 3
    said = [r.getMessage() for r in caplog.records]
    assert any("'Age' (numbers written as text ('-', '?' for missing" in m for m in said)
    credit.loc[7, "Age"] = "forty"
    credit.to_csv(tmp_path / "credit.csv", index=False)
    with pytest.raises(DataError, match=r"'Age' is numeric but 1 row\(s\) hold text \('forty'\) among"):
        load(spec, tmp_path)
