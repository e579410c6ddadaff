"""Using what a run trained: batch prediction from the CLI, refit on all the data, the best model
served by `mlflow models serve`, the registry alias, and the run's dataset inputs."""

from __future__ import annotations

import json
import os
import pickle
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.conftest import ROOT, free_port, run_cli, stop_process_group
from tests.integration.mlflow_helpers import job_runs

pytestmark = pytest.mark.slow

ADULT = ROOT / "pipeline" / "datasets" / "adult.parquet"
FAST = ["data.max_rows=3000", "model.lightgbm.params.num_iterations=60"]


def predict_cli(*args, cwd: Path, timeout=300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "pipeline.predict", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def run_dir_of(proc: subprocess.CompletedProcess) -> Path:
    line = next(l for l in proc.stdout.splitlines() if "run directory" in l)
    return Path(line.rsplit("run directory", 1)[1].strip())


@pytest.fixture(scope="module")
def bagged(tmp_path_factory):
    """LightGBM bagged over 5 folds, refit on all the data."""
    root = tmp_path_factory.mktemp("bagged")
    proc = run_cli(["model=lightgbm", "parallelism=bag5", "refit=true", *FAST], root, check=True)
    return root, run_dir_of(proc)


@pytest.fixture(scope="module")
def registered(tmp_path_factory):
    """LightGBM and XGBoost, their ensemble registered as adult_clf@champion."""
    root = tmp_path_factory.mktemp("registered")
    proc = run_cli(["model=[lightgbm,xgboost]", "tracking.register_model=adult_clf", *FAST,
                    "model.xgboost.params.num_boost_round=60"], root, check=True)
    return root, run_dir_of(proc), proc


def test_refit_scores_like_the_bag_and_predicts_with_a_fifth_of_its_trees(bagged):
    """Faster prediction, counted rather than timed: the refit predicts with one model of the bag's
    mean best iteration, where the bag predicts with five models of their best iterations each."""
    _, run_dir = bagged
    board = pd.read_csv(run_dir / "leaderboard.csv").set_index("model")
    bag, refit = board.loc["lightgbm"], board.loc["lightgbm_refit"]
    assert refit["num_folds"] == 1 and bag["num_folds"] == 5
    assert np.isnan(refit["val_roc_auc"])  # it learnt from the validation rows
    assert abs(refit["test_roc_auc"] - bag["test_roc_auc"]) < 0.02
    assert refit["predict_rows_per_s"] > 0 and bag["predict_rows_per_s"] > 0  # both rates are reported
    fitted = pickle.loads((run_dir / "predictors" / "lightgbm.pkl").read_bytes()).models
    refitted = pickle.loads((run_dir / "predictors" / "lightgbm_refit.pkl").read_bytes()).models
    assert len(fitted) == 5 and len(refitted) == 1
    bag_trees = sum(m.best_iteration_ for m in fitted)
    refit_trees = refitted[0].booster_.current_iteration()
    assert refit_trees == round(np.mean([m.best_iteration_ for m in fitted]))
    assert 0 < refit_trees and 4 * refit_trees <= bag_trees


def test_the_refit_is_a_fit_of_the_plan_that_ran_and_a_node_that_assembles_it(bagged):
    import json

    _, run_dir = bagged
    tasks = {t["id"]: t for t in json.loads((run_dir / "plan.json").read_text())["tasks"]}
    tail = {i: (t["kind"], t["depends_on"]) for i, t in tasks.items() if t["kind"] not in ("fit", "bag")}
    assert tail == {"ensemble": ("ensemble", ["bag/lightgbm/t0"]),
                    "refit": ("refit", ["ensemble", "fit/lightgbm/l1/refit"]),
                    "evaluate": ("evaluate", ["ensemble", "refit"])}
    fit = tasks["fit/lightgbm/l1/refit"]
    assert (fit["kind"], fit["depends_on"], fit["fold_set"]) == ("fit", ["bag/lightgbm/t0"], [])
    timeline = {e["task"]: e for e in json.loads((run_dir / "timeline.json").read_text())}
    assert timeline["fit/lightgbm/l1/refit"]["num_cpus"] == fit["num_cpus"]  # admitted as planned


def test_batch_prediction_in_chunks_matches_in_memory_prediction(bagged, tmp_path):
    root, run_dir = bagged
    rows = pd.read_parquet(ADULT).sample(100_000, replace=True, random_state=0).reset_index(drop=True)
    rows.insert(0, "customer", np.arange(100_000) * 7)
    rows.to_csv(tmp_path / "new.csv", index=False)
    proc = predict_cli(f"source={run_dir}", "data=csv", f"data.path={tmp_path / 'new.csv'}", "chunk_rows=30000",
                       "id_column=customer", f"output={tmp_path / 'scores.parquet'}", cwd=root)
    assert proc.returncode == 0, proc.stderr
    assert "100,000 rows scored by lightgbm" in proc.stdout
    scores = pd.read_parquet(tmp_path / "scores.parquet")
    predictor = pickle.loads((run_dir / "predictors" / "lightgbm.pkl").read_bytes())
    expected = predictor.predict_proba(pd.read_csv(tmp_path / "new.csv"))
    assert list(scores.columns) == ["customer", "income", "proba_<=50K", "proba_>50K"]
    assert scores["customer"].tolist() == rows["customer"].tolist()
    np.testing.assert_allclose(scores[["proba_<=50K", "proba_>50K"]].to_numpy(), expected, rtol=1e-6, atol=1e-9)
    at_threshold = (expected[:, 1] >= predictor.threshold).astype(int)  # chosen on out-of-fold predictions
    assert 0 < predictor.threshold < 1
    assert (scores["income"].to_numpy() == np.asarray(predictor.classes, dtype=object)[at_threshold]).all()


def _bad_inputs(tmp: Path) -> dict:
    rows = pd.read_parquet(ADULT).head(200)
    rows.rename(columns={"age": "agee"}).to_csv(tmp / "misspelt.csv", index=False)
    wrong = rows.astype({"hours-per-week": object})
    wrong.loc[150, "hours-per-week"] = "forty"
    wrong.to_csv(tmp / "wrong_type.csv", index=False)
    (tmp / "empty.csv").write_text("")
    return {
        "misspelt": (["data=csv", f"data.path={tmp / 'misspelt.csv'}"],
                     "lacks the column 'age' (the input has 'agee': misspelt?)"),
        "wrong_type": (["data=csv", f"data.path={tmp / 'wrong_type.csv'}"],
                       "column 'hours-per-week' of data.path="),
        "empty": (["data=csv", f"data.path={tmp / 'empty.csv'}"], "empty.csv' is empty"),
        "unknown_run": (["source=0123456789abcdef0123456789abcdef"], "no MLflow run has this id"),
    }


@pytest.mark.parametrize("case", ["misspelt", "wrong_type", "empty", "unknown_run"])
def test_bad_inputs_exit_with_one_clear_message(bagged, tmp_path, case):
    root, run_dir = bagged
    args, message = _bad_inputs(tmp_path)[case]
    args = args if args[0].startswith("source=") else [f"source={run_dir}", *args]
    proc = predict_cli(*args, f"output={tmp_path / 'out.csv'}", cwd=root)
    assert proc.returncode == 2
    errors = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and errors[0].startswith("error: ") and message in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "out.csv").exists()


