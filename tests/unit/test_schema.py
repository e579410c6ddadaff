"""The training schema applied to new data: typed errors naming the column, the unseen-category rule."""

import warnings

import numpy as np
import pandas as pd
import pytest

from pipeline.errors import DataError
from pipeline.schema import FeatureSchema, category_text, encode


def schema(unseen="missing") -> FeatureSchema:
    X = pd.DataFrame({"age": np.float32([30, 40]), "city": pd.Categorical(["Oslo", "Rome"]),
                      "member": pd.Categorical(["False", "True"])})
    return FeatureSchema.of(X, {"age": "int64"}, "income", unseen)


def test_input_is_typed_as_the_training_rows():
    out = schema().apply(pd.DataFrame({"city": ["Rome", None], "age": ["41", 7], "member": [True, False],
                                       "extra": [1, 2]}))
    assert list(out.columns) == ["age", "city", "member"]
    assert out["age"].dtype == np.float32 and out["age"].tolist() == [41.0, 7.0]
    assert out["city"].cat.codes.tolist() == [1, -1]
    assert out["member"].tolist() == ["True", "False"]


def test_a_misspelt_column_is_named_with_the_input_column_that_looks_like_it():
    with pytest.raises(DataError, match=r"lacks the column 'age' \(the input has 'agee': misspelt\?\)"):
        schema().apply(pd.DataFrame({"agee": [1], "city": ["Oslo"], "member": [True]}))


def test_a_value_that_is_not_a_number_names_the_column_and_the_value():
    with pytest.raises(DataError, match=r"column 'age' .* not numbers \('forty'\)"):
        schema().apply(pd.DataFrame({"age": [3, "forty"], "city": ["Oslo", "Oslo"], "member": [True, True]}))


def test_unseen_categories_and_infinite_numbers_are_missing_values_and_counted_over_chunks(caplog):
    from pipeline.schema import Tally

    tally = Tally()
    chunks = ({"age": [1, float("inf")], "city": ["Paris", "Oslo"]},
              {"age": [-float("inf"), 3], "city": ["Lima", "Oslo"]})
    for chunk in chunks:
        out = schema().apply(pd.DataFrame({**chunk, "member": [True, True]}), tally=tally)
        assert out["city"].isna().tolist() == [True, False] and out["age"].isna().sum() == 1
    assert not caplog.records  # nothing said per chunk
    assert tally.unseen == {"city": (2, ["Lima", "Paris"])} and tally.infinite == {"age": 2}
    tally.say("data.path='new.csv'")
    said = caplog.text
    assert "column 'city': 2 row(s) hold categories never seen in training ('Lima', 'Paris')" in said
    assert ("data.path='new.csv': infinite values (or numbers beyond float32's range) in 'age' (2 row(s))"
            in said)


def test_unseen_categories_are_an_error_when_training_said_so():
    with pytest.raises(DataError, match=r"column 'city' .*'Paris'.*data.unseen_categories=error"):
        schema("error").apply(pd.DataFrame({"age": [1], "city": ["Paris"], "member": [True]}))


COLUMNS = {
    "text with missing values": ["b", None, "a", "c", "a", None, "d"],
    "mixed objects": [1, "x", 2, None, "x", 1, 3],
    "booleans": [True, False, True, True, False, False, True],
    "categorical": pd.Categorical(["u", "w", "v", "u", "w", "v", "z"]),
    "accents and spaces": ["é", "e", " e", "É", "e", "é", "ê"],
}


@pytest.mark.parametrize("name", list(COLUMNS))
def test_encoding_keeps_pandas_codes_and_turns_unseen_values_missing_without_a_deprecation(name):
    # The first five rows name the categories, the last two may hold values outside them. pandas
    # warns that building a Categorical from such values will raise in a later version: encode must not.
    text = category_text(pd.Series(COLUMNS[name]))
    categories = sorted({str(v) for v in text.iloc[:5].dropna()})
    expected = [categories.index(str(v)) if v is not pd.NA and str(v) in categories else -1 for v in text]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        typed = encode(text, categories)
    assert list(typed.codes) == expected
    assert list(typed.categories) == categories
