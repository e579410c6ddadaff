"""Real tables through the CLI and `pipeline.predict`: ids, dates, free text, constants, leaks, a written row
index, names LightGBM refuses, categories written differently at prediction, a rare class, time order.
The tables are small real CSVs under tests/data/real/ (see its README for where they come from)."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.conftest import ROOT, run_cli, small

REAL = ROOT / "tests" / "data" / "real"


def fast(model: str) -> list[str]:
    return [f"model={model}", "tracking=none", *small((model,))]


def run_dir_of(proc) -> Path:
    return Path(proc.stdout.rsplit("run directory ", 1)[1].split()[0])


def leaderboard(run_dir: Path) -> dict:
    with open(run_dir / "leaderboard.csv", newline="") as fh:
        return {r["model"]: r for r in csv.DictReader(fh)}


def predict(cwd: Path, run_dir: Path, data: Path, output: str = "pred.csv",
            *extra: str) -> tuple[subprocess.CompletedProcess, Path]:
    proc = subprocess.run([sys.executable, "-m", "pipeline.predict", f"source={run_dir}", f"data.path={data}",
                           f"output={output}", *extra], cwd=cwd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc, cwd / output


@pytest.fixture(scope="session")
def tables(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("real")
    for path in REAL.glob("*.csv"):
        shutil.copy(path, folder / path.name)
    return folder


@pytest.fixture(scope="session")
def auto(tables):
    """Auto's car names (a 254-level category before): a text column; data.path alone picks the CSV source."""
    proc = run_cli(["data.path=Auto.csv", "data.label=mpg", *fast("xgboost")], tables, check=True)
    return proc, run_dir_of(proc)


@pytest.fixture(scope="session")
def penguins(tables):
    proc = run_cli(["data.path=penguins-raw.csv", "data.label='Body Mass (g)'", *fast("lightgbm")], tables,
                   check=True)
    return proc, run_dir_of(proc)


def test_tracking_none_creates_no_store(auto, tables):
    """The runs in `tables` all say tracking=none: a finished run, its leaderboard, and no MLflow store."""
    _, run_dir = auto
    assert (run_dir / "leaderboard.csv").exists()
    assert not (tables / "outputs" / "mlflow.db").exists() and not (tables / "mlruns").exists()
    assert not list(tables.rglob("mlflow.db")) and not (tables / "outputs" / "mlartifacts").exists()


def test_a_csv_path_without_data_csv_trains_and_names_text_as_text(auto):
    proc, run_dir = auto
    assert "read as data=csv (from its extension)" in proc.stdout + proc.stderr
    assert "text: 1 (name)" in proc.stdout
    assert float(leaderboard(run_dir)["xgboost"]["test_r2"]) >= 0.75  # 0.32 with name as a 254-level category


def test_schema_json_lists_every_column_with_its_role_and_reason(auto, tables):
    _, run_dir = auto
    schema = json.loads((run_dir / "schema.json").read_text())
    header = next(csv.reader(open(tables / "Auto.csv")))
    assert [c["column"] for c in schema["columns"]] == header
    assert {c["column"]: c["role"] for c in schema["columns"]}["name"] == "text"
    assert all(c["reason"] for c in schema["columns"])
    assert any(f.startswith("name_") for f in schema["features"])


def test_prediction_makes_the_same_text_features_from_the_raw_file(auto, tables):
    _, run_dir = auto
    _, out = predict(tables, run_dir, tables / "Auto.csv", "auto_pred.csv")
    pred = pd.read_csv(out)
    truth = pd.read_csv(tables / "Auto.csv")["mpg"]
    assert len(pred) == len(truth) and pred["mpg"].corr(truth) > 0.9


def test_ids_dates_and_constants_are_handled_and_said(penguins, tables):
    proc, run_dir = penguins
    log = proc.stdout + proc.stderr
    assert "left out of the features: 'Region' (constant" in log and "'Individual ID' (id" in log
    assert "+data.column_roles={" in log  # the override that keeps one
    assert "data.split=time data.time_column='Date Egg'" in log  # the note: dates, and a random split
    features = json.loads((run_dir / "schema.json").read_text())["features"]
    assert "Date Egg_year" in features and "Date Egg_weekday" in features
    assert not {"Individual ID", "Region", "Stage", "Date Egg"} & set(features)
    assert float(leaderboard(run_dir)["lightgbm"]["test_r2"]) >= 0.75
    new = pd.read_csv(tables / "penguins-raw.csv").drop(columns=["Body Mass (g)", "Region", "Stage"]).head(20)
    new.to_csv(tables / "penguins-new.csv", index=False)  # the left-out columns are not needed to predict
    _, out = predict(tables, run_dir, tables / "penguins-new.csv", "penguins_pred.csv")
    assert pd.read_csv(out)["Body Mass (g)"].between(2500, 6500).all()