def test_the_ensembles_rows_per_second_are_its_members_test_predictions_in_turn(registered):
    # Each rate is the test rows over the seconds the run took to score them; the ensemble scores with
    # its members of nonzero weight, so its seconds are theirs added up (no separate timing passes to disagree).
    import json

    _, run_dir, _ = registered
    board = pd.read_csv(run_dir / "leaderboard.csv").set_index("model")
    rate = board["predict_rows_per_s"]
    assert (rate > 0).all()
    used = [m for m, w in json.loads(board.loc["ensemble", "params"]).items() if w > 0]
    assert 1 / rate["ensemble"] == pytest.approx(sum(1 / rate[m] for m in used), rel=1e-9)


def test_the_registered_best_model_predicts_from_the_cli(registered, tmp_path):
    root, run_dir, proc = registered
    assert "registered ensemble as models:/adult_clf@champion (version 1)" in proc.stdout
    out = tmp_path / "scores.csv"
    rows = pd.read_parquet(ADULT).drop(columns=["income"]).tail(500)
    rows.to_parquet(tmp_path / "new.parquet")
    scored = predict_cli("source=models:/adult_clf@champion", "data=parquet", f"data.path={tmp_path / 'new.parquet'}",
                         f"output={out}", cwd=root)
    assert scored.returncode == 0, scored.stderr
    assert "rows scored by ensemble" in scored.stdout
    via_registry = pd.read_csv(out)
    expected = pickle.loads((run_dir / "predictors" / "ensemble.pkl").read_bytes()).predict_proba(rows)
    np.testing.assert_allclose(via_registry[["proba_<=50K", "proba_>50K"]].to_numpy(), expected, rtol=1e-6)


def test_each_run_logs_its_three_datasets(registered, bagged):
    (root, _, _), (other_root, _) = registered, bagged
    _, (run,) = job_runs(root)
    inputs = {[t.value for t in d.tags if t.key == "mlflow.data.context"][0]: d for d in run.inputs.dataset_inputs}
    assert sorted(inputs) == ["test", "training", "validation"]
    for d in inputs.values():
        assert d.dataset.name == "adult" and d.dataset.source_type == "local"
        assert json.loads(d.dataset.source)["uri"].endswith("adult.parquet")
        columns = [c["name"] for c in json.loads(d.dataset.schema)["mlflow_colspec"]]
        assert columns[0] == "age" and columns[-1] == "income"
    assert len({d.dataset.digest for d in inputs.values()}) == 3
    _, (other,) = job_runs(other_root)  # another run on the same data and split: the same digests
    assert {d.dataset.digest for d in other.inputs.dataset_inputs} == {d.dataset.digest for d in inputs.values()}


