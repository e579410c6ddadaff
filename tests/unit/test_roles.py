"""Column roles: the rules on small frames and on the real tables under tests/data/real/, the features
made from dates and text, category text the same at training and prediction, names safe per library."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipeline import roles
from pipeline.errors import ConfigError, DataError
from pipeline.features import FeatureMaker
from pipeline.models.names import LIGHTGBM_REFUSES, safe_names
from pipeline.schema import FeatureSchema, category_text

REAL = Path(__file__).resolve().parents[1] / "data" / "real"


def role_of(frame: pd.DataFrame, column: str, label: str = "y", problem: str = "regression", **kw) -> str:
    return roles.infer(frame, label, problem, kw.pop("overrides", {}), **kw).get(column).role


def frame(n: int = 400, **columns) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    return pd.DataFrame({"x": rng.normal(size=n), "y": rng.normal(size=n), **columns})


def test_ids_by_name_and_by_values():
    n = 400
    assert role_of(frame(customer_id=np.arange(n)), "customer_id") == "id"
    assert role_of(frame(ID=np.arange(n)), "ID") == "id"
    assert role_of(frame(code=[f"K{i:05d}" for i in range(n)]), "code") == "id"  # every value distinct
    assert role_of(frame(count=np.arange(n)), "count") == "numeric"  # whole numbers, not named as an id


def test_a_written_row_index_is_an_id():
    assert role_of(frame(**{"Unnamed: 0": np.arange(1, 401)}), "Unnamed: 0") == "id"


def test_constants_dates_text_and_categories():
    n = 400
    rng = np.random.default_rng(1)
    words = np.array(["red", "old", "car", "fast", "blue", "small", "truck", "new"])
    notes = [" ".join(rng.choice(words, 4)) + f" {i}" for i in range(n)]
    f = frame(region=["Anvers"] * n, day=pd.date_range("2020-01-01", periods=n).strftime("%Y-%m-%d"),
              note=notes, colour=rng.choice(["a", "b", "c"], n))
    assert role_of(f, "region") == "constant"
    assert role_of(f, "day") == "datetime"
    assert role_of(f, "note") == "text"
    assert role_of(f, "colour") == "categorical"
    assert role_of(f, "x") == "numeric"


def test_overrides_win_and_are_checked():
    f = frame(ID=np.arange(400))
    assert role_of(f, "ID", overrides={"ID": "numeric"}) == "numeric"
    with pytest.raises(DataError, match=r"data.column_roles names 'IDD'.*did you mean 'ID'"):
        roles.infer(f, "y", "regression", {"IDD": "numeric"})
    with pytest.raises(ConfigError, match=r"data.column_roles.ID='identifier' is not a role; valid: numeric"):
        roles.check_overrides({"ID": "identifier"}, "warn")
    with pytest.raises(ConfigError, match=r"data.leak_check='maybe'"):
        roles.check_overrides({}, "maybe")


def test_leaks_alone_and_as_a_sum_are_flagged_and_fair_features_are_not():
    rng = np.random.default_rng(3)
    n = 2000
    a, b = rng.poisson(30, n), rng.poisson(100, n)
    noise = rng.normal(size=n)
    f = pd.DataFrame({"casual": a, "registered": b, "temp": noise, "total": a + b,
                      "log_total": np.log(a + b), "fair": a + b + rng.normal(0, 30, n)})
    r = roles.infer(f, "total", "regression", {})
    assert sorted(r.of("leak")) == ["casual", "log_total", "registered"]
    assert r.get("fair").role == "numeric" and r.get("temp").role == "numeric"
    with pytest.raises(DataError, match=r"possible label leak.*data.drop_columns=\[casual,registered,log_total\]"):
        roles.report(r, "error")
    assert roles.infer(f, "total", "regression", {}, leak_check="off").of("leak") == []


def test_a_label_cut_from_a_number_is_flagged_on_a_small_table_and_a_noisy_relative_is_not():
    """A class cut from a column at thresholds (a low birth weight from the weight; a grade from a score)
    errs only at the cuts when each row takes the class of its nearest neighbour in the other fold; the
    quantile bins alone straddled the cuts and missed it under a few hundred rows."""
    rng = np.random.default_rng(5)
    n = 189
    weight = rng.normal(3000, 700, n).round()
    score = rng.uniform(0, 100, n)
    grade = np.select([score < 40, score < 70, score < 90], ["D", "C", "B"], "A")
    f = pd.DataFrame({"bwt": weight, "age": rng.integers(15, 45, n), "low": (weight < 2500).astype(int),
                      "score": score, "grade": grade,
                      "noisy": weight + rng.normal(0, 400, n), "ht": (weight < 2200).astype(int)})
    r = roles.infer(f.drop(columns=["score", "grade"]), "low", "binary", {})
    assert r.of("leak") == ["bwt"]  # not the noisy copy, nor ht (a lower cut: its zeros hold both classes)
    assert r.get("noisy").role == "numeric" and r.get("age").role == "numeric"
    graded = roles.infer(f[["score", "age", "grade"]], "grade", "multiclass", {})
    assert graded.of("leak") == ["score"] and graded.get("age").role == "numeric"


def test_a_class_coded_into_two_columns_is_flagged_and_a_strong_fair_pair_is_not():
    """An answer written as the two bounds of the bid it accepted: neither bound alone holds the class (a
    lower bound of 20 is 'no' below 50 and 'yes' up to 999), the two together do."""
    rng = np.random.default_rng(7)
    n = 1500
    bid = rng.choice([2, 5, 20, 50, 100, 250], n)
    higher = pd.Series(bid).map({2: 5, 5: 20, 20: 50, 50: 100, 100: 250, 250: 500}).to_numpy()
    answer = rng.choice(["nn", "ny", "yy"], n)  # no at the bid; no at the higher bid; yes at both
    lower = np.select([answer == "nn", answer == "ny"], [0, bid], higher)
    upper = np.select([answer == "nn", answer == "ny"], [bid, higher], 999)
    x1, x2 = rng.normal(size=n), rng.normal(size=n)
    f = pd.DataFrame({"lower": lower, "upper": upper, "age": rng.integers(18, 80, n), "x1": x1, "x2": x2,
                      "region": rng.choice(list("abcdef"), n), "answer": answer,
                      "fair": np.where(x1 + x2 + rng.normal(0, 0.3, n) > 0, "high", "low")})
    coded = roles.infer(f.drop(columns="fair"), "answer", "multiclass", {})
    assert sorted(coded.of("leak")) == ["lower", "upper"]
    assert "with 'upper' predicts 'answer'" in coded.get("lower").reason
    fair = roles.infer(f.drop(columns=["lower", "upper", "answer"]), "fair", "binary", {})
    assert fair.of("leak") == []  # x1 and x2 decide it with noise: well over chance, not a leak
    small = roles.infer(f.drop(columns=["lower", "upper", "fair"]).head(120), "answer", "multiclass", {})
    assert small.of("leak") == []  # pairs of chance columns on a small table: sparse cells score no better


@pytest.mark.parametrize("table, label, problem, expected", [
    ("Auto.csv", "mpg", "regression", {"name": "text"}),
    ("penguins-raw.csv", "Body Mass (g)", "regression",
     {"Individual ID": "id", "Date Egg": "datetime", "Region": "constant", "Stage": "constant"}),
    ("NYSE.csv", "log_volume", "regression", {"date": "datetime", "train": "constant"}),  # the first rows: all TRUE
    ("Credit.csv", "Balance", "regression", {"ID": "id"}),
    ("Bikeshare.csv", "bikers", "regression", {"casual": "leak", "registered": "leak", "season": "constant"}),
    ("Wage.csv", "wage", "regression", {"logwage": "leak", "region": "constant"}),
    ("Smarket.csv", "Direction", "binary", {"Today": "leak"}),
])
def test_the_real_tables_columns(table, label, problem, expected):
    r = roles.infer(pd.read_csv(REAL / table), label, problem, {})
    assert {c: r.get(c).role for c in expected} == expected
    unusual = {c.column for c in r.columns if c.role not in ("numeric", "categorical", "label")}
    assert unusual == set(expected)  # nothing else is taken for an id, a date, text, a constant or a leak


def test_the_sample_is_bounded():
    big = pd.DataFrame({"x": np.arange(200_000, dtype=float), "y": np.arange(200_000) % 7})
    assert len(roles.sample_of(big)) == roles.SAMPLE_ROWS
    assert roles.infer(roles.sample_of(big), "y", "multiclass", {}).sample_rows == roles.SAMPLE_ROWS


def test_dates_and_text_become_the_same_features_at_prediction():
    raw = pd.read_csv(REAL / "penguins-raw.csv").drop(columns=["Body Mass (g)"])
    r = roles.infer(pd.read_csv(REAL / "penguins-raw.csv"), "Body Mass (g)", "regression", {})
    maker = FeatureMaker.fit(raw, r, np.arange(250))
    X = maker.transform(raw)
    assert {"Date Egg_year", "Date Egg_month", "Date Egg_day", "Date Egg_weekday"} <= set(X.columns)
    assert not {"Individual ID", "Region", "Stage", "Date Egg"} & set(X.columns)
    again = maker.transform(raw.iloc[[5, 300]].astype({"Date Egg": object}))
    pd.testing.assert_frame_equal(again, X.iloc[[5, 300]])
    auto = pd.read_csv(REAL / "Auto.csv")
    text = FeatureMaker.fit(auto.drop(columns="mpg"), roles.infer(auto, "mpg", "regression", {}), np.arange(300))
    made = text.transform(auto.drop(columns="mpg"))
    assert "name" not in made and 1 <= sum(c.startswith("name_") for c in made) <= 16


def test_category_text_is_the_same_at_training_and_prediction():
    assert category_text(pd.Series([" Male", "Female ", None])).tolist()[:2] == ["Male", "Female"]
    assert category_text(pd.Series([1.0, 2.0])).tolist() == category_text(pd.Series([1, 2])).tolist() == ["1", "2"]
    assert category_text(pd.Series(["1.5", "x.0"])).tolist() == ["1.5", "x.0"]
    training = pd.DataFrame({"Gender": pd.Categorical(category_text(pd.Series([" Male", "Female"])))})
    from pipeline.schema import Tally

    tally = Tally()
    out = FeatureSchema.of(training).apply(pd.DataFrame({"Gender": ["Male", "Female"]}), tally=tally)
    assert tally.unseen == {} and out["Gender"].notna().all()


def test_names_lightgbm_refuses_are_made_safe_and_unique():
    assert safe_names(['a:b', 'a,b', 'c[0]', '{"x"}', "ok"], LIGHTGBM_REFUSES) == [
        "a_b", "a_b_1", "c_0_", "__x__", "ok"]


def test_a_numeric_column_set_to_categorical_is_typed_as_categories(tmp_path):
    from pipeline.config import DataConf
    from pipeline.data import load

    (tmp_path / "oj.csv").write_bytes((REAL / "OJ.csv").read_bytes())
    spec = DataConf(name="csv", path="oj.csv", label="Purchase", column_roles={"StoreID": "categorical"},
                    _target_="pipeline.data_sources.CsvSource")
    data = load(spec, tmp_path)
    assert "StoreID" in data.categorical and list(data.X["StoreID"].cat.categories) == ["1", "2", "3", "4", "7"]


def test_a_column_constant_only_in_the_files_first_rows_stays_a_feature(tmp_path):
    from pipeline.config import DataConf
    from pipeline.data import load, roles_before_reading

    n = 12_000  # the sample before planning is the first 10,000 rows: all 'winter'
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"x": rng.normal(size=n), "season": ["winter"] * 10_000 + ["summer"] * 2_000,
                          "y": rng.normal(size=n)})
    frame.to_csv(tmp_path / "sorted.csv", index=False)
    spec = DataConf(name="csv", path="sorted.csv", label="y", _target_="pipeline.data_sources.CsvSource")
    early = roles_before_reading(spec, tmp_path, "regression")
    assert early.get("season").role == "constant"
    data = load(spec, tmp_path, early)
    assert data.roles.get("season").role == "categorical" and "season" in data.X.columns


def test_a_label_a_category_or_a_texts_first_word_determines_is_flagged_where_out_of_fold_is_blind():
    """Auto's 37 makers on 392 cars: the maker (a category, or the first word of the car's name) determines
    the origin and the maker label, but rare makers leave the out-of-fold score under the bar. Each value
    that repeats holding one class flags it; a chance category in pairs (a coin per row) is not flagged."""
    auto = pd.read_csv(REAL / "Auto.csv")
    make = auto["name"].str.split().str[0]
    by_name = roles.infer(auto.assign(maker=make), "maker", "multiclass", {}).get("name")
    assert by_name.role == "leak" and by_name.reason.startswith("its first word alone determines 'maker'")
    by_make = roles.infer(auto.drop(columns="name").assign(make=make), "origin", "multiclass", {}).get("make")
    assert by_make.role == "leak"
    assert "each of its 29 values seen more than once holds one class" in by_make.reason
    pairs = (np.arange(len(auto)) // 2).astype(str)
    for seed in range(5):
        coin = np.random.default_rng(seed).integers(0, 2, len(auto))
        assert role_of(auto.assign(pairs=pairs, coin=coin), "pairs", "coin", "binary") == "categorical"


def test_the_logged_models_example_input_holds_only_the_columns_a_model_reads(tmp_path):
    """The pyfunc's signature comes from this example: a column the roles leave out (an id, a constant)
    in it made MLflow refuse an input without that column, though no model reads it."""
    from pipeline.config import DataConf
    from pipeline.data import load

    (tmp_path / "penguins.csv").write_bytes((REAL / "penguins-raw.csv").read_bytes())
    spec = DataConf(name="csv", path="penguins.csv", label="Body Mass (g)",
                    _target_="pipeline.data_sources.CsvSource")
    data = load(spec, tmp_path)
    assert list(data.raw_example.columns) == data.features.inputs
    assert not {"Individual ID", "Region", "Stage"} & set(data.raw_example.columns)
    assert "Date Egg" in data.raw_example.columns  # raw, before its date features


def test_a_copy_of_the_label_is_the_only_leak_not_every_column_it_pairs_with():
    rng = np.random.default_rng(0)
    n = 400
    y = rng.normal(1000, 200, n).round(2)
    f = pd.DataFrame({"copy": y, "x": rng.normal(size=n), "z": rng.normal(size=n), "y": y})
    r = roles.infer(f, "y", "regression", {})
    assert r.of("leak") == ["copy"]  # any column with the copy fits the label as a linear combination
    assert r.get("x").role == "numeric" and r.get("z").role == "numeric"


def test_columns_named_like_keyword_arguments_are_read_and_checked():
    """A yes/no column named `self` (a mortgage table's) and amounts written as text under that name: read as
    numbers and scored by the leak check (DataFrame.assign took the names as its keyword arguments)."""
    rng = np.random.default_rng(1)
    n = 400
    y = rng.normal(1000, 200, n).round(2)
    f = pd.DataFrame({"self": [f"${v:,.2f}" for v in y], "x": rng.normal(size=n), "y": y})
    r = roles.infer(f, "y", "regression", {})
    assert r.get("self").role == "leak" and r.get("x").role == "numeric"