@pytest.mark.parametrize("table, label, leaks", [
    ("Bikeshare.csv", "bikers", "casual,registered"),
    ("Wage.csv", "wage", "logwage"),
    ("Smarket.csv", "Direction", "Today"),
])
def test_leaks_are_named_before_any_fit_with_the_fix(tables, table, label, leaks):
    proc = run_cli([f"data.path={table}", f"data.label={label}", "data.leak_check=error", *fast("lightgbm")],
                   tables)
    assert proc.returncode != 0
    err = " ".join(proc.stderr.split())
    assert "possible label leak" in err and f"data.drop_columns=[{leaks}]" in err
    assert "Traceback" not in proc.stderr and "Leaderboard" not in proc.stdout and "Plan:" not in proc.stdout


def test_categories_written_differently_at_prediction_are_the_same_categories(tables):
    """Credit's ' Male' (training) is 'Male' at prediction; OJ's StoreID 1 is 1.0; a new one is an example."""
    proc = run_cli(["data.path=OJ.csv", "data.label=Purchase", "data.categorical_columns=[StoreID]",
                    *fast("lightgbm")], tables, check=True)
    run_dir = run_dir_of(proc)
    new = pd.read_csv(tables / "OJ.csv").drop(columns=["Purchase"]).head(40)
    new["StoreID"] = new["StoreID"].astype(float)
    new.loc[0, "StoreID"] = 99.0
    new.to_csv(tables / "OJ-new.csv", index=False)
    result, _ = predict(tables, run_dir, tables / "OJ-new.csv", "oj_pred.csv")
    assert "column 'StoreID': 1 row(s) hold categories never seen in training ('99')" in result.stdout + result.stderr
    credit = run_cli(["data.path=Credit.csv", "data.label=Balance", *fast("lightgbm")], tables, check=True)
    assert "'ID' (id: named like an identifier" in credit.stdout + credit.stderr
    new = pd.read_csv(tables / "Credit.csv").drop(columns=["Balance"]).head(50)
    new["Gender"] = new["Gender"].str.strip()
    new.to_csv(tables / "Credit-new.csv", index=False)
    result, _ = predict(tables, run_dir_of(credit), tables / "Credit-new.csv", "credit_pred.csv")
    assert "never seen in training" not in result.stdout + result.stderr


def test_a_written_row_index_and_names_lightgbm_refuses(tables):
    frame = pd.read_csv(tables / "Auto.csv").rename(columns={"weight": 'weight: "lbs", [x]', "year": "year{yy}"})
    frame.to_csv(tables / "Auto-indexed.csv")  # pandas writes its row index first, unnamed
    proc = run_cli(["data.path=Auto-indexed.csv", "data.label=mpg", *fast("lightgbm")], tables, check=True)
    run_dir = run_dir_of(proc)
    roles = {c["column"]: c["role"] for c in json.loads((run_dir / "schema.json").read_text())["columns"]}
    assert roles["Unnamed: 0"] == "id" and roles['weight: "lbs", [x]'] == "numeric"
    assert float(leaderboard(run_dir)["lightgbm"]["test_r2"]) >= 0.75
    _, out = predict(tables, run_dir, tables / "Auto-indexed.csv", "indexed_pred.csv")
    assert len(pd.read_csv(out)) == len(frame)


def test_time_split_trains_on_the_past(tables):
    from pipeline.config import DataConf
    from pipeline.data import load

    spec = DataConf(name="csv", path="NYSE.csv", label="log_volume", split="time", time_column="date",
                    _target_="pipeline.data_sources.CsvSource")
    data = load(spec, tables)
    dates = pd.to_datetime(pd.read_csv(tables / "NYSE.csv")["date"])
    assert dates.iloc[data.train_idx].max() < dates.iloc[data.val_idx].min()
    assert dates.iloc[data.val_idx].max() < dates.iloc[data.test_idx].min()


def test_a_rare_class_gets_a_threshold_stated_in_the_leaderboard(tables):
    frame = pd.read_csv(tables / "Smarket.csv").drop(columns=["Today"])
    frame["Direction"] = (frame["Lag1"] > 1.6).map({True: "Big", False: "Other"})  # about 7% positive
    frame.to_csv(tables / "rare.csv", index=False)
    proc = run_cli(["data.path=rare.csv", "data.label=Direction", *fast("lightgbm")], tables, check=True)
    row = leaderboard(run_dir_of(proc))["lightgbm"]
    assert row["threshold_metric"] == "balanced_accuracy" and 0 < float(row["threshold"]) < 1
    assert "decision threshold, chosen for balanced_accuracy" in " ".join(proc.stdout.split())


