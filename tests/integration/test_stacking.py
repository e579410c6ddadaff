"""Stacking levels end to end: a sweep over stack_levels through the CLI, with MLflow tracking; every
level in the plan, the timeline, the leaderboard and MLflow; the saved stacked predictors predict
on raw input what the run scored."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.conftest import ROOT, run_cli
from tests.integration.mlflow_helpers import job_runs

pytestmark = pytest.mark.slow

FAST = ["model=[lightgbm,xgboost]", "parallelism.num_folds=3", "data.max_rows=1500", "refit=true",
        "model.lightgbm.params.num_iterations=20", "model.xgboost.params.num_boost_round=20"]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """`-m stack_levels=0,1`: {stack_levels: run directory}, and the working directory."""
    root = tmp_path_factory.mktemp("stacking")
    run_cli(["-m", "stack_levels=0,1", *FAST], root, check=True, timeout=400)
    jobs = {}
    for run_dir in sorted((root / "outputs" / "multirun").glob("*/*/[0-9]*")):
        overrides = (run_dir / ".hydra" / "overrides.yaml").read_text()
        jobs[1 if "stack_levels=1" in overrides else 0] = run_dir
    return jobs, root


def test_every_level_shows_in_the_leaderboard_and_the_ensemble_is_over_the_last(sweep):
    jobs, _ = sweep
    flat = pd.read_csv(jobs[0] / "leaderboard.csv").set_index("model")
    assert dict(flat["level"]) == {"lightgbm": 1, "xgboost": 1, "ensemble": 2, "lightgbm_refit": 1,
                                   "xgboost_refit": 1, "ensemble_refit": 2}
    board = pd.read_csv(jobs[1] / "leaderboard.csv").set_index("model")
    assert dict(board["level"]) == {"lightgbm": 1, "xgboost": 1, "lightgbm_l2": 2, "xgboost_l2": 2, "ensemble": 3,
                                    "lightgbm_refit": 1, "xgboost_refit": 1, "lightgbm_l2_refit": 2,
                                    "xgboost_l2_refit": 2, "ensemble_refit": 3}
    assert set(json.loads(board.loc["ensemble", "params"])) == {"lightgbm_l2", "xgboost_l2"}
    # level 1 is the same fits in both jobs
    assert board.loc["lightgbm", "test_roc_auc"] == pytest.approx(flat.loc["lightgbm", "test_roc_auc"], abs=1e-12)


def test_the_stacked_ensembles_rows_per_second_count_each_lower_level_once(sweep):
    # a level-2 bag predicts level 1 first: its seconds are its own plus level 1's; the ensemble's
    # members share level 1's predictions (pipeline.ensemble.StackedPredictor), so it counts them once
    jobs, _ = sweep
    board = pd.read_csv(jobs[1] / "leaderboard.csv").set_index("model")
    seconds = 1 / board["predict_rows_per_s"]
    for suffix in ("", "_refit"):
        level_1 = seconds[f"lightgbm{suffix}"] + seconds[f"xgboost{suffix}"]
        used = [m for m, w in json.loads(board.loc[f"ensemble{suffix}", "params"]).items() if w > 0]
        own = {m: seconds[m] - level_1 for m in used}
        assert used and all(s > 0 for s in own.values()), suffix
        assert seconds[f"ensemble{suffix}"] == pytest.approx(level_1 + sum(own.values()), rel=1e-9), suffix


def test_every_level_shows_in_the_plan_and_the_timeline(sweep):
    jobs, _ = sweep
    tasks = json.loads((jobs[1] / "plan.json").read_text())["tasks"]
    timeline = json.loads((jobs[1] / "timeline.json").read_text())
    fits = [t for t in tasks if t["kind"] == "fit"]
    assert {t["task"] for t in timeline} == {t["id"] for t in fits}  # the graph that printed is what ran
    levels = [e["level"] for e in timeline]
    assert levels.count(2) == 2 * (3 + 1)  # each kind's level-2 folds and its level-2 refit
    assert levels.count(1) == 2 * (3 + 3 + 1)  # the trial's folds, the models without two folds, the refit
    # a level-2 fit also holds the level below's outputs: its estimate is its own, in the timeline and the table
    estimates = {(e["model"], e["level"]): e["estimate_ram_mb"] for e in timeline}
    memory = {r["model"]: r for r in json.loads((jobs[1] / "memory.json").read_text())}
    assert set(memory) == {"lightgbm", "xgboost", "lightgbm_l2", "xgboost_l2"}
    for kind in ("lightgbm", "xgboost"):
        assert estimates[(kind, 2)] > estimates[(kind, 1)]
        assert memory[f"{kind}_l2"]["estimate_ram_mb"] == estimates[(kind, 2)]
        assert memory[kind]["estimate_ram_mb"] == estimates[(kind, 1)]
        assert memory[f"{kind}_l2"]["fits"] == 3 + 1 and memory[kind]["fits"] == 3 + 3 + 1


def test_mlflow_has_every_levels_metrics(sweep):
    _, root = sweep
    _, runs = job_runs(root)
    stacked = next(r for r in runs if "stack_levels=1" in r.info.run_name)
    metrics = stacked.data.metrics
    for name in ("lightgbm_l2/val_roc_auc", "xgboost_l2/test_roc_auc", "lightgbm/val_roc_auc",
                 "xgboost_l2_refit/test_roc_auc", "ensemble/weight/lightgbm_l2", "lightgbm_l2/estimate_ram_mb"):
        assert name in metrics, name
    assert all(r.info.status == "FINISHED" for r in runs) and len(runs) == 2


def test_saved_stacked_predictors_predict_on_raw_input_what_the_run_scored(sweep, tmp_path):
    from pipeline.config import DataConf
    from pipeline.data import load
    from pipeline.metrics import METRICS

    jobs, root = sweep
    data = load(DataConf(max_rows=1500), ROOT)
    board = pd.read_csv(jobs[1] / "leaderboard.csv").set_index("model")
    raw = pd.read_parquet(ROOT / "pipeline" / "datasets" / "adult.parquet")
    raw = raw.sample(n=1500, random_state=0).reset_index(drop=True).iloc[data.test_idx].drop(columns=["income"])
    for name in ("lightgbm_l2", "ensemble", "xgboost_l2_refit", "ensemble_refit"):
        predictor = pickle.loads((jobs[1] / "predictors" / f"{name}.pkl").read_bytes())
        scored = METRICS["roc_auc"](data.y[data.test_idx], predictor.predict_proba(raw))
        assert scored == pytest.approx(board.loc[name, "test_roc_auc"], abs=1e-9), name

    raw.to_csv(tmp_path / "rows.csv", index=False)
    proc = run_cli_predict(root, f"source={jobs[1]}", "predictor=ensemble", "data=csv",
                           f"data.path={tmp_path / 'rows.csv'}", f"output={tmp_path / 'out.csv'}")
    assert proc.returncode == 0, proc.stderr
    out = pd.read_csv(tmp_path / "out.csv")
    expected = pickle.loads((jobs[1] / "predictors" / "ensemble.pkl").read_bytes()).predict_proba(raw)
    np.testing.assert_allclose(out[["proba_<=50K", "proba_>50K"]].to_numpy(), expected, rtol=1e-6, atol=1e-9)


def run_cli_predict(cwd: Path, *args):
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run([sys.executable, "-m", "pipeline.predict", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)