class ModelServer:
    """`mlflow models serve --env-manager local` on 127.0.0.1, in its own process group."""

    def __init__(self, model_uri: str, tracking_uri: str, log: Path):
        self.port = free_port()
        # The server starts `uvicorn` from PATH: this interpreter's environment comes first.
        path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
        env = {**os.environ, "MLFLOW_TRACKING_URI": tracking_uri, "PATH": path}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mlflow", "models", "serve", "-m", model_uri, "--env-manager", "local",
             "-h", "127.0.0.1", "-p", str(self.port), "-w", "1"],
            env=env, stdout=open(log, "wb"), stderr=subprocess.STDOUT, start_new_session=True,
        )
        self.log = log

    def wait(self, timeout: float = 120) -> "ModelServer":
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(self.log.read_text()[-3000:])
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/ping", timeout=2):
                    return self
            except OSError:
                time.sleep(0.5)
        raise AssertionError("mlflow models serve did not answer /ping in time:\n" + self.log.read_text()[-3000:])

    def invoke(self, frame: pd.DataFrame, params=None):
        body = {"dataframe_split": json.loads(frame.to_json(orient="split", index=False))}
        if params:
            body["params"] = params
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}/invocations", json.dumps(body).encode(),
                                         {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read())["predictions"]

    def stop(self) -> None:
        stop_process_group(self.proc)


def test_the_served_best_model_answers_as_the_loaded_one(registered, tmp_path):
    import mlflow

    root, _, _ = registered
    client, (run,) = job_runs(root)
    uri = run.data.tags["best/model_uri"]
    tracking_uri = f"sqlite:///{root / 'outputs' / 'mlflow.db'}"
    mlflow.set_tracking_uri(tracking_uri)
    model = mlflow.pyfunc.load_model(uri)
    rows = pd.read_parquet(ADULT).drop(columns=["income"]).dropna().sample(50, random_state=1)
    labels = model.predict(rows)
    proba = model.predict(rows, params={"predict_method": "predict_proba"})
    assert list(proba.columns) == ["<=50K", ">50K"]
    threshold = model.unwrap_python_model().predictor.threshold  # chosen on out-of-fold predictions
    assert 0 < threshold < 1
    assert (np.asarray(labels) == np.where(proba[">50K"] >= threshold, ">50K", "<=50K")).all()
    folder = Path(mlflow.artifacts.download_artifacts(uri))
    requirements = (folder / "requirements.txt").read_text().split()
    assert all(re.fullmatch(r"[a-z0-9_-]+==[0-9][0-9.]*", r) for r in requirements), requirements  # pinned, public
    names = {r.split("==")[0] for r in requirements}
    assert {"lightgbm", "xgboost", "mlflow"} <= names and "tabular-pipeline" not in names  # no index holds the engine
    assert "torch" not in names  # no network in this ensemble
    assert (folder / "code" / "pipeline" / "ensemble.py").exists()  # the engine's code ships with the model
    server = ModelServer(uri, tracking_uri, tmp_path / "serve.log")
    try:
        server.wait()
        served_labels = server.invoke(rows)
        served_proba = pd.DataFrame(server.invoke(rows, {"predict_method": "predict_proba"}))
    finally:
        server.stop()
    assert served_labels == list(labels)
    np.testing.assert_allclose(served_proba[["<=50K", ">50K"]].to_numpy(), proba.to_numpy(), rtol=1e-6)


@pytest.mark.gpu
def test_prediction_on_a_gpu_matches_the_cpu(tmp_path):
    """+hardware=1gpu moves XGBoost's booster and the network to the GPU; the scores stay the same."""
    proc = run_cli(["model=[xgboost,nn]", "data.max_rows=3000", "model.xgboost.params.num_boost_round=60",
                    "model.nn.params.max_epochs=2", "tracking=none"], tmp_path, check=True)
    run_dir = run_dir_of(proc)
    pd.read_parquet(ADULT).head(5000).to_parquet(tmp_path / "new.parquet")
    scores = {}
    for hardware in ("cpu", "1gpu"):
        out = tmp_path / f"{hardware}.csv"
        done = predict_cli(f"source={run_dir}", "data=parquet", f"data.path={tmp_path / 'new.parquet'}",
                           f"+hardware={hardware}", f"output={out}", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert ("on cuda:0" in done.stdout) == (hardware == "1gpu")
        scores[hardware] = pd.read_csv(out)
    np.testing.assert_allclose(scores["1gpu"].filter(like="proba_").to_numpy(),
                               scores["cpu"].filter(like="proba_").to_numpy(), rtol=1e-4, atol=1e-5)