def test_class_weights_are_said_and_a_regression_label_refuses_them_before_any_fit(tables):
    frame = pd.read_csv(tables / "Smarket.csv").drop(columns=["Today"])
    frame["Direction"] = (frame["Lag1"] > 1.6).map({True: "Big", False: "Other"})  # about 7% positive
    frame.to_csv(tables / "rare_weighted.csv", index=False)
    proc = run_cli(["data.path=rare_weighted.csv", "data.label=Direction", "data.class_weight=balanced",
                    *fast("lightgbm")], tables, check=True)
    said = " ".join(proc.stdout.split())
    assert "class weights: balanced (each training row weighs n_rows / (n_classes × rows of its class)" in said
    assert "class weights on the training split: Big " in said
    proc = run_cli(["data.path=Auto.csv", "data.label=mpg", "data.class_weight=balanced", *fast("xgboost")], tables)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    said = " ".join((proc.stdout + proc.stderr).split())
    assert "data.class_weight=balanced weighs the classes of a classification label" in said
    assert "valid for regression: data.class_weight=none" in said and "Leaderboard" not in said


def test_numbers_written_as_text_train_and_predict_as_the_plain_numbers(tables):
    """Credit's money and score columns written as a spreadsheet would ('$3,606', '283 pts'): read as the
    numbers, said, the same test score as the plain table's, and predictions from the written rows."""
    plain = pd.read_csv(tables / "Credit.csv")
    written = plain.assign(Limit=plain["Limit"].map(lambda v: f"${v:,}"),
                           Rating=plain["Rating"].map(lambda v: f"{v} pts"))
    written.to_csv(tables / "credit_written.csv", index=False)
    runs = {name: run_cli([f"data.path={name}.csv", "data.label=Balance", *fast("lightgbm")], tables,
                          check=True)
            for name in ("Credit", "credit_written")}
    log = runs["credit_written"].stdout + runs["credit_written"].stderr
    assert "read as numbers: 'Limit' (numbers written as text ('$' before, ',' between thousands" in log
    schema = json.loads((run_dir_of(runs["credit_written"]) / "schema.json").read_text())
    assert {c["column"]: c["role"] for c in schema["columns"]}["Rating"] == "numeric"
    assert {"Limit", "Rating"} <= set(schema["features"])
    boards = {name: leaderboard(run_dir_of(proc)) for name, proc in runs.items()}
    assert boards["credit_written"]["lightgbm"]["test_rmse"] == boards["Credit"]["lightgbm"]["test_rmse"]
    _, out = predict(tables, run_dir_of(runs["credit_written"]), tables / "credit_written.csv", "written.csv")
    _, again = predict(tables, run_dir_of(runs["credit_written"]), tables / "Credit.csv", "from_plain.csv")
    assert pd.read_csv(out)["Balance"].tolist() == pd.read_csv(again)["Balance"].tolist()


def test_infinite_values_train_and_predict_as_missing_values_and_are_said(tables):
    """A ratio over a count that is sometimes 0 ('Limit per card' with Cards 0): XGBoost refused the whole
    table before; the infinite values are missing values at training and at prediction, said with counts."""
    frame = pd.read_csv(tables / "Credit.csv")
    frame.loc[frame.index[::25], "Cards"] = 0
    frame["LimitPerCard"] = frame["Limit"] / frame["Cards"]  # inf where Cards is 0
    frame.loc[frame.index[1], "Income"] = float("-inf")
    frame.to_csv(tables / "credit_inf.csv", index=False)
    infinite = int(frame["LimitPerCard"].isin([float("inf")]).sum())
    proc = run_cli(["data.path=credit_inf.csv", "data.label=Balance", *fast("xgboost")], tables, check=True)
    said = " ".join((proc.stdout + proc.stderr).split())
    assert (f"the table: infinite values (or numbers beyond float32's range) in 'Income' (1 row(s)), "
            f"'LimitPerCard' ({infinite} row(s)) read as missing values") in said
    assert float(leaderboard(run_dir_of(proc))["xgboost"]["test_rmse"]) < 200  # the label's std is about 460
    # read in chunks of 50 rows (8 chunks, most holding inf): said once, the counts added up over the chunks
    result, out = predict(tables, run_dir_of(proc), tables / "credit_inf.csv", "credit_inf_pred.csv",
                          "chunk_rows=50")
    said = " ".join((result.stdout + result.stderr).split())
    assert said.count("infinite values (or numbers beyond float32's range)") == 1, said
    assert (f"infinite values (or numbers beyond float32's range) in 'Income' (1 row(s)), 'LimitPerCard' "
            f"({infinite} row(s)) read as missing values") in said
    predictions = pd.read_csv(out)["Balance"]
    assert len(predictions) == len(frame) and predictions.notna().all()


@pytest.mark.wall_clock
def test_a_class_of_three_rows_under_a_time_budget_ends_with_a_leaderboard(tables):
    """Three of Smarket's 1,250 days 'Big': two of a bag's five folds hold none of them, where ROC AUC is
    undefined; the search read each fold's score and the run failed. Those folds now judge nothing."""
    frame = pd.read_csv(tables / "Smarket.csv").drop(columns=["Today"])
    frame["Direction"] = "Other"
    frame.loc[frame["Lag1"].nlargest(3).index, "Direction"] = "Big"
    frame.to_csv(tables / "three_big.csv", index=False)
    proc = run_cli(["data.path=three_big.csv", "data.label=Direction", "model=lightgbm", "tracking=none",
                    "time_limit_s=8"], tables)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "lightgbm" in leaderboard(run_dir_of(proc))


def test_test_rows_of_one_class_under_the_time_split_are_said_and_score_nan(tables):
    """The latest quarter of the days all 'Up': the test rows hold one class. The board shows ROC AUC as NaN
    (the leaderboard's printing failed on it) and the run says why, before any fit."""
    frame = pd.read_csv(tables / "Smarket.csv").drop(columns=["Today"])
    frame["day"] = pd.date_range("2001-01-01", periods=len(frame), freq="D").astype(str)
    frame.loc[frame.index[-len(frame) // 4:], "Direction"] = "Up"
    frame.to_csv(tables / "latest_up.csv", index=False)
    proc = run_cli(["data.path=latest_up.csv", "data.label=Direction", "data.split=time", "data.time_column=day",
                    *fast("lightgbm")], tables)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    said = " ".join((proc.stdout + proc.stderr).split())
    assert "the test rows (250, data.split=time: the latest rows) hold one class of the label" in said
    assert said.index("hold one class") < said.index("Leaderboard")
    row = leaderboard(run_dir_of(proc))["lightgbm"]
    assert row["test_roc_auc"] in ("", "nan") and float(row["test_accuracy"]) >= 0
    assert "predicts 'Up' for all" not in said  # predicting the test rows' one class is no failure to learn


def test_a_european_spreadsheets_csv_trains_and_predicts_as_the_plain_one(tables):
    """Credit saved as a spreadsheet in much of Europe saves it: Windows-1252 text (an accented category),
    ';' between fields, decimal commas. It failed on its first accented byte; read as UTF-8 and commas it
    would be one column. Now the same test score as the plain table, and predictions from the same file."""
    plain = pd.read_csv(tables / "Credit.csv")
    plain["Ethnicity"] = plain["Ethnicity"].replace({"Caucasian": "Européen"})
    plain.to_csv(tables / "credit_e.csv", index=False)
    plain.to_csv(tables / "credit_eu.csv", sep=";", decimal=",", encoding="cp1252", index=False)
    runs = {name: run_cli([f"data.path={name}.csv", "data.label=Balance", *fast("lightgbm")], tables, check=True)
            for name in ("credit_e", "credit_eu")}
    said = " ".join((runs["credit_eu"].stdout + runs["credit_eu"].stderr).split())
    assert "credit_eu.csv: read as CSV separated by ';' and encoded as cp1252" in said
    boards = {name: leaderboard(run_dir_of(proc)) for name, proc in runs.items()}
    assert boards["credit_eu"]["lightgbm"]["test_rmse"] == boards["credit_e"]["lightgbm"]["test_rmse"]
    _, out = predict(tables, run_dir_of(runs["credit_eu"]), tables / "credit_eu.csv", "eu_pred.csv")
    _, again = predict(tables, run_dir_of(runs["credit_e"]), tables / "credit_e.csv", "e_pred.csv")
    assert np.allclose(pd.read_csv(out)["Balance"], pd.read_csv(again)["Balance"])


def test_validation_rows_of_one_class_choose_by_log_loss_and_say_so(tables):
    """Two of Smarket's 1,250 days 'Big', neither among the validation rows: ROC AUC ranked no model there,
    and the run failed building its ensemble ('every model is NaN'). Now it chooses by log loss, said."""
    frame = pd.read_csv(tables / "Smarket.csv").drop(columns=["Today"])
    frame["Direction"] = "Other"
    frame.loc[frame["Lag1"].nlargest(2).index, "Direction"] = "Big"
    frame.to_csv(tables / "two_big.csv", index=False)
    proc = run_cli(["data.path=two_big.csv", "data.label=Direction", *fast("lightgbm"), "model=all",
                    *small(("xgboost", "nn"))], tables)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    said = " ".join((proc.stdout + proc.stderr).split())
    assert "eval_metric roc_auc is undefined on the 200 validation rows (they hold one class)" in said
    assert "Leaderboard (log_loss)" in said and "ensemble" in leaderboard(run_dir_of(proc))
